"""The GPU check (benchmarks/gpu_check.py): `check.py` runs the sections `quant.py` and
`engine.py` inside one time budget, as one table."""
