"""The cells and CSV fields the paper's tables share: an experiment's identity columns, an
estimate with its interval, a (+, -) pair's S, WT and L. Used by paper.py and sampled.py."""

from __future__ import annotations

from nudgeability.splice.experiment.conditions import short_names

from ..cells import DAGGER, ci, fmt

IDENT = ("model", "task", "decoding", "cohort")


def labels(summaries) -> dict[str, str]:
    """The short name of each condition the experiments know (their runs' own included)."""
    return short_names(e.known for e in summaries)


def _model(e) -> str:
    level = getattr(e, "continuation", "token")
    return e.model if level == "token" else f"{e.model} ({level}-level)"


def ident(e) -> list[str]:
    return [_model(e), e.task, e.decoding, e.cohort]


def ident_record(e) -> dict:
    return {"model": _model(e), "task": e.task, "decoding": e.decoding, "cohort": e.cohort}


def with_ci(value: float, interval, scale: float = 1.0, dagger: bool = False) -> str:
    mark = DAGGER if dagger and interval is not None and interval.excludes_zero else ""
    shown = fmt(value * scale) + mark
    return shown if interval is None else f"{shown} {ci(interval, scale)}"


def estimate_cell(e, name: str, dagger: bool = False) -> str:
    found = e.estimates.get(name)
    return "–" if found is None else with_ci(found.value, found.ci, dagger=dagger)


def ci_only(e, name: str) -> str:
    found = e.estimates.get(name)
    return "–" if found is None else ci(found.ci)


def estimate_record(e, name: str, key: str) -> dict:
    found = e.estimates.get(name)
    if found is None:
        return {}
    return {
        key: found.value,
        f"{key}_low": found.ci.low,
        f"{key}_high": found.ci.high,
        f"{key}_n": found.n,
    }


def pair_columns(prefix: str) -> list[str]:
    out = []
    for name in ("S", "WT", "L"):
        out += [f"{prefix}{name}", f"{prefix}{name}_low", f"{prefix}{name}_high"]
    return out


def pair_record(p, prefix: str = "") -> dict:
    return {
        f"{prefix}S": p.S,
        f"{prefix}S_low": p.S_ci.low,
        f"{prefix}S_high": p.S_ci.high,
        f"{prefix}WT": 100 * p.WT,
        f"{prefix}WT_low": 100 * p.WT_ci.low,
        f"{prefix}WT_high": 100 * p.WT_ci.high,
        f"{prefix}L": p.L,
        f"{prefix}L_low": p.L_ci.low,
        f"{prefix}L_high": p.L_ci.high,
    }


def pair_cells(p) -> list[str]:
    return [with_ci(p.S, p.S_ci), with_ci(p.WT, p.WT_ci, 100), with_ci(p.L, p.L_ci, dagger=True)]
