"""Reading run directories: the one place a run's files become the stats' tables.

run_dirs.py reads and pools the manifests (RunDir, labels, pooling by the run format's
`experiment_settings`); reading.py reads
records.jsonl and resolutions.jsonl as typed records through the run format's reader
(splice/rundir/records.py); join.py turns the records of
one experiment into its ExperimentTable (`Rows` and `competence_label` are the rules the
delegation and grounding joins share). The file names come from splice/rundir/layout.py.
"""

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
