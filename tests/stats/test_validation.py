"""Input validation in one place: each check names the argument and returns it normalised."""

from __future__ import annotations

import numpy as np
import pytest

from nudgeability.stats.validation import check_resampling, same_shape


def test_check_resampling_normalises_and_names_the_argument_at_fault():
    assert check_resampling(n_boot=np.int64(20), confidence=0.9, engine="numpy") == (
        20,
        0.9,
        "numpy",
    )
    with pytest.raises(
        ValueError, match=r"^n_boot must be a positive number of replicates, got 0$"
    ):
        check_resampling(n_boot=0)
    for bad in (0, 1, 95):
        with pytest.raises(ValueError, match=rf"^confidence must lie in \(0, 1\), got {bad}$"):
            check_resampling(confidence=bad)
    with pytest.raises(ValueError, match=r"^engine must be 'numba' or 'numpy', got 'gpu'$"):
        check_resampling(engine="gpu")


def test_same_shape_names_every_array_and_its_shape():
    conf, doubt = same_shape(conf=[1, 2], doubt=(3, 4))
    assert isinstance(conf, np.ndarray) and doubt.tolist() == [3, 4]
    with pytest.raises(ValueError, match=r"^conf and doubt differ in shape: \(2,\) vs \(1,\)$"):
        same_shape(conf=[1, 2], doubt=[1])
    with pytest.raises(
        ValueError, match=r"^s, base and arm differ in shape: \(1,\) vs \(1,\) vs \(2,\)$"
    ):
        same_shape(s=[1], base=[0], arm=[0, 1])
