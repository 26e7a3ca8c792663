"""One run as N single-threaded worker processes, each the run's shard k of N, then merged.

The engine's CPU forward already uses every core of one process (engine/invariant/cpu/cores.Cores: whole
fixed-shape calls shared between threads, which keeps a row's bits independent of the batch and
of the thread count). But the Python around those calls is serial, so one process leaves its
other cores idle for part of every step. Workers are the other way round: N processes, each
computing shard k/N of the run (whole chunks of problems, `RunConfig.shard`) at one thread, on
the schedule its own needle chooses (schedule.py), joined by `nudge merge`'s `merge`, whose
records are byte for byte the unsharded run's (tests/splice/rundir/test_merge.py).

The model is loaded once, here, at one thread, and the workers are forked from this process:
they share its weights page for page (copy-on-write pages nobody writes), so N workers hold the
weights once, not N times; each adds only its own KV pool and temporaries. One thread before the
fork, because a forked child cannot use an OpenMP thread pool its parent started (GNU libgomp
is not fork-safe); at one thread torch, MKL and oneDNN never start one.

`worker_count` is what `nudge run` does without `--workers`: one worker per core on a CPU
run, one process where workers cannot help or would change how a run resumes. Everything the
workers write lives inside the run's own directory, so deleting it starts afresh: the shards in
`<out>/workers/shard-K-of-N/` while they run (removed once merged), each worker's log in
`<out>/workers/shard-K.log` (kept), and a failed worker's last line is the error. Run the same
command again to resume: each shard resumes its own directory, with the count it began with.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nudgeability.splice.run.config import DEFAULT_CHUNK_SIZE, RunConfig
from nudgeability.splice.rundir.layout import MANIFEST, PART_SUFFIX, PARTS
from nudgeability.splice.rundir.manifest import UserInterventions
from nudgeability.splice.rundir.merge import MergeResult, merge
from nudgeability.util.atomic import fsync_directory
from nudgeability.util.progress import progress_bar

if TYPE_CHECKING:  # the hints only: prepare is imported where a run starts
    from nudgeability.splice.run.prepare import Prepared
    from nudgeability.splice.run.shape import RunShape

_SHARD_DIR = re.compile(r"shard-\d+-of-(\d+)")
# forking a process that loaded torch is safe on Linux only (macOS: its system libraries; Windows
# has no fork)
_FORKS = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class WorkerError(ValueError):
    """A worker failed; the message names its log, its exit, and quotes its log's last line (a
    ValueError: the CLI prints it as its one-line error)."""


WORKERS_DIR = "workers"  # inside the run's directory: the shards while they run, the logs


@dataclass(frozen=True)
class Workers:
    """Where the workers of a run keep their shards and logs: inside the run's directory."""

    out: Path
    count: int

    @property
    def root(self) -> Path:
        return self.out / WORKERS_DIR

    @property
    def merged(self) -> Path:
        """Where the shards are merged before the run's files move up into `out`."""
        return self.root / "merged"

    def begun(self) -> list[int]:
        """The shard counts of the workers runs begun in `out` (one, unless tampered with)."""
        return sorted(
            {int(m.group(1)) for d in _listing(self.root) if (m := _SHARD_DIR.fullmatch(d.name))}
        )

    def holds_a_run(self) -> bool:
        """Whether `out` holds a run of its own: anything beside the workers' folder, or a merged
        run (its manifest)."""
        return (self.out / MANIFEST).exists() or any(
            p.name != WORKERS_DIR for p in _listing(self.out)
        )

    def shard_dir(self, k: int) -> Path:
        return self.root / f"shard-{k}-of-{self.count}"

    def log(self, k: int) -> Path:
        return self.root / f"shard-{k}.log"


