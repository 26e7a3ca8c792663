"""Token mode and chat continuation against llama.cpp's `llama-server` serving the embedded
SmolLM2 GGUF. llama-server takes 15+ minutes to build, so these tests skip when it is not on PATH.

Token mode must stay token-exact: prompts go out as ids, the generated ids come back as ids, every
record says `token`, and a rerun gives the same bytes. Chat continuation must give every base and
every arm of a closed B, each saying `chat`.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import httpx
import pytest
from helpers.servers import free_port
from helpers.tiny_runs import nudge_run_args, read_records, run_nudge

from nudgeability.models.smollm2 import converted_dir, find_gguf

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("llama-server") is None, reason="llama-server is not installed"
    ),
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("llama") / "llama.log", "wb")
    process = subprocess.Popen(
        ["llama-server", "-m", str(find_gguf()), "--host", "127.0.0.1", "--port", str(port)]
        + ["-c", "8192", "-np", "4", "--seed", "0"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    model = None
    while model is None:
        assert process.poll() is None and time.monotonic() < deadline, "llama-server did not start"
        try:
            answer = httpx.get(f"{url}/models", timeout=2)
            if answer.status_code == 200:
                model = answer.json()["data"][0]["id"]
        except httpx.HTTPError:
            time.sleep(0.5)
    yield url, model
    process.terminate()
    process.wait(30)
    log.close()


def _run(url, model, out, *extra):
    server = {"backend": "openai", "base_url": url, "tokenizer": converted_dir(find_gguf())}
    run = {"family": "chatml", "n": 4, "conditions": "primary", "max_new_tokens": "24,12"}
    return run_nudge([*nudge_run_args(model, out, **server, **run), *extra])


def test_token_mode_is_token_exact_and_repeatable(llama, tmp_path):
    url, model = llama
    status, err = _run(
        url, model, tmp_path / "a", "--api", "completions", "--prompt-format", "token"
    )
    assert status == 0, err
    records = read_records(tmp_path / "a")
    assert records and all("continuation" not in r for r in records)  # token-level: the default
    status, err = _run(
        url, model, tmp_path / "b", "--api", "completions", "--prompt-format", "token"
    )
    assert status == 0, err
    assert (tmp_path / "a" / "records.jsonl").read_bytes() == (
        tmp_path / "b" / "records.jsonl"
    ).read_bytes()


def test_chat_continuation_gives_every_record_at_chat_level(llama, tmp_path):
    url, model = llama
    status, err = _run(url, model, tmp_path / "c", "--api", "chat")
    assert status == 0, err
    records = read_records(tmp_path / "c")
    bases = [r for r in records if r["condition"] in ("NT", "B")]
    closed = sum(r["condition"] == "B" and r["boundary"] is not None for r in bases)
    assert len(bases) == 8 and len(records) == 8 + 4 * closed
    assert all(r["continuation"] == "chat" for r in records)
