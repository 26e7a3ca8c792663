"""The GPU check's runner and sections (benchmarks/gpu_check.py)."""
