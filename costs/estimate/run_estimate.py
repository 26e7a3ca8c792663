"""`estimate_run`: what one `nudge run` will cost on this machine, before it runs.

It does what the run does first (its shape settled by the same function, splice/run/shape.py
`settle`: worker count, chunk size, row cap; `prepare`; the schedule and its needle), timing it, then measures the run's engine for a few seconds (rates.py), and
follows the run's schedule over its workload (workload.py, schedule.py) once per worker; the
slowest worker's time plus the start is the run's wall time.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from nudgeability.splice.run.config import RunConfig

from .campaign import Campaign, CampaignEstimate, TaskShape, estimate_campaign
from .rates import Rates, measure, row_counts
from .schedule import Timeline, stream_timeline, units_timeline
from .workload import ALL_CUTS_ASSUMED, Lengths, Workload, workload_of

LEFT_OUT_RESOLVE = "the resolution phase (--resolve): its length depends on the tool calls made"
LEFT_OUT_CUTS = (
    f"the count of --cuts all's cuts, which the reasoning decides: {ALL_CUTS_ASSUMED} per base "
    "taken, each arm's stem as long as at the paper's cut"
)


@dataclass(frozen=True)
class RunEstimate:
    """The expected cost of one run (module docstring); `wall_seconds` is the estimate."""

    model: str
    task: str
    n: int
    device: str
    dtype: str
    schedule: str
    workers: int
    lengths: Lengths
    rates: Rates
    sequences: float
    prompt_tokens: int
    generated_tokens: float
    startup_seconds: float  # the process up to the first step: imports, model, needle, engine
    compute_seconds: float  # the slowest worker's engine time
    left_out: tuple[str, ...] = ()
    # (bucket, seconds) of each CUDA graph's compile and capture, within startup_seconds
    captures: tuple[tuple[int, float], ...] = ()

    @property
    def wall_seconds(self) -> float:
        return self.startup_seconds + self.compute_seconds

    @property
    def gpu_hours(self) -> float | None:
        """Device-hours of one GPU, for a run on CUDA."""
        return self.wall_seconds / 3600 if self.device.startswith("cuda") else None

    def to_json(self) -> dict:
        out = asdict(self)
        out["rates"] = self.rates.to_json()
        out["wall_seconds"] = self.wall_seconds
        out["gpu_hours"] = self.gpu_hours
        out["left_out"] = list(self.left_out)
        return out


def process_seconds() -> float:
    """Seconds since this process started (Linux's /proc; 0 elsewhere): the imports a run pays
    before its first line of work."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - int(fields[19]) / ticks)
    except (OSError, ValueError, IndexError):
        return 0.0


def timeline_of(
    work: Workload, lengths: Lengths, rates: Rates, schedule: str, max_rows, reuse_stems: bool
) -> Timeline:
    if schedule == "stream":
        return stream_timeline(work, lengths, rates, max_rows=max_rows, reuse_stems=reuse_stems)
    return units_timeline(work, lengths, rates, max_rows=max_rows)


@dataclass(frozen=True)
class Measured:
    """A prepared run and its engine, measured: what `estimate_run` and the campaign share."""

    prepared: object  # splice/run/prepare.py Prepared
    schedule: str
    rates: Rates
    startup_seconds: float
    workers: int
    max_rows: int | None  # the engine's row cap (CUDA: what its KV pool holds)
    reuse_stems: bool  # stream.py: forks copy their stem where the pool grows with the work
    captures: tuple[tuple[int, float], ...] = ()  # RunEstimate.captures


def measure_run(
    requested: RunConfig,
    *,
    lengths: Lengths,
    workers: int | None = None,
    threads: int | None = None,
    cores: int | None = None,
    loaded=None,
    since: float | None = None,
) -> Measured:
    """Prepare `requested` as `nudge run` would (its workers, chunk size and threads, its
    schedule and needle), then measure its engine at the rows its steps reach. `loaded`: a model
    already in memory (models/loader.py `LoadedModel`), as `prepare` takes it; `since`: the
    `time.monotonic()` the start is counted from (default: the process's start)."""
    import torch

    from nudgeability.splice.run import shape as run_shape
    from nudgeability.splice.run.prepare import prepare
    from nudgeability.splice.run.runner import RunEngine, unit_context
    from nudgeability.splice.run.schedule import choose_schedule
    from nudgeability.splice.run.validation import resolve_device
    from nudgeability.util.threads import set_threads, usable_cores

    device = resolve_device(requested.device)
    built = RunEngine(requested, device, loaded)
    shape = run_shape.settle(  # a fresh run: no directory to resume
        requested,
        device,
        None,
        cores=cores or usable_cores(),
        workers=workers,
        threads=threads,
        pool_rows=built.pool_rows,
        schedule=built.schedule,
    )
    if shape.workers > 1 and requested.shard is not None:
        raise ValueError("--workers with --shard: a shard runs in one process")
    if shape.workers > 1:
        torch.set_num_threads(1)  # each worker computes on one thread (splice/run/workers.py)
    else:
        set_threads(threads)
    prepared = prepare(shape.config(requested), loaded=built.loaded)
    if prepared.backend is not None:
        raise ValueError("nudge plan measures the local engine; a run on a server is its own")
    schedule = (shape.schedule or choose_schedule(prepared)).name
    stream = schedule == "stream"
    engine = built.engine or unit_context(prepared, progress=False, stream=stream).backend.engine
    graphs = engine.static_dispatch.graphs  # captured as the run's are (engine_build.py)
    captures = tuple(sorted(graphs.seconds.items())) if graphs is not None else ()
    startup = process_seconds() if since is None else time.monotonic() - since
    reuse = engine.max_batch_tokens is None
    probe = Rates("probe", 1, 1.0, ((1, 1.0),), 0.0, 0, 0, 1.0)  # any rates: only rows count
    whole = workload_of(prepared)
    peak = timeline_of(whole, lengths, probe, schedule, engine.max_rows, reuse).peak_rows
    starts = prepared.starts
    prompts = [
        (list(p.with_tool), starts.length("B", p.with_tool) if starts else 0)
        for p in prepared.prompts
    ]
    rates = measure(engine, prompts, row_counts(peak / shape.workers, engine.max_rows))
    return Measured(
        prepared, schedule, rates, startup, shape.workers, engine.max_rows, reuse, captures
    )


def estimate_run(
    requested: RunConfig,
    *,
    lengths: Lengths | None = None,
    workers: int | None = None,
    threads: int | None = None,
    cores: int | None = None,
    measured: Measured | None = None,
) -> RunEstimate:
    """What `nudge run` on `requested` will cost here (module docstring)."""
    lengths = lengths or Lengths()
    m = measured or measure_run(
        requested, lengths=lengths, workers=workers, threads=threads, cores=cores
    )
    prepared, config = m.prepared, m.prepared.config
    seconds = []
    for k in range(m.workers):
        chunks = [c for i, c in enumerate(prepared.plan.mine) if i % m.workers == k]
        work = workload_of(prepared, chunks)
        seconds.append(
            timeline_of(work, lengths, m.rates, m.schedule, m.max_rows, m.reuse_stems).seconds
        )
    whole = workload_of(prepared)
    return RunEstimate(
        model=config.model_label or config.model,
        task=config.task,
        n=config.n,
        device=config.device,
        dtype=config.dtype,
        schedule=m.schedule,
        workers=m.workers,
        lengths=lengths,
        rates=m.rates,
        sequences=whole.sequences(lengths),
        prompt_tokens=whole.prompt_tokens(),
        generated_tokens=whole.generated_tokens(lengths),
        startup_seconds=m.startup_seconds,
        compute_seconds=max(seconds),
        captures=m.captures,
        left_out=(LEFT_OUT_RESOLVE,) * config.resolve + (LEFT_OUT_CUTS,) * (config.cuts == "all"),
    )


def task_shape(prepared) -> TaskShape:
    """A prepared run's prompts and arms, as token counts (campaign.py `TaskShape`)."""
    work = workload_of(prepared)
    prompts: dict[str, list[int]] = {}
    shape_shared: dict[str, int] = {}
    arms: dict[str, tuple[int, ...]] = {}
    for base in work.bases():
        prompts.setdefault(base.phase, []).append(base.prompt)
        shape_shared[base.phase] = base.shared
        arms[base.phase] = base.arms
    means = {phase: sum(v) / len(v) for phase, v in prompts.items()}
    return TaskShape(means, shape_shared, arms)


def body_parameters(model) -> int:
    """Parameters a prefill multiplies each token by: all but the embedding tables (the LM head
    runs on a prompt's last token only)."""
    import torch

    tables = {m.weight.data_ptr() for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    seen: dict[int, int] = {}
    for p in model.parameters():
        if p.data_ptr() not in tables:
            seen[p.data_ptr()] = p.numel()
    return sum(seen.values())


def estimate_paper(m: Measured, campaign: Campaign) -> CampaignEstimate:
    """The campaign of `campaign` on this device, from the measured run `m` (campaign.py): each
    task's prompts rendered by the measured model's family and tokenizer."""
    import torch

    from nudgeability.splice.run.prepare import prepare

    config = m.prepared.config
    shapes = {}
    for task in campaign.tasks:
        if task == config.task:
            shapes[task] = task_shape(m.prepared)
            continue
        # only its prompts count here: the smallest budgets, so that no context check refuses it
        other = replace(
            config,
            task=task,
            data=None,
            n=min(8, config.n or 8),
            shard=None,
            max_new_tokens=1,
            max_new_tokens_arm=1,
        )
        shapes[task] = task_shape(prepare(other, loaded=m.prepared.loaded))
    device = torch.device(config.device)
    memory = (
        torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    )
    params = body_parameters(m.prepared.loaded.model)
    return estimate_campaign(campaign, m.rates, params, shapes, m.schedule, memory, m.workers)


def announcement(prepared, workers: int) -> str:
    """What `nudge run` prints at its start: the work expected at the paper's lengths and, where
    `nudge plan` has measured this model here (rates_cache.py), the wall time it expects."""
    import torch

    from nudgeability.splice.run.schedule import choose_schedule

    from .rates_cache import load_rates

    lengths = Lengths()
    threads = 1 if workers > 1 else torch.get_num_threads()
    cached = load_rates(prepared.config, threads)
    work = workload_of(prepared)
    head = (
        f"nudge run: {work.sequences(lengths):,.0f} sequences, about "
        f"{work.generated_tokens(lengths):,.0f} new tokens at the paper's lengths"
    )
    if cached is None:
        return f"{head}; `nudge plan` with the same flags estimates the time it takes here"
    schedule = choose_schedule(prepared).name
    measured = Measured(
        prepared,
        schedule,
        cached.rates,
        process_seconds(),
        workers,
        cached.max_rows,
        cached.reuse_stems,
    )
    run = estimate_run(prepared.config, lengths=lengths, measured=measured)
    return (
        f"{head}; expected to take {duration(run.wall_seconds)} (rates measured by `nudge plan` "
        f"at {cached.measured_at})"
    )


def duration(seconds: float) -> str:
    """An estimate's wall time as a reader takes it in: seconds, minutes or hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"
