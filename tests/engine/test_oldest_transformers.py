"""The engine's HF hooks on the oldest transformers that pyproject.toml accepts (5.17: the GPU
image's, benchmarks/README.md), not only on the release the CPU install resolves.

That release and the huggingface-hub 1.x it requires are installed from the package registry into
a folder of their own (no dependencies: everything else is this environment's), which goes first on
the path of a child pytest running the arm-equals-solo tests on the tiny models of every family.
It needs the package registry, so it is not part of the suite: `.ci/run` runs it as a step of its
own (`python -m pytest --network tests/engine/test_oldest_transformers.py`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.child_pytest import run_pytest

OLDEST = "5.17"


@pytest.mark.network
def test_arms_equal_solo_on_the_oldest_accepted_transformers(tmp_path):
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            f"transformers=={OLDEST}.*",
            "huggingface-hub>=1.5,<2",
        ],
        capture_output=True,
        text=True,
    )
    if install.returncode:
        pytest.skip(
            f"transformers {OLDEST} could not be installed: {install.stderr.strip()[-300:]}"
        )
    env = {**os.environ, "PYTHONPATH": str(target)}
    version = subprocess.run(
        [sys.executable, "-c", "import transformers; print(transformers.__version__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version.startswith(OLDEST), version
    run = run_pytest(["tests/engine/test_arm_equals_solo.py"], env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
