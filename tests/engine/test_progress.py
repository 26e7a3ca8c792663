"""util/progress.py: plain progress lines when stderr is not a terminal."""

from __future__ import annotations

import io

from nudgeability.util.progress import LineProgress, progress_bar


def test_plain_lines_carry_count_share_and_postfix():
    out = io.StringIO()
    with LineProgress(4, "      NT", "problem", interval=0, stream=out) as bar:
        bar.set_postfix({"decode tok/s": "9.5"}, refresh=False)
        bar.update(1)
        bar.update(3)
    assert out.getvalue().splitlines() == [
        "NT: 1/4 problem (25%), decode tok/s=9.5",
        "NT: 4/4 problem (100%), decode tok/s=9.5",
        "NT: 4/4 problem (100%), decode tok/s=9.5",
    ]


def test_inner_and_disabled_bars_print_no_closing_line():
    out = io.StringIO()
    LineProgress(2, "generate", "seq", leave=False, interval=3600, stream=out).close()
    bar = LineProgress(2, "NT", "problem", disable=True, interval=0, stream=out)
    bar.update(2)
    bar.close()
    assert out.getvalue() == ""


def test_a_pipe_gets_plain_lines(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal
    assert isinstance(progress_bar(3, "B", "problem"), LineProgress)
