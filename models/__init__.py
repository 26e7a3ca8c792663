"""Model loading (`loader.py`), the embedded SmolLM2 (`smollm2.py`), quantised checkpoints
(`quant/`, supported methods in `quant/loader.py` `SCHEMES`), chat/think/tool formats
(`families/`), tiny test models, and `atomic.py`: the one write-to-a-temporary-then-rename helper
that every stage uses (standard library only, so `splice` and `stats` import it without data
flowing backwards)."""
