"""OpenAI-compatible servers as the benchmarks start and drive them: a free port, a server started
and waited for (`start`, or `serving` for a block that stops it after), llama-server's command
line for a fork (`llama_server_command`), and one splice fork timed through the remote backend
(`remote_fork`: wall time, tokens, cached prompt tokens, the client's own overhead, the
continuation level)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from nudgeability.backends.completions import CompletionsBackend
from nudgeability.backends.http_client import HttpClient
from nudgeability.engine import ForkRequest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(command: list[str], port: int, log: Path) -> tuple[subprocess.Popen, str]:
    """Start a server; wait (up to 5 min) until GET /v1/models answers; (process, model id)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen(command, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"{command[0]} exited: {log.read_text()[-2000:]}")
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            if answer.status_code == 200:
                return process, answer.json()["data"][0]["id"]
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    sys.exit(f"{command[0]} did not start: {log.read_text()[-2000:]}")


@contextmanager
def serving(command: list[str], port: int, log: Path) -> Iterator[str]:
    """The server `start`ed for the block (its model id); terminated when the block ends."""
    process, model = start(command, port, log)
    try:
        yield model
    finally:
        process.terminate()
        process.wait(30)


def llama_server_command(gguf: Path, port: int, arm_tokens: int, slots: int) -> list[str]:
    """llama-server on `gguf` with `slots` parallel slots: it splits -c evenly among them, so each
    is given `arm_tokens` (a whole arm: prefix, suffix and new tokens)."""
    command = ["llama-server", "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    return command + ["-c", str(slots * arm_tokens), "-np", str(slots)]


def remote_fork(port, model, family, mode, workload, params, concurrency) -> dict:
    client = HttpClient(f"http://127.0.0.1:{port}/v1", model, concurrency=concurrency)
    backend = CompletionsBackend(client, family, mode)
    request = ForkRequest(workload.prefix, workload.suffixes, params)
    backend.fork_many([request])  # warm-up: model load, first-request costs, prefix cache
    busy_before = client.stats.busy_seconds
    start_time = time.perf_counter()
    arms = backend.fork_many([request])[0]
    wall = time.perf_counter() - start_time
    busy = client.stats.busy_seconds - busy_before
    cached = [a.cached_tokens for a in arms]
    return {
        "wall": wall,
        "tokens": sum(len(a.token_ids) for a in arms),
        "cached": None if all(c is None for c in cached) else sum(c or 0 for c in cached),
        "overhead": max(wall - busy, 0.0) / wall,
        "level": arms[0].continuation,
    }
