"""The KV pool in blocks (`kv_pool.py`) and the HF `Cache` that writes into it (`kv_cache.py`)."""
