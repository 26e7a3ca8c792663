"""nudgeability.backends: what generates the tokens -- the in-process engine or a server over HTTP."""

from nudgeability.backends.base import (
    APIS,
    BACKENDS,
    CONTINUATION_LEVELS,
    Backend,
    EngineBackend,
    RemoteCompletion,
    continuation_of,
    least_faithful,
)
from nudgeability.backends.http_client import HttpClient, RemoteError, public_url

__all__ = [
    "APIS",
    "BACKENDS",
    "CONTINUATION_LEVELS",
    "Backend",
    "EngineBackend",
    "HttpClient",
    "RemoteCompletion",
    "RemoteError",
    "continuation_of",
    "least_faithful",
    "public_url",
]
