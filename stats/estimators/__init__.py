"""The estimators of one experiment and across experiments, as pure functions over int8 arrays."""
