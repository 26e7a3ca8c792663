"""The code the scripts of benchmarks/ share; not installed (benchmarks/README.md)."""
