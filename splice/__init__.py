"""nudgeability.splice: tasks, conditions, the runner, the audit and the `nudge run` / `merge` /
`verify` CLI.

- conditions.py: the condition vocabulary (codes, order, parent base, polarity, voice, +/- pairs,
  figure labels); standard library only, so `nudgeability.stats` imports it too;
- tasks/: data files to problems, the three prompts (tasks/base.py owns them and the `ask_expert`
  oracle tool), grading; sentences.py and sentences.toml: the inserted sentences;
- run_config.py: `RunConfig`, the one run configuration (as asked, then resolved by prepare.py);
  run_cli.py: the flags and their parsing; prepare.py: validation, prompts and the manifest;
- plan.py, units.py, runner.py, work_store.py, merge.py: the resumable, shardable runner;
  assemble.py: records.jsonl from the part files, in canonical order (runner and audit);
  manifest.py: the manifest, its input hashes and the seal of a finished run's files;
- verify.py (the plan of a stored run, completeness), verify_hashes.py (inputs, integrity),
  replay.py (units recomputed by the runner's own code), record_diff.py (first differing field),
  verify_cli.py: `nudge verify`, the audit;
- records.py: the record schema (the action field is models/families/action.py's `Action`).
"""
