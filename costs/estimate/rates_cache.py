"""The rates `nudge plan` measured, kept so that `nudge run` can print its estimate at its start
without measuring again: one JSON file per model, dtype, device, decode path, threads, library
versions and processor (or GPU), under the cache directory (util/cache.py)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from nudgeability.util.atomic import atomic_write_text
from nudgeability.util.cache import cache_root

from .rates import Rates


@dataclass(frozen=True)
class CachedRates:
    rates: Rates
    max_rows: int | None
    reuse_stems: bool
    measured_at: str  # UTC, ISO 8601


def machine(device: str) -> str:
    """The processor or GPU the rates were measured on."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def rates_key(config, threads: int) -> str:
    """What the rates depend on (module docstring), hashed."""
    from importlib.metadata import version

    what = {
        "model": str(Path(config.model).resolve()) if Path(config.model).exists() else config.model,
        "dtype": config.dtype,
        "device": config.device,
        "static_decode": bool(config.static_decode),
        "quant_compute": config.quant_compute,
        "max_batch_tokens": config.max_batch_tokens,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "budgets": [config.max_new_tokens, config.max_new_tokens_arm],  # the row cap's
        "threads": threads,
        "versions": [version(name) for name in ("torch", "transformers", "nudgeability")],
        "machine": machine(config.device),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def _path(config, threads: int) -> Path:
    return cache_root() / "rates" / f"{rates_key(config, threads)}.json"


def save_rates(config, cached: CachedRates) -> Path:
    path = _path(config, cached.rates.threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(cached)
    data["rates"] = cached.rates.to_json()
    atomic_write_text(path, json.dumps(data, sort_keys=True))
    return path


def load_rates(config, threads: int) -> CachedRates | None:
    """The rates kept for this config at `threads`, or None (none kept, or unreadable)."""
    path = _path(config, threads)
    try:
        data = json.loads(path.read_text())
        return CachedRates(
            Rates.from_json(data["rates"]),
            data["max_rows"],
            bool(data["reuse_stems"]),
            str(data["measured_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
