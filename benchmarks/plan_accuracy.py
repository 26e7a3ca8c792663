"""`nudge plan` against the runs it estimates: the estimate, then the run itself, side by side.

    python benchmarks/plan_accuracy.py                       # the demo, and the MuSiQue demo
    python benchmarks/plan_accuracy.py --no-write -- --task strategyqa --n 4   # one case
    python benchmarks/plan_accuracy.py --from-run            # also with lengths from the run

For each case (a `nudge run` command line), in fresh processes: `nudge plan <args> --json`, then
`nudge run <args> --no-report --quiet --out <tmp>` timed whole, then, with `--from-run`, `nudge
plan <args> --from-run <tmp> --json` (the lengths measured on the run just made: what is left of
the error is the rates' and the schedule's). The table gives each estimate, the measured wall
time and their ratio; the issue's bar is within 30%. Run it alone on the machine (timed
figures). Writes its section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchkit.results import publish

MAIN = "from nudgeability.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
CASES = (["--task", "strategyqa", "--n", "8"], ["--task", "musique", "--n", "3"])
SECTION = "nudge plan against the runs it estimates (benchmarks/plan_accuracy.py)"


def nudge(*args: str) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", MAIN, *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"nudge {' '.join(args[:3])}… failed: {done.stderr[-800:]}")
    return time.monotonic() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-run", action="store_true", help="also plan from the run's records")
    parser.add_argument("--section", default=SECTION)
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="after --: one case's run flags")
    options = parser.parse_args()
    cases = [[a for a in options.args if a != "--"]] if options.args else list(CASES)
    table = [
        "| `nudge run` flags | plan took | estimate | measured wall | estimate / wall "
        "| from the run's lengths |",
        "|---|---|---|---|---|---|",
    ]
    for args in cases:
        took, out = nudge("plan", *args, "--json")
        estimate = json.loads(out)["wall_seconds"]
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = str(Path(tmp) / "run")
            wall, _ = nudge("run", *args, "--no-report", "--quiet", "--out", run_dir)
            again = "—"
            if options.from_run:
                _, out = nudge("plan", *args, "--from-run", run_dir, "--json")
                calibrated = json.loads(out)["wall_seconds"]
                again = f"{calibrated:.1f} s ({calibrated / wall:.2f})"
        print(args, took, estimate, wall, again, file=sys.stderr)
        table.append(
            f"| `{' '.join(args)}` | {took:.0f} s | {estimate:.1f} s | {wall:.1f} s "
            f"| {estimate / wall:.2f} | {again} |"
        )
    body = "\n".join(
        [
            "Each case in fresh processes: `nudge plan … --json`, then the run it estimates, "
            "timed whole (`--no-report --quiet`), then with `--from-run` the plan again from the "
            "run's own records. One machine, nothing else running.",
            "",
            *table,
        ]
    )
    publish(options.section, body, write=not options.no_write)


if __name__ == "__main__":
    main()
