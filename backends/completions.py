"""The OpenAI `/v1/completions` backend, in token mode or text mode.

Token mode (vLLM, SGLang, llama.cpp's `llama-server`): the prompt goes out as a list of token ids
and the generated ids are read back where the server returns them (vLLM's `token_ids` with
`return_token_ids`, llama-server's `tokens` with `return_tokens`), so the splice stays
token-exact. A server that returns only text gets its ids recovered by re-encoding, and that
completion is marked text-level.

Text mode (HF `transformers serve`, which takes only text): the prompt goes out as the family's
decoding of the ids, special tokens kept, and the generated ids are the family's encoding of the
returned text. The continuation is text-level: the server re-tokenises the prompt, and the ids at
the cut may merge differently from the token-exact splice.

Forking sends, for each prefix group, one arm first and then the other arms concurrently, so the
server's prefix cache (vLLM's automatic prefix caching, llama-server's slot cache) serves the
shared prefix to every later arm. Groups run concurrently with each other, within the client's
concurrency bound. The prompt tokens the server reports as cached are kept on each completion.
"""

from __future__ import annotations

import asyncio

from nudgeability.backends.base import RemoteCompletion
from nudgeability.backends.http_client import HttpClient, RemoteError, Session
from nudgeability.backends.progress import RequestBar
from nudgeability.engine import ForkRequest, SamplingParams
from nudgeability.models.families import Family

MODES = ("token", "text")


def api_seed(params: SamplingParams) -> int:
    """The per-sequence seed sent to the server: the engine's stream seed of the sequence's
    (seed, problem, condition) key, folded into 31 bits (the widest every server accepts)."""
    return params.stream_seed() & 0x7FFFFFFF


class CompletionsBackend:
    """A backend over `/v1/completions` (see the module docstring)."""

    api = "completions"

    def __init__(self, client: HttpClient, family: Family, mode: str, *, progress: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        self.client = client
        self.family = family
        self.mode = mode
        self.continuation = "token" if mode == "token" else "text"
        self.progress = progress
        eos = family.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        self.served_model = client.check_model()

    def describe(self) -> dict:
        return {
            "backend": "openai",
            "api": self.api,
            "mode": self.mode,
            "base_url": self.client.url,
            "model": self.client.model,
            "served_model": self.served_model,
            "continuation": self.continuation,
        }

    def close(self) -> None:
        pass

    # --- the backend calls ------------------------------------------------------------------
    def generate(self, prompts, params) -> list[RemoteCompletion]:
        per = params if isinstance(params, list) else [params] * len(prompts)
        groups = [[(list(prompt), sp)] for prompt, sp in zip(prompts, per)]
        return [arms[0] for arms in self._run(groups, "generate")]

    def fork_many(self, requests: list[ForkRequest]) -> list[list[RemoteCompletion]]:
        groups = []
        for request in requests:
            n = len(request.suffixes)
            per = request.params if isinstance(request.params, list) else [request.params] * n
            groups.append(
                [(list(request.prefix_ids) + list(s), sp) for s, sp in zip(request.suffixes, per)]
            )
        return self._run(groups, "fork")

    def _run(self, groups, label: str) -> list[list[RemoteCompletion]]:
        total = sum(len(group) for group in groups)

        async def work(session: Session):
            bar = RequestBar(total, self.client.stats, self.progress, label)
            session.on_change = bar.refresh
            try:
                return await asyncio.gather(*(self._group(session, g, bar) for g in groups))
            finally:
                bar.close()

        return self.client.run(work)

    async def _group(self, session: Session, members, bar: RequestBar) -> list[RemoteCompletion]:
        first = await self._one(session, *members[0], bar)  # fills the server's prefix cache
        rest = await asyncio.gather(*(self._one(session, ids, sp, bar) for ids, sp in members[1:]))
        return [first, *rest]

    async def _one(
        self, session: Session, ids: list[int], params: SamplingParams, bar: RequestBar
    ) -> RemoteCompletion:
        data = await session.post("completions", self._body(ids, params))
        out = self._completion(data, len(ids), params)
        bar.advance()
        return out

    # --- request and answer -----------------------------------------------------------------
    def _body(self, ids: list[int], params: SamplingParams) -> dict:
        body = {
            "model": self.client.model,
            "prompt": ids if self.mode == "token" else self.family.decode(ids),
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.temperature > 0:
            body["seed"] = api_seed(params)
        stops = list(params.stop_strings)
        if self.mode == "token":
            # vLLM / SGLang / llama-server extensions; servers ignore the ones they do not know
            body.update(
                stop_token_ids=list(params.stop_token_ids),
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                return_token_ids=True,
                return_tokens=True,
            )
            if params.ignore_eos:
                body["ignore_eos"] = True
        else:  # a text-only server knows no ids: its stop tokens go as their text
            stops += [self.family.decode([t]) for t in params.stop_token_ids]
        if stops:
            body["stop"] = list(dict.fromkeys(stops))
        return body

    def _completion(self, data: dict, prompt_len: int, params: SamplingParams) -> RemoteCompletion:
        client = self.client
        try:
            choice = data["choices"][0]
            text = choice["text"]
            if not isinstance(text, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise client._error("completions", "malformed answer: no choices[0].text") from None
        stop_reason = choice.get("stop_reason")
        if isinstance(stop_reason, str) and not text.endswith(stop_reason):
            text += stop_reason  # the server dropped the stop string it matched
        ids = choice.get("token_ids") or choice.get("tokens") or data.get("tokens")
        token_level = self.mode == "token" and _is_id_list(ids)
        ids = list(ids) if token_level else self.family.encode(text)
        finish, stop = self._finish(choice.get("finish_reason"), ids, text, params, token_level)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        cached = _cached_tokens(data, usage)
        prompt_tokens = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else prompt_len
        return RemoteCompletion(
            token_ids=ids,
            finish_reason=finish,
            stop=stop,
            prefill_tokens=prompt_tokens - (cached or 0),
            shared_prefill_tokens=cached or 0,
            decode_tokens=max(len(ids) - 1, 0),
            continuation="token" if token_level else "text",
            cached_tokens=cached,
        )

    def _finish(self, reason, ids, text, params: SamplingParams, token_level: bool):
        """The engine's finish reason for a server's 'stop' / 'length' (see engine FINISH_REASONS)."""
        if reason == "length":
            return "length", None
        if reason not in ("stop", "eos", None):
            raise self.client._error("completions", f"unexpected finish_reason {reason!r}")
        if token_level and ids:
            if ids[-1] in self.eos_ids:
                return "eos", ids[-1]
            if ids[-1] in params.stop_token_ids:
                return "stop_token", ids[-1]
        for stop in params.stop_strings:
            if text.endswith(stop):
                return "stop_string", stop
        return "eos", None  # the server ended at its own end token and did not return it


def _is_id_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) for v in value)


def _cached_tokens(data: dict, usage: dict) -> int | None:
    """Prompt tokens served from the server's cache, in whichever field the server reports them."""
    details = usage.get("prompt_tokens_details")
    candidates = [
        details.get("cached_tokens") if isinstance(details, dict) else None,  # OpenAI, vLLM
        usage.get("prompt_cache_hit_tokens"),  # DeepSeek
        (data.get("timings") or {}).get("cache_n") if isinstance(data.get("timings"), dict) else None,  # llama-server
    ]
    return next((c for c in candidates if isinstance(c, int)), None)


__all__ = ["CompletionsBackend", "RemoteError", "api_seed"]
