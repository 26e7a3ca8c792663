"""The position bins: where a cut falls in its base's reasoning, and which cut a bin keeps.

A cut's *relative position* is `at / boundary`: its index in the base's generated ids over the
index of the base's think-close (the paper's cut, relative position 1). With `bins` equal-width
bins (default 5) the bins are

    [0, 1/bins], (1/bins, 2/bins], ..., ((bins-1)/bins, 1)

(the first is closed at 0 so that a cut before the first token has a bin; the last is open at 1,
which is the paper's cut, its own point). Membership is decided on the integers, never on a
rounded quotient: cut `at` of a base whose boundary is `n` lies in bin k exactly when
k·n < at·bins ≤ (k+1)·n (bin 0 also takes at = 0).

When one (problem, seed) has several cuts of one base in a bin, the bin keeps the cut closest to
the bin's centre (2k+1)/(2·bins), compared exactly as |2·bins·at − (2k+1)·n|; a tie goes to the
earlier cut. Each (problem, seed, base) thus gives at most one cut to each bin, and a bin's
estimates pair every problem with itself once, as the paper's cut does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

DEFAULT_BINS = 5


@dataclass(frozen=True)
class PositionBin:
    """One point of the by-position view: a bin of relative positions, or the paper's cut.

    index: 0..bins-1 for the bins, `bins` for the paper's cut; low, high: the bin's ends (both
    1.0 for the paper's cut); paper: whether this is the paper's cut."""

    index: int
    low: float
    high: float
    paper: bool = False

    @property
    def centre(self) -> float:
        """The bin's centre (1.0 for the paper's cut): where the figure draws it."""
        return (self.low + self.high) / 2

    @property
    def label(self) -> str:
        """ "[0, 0.2]", "(0.2, 0.4]", ..., "(0.8, 1)", or "paper cut (1)"."""
        if self.paper:
            return "paper cut (1)"
        opening = "[" if self.index == 0 else "("
        closing = ")" if self.high == 1.0 else "]"
        return f"{opening}{self.low:g}, {self.high:g}{closing}"


def position_bins(bins: int = DEFAULT_BINS) -> tuple[PositionBin, ...]:
    """The `bins` equal-width bins of (module docstring), then the paper's cut."""
    if int(bins) < 1:
        raise ValueError(f"bins must be a positive number of position bins, got {bins}")
    bins = int(bins)
    found = tuple(PositionBin(k, k / bins, (k + 1) / bins) for k in range(bins))
    return (*found, paper_point(bins))


def paper_point(bins: int = DEFAULT_BINS) -> PositionBin:
    """The paper's cut, just before the think-close: relative position 1."""
    return PositionBin(int(bins), 1.0, 1.0, paper=True)


def relative_position(at: int, boundary: int) -> Fraction:
    """at / boundary, exactly; ValueError unless 0 <= at < boundary."""
    if not 0 <= at < boundary:
        raise ValueError(f"cut {at} does not lie before the think-close at {boundary}")
    return Fraction(at, boundary)


def bin_index(at: int, boundary: int, bins: int = DEFAULT_BINS) -> int:
    """The bin of cut `at` of a base whose think-close is at `boundary` (module docstring)."""
    relative_position(at, boundary)
    # the smallest k with at·bins <= (k+1)·boundary: ceil(at·bins / boundary) - 1, at least 0
    return max(0, -(-(at * bins) // boundary) - 1)


def choose_cut(
    cuts: Iterable[int], boundary: int, index: int, bins: int = DEFAULT_BINS
) -> int | None:
    """The cut bin `index` keeps among one base's `cuts` (module docstring): the one closest to
    the bin's centre, the earlier on a tie; None when no cut lies in the bin."""
    best, best_distance = None, None
    for at in sorted(set(cuts)):
        if bin_index(at, boundary, bins) != index:
            continue
        distance = abs(2 * bins * at - (2 * index + 1) * boundary)
        if best_distance is None or distance < best_distance:
            best, best_distance = at, distance
    return best
