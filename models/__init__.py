"""Model loading (`loader.py`, with the checks of a checkpoint directory made first in
`preflight.py`), the embedded SmolLM2 (`smollm2.py`), quantised checkpoints (`quant/`, supported
methods in `quant/loader.py` `SCHEMES`), chat/think/tool formats (`families/`), and tiny test
models (`testing/`).

`models` imports only `util/` (atomic writes, the cache root): neither `engine` nor `splice`."""
