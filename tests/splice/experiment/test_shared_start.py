"""The prompts' shared start (splice/experiment/shared_start.py) against a count made here: two
real problems whose own text differs from its first character, rendered with the real template,
and their token ids compared one by one. The start is their common tokens less one, every drawn
prompt begins with it, and it holds none of a problem's own text."""

from __future__ import annotations

import pytest

from nudgeability.models.families import get_family
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer
from nudgeability.splice.experiment.prompts import render_prompts
from nudgeability.splice.experiment.shared_start import SharedStarts, shared_starts
from nudgeability.splice.tasks import get_task, sample_problems

FAMILIES = ("qwen3", "glm_z1", "gemma4", "chatml")
BASES = ("NT", "B", "oracle_B")
# the first text a problem brings to its prompt: StrategyQA's question, MuSiQue's first title
OWN_TEXT = {"strategyqa": lambda p: p.question, "musique": lambda p: p.context[0][0]}


def _common(a, b) -> int:
    count = 0
    while count < min(len(a), len(b)) and a[count] == b[count]:
        count += 1
    return count


def _check(task_name: str, family, tokenizer) -> SharedStarts:
    task = get_task(task_name)
    drawn = sample_problems(task.load(), 8, 0)
    own = OWN_TEXT[task_name]
    first = drawn[0]
    other = next(p for p in drawn if own(p)[0] != own(first)[0])
    pair = [render_prompts(task, family, p, oracle=True) for p in (first, other)]
    starts = shared_starts(task, family, oracle=True)
    for base in BASES:
        expected = _common(pair[0].for_base(base), pair[1].for_base(base)) - 1
        assert len(starts.tokens[base]) == expected, base
        text = tokenizer.decode(list(starts.tokens[base]))
        for problem in drawn:
            prompt = render_prompts(task, family, problem, oracle=True).for_base(base)
            assert starts.length(base, prompt) == expected  # every prompt begins with it
            assert own(problem) not in text
    assert starts.to_manifest() == {base: len(starts.tokens[base]) for base in BASES}
    return starts


@pytest.mark.parametrize("family_name", FAMILIES)
@pytest.mark.parametrize("task_name", ["strategyqa", "musique"])
def test_the_start_is_the_templates_common_tokens_less_one(task_name, family_name):
    tokenizer = tiny_tokenizer(family_name)
    _check(task_name, get_family(family_name, tokenizer), tokenizer)


def test_a_prompt_shares_what_it_has_of_the_start_and_never_its_last_token():
    starts = SharedStarts({"B": (5, 6, 7, 8)})
    assert starts.length("B", [5, 6, 7, 8, 9, 10]) == 4
    assert starts.length("B", [5, 6, 9, 8, 9, 10]) == 2  # a prompt that merged the start's end
    assert starts.length("B", [5, 6, 7, 8]) == 3  # the engine needs a last token to feed
    assert starts.length("B", [1, 6, 7]) == 0


def test_no_start_outside_the_oracle_run():
    tokenizer = tiny_tokenizer("qwen3")
    starts = shared_starts(get_task("strategyqa"), get_family("qwen3", tokenizer), oracle=False)
    assert set(starts.tokens) == {"NT", "B"}


@pytest.mark.slow
def test_smollm2_strategyqa_starts():
    """The demo's prompts (SmolLM2 on StrategyQA): the tokens each base's prompts share, counted
    (the report of issue 32 quotes them)."""
    from transformers import AutoTokenizer

    from nudgeability.models.families import detect_family
    from nudgeability.models.smollm2 import converted_dir, find_gguf

    directory = converted_dir(find_gguf())
    tokenizer = AutoTokenizer.from_pretrained(directory)
    starts = _check("strategyqa", detect_family(directory, tokenizer), tokenizer)
    print(f"\nSmolLM2 StrategyQA shared starts: {starts.to_manifest()}")
