"""HTTP to an OpenAI-compatible server: bounded concurrency, retries, one-line errors, no secrets.

    client = HttpClient("http://localhost:8000/v1", model="Qwen/Qwen3-8B", api_key_env="KEY")
    served = client.check_model()            # GET /models: reachable, authorised, model served
    results = client.run(lambda session: session.post("completions", body))

Every request goes through `Session.post`, which holds one of `concurrency` slots while it is in
flight and retries 429, 5xx, timeouts and dropped connections with exponential backoff and full
jitter (honouring `Retry-After`). A retry resends the same body to fill the same result slot, so a
retried request can neither duplicate nor lose a record. 401, 403, 404, an unknown model and
malformed JSON are not retried: they raise `RemoteError`, one line naming the URL and the model.

The API key is read from the environment variable the user names and sent only as a header. It
never enters an error message (any echo of it is masked) and the URL kept for the manifest has
no user-info, query or fragment.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
T = TypeVar("T")


class RemoteError(OSError):
    """A server problem the user must fix (or a retry budget spent); the message is one line.
    `status` is the HTTP status of a refused request (None for other problems), `detail` what
    the server said."""

    def __init__(self, message: str, status: int | None = None, detail: str = ""):
        super().__init__(message)
        self.status, self.detail = status, detail


DETAIL_CHARS = 300  # of a server's error body, in a message (the rest is counted, not cut silently)


def shortened(text: str, limit: int = DETAIL_CHARS) -> str:
    """`text` whole when it is short, else its first words up to `limit` characters and how many
    characters were left out (never a phrase cut without saying so)."""
    if len(text) <= limit:
        return text
    head = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return f"{head} … ({len(text) - len(head)} more characters)"


def public_url(url: str) -> str:
    """`url` without user-info, query or fragment (what may be written down)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


