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
