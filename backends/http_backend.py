"""What the HTTP backends share: the engine's two calls as concurrent requests, one per sequence.

`generate` sends one request per prompt. `fork_many` sends, for each prefix group, one arm first
and then the group's other arms concurrently: the first request leaves the shared prefix in the
server's prefix cache (vLLM's automatic prefix caching, SGLang's radix cache, llama-server's slot
cache), so every later arm of the group is served from it. Groups run concurrently with each
other, within the client's concurrency bound. Results go into fixed slots, in request order,
whatever order the answers arrive in and however often a request was retried.

A subclass says how one sequence becomes a request body (`body`) and how an answer becomes a
`RemoteCompletion` (`completion`).
"""

from __future__ import annotations

import asyncio

from nudgeability.backends.base import RemoteCompletion
from nudgeability.backends.http_client import HttpClient, RemoteError, Session
from nudgeability.backends.progress import RequestBar
from nudgeability.engine import ForkRequest, SamplingParams
from nudgeability.models.families import Family


def api_seed(params: SamplingParams) -> int:
    """The per-sequence seed sent to the server: the engine's stream seed of the sequence's
    (seed, problem, condition) key, folded into 31 bits (the widest every server accepts)."""
    return params.stream_seed() & 0x7FFFFFFF


class HttpBackend:
    """A backend whose sequences are requests to `path` (see the module docstring)."""

    api = ""  # "completions" | "chat"
    path = ""  # the endpoint under the base URL
    continuation = "token"

    def __init__(
        self,
        client: HttpClient,
        family: Family,
        *,
        served_model: str | None = None,
        progress: bool = False,
    ):
        self.client = client
        self.family = family
        self.progress = progress
        eos = family.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        client.check_model()
        # the model every answer must name: --model, or the snapshot --served-model names
        self.served_model = served_model or client.model

    def describe(self) -> dict:
        """The manifest's `backend` object: never a key, never a URL with credentials."""
        return {
            "backend": "openai",
            "api": self.api,
            "base_url": self.client.url,
            "model": self.client.model,
            "served_model": self.served_model,
            "continuation": self.continuation,
        }

    def close(self) -> None:
        pass

    context_limit = None  # the server refuses a prompt too long for it (HTTP 400, one line)

    @property
    def retries(self) -> int:
        return self.client.stats.retries

    # --- the engine's calls -----------------------------------------------------------------
    def generate(self, prompts, params, shared=0) -> list[RemoteCompletion]:
        # `shared` (the prompts' common start) is the engine's; a server keeps its own prefix cache
        per = params if isinstance(params, list) else [params] * len(prompts)
        groups = [[(list(prompt), sp)] for prompt, sp in zip(prompts, per)]
        return [arms[0] for arms in self._run(groups, "generate")]

    def fork_many(self, requests: list[ForkRequest]) -> list[list[RemoteCompletion]]:
        groups = []
        for request in requests:
            n = len(request.suffixes)
            per = request.params if isinstance(request.params, list) else [request.params] * n
            prefix = list(request.prefix_ids)
            groups.append([(prefix + list(s), sp) for s, sp in zip(request.suffixes, per)])
        return self._run(groups, "fork")

    # --- one call's requests ----------------------------------------------------------------
    def _run(self, groups, label: str) -> list[list[RemoteCompletion]]:
        total = sum(len(group) for group in groups)

        async def work(session: Session):
            bar = RequestBar(total, self.client.stats, self.progress, label)
            session.on_change = bar.refresh
            try:
                return await asyncio.gather(*(self._group(session, g, bar) for g in groups))
            finally:
                bar.close()

        return [list(group) for group in self.client.run(work)]

    async def _group(self, session: Session, members, bar: RequestBar) -> list[RemoteCompletion]:
        first = await self._one(session, *members[0], bar)  # leaves the prefix in the server cache
        rest = await asyncio.gather(*(self._one(session, ids, sp, bar) for ids, sp in members[1:]))
        return [first, *rest]

    async def _one(
        self, session: Session, ids: list[int], params: SamplingParams, bar: RequestBar
    ) -> RemoteCompletion:
        try:
            data = await session.post(self.path, self.body(ids, params))
        except RemoteError as exc:
            raise self.refused(exc) from None
        self.check_answered_model(data)
        out = self.completion(data, ids, params)
        bar.advance()
        return out

    def body(self, ids: list[int], params: SamplingParams) -> dict:
        raise NotImplementedError

    def refused(self, error: RemoteError) -> RemoteError:
        """The error to raise for a request the server refused (a subclass adds a hint)."""
        return error

    def completion(self, data: dict, ids: list[int], params: SamplingParams) -> RemoteCompletion:
        raise NotImplementedError

    # --- shared answer reading --------------------------------------------------------------
    def check_answered_model(self, data: dict) -> None:
        """Stop (one line) when an answer names another model than `served_model`: a server
        that lists one model and answers with another must not give a run that says it ran the
        first. An answer that names no model cannot be checked, and passes."""
        answered = data.get("model")
        if answered is None or answered == self.served_model:
            return
        if self.served_model == self.client.model:
            hint = (
                f"if {answered!r} is {self.client.model!r} under a dated snapshot name, pass "
                f"--served-model {answered}"
            )
        else:
            hint = (
                f"the run pinned the snapshot {self.served_model!r} (--served-model); for "
                "another snapshot start another run (another --out)"
            )
        raise self.client._error(
            self.path,
            f"the server answered as model {answered!r}, not {self.served_model!r}; {hint}",
        )

    def sampling_fields(self, params: SamplingParams) -> dict:
        fields = {
            "model": self.client.model,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.temperature > 0:
            fields["seed"] = api_seed(params)
        return fields

    def counted(
        self, data: dict, prompt_len: int, ids: list[int], finish: str, stop, level: str
    ) -> RemoteCompletion:
        """A completion with the server's token counts (prompt, cached) where it reports them."""
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        cached = cached_tokens(data, usage)
        prompt = usage.get("prompt_tokens")
        prompt = prompt if isinstance(prompt, int) else prompt_len
        return RemoteCompletion(
            token_ids=ids,
            finish_reason=finish,
            stop=stop,
            prefill_tokens=max(prompt - (cached or 0), 0),
            shared_prefill_tokens=cached or 0,
            decode_tokens=max(len(ids) - 1, 0),
            continuation=level,
            cached_tokens=cached,
        )


def cached_tokens(data: dict, usage: dict) -> int | None:
    """Prompt tokens served from the server's cache, in whichever field the server reports them."""
    details = usage.get("prompt_tokens_details")
    timings = data.get("timings")
    candidates = [
        details.get("cached_tokens") if isinstance(details, dict) else None,  # OpenAI, vLLM
        usage.get("prompt_cache_hit_tokens"),  # DeepSeek
        timings.get("cache_n") if isinstance(timings, dict) else None,  # llama-server
    ]
    return next((c for c in candidates if isinstance(c, int)), None)
