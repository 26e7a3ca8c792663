"""Setting up a run on a server: `nudge run --backend openai ...` resolved into a checked backend.

`prepare` calls `open_remote` instead of loading a model when a `RemoteSpec` is given: the model's
tokenizer is loaded locally (it renders the prompts, cuts the reasoning and reads the actions as in
a local run), the server is asked whether it serves the model (a wrong URL, key or model name is one
line, before any output exists), and the manifest states what ran the run (splice/rundir/manifest.py `remote_manifest`):
`served_model` is the model id every answer named (`--model`, or the dated snapshot
`--served-model` gives); an answer naming another stops the run (backends/http_backend.py).

Manifest keys a remote run adds (a local run's manifest is unchanged):
  backend   {backend, api, prompt_format | chat_continue, model, served_model, continuation} --
            identity: a resume must use the same
  endpoint  {base_url} without credentials -- provenance: a resume against another URL is reported
  inputs.tokenizer replaces inputs.checkpoint (the weights are the server's, not hashable here)
and `experiment.continuation` when the backend is not token-exact, which `nudge stats` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nudgeability.backends.chat import CHAT_FAMILIES, ChatBackend, Conversation
from nudgeability.backends.completions import MODES, CompletionsBackend
from nudgeability.backends.http_backend import HttpBackend
from nudgeability.backends.http_client import HttpClient
from nudgeability.backends.names import APIS
from nudgeability.models.loader import ModelLoadError, resolve
from nudgeability.splice.run.config import ConfigError
from nudgeability.splice.rundir.manifest import Manifest


@dataclass(frozen=True)
class RemoteSpec:
    """The server a run is sent to, as `nudge run --backend openai` takes it."""

    base_url: str
    api: str = "completions"  # "completions" | "chat"
    prompt_format: str = "token"  # completions: "token" (ids) | "text"
    chat_continue: str = "continue_final_message"  # chat: "continue_final_message" | "prefix"
    tokenizer: str | None = None  # a directory or a cached repo id; None: the model name
    api_key_env: str | None = None  # the environment variable holding the key
    concurrency: int = 8
    request_timeout: float = 600.0
    retry_backoff: float = 0.5  # seconds; the base of the exponential backoff
    served_model: str | None = None  # the model id answers name, when not `model` (a snapshot)


def remote_spec(
    backend: str, base_url: str | None = None, served_model: str | None = None, **settings
) -> RemoteSpec | None:
    """The `RemoteSpec` of `--backend BACKEND` with the other fields in `settings`, or None for
    the in-process engine (`local`). The flags only a server takes are refused without one, and a
    server needs its URL: a ConfigError naming the flag."""
    if backend == "local":
        for flag, value in (("--base-url", base_url), ("--served-model", served_model)):
            if value is not None:
                raise ConfigError(f"{flag}: only with --backend openai")
        return None
    if not base_url:
        raise ConfigError("--backend openai: needs --base-url URL (e.g. http://localhost:8000/v1)")
    return RemoteSpec(base_url=base_url, served_model=served_model, **settings)


@dataclass
class RemoteTokenizer:
    tokenizer: object
    directory: Path
    files: list[Path]


def load_tokenizer(spec: str) -> RemoteTokenizer:
    """The tokenizer named by `spec` (a directory, the embedded model or a cached repo id)."""
    from transformers import AutoTokenizer

    path = Path(spec).expanduser()
    if path.is_dir():
        directory = path.resolve()
    else:
        try:
            directory = resolve(spec).directory
        except ModelLoadError as exc:
            raise ConfigError(f"--tokenizer {spec}: {exc}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"--tokenizer {spec}: cannot load a tokenizer from {directory} ({exc})"
        ) from None
    return RemoteTokenizer(tokenizer, directory, tokenizer_files(directory))


# the files of a tokenizer directory that decide how text becomes ids and back (hashed into the
# manifest's inputs.tokenizer, and re-hashed by `nudge verify`)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "chat_template.jinja",
    "config.json",
)


def tokenizer_files(directory: Path) -> list[Path]:
    """The files of `directory` a remote run hashes as its tokenizer (TOKENIZER_FILES)."""
    return sorted(p for p in Path(directory).iterdir() if p.name in TOKENIZER_FILES and p.is_file())


def check_spec(spec: RemoteSpec, family_name: str) -> None:
    """Refuse up front what cannot work; the message names the flag."""
    if spec.api not in APIS:
        raise ConfigError(f"--api {spec.api!r}: expected one of {', '.join(APIS)}")
    if spec.api == "completions" and spec.prompt_format not in MODES:
        raise ConfigError(
            f"--prompt-format {spec.prompt_format!r}: expected one of {', '.join(MODES)}"
        )
    if spec.api == "chat" and family_name not in CHAT_FAMILIES:
        raise ConfigError(
            f"--api chat: the {family_name} family's tool-call format is not written back from chat "
            f"answers; chat continuation supports the families {', '.join(CHAT_FAMILIES)}"
        )
    if spec.retry_backoff <= 0:
        raise ConfigError(f"--retry-backoff {spec.retry_backoff}: must be > 0")


def open_remote(spec: RemoteSpec, model: str, family) -> HttpBackend:
    """A checked backend for `model` on the server (RemoteError, one line, if it is not usable)."""
    check_spec(spec, family.name)
    client = HttpClient(
        spec.base_url,
        model,
        api_key_env=spec.api_key_env,
        concurrency=spec.concurrency,
        timeout=spec.request_timeout,
        backoff=spec.retry_backoff,
    )
    if spec.api == "chat":
        return ChatBackend(
            client, family, continue_flag=spec.chat_continue, served_model=spec.served_model
        )
    return CompletionsBackend(client, family, spec.prompt_format, served_model=spec.served_model)


def register_conversations(backend, task, problems, prompts) -> None:
    """Tell a chat backend which messages and tools each rendered prompt came from."""
    if not isinstance(backend, ChatBackend):
        return
    for problem, prompt in zip(problems, prompts):
        backend.register(prompt.unaided, Conversation(tuple(task.unaided_messages(problem)), None))
        messages, tools = task.with_tool(problem)
        backend.register(prompt.with_tool, Conversation(tuple(messages), tuple(tools)))
        if prompt.oracle is not None:
            messages, tools = task.oracle(problem)
            backend.register(prompt.oracle, Conversation(tuple(messages), tuple(tools)))


def is_remote(manifest: Manifest) -> bool:
    """Whether a run's manifest is a remote run's (it has the `backend` key only they add)."""
    return manifest.backend is not None


def remote_spec_of(
    manifest: Manifest,
    *,
    base_url: str | None = None,
    tokenizer: str | None = None,
    api_key_env: str | None = None,
) -> RemoteSpec:
    """The server a remote run was sent to, read back from its manifest (for a replay by
    `nudge verify`): its endpoint, API, prompt format or chat flag and tokenizer directory;
    `base_url` and `tokenizer` give them anew, and the key comes only from `api_key_env`, as in
    `nudge run` (it is never in the manifest). KeyError naming the missing key."""
    backend = manifest.backend
    if backend is None:
        raise KeyError("backend")
    served = backend.get("served_model")
    return RemoteSpec(
        base_url=base_url or (manifest.endpoint or {})["base_url"],
        api=backend["api"],
        prompt_format=backend.get("prompt_format", RemoteSpec.prompt_format),
        chat_continue=backend.get("chat_continue", RemoteSpec.chat_continue),
        tokenizer=tokenizer or manifest.inputs["tokenizer"]["directory"],
        api_key_env=api_key_env,
        served_model=served if served != backend.get("model") else None,
    )
