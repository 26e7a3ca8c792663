"""Model loading (`loader.py`, with the checks of a checkpoint directory made first in
`preflight.py`), the embedded SmolLM2 (`smollm2.py`), quantised checkpoints (`quant/`, supported
methods in `quant/loader.py` `SCHEMES`), chat/think/tool formats (`families/`), tiny test models.

Two small modules every stage uses live here because `models` is the lowest layer that writes
files and shows progress, and they need only the standard library (and tqdm), so `engine`,
`splice` and `stats` import them without data flowing backwards: `atomic.py` (the one
write-to-a-temporary-then-rename helper) and `progress.py` (tqdm on a terminal, plain lines in a
log)."""
