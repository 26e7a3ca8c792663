"""Model loading (`loader.py`, with the checks of a checkpoint directory made first in
`preflight.py`), the embedded SmolLM2 (`smollm2.py`), quantised checkpoints (`quant/`, supported
methods in `quant/loader.py` `SCHEMES`), chat/think/tool formats (`families/`), and tiny test
models (`testing/`).

`atomic.py`, the one write-to-a-temporary-then-rename helper, lives here because `models` is the
lowest layer that writes files, and it needs only the standard library, so `splice` and `stats`
import it without data flowing backwards. `models` imports neither `engine` nor `splice`."""
