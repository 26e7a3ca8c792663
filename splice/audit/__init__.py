"""`nudge verify`: inputs, completeness, integrity and replay (splice/audit/README.md)."""
