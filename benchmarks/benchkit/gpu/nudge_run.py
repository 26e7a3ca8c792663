"""The GPU check's first section: `nudge run` itself, as a user runs it, on checkpoints on disk.

    python benchmarks/gpu_check.py --only run [--budget 420]

A random-init model of Qwen3-0.6B's layer shape (28 layers, hidden 1024, 16 query / 8 KV heads of
128; Qwen3-8B's would take most of the budget to write and load twice) with the tiny Qwen3
tokenizer of models/testing (its vocabulary, so the LM head is small), written in bf16, and its
FP8 twin written by the package's own writer (models/quant/writers.py `write_fp8`, 128 x 128
blocks). The think-close token's LM-head row is scaled up so that a random model closes its
thinking and the arms run (a fixture edit, as tests/helpers/tiny_runs.py `close_boost`). Each is
run by the CLI (`nudgeability.cli.main`, `nudge run --device cuda`) on StrategyQA problems with
the paper's budgets (4,096 and 2,048 new tokens), and reported: its wall time, the manifest's
fallbacks, and **arm ≡ solo on its own records**: up to `SOLO_ARMS` whole arms (ones that keep
B's reasoning) replayed on the run's engine (splice/run/engine_build.py `run_engine`) each as a
prompt of its own, not a fork: the prompt, B's reasoning up to its cut and the arm's splice, with
the run's sampling settings, its tokens compared with the record's. On CUDA, where the engine's
kernels are not batch-invariant, a replay may part from its arm at a near-tie of the logits.
For the bf16 checkpoint, then, the schedule the run settles with its needle, and the stream
against by unit on that engine (stream_units.py).

On `--dry-run` the same on CPU on a tiny Qwen3 (models/testing), budgets 16 and 8.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import torch

from . import stream_units
from .engine_inputs import PAPER_BUDGETS, Row, free_memory

PROBLEMS = 2
DRY_PROBLEMS = 1  # the suite runs the dry run: one problem's NT, B and arms
SHAPE = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    num_hidden_layers=28,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    tie_word_embeddings=False,
)
CLOSE_BOOST = 3.0  # the think-close row x 3: random logits then pick it within a few tokens
DRY_CLOSE_BOOST = 2.6  # the tiny checkpoints' (tests/splice/rundir/test_assemble.py)
SOLO_ARMS = 4  # whole arms replayed alone per run


def write_checkpoints(root: Path, dry_run: bool) -> dict[str, Path]:
    """The bf16 checkpoint and its FP8 twin under `root`: {name: directory}."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from nudgeability.models.families import get_family
    from nudgeability.models.quant.writers import write_fp8
    from nudgeability.models.testing.tiny import tiny_config
    from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer

    tokenizer = tiny_tokenizer("qwen3")
    torch.manual_seed(0)
    if dry_run:
        config = tiny_config("qwen3", vocab_size=len(tokenizer))
    else:
        config = Qwen3Config(vocab_size=len(tokenizer), **SHAPE)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
    (close,) = get_family("qwen3", tokenizer).think_close_ids
    with torch.no_grad():
        model.get_output_embeddings().weight[close] *= DRY_CLOSE_BOOST if dry_run else CLOSE_BOOST
    bf16 = root / "bf16"
    model.save_pretrained(bf16)
    tokenizer.save_pretrained(bf16)
    block = (32, 32) if dry_run else (128, 128)  # the dry run's widths are not multiples of 128
    fp8 = write_fp8(model, root / "fp8", block_size=block, tokenizer=tokenizer)
    return {"bf16": bf16, "fp8": fp8}


def run_args(model: Path, out: Path, dry_run: bool) -> list[str]:
    """`nudge run` as a user types it."""
    budgets = "16,8" if dry_run else ",".join(map(str, PAPER_BUDGETS))
    device = "cpu" if dry_run else "cuda"
    n = DRY_PROBLEMS if dry_run else PROBLEMS
    return [
        "run", "--model", str(model), "--task", "strategyqa", "--n", str(n),
        "--max-new-tokens", budgets, "--device", device, "--workers", "1", "--out", str(out),
        "--quiet", "--no-report",
    ]  # fmt: skip


def nudge_run(argv: list[str]) -> tuple[int, str, float]:
    """The CLI in this process: (exit status, the end of its stderr, seconds)."""
    from nudgeability.cli import main

    err = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err):
        status = main(argv)
    return status, err.getvalue()[-400:], time.monotonic() - start


