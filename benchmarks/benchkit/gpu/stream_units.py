"""The GPU check's stream against by-unit rows (in the `nudge run` section, nudge_run.py): the
schedule `nudge run` settles on the card, with its needle on the run's engine
(splice/run/schedule.py, engine/invariant/cuda_needle.py), then one campaign-shaped run (NT, B,
oracle_B and the arms of `PROBLEMS` StrategyQA problems) computed twice on that engine, on the
stream and by unit: both wall times and whether the two records.jsonl have the same md5. Where
the needle holds the engine computes with its batch-invariant kernels and the two must agree
byte for byte; where it does not, the row says which schedule the run took and why.

On `--dry-run` the same on CPU (the CPU's needle, its invariant products), budgets 16 and 8.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from .engine_inputs import Row

PROBLEMS = 4
BUDGETS = (512, 256)  # new tokens of a base and of an arm: small enough for the script's minutes
DRY_BUDGETS = (16, 8)


def rows(model: Path, root: Path, dry_run: bool) -> list[Row]:
    """The rows (module docstring) for the checkpoint in `model`, run directories under `root`."""
    from nudgeability.splice.run.config import RunConfig
    from nudgeability.splice.run.prepare import prepare
    from nudgeability.splice.run.runner import RunEngine, run
    from nudgeability.splice.run.schedule import choose_schedule
    from nudgeability.splice.run.shape import settle

    device = "cpu" if dry_run else "cuda"
    new, arm = DRY_BUDGETS if dry_run else BUDGETS
    config = RunConfig(
        model=str(model),
        task="strategyqa",
        n=1 if dry_run else PROBLEMS,
        max_new_tokens=new,
        max_new_tokens_arm=arm,
        device=device,
    )
    built = RunEngine(config, device)
    start = time.monotonic()
    shape = settle(
        config, device, None, workers=1, pool_rows=built.pool_rows, schedule=built.schedule
    )
    prepared = prepare(shape.config(config), loaded=built.loaded)
    chosen = shape.schedule or choose_schedule(prepared)
    needle = chosen.invariance
    ran = "no needle" if needle is None else f"batches {list(needle.batches)}"
    out: list[Row] = [
        (
            "schedule nudge run settles, needle on its engine",
            f"{chosen.name}: {chosen.why} ({ran}; {time.monotonic() - start:.0f} s, model included)",
        )
    ]
    digests, seconds = {}, {}
    for name in ("stream", "units"):
        where = root / f"schedule-{name}"
        start = time.monotonic()
        run(prepared, where, progress=False, schedule=name, engine=built.engine, shape=shape)
        seconds[name] = time.monotonic() - start
        digests[name] = hashlib.md5((where / "records.jsonl").read_bytes()).hexdigest()
    same = "identical" if digests["stream"] == digests["units"] else "DIFFERENT"
    what = f"stream against by unit, strategyqa n={config.n}, budgets {new},{arm}"
    out.append(
        (
            what,
            f"records {same} (md5 {digests['stream'][:12]} / {digests['units'][:12]}); "
            f"stream {seconds['stream']:.1f} s, by unit {seconds['units']:.1f} s",
        )
    )
    if built.engine is not None:
        built.engine.runner.disengage()
    return out
