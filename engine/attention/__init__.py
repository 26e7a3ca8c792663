"""Attention over the KV pool: the eager cascade (`shared_prefix_attention.py`), the CUDA static
decode over FlexAttention (`static_decode.py`) and its CUDA-graph replay (`graphed_decode.py`)."""