@dataclass
class ClientStats:
    """What the client did: requests, retries, and how long some request was in flight."""

    requests: int = 0
    retries: int = 0
    in_flight: int = 0
    busy_seconds: float = 0.0  # wall time with at least one request in flight
    _busy_since: float | None = None

    def started(self) -> None:
        if self.in_flight == 0:
            self._busy_since = time.perf_counter()
        self.in_flight += 1

    def finished(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self._busy_since is not None:
            self.busy_seconds += time.perf_counter() - self._busy_since
            self._busy_since = None


class HttpClient:
    """One server and model; see the module docstring. `timeout` bounds one request (seconds)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        concurrency: int = 8,
        timeout: float = 600.0,
        max_attempts: int = 8,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(
                f"--base-url {public_url(base_url)!r}: expected http(s)://HOST[:PORT]/v1"
            )
        if concurrency < 1:
            raise RemoteError(f"--concurrency {concurrency}: must be >= 1")
        if timeout <= 0:
            raise RemoteError(f"--request-timeout {timeout}: must be > 0")
        self.url = public_url(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self._key = None
        if api_key_env is not None:
            self._key = os.environ.get(api_key_env)
            if not self._key:
                raise RemoteError(
                    f"--api-key-env {api_key_env}: the environment variable is not set or empty"
                )
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.stats = ClientStats()

    # --- errors -----------------------------------------------------------------------------
    def mask(self, text: str) -> str:
        """`text` on one line, with the API key (if a server echoed it) masked."""
        text = " ".join(str(text).split())
        return text.replace(self._key, "***") if self._key else text

    def _error(
        self, path: str, what: str, status: int | None = None, detail: str = ""
    ) -> RemoteError:
        message = self.mask(f"{self.url}/{path}: model {self.model!r}: {what}")
        return RemoteError(message, status, detail)

    def _status_error(self, path: str, response: httpx.Response) -> RemoteError:
        status = response.status_code
        detail = shortened(self.mask(response.text))
        if status in (401, 403):
            hint = (
                f"check the key in ${self.api_key_env}"
                if self.api_key_env
                else "the server wants a key: pass --api-key-env VAR"
            )
            return self._error(
                path, f"HTTP {status} ({'unauthorized' if status == 401 else 'forbidden'}); {hint}"
            )
        if status == 404:
            return self._error(
                path,
                "HTTP 404 not found; check --base-url (usually ending in /v1) and --model"
                + (f" ({detail})" if detail else ""),
            )
        return self._error(
            path,
            f"HTTP {status}: {detail or response.reason_phrase}",
            status,
            self.mask(response.text),
        )

    # --- the model check (before any output exists) ----------------------------------------
    def check_model(self) -> str:
        """GET /models: the id the server reports for `model`; RemoteError if it is not served.

        Not retried on a refused connection: a wrong URL should fail at once.
        """
        try:
            with httpx.Client(timeout=min(self.timeout, 60.0)) as http:
                response = http.get(f"{self.url}/models", headers=self._headers())
        except httpx.HTTPError as exc:
            raise self._error(
                "models", f"cannot reach the server ({type(exc).__name__}: {exc})"
            ) from None
        if response.status_code != 200:
            raise self._status_error("models", response)
        data = self._json("models", response)
        try:
            ids = [entry["id"] for entry in data["data"]]
        except (KeyError, TypeError):
            raise self._error("models", "malformed answer: no data[].id list") from None
        if self.model not in ids:
            raise self._error(
                "models",
                f"unknown model; the server serves: {', '.join(map(str, ids)) or 'nothing'}",
            )
        return self.model

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"} if self._key else {}

    def _json(self, path: str, response: httpx.Response) -> dict:
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise self._error(path, "the server answered malformed JSON") from None
        if not isinstance(data, dict):
            raise self._error(path, "the server answered JSON that is not an object")
        return data

    # --- running requests ------------------------------------------------------------------
    def run(self, work: Callable[[Session], Awaitable[T]]) -> T:
        """Run `work(session)` to completion on a fresh event loop (one per backend call)."""

        async def main() -> T:
            limits = httpx.Limits(
                max_connections=self.concurrency, max_keepalive_connections=self.concurrency
            )
            async with httpx.AsyncClient(
                timeout=self.timeout, limits=limits, headers=self._headers()
            ) as http:
                return await work(Session(self, http))

        return asyncio.run(main())

    def retry_delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before attempt `attempt + 1`: Retry-After if given, else full jitter."""
        if retry_after:
            seconds = _retry_after_seconds(retry_after)
            if seconds is not None:
                return min(seconds, 10 * self.max_backoff)
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


class Session:
    """The requests of one backend call, sharing a connection pool and the concurrency slots."""

    def __init__(self, client: HttpClient, http: httpx.AsyncClient):
        self.client = client
        self.http = http
        self.slots = asyncio.Semaphore(client.concurrency)
        self.on_change: Callable[[], None] = lambda: None

    async def post(self, path: str, body: dict) -> dict:
        """POST `body` as JSON; the answer's JSON object, after retries (see the module docstring)."""
        client = self.client
        last = ""
        for attempt in range(client.max_attempts):
            retry_after = None
            async with self.slots:
                client.stats.started()
                client.stats.requests += 1
                self.on_change()
                try:
                    response = await self.http.post(f"{client.url}/{path}", json=body)
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    response = None
                finally:
                    client.stats.finished()
            if response is not None:
                if response.status_code == 200:
                    return client._json(path, response)
                if response.status_code not in RETRY_STATUSES:
                    raise client._status_error(path, response)
                last = f"HTTP {response.status_code}"
                retry_after = response.headers.get("retry-after")
            if attempt + 1 < client.max_attempts:
                client.stats.retries += 1
                self.on_change()
                await asyncio.sleep(client.retry_delay(attempt, retry_after))
        raise client._error(
            path,
            f"gave up after {client.max_attempts} attempts (last: {client.mask(last)}); run the same command again to resume",
        )


def _retry_after_seconds(value: str) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
