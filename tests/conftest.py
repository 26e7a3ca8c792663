"""Suite-wide settings: never touch a hub, deterministic threads, and the shared real model."""

from __future__ import annotations

import os

# The tests must never reach a model or dataset hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Triton kernels run in Triton's CPU interpreter (tests/models/quant/test_triton_kernels.py). Triton reads
# this when it is first imported, which bitsandbytes does on import, so it is set before anything.
os.environ.setdefault("TRITON_INTERPRET", "1")
# The suite runs in one pytest-xdist worker per core (pyproject.toml). A test that asks torch for
# more threads than its share then waits on the other worker's core; OpenMP threads that sleep
# while they wait, instead of spinning, keep that from costing the other worker its core. Read
# when OpenMP starts, so set before torch is imported; it changes no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import sys  # noqa: E402

import pytest  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One thread per worker, as `nudge run`'s own workers take: the cores are the workers'.
    # Tests that need another count set it themselves (the autouse fixture below restores it).
    import torch

    torch.set_num_threads(1)


def pytest_addoption(parser):
    parser.addoption(
        "--network",
        action="store_true",
        help="also run the tests marked `network` (they install from the package registry)",
    )


def pytest_collection_modifyitems(config, items):
    """Tests marked `network` need the package registry: outside the suite unless --network."""
    if config.getoption("--network"):
        return
    skip = pytest.mark.skip(reason="needs the package registry: run with --network")
    for item in items:
        if "network" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _torch_threads_as_found():
    """A test that sets torch's thread count (an in-process `nudge run --threads`, a server test)
    leaves it as it found it: batch invariance, and so the runner's schedule, depend on it."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    if before is not None:
        torch.set_num_threads(before)


@pytest.fixture
def one_thread():
    """torch on one thread for the test (restored after): where batch invariance was measured."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def count_calls(monkeypatch):
    """`count_calls(module, names)`: each named function of `module` replaced, for the test, by
    one that counts its calls and calls it; returns the counts, every name at 0 first, in order
    (a test sees which kernels a path reached)."""

    def counting(module, names) -> dict[str, int]:
        counts = dict.fromkeys(names, 0)
        for name in names:
            real = getattr(module, name)

            def counted(*args, _name=name, _real=real, **kwargs):
                counts[_name] += 1
                return _real(*args, **kwargs)

            monkeypatch.setattr(module, name, counted)
        return counts

    return counting


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct, fp32 on CPU (converted from GGUF once, then cached)."""
    from nudgeability.models.loader import load_model

    return load_model("smollm2")


@pytest.fixture(autouse=True)
def _no_fallback_from_an_earlier_test():
    """The fallbacks taken are process-wide (util/fallbacks.py) and a run's manifest lists them:
    one an earlier test took in the same worker must not reach a later test's manifest."""
    from nudgeability.util import fallbacks

    fallbacks.reset()
    yield
