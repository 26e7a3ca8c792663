"""The values of the commands' flags, checked: `nudge run`'s compact values parsed (a `ConfigError`
naming the flag, else the value), and `--out DIR` of a command that writes a directory."""

from __future__ import annotations

import os

from nudgeability.splice.run.config import ConfigError


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


def check_out(value: str | os.PathLike) -> None:
    """`--out DIR` of a command that writes a directory: refused at once, naming the flag, when a
    file is in the way (before any work)."""
    from nudgeability.util.atomic import directory_problem

    problem = directory_problem(value)
    if problem is not None:
        raise ValueError(f"--out {value}: {problem}; pass another --out")
