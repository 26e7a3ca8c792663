"""The pieces of `--likelihoods` apart from a run: the flag in the config and its checks, the
record field's round trip, the openers of every family, and P(TOOL) + P(answer) <= 1 enforced."""

from __future__ import annotations

import json
import math

import pytest

from nudgeability.engine import Completion
from nudgeability.models.families import get_family
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer
from nudgeability.splice.experiment.openers import Openers, action_openers, check_exclusive
from nudgeability.splice.run.config import ConfigError, RunConfig
from nudgeability.splice.run.remote import RemoteSpec
from nudgeability.splice.run.units.likelihoods import OpenerRows, arm_likelihoods
from nudgeability.splice.run.validation import validate
from nudgeability.splice.rundir.records import Likelihoods, Record
from nudgeability.splice.tasks import get_task

FAMILIES = ("qwen3", "chatml", "gemma4", "glm_z1")


def test_the_flag_is_written_only_when_on_and_round_trips():
    assert not {"likelihoods", "score_openers"} & set(RunConfig(chunk_size=8).to_dict())
    on = RunConfig(chunk_size=8, likelihoods=True, score_openers=("doubt",), static_decode=False)
    assert on.to_dict()["likelihoods"] is True
    assert on.to_dict()["score_openers"] == ["doubt"]
    assert RunConfig.from_dict(on.to_dict()) == on


def test_score_openers_needs_the_flag_and_arms_of_the_run():
    with pytest.raises(ConfigError, match="add it"):
        validate(RunConfig(conditions=("primary",), score_openers=("doubt",)))
    with pytest.raises(ConfigError, match="not an arm"):
        validate(RunConfig(conditions=("primary",), likelihoods=True, score_openers=("NT",)))
    valid = validate(RunConfig(conditions=("primary",), likelihoods=True, score_openers=("doubt",)))
    assert "doubt" in [c.code for c in valid.conditions]


def test_a_server_run_refuses_the_flag():
    remote = RemoteSpec(base_url="http://localhost:1/v1")
    with pytest.raises(ConfigError, match="--likelihoods"):
        validate(RunConfig(model="m", likelihoods=True), remote)


def test_a_record_keeps_its_likelihoods_through_json():
    data = {
        "problem_id": "q",
        "task": "strategyqa",
        "condition": "sealed_doubt",
        "sentence_id": "first.doubt",
        "seed": 0,
        "prompt_tokens": 3,
        "prompt_sha256": "0" * 64,
        "prefix_tokens": 2,
        "boundary": None,
        "generated_ids": [1],
        "text": "x",
        "finish_reason": "eos",
        "action": {"kind": "SELF"},
        "grade": None,
        "likelihoods": {
            "splice_logprobs": [-0.1, -2.5],
            "splice_logprob": -2.6,
            "tool_opener_logprob": -0.7,
            "answer_opener_logprob": -1.2,
        },
    }
    record = Record.from_dict(data)
    assert record.likelihoods == Likelihoods([-0.1, -2.5], -2.6, -0.7, -1.2)
    assert record.likelihoods.p_tool == pytest.approx(math.exp(-0.7))
    assert json.loads(record.to_json())["likelihoods"] == data["likelihoods"]
    assert Record.from_json(record.to_json()) == record
    del data["likelihoods"]
    assert "likelihoods" not in Record.from_dict(data).to_json()


@pytest.mark.parametrize("name", FAMILIES)
def test_every_familys_openers_are_exclusive_and_spell_call_and_answer(name):
    family = get_family(name, tiny_tokenizer(name))
    task = get_task("strategyqa")
    for base in ("B", "oracle_B"):
        openers = action_openers(family, task, base)
        check_exclusive(openers, family, base)
        assert family.decode(list(openers.answer)).endswith("Answer:")
        tool = family.decode(list(openers.tool))
        assert tool.startswith(family.commitment_gap)
        assert ("ask_expert" if base == "oracle_B" else "search") in tool or "tool_call>" in tool


def test_nested_openers_are_refused():
    family = get_family("qwen3", tiny_tokenizer("qwen3"))
    nested = Openers(tool=(5, 6), answer=(5, 6, 7))
    assert not nested.exclusive
    with pytest.raises(ValueError, match="nest"):
        check_exclusive(nested, family, "B")


def _scored(logprobs: list[float]) -> Completion:
    return Completion([0], "length", None, len(logprobs), 0, 0, suffix_logprobs=logprobs)


def test_likelihoods_sum_the_openers_after_the_splice_and_refuse_more_than_certainty():
    openers = Openers(tool=(1, 2), answer=(3,))
    rows = [OpenerRows(arm=0, tool=1, answer=2, before=2)]
    arm = _scored([-1.0, -2.0])
    fine = [arm, _scored([-1.0, -2.0, -0.5, -0.25]), _scored([-1.0, -2.0, -1.5])]
    got = arm_likelihoods(fine, 0, rows, openers)
    assert (got.splice_logprob, got.tool_opener_logprob, got.answer_opener_logprob) == (
        -3.0,
        -0.75,
        -1.5,
    )
    assert got.p_tool + got.p_answer <= 1
    broken = [arm, _scored([-1.0, -2.0, -0.1]), _scored([-1.0, -2.0, -0.2])]
    with pytest.raises(RuntimeError, match="P\\(TOOL\\) \\+ P\\(answer\\)"):
        arm_likelihoods(broken, 0, [OpenerRows(0, 1, 2, 2)], Openers((1,), (3,)))
    assert arm_likelihoods([arm], 0, [], openers).tool_opener_logprob is None
