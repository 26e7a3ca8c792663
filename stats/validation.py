"""Input validation of the stats' public functions, in one place.

As scipy.stats validates a bootstrap's arguments in one function (`_bootstrap_iv`) before any work,
every resampling entry point here (the pair bootstrap, the delegation-value bootstrap, the
grounded-nudge resamples, percentile intervals) calls `check_resampling`, and every estimator
that takes parallel arrays calls `same_shape`. Each raises ValueError naming the argument at fault
and returns the values normalised, so that a caller needs no check of its own.
"""

from __future__ import annotations

import numpy as np

ENGINES = ("numba", "numpy")  # the numba kernels, or their numpy twins (identical output)


def check_resampling(
    *, n_boot: int = 1, confidence: float = 0.95, engine: str = "numba"
) -> tuple[int, float, str]:
    """(n_boot, confidence, engine) checked and normalised; pass the ones the caller takes.

    n_boot: a positive number of replicates; confidence: the interval's level, in (0, 1);
    engine: one of ENGINES.
    """
    if int(n_boot) < 1:
        raise ValueError(f"n_boot must be a positive number of replicates, got {n_boot}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be 'numba' or 'numpy', got {engine!r}")
    return int(n_boot), float(confidence), engine


def same_shape(**arrays) -> tuple[np.ndarray, ...]:
    """The named arrays as numpy arrays, in the order given, all of one shape.

    Example: `conf, doubt = same_shape(conf=conf, doubt=doubt)`; a mismatch raises
    ValueError("conf and doubt differ in shape: (3,) vs (2,)").
    """
    out = tuple(np.asarray(a) for a in arrays.values())
    if len({a.shape for a in out}) > 1:
        names = list(arrays)
        listed = ", ".join(names[:-1]) + " and " + names[-1]
        raise ValueError(f"{listed} differ in shape: {' vs '.join(str(a.shape) for a in out)}")
    return out
