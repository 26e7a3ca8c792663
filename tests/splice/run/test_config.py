"""The decoding modes of a run's configuration (splice/run/config.py)."""

from __future__ import annotations

import pytest

from nudgeability.splice.run.config import ConfigError, resolve_decoding


def test_decoding_modes_resolve_to_the_protocol_settings():
    assert resolve_decoding("greedy", None) == (0.0, 1.0, (0,))
    assert resolve_decoding("sampled", None) == (1.0, 0.95, (0, 1, 2))
    assert resolve_decoding("sampled", (5,)) == (1.0, 0.95, (5,))
    with pytest.raises(ConfigError, match="--seeds"):
        resolve_decoding("greedy", (0, 1))


def test_the_pool_memory_share_is_written_only_when_given():
    """`gpu_memory_utilization` left to the engine's default is not in the config's JSON, so a
    run without it (every CPU run) writes the manifest earlier versions wrote, and resumes theirs;
    given, it round-trips."""
    from nudgeability.splice.run.config import RunConfig

    assert "gpu_memory_utilization" not in RunConfig(chunk_size=32).to_dict()
    # resolved, as a manifest holds it: the decode is on or off (None, the device's default,
    # is resolved by `prepare` and never written)
    given = RunConfig(chunk_size=32, gpu_memory_utilization=0.5, static_decode=False)
    assert given.to_dict()["gpu_memory_utilization"] == 0.5
    assert RunConfig.from_dict(given.to_dict()) == given
    # likewise the fixed-shape decode: off (every run before it existed) is not written
    assert "static_decode" not in RunConfig(chunk_size=32).to_dict()
    graphs = RunConfig(chunk_size=32, static_decode=True)
    assert graphs.to_dict()["static_decode"] is True
    assert RunConfig.from_dict(graphs.to_dict()) == graphs
