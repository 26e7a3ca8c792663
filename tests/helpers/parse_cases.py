"""The pieces every family's parse table shares (tests/models/families/test_parse_*.py): the
declared `retrieve` tool's name and call arguments, the splice sentences of the arm cases, the
action a well-formed call parses to, and `case`, one row of a table."""

from __future__ import annotations

import pytest

from nudgeability.models.families import Action

R = "retrieve"
ARGS = {"query": "author of Emma"}
DOUBT = "I am not sure that my answer is correct."
CONFIDENT = "I am confident that my answer is correct."
TOOL_CALL = Action("TOOL", tool_name=R, arguments=ARGS)  # the family's CALL, parsed

# the parameters of a table's test, in the order of `case`
FIELDS = "text,finish,prefix,expected"


def case(case_id: str, text: str, finish: str, prefix, expected: Action):
    """One row: the text after the cut, the finish_reason, the splice prefix (sentence, sealed) or
    None, and the action it must parse to; `case_id` names it in the test ids."""
    return pytest.param(text, finish, prefix, expected, id=case_id)
