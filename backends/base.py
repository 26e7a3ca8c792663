"""The backend seam: what the runner asks of whatever generates the tokens.

A backend offers the two calls of the in-process engine, with the same arguments and results:
`generate(prompts, params, shared)` (independent prompts, one `Completion` each) and
`fork_many(requests)` (one list of `Completion`s per `ForkRequest`, one per arm). A prompt's
`shared` start (`ForkRequest.shared`) is the engine's to compute once; a server, whose prefix
cache is its own, ignores it, as it does a request's `stem`. The runner,
the records and the statistics see nothing else, beyond what a backend states about itself:

- `continuation`: how faithfully the splice is continued, the best level this backend reaches
  (each `Completion` may state a lower one, see `continuation_of`):
  `token` -- the prompt went in as token ids and the generated ids came back as ids (the
  protocol's token-exact splice); `text` -- the prompt went in as text and/or the generated ids
  were recovered by re-encoding the returned text; `chat` -- the prompt went in as chat messages
  with a partial assistant turn, and the model's own template re-rendered it. The record format
  owns the list of levels and their order (splice/rundir/records.py, `CONTINUATION_LEVELS`).
- `describe()`: the facts for the manifest (backend, API, URL without credentials, the model id
  the server reports), or None for the in-process engine, whose checkpoint the manifest hashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from nudgeability.engine import Completion, Engine, ForkRequest, SamplingParams


@dataclass
class RemoteCompletion(Completion):
    """A `Completion` from a server: its continuation level and the prompt tokens the server said
    it served from its prefix cache (None when it does not say)."""

    continuation: str = "token"
    cached_tokens: int | None = None


class Backend(Protocol):
    continuation: str
    progress: bool  # show a bar per call
    retries: int  # requests retried so far (0 for the engine)
    context_limit: int | None  # the model's positions, where known here (a server enforces its own)

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams | list[SamplingParams],
        shared: int | list[int] = 0,
    ) -> list[Completion]: ...

    def fork_many(self, requests: list[ForkRequest]) -> list[list[Completion]]: ...

    def describe(self) -> dict | None: ...

    def close(self) -> None: ...


class EngineBackend:
    """The in-process `Engine` as a backend: token-exact by construction."""

    continuation = "token"
    retries = 0

    def __init__(self, engine: Engine):
        self.engine = engine

    @property
    def progress(self) -> bool:
        return self.engine.progress

    @progress.setter
    def progress(self, value: bool) -> None:
        self.engine.progress = value

    def generate(self, prompts, params, shared=0) -> list[Completion]:
        return self.engine.generate(prompts, params, shared=shared)

    def fork_many(self, requests: list[ForkRequest]) -> list[list[Completion]]:
        return self.engine.fork_many(requests)

    def describe(self) -> None:
        return None

    @property
    def context_limit(self) -> int | None:
        config = self.engine.model.config
        config = getattr(config, "text_config", None) or config
        return getattr(config, "max_position_embeddings", None)

    def close(self) -> None:
        pass


def continuation_of(completion: Completion) -> str:
    """The continuation level of one completion (the engine's are token-level)."""
    return getattr(completion, "continuation", "token")
