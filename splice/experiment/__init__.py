"""The experiment's vocabulary, which every layer imports: the conditions (conditions.py), the
inserted sentences (sentences.py, sentences.toml) and the prompts of a problem (prompts.py). The
record schema is the run format's (splice/rundir/records.py). Nothing here imports the runner, the
run directory or the stats."""
