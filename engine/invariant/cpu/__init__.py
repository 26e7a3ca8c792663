"""The CPU batch-invariant construction: products, attention, cores and reordered weights."""
