"""Whole `nudge run` processes side by side: today's code against earlier commits, alternated.

    python benchmarks/whole_runs.py --rounds 2 -- --task strategyqa --n 8 --no-report

Each variant is a fresh process running `nudge run <args> --out <tmp>`: an earlier commit's own
code (extracted with `git archive`, run through a one-line `nudgeability` package whose `__path__`
is that tree, as bench/former.py does for the engine), today's default (one forked worker per
core, splice/run/workers.py), and today's `--workers 1` (one process on every core). The
variants alternate round by round; the table gives the median wall time, the peak memory of
the whole process tree sampled every 0.2 s, two ways: the sum of the processes' resident sizes
(RSS: a page shared by forked workers counts once per process) and the sum of their
proportional set sizes (PSS, /proc/PID/smaps_rollup: a shared page split between the processes
that map it, so the tree's PSS is what it holds in RAM), and the md5 of records.jsonl.
Run it alone on the machine (timed figures). Writes its section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import psutil

from nudgeability.bench.results import publish

REPO = Path(__file__).resolve().parents[1]
# where `main` lived at each commit: the CLI moved to cli/ in issue 30
OLD_MAIN = "from nudgeability.splice.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
NEW_MAIN = "from nudgeability.cli import main; import sys; sys.exit(main(sys.argv[1:]))"


def old_tree(commit: str, root: Path) -> Path:
    """A folder whose `nudgeability` package is the code of `commit`, unchanged."""
    archive = root / f"{commit}.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(REPO), "archive", commit], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(root / commit / "checkout", filter="data")
    package = root / commit / "path" / "nudgeability"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"__path__ = [{str(root / commit / 'checkout')!r}]\n")
    return root / commit / "path"


def pss(pid: int) -> int:
    """A process's proportional set size in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_peaks(proc: subprocess.Popen, every: float) -> dict[str, int]:
    """Until `proc` ends, sampled each `every` seconds: the peaks of its process tree's summed
    RSS and summed PSS (bytes), the most processes in the tree, and how many held the PSS peak."""
    top = psutil.Process(proc.pid)
    out = {"rss": 0, "pss": 0, "processes": 0, "at_peak": 0}
    while proc.poll() is None:
        try:
            procs = [top, *top.children(recursive=True)]
            out["rss"] = max(out["rss"], sum(p.memory_info().rss for p in procs if p.is_running()))
            now = sum(pss(p.pid) for p in procs)
            if now > out["pss"]:  # how many processes held the peak: before or after a fork
                out["pss"], out["at_peak"] = now, len(procs)
            out["processes"] = max(out["processes"], len(procs))
        except psutil.Error:
            pass
        time.sleep(every)
    return out


def timed(command: list[str], env: dict | None, cwd: Path) -> tuple[float, int, int]:
    """Wall seconds, peak RSS and peak PSS (bytes, each summed over the process tree) of
    `command`."""
    start = time.monotonic()
    proc = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    peaks = tree_peaks(proc, 0.2)
    peak, peak_pss = peaks["rss"], peaks["pss"]
    seconds = time.monotonic() - start
    if proc.returncode:
        raise RuntimeError(f"{command[:3]}… failed: {proc.stderr.read().decode()[-800:]}")
    return seconds, peak, peak_pss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--warmup", action="store_true", help="one uncounted round first (caches, page cache)"
    )
    parser.add_argument("--old", default="970209c,397192c", help="earlier commits, comma-separated")
    parser.add_argument("--section", default="Whole runs: today against earlier commits")
    parser.add_argument(
        "--drop",
        default="970209c:--no-report",
        help="COMMIT:FLAG,...: flags an earlier commit does not know (it had no report step)",
    )
    parser.add_argument(
        "--no-single", action="store_true", help="leave out today's `--workers 1` variant"
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="after --: the nudge run flags")
    options = parser.parse_args()
    args = [a for a in options.args if a != "--"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        variants: dict[str, tuple[list[str], dict | None]] = {}
        dropped: dict[str, set[str]] = {}
        drop: dict[str, set[str]] = {}
        for item in filter(None, options.drop.split(",")):
            commit, flag = item.split(":")
            drop.setdefault(commit, set()).add(flag)
        for commit in options.old.split(","):
            path = old_tree(commit, root)
            env = {**os.environ, "PYTHONPATH": str(path)}
            moved = (path.parent / "checkout" / "cli" / "__init__.py").exists()
            variants[f"{commit} (its default)"] = (
                [sys.executable, "-c", NEW_MAIN if moved else OLD_MAIN],
                env,
            )
            dropped[f"{commit} (its default)"] = drop.get(commit, set())
        variants["today, default"] = ([sys.executable, "-c", NEW_MAIN], None)
        if not options.no_single:
            variants["today, --workers 1"] = ([sys.executable, "-c", NEW_MAIN], None)
        results: dict[str, list[tuple[float, int, int]]] = {name: [] for name in variants}
        digests: dict[str, str] = {}
        for r in range(-1 if options.warmup else 0, options.rounds):
            for i, (name, (prefix, env)) in enumerate(variants.items()):
                out = root / f"out-{r}-{i}"
                extra = ["--workers", "1"] if "workers" in name else []
                own = [a for a in args if a not in dropped.get(name, set())]
                command = [*prefix, "run", *own, *extra, "--out", str(out)]
                measured = timed(command, env, root)
                if r < 0:
                    continue
                results[name].append(measured)
                digests[name] = hashlib.md5((out / "records.jsonl").read_bytes()).hexdigest()
                print(name, results[name][-1], digests[name], file=sys.stderr)
    reference = statistics.median(run[0] for run in results[next(iter(variants))])
    table = [
        "| variant | median wall s | runs | × the first row | peak RSS GB (sum) | peak PSS GB (sum) "
        "| records.jsonl md5 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        wall = statistics.median(run[0] for run in runs)
        peak, peak_pss = (max(run[i] for run in runs) / 1e9 for i in (1, 2))
        table.append(
            f"| {name} | {wall:.1f} | {len(runs)} | {reference / wall:.2f}× | {peak:.2f} | "
            f"{peak_pss:.2f} | `{digests[name]}` |"
        )
    body = "\n".join(
        [
            f"`nudge run {' '.join(args)}`, whole processes, alternated over {options.rounds} "
            f"round(s){' after an uncounted one' if options.warmup else ''}; one machine, nothing "
            "else running. The first row's code is the reference of the ratio.",
            "",
            *table,
        ]
    )
    publish(options.section, body)


if __name__ == "__main__":
    main()
