"""Bad remote input gives one clear line naming the URL and the model, leaves no output directory,
and never shows the API key: an unreachable URL, a model the server does not serve, a server that
answers 401 and one that answers malformed JSON. Every server here is real (a socket answering
HTTP); the unknown-model case, which needs a real model server, is in
test_remote_transformers_serve.py.
"""

from __future__ import annotations

import pytest
from helpers.servers import FixedAnswerServer, free_port
from helpers.tiny_runs import nudge_run_args, run_nudge

from nudgeability.models.smollm2 import converted_dir, find_gguf

pytestmark = pytest.mark.slow

KEY = "sk-bad-input-test-abcdef0123456789"


@pytest.fixture(scope="module")
def tokenizer_dir():
    return converted_dir(find_gguf())


def _fails_cleanly(url: str, model: str, tokenizer, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("NUDGE_TEST_KEY", KEY)
    out = tmp_path / "out"
    server = {"backend": "openai", "base_url": url, "tokenizer": tokenizer}
    key = {"prompt_format": "text", "api_key_env": "NUDGE_TEST_KEY"}
    status, err = run_nudge(nudge_run_args(model, out, **server, **key, n=1, max_new_tokens=None))
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nudge run: error: "), err
    assert "Traceback" not in err and KEY not in err
    assert url in lines[0] and model in lines[0]
    assert not out.exists()
    return lines[0]


def test_unreachable_url(tokenizer_dir, tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    line = _fails_cleanly(url, "some-model", tokenizer_dir, tmp_path, monkeypatch)
    assert "cannot reach the server" in line


def test_401_names_the_key_variable_not_the_key(tokenizer_dir, tmp_path, monkeypatch):
    server = FixedAnswerServer(401, b'{"error": "invalid key ' + KEY.encode() + b'"}')
    try:
        line = _fails_cleanly(server.url, "some-model", tokenizer_dir, tmp_path, monkeypatch)
    finally:
        server.close()
    assert "HTTP 401" in line and "$NUDGE_TEST_KEY" in line


def test_malformed_json(tokenizer_dir, tmp_path, monkeypatch):
    server = FixedAnswerServer(200, b'{"object": "list", "data": [')
    try:
        line = _fails_cleanly(server.url, "some-model", tokenizer_dir, tmp_path, monkeypatch)
    finally:
        server.close()
    assert "malformed JSON" in line
