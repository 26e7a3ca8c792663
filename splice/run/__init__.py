"""One `nudge run`: configuration, validation, the prepare pipeline, the units of work, the runner.

    prepared = prepare(RunConfig(model="smollm2", task="strategyqa", n=8))   # prepare.py
    result = run(prepared, "runs/smollm2-strategyqa-greedy")                 # runner.py

The run directory it writes is splice/rundir/'s; the runner computes the units its `Plan` lists.
"""