def worker_chunk_size(config: RunConfig, count: int) -> int:
    """Problems per unit: the config's when it asks for one (`--chunk-size`), else small enough
    that `count` workers get two chunks each, at most the CPU default (records do not depend on
    the chunk size)."""
    if config.chunk_size is not None:
        return config.chunk_size
    per_worker = -(-config.n // (count * 2)) if config.n else DEFAULT_CHUNK_SIZE
    return max(1, min(DEFAULT_CHUNK_SIZE, per_worker))


def worker_count(
    config: RunConfig,
    out: Path | None,
    cores: int,
    workers: int | None = None,
    threads: int | None = None,
    remote: bool = False,
) -> int:
    """The processes a `nudge run` takes: `workers` where given (a run on a server is one
    process, and says so if asked for more), one under `threads` (that count is the user's), else
    `automatic_count` on `cores`."""
    if remote:
        if workers not in (None, 1):
            raise ValueError(f"--workers {workers}: a run on a server is one process")
        return 1
    if workers is not None:
        if workers < 1:
            raise ValueError(f"--workers {workers}: must be at least 1")
        return workers
    if threads is not None:
        return 1
    return automatic_count(config, out, cores)


def automatic_count(config: RunConfig, out: Path | None, cores: int) -> int:
    """The workers `nudge run` uses when `--workers` is not given: the count an interrupted
    workers run began with (its shards resume); one process for a device other than the CPU, a
    shard, an `out` that already holds a one-process or merged run (it resumes as it began), or
    a system other than Linux; else one worker per core, at most one per problem (per chunk, when
    a chunk size is asked for). `out` None: no directory yet (`nudge plan`)."""
    import torch

    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device != "cpu" or config.shard is not None or not _FORKS:
        return 1
    if out is not None:
        layout = Workers(Path(out).absolute(), 1)
        if layout.holds_a_run():
            return 1
        begun = layout.begun()
        if len(begun) == 1:
            return begun[0]
    most = config.n or cores
    if config.chunk_size is not None and config.n:  # a chunk size asked for: one worker a chunk
        most = -(-config.n // config.chunk_size)
    return max(1, min(cores, most))


def _listing(directory: Path) -> list[Path]:
    return list(directory.iterdir()) if directory.is_dir() else []


def run_workers(
    config: RunConfig,
    out: Path,
    shape: RunShape,
    progress: bool = True,
    on_prepared: Callable[[Prepared], None] | None = None,
) -> MergeResult:
    """Run `config` as `shape.workers` single-threaded shard workers into `out`, each cutting its
    problems into chunks of `shape.chunk_size` (shape.py `settle`), forked from this process
    after it loads the model (module docstring); the merged run's result. `on_prepared` is told
    of the whole run once it is prepared, before any worker starts."""
    count = shape.workers
    if config.shard is not None:
        raise ValueError("--workers with --shard: a shard runs in one process")
    if not _FORKS:
        raise ValueError(f"--workers {count}: workers are forked, on Linux only ({sys.platform})")
    import torch

    from nudgeability.splice.run.prepare import prepare
    from nudgeability.splice.run.schedule import choose_schedule
    from nudgeability.splice.run.validation import validate

    layout = Workers(Path(out).absolute(), count)
    # the interventions file is read once: a resume's from the shards' manifest, else here
    recorded = UserInterventions.in_directory(layout.shard_dir(1))
    valid = validate(config, recorded=recorded)
    if valid.device != "cpu":
        raise ValueError(f"--workers: CPU runs only (device {valid.device})")
    user = valid.interventions
    if user is not None:
        recorded = UserInterventions(user.path, user.sha256, user.definitions())
    if layout.holds_a_run():
        raise ValueError(
            f"{out}: already holds a run; workers start in a new directory, or in one that holds "
            f"only their own {WORKERS_DIR}/ folder (an interrupted workers run)"
        )
    begun = layout.begun()
    if begun and begun != [count]:
        raise ValueError(
            f"--workers {count}: {layout.root} holds the shards of {begun[0]} workers; resume "
            f"with --workers {begun[0]}, or delete {out} to start afresh"
        )
    config = shape.config(config)
    threads = torch.get_num_threads()
    # one thread before anything computes: no OpenMP pool for the children to inherit, and no
    # tokenizers' Rust pool either (neither is fork-safe)
    torch.set_num_threads(1)
    tokenizers = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    terminate = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():  # a batch system's kill: as Ctrl-C
        signal.signal(signal.SIGTERM, _terminated)
    try:
        # the whole run prepared here first: a bad input fails once, before any worker starts
        whole = prepare(config, recorded=recorded)
        # the needle too, once, at the workers' one thread: they inherit its result (schedule.py)
        choose_schedule(whole)
        if on_prepared is not None:
            on_prepared(whole)
        loaded, units = whole.loaded, len(whole.plan.units())
        del whole
        layout.root.mkdir(parents=True, exist_ok=True)
        fork = multiprocessing.get_context("fork")
        procs: list = []
        gc.freeze()  # the children's collector then leaves the parent's objects' pages shared
        try:
            for k in range(1, count + 1):
                shard = (layout.shard_dir(k), layout.log(k))
                args = (config, k, count, *shard, loaded, os.getpid(), recorded)
                procs.append(fork.Process(target=_worker, args=args, name=f"nudge-worker-{k}"))
                procs[-1].start()
            del loaded  # the children hold it; this process only waits
            _wait(procs, layout, units, progress)
        except BaseException:  # Ctrl-C, a kill, a failed fork: no worker outlives the run
            for p in procs:
                if p.pid is not None:
                    p.terminate()
            for p in procs:
                if p.pid is not None:
                    p.join()
            raise
    finally:
        gc.unfreeze()
        torch.set_num_threads(threads)
        if tokenizers is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = tokenizers
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, terminate)
    return _merged(layout)


def _merged(layout: Workers) -> MergeResult:
    """The shards merged into `layout.out`: merged whole under the workers' folder (a merge
    writes its directory under a temporary name and renames it), then its files moved up into
    `out`, the sealed manifest last, so `out` holds a run only once it holds all of it; then the
    shards go (the logs stay). A merge killed part way leaves no manifest in `out`, so the same
    command merges again from the shards."""
    for path in _listing(layout.out):
        if path.name != WORKERS_DIR:  # a killed merge's files, never a manifest
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    if layout.merged.exists():
        shutil.rmtree(layout.merged)
    result = merge(layout.merged, [layout.shard_dir(k) for k in range(1, layout.count + 1)])
    names = sorted(p.name for p in _listing(layout.merged) if p.name != MANIFEST) + [MANIFEST]
    for name in names:
        os.replace(layout.merged / name, layout.out / name)
    fsync_directory(layout.out)
    shutil.rmtree(layout.merged)
    for k in range(1, layout.count + 1):
        shutil.rmtree(layout.shard_dir(k))
    return replace(result, out=layout.out)


def _wait(procs: list, layout: Workers, units: int, progress: bool) -> None:
    """Wait for the workers, the bar counting the units their shards have stored."""
    bar = progress_bar(units, "units", "unit", enabled=progress)
    try:
        while any(p.is_alive() for p in procs):
            for p in procs:
                p.join(timeout=1.0 / len(procs))
            bar.update(_stored(layout, len(procs)) - bar.n)
        bar.update(_stored(layout, len(procs)) - bar.n)
    finally:
        bar.close()
    for k, p in enumerate(procs, 1):
        if p.exitcode != 0:
            raise WorkerError(
                f"worker {k}/{len(procs)} failed (see {layout.log(k)}; {_exit(p.exitcode)}): "
                f"{_last_line(layout.log(k))}"
            )


def _terminated(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _exit(code: int) -> str:
    """How a worker ended: its exit status, or the signal that killed it (-9: the kernel's OOM
    killer, most often)."""
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError as exc:
        return f"(its log could not be read: {exc})"
    return lines[-1] if lines else "(no output)"


def _stored(layout: Workers, count: int) -> int:
    """The finished units in the shards' directories (a part file each, splice/rundir/layout.py)."""
    return sum(
        len(list((layout.shard_dir(k) / PARTS).glob("*" + PART_SUFFIX)))
        for k in range(1, count + 1)
    )


def _worker(
    config: RunConfig, k: int, count: int, out: Path, log: Path, loaded, parent: int, recorded
) -> None:
    """One forked worker: shard k of `count` of `config`, on the parent's model, at one thread,
    its output in its log. It dies with its parent (a kill -9 of `nudge run` leaves no worker
    holding its shard's lock): PR_SET_PDEATHSIG."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    file = open(log, "w", buffering=1)  # noqa: SIM115 (open for the worker's whole life)
    os.dup2(file.fileno(), 1)  # C libraries' output
    os.dup2(file.fileno(), 2)
    sys.stdout = sys.stderr = file  # Python's, whatever the parent had bound them to
    from nudgeability.splice.run.prepare import prepare
    from nudgeability.splice.run.runner import run
    from nudgeability.util.threads import set_threads

    set_threads(1)
    try:
        # the worker's own phase lines go to its log (plain lines: not a terminal)
        progress = "ipykernel" not in sys.modules  # a notebook's bars would draw widgets
        shard = prepare(replace(config, shard=(k, count)), loaded=loaded, recorded=recorded)
        run(shard, out, progress=progress)
    except BaseException as exc:  # the log's last line is the error, as `_wait` quotes it
        import traceback

        traceback.print_exc()
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
