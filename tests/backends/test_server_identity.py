"""A server that lists one model but answers as another stops the run with one line; a provider's
dated snapshot name is accepted when `--served-model` names it, and the manifest records it; a
server that refuses token mode's fields gets the flag that works named (issue 25, cases 2 and 5).

The server is a real HTTP server bound to 127.0.0.1 in this test, answering as the test says:
`/v1/models` lists `listed`, every completion names `answered` as its model (or the server
refuses the fields as `transformers serve` does: FastAPI's 422 body, word for word).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge, save_tiny_checkpoint

# what transformers serve answers to vLLM's fields (transformers/cli/serving/utils.py, HTTPException)
REFUSAL = {
    "detail": "Unexpected fields in the request: {'include_stop_str_in_output', 'return_tokens', "
    "'return_token_ids', 'skip_special_tokens', 'stop_token_ids'}"
}


class FakeServer:
    """An OpenAI-compatible server on 127.0.0.1 that lists `listed` and answers as `answered`."""

    def __init__(self, listed: str, answered: str, refuse_token_fields: bool = False):
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": listed, "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests.append(body)
                if refuse_token_fields and "return_token_ids" in body:
                    return self._send(422, REFUSAL)
                ids = [70] * body["max_tokens"]  # a byte token of the tiny vocabulary
                choice = {"index": 0, "text": "x" * len(ids), "finish_reason": "length"}
                if "return_token_ids" in body:
                    choice["token_ids"] = ids
                usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}
                self._send(
                    200,
                    {
                        "object": "text_completion",
                        "model": answered,
                        "choices": [choice],
                        "usage": usage,
                    },
                )

            def _send(self, status, value):
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A tiny qwen3 checkpoint's directory: its tokenizer and config.json (the family's)."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("tokenizer") / "model", "qwen3")


def _run(server, model, tokenizer_dir, out, *extra) -> tuple[int, str]:
    flags = {"backend": "openai", "base_url": server.url, "tokenizer": tokenizer_dir}
    args = nudge_run_args(model, out, **flags, family="qwen3", n=1, max_new_tokens="4,2")
    return run_nudge([*args, *extra])


def test_an_answer_naming_another_model_stops_the_run_in_one_line(tokenizer_dir, tmp_path):
    server = FakeServer(listed="org/model-x", answered="org/model-y")
    try:
        status, err = _run(server, "org/model-x", tokenizer_dir, tmp_path / "out")
    finally:
        server.close()
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nudge run: error: "), err
    assert "answered as model 'org/model-y', not 'org/model-x'" in lines[0]
    assert "--served-model org/model-y" in lines[0] and server.url in lines[0]
    assert not (tmp_path / "out" / "records.jsonl").exists()


def test_a_dated_snapshot_named_by_served_model_is_accepted_and_recorded(tokenizer_dir, tmp_path):
    server = FakeServer(listed="gpt-4o", answered="gpt-4o-2024-08-06")
    out = tmp_path / "out"
    try:
        status, err = _run(
            server, "gpt-4o", tokenizer_dir, out, "--served-model", "gpt-4o-2024-08-06"
        )
        assert status == 0, err
        # another snapshot later, under the same pin: stopped, naming the pin
        pinned = tmp_path / "pinned"
        status, err = _run(
            server, "gpt-4o", tokenizer_dir, pinned, "--served-model", "gpt-4o-2024-11-20"
        )
    finally:
        server.close()
    backend = json.loads((out / "manifest.json").read_text())["backend"]
    assert (backend["model"], backend["served_model"]) == ("gpt-4o", "gpt-4o-2024-08-06")
    assert all(request["model"] == "gpt-4o" for request in server.requests)  # asked as --model
    assert status == 2 and "not 'gpt-4o-2024-11-20'" in err and "--served-model" in err, err


def test_the_served_model_flag_needs_a_server(tmp_path):
    status, err = run_nudge(nudge_run_args(None, tmp_path / "o", served_model="x"))
    assert (
        status == 2
        and err.strip() == "nudge run: error: --served-model: only with --backend openai"
    )


def test_a_server_refusing_token_fields_is_told_to_use_text_mode(tokenizer_dir, tmp_path):
    server = FakeServer(listed="m", answered="m", refuse_token_fields=True)
    try:
        status, err = _run(server, "m", tokenizer_dir, tmp_path / "token")
        assert status == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "HTTP 422" in lines[0], err
        assert "pass --prompt-format text" in lines[0]
        assert REFUSAL["detail"] in lines[0]  # what the server said, whole
        # the hint is right: the same run in text mode finishes
        status, err = _run(server, "m", tokenizer_dir, tmp_path / "text", "--prompt-format", "text")
    finally:
        server.close()
    assert status == 0, err
