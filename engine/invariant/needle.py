"""Whether this machine keeps a sequence's logits independent of the batch: a needle, measured.

The engine's CPU products and attention run in fixed shapes (engine/invariant/cpu/products.py,
engine/invariant/cpu/attention.py), so a row's sums no longer depend on how many rows share a
call. One thing is still the library's: where a row sits inside a 16-row tile of a fixed-shape
GEMM. MKL's kernels keep it on every code branch tried, but nothing documents it, so a run that depends on it (the stream, a resume, a replay of one unit)
asks the machine first: vLLM's needle test on the run's own model, one prompt alone against the
same prompt at several places among 1-39 short others, every step's logits compared bit for bit.
It costs seconds (most of it the 20 forwards of 5 short generations). Where it fails, the runner takes the by-unit schedule and the manifest says why (splice/run/runner.py).

The answer is a property of the kernels a forward calls, and those are chosen by shapes and
dtypes, the CPU, the libraries and their settings, and this package's code, never by the values
in the tensors. So `cached_check` keeps each answer on disk (`<cache root>/needle/`,
util/cache.py) under a key of exactly those: the model's config, parameter shapes and dtypes; the
thread count; the CPU's model and flags; torch's version and build configuration; every MKL_,
OMP_, KMP_, ATEN_, DNNL_ and ONEDNN_ setting; and a hash of this package's engine and models
sources. The same run on the same machine then pays for the needle once; anything that could
pick another kernel path is another key, and checks again.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from nudgeability.engine.engine import Engine
from nudgeability.engine.sampling.sampling_params import SamplingParams
from nudgeability.util.cache import cache_root
from nudgeability.util.heap import release_freed_heap

BATCHES = (2, 5, 17, 40)
NEEDLE_TOKENS = 37
# The others are short: what the needle tests is where its rows land among theirs (tile
# positions, chunk neighbours), which short prompts vary as well as long ones. Their length is
# most of the check's cost.
OTHER_TOKENS = 12
STEPS = 3


@dataclass(frozen=True)
class InvarianceCheck:
    """The needle's result: `holds`, at `threads` torch threads, and the batch sizes whose needle
    logits differed from the needle alone."""

    holds: bool
    threads: int
    batches: tuple[int | str, ...]
    differing: tuple[int | str, ...]
    seconds: float
    cached: bool = False  # read from `kept`'s file rather than run in this process
    device: str | None = None  # the GPU's name (cuda_needle.py); None: this CPU

    def to_manifest(self) -> dict:
        """As the manifest records it: without `seconds`, so that two runs of the same work
        write the same manifest."""
        out = asdict(self)
        out["batches"], out["differing"] = list(self.batches), list(self.differing)
        del out["seconds"], out["cached"]
        if self.device is None:
            del out["device"]
        return out

    @classmethod
    def from_manifest(cls, got: dict) -> InvarianceCheck:
        """The check `to_manifest` wrote, as read back from a kept file (`cached` True)."""
        return cls(
            holds=bool(got["holds"]),
            threads=int(got["threads"]),
            batches=tuple(got["batches"]),
            differing=tuple(got["differing"]),
            seconds=0.0,
            cached=True,
            device=got.get("device"),
        )


def check_invariance(
    model: torch.nn.Module,
    *,
    batches: tuple[int, ...] = BATCHES,
    seed: int = 0,
    batch_invariant: bool = True,
) -> InvarianceCheck:
    """Run the needle (module docstring) on `model` with a fresh engine of its own
    (`batch_invariant=False`: an engine without its fixed-shape products, the negative control)."""
    start = time.monotonic()
    differing = _differing(model, batches, seed, batch_invariant)
    # The needle's engine is garbage in reference cycles (its sequences and groups refer to each
    # other): collected now, with the logits it kept, rather than at Python's next full
    # collection, and the heap it frees handed back (util/heap.py), so the rest of the run does
    # not carry it.
    gc.collect()
    release_freed_heap()
    return InvarianceCheck(
        holds=not differing,
        threads=torch.get_num_threads(),
        batches=tuple(batches),
        differing=tuple(differing),
        seconds=time.monotonic() - start,
    )


def _differing(model, batches, seed: int, batch_invariant: bool) -> list[int]:
    """The batch sizes whose needle logits differ from the needle's alone."""
    needle = Needle(Engine(model, batch_invariant=batch_invariant), seed)
    return [n for n in batches if needle.differs_among(n)]


