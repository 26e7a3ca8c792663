"""A probe script run once per oneDNN ISA, each in a fresh process: how this machine stands in for
older CPUs (`ONEDNN_MAX_CPU_ISA` is read once, when oneDNN starts). Shared by
benchmarks/onednn_products.py and benchmarks/cheaper_calls.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ISAS = ("", "AVX512_CORE", "AVX2", "AVX", "SSE41")  # "": the machine's own


def under_each_isa(probe: str, argument: str) -> dict[str, dict | str]:
    """`python -c probe argument` under each of ISAS (named "(native)" for the machine's own):
    its JSON output, or the tail of its error output where it failed."""
    results: dict[str, dict | str] = {}
    for isa in ISAS:
        env = {key: v for key, v in os.environ.items() if key != "ONEDNN_MAX_CPU_ISA"}
        if isa:
            env["ONEDNN_MAX_CPU_ISA"] = isa
        done = subprocess.run(
            [sys.executable, "-c", probe, argument], env=env, capture_output=True, text=True
        )
        name = isa or "(native)"
        results[name] = (
            json.loads(done.stdout) if done.returncode == 0 else done.stderr.strip()[-200:]
        )
    return results
