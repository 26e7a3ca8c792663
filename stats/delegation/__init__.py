"""Delegation value (runs made with `nudge run --resolve`): what the sentences do to final accuracy
once the tool's result is used.

value.py: the estimators (final outcome and accuracy, value swing V, flip value and its matched
random reference, tool accuracy); table.py: ValueTable, an experiment's actions and outcomes;
join.py: run directories (records + resolutions.jsonl) -> ValueTables; summary.py: every estimate
with its bootstrap interval (`summarize_value`). Definitions: stats/README.md.
"""