class Needle:
    """One random prompt's logits over `STEPS` greedy steps on `engine`, alone (`alone`), and
    whether they stay the same bits beside others; the one construction of the CPU needle and
    the CUDA one (cuda_needle.py). Every prompt comes from one seeded stream."""

    def __init__(self, engine, seed: int):
        self.engine, self.rng = engine, random.Random(seed)
        self.params = SamplingParams(max_new_tokens=STEPS, ignore_eos=True)
        self.prompt = self.random_prompt(NEEDLE_TOKENS)
        self.alone = self._logits([self.prompt], 0)

    def random_prompt(self, length: int) -> list[int]:
        return [self.rng.randrange(self.engine.vocab_size) for _ in range(length)]

    def differs_among(self, n: int) -> bool:
        """The needle at a random place among n - 1 short prompts."""
        others = [self.random_prompt(self.rng.randint(3, OTHER_TOKENS)) for _ in range(n - 1)]
        at = self.rng.randrange(n)
        return not torch.equal(
            self._logits(others[:at] + [self.prompt] + others[at:], at), self.alone
        )

    def differs_beside(self, others: list[list[int]]) -> bool:
        """The needle first, then `others`."""
        return not torch.equal(self._logits([self.prompt, *others], 0), self.alone)

    def _logits(self, prompts, at: int) -> torch.Tensor:
        return self.engine.generate(prompts, self.params, return_logits=True)[at].logits


CACHE_FORMAT = 1
_SETTINGS = ("MKL_", "OMP_", "KMP_", "ATEN_", "DNNL_", "ONEDNN_")


def cached_check(model: torch.nn.Module) -> InvarianceCheck:
    """`check_invariance(model)`, read from disk when this machine already answered it for the
    same key (module docstring), else run and kept (`kept`)."""
    return kept(invariance_key(model), lambda: check_invariance(model))


def kept(key: dict, run: Callable[[], InvarianceCheck]) -> InvarianceCheck:
    """The needle answer kept on disk under `key` (`<cache root>/needle/`), else `run()`'s, then
    kept. A file that cannot be read is run again and rewritten; one that cannot be written
    leaves the run's own answer in force. Every device kind's needle keeps its answers here
    (engine/invariant/cuda_needle.py), its key naming the kind."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    path = cache_root() / "needle" / f"{digest[:32]}.json"
    try:
        stored = json.loads(path.read_text())
        if stored["key"] == key:
            return InvarianceCheck.from_manifest(stored["check"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    check = run()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"key": key, "check": check.to_manifest()}, indent=1))
        partial.replace(path)  # whole or not at all
    except OSError:
        pass
    return replace(check, cached=False)


def invariance_key(model: torch.nn.Module) -> dict:
    """Everything that chooses the kernels the needle runs (module docstring), as JSON values."""
    return {
        "format": CACHE_FORMAT,
        "batches": list(BATCHES),
        **model_key(model),
        "threads": torch.get_num_threads(),
        "cpu": _cpu(),
        "torch": [
            torch.__version__,
            torch.__config__.show(),
            torch.backends.cpu.get_cpu_capability(),
        ],
        "settings": settings(_SETTINGS),
        "code": code_hash(),
    }


def model_key(model: torch.nn.Module) -> dict:
    """The model's part of a needle key: its config, and each parameter's shape, dtype and
    device kind (the shapes and dtypes the kernels are chosen by, never the values)."""
    config = getattr(model, "config", None)
    return {
        "model": json.loads(config.to_json_string()) if config is not None else None,
        "parameters": [
            [name, list(p.shape), str(p.dtype), p.device.type]
            for name, p in model.named_parameters()
        ],
    }


def settings(prefixes: tuple[str, ...]) -> dict[str, str]:
    """The environment variables named with one of `prefixes`, sorted."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


def _cpu() -> list[str]:
    """The CPU's vendor, family, model, stepping and flags (Linux), else what `platform` says."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return [platform.machine(), platform.processor()]
    first = text.split("\n\n")[0]
    wanted = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "Features")
    return [line.strip() for line in first.splitlines() if line.split(":")[0].strip() in wanted]


def code_hash() -> str:
    """sha256 over this package's engine/ and models/ sources (the kernels' layout is theirs)."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for folder in ("engine", "models"):
        for path in sorted((package / folder).rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
