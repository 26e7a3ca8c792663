"""The CPU batch-invariant kernels: products, attention, cores and reordered weights
(engine/invariant/__init__.py says how they fit together)."""
