"""Reading run directories: the one place a run's files become the stats' tables."""

from .join import (
    GatheredExperiment,
    Rows,
    competence_label,
    gather_experiments,
    load_experiments,
    table_from_records,
)
from .reading import iter_records, iter_resolutions, json_lines
from .run_dirs import RecordsError, RunDir, labelled_run_dirs, read_run_dir

__all__ = [
    "GatheredExperiment",
    "gather_experiments",
    "RecordsError",
    "RunDir",
    "Rows",
    "competence_label",
    "iter_records",
    "iter_resolutions",
    "json_lines",
    "labelled_run_dirs",
    "load_experiments",
    "read_run_dir",
    "table_from_records",
]
