"""Batch invariance: logits that depend on no batch, schedule or core count (engine/README.md)."""
