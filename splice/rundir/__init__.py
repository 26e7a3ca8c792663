"""The run directory, written once (README.md): layout.py (file names, the record key, the one
JSON-lines reader; standard library only), plan.py (units, keys and canonical order), manifest.py,
manifest_keys.py (what is compared), seal.py, store.py (the directory opened for work),
assemble.py, part_check.py and merge.py."""
