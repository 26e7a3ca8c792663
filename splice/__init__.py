"""nudgeability.splice: the experiment, from a task's data file to an audited run directory.

Each folder is a layer; data flows one way (task -> prompts -> engine or backend -> records):

- experiment/: the vocabulary every layer imports: the conditions, the inserted sentences and the
  three prompts of a problem (it imports only tasks and models);
- tasks/: the official data files to problems, the task's tools, grading;
- run/: one `nudge run`: its configuration (config.py), the checks naming the flag at fault
  (validation.py), the pipeline that resolves it (prepare.py), the units of work (units.py,
  consistency.py, resolve.py, signals.py), the runner (runner.py), a server instead of the engine
  (remote.py); the throughput sweep of `nudge bench` is nudgeability.costs.sweep (costs/sweep.py);
- rundir/: the run format, written once: its file names (layout.py), the record types and their
  reader (records.py), the typed manifest and its reader, the plan, the seal, the store, the
  assembly, the part checks and `nudge merge` (README.md);
- audit/: `nudge verify`: inputs, completeness, integrity and replay (README.md).

The `nudge` command line that drives them is the top-level cli/ package, above every layer here.

The definitions the code follows (conditions, the cut, the splice, the actions) are in
splice/README.md.
"""
