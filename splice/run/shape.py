"""A run's shape: how many processes compute it, how many problems make one unit (the chunk
size), how many rows its engine decodes together (the row cap) and, on CUDA, its schedule,
settled by `settle` once per process, before the run is prepared.

`nudge run` (cli/run.py), `nudge plan` (costs/estimate/run_estimate.py `measure_run`) and the GPU
check (benchmarks/benchkit/gpu/plan.py, through `measure_run`) call it, each with the device
the run takes and its output directory (None where there is none: a fresh run). It reads that
directory's manifest once: a run resumed keeps the chunk size it recorded, since its parts are
cut by it.

The chunk size is, first found: the one asked for (`--chunk-size`); the one the run resumed
recorded; with workers, small enough that each worker gets two chunks (workers.py
`worker_chunk_size`); on a device whose KV pool is sized from free memory (CUDA), by unit, the
rows the pool holds (device_batching.py); else `DEFAULT_CHUNK_SIZE`. On CUDA the row cap is the
rows this process's pool holds, whatever the chunk size. The rows come from the run's engine
itself: the caller passes `pool_rows`, a callable that builds the engine (runner.py
`RunEngine`), called only on such a device, so that the engine is built once, before `prepare`,
and the run computes on it.

On such a device the schedule is settled here too, before the engine is built (`schedule`, the
same `RunEngine`'s: schedule.py `decide` on the loaded model, with the CUDA needle), since the
engine computes with the batch-invariant CUDA kernels exactly when the run takes the stream.
By unit, a unit is one engine call, so its records depend on the chunk size, and a fresh run
takes it from the pool: one step holds a unit's problems. On the stream they depend on neither
the chunk size nor the pool; the chunk size is then only how the parts are cut, so it is not
taken from the card (`DEFAULT_CHUNK_SIZE`), and a run started on one card, resumed on another
with other free memory, takes that card's own row cap and gives the same bytes. The manifest's
`schedule` says which chunk size and row cap each process took (runner.py).

Elsewhere the schedule is not part of the shape: it is the needle's verdict on the loaded
model at the thread count the run computes at (schedule.py `choose_schedule`), known only once
the model is loaded, and for workers at the one thread they take because the shape said there
would be workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from nudgeability.splice.run.config import DEFAULT_CHUNK_SIZE, RunConfig
from nudgeability.splice.run.device_batching import batches_from_pool
from nudgeability.splice.run.schedule import STREAM, Schedule
from nudgeability.splice.run.workers import worker_chunk_size, worker_count
from nudgeability.splice.rundir.layout import MANIFEST
from nudgeability.splice.rundir.manifest import OutputDirError, read_manifest

# where a run's chunk size came from (`RunShape.chunk_from`), in the order `settle` looks
ASKED, RESUMED, WORKERS, POOL, DEFAULT = "asked", "resumed", "workers", "pool", "default"


@dataclass(frozen=True)
class RunShape:
    """What `settle` decided for one run (module docstring)."""

    device: str  # as validation.py resolves it ("server" for a run on a server)
    workers: int  # processes: 1, or the forked shard workers of workers.py
    chunk_size: int  # problems per unit
    chunk_from: str  # ASKED, RESUMED, WORKERS, POOL or DEFAULT
    max_rows: int | None  # the engine's row cap (CUDA: the rows its KV pool holds); None: none
    schedule: Schedule | None = None  # where settled here (CUDA); None: after `prepare`

    def config(self, requested: RunConfig) -> RunConfig:
        """`requested` with the settled chunk size: what `prepare` is given."""
        return replace(requested, chunk_size=self.chunk_size)

    def to_manifest(self) -> dict:
        """The chunk size, where it came from, and the row cap, as the manifest's `schedule`
        records them for the process that computed (runner.py)."""
        return {"chunk_size": self.chunk_size, "chunk_from": self.chunk_from, "rows": self.max_rows}


def settle(
    config: RunConfig,
    device: str,
    out: str | os.PathLike | None,
    *,
    cores: int = 1,
    workers: int | None = None,
    threads: int | None = None,
    remote: bool = False,
    pool_rows: Callable[[], int] | None = None,
    schedule: Callable[[], Schedule] | None = None,
) -> RunShape:
    """The shape of the run `config` asks for on `device` into `out` (module docstring).

    `workers` and `threads` are `nudge run`'s flags (None: not given), `cores` the cores this
    process may use (util/threads.py `usable_cores`), `remote` whether the run goes to a server.
    `schedule` then `pool_rows` are called once each where the device sizes the KV pool from
    free memory; a ValueError when `pool_rows` is needed and not given (`schedule` None: by
    unit)."""
    recorded = None if out is None else recorded_chunk_size(out)
    count = worker_count(replace(config, device=device), out, cores, workers, threads, remote)
    rows = chosen = None
    if not remote and count == 1 and batches_from_pool(device):  # workers: CPU runs only
        if pool_rows is None:
            raise ValueError(f"a run on {device} takes its row cap from its engine's KV pool")
        chosen = schedule() if schedule is not None else None
        rows = pool_rows()
    streamed = chosen is not None and chosen.name == STREAM
    if config.chunk_size is not None:
        chunk, source = config.chunk_size, ASKED
    elif recorded is not None:
        chunk, source = recorded, RESUMED
    elif count > 1:
        chunk, source = worker_chunk_size(config, count), WORKERS
    elif rows is not None and not streamed:
        chunk, source = rows, POOL
    else:
        chunk, source = DEFAULT_CHUNK_SIZE, DEFAULT
    return RunShape(device, count, chunk, source, rows, chosen)


def recorded_chunk_size(out: str | os.PathLike) -> int | None:
    """The chunk size in the manifest of the run directory `out`, if it holds one (a broken or
    foreign manifest: None, and `WorkStore.open` says what is wrong with it)."""
    if not (Path(out) / MANIFEST).is_file():
        return None
    try:
        chunk = read_manifest(out).config.get("chunk_size")
    except OutputDirError:
        return None
    return chunk if type(chunk) is int and chunk >= 1 else None
