"""The generic ChatML family on the real SmolLM2-135M-Instruct: its multi-token markers, and one
greedy with-tool generation through the Engine whose outcome is recorded, never raised."""

from __future__ import annotations

import pytest

from nudgeability.models.families import ACTION_KINDS, detect_family

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fam(smollm2):
    return detect_family(smollm2.source.directory, smollm2.tokenizer)


def test_smollm2_is_detected_as_chatml_with_multi_token_markers(fam):
    assert fam.name == "chatml"
    assert not fam.uses_checkpoint_template  # SmolLM2's template has no tool support
    assert [fam.decode([i]) for i in fam.think_close_ids] == ["</", "think", ">"]
    assert fam.tokenizer.convert_ids_to_tokens(fam.stop_token_ids) == [
        "<|im_end|>",
        "<|endoftext|>",
    ]
    assert fam.stop_strings == ["</tool_call>"]


def test_close_merged_with_a_space_cuts_before_the_merged_token(fam):
    head = fam.encode("So the answer is Paris.")
    close = fam.encode(" </think>")
    assert fam.decode(close[:1]) == " </"  # the space and `</` are one token in this vocabulary
    generated = head + close + fam.encode("\n\nParis")
    b = fam.find_boundary(generated)
    assert b == len(head)
    assert fam.decode(generated[:b] + fam.splice_ids("I am sure.", sealed=True)) == (
        "So the answer is Paris.\nI am sure.\n</think>"
    )


def test_smollm2_with_tool_greedy_generation_is_parsed_without_raising(smollm2, fam, retrieve_tool):
    from nudgeability.engine import Engine, SamplingParams

    messages = [
        {"role": "system", "content": "Answer the question. Use the tool if you need a paragraph."},
        {"role": "user", "content": "Who wrote the novel Emma?"},
    ]
    prompt = fam.render(messages, tools=[retrieve_tool])
    assert fam.decode(prompt).endswith("<|im_start|>assistant\n<think>\n")
    params = SamplingParams(
        max_new_tokens=64,
        temperature=0.0,
        stop_token_ids=tuple(fam.stop_token_ids),
        stop_strings=tuple(fam.stop_strings),
    )
    out = Engine(smollm2.model, smollm2.tokenizer).generate([prompt], params)[0]
    b = fam.find_boundary(out.token_ids)
    after = out.token_ids[b:] if b is not None else out.token_ids
    action = fam.parse_action(after, out.finish_reason, tools=["retrieve"])
    print(f"\nSmolLM2 with-tool greedy: finish={out.finish_reason} boundary={b} action={action}")
    print(f"text={fam.decode(out.token_ids)!r}")
    assert action.kind in ACTION_KINDS
    text = fam.decode(out.token_ids)
    if b is None:
        assert "</think>" not in text
        assert action.reason in ("think_never_closed", "budget_in_thinking")
    else:
        assert "</think>" not in fam.decode(out.token_ids[:b])
        assert "</think>" in fam.decode(out.token_ids[b : b + len(fam.think_close_ids) + 1])
