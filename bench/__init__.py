"""nudgeability.bench: what the benchmarks, `nudge bench` and the tests share, so that every
script in benchmarks/ imports only the installed package.

- `sweep.py`: `nudge bench`'s (prefix, arms) sweep (`run_bench`, `BenchPoint`);
  `workload.py`: the splice workload (one long real prefix, short real suffixes) and the two ways
  of running it (`run_fork`, `run_hf_per_arm`); `reference.py`: THE HF greedy reference
  (`hf_greedy`), which the tests check generations against and the benchmarks time.
- `profile.py`: aten-op and host-read counts of one decode step, the engine's and HF's;
  `floor.py`: the linear and attention floors, interleaved with the engine step by step;
  `memory.py`: peak memory, in this process or a child; `perf_samples.py`: where a process's
  CPU time fell by shared object (kernels, libc, the interpreter), sampled by Linux `perf`.
- `campaign.py`: the systems benchmarks/campaign.py runs side by side; `former.py` (with
  `former_child.py`): the former static engine, from its own git tree, in a child process
  (`commit_tree`: any commit's tree, for a child to run);
  `servers.py`: OpenAI-compatible servers started and driven.
- `gpu/`: the GPU check's runner and sections (benchmarks/gpu_check.py).
- `results.py`: each benchmark's section of benchmarks/RESULTS.md.
- `synthetic_run.py`: THE fake run directory (records in the runner's schema) of the tests and
  of benchmarks/bench_report.py; `chromium.py`: headless chromium, for report.html.
"""
