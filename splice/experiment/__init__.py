"""The experiment's vocabulary, which every layer imports: the conditions (conditions.py), the
inserted sentences (sentences.py, sentences.toml), the prompts of a problem (prompts.py) and the
record schema (records.py). Nothing here imports the runner, the run directory or the stats."""
