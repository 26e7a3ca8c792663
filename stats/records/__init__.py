"""Reading run directories: the one place a run's files become the stats' tables.

run_dirs.py reads and pools the manifests (RunDir, labels, `defining_settings`); reading.py reads
records.jsonl and resolutions.jsonl line by line, each line checked; join.py turns the records of
one experiment into its ExperimentTable (`Rows` and `competence_label` are the rules the
delegation and grounding joins share). The file names come from splice/rundir/layout.py.
"""

from .join import Rows, competence_label, load_experiments, table_from_records
from .reading import iter_records, iter_resolutions, json_lines, record_key
from .run_dirs import RecordsError, RunDir, labelled_run_dirs, read_run_dir

__all__ = [
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
    "record_key",
    "table_from_records",
]
