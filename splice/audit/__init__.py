"""`nudge verify` (README.md): verify.py (the audit's steps as library calls), stored_run.py (a run
directory and its plan), check.py (the outcome of a check), hashes.py (inputs and integrity),
completeness.py, replay.py (which units, and their replay by the runner's own code) and
record_diff.py (the first differing field)."""
