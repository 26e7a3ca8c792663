"""Shared helpers for the splice tests: small official-format data files written to tmp_path."""

from __future__ import annotations

import json

import pytest


def _musique_record(
    problem_id: str = "2hop__1_2",
    answer: str = "Paris",
    aliases: tuple[str, ...] = (),
    question: str = "Where?",
    paragraphs: int = 20,
) -> dict:
    """One record in the official MuSiQue-Ans key order."""
    return {
        "id": problem_id,
        "paragraphs": [
            {
                "idx": k,
                "title": f"Title {k}",
                "paragraph_text": f"Text {k}.",
                "is_supporting": k < 2,
            }
            for k in range(paragraphs)
        ],
        "question": question,
        "question_decomposition": [],
        "answer": answer,
        "answer_aliases": list(aliases),
        "answerable": True,
    }


@pytest.fixture
def musique_record():
    """Build an official-format MuSiQue record: musique_record(id, answer, aliases, question)."""
    return _musique_record


@pytest.fixture
def write_jsonl(tmp_path):
    """Write records (dicts, or raw strings taken as whole lines) to a .jsonl file; return its path."""

    def write(records, name: str = "data.jsonl"):
        path = tmp_path / name
        lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return path

    return write


@pytest.fixture
def write_json(tmp_path):
    """Write a value as pretty-printed JSON (StrategyQA's style) and return the path."""

    def write(value, name: str = "data.json"):
        path = tmp_path / name
        path.write_text(json.dumps(value, indent=2), encoding="utf-8")
        return path

    return write


# ---- runner tests: tiny checkpoints on disk (see tests/helpers/tiny_runs.py) ----------------------
@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Save (once per session) a tiny model + tokenizer:
    tiny_checkpoint(arch, close_boost=None, close_push=None) (see helpers/tiny_runs.py)."""
    from helpers.tiny_runs import save_tiny_checkpoint

    saved = {}

    def make(arch: str, close_boost: float | None = None, close_push: float | None = None):
        key = (arch, close_boost, close_push)
        if key not in saved:
            directory = tmp_path_factory.mktemp(f"tiny-{arch}")
            saved[key] = save_tiny_checkpoint(
                directory / "model", arch, close_boost=close_boost, close_push=close_push
            )
        return saved[key]

    return make


# ---- the real SmolLM2 streamed through `nudge run --resolve`, once per session ---------------------
@pytest.fixture(scope="session")
def smollm2_streamed_run(tmp_path_factory):
    """The run directory of `nudge run` on SmolLM2 as helpers/smollm2_streamed.py says, on the
    stream schedule (the one `nudge run` takes on CPU), built once for the whole session
    (helpers/session_once.py); the tests read it and never change it."""
    from helpers.session_once import built_once
    from helpers.smollm2_streamed import run_streamed

    out = built_once(tmp_path_factory, "smollm2-streamed", run_streamed)
    assert json.loads((out / "manifest.json").read_text())["schedule"]["name"] == "stream"
    return out
