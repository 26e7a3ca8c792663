"""nudgeability.splice: tasks, conditions, the runner and the `nudge run` / `nudge merge` CLI.

- conditions.py: the condition vocabulary (codes, order, parent base, polarity, voice, +/- pairs,
  figure labels); standard library only, so `nudgeability.stats` imports it too;
- tasks/: data files to problems, the three prompts (tasks/base.py owns them and the `ask_expert`
  oracle tool), grading; sentences.py and sentences.toml: the inserted sentences;
- run_config.py: `RunConfig`, the one run configuration (as asked, then resolved by prepare.py);
  run_cli.py: the flags and their parsing; prepare.py: validation, prompts and the manifest;
- plan.py, units.py, runner.py, work_store.py, merge.py: the resumable, shardable runner;
- records.py: the record schema (the action field is models/families/action.py's `Action`).
"""
