"""Shared helpers of the statistics tests: random tables, a planted behaviour model, run directories."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.synthetic_run import record_line, records, write_run

from nudgeability.stats.actions import NONE, SELF, TOOL, TRUNC

CODES = np.array([NONE, 0, 1, 2, 3], dtype=np.int8)  # NONE, SELF, TOOL, OTHER, TRUNC


def random_arrays(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """s, base, conf, doubt with every code, unknown s and missing arms, at random frequencies.

    Each array draws its codes from its own random (Dirichlet) distribution, so some tables have
    no flips, no retained problems or a single stratum: the edge cases come up on their own.
    """
    s = rng.choice(np.array([-1, 0, 1], dtype=np.int8), size=n, p=rng.dirichlet(np.ones(3)))
    arrays = {"s": s}
    for name in ("base", "conf", "doubt"):
        arrays[name] = rng.choice(CODES, size=n, p=rng.dirichlet(np.ones(len(CODES))))
    return arrays


@pytest.fixture
def random_tables():
    """200 random (s, base, conf, doubt) tables of 0..80 problems, from a fixed seed."""
    rng = np.random.default_rng(20240601)
    return [random_arrays(rng, int(rng.integers(0, 81))) for _ in range(200)]


# ---------------------------------------------------------------- a planted behaviour model


class PlantedModel:
    """A known model of behaviour whose true S and L are computable exactly.

    s: 1 w.p. p_right, 0 w.p. p_wrong, unknown otherwise. The base is TRUNC without any arm w.p.
    p_unclosed (B never closed its thinking); otherwise it is drawn from base[s]. Each arm is then
    drawn independently given (s, base) from arm[polarity][s][base]: flips depend on s, which makes
    L non-zero.
    """

    p_right, p_wrong, p_unclosed = 0.62, 0.33, 0.03
    base = {1: [0.78, 0.16, 0.03, 0.03], 0: [0.62, 0.32, 0.03, 0.03], -1: [0.6, 0.3, 0.05, 0.05]}
    # arm[polarity][s][base code] -> probabilities of SELF, TOOL, OTHER, TRUNC; after an OTHER or
    # TRUNC base the arm depends on the polarity alone, so those two rows are written once per polarity
    after_other = {
        "+": {2: [0.5, 0.3, 0.15, 0.05], 3: [0.4, 0.3, 0.1, 0.2]},
        "-": {2: [0.3, 0.5, 0.15, 0.05], 3: [0.3, 0.4, 0.1, 0.2]},
    }
    arm = {
        "+": {
            1: {0: [0.93, 0.04, 0.02, 0.01], 1: [0.35, 0.61, 0.02, 0.02], **after_other["+"]},
            0: {0: [0.90, 0.07, 0.02, 0.01], 1: [0.22, 0.74, 0.02, 0.02], **after_other["+"]},
            -1: {0: [0.9, 0.06, 0.02, 0.02], 1: [0.3, 0.66, 0.02, 0.02], **after_other["+"]},
        },
        "-": {
            1: {0: [0.72, 0.24, 0.02, 0.02], 1: [0.05, 0.92, 0.02, 0.01], **after_other["-"]},
            0: {0: [0.55, 0.41, 0.02, 0.02], 1: [0.04, 0.93, 0.02, 0.01], **after_other["-"]},
            -1: {0: [0.6, 0.36, 0.02, 0.02], 1: [0.05, 0.92, 0.02, 0.01], **after_other["-"]},
        },
    }

    def sample(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        u = rng.random(n)
        s = np.where(u < self.p_right, 1, np.where(u < self.p_right + self.p_wrong, 0, -1)).astype(
            np.int8
        )
        unclosed = rng.random(n) < self.p_unclosed
        base = np.empty(n, dtype=np.int8)
        conf, doubt = np.full(n, NONE, np.int8), np.full(n, NONE, np.int8)
        for value in (1, 0, -1):
            rows = (s == value) & ~unclosed
            base[rows] = rng.choice(4, size=rows.sum(), p=self.base[value])
            for b in range(4):
                cell = rows & (base == b)
                conf[cell] = rng.choice(4, size=cell.sum(), p=self.arm["+"][value][b])
                doubt[cell] = rng.choice(4, size=cell.sum(), p=self.arm["-"][value][b])
        base[unclosed] = TRUNC
        return {"s": s, "base": base, "conf": conf, "doubt": doubt}

    def truth(self) -> tuple[float, float]:
        """(true S in pp, true L in pp): the population limits of the estimators, by enumeration."""
        p_s = {1: self.p_right, 0: self.p_wrong, -1: 1 - self.p_right - self.p_wrong}
        in_s = tool_minus = tool_plus = 0.0
        strata = {(pol, b): [0.0, 0.0, 0.0, 0.0] for pol in "+-" for b in (SELF, TOOL)}  # N F K H
        for s, ps in p_s.items():
            for b, pb in enumerate(self.base[s]):
                weight = ps * (1 - self.p_unclosed) * pb
                plus, minus = self.arm["+"][s][b], self.arm["-"][s][b]
                completed_plus, completed_minus = sum(plus[:3]), sum(minus[:3])
                in_s += weight * completed_plus * completed_minus
                tool_minus += weight * completed_plus * minus[TOOL]
                tool_plus += weight * plus[TOOL] * completed_minus
                if s == -1 or b not in (SELF, TOOL):
                    continue
                well = (s == 1 and b == TOOL) or (s == 0 and b == SELF)
                for pol, arm in (("+", plus), ("-", minus)):
                    eligible = weight * (arm[SELF] + arm[TOOL])
                    flip = weight * arm[1 - b]
                    cell = strata[(pol, b)]
                    cell[0] += eligible
                    cell[1] += flip
                    cell[2] += eligible if well else 0.0
                    cell[3] += flip if well else 0.0
        true_s = 100 * (tool_minus - tool_plus) / in_s
        f_total = sum(c[1] for c in strata.values())
        wt = sum(c[3] for c in strata.values()) / f_total
        wt_rand = sum(c[1] * c[2] / c[0] for c in strata.values()) / f_total
        return true_s, 100 * (wt - wt_rand)


@pytest.fixture
def planted():
    return PlantedModel()


# ---------------------------------------------------------------- run directories


# Records of a table (s, base and arms keyed by condition code) in the runner's schema, in the
# bare form: s = -1 is an NT answer whose grade is null; base = TRUNC with every arm missing is a
# B whose thinking never closed (boundary null). helpers.synthetic_run builds them.
records_from_arrays = functools.partial(records, readable=False, cut=40)


# A run directory: manifest.json with the experiment (and, if given, the config's conditions),
# records.jsonl, an empty timings.jsonl.
write_run_dir = functools.partial(write_run, model="tiny")


@pytest.fixture
def runs():
    """The run-directory helpers above, for tests (test modules cannot import conftest)."""
    return SimpleNamespace(
        record_line=record_line,
        records_from_arrays=records_from_arrays,
        write_run_dir=write_run_dir,
    )
