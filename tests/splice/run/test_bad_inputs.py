"""Bad inputs to `nudge run`: each a one-line error (exit status 2) naming the file and line, the
field or the flag, and no output directory left behind (or an existing one left untouched)."""

from __future__ import annotations

import json

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge

SENTENCES_WITHOUT_DOUBT = """neutral = "Step by step."
[first]
confidence = "I am sure."
[second]
confidence = "You are sure."
doubt = "You are unsure."
[reviewer]
confidence = "A reviewer is sure."
doubt = "A reviewer is unsure."
[expert]
confidence = "An expert is sure."
doubt = "An expert is unsure."
"""


@pytest.fixture
def nudge_error(tiny_checkpoint, tmp_path):
    """Run `nudge run` with a tiny model and extra args; assert it fails cleanly; return the message."""
    model_dir = tiny_checkpoint("qwen3")
    out = tmp_path / "out"

    def fail(*extra) -> str:
        status, err = run_nudge(
            [*nudge_run_args(model_dir, out, task="musique", max_new_tokens=4), *extra]
        )
        assert status == 2
        assert err.count("\n") == 1 and err.startswith("nudge run: error: "), err
        assert not out.exists() and not list(tmp_path.glob(".out*"))  # nothing half-made
        return err.strip()

    return fail


def test_truncated_json_line_names_the_file_and_line(nudge_error, musique_record, write_jsonl):
    whole = json.dumps(musique_record("2hop__1_2"))
    data = write_jsonl([whole, whole.replace("2hop__1_2", "2hop__3_4")[:150]])
    err = nudge_error("--data", data, "--n", "1")
    assert f"{data}:2:" in err and "not valid JSON" in err


def test_record_without_answer_names_the_field(nudge_error, musique_record, write_jsonl):
    record = musique_record("2hop__1_2")
    del record["answer"]
    data = write_jsonl([musique_record("2hop__0_1"), record])
    err = nudge_error("--data", data, "--n", "1")
    assert f"{data}:2:" in err and "'answer'" in err


def test_dataset_empty_after_filtering_names_the_file_and_field(
    nudge_error, musique_record, write_jsonl
):
    data = write_jsonl([musique_record("3hop1__1_2_3"), musique_record("4hop1__1_2_3_4")])
    err = nudge_error("--data", data, "--n", "1")
    assert str(data) in err and "'2hop__'" in err


def test_n_larger_than_available_is_an_error_naming_the_file(
    nudge_error, musique_record, write_jsonl
):
    data = write_jsonl([musique_record("2hop__1_2"), musique_record("2hop__3_4")])
    err = nudge_error("--data", data, "--n", "3")
    assert str(data) in err and "n=3" in err and "2 available" in err


def test_unknown_condition_names_the_flag_and_the_name(nudge_error):
    err = nudge_error("--conditions", "primary,confident")
    assert "--conditions" in err and "'confident'" in err


def test_sentences_file_missing_a_polarity_names_the_file_and_key(nudge_error, tmp_path):
    sentences = tmp_path / "sentences.toml"
    sentences.write_text(SENTENCES_WITHOUT_DOUBT)
    err = nudge_error("--sentences", sentences)
    assert str(sentences) in err and "first.doubt" in err


@pytest.mark.parametrize(
    "flag,value,named",
    [
        ("--seeds", "0,1", "--seeds"),  # greedy runs once
        ("--shard", "3/2", "--shard"),
        ("--max-new-tokens", "0", "--max-new-tokens"),
        ("--decoding", "beam", "--decoding"),
        ("--n", "some", "--n"),
        ("--family", "mistral", "mistral"),
        ("--task", "hotpotqa", "hotpotqa"),
        ("--gpu-memory-utilization", "1.5", "--gpu-memory-utilization 1.5: must be in (0, 1]"),
    ],
)
def test_bad_flag_values_name_the_flag(nudge_error, flag, value, named):
    assert named in nudge_error(flag, value)


@pytest.mark.parametrize("value", ["-5,3", "-5", "4,-2"])
def test_a_negative_budget_reaches_the_check_and_is_refused_naming_the_flag(nudge_error, value):
    """Not argparse's usage and "expected one argument" (it took "-5,3" for a flag): the value
    reaches the flag's own check (issue 25, case 4)."""
    err = nudge_error("--max-new-tokens", value)
    assert err == (
        f"nudge run: error: --max-new-tokens {value!r}: expected BASE or BASE,ARM, positive "
        "whole numbers"
    )


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_sentences_path_that_is_no_file_names_the_flag(nudge_error, tmp_path, kind):
    path = tmp_path / "sentences.toml"
    if kind == "directory":
        path.mkdir()
    err = nudge_error("--sentences", path)
    what = "no such file" if kind == "missing" else "is a directory"
    assert err.startswith(f"nudge run: error: {path}: {what}; ") and "with --sentences" in err, err
    assert "Errno" not in err


@pytest.mark.parametrize("where", ["the file", "under the file"])
def test_an_out_that_is_a_file_or_lies_under_one_names_the_flag(tiny_checkpoint, tmp_path, where):
    regular = tmp_path / "notes.txt"
    regular.write_text("mine")
    out = regular if where == "the file" else regular / "run"
    args = nudge_run_args(tiny_checkpoint("qwen3"), out, n=1, conditions="NT", max_new_tokens=4)
    status, err = run_nudge(args)
    assert status == 2 and err.count("\n") == 1 and "Errno" not in err, err
    problem = "exists and is a file" if out == regular else f"{regular} is a file"
    assert err.startswith(f"nudge run: error: --out {out}: {problem}, not a directory; "), err
    assert regular.read_text() == "mine"


def test_prompt_longer_than_the_context_names_the_problem(nudge_error, musique_record, write_jsonl):
    long = musique_record("2hop__1_2", paragraphs=20)
    for paragraph in long["paragraphs"]:
        paragraph["paragraph_text"] = "word " * 200
    data = write_jsonl([long])
    err = nudge_error("--data", data, "--n", "1")
    assert f"{data}:1:" in err and "2hop__1_2" in err and "context" in err


def test_kv_budget_too_small_for_one_problem_is_refused_before_running(nudge_error):
    err = nudge_error("--task", "strategyqa", "--n", "1", "--max-batch-tokens", "100")
    assert "--max-batch-tokens 100" in err and "strategyqa_train.json:" in err and "at least" in err


def test_changed_config_against_an_existing_out_is_refused_naming_the_keys(
    tiny_checkpoint, tmp_path
):
    model_dir = tiny_checkpoint("qwen3")
    out = tmp_path / "out"
    status, err = run_nudge(nudge_run_args(model_dir, out, n=1, conditions="NT", max_new_tokens=4))
    assert status == 0, err
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    args = nudge_run_args(model_dir, out, n=1, conditions="NT", max_new_tokens=5, seed=3)
    status, err = run_nudge(args)
    assert status == 2 and err.count("\n") == 1, err
    assert str(out / "manifest.json") in err
    assert (
        "config.max_new_tokens: stored 4, now 5" in err
        and "config.sample_seed: stored 0, now 3" in err
    )
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
