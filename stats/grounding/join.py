"""Reading the uncertainty signals of a run's records into arrays aligned with a table's rows.

The run stores (splice/rundir/records.py, `Record.signals`):

- on each B record: `entropy_mean`, `entropy_max`, `nll_mean` of B's reasoning up to the cut,
  and `hidden` = {"file": path relative to the run directory, "row": index} naming B's float16
  final-layer hidden state at the cut in an .npy side file (absent when B never closed);
- on each unaided self-consistency sample (condition CONSISTENCY, fields `sample` = 0..K-1):
  `answer_key`, the task-normalised answer, or null when the sample gave none.

Consistency of a row (problem, seed) = (count of its most common answer key) / K: samples
without an answer count in K but never agree. Rows without the field get NaN.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nudgeability.splice.experiment.conditions import CONSISTENCY, TOOL_BASE
from nudgeability.splice.rundir.layout import RECORDS

from ..records import RecordsError, iter_records, labelled_run_dirs

TOKEN_SIGNALS = ("entropy_mean", "entropy_max", "nll_mean")


@dataclass(frozen=True, eq=False)
class SignalData:
    """Raw signal values per table row (NaN where missing) and the hidden states (rows, d)."""

    raw: dict[str, np.ndarray]
    hidden: np.ndarray | None  # float32, NaN rows where missing; None when no row has one
    samples: int  # K, the most consistency samples seen for a row (0 when none)


def agreement(keys: list[str | None]) -> float:
    """Share of the samples whose answer key equals the most common one (None never counts)."""
    if not keys:
        return float("nan")
    counted = Counter(k for k in keys if k is not None)
    return (max(counted.values()) if counted else 0) / len(keys)


def load_signals(
    run_dirs, label_key: tuple[str, str, str], rows: list[tuple[str, int]], labels=None
) -> SignalData:
    """SignalData of one experiment's rows [(problem_id, seed)] from its run directories
    (`labels` as for records.load_experiments)."""
    index = {row: i for i, row in enumerate(rows)}
    raw = {name: np.full(len(rows), np.nan) for name in TOKEN_SIGNALS}
    keys: dict[int, list] = {}
    hidden_refs: dict[int, tuple[Path, int]] = {}
    for run_dir in labelled_run_dirs(run_dirs, labels):
        if run_dir.label.key != label_key:
            continue
        path = run_dir.path / RECORDS
        for number, record in iter_records(path):
            i = index.get((record.problem_id, record.seed))
            signals = record.signals  # an object, or absent (the run format's reader checks)
            if i is None or not signals:
                continue
            if record.condition == CONSISTENCY:
                keys.setdefault(i, []).append(signals.get("answer_key"))
            elif record.condition == TOOL_BASE:
                for name in TOKEN_SIGNALS:
                    if signals.get(name) is not None:
                        raw[name][i] = float(signals[name])
                ref = signals.get("hidden")
                if ref is not None:
                    if not (isinstance(ref, dict) and "file" in ref and "row" in ref):
                        raise RecordsError(
                            f"{path}:{number}: field signals.hidden must be {{'file', 'row'}}"
                        )
                    hidden_refs[i] = (run_dir.path / ref["file"], int(ref["row"]))
    if keys:
        raw["consistency"] = np.full(len(rows), np.nan)
        for i, found in keys.items():
            raw["consistency"][i] = agreement(found)
    return SignalData(
        raw={name: values for name, values in raw.items() if np.isfinite(values).any()},
        hidden=_read_hidden(hidden_refs, len(rows)),
        samples=max((len(v) for v in keys.values()), default=0),
    )


def _read_hidden(refs: dict[int, tuple[Path, int]], n_rows: int) -> np.ndarray | None:
    if not refs:
        return None
    files: dict[Path, np.ndarray] = {}
    out = None
    for i, (file, row) in refs.items():
        if file not in files:
            try:
                files[file] = np.load(file, mmap_mode="r")
            except (OSError, ValueError) as exc:
                raise RecordsError(f"{file}: cannot read the hidden states ({exc})") from None
        array = files[file]
        if not 0 <= row < len(array):
            raise RecordsError(f"{file}: row {row} is out of range (the file has {len(array)})")
        if out is None:
            out = np.full((n_rows, array.shape[1]), np.nan, dtype=np.float32)
        out[i] = array[row]
    return out
