"""The project's one GPU check: every section, in turn, inside one time budget, as one table.

The runner, which benchmarks/gpu_check.py calls once it has made the package importable.

Each section is a module of this folder (nudge_run.py first: `nudge run` itself; quant.py,
engine.py, plan.py, fused.py, invariant.py, paged.py) and exposes
`section(deadline, dry_run=False, progress=None) -> list[Row]`, the rows it measured (`progress`,
if a section calls it, gets its rows so far after each part); `deadline` is a
`time.monotonic()` value (the one clock of every section), after which a section stops and says,
in a row, what it skipped. The budget is split evenly among the sections still to run, so that a
slow first section cannot starve the next. The last rows list every fallback the run took
(`nudgeability.util.fallbacks.taken()`), and before them every engine option a part took other
than the run's (engine_inputs.py `make_engine`: each engine is `nudge run`'s). The table goes to RESULTS.md's "GPU check" section and,
when the environment names an output folder (`$OUT`, as on a lent device machine), to
`$OUT/gpu_check.md` after each section, so that the figures come back even if the run is cut short.
`--dry-run` runs every section on CPU with stand-ins (tiny random models of models/testing).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.util
import os
import time
import traceback
from functools import partial
from pathlib import Path

# name -> module; each section's module owns its own measurements.
SECTIONS = {
    "run": "benchkit.gpu.nudge_run",
    "quant": "benchkit.gpu.quant",
    "engine": "benchkit.gpu.engine",
    "plan": "benchkit.gpu.plan",
    "fused": "benchkit.gpu.fused",
    "invariant": "benchkit.gpu.invariant",
    "paged": "benchkit.gpu.paged",
}
Row = tuple[str, str]  # (check, result); a result that begins "skipped" or "failed" says so


def triton_refusal(what: str, dry_run: bool, available: bool) -> list[Row] | None:
    """The one row of a Triton section that cannot run here (no CUDA device off a dry run,
    Triton missing, a dry run outside Triton's interpreter), or None where it can."""
    import torch

    if not dry_run and not torch.cuda.is_available():
        return [(f"{what} on CUDA", "skipped: no CUDA device (use --dry-run on CPU)")]
    if not available:
        return [(what, "skipped: Triton does not import")]
    if dry_run and os.environ.get("TRITON_INTERPRET") != "1":
        return [(what, "skipped: the dry run needs TRITON_INTERPRET=1")]
    return None


def _device_line(dry_run: bool) -> str:
    import torch

    if dry_run:
        return f"torch {torch.__version__}; dry run on CPU with stand-ins (no figure is a GPU's)"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__}; no CUDA device"
    props = torch.cuda.get_device_properties(0)
    return (
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, {props.name} "
        f"(SM {props.major}{props.minor}, {props.total_memory / 2**30:.0f} GiB)"
    )


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def table(rows: list[tuple[str, str, str]]) -> str:
    """The one Markdown table: section, check, result."""
    lines = ["| section | check | result |", "|---|---|---|"]
    lines += [f"| {_cell(s)} | {_cell(c)} | {_cell(r)} |" for s, c, r in rows]
    return "\n".join(lines)


def derived_rows() -> list[tuple[str, str, str]]:
    """The engine options the parts took other than `nudge run`'s, each with its reason."""
    from .engine_inputs import DERIVED

    if not DERIVED:
        return [("engines", "options other than nudge run's", "none")]
    return [("engines", f"derived: {options}", why) for options, why in DERIVED]


def fallback_rows() -> list[tuple[str, str, str]]:
    from nudgeability.util import fallbacks

    taken = fallbacks.taken()
    if not taken:
        return [("fallbacks", "fallbacks taken", "none")]
    return [("fallbacks", f.path, f"ran {f.used}: {f.reason}") for f in taken]


def run(names: list[str], budget_s: float, *, dry_run: bool = False, how: str = "installed") -> str:
    """Run the named sections within `budget_s` seconds; the header line and the table. `how`:
    where `nudgeability` came from (benchmarks/gpu_check.py's bootstrap)."""
    import torch

    torch.manual_seed(0)
    start = time.monotonic()
    head = [_device_line(dry_run), f"nudgeability: {how}.", ""]
    rows: list[tuple[str, str, str]] = []
    for index, name in enumerate(names):
        left = budget_s - (time.monotonic() - start)
        deadline = time.monotonic() + left / (len(names) - index)
        began = time.monotonic()

        progress = partial(_save_progress, head, tuple(rows), name)
        module = importlib.import_module(SECTIONS[name])
        try:
            got = module.section(deadline, dry_run=dry_run, progress=progress)
        except Exception:  # a failing section must not cost the others their figures
            got = [("section", "failed: " + traceback.format_exc().strip().splitlines()[-1])]
        rows += [(name, check, result) for check, result in got]
        rows.append((name, "section time", f"{time.monotonic() - began:.0f} s"))
        _save_partial("\n".join(head) + "\n" + table(rows))
    rows += derived_rows() + fallback_rows()
    text = "\n".join(head) + "\n" + table(rows)
    _save_partial(text)
    return text


def _save_progress(head: list[str], before: tuple, name: str, part_rows: list[Row]) -> None:
    """The table so far, with section `name`'s rows up to its last part: saved in case the run
    is cut short inside a later part."""
    rows = list(before) + [(name, check, result) for check, result in part_rows]
    _save_partial("\n".join(head) + "\n" + table(rows))


def _save_partial(text: str) -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_check.md").write_text(text + "\n", encoding="utf-8")


def main(argv: list[str] | None = None, how: str = "installed") -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append")
    # the whole script within 8 minutes of a lent device, the sections' model builds and the
    # interpreter's start included: a section out of time says which parts it skipped, and
    # `--only` gives one section the whole budget
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for all sections")
    parser.add_argument(
        "--dry-run", action="store_true", help="every section on CPU with tiny stand-ins"
    )
    args = parser.parse_args(argv)
    names = args.only or list(SECTIONS)
    text = run(names, args.budget, dry_run=args.dry_run, how=how)
    print(text)
    if not args.dry_run:
        from ..results import write_section

        write_section("GPU check (benchmarks/gpu_check.py)", text)
    return 0
