"""Tiny stand-ins for real checkpoints, for the tests, the benchmarks and examples: random-weight
models of every architecture the engine supports (tiny.py) and a tokenizer per family
(tiny_tokenizers.py). Nothing in the product imports them."""
