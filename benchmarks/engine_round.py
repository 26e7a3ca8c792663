"""Every engine benchmark of issue 17, one after the other, each writing its RESULTS.md section.

    python benchmarks/engine_round.py            # the full round: run it alone on a quiet machine
    python benchmarks/engine_round.py --small    # a quick check that every script runs (no writes)

1. `fork_vs_generate.py`: P1/P2, the engine's wall time and decode step against their floor;
2. `decode_step.py`: aten operations per step against HF's, host time per step, the P1 profile;
3. `scaling.py`: time and memory as arms and prefix grow, and P4 memory against its floor.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FULL = [
    ["fork_vs_generate.py"],
    ["decode_step.py"],
    ["scaling.py"],
]
SMALL = [
    ["fork_vs_generate.py", "--arms", "2", "--prefix", "64", "--new", "4", "--rounds", "1"],
    ["decode_step.py", "--steps", "3", "--no-p1"],
    ["scaling.py", "--arms", "12", "--prefixes", "128", "--new", "4"],
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="tiny sizes, print only")
    args = ap.parse_args()
    for command in SMALL if args.small else FULL:
        argv = [sys.executable, str(HERE / command[0]), *command[1:]]
        if args.small:
            argv.append("--no-write")
        print("$", " ".join(argv[1:]), flush=True)
        subprocess.run(argv, cwd=HERE, check=True)


if __name__ == "__main__":
    main()
