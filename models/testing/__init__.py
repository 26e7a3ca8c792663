"""Tiny stand-ins for real checkpoints, for the tests, the benchmarks and examples: random-weight
models of every architecture the engine supports (tiny.py), a tokenizer per family
(tiny_tokenizers.py), and the HF greedy reference every generation is checked against
(reference.py; `nudge bench --baseline` times it). Nothing else in the product imports them."""
