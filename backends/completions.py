"""The OpenAI `/v1/completions` backend, in token mode or text mode.

Token mode (vLLM, SGLang, llama.cpp's `llama-server`): the prompt goes out as a list of token ids
and the generated ids are read back where the server returns them (vLLM's `token_ids` with
`return_token_ids`; llama-server's `logprobs.content[i].id`, asked for with `logprobs: 1`, or
`tokens` on its own endpoint), so the splice stays token-exact. A server that returns only text
gets its ids recovered by re-encoding, and that completion is marked text-level.

Text mode (HF `transformers serve`, which takes only text): the prompt goes out as the family's
decoding of the ids, special tokens kept, and the generated ids are the family's encoding of the
returned text. The continuation is text-level: the server re-tokenises the prompt, and the ids at
the cut may merge differently from the token-exact splice. Forking and concurrency: see
`http_backend`.
"""

from __future__ import annotations

from nudgeability.backends.base import RemoteCompletion
from nudgeability.backends.http_backend import HttpBackend
from nudgeability.backends.http_client import HttpClient, RemoteError
from nudgeability.backends.names import PROMPT_FORMATS
from nudgeability.engine import SamplingParams
from nudgeability.models.families import Family

MODES = PROMPT_FORMATS


class CompletionsBackend(HttpBackend):
    """A backend over `/v1/completions` (see the module docstring)."""

    api = "completions"
    path = "completions"

    def __init__(
        self,
        client: HttpClient,
        family: Family,
        mode: str,
        *,
        served_model: str | None = None,
        progress: bool = False,
    ):
        if mode not in MODES:
            raise ValueError(f"--prompt-format {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.continuation = "token" if mode == "token" else "text"
        super().__init__(client, family, served_model=served_model, progress=progress)

    def describe(self) -> dict:
        return {**super().describe(), "prompt_format": self.mode}

    def body(self, ids: list[int], params: SamplingParams) -> dict:
        body = self.sampling_fields(params)
        body["prompt"] = ids if self.mode == "token" else self.family.decode(ids)
        stops = list(params.stop_strings)
        if self.mode == "token":
            # vLLM / SGLang / llama-server extensions; servers ignore the ones they do not know
            body.update(
                stop_token_ids=list(params.stop_token_ids),
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                return_token_ids=True,
                return_tokens=True,
                # llama-server's /v1/completions returns the generated ids only inside logprobs
                # (`logprobs.content[i].id`); one logprob per token is the cheapest way to get them
                logprobs=1,
            )
            if params.ignore_eos:
                body["ignore_eos"] = True
        else:  # a text-only server knows no ids: the family's stop tokens go as their text
            stops += [self.family.decode([t]) for t in params.stop_token_ids]
        if stops:
            body["stop"] = list(dict.fromkeys(stops))
        return body

    def refused(self, error: RemoteError) -> RemoteError:
        """A server that refuses token mode's fields (`transformers serve`: HTTP 422 "Unexpected
        fields in the request") gets the flag that works with it named in the same line."""
        said = error.detail.lower()
        if (
            self.mode == "token"
            and error.status in (400, 422)
            and any(word in said for word in ("unexpected field", "extra field", "unrecognized"))
        ):
            return RemoteError(
                f"{error}; this server does not take token mode's fields: pass "
                "--prompt-format text (it sends the rendered text; the records say text-level)",
                error.status,
                error.detail,
            )
        return error

    def completion(self, data: dict, ids: list[int], params: SamplingParams) -> RemoteCompletion:
        try:
            choice = data["choices"][0]
            text = choice["text"]
            if not isinstance(text, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise self.client._error(self.path, "malformed answer: no choices[0].text") from None
        stop_reason = choice.get("stop_reason")
        if isinstance(stop_reason, str) and not text.endswith(stop_reason):
            text += stop_reason  # the server dropped the stop string it matched
        returned = (
            choice.get("token_ids")  # vLLM, SGLang
            or choice.get("tokens")  # llama-server's own /completion
            or data.get("tokens")
            or _logprob_ids(choice.get("logprobs"))  # llama-server's /v1/completions
        )
        token_level = self.mode == "token" and _is_id_list(returned)
        generated = list(returned) if token_level else self.family.encode(text)
        finish, stop = self._finish(
            choice.get("finish_reason"), generated, text, params, token_level
        )
        level = "token" if token_level else "text"
        return self.counted(data, len(ids), generated, finish, stop, level)

    def _finish(self, reason, ids, text, params: SamplingParams, token_level: bool):
        """The engine's finish reason (eos, stop_token, stop_string, length) for the server's."""
        if reason == "length":
            return "length", None
        if reason not in ("stop", "eos", None):
            raise self.client._error(self.path, f"unexpected finish_reason {reason!r}")
        if token_level and ids:
            if ids[-1] in self.eos_ids:
                return "eos", ids[-1]
            if ids[-1] in params.stop_token_ids:
                return "stop_token", ids[-1]
        for stop in params.stop_strings:
            if text.endswith(stop):
                return "stop_string", stop
        return "eos", None  # the server ended at its own end token and did not return it


def _logprob_ids(logprobs) -> list[int] | None:
    """The generated ids in llama-server's logprobs (`content: [{"id": ..., ...}, ...]`), or None
    where the logprobs are OpenAI's (strings only) or absent."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
        return None
    ids = [c.get("id") for c in content]
    return ids if _is_id_list(ids) else None


def _is_id_list(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) for v in value)
