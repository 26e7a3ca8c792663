"""benchkit: the code the scripts of benchmarks/ share. It is not installed (the wheel ships
only `nudge bench`'s sweep, nudgeability.costs): a script run as `python benchmarks/X.py` has
benchmarks/ as sys.path[0] and imports `benchkit.X`; the tests find it through pytest's
`pythonpath` (pyproject.toml).

- `workload.py`: the P1 splice workload's two runs (`run_fork`, `run_hf_per_arm`), `timed`, and
  the scripts' shared options (`workload_parser`); the workload itself is `nudge bench`'s
  (nudgeability.costs.splice_workload).
- `memory.py`: a child process's peak memory (`run_child`) and a process tree's (`tree_peaks`);
  `demo_probes.py`: the probes around an in-process `nudge run` (workers_memory.py).
- `floor.py`: the linear and attention floors, interleaved with the engine step by step
  (fork_vs_generate.py); `profile.py`: aten-op and host-read counts of one decode step, the
  engine's and HF's.
- `campaign.py`: the systems benchmarks/campaign.py runs side by side; `servers.py`:
  OpenAI-compatible servers started and driven.
- `gpu/`: the GPU check's runner and sections (benchmarks/gpu_check.py).
- `results.py`: each benchmark's section of benchmarks/RESULTS.md.
"""
