"""The fully resolved configuration of one `nudge run`, and its canonical JSON form.

A `RunConfig` holds every setting that can change a record: the model and its family, the task,
data file and problem draw, the decoding, the conditions, the token budgets, the sentences file,
the dtype and device, and the batching (chunk size and KV budget: batch composition can change
floating-point results in the last bits). Paths are absolute. Its canonical JSON (sorted keys)
is stored in the run's manifest; a later run against the same `--out` must resolve to the same
config, and `diff_configs` names every key that differs.

This module also parses the compact command-line values (`--seeds 0,1,2`, `--shard 2/4`,
`--max-new-tokens 512,256`), raising `ConfigError` (a ValueError) that names the flag.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

DECODINGS = ("greedy", "sampled")
DTYPES = ("float32", "bfloat16", "float16")
SAMPLED_TEMPERATURE = 1.0
SAMPLED_TOP_P = 0.95
DEFAULT_SAMPLED_SEEDS = (0, 1, 2)
# the defaults run the embedded demo (SmolLM2 on the MuSiQue sample) in a few minutes on a CPU
DEFAULT_N = 3
DEFAULT_MAX_NEW_TOKENS = (256, 128)
DEFAULT_CHUNK_SIZE = 32


class ConfigError(ValueError):
    """A command-line value or config that cannot be used; the message names the flag or key."""


class ConfigChangedError(ConfigError):
    """An existing output directory was made by a different config; the message lists the keys."""


@dataclass(frozen=True)
class RunConfig:
    """Every setting that decides the records of a run (see the module docstring)."""

    model: str  # the model spec: 'smollm2', an absolute checkpoint directory or .gguf, or a repo id
    model_label: str  # the experiment's model name in the manifest (stats joins runs by it)
    family: str  # the resolved model family (detected or given)
    dtype: str
    device: str
    task: str
    data: str  # absolute path of the data file
    n: int  # problems drawn
    sample_seed: int  # the seed of the problem draw
    decoding: str  # "greedy" | "sampled"
    temperature: float
    top_p: float
    seeds: tuple[int, ...]  # decoding seeds; (0,) for greedy
    conditions: tuple[str, ...]  # condition codes, canonical order
    max_new_tokens: int  # budget of the bases (NT, B, oracle_B)
    max_new_tokens_arm: int  # budget of each arm's continuation after the splice
    sentences: str  # absolute path of the sentences file
    chunk_size: int  # problems per unit of work (and per base batch)
    max_batch_tokens: int | None  # the engine's KV budget per batch; None = one batch per unit
    shard: tuple[int, int] | None  # (k, n): this run computes chunk i when i % n == k - 1
    consistency_samples: int = 0  # K unaided samples per problem for self-consistency (0: none)
    signals: bool = True  # B's token uncertainty and hidden state at the cut (splice/signals.py)

    def to_dict(self) -> dict:
        """The config as plain JSON values (tuples become lists)."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
        return data

    def canonical_json(self) -> str:
        """Sorted-key JSON: equal configs give equal strings."""
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    @property
    def experiment(self) -> dict:
        """The `experiment` object of the manifest, as `nudgeability.stats` reads it."""
        return {
            "model": self.model_label,
            "task": self.task,
            "decoding": self.decoding,
            "seeds": list(self.seeds),
        }


def diff_configs(
    old: object, new: object, labels: tuple[str, str] = ("stored", "now"), prefix: str = ""
) -> list[str]:
    """One line per key whose value differs between two JSON values (nested dicts are walked).

    Lines read `key: stored X, now Y` (with `labels` naming the two sides), sorted by key.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in sorted(set(old) | set(new)):
            name = f"{prefix}{key}"
            if key not in old:
                lines.append(f"{name}: {labels[0]} nothing, {labels[1]} {_short(new[key])}")
            elif key not in new:
                lines.append(f"{name}: {labels[0]} {_short(old[key])}, {labels[1]} nothing")
            else:
                lines.extend(diff_configs(old[key], new[key], labels, f"{name}."))
        return lines
    if old != new:
        return [f"{prefix.rstrip('.')}: {labels[0]} {_short(old)}, {labels[1]} {_short(new)}"]
    return []


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


# ----- parsing the compact command-line values ----------------------------------------------------
def parse_seeds(text: str) -> tuple[int, ...]:
    """`--seeds 0,1,2` -> (0, 1, 2): distinct non-negative integers, in the order given."""
    try:
        seeds = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--seeds {text!r}: expected comma-separated whole numbers, e.g. 0,1,2"
        ) from None
    if any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: seeds must be distinct and >= 0")
    return seeds


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard K/N` -> (K, N) with 1 <= K <= N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {text!r}: expected K/N, e.g. 1/4") from None
    if not 1 <= k <= n:
        raise ConfigError(f"--shard {text!r}: need 1 <= K <= N")
    return k, n


def parse_max_new_tokens(text: str) -> tuple[int, int]:
    """`--max-new-tokens BASE[,ARM]` -> (base, arm); ARM defaults to BASE."""
    try:
        parts = [int(part) for part in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or any(part < 1 for part in parts):
        raise ConfigError(
            f"--max-new-tokens {text!r}: expected BASE or BASE,ARM, positive whole numbers"
        )
    return parts[0], parts[-1]


def parse_n(text: str) -> int | None:
    """`--n 25` -> 25; `--n all` -> None (every problem of the file)."""
    if text.strip().lower() == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"--n {text!r}: expected a positive whole number or 'all'") from None


def resolve_decoding(
    decoding: str, seeds: tuple[int, ...] | None
) -> tuple[float, float, tuple[int, ...]]:
    """(temperature, top_p, seeds) of a decoding mode.

    Greedy is deterministic and runs once, as seed 0; giving other seeds is an error. Sampled
    decoding uses temperature 1.0 and top-p 0.95, each seed a full replicate (default 0, 1, 2).
    """
    if decoding not in DECODINGS:
        raise ConfigError(f"--decoding {decoding!r}: expected one of {', '.join(DECODINGS)}")
    if decoding == "greedy":
        if seeds not in (None, (0,)):
            raise ConfigError(
                "--seeds: greedy decoding is deterministic and runs as seed 0; "
                "pass --decoding sampled to run several seeds"
            )
        return 0.0, 1.0, (0,)
    return SAMPLED_TEMPERATURE, SAMPLED_TOP_P, seeds if seeds is not None else DEFAULT_SAMPLED_SEEDS
