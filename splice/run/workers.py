"""One run as N single-threaded worker processes, each the run's shard k of N, then merged.

The engine's CPU forward already uses every core of one process (models/invariant.Cores: whole
fixed-shape calls shared between threads, which keeps a row's bits independent of the batch and
of the thread count). Workers are the other way round: `nudge run --workers N` starts N
processes, each computing shard k/N of the
run (whole chunks of problems, `RunConfig.shard`) at one thread, on the schedule its own needle
chooses (schedule.py), and
joins them with `nudge merge`'s `merge`, whose records are byte for byte the unsharded run's
(tests/splice/rundir/test_merge.py). A worker is this module run as a program on a pickled
`RunConfig`; its log goes to `<out>.workers/shard-K.log`, and a failed worker's last line is the
error. Run the same command again to resume: each shard resumes its own directory.

Each worker loads its own copy of the model, so N workers need N times the weights' memory.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from nudgeability.splice.run.config import DEFAULT_CHUNK_SIZE, RunConfig
from nudgeability.splice.rundir.merge import MergeResult, merge


class WorkerError(RuntimeError):
    """A worker failed; the message names its log and quotes its last line."""


@dataclass(frozen=True)
class Workers:
    """Where the workers of a run keep their shards and logs."""

    out: Path
    count: int

    @property
    def root(self) -> Path:
        return self.out.with_name(self.out.name + ".workers")

    def shard_dir(self, k: int) -> Path:
        return self.root / f"shard-{k}-of-{self.count}"

    def log(self, k: int) -> Path:
        return self.root / f"shard-{k}.log"


def worker_chunk_size(config: RunConfig, count: int) -> int:
    """Problems per unit so that each worker gets work: at most the config's (the CPU default when
    it gives none), and small enough that `count` workers share the chunks (records do not depend
    on the chunk size)."""
    asked = config.chunk_size or DEFAULT_CHUNK_SIZE
    per_worker = -(-config.n // (count * 2)) if config.n else asked
    return max(1, min(asked, per_worker))


def run_workers(config: RunConfig, out: Path, count: int, progress: bool = True) -> MergeResult:
    """Run `config` as `count` single-threaded shard workers into `out` (module docstring)."""
    if count < 1:
        raise ValueError(f"--workers {count}: must be at least 1")
    if config.shard is not None:
        raise ValueError("--workers with --shard: a shard runs in one process")
    import torch

    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device != "cpu":
        raise ValueError(f"--workers: CPU runs only (device {device})")
    layout = Workers(Path(out).absolute(), count)
    if layout.out.exists() and any(layout.out.iterdir()):
        raise ValueError(
            f"{out}: already holds a run; the workers merge into a new directory "
            f"(their shards stay in {layout.root})"
        )
    layout.root.mkdir(parents=True, exist_ok=True)
    config = replace(config, chunk_size=worker_chunk_size(config, count))
    spec = layout.root / "config.pickle"
    spec.write_bytes(pickle.dumps(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = []
    for k in range(1, count + 1):
        with open(layout.log(k), "w") as log:
            command = [sys.executable, "-m", __name__, str(spec), str(k), str(count)]
            command.append(str(layout.shard_dir(k)))
            procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
    _wait(procs, layout, progress)
    return merge(out, [layout.shard_dir(k) for k in range(1, count + 1)])


def _wait(procs: list[subprocess.Popen], layout: Workers, progress: bool) -> None:
    start = time.monotonic()
    while any(p.poll() is None for p in procs):
        time.sleep(2.0)
        if progress:
            done = sum(p.poll() == 0 for p in procs)
            parts = sum(
                len(list(layout.shard_dir(k).glob("*.part*"))) for k in range(1, 1 + len(procs))
            )
            print(
                f"\rnudge run: {len(procs)} workers, {done} finished, {parts} units stored, "
                f"{time.monotonic() - start:.0f} s",
                end="",
                file=sys.stderr,
            )
    if progress:
        print(file=sys.stderr)
    for k, p in enumerate(procs, 1):
        if p.returncode != 0:
            lines = layout.log(k).read_text().strip().splitlines() or ["(no output)"]
            raise WorkerError(f"worker {k}/{len(procs)} failed (see {layout.log(k)}): {lines[-1]}")


def _worker(spec: str, k: int, count: int, out: str) -> None:
    """One worker: shard k of `count` of the pickled config, at one torch thread."""
    from nudgeability.splice.run.prepare import prepare
    from nudgeability.splice.run.runner import run
    from nudgeability.util.threads import set_threads

    config = replace(pickle.loads(Path(spec).read_bytes()), shard=(k, count))
    set_threads(1)
    run(prepare(config), out, progress=False)


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
