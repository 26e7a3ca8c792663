"""The splice boundary on token ids (single- and multi-token think-close markers) and the ids
appended there: decoding prefix + splice gives the expected text."""

from __future__ import annotations

import pytest

# (family, reasoning as the model writes it up to the close, the close, what follows it)
GENERATIONS = {
    "qwen3": ("<think>\nEmma is a novel.\n", "</think>", "\n\nJane Austen.<|im_end|>"),
    "glm_z1": ("Emma is a novel.\n", "</think>", "\nJane Austen.<|user|>"),
    "gemma4": ("<|channel>thought\nEmma is a novel.\n", "<channel|>", "Jane Austen.<turn|>"),
    "chatml": ("Emma is a novel.\n", "</think>", "\n\nJane Austen.<|im_end|>"),
}
SENTENCE = "I am confident that my answer is correct."


def _generated(fam, name):
    reasoning, close, after = GENERATIONS[name]
    head = fam.encode(reasoning)
    return head, head + fam.encode(close) + fam.encode(after)


@pytest.mark.parametrize(
    "name,close_tokens", [("qwen3", 1), ("gemma4", 1), ("glm_z1", 5), ("chatml", 4)]
)
def test_boundary_is_where_the_think_close_tokens_start(make_family, name, close_tokens):
    fam = make_family(name)
    head, generated = _generated(fam, name)
    assert len(fam.think_close_ids) == close_tokens
    b = fam.find_boundary(generated)
    assert b == len(head)
    assert generated[b : b + close_tokens] == fam.think_close_ids


@pytest.mark.parametrize("name", sorted(GENERATIONS))
def test_boundary_is_the_first_of_two_closes(make_family, name):
    fam = make_family(name)
    head, generated = _generated(fam, name)
    twice = generated + fam.encode("Wait.") + fam.think_close_ids + fam.encode("Rome.")
    assert fam.find_boundary(twice) == len(head)


@pytest.mark.parametrize("name", sorted(GENERATIONS))
def test_never_closed_reasoning_has_no_boundary(make_family, name):
    fam = make_family(name)
    reasoning, _, _ = GENERATIONS[name]
    assert fam.find_boundary(fam.encode(reasoning + "and the budget ran out")) is None
    assert fam.find_boundary([]) is None


@pytest.mark.parametrize("name", ["glm_z1", "chatml"])
def test_multi_token_close_is_found_however_it_was_split(make_family, name):
    fam = make_family(name)
    head = fam.encode("Emma is a novel.")
    # One byte token per character: not the canonical split of `</think>`.
    spelled = [i for ch in "</think>" for i in fam.encode(ch)]
    generated = head + spelled + fam.encode("Jane Austen.")
    assert generated[len(head) :] != fam.think_close_ids + fam.encode("Jane Austen.")
    assert fam.find_boundary(generated) == len(head)


def test_a_partial_multi_token_marker_is_not_a_close(make_family):
    fam = make_family("chatml")
    assert fam.find_boundary(fam.encode("Emma is a novel. </thin")) is None
    assert fam.find_boundary(fam.encode("I will </ think> later")) is None


# Expected text of generated[:b] + splice ids, for the open and sealed variants.
SPLICED = {
    "qwen3": "<think>\nEmma is a novel.\n\nI am confident that my answer is correct.\n",
    "glm_z1": "Emma is a novel.\n\nI am confident that my answer is correct.\n",
    "gemma4": "<|channel>thought\nEmma is a novel.\n\nI am confident that my answer is correct.\n",
    "chatml": "Emma is a novel.\n\nI am confident that my answer is correct.\n",
}


@pytest.mark.parametrize("name", sorted(SPLICED))
@pytest.mark.parametrize("sealed", [False, True])
def test_appending_a_sentence_at_the_boundary_decodes_to_the_expected_text(
    make_family, name, sealed
):
    fam = make_family(name)
    _, generated = _generated(fam, name)
    b = fam.find_boundary(generated)
    spliced = generated[:b] + fam.splice_ids(SENTENCE, sealed=sealed)
    close = GENERATIONS[name][1] if sealed else ""
    assert fam.decode(spliced) == SPLICED[name] + close


@pytest.mark.parametrize("name", sorted(SPLICED))
def test_splice_ids_are_the_sentence_tokenised_alone_plus_the_close_ids(make_family, name):
    fam = make_family(name)
    open_ids = fam.splice_ids(SENTENCE, sealed=False)
    assert open_ids == fam.encode("\n" + SENTENCE + "\n")
    assert fam.splice_ids(SENTENCE, sealed=True) == open_ids + fam.think_close_ids
    assert fam.splice_ids("", sealed=False) == []
    assert fam.splice_ids("", sealed=True) == fam.think_close_ids


@pytest.mark.parametrize("name", sorted(SPLICED))
def test_after_a_sealed_splice_the_sentence_is_read_as_reasoning(make_family, name):
    # B's text after the boundary, replaced by a sealed splice and an answer: the sentence must not
    # leak into the answer, because the parser reads only after the final close.
    fam = make_family(name)
    after = GENERATIONS[name][2]
    ids = fam.splice_ids(SENTENCE, sealed=True) + fam.encode(after)
    action = fam.parse_action(ids, "stop_token", tools=["retrieve"])
    assert (action.kind, action.answer) == ("SELF", "Jane Austen.")
