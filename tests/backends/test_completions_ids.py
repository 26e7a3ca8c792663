"""Where a `/v1/completions` answer holds the generated ids, read from answers real servers gave.

The llama-server answer below was recorded from llama.cpp's `llama-server` (build b1-0c1e570,
the llama.cpp vendored in llama-cpp-python 0.3.36) serving the embedded SmolLM2 GGUF, for
`{"prompt": [1, 2, 3, 4], "max_tokens": 3, "temperature": 0, "return_tokens": true,
"logprobs": 1}`: on `/v1/completions` it returns the ids only inside `logprobs.content`.
The live tests (tests/backends/test_remote_llama_server.py) run when llama-server is installed.
"""

from __future__ import annotations

import json

from nudgeability.backends.completions import CompletionsBackend, _logprob_ids
from nudgeability.engine import SamplingParams

LLAMA_SERVER_ANSWER = json.loads(
    """{"choices":[{"text":"_tutorial","index":0,"logprobs":{"content":[
    {"id":79,"token":"_","bytes":[95],"logprob":-1.3989176750183105,
     "top_logprobs":[{"id":79,"token":"_","bytes":[95],"logprob":-1.3989176750183105}]},
    {"id":100,"token":"t","bytes":[116],"logprob":-4.309667587280273,
     "top_logprobs":[{"id":100,"token":"t","bytes":[116],"logprob":-4.309667587280273}]},
    {"id":43405,"token":"utorial","bytes":[117,116,111,114,105,97,108],
     "logprob":-1.6746454238891602,"top_logprobs":[{"id":43405,"token":"utorial",
     "bytes":[117,116,111,114,105,97,108],"logprob":-1.6746454238891602}]}]},
    "finish_reason":"length"}],"created":1796100413,"object":"text_completion",
    "usage":{"completion_tokens":3,"prompt_tokens":4,"total_tokens":7,
    "prompt_tokens_details":{"cached_tokens":3}}}"""
)

# OpenAI's own completions logprobs: token strings, no ids
OPENAI_LOGPROBS = {
    "tokens": ["_", "t", "utorial"],
    "token_logprobs": [-1.4, -4.3, -1.7],
    "top_logprobs": [{"_": -1.4}, {"t": -4.3}, {"utorial": -1.7}],
    "text_offset": [0, 1, 2],
}


def _token_mode_backend() -> CompletionsBackend:
    # the parsing alone: no server to ask for its model list, no tokenizer needed at token level
    backend = CompletionsBackend.__new__(CompletionsBackend)
    backend.mode, backend.continuation, backend.eos_ids = "token", "token", {2}
    return backend


def test_llama_server_ids_are_read_from_its_logprobs_at_token_level():
    params = SamplingParams(max_new_tokens=3)
    out = _token_mode_backend().completion(LLAMA_SERVER_ANSWER, [1, 2, 3, 4], params)
    assert out.token_ids == [79, 100, 43405]
    assert (out.continuation, out.finish_reason) == ("token", "length")
    assert (out.cached_tokens, out.prefill_tokens) == (3, 1)


def test_logprobs_without_ids_give_none():
    assert _logprob_ids(OPENAI_LOGPROBS) is None
    assert _logprob_ids(None) is None
    assert _logprob_ids({"content": [{"id": 5}, {"token": "x"}]}) is None
    assert _logprob_ids(LLAMA_SERVER_ANSWER["choices"][0]["logprobs"]) == [79, 100, 43405]
