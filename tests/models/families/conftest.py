"""Shared fixtures for the family tests: the tiny tokenizers' families and the one declared tool."""

from __future__ import annotations

import pytest

from nudgeability.models.families import get_family
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer


@pytest.fixture
def make_family():
    """`make_family(name)` -> that family bound to its tiny tokenizer."""
    return lambda name: get_family(name, tiny_tokenizer(name))


@pytest.fixture
def retrieve_tool() -> dict:
    """The MuSiQue retrieval helper, as an OpenAI-style tool."""
    return {
        "type": "function",
        "function": {
            "name": "retrieve",
            "description": "Return the most relevant supplied paragraph.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to look for."}},
                "required": ["query"],
            },
        },
    }


@pytest.fixture
def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You answer questions."},
        {"role": "user", "content": "Who wrote Emma?"},
    ]


@pytest.fixture
def parse_case(make_family):
    """`parse_case(family, text, finish, prefix=None)`: encode `text` with the family's tiny
    tokenizer (after `splice_ids(sentence, sealed)` when `prefix=(sentence, sealed)`) and parse it
    with `retrieve` declared."""

    def run(name, text, finish, prefix=None, tools=("retrieve",)):
        fam = make_family(name)
        ids = (fam.splice_ids(*prefix) if prefix else []) + fam.encode(text)
        return fam.parse_action(ids, finish, tools=list(tools) if tools is not None else None)

    return run
