"""The HTTP client against tiny real servers: what it retries and how often, how long it waits,
what it writes down of a URL, and that the key goes out as a header but never into a message."""

from __future__ import annotations

import email.utils
import time

import pytest
from helpers.servers import FixedAnswerServer

from nudgeability.backends.http_client import HttpClient, RemoteError, public_url


def test_public_url_drops_credentials_query_and_fragment():
    assert public_url("https://user:pw@api.example.com:8443/v1/?key=abc#x") == (
        "https://api.example.com:8443/v1"
    )
    assert public_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"


def test_retry_after_is_honoured_and_jitter_stays_under_the_exponential_cap():
    client = HttpClient("http://127.0.0.1:1/v1", "m", backoff=0.5, max_backoff=30)
    assert client.retry_delay(0, "7") == 7.0
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 18 <= client.retry_delay(0, when) <= 20
    for attempt in range(8):
        delays = [client.retry_delay(attempt, None) for _ in range(200)]
        assert 0 <= min(delays) and max(delays) <= min(30, 0.5 * 2**attempt)


def test_503_is_retried_exactly_up_to_the_attempt_budget_then_one_line(monkeypatch):
    monkeypatch.setenv("K_ENV", "sk-secret-value")
    server = FixedAnswerServer(503, b"busy sk-secret-value", {"Retry-After": "0"})
    try:
        client = HttpClient(server.url, "m", api_key_env="K_ENV", max_attempts=4)
        with pytest.raises(RemoteError) as caught:
            client.run(lambda session: session.post("completions", {"prompt": "x"}))
    finally:
        server.close()
    message = str(caught.value)
    assert len(server.seen) == 4 and client.stats.retries == 3
    assert all(auth == "Bearer sk-secret-value" for _, _, auth in server.seen)
    assert "gave up after 4 attempts" in message and "HTTP 503" in message
    assert "sk-secret-value" not in message and "\n" not in message


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_not_retried(status):
    server = FixedAnswerServer(status, b'{"error": "no"}')
    try:
        client = HttpClient(server.url, "my-model", max_attempts=4)
        with pytest.raises(RemoteError) as caught:
            client.run(lambda session: session.post("completions", {}))
    finally:
        server.close()
    assert len(server.seen) == 1
    assert f"HTTP {status}" in str(caught.value) and "'my-model'" in str(caught.value)
    assert server.url in str(caught.value)
