"""nudgeability.backends: what generates the tokens -- the in-process engine or a server over HTTP.

base.py          the seam (`Backend`), `EngineBackend`, `RemoteCompletion`, continuation levels
http_client.py   HTTP with bounded concurrency, retries, one-line errors and no secrets
http_backend.py  the engine's calls as concurrent requests; forking for the server's prefix cache
completions.py   /v1/completions in token or text mode
chat.py          /v1/chat/completions continuing a partial assistant turn
names.py         the user-facing names (no imports: the CLI offers them without loading torch)
"""
