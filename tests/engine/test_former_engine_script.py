"""benchmarks/_former_engine.py, which the campaign benchmark compares the engine with: the static
engine read from git at its last commit still imports beside today's package (its imports are
remapped where modules moved since) and computes HF's greedy tokens."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest
from helpers.engine_reference import hf_greedy, random_ids

from nudgeability.models.testing.tiny import tiny_model

REPO = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def former():
    script = _script("_former_engine")
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{script.FORMER_COMMIT}^{{commit}}"],
        capture_output=True,
    )
    if found.returncode != 0:  # a shallow clone: the former engine is not there to read
        pytest.skip(f"git commit {script.FORMER_COMMIT} is not in this checkout")
    return script.load_former_engine()


def test_the_former_static_engine_loads_and_gives_hf_greedy_tokens(former):
    model = tiny_model("llama", num_layers=2, seed=4)
    prompts = [random_ids(n, seed=n) for n in (5, 17, 9)]
    params = former.SamplingParams(max_new_tokens=10, ignore_eos=True)
    outs = former.Engine(model).generate(prompts, params)
    for prompt, out in zip(prompts, outs):
        assert out.token_ids == hf_greedy(model, prompt, 10, ()).tokens
