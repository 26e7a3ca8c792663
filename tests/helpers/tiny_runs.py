"""Tiny checkpoints on disk for end-to-end `nudge run` tests, and reading a run's outputs.

A tiny random model almost never writes its family's think-close marker, so B would never close
and no arm would run. `save_tiny_checkpoint(..., close_boost=a)` scales the lm_head row of the
think-close token (a single token in the qwen3 and gemma4 tiny vocabularies) by `a`, which makes
the model close its thinking at some positions and not others. This is a test fixture, not
product behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from nudgeability.models.families import get_family
from nudgeability.models.tiny import tiny_model
from nudgeability.models.tiny_tokenizers import tiny_tokenizer

# tiny model architecture -> the family of the tiny tokenizer it pairs with
PAIRS = {"qwen3": "qwen3", "glm4": "glm_z1", "gemma4": "gemma4", "llama": "chatml"}


def save_tiny_checkpoint(
    directory: Path, arch: str, *, seed: int = 0, close_boost: float | None = None
) -> Path:
    """Save a tiny `arch` model with its paired tiny tokenizer to `directory`; return it."""
    family_name = PAIRS[arch]
    tokenizer = tiny_tokenizer(family_name)
    model = tiny_model(arch, seed=seed)
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

    from nudgeability.splice.cli import main

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
