"""The sampled-decoding tables (the paper's Appendix G.5): Table 4 per seed, Table 5 pooled over
seeds with the spread across seeds and the repeated-label check (estimators/seeds.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..cells import DAGGER, fmt
from .columns import IDENT, ident, ident_record, pair_cells, pair_columns, pair_record
from .grid import Grid


def table4(summaries: Sequence) -> Grid:
    """Per seed of each sampled experiment."""
    rows, records = [], []
    for e in summaries:
        for seed, p in e.per_seed.items():
            rate = e.seed_spread.unaided[seed] if e.seed_spread else None
            accuracy = rate.percent if rate else math.nan
            rows.append([*ident(e), str(seed), fmt(accuracy), *pair_cells(p), str(p.n_S), str(p.F)])
            records.append(
                {
                    **ident_record(e),
                    "seed": seed,
                    "unaided_accuracy": accuracy,
                    **pair_record(p),
                    "n_S": p.n_S,
                    "F": p.F,
                }
            )
    return Grid(
        "table4",
        "Table 4. Sampled decoding (T = 1.0, top-p 0.95), per seed: unaided accuracy, S, WT and L with 95% intervals.",
        [
            "Model",
            "Task",
            "Decoding",
            "Cohort",
            "Seed",
            "Unaided acc (%)",
            "S (pp)",
            "WT (%)",
            "L (pp)",
            "n_S",
            "F",
        ],
        [rows],
        [*IDENT, "seed", "unaided_accuracy", *pair_columns(""), "n_S", "F"],
        records,
        [f"{DAGGER} L's 95% interval excludes 0. Each seed is a paired sample of its own."],
    )


def _range(pair: tuple[float, float]) -> str:
    return f"{fmt(pair[0])}–{fmt(pair[1])}"


def table5(summaries: Sequence) -> Grid:
    """Pooled over seeds, with the spread across seeds and the repeated-label check."""
    rows, records = [], []
    for e in summaries:
        spread, labels = e.seed_spread, e.repeated_labels
        if spread is None:
            continue
        cells = [*ident(e), str(len(e.seeds)), *pair_cells(e.primary)]
        cells += [_range(spread.S), _range(spread.WT), _range(spread.L), _range(spread.accuracy)]
        record = {**ident_record(e), "seeds": len(e.seeds), **pair_record(e.primary)}
        record |= {
            "S_seed_min": spread.S[0],
            "S_seed_max": spread.S[1],
            "WT_seed_min": spread.WT[0],
            "WT_seed_max": spread.WT[1],
            "L_seed_min": spread.L[0],
            "L_seed_max": spread.L[1],
            "accuracy_seed_min": spread.accuracy[0],
            "accuracy_seed_max": spread.accuracy[1],
        }
        if labels is not None:
            cells += [
                f"{fmt(labels.flip_share)} ({labels.flipped}/{labels.n_problems})",
                _range(labels.WT_range),
                _range(labels.L_range),
            ]
            record |= {
                "label_flip_share": labels.flip_share,
                "label_flipped": labels.flipped,
                "label_problems": labels.n_problems,
                "WT_labels_min": labels.WT_range[0],
                "WT_labels_max": labels.WT_range[1],
                "L_labels_min": labels.L_range[0],
                "L_labels_max": labels.L_range[1],
            }
        else:
            cells += ["–"] * 3
        rows.append(cells)
        records.append(record)
    columns = [*IDENT, "seeds", *pair_columns("")]
    columns += [f"{q}_seed_{m}" for q in ("S", "WT", "L", "accuracy") for m in ("min", "max")]
    columns += ["label_flip_share", "label_flipped", "label_problems"]
    columns += [f"{q}_labels_{m}" for q in ("WT", "L") for m in ("min", "max")]
    return Grid(
        "table5",
        "Table 5. Sampled decoding pooled over seeds (problem-clustered 95% intervals), the range across seeds, and the repeated-label check.",
        [
            "Model",
            "Task",
            "Decoding",
            "Cohort",
            "Seeds",
            "S (pp)",
            "WT (%)",
            "L (pp)",
            "S range",
            "WT range (%)",
            "L range",
            "Unaided acc range (%)",
            "Label flips (%)",
            "WT under each label draw (%)",
            "L under each label draw",
        ],
        [rows],
        columns,
        records,
        [
            "Ranges are min–max across seeds. Label flips: share of problems with ≥ 2 known unaided "
            "labels whose labels disagree across the seeds' NT answers; WT and L are recomputed with "
            "every row's label replaced by one seed's label of its problem, for each seed.",
        ],
    )
