"""`nudge bench` (cli/bench.py) and what it calls, nothing else."""
