"""ExperimentTable validation: malformed arrays are rejected with the field named."""

from __future__ import annotations

import numpy as np
import pytest

from nudgeability.stats import ExperimentTable, TableError


def test_mismatched_array_lengths_name_the_field():
    with pytest.raises(TableError, match=r"field base: length \(2,\) does not match len\(s\) = 3"):
        ExperimentTable(s=[1, 0, -1], base=[0, 1])
    with pytest.raises(TableError, match=r"field arms\['doubt'\]: length"):
        ExperimentTable(s=[1, 0], base=[0, 1], arms={"conf": [0, 1], "doubt": [0]})
    with pytest.raises(TableError, match=r"field cluster: length"):
        ExperimentTable(s=[1, 0], base=[0, 1], cluster=[0])
    with pytest.raises(TableError, match=r"field problem_ids: length 1"):
        ExperimentTable(s=[1, 0], base=[0, 1], problem_ids=("p0",))


def test_out_of_range_codes_wrong_dtype_and_shape_are_rejected():
    with pytest.raises(TableError, match=r"field s: value 2 outside the allowed codes -1..1"):
        ExperimentTable(s=[1, 2], base=[0, 1])
    with pytest.raises(TableError, match=r"field arms\['conf'\]: value 4 outside"):
        ExperimentTable(s=[1], base=[0], arms={"conf": [4]})
    with pytest.raises(TableError, match=r"field base: expected integer codes"):
        ExperimentTable(s=[1], base=[0.5])
    with pytest.raises(TableError, match=r"field s: expected a 1-D array"):
        ExperimentTable(s=[[1]], base=[[0]])
    with pytest.raises(TableError, match=r"arms\['B'\]"):
        ExperimentTable(s=[1], base=[0], arms={"B": [0]})


def test_valid_table_is_stored_as_int8_and_selects_seeds():
    table = ExperimentTable(
        s=[1, 0, 1, 0],
        base=[0, 1, 0, 1],
        arms={"conf": [0, 0, 1, 1]},
        cluster=[0, 0, 1, 1],
        seed=[0, 1, 0, 1],
    )
    assert table.s.dtype == table.base.dtype == table.arms["conf"].dtype == np.int8
    assert table.is_clustered and table.seeds == (0, 1) and table.n_problems == 2
    seed1 = table.for_seed(1)
    assert (
        seed1.base.tolist() == [1, 1]
        and seed1.cluster.tolist() == [0, 1]
        and not seed1.is_clustered
    )
