"""The position bins and the cut a bin keeps, worked by hand on a few cuts (stats/position/bins.py)."""

from __future__ import annotations

import pytest

from nudgeability.stats.position import bin_index, choose_cut, paper_point, position_bins


def test_five_bins_then_the_paper_cut():
    found = position_bins()
    assert [(b.index, b.low, b.high, b.paper) for b in found] == [
        (0, 0.0, 0.2, False),
        (1, 0.2, 0.4, False),
        (2, 0.4, 0.6, False),
        (3, 0.6, 0.8, False),
        (4, 0.8, 1.0, False),
        (5, 1.0, 1.0, True),
    ]
    assert [b.label for b in found] == [
        "[0, 0.2]",
        "(0.2, 0.4]",
        "(0.4, 0.6]",
        "(0.6, 0.8]",
        "(0.8, 1)",
        "paper cut (1)",
    ]
    assert [b.centre for b in found][:2] == [0.1, pytest.approx(0.3)] and found[-1].centre == 1.0
    assert paper_point(3) == position_bins(3)[-1]
    with pytest.raises(ValueError, match="positive number"):
        position_bins(0)


@pytest.mark.parametrize(
    "at, boundary, expected",
    [
        (0, 10, 0),  # before the first token: the first bin, closed at 0
        (1, 10, 0),  # 0.1
        (2, 10, 0),  # 0.2 exactly: the upper end of the first bin
        (3, 10, 1),  # 0.3
        (6, 10, 2),  # 0.6 exactly (as a float 6/10 and 3·0.2 differ; the rule compares integers)
        (7, 10, 3),
        (8, 10, 3),  # 0.8 exactly
        (9, 10, 4),
        (99, 100, 4),
        (1, 3, 1),  # 0.333...
        (2, 3, 3),  # 0.666...
    ],
)
def test_a_cut_falls_in_the_bin_whose_upper_end_it_does_not_pass(at, boundary, expected):
    assert bin_index(at, boundary) == expected


def test_a_cut_at_or_after_the_think_close_is_refused():
    with pytest.raises(ValueError, match="before the think-close"):
        bin_index(10, 10)
    with pytest.raises(ValueError, match="before the think-close"):
        bin_index(-1, 10)


def test_a_bin_keeps_the_cut_closest_to_its_centre_the_earlier_on_a_tie():
    # boundary 100: bin 1 is (0.2, 0.4], centre 0.3
    assert choose_cut([21, 28, 33, 40], 100, 1) == 28  # |0.28 − 0.3| = 0.02 < |0.33 − 0.3|
    assert choose_cut([25, 35], 100, 1) == 25  # both 0.05 away: the earlier
    assert choose_cut([35, 25], 100, 1) == 25  # whatever the order given
    assert choose_cut([5, 50, 90], 100, 1) is None  # no cut in the bin
    assert choose_cut([20], 100, 0) == 20 and choose_cut([20], 100, 1) is None  # 0.2: bin 0
    # boundary 10, bin 0 is [0, 0.2], centre 0.1: cuts 0 and 2 tie (0.1 away), 1 is the centre
    assert choose_cut([0, 2], 10, 0) == 0 and choose_cut([0, 1, 2], 10, 0) == 1
    # three bins: (1/3, 2/3], centre 1/2; boundary 7: 3/7 and 4/7 tie (1/14 away)
    assert choose_cut([3, 4], 7, 1, bins=3) == 3
