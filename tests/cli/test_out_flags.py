"""`nudge stats --out` and `nudge report --out` naming a regular file, or a place under one, are
refused at once in one line naming the flag, before any input is read (issue 25, case 4): not
`[Errno 17] File exists` after the statistics were computed."""

from __future__ import annotations

import pytest
from helpers.tiny_runs import run_nudge


@pytest.mark.parametrize("command", ["stats", "report"])
@pytest.mark.parametrize("under", [False, True])
def test_an_out_in_the_way_of_a_file_names_the_flag(tmp_path, command, under):
    regular = tmp_path / "table.md"
    regular.write_text("mine")
    out = regular / "x" if under else regular
    # the input does not exist: the --out check comes first, so nothing is read or computed
    status, err = run_nudge([command, tmp_path / "no-run", "--out", out])
    problem = f"{regular} is a file" if under else "exists and is a file"
    assert status == 2 and err == (
        f"nudge {command}: error: --out {out}: {problem}, not a directory; pass another --out\n"
    )
    assert regular.read_text() == "mine"
