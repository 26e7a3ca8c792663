"""The demo's whole run on today's code: `nudge run` at its default workers and at `--workers 1`.

    python benchmarks/demo_run.py                          # the demo, 2 rounds; writes its section
    python benchmarks/demo_run.py --rounds 1 --no-write    # print only
    python benchmarks/demo_run.py -- --task strategyqa --n 2 --no-report   # other run flags

Each variant is a fresh process running `nudge run <args> --out <tmp>` (default args: `--task
strategyqa --n 8 --no-report`): the default (one forked worker per core, splice/run/workers.py),
and `--workers 1` (one process on every core). The variants alternate round by round; the table
gives the median wall time, the peak memory of the whole process tree sampled every 0.2 s, two
ways: the sum of the processes' resident sizes (RSS: a page shared by forked workers counts once
per process) and the sum of their proportional set sizes (PSS, /proc/PID/smaps_rollup: a shared
page split between the processes that map it, so the tree's PSS is what it holds in RAM), and the
md5 of records.jsonl (the same for both: the workers change no record). Run it alone on the
machine (timed figures). Writes its section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchkit.memory import tree_peaks
from benchkit.results import publish

MAIN = "from nudgeability.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
DEMO = ["--task", "strategyqa", "--n", "8", "--no-report"]
SECTION = "Demo run: wall time and memory (benchmarks/demo_run.py)"


def timed(command: list[str], cwd: Path) -> tuple[float, int, int]:
    """Wall seconds, peak RSS and peak PSS (bytes, each summed over the process tree) of
    `command`."""
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peaks = tree_peaks(proc, 0.2)
    seconds = time.monotonic() - start
    if proc.returncode:
        raise RuntimeError(f"{command[:3]}… failed: {proc.stderr.read().decode()[-800:]}")
    return seconds, peaks["rss"], peaks["pss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--warmup", action="store_true", help="one uncounted round first (caches, page cache)"
    )
    parser.add_argument("--section", default=SECTION)
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="after --: the nudge run flags")
    options = parser.parse_args()
    args = [a for a in options.args if a != "--"] or DEMO
    variants = {"default workers": [], "--workers 1": ["--workers", "1"]}
    results: dict[str, list[tuple[float, int, int]]] = {name: [] for name in variants}
    digests: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for r in range(-1 if options.warmup else 0, options.rounds):
            for i, (name, extra) in enumerate(variants.items()):
                out = root / f"out-{r}-{i}"
                command = [sys.executable, "-c", MAIN, "run", *args, *extra, "--out", str(out)]
                measured = timed(command, root)
                if r < 0:
                    continue
                results[name].append(measured)
                digests[name] = hashlib.md5((out / "records.jsonl").read_bytes()).hexdigest()
                print(name, measured, digests[name], file=sys.stderr)
    table = [
        "| variant | median wall s | runs | peak RSS GB (sum) | peak PSS GB (sum) "
        "| records.jsonl md5 |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        wall = statistics.median(run[0] for run in runs)
        peak, peak_pss = (max(run[i] for run in runs) / 1e9 for i in (1, 2))
        table.append(
            f"| {name} | {wall:.1f} | {len(runs)} | {peak:.2f} | {peak_pss:.2f} "
            f"| `{digests[name]}` |"
        )
    body = "\n".join(
        [
            f"`nudge run {' '.join(args)}`, whole processes, alternated over {options.rounds} "
            f"round(s){' after an uncounted one' if options.warmup else ''}; one machine, nothing "
            "else running.",
            "",
            *table,
        ]
    )
    publish(options.section, body, write=not options.no_write)


if __name__ == "__main__":
    main()
