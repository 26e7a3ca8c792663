"""Cohorts come from who serves the model (the manifest's backend and endpoint), never from the
continuation level (stats/records/cohorts.py), and medians are computed per cohort."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import synthetic_run as synthetic

from nudgeability.splice.rundir.manifest import Manifest
from nudgeability.stats.records.cohorts import OPEN_WEIGHT, PROVIDER, cohort_of
from nudgeability.stats.report.pipeline import StatsOptions, run_stats


def _remote(url: str) -> dict:
    return {"backend": {"backend": "openai", "api": "chat"}, "endpoint": {"base_url": url}}


@pytest.mark.parametrize(
    "manifest,cohort",
    [
        ({}, OPEN_WEIGHT),  # the in-process engine
        (_remote("http://localhost:8000/v1"), OPEN_WEIGHT),
        (_remote("http://127.0.0.1:8000/v1"), OPEN_WEIGHT),
        (_remote("http://10.1.2.3:8000/v1"), OPEN_WEIGHT),
        (_remote("http://192.168.0.7/v1"), OPEN_WEIGHT),
        (_remote("http://[::1]:8000/v1"), OPEN_WEIGHT),
        (_remote("http://gpu-box:8000/v1"), OPEN_WEIGHT),  # a name on the user's network
        (_remote("http://vllm.internal/v1"), OPEN_WEIGHT),
        (_remote("https://api.deepseek.com/v1"), PROVIDER),
        (_remote("https://8.8.8.8/v1"), PROVIDER),
    ],
)
def test_the_cohort_of_a_manifest(manifest, cohort):
    assert cohort_of(Manifest.from_dict(manifest)) == cohort


def test_a_token_level_provider_run_gets_medians_of_its_own(tmp_path):
    rng = np.random.default_rng(2)
    own = synthetic.write_run(tmp_path / "own", synthetic.records(synthetic.paper_arrays(rng, 40)))
    served = synthetic.write_run(
        tmp_path / "served",
        synthetic.records(synthetic.paper_arrays(rng, 40)),
        model="provider-model",
        manifest_extra=_remote("https://api.example.com/v1"),  # token-level, yet a provider
    )
    out = tmp_path / "stats"
    result = run_stats(StatsOptions([own, served], out=out, n_boot=100))
    assert [e.cohort for e in result.summaries] == [OPEN_WEIGHT, PROVIDER]
    document = json.loads((out / "stats.json").read_text())
    assert set(document["across"]) == {"open-weight, greedy", "provider-served, greedy"}
    assert document["across"]["provider-served, greedy"]["n_experiments"] == 1
