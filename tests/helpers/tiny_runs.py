"""Tiny checkpoints on disk for end-to-end `nudge run` tests, and reading a run's outputs.

A tiny random model almost never writes its family's think-close marker, so B would never close
and no arm would run. Two test-fixture edits of the output head (not product behaviour):

- `close_boost=a` scales the lm_head row of a single-token think-close (qwen3, gemma4) by `a`.
- `close_push=a` works for any marker, one token or several (GLM-Z1's `<`,`/`,`th`,`ink`,`>`,
  ChatML's `</`,`th`,`ink`,`>`): it raises the first marker token by about `a` logits in an
  average reasoning context (a direction orthogonal to the context right after the prompt, so the
  model first writes a few tokens), and chains the rest: marker token k+1 gains about
  `CLOSE_CHAIN` logits in the contexts that end with marker tokens 0..k. The directions are the
  final hidden states the model itself computes on StrategyQA's with-tool prompts (seed-0 draw), so
  whether and where a base closes still depends on the problem.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import torch

from nudgeability.models.families import get_family
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer

# tiny model architecture -> the family of the tiny tokenizer it pairs with
PAIRS = {"qwen3": "qwen3", "glm4": "glm_z1", "gemma4": "gemma4", "llama": "chatml"}
# a manifest's `experiment` (less its model) for a greedy StrategyQA run with the default seed
GREEDY_STRATEGYQA = {"task": "strategyqa", "decoding": "greedy", "seeds": [0]}


CLOSE_CHAIN = 15.0


def _last_hidden(model, sequences: list[list[int]], every: bool = False) -> torch.Tensor:
    """Final (normed) hidden states: at the last position of each sequence, or `every` position."""
    with torch.no_grad():
        states = [model.model(torch.tensor([s])).last_hidden_state[0] for s in sequences]
    return torch.cat(states) if every else torch.stack([h[-1] for h in states])


def push_towards_close(model, family, strength: float) -> None:
    """Edit `model`'s output head in place as `close_push` says (module docstring)."""
    from nudgeability.splice.experiment.prompts import render
    from nudgeability.splice.tasks import get_task, sample_problems

    task = get_task("strategyqa")
    prompts = [render(family, *task.with_tool(p)) for p in sample_problems(task.load(), 6, 0)]
    head, close = model.get_output_embeddings().weight, family.think_close_ids
    after_prompt = _last_hidden(model, prompts).mean(0)
    average = _last_hidden(model, prompts, every=True).mean(0)
    away = average - average.dot(after_prompt) / after_prompt.dot(after_prompt) * after_prompt
    with torch.no_grad():
        head[close[0]] += strength * away / away.dot(away)
        for k in range(1, len(close)):
            shift = _last_hidden(model, [p + close[:k] for p in prompts]).mean(0) - after_prompt
            head[close[k]] += CLOSE_CHAIN * shift / shift.dot(shift)


def save_tiny_checkpoint(
    directory: Path,
    arch: str,
    *,
    seed: int = 0,
    close_boost: float | None = None,
    close_push: float | None = None,
) -> Path:
    """Save a tiny `arch` model with its paired tiny tokenizer to `directory`; return it."""
    family_name = PAIRS[arch]
    tokenizer = tiny_tokenizer(family_name)
    model = tiny_model(arch, seed=seed)
    if close_push is not None:
        push_towards_close(model, get_family(family_name, tokenizer), close_push)
    if close_boost is not None:
        close_ids = get_family(family_name, tokenizer).think_close_ids
        if len(close_ids) != 1:
            raise ValueError(
                f"{family_name}: the think-close marker spans {len(close_ids)} tokens; cannot boost it"
            )
        with torch.no_grad():
            model.get_output_embeddings().weight[close_ids[0]] *= close_boost
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def nudge_run_args(
    model=None,
    out=None,
    *,
    task: str | None = "strategyqa",
    max_new_tokens: str | None = "16,8",
    quiet: bool = True,
    report: bool = False,
    workers: int | None = 1,
    **flags,
) -> list[str]:
    """The argument list of `nudge run`, as every test writes it: the tests' defaults (StrategyQA,
    budgets 16,8, --quiet, --no-report: the runner's tests leave the stats to tests/stats, and
    `report=True` keeps the report; `--workers 1`: one process, whose units the tests name, on
    any core count; `workers=None` takes the automatic count, tests/splice/run/test_workers.py)
    and each flag given, `chunk_size=1` -> `--chunk-size 1` (True: the flag
    alone; None or False: left out). `model` None runs the embedded SmolLM2."""
    named = {"model": model, "task": task, "max_new_tokens": max_new_tokens, **flags}
    named.update(workers=workers, out=out)
    argv = ["run"]
    for name, value in named.items():
        if value is None or value is False:
            continue
        argv.append("--" + name.replace("_", "-"))
        if value is not True:
            argv.append(str(value))
    return argv + (["--quiet"] if quiet else []) + ([] if report else ["--no-report"])


def read_records(out: Path) -> list[dict]:
    """The records of a finished run directory, in file order."""
    text = (Path(out) / "records.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [
        json.loads(line) for line in text[:-1].split("\n")
    ]  # not splitlines: U+2028 may be in a text


def run_nudge(argv: list[str]) -> tuple[int, str]:
    """Run the `nudge` CLI in this process; (exit status, what it wrote to stderr)."""
    import contextlib
    import io

    from nudgeability.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main([str(arg) for arg in argv])
    return status, err.getvalue()


def run_verify(*argv) -> tuple[int, list[str]]:
    """Run `nudge verify ARGV` in this process: (exit status, the lines it printed to stdout)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status, _ = run_nudge(["verify", *argv])
    return status, out.getvalue().splitlines()


def manifest_without_commit(out: Path) -> dict:
    """A run's manifest minus `git_commit`: the checkout these tests run in may gain a commit
    between two runs of one test, which changes nothing else."""
    manifest = json.loads((Path(out) / "manifest.json").read_text(encoding="utf-8"))
    manifest.pop("git_commit")
    return manifest


def kill_when(command: list[str], ready, timeout: float = 600, env: dict | None = None) -> None:
    """Start `command`; SIGKILL it as soon as `ready()` holds. Fails if it finishes first."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise AssertionError(
                f"the run ended (status {process.returncode}) before the kill point: "
                f"{process.stderr.read().decode()[-2000:]}"
            )
        assert time.monotonic() < deadline, "kill point never reached"
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()


def forge_record(run: Path, part: Path, target: str, record: dict) -> None:
    """A forger's edit: the line `target` replaced by `record` (written as the runner writes a
    line) in `part` and in the run's records.jsonl, and the manifest's seal of both recomputed here
    with hashlib, so that only a replay can find it."""
    line = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    for path in (part, run / "records.jsonl"):
        path.write_text(path.read_text(encoding="utf-8").replace(target, line), encoding="utf-8")
    manifest = json.loads((run / "manifest.json").read_text())
    records = (run / "records.jsonl").read_bytes()
    manifest["seal"]["records"]["sha256"] = hashlib.sha256(records).hexdigest()
    manifest["seal"]["parts"][part.name] = hashlib.sha256(part.read_bytes()).hexdigest()
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
