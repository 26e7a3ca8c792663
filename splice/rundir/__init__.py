"""The run directory, written once (splice/rundir/README.md)."""
