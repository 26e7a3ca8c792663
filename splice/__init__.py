"""The experiment, from a task's data file to an audited run directory (splice/README.md)."""
