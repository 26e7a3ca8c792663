"""nudgeability.bench: `nudge bench` (cli/bench.py) and what it calls, nothing else.

- `sweep.py`: the (prefix, arms) sweep (`run_bench`, `BenchPoint`);
- `workload.py`: the splice workload (one long real prefix, short real suffixes) and the per-arm
  HF baseline (`hf_generate`);
- `reference.py`: THE HF greedy reference (`hf_greedy`), which the baseline times and the tests
  check generations against;
- `memory.py`: this process's peak memory (CUDA's allocator peak, or the RSS rise on CPU).

The benchmark scripts' own code is benchmarks/benchkit/ (not installed), the tests' fake run
directory tests/helpers/synthetic_run.py.
"""
