"""The one wording of a JSON syntax error in a message: `not valid JSON (WHAT at column C)`.

json's own messages sometimes end in "at" ("Unterminated string starting at", "Invalid control
character at") and sometimes not ("Expecting value"), and they carry no place: written as they
are, they stop mid-phrase ("... (Unterminated string starting at)") or, with a place added,
double the word ("starting at at column 5"). Standard library only, in the bottom layer (util/), so that
every layer (models, splice, stats) words it the same.
"""

from __future__ import annotations

import json


def json_error(exc: json.JSONDecodeError, *, line: bool = False) -> str:
    """`not valid JSON (Unterminated string starting at column 5)`; with `line`, the place is
    `line L, column C` (for a message that does not already begin with `PATH:LINE:`)."""
    what = exc.msg.removesuffix(" at")
    where = f"line {exc.lineno}, column {exc.colno}" if line else f"column {exc.colno}"
    return f"not valid JSON ({what} at {where})"
