"""Attention over the KV pool: the eager cascade (`shared_prefix_attention.py`; on CPU its row
tokens through `cpu_decode_rows.py`, its fixed-shape calls through `cpu_attention.py` and `engine/invariant/cpu/attention.py`),
the CUDA static decode over FlexAttention (`static_decode.py`) and its CUDA-graph replay
(`graphed_decode.py`)."""
