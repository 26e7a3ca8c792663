"""What generation costs on this device: measured (`nudge bench`), estimated (`nudge plan`) and
bounded below (the bandwidth floor); see costs/README.md.

- `sweep.py`: `nudge bench`'s (prefix, arms) sweep (`run_bench`, `BenchPoint`), on the splice
  workload of `splice_workload.py` (one long real prefix, short real suffixes, and the per-arm HF
  baseline `hf_generate`), with this process's peak memory from `memory.py`;
- `estimate/`: `nudge plan`, a run's or the paper's campaign's cost before it runs;
- `floor.py`: the bytes one decode step reads, over the device's copy bandwidth.

The benchmark scripts' own code is benchmarks/benchkit/ (not installed); the HF greedy reference
the baseline times and the tests check against is nudgeability.models.testing.reference.
"""
