"""The one real-model run several end-to-end tests check: `nudge run --resolve` on the embedded
SmolLM2 (tests/splice/conftest.py `smollm2_streamed_run` builds it once a session).

Two StrategyQA problems in two chunks, greedy: both bases call a tool within 70 tokens, and so do
the second one's conf and doubt arms; both oracle bases ask the expert; two consistency samples a
problem, so the run stores every uncertainty signal. tests/splice/run/test_stream.py checks that the units schedule writes the
same files, test_resolve_smollm2.py that each resolution is HF `generate` on its full prompt, and
test_signals_e2e.py the grounded-nudge table's counts.
"""

from __future__ import annotations

from pathlib import Path

from helpers.tiny_runs import nudge_run_args, run_nudge

# RunConfig's fields (splice/run/config.py), less the model: the embedded SmolLM2
SMOLLM2_STREAMED = dict(
    task="strategyqa",
    n=2,
    chunk_size=1,
    conditions=("conf", "doubt", "oracle"),
    max_new_tokens=80,
    max_new_tokens_arm=48,
    resolve=True,
    consistency_samples=2,
)


def run_streamed(out: Path) -> None:
    """`nudge run` of SMOLLM2_STREAMED into `out`, as a user types it."""
    flags = dict(SMOLLM2_STREAMED, conditions=",".join(SMOLLM2_STREAMED["conditions"]))
    budgets = f"{flags.pop('max_new_tokens')},{flags.pop('max_new_tokens_arm')}"
    status, err = run_nudge(nudge_run_args(out=out, max_new_tokens=budgets, **flags))
    assert status == 0, err
