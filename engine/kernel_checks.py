"""The checks that choose a run's kernels, made before its first step on scratch blocks of its pool.

Three checks can refuse a fast path on CUDA: the fused layer kernels against the library's layers
(engine/fused/first_step.py), each quantised kernel against float64 (models/quant/self_check.py),
and each bucket's captured graph against the eager cascade (`StaticDecodeDispatch._self_check`,
engine/attention/static_dispatch.py). Each computes a step twice and keeps one path's K/V, so
made on the run's own steps they would leave its K/V, and its records, depending on which step
came first and which bucket a row met first. `check_before_run` (`Engine.capture`, before the
first step) makes them on probe work instead: forks of random token ids, scheduled by a scheduler
of their own on blocks that no row holds (`KVPool.scratch`: zeroed after, the pool's allocation
state restored), through the engine's own step, with the engine's rows and statistics set aside:

1. **kernels**: a prefix of `PREFIX` tokens and one arm of `ARM`; the prefix's prefill is a conclusive
   forward (`first_step.conclusive`), where the fused layers are checked
   (`ModelRunner.checking`) and every quantised kernel that the engine's row counts can choose
   gets its verdict (`self_check.probing`);
2. the buckets' graphs are captured (`StaticDecodeDispatch.capture_all`), with the kernels chosen;
3. **graphs**: for each bucket, a fork of more arms than the bucket below it holds, whose first
   step decodes on that bucket: an arm whose suffix is one token samples there, one of two tokens
   (the probe cuts prefills into one-token chunks) writes K/V and samples nothing, and the check
   compares both kinds. A bucket whose probe the free blocks cannot hold (a CUDA pool is sized
   from memory and holds them; a fixed one too small for the probe cannot hold the rows that
   would decode on the bucket either) is compared at its first step on the run, as is one
   captured later (a row cap raised after `Engine.capture`, or a pool replaced by a larger one,
   which a CUDA pool never is).

An engine with none of these paths (every CPU engine) probes nothing. A pool that grows with the
work submitted grows for a probe; one of fixed size whose free blocks cannot hold the kernels'
probe leaves the fused layers for the library's, recorded.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from nudgeability.engine import requests as req
from nudgeability.engine.attention.decode_buckets import BUCKETS
from nudgeability.engine.engine_stats import EngineStats
from nudgeability.engine.model_runner import LIBRARY_LAYERS
from nudgeability.engine.sampling.sampling_params import SamplingParams
from nudgeability.engine.scheduling.scheduler import Scheduler
from nudgeability.engine.sequence import ForkRequest
from nudgeability.models.quant import self_check
from nudgeability.util import fallbacks

PREFIX = 12  # probe prefix tokens: positions 0..11, rows that differ and rotate
ARM = 4  # the kernel probe's one arm: its tokens after the prefix
SEED = 61  # the probe's token ids: a fixed stream, so that every engine probes the same work


def check_before_run(engine) -> None:
    """The three checks (module docstring), then the run's graphs captured; `Engine.capture`."""
    runner, dispatch = engine.runner, engine.static_dispatch
    if runner.unchecked or _quantised_checks(engine.model):
        if _room(engine, 1):
            with engine.pool.scratch(), _aside(engine), runner.checking():
                with self_check.probing(_row_counts(engine)):
                    _probe(engine, [ARM], chunk=PREFIX + ARM)  # no one-token chunk: all eager
        if runner.unchecked:  # never run unchecked: the library's layers need no check
            why = f"the pool's {engine.pool.free_blocks} free blocks cannot hold the check's probe"
            fallbacks.record("fused layer kernels (engine/fused/)", LIBRARY_LAYERS, why)
            runner.fused = False
    dispatch.capture_all(engine.pool, engine.cache, engine.pad_id)
    below = 0
    for bucket in sorted(dispatch.buckets):
        if dispatch.graphs is None:  # refused: eager from the first step
            break
        arms = max(below + 1, 2)
        if bucket not in dispatch.graphs.checked and _room(engine, arms, grow=False):
            with engine.pool.scratch(), _aside(engine):
                _probe(engine, [2 - i % 2 for i in range(arms)], chunk=1)
        below = bucket


def _quantised_checks(model) -> bool:
    """Whether a quantised layer computes through self-checked kernels (CUDA) not probed yet."""
    for module in model.modules():
        run = getattr(getattr(module, "fused", None), "run", None)
        if isinstance(run, self_check.SelfCheckedRun) and not run.probed:
            return True
    return False


def _row_counts(engine) -> list[int]:
    """Row counts whose kernels get verdicts: powers of two up to the most rows the engine's
    memory reserve counts for one step (its prefill budget or its decode rows:
    `reservation.check_margin_bytes`), that count, and every bucket (a row cap raised later
    captures more). A kernel met only past them is checked at its first call."""
    decode = engine.max_rows or engine.static_dispatch.buckets[-1]
    most = engine.runner.padded(max(engine.prefill_tokens, decode))
    counts, rows = {most, *BUCKETS, *engine.static_dispatch.buckets}, 1
    while rows < most:
        counts.add(rows)
        rows *= 2
    return sorted(counts)


def _room(engine, arms: int, grow: bool = True) -> bool:
    """Whether the free blocks hold a probe: its prefix and a block per arm; with `grow`, a pool
    that grows with the work submitted (`max_batch_tokens` None: on CPU) grows by what it lacks
    (graphs are CUDA's, whose pool never grows)."""
    lacking = engine.pool.blocks_for(PREFIX) + arms - engine.pool.free_blocks
    if lacking > 0 and grow and engine.max_batch_tokens is None:
        engine.pool.grow(engine.pool.num_blocks + lacking)
        return True
    return lacking <= 0


@contextmanager
def _aside(engine):
    """The engine's scheduler, rows, request numbering and statistics set aside for the
    duration, and fresh ones in their place (the probe's)."""
    kept = engine.scheduler, engine._rows, engine._builder, engine.stats
    engine._rows, engine._builder, engine.stats = {}, req.Builder(), EngineStats()
    try:
        yield
    finally:
        engine.scheduler, engine._rows, engine._builder, engine.stats = kept


def _probe(engine, suffixes: list[int], chunk: int) -> None:
    """Fork `PREFIX` random tokens into one arm per entry of `suffixes` (that many random tokens
    each), one greedy token each, and step the engine until they finish; prefill in chunks of
    `chunk` tokens, every arm's first chunk in one step."""
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(engine.vocab_size, (PREFIX + sum(suffixes),), generator=gen).tolist()
    cuts = [PREFIX]
    for n in suffixes:
        cuts.append(cuts[-1] + n)
    arms = [ids[a:b] for a, b in zip(cuts, cuts[1:])]
    params = SamplingParams(max_new_tokens=1)
    engine.scheduler = Scheduler(
        engine.pool,
        max_rows=None,
        max_step_tokens=PREFIX + sum(suffixes),
        chunk=chunk,
        reserve=False,
    )
    request = ForkRequest(ids[:PREFIX], arms, params)
    groups, rows = req.fork_groups(engine._builder, request, [params] * len(arms), None, False)
    for group in groups:
        engine.scheduler.add(group)
    engine._rows.update({row.id: row for row in rows})
    while engine.busy:
        engine.step()
