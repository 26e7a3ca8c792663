"""Checkpoints, the formats the families follow, quantised compute (models/README.md)."""
