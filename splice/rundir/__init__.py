"""The run directory: its layout (layout.py: file names, the record key, the JSON-lines reader)."""
