"""The two ways the benchmarks run `nudge bench`'s splice workload (costs/splice_workload.py):
`run_fork` forks it on the engine, `run_hf_per_arm` runs HF's greedy reference on each arm's whole
prompt; `timed` is the wall clock of one call; `workload_parser` the workload's options."""

from __future__ import annotations

import argparse
import time

from nudgeability.costs.splice_workload import SpliceWorkload, hf_generate
from nudgeability.engine import SamplingParams


def run_fork(engine, w: SpliceWorkload, new: int) -> list[list[int]]:
    """The engine's arms of `w`, `new` greedy tokens each, EOS ignored."""
    arms = engine.fork(w.prefix, w.suffixes, SamplingParams(max_new_tokens=new, ignore_eos=True))
    return [a.token_ids for a in arms]


def run_hf_per_arm(model, w: SpliceWorkload, new: int) -> list[list[int]]:
    """HF `generate()` on each arm's full prompt alone, `new` tokens (EOS suppressed)."""
    return [hf_generate(model, w.prefix + s, new) for s in w.suffixes]


def timed(fn, *args):
    """(seconds, result) of `fn(*args)`."""
    t0 = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t0, result


def workload_parser(description: str) -> argparse.ArgumentParser:
    """A benchmark's parser with the splice workload's options, --arms 12, --prefix 1024 and
    --new 48 (the workload of benchmarks/README.md), and --no-write; the script adds its own."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--arms", type=int, default=12)
    ap.add_argument("--prefix", type=int, default=1024)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    return ap
