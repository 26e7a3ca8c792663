"""The project's one GPU check: every section, in turn, inside one time budget.

    python benchmarks/gpu_check.py                 # all sections, 450 s in all
    python benchmarks/gpu_check.py --only quant    # one section
    python benchmarks/gpu_check.py --budget 300

Each section lives in its own module beside this one and exposes `section(deadline) -> str`, the
Markdown of what it measured; it stops early when `time.monotonic()` passes `deadline` and says
what it skipped. The budget is split evenly among the sections still to run, so that a slow first
section cannot starve the next. The result goes to RESULTS.md's "GPU check" section and, when the
environment names an output folder (`$OUT`, as on a lent device machine), to `$OUT/gpu_check.md`
as well, so that the figures come back even if the run is cut short.

It needs only what the GPU image carries (torch, Triton, transformers, numba): the sections build
their layers and models from this repository's own code, with random weights.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# name -> module; each section's module owns its own measurements.
SECTIONS = {"quant": "gpu_quant", "engine": "gpu_engine"}


def _device_line() -> str:
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__}; no CUDA device"
    props = torch.cuda.get_device_properties(0)
    return (
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, {props.name} "
        f"(SM {props.major}{props.minor}, {props.total_memory / 2**30:.0f} GiB)"
    )


def run(names: list[str], budget_s: float) -> str:
    """Run the named sections within `budget_s` seconds; the Markdown of all of them."""
    start = time.monotonic()
    parts = [_device_line(), ""]
    for index, name in enumerate(names):
        left = budget_s - (time.monotonic() - start)
        deadline = time.monotonic() + left / (len(names) - index)
        began = time.monotonic()
        try:
            body = importlib.import_module(SECTIONS[name]).section(deadline)
        except Exception:  # a failing section must not cost the others their figures
            body = "FAILED:\n\n```\n" + traceback.format_exc() + "```"
        parts.append(f"### {name} ({time.monotonic() - began:.0f} s)\n\n{body.strip()}\n")
        _save_partial("\n".join(parts))
    return "\n".join(parts)


def _save_partial(text: str) -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_check.md").write_text(text + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all sections")
    args = parser.parse_args(argv)
    names = args.only or list(SECTIONS)
    text = run(names, args.budget)
    print(text)
    from _results import write_section

    write_section("GPU check (benchmarks/gpu_check.py)", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
