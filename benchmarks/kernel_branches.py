"""Which BLAS code paths keep a row's bits when the batch changes: the other CPUs a run may meet.

    python benchmarks/kernel_branches.py [--threads 1]

MKL picks its code path by the CPU it finds; `MKL_CBWR` forces one of its branches (COMPATIBLE,
SSE4_2, AVX, AVX2, AVX512 where the CPU has it), which is how this machine stands in for an AMD or
an older Intel (issue 32: a Zen 4 failed 19 bitwise schedule-invariance tests that pass here). For
each branch, in a fresh process (the variable is read once, when MKL starts), on SmolLM2-sized
fp32 shapes at `--threads` torch threads:

- **linear, by M**: the last row of `F.linear` on M rows against the same row among 64: the M
  values (1..64) whose row differs;
- **linear, fixed tile**: a row at a random position of a call of exactly T rows (other rows
  random) against the same row first in a call of T rows padded with zeros; how many of 6 trials
  differ, per T. A fixed shape is what a by-construction invariant linear would call;
- **attention, by query count**: the last query of the CPU flash kernel (SDPA) on n query rows
  against the same query among 128 (200 keys): how many n in 1..128 differ.

Not timed: it may run beside other work. Writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from nudgeability.bench.results import write_section

BRANCHES = ("", "AVX512", "AVX2", "AVX", "SSE4_2", "COMPATIBLE")
SHAPES = ((1536, 576), (576, 1536), (49152, 576))  # SmolLM2: up/gate, down, the LM head
TILES = (8, 16, 32, 64)

PROBE = r"""
import json, sys, torch, torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1])); torch.manual_seed(0)
shapes, tiles = json.loads(sys.argv[2]), json.loads(sys.argv[3])
out = {"linear_by_m": {}, "linear_tile": {}, "sdpa": 0}
for n_out, k_in in shapes:
    w = torch.randn(n_out, k_in); x = torch.randn(64, k_in); ref = F.linear(x, w)
    out["linear_by_m"][f"{n_out}x{k_in}"] = [
        m for m in range(1, 65) if not torch.equal(F.linear(x[:m], w)[m - 1], ref[m - 1])]
    for t in tiles:
        bad = 0
        for trial in range(6):
            chunk = x[torch.randperm(64)[:t]].clone(); p = trial * 5 % t; chunk[p] = x[trial]
            alone = F.linear(torch.cat([x[trial][None], torch.zeros(t - 1, k_in)]), w)[0]
            bad += not torch.equal(F.linear(chunk, w)[p], alone)
        out["linear_tile"][f"{n_out}x{k_in} T={t}"] = bad
q = torch.randn(1, 1, 128, 64); k = torch.randn(1, 1, 200, 64); v = torch.randn(1, 1, 200, 64)
full = F.scaled_dot_product_attention(q, k, v)
out["sdpa"] = sum(not torch.equal(F.scaled_dot_product_attention(q[:, :, :n], k, v)[0, 0, n - 1],
                                  full[0, 0, n - 1]) for n in range(1, 129))
print(json.dumps(out))
"""


def probe(branch: str, threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if branch:
        env["MKL_CBWR"] = branch
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(threads), json.dumps(SHAPES), json.dumps(TILES)],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout)


def _ms(values: list[int]) -> str:
    if not values:
        return "none"
    return (
        f"{len(values)} of 64 ({', '.join(map(str, values[:8]))}{', …' if len(values) > 8 else ''})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for branch in BRANCHES:
        got = probe(branch, args.threads)
        name = branch or "(unset: this CPU's own)"
        if "error" in got:
            rows.append(f"| {name} | {got['error']} | | |")
            continue
        by_m = "; ".join(f"{s}: {_ms(v)}" for s, v in got["linear_by_m"].items())
        tiles = ", ".join(
            f"T={t}: {sum(v for key, v in got['linear_tile'].items() if key.endswith(f'T={t}'))}"
            for t in TILES
        )
        rows.append(f"| {name} | {by_m} | {tiles} | {got['sdpa']} of 128 |")
        print(rows[-1], flush=True)
    body = (
        f"fp32, {args.threads} torch thread(s). A row's bits against the same row in another batch, "
        "under each MKL_CBWR branch (module docstring).\n\n"
        "| MKL_CBWR | linear: M whose last row differs from M = 64 | linear, fixed tile of T rows: "
        "trials (of 18) whose row differs | SDPA: query counts whose last row differs |\n"
        "|---|---|---|---|\n" + "\n".join(rows)
    )
    write_section(
        f"Kernel branches at {args.threads} thread(s) (benchmarks/kernel_branches.py)", body
    )


if __name__ == "__main__":
    main()
