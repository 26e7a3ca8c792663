"""Real servers for the remote-backend tests: HF `transformers serve`, a TCP proxy that injects
faults between client and server, and tiny HTTP servers that answer 401 or malformed JSON.

Nothing here mocks the client: every request crosses a real socket to a real server.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServeProcess:
    """A running `transformers serve` pinned to one checkpoint directory."""

    process: subprocess.Popen
    url: str  # the OpenAI base URL, ending in /v1
    model: str  # the model id the server answers to (the directory)
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_transformers_serve(directory: Path, log: Path, timeout: float = 300) -> ServeProcess:
    """Start `transformers serve DIRECTORY --device cpu` offline on a free port; wait until it lists
    the model. The command is the CLI's own, from the venv this test runs in."""
    port = free_port()
    cli = shutil.which("transformers", path=str(Path(sys.executable).parent)) or "transformers"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    handle = open(log, "wb")
    process = subprocess.Popen(
        [
            cli,
            "serve",
            str(directory),
            "--device",
            "cpu",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env=env,
    )
    handle.close()
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return ServeProcess(process, url, str(directory), log)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(
        f"transformers serve did not start in {timeout} s: {log.read_text()[-2000:]}"
    )


@dataclass
class FaultPlan:
    """Shares of POST requests the proxy disturbs (the rest pass through untouched)."""

    drop: float = 0.0  # close the connection without an answer (after the server answered)
    cut: float = 0.0  # send half of the server's answer, then close
    status_429: float = 0.0  # answer 429 with Retry-After: 0
    status_503: float = 0.0  # answer 503
    delay: float = 0.0  # hold the answer back for `delay_seconds`
    delay_seconds: float = 0.3
    seed: int = 0
    counts: dict = field(default_factory=dict)


class FaultProxy:
    """A real TCP proxy (asyncio, own thread) in front of `upstream` (host, port).

    Each client connection carries one HTTP request (the proxy answers with `Connection: close`).
    A POST is disturbed as `plan` says; GETs pass through.
    """

    def __init__(self, upstream: tuple[str, int], plan: FaultPlan):
        self.upstream = upstream
        self.plan = plan
        self.random = random.Random(plan.seed)
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def start():
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
            self.ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def close(self) -> None:
        async def stop():
            self.server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def _fault(self) -> str:
        plan, roll = self.plan, self.random.random()
        for name in ("drop", "cut", "status_429", "status_503", "delay"):
            share = getattr(plan, name)
            if roll < share:
                plan.counts[name] = plan.counts.get(name, 0) + 1
                return name
            roll -= share
        return "pass"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            lines = head.split(b"\r\n")
            kept = [lines[0]]
            for line in lines[1:]:
                name = line.split(b":", 1)[0].strip().lower()
                if name == b"content-length":
                    length = int(line.split(b":", 1)[1])
                if name not in (b"connection", b"keep-alive") and line:
                    kept.append(line)
            body = await reader.readexactly(length)
            fault = self._fault() if lines[0].startswith(b"POST") else "pass"
            if fault in ("status_429", "status_503"):
                code = (
                    b"429 Too Many Requests"
                    if fault == "status_429"
                    else b"503 Service Unavailable"
                )
                extra = b"Retry-After: 0\r\n" if fault == "status_429" else b""
                writer.write(
                    b"HTTP/1.1 "
                    + code
                    + b"\r\n"
                    + extra
                    + b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                await writer.drain()
                return
            request = b"\r\n".join(kept) + b"\r\nConnection: close\r\n\r\n" + body
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            up_writer.write(request)
            await up_writer.drain()
            answer = await up_reader.read()  # the server closes after one answer
            up_writer.close()
            if fault == "drop":
                return
            if fault == "cut":
                writer.write(answer[: len(answer) // 2])
                await writer.drain()
                return
            if fault == "delay":
                await asyncio.sleep(self.plan.delay_seconds)
            writer.write(answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class _FixedAnswer(BaseHTTPRequestHandler):
    status = 200
    body = b""
    headers_out: dict = {}
    seen: list  # (method, path, Authorization header) of every request, in arrival order

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append((self.command, self.path, self.headers.get("authorization")))
        self.send_response(self.status)
        for name, value in self.headers_out.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


class FixedAnswerServer:
    """A real HTTP server that answers every request with one status and body (401, garbage...)."""

    def __init__(self, status: int, body: bytes, headers: dict | None = None):
        self.seen: list = []
        fields = {"status": status, "body": body, "headers_out": headers or {}, "seen": self.seen}
        handler = type("Handler", (_FixedAnswer,), fields)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