def arms_alone(argv: list[str], out: Path) -> str:
    """Whole arms of the run in `out` replayed alone (module docstring): how many agree."""
    from nudgeability.backends.base import EngineBackend
    from nudgeability.cli import build_parser, values_kept
    from nudgeability.cli.run_flags import config_from_args
    from nudgeability.splice.run.engine_build import run_engine
    from nudgeability.splice.run.prepare import prepare
    from nudgeability.splice.run.runner import RunEngine
    from nudgeability.splice.run.shape import settle
    from nudgeability.splice.run.units import UnitContext
    from nudgeability.splice.run.validation import resolve_device

    argv = values_kept(list(argv))
    config = config_from_args(build_parser(argv).parse_args(argv))
    # the shape the run settled (its manifest's chunk size), so that the plan is the run's, and
    # on CUDA the engine that settling builds (splice/run/shape.py), as `nudge run` takes it
    device = resolve_device(config.device)
    built = RunEngine(config, device)
    shape = settle(
        config, device, out, workers=1, pool_rows=built.pool_rows, schedule=built.schedule
    )
    prepared = prepare(shape.config(config), loaded=built.loaded)
    loaded, config = prepared.loaded, prepared.config
    engine = built.engine or run_engine(loaded.model, loaded.tokenizer, config)
    ctx = UnitContext(prepared, EngineBackend(engine))
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    bases = {(r["problem_id"], r["seed"]): r for r in records if r["condition"] == "B"}
    whole = {arm.code for arm in ctx.arms_of("B") if arm.edit is None}
    index = {problem.id: i for i, problem in enumerate(prepared.problems)}
    inputs, params, wanted = [], [], []
    for record in records:
        base = bases.get((record["problem_id"], record["seed"]))
        if record["condition"] not in whole or base is None or record.get("at") is not None:
            continue
        if base["boundary"] is None or len(inputs) == SOLO_ARMS:
            continue
        i = index[record["problem_id"]]
        ids = list(prepared.prompts[i].for_base("B")) + base["generated_ids"][: base["boundary"]]
        inputs.append(ids + list(prepared.splices[record["condition"]]))
        params.append(
            ctx.params(
                record["seed"], record["problem_id"], record["condition"], config.max_new_tokens_arm
            )
        )
        wanted.append(record["generated_ids"])
    # each arm a prompt of its own (no fork), all in one call: the replays take one decode's time
    alone = engine.generate(inputs, params) if inputs else []
    same = sum(list(a.token_ids) == w for a, w in zip(alone, wanted))
    compared = len(inputs)
    engine.runner.disengage()
    if not compared:
        return "no whole arm to replay (no B closed its thinking)"
    return f"{same}/{compared} whole arms' tokens equal to the arm replayed alone"


def _fallbacks(out: Path) -> str:
    from nudgeability.splice.rundir.manifest import read_manifest
    from nudgeability.splice.rundir.manifest_keys import FALLBACKS_KEY

    taken = read_manifest(out).data.get(FALLBACKS_KEY) or []
    if not taken:
        return "none"
    return "; ".join(f"{f.get('path')}: ran {f.get('used')} ({f.get('reason')})" for f in taken)


def section(deadline: float, *, dry_run: bool = False, progress=None) -> list[Row]:
    """The rows of this section (module docstring)."""
    if not dry_run and not torch.cuda.is_available():
        return [("nudge run on CUDA", "skipped: no CUDA device (use --dry-run on CPU)")]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        start = time.monotonic()
        checkpoints = write_checkpoints(root, dry_run)
        rows.append(("checkpoints written (bf16, FP8 twin)", f"{time.monotonic() - start:.0f} s"))
        for name, model in checkpoints.items():
            what = f"nudge run, {name} checkpoint, strategyqa n={DRY_PROBLEMS if dry_run else PROBLEMS}"
            if time.monotonic() > deadline:
                rows.append((what, "skipped: the section's time ran out"))
                continue
            out = root / f"run-{name}"
            argv = run_args(model, out, dry_run)
            status, err, seconds = nudge_run(argv)
            if status != 0:
                rows.append((what, f"failed: exit {status}: {' '.join(err.split())}"))
                continue
            records = (out / "records.jsonl").read_text().count("\n")
            rows.append((what, f"{seconds:.0f} s wall (model load included), {records} records"))
            rows.append((f"{what}: manifest fallbacks", _fallbacks(out)))
            rows.append((f"{what}: arm ≡ solo on its records", arms_alone(argv, out)))
            free_memory("cuda" if not dry_run else "cpu")
            if name == "bf16":  # the schedule, its needle, the stream against by unit
                rows.extend(stream_units.rows(model, root, dry_run))
                free_memory("cuda" if not dry_run else "cpu")
            if progress:
                progress(rows)
    return rows
