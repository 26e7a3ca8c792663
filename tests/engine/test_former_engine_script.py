"""nudgeability.bench.former, which the campaign benchmark compares the engine with: the static
engine of its last commit, extracted from git unchanged and run in a child process whose
`nudgeability` is that tree, computes HF's greedy tokens."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.engine_reference import hf_greedy, random_ids

from nudgeability.bench import former
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    found = subprocess.run(
        ["git", "-C", str(former.REPO), "cat-file", "-e", f"{former.FORMER_COMMIT}^{{commit}}"],
        capture_output=True,
    )
    if found.returncode != 0:  # a shallow clone: the former engine is not there to read
        pytest.skip(f"git commit {former.FORMER_COMMIT} is not in this checkout")
    model = tiny_model("llama", num_layers=2, seed=4)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    return model, path


def test_the_former_static_engine_runs_from_its_own_tree_and_gives_hf_greedy_tokens(checkpoint):
    model, path = checkpoint
    prompts = [random_ids(n, seed=n) for n in (5, 17, 9)]
    run = former.run_former(path, ("generate", prompts, [10] * 3, [], True), kv=4096, threads=1)
    for prompt, tokens in zip(prompts, run.tokens, strict=True):
        assert tokens == hf_greedy(model, prompt, 10, ()).tokens
    assert run.rows_per_step and max(run.rows_per_step) == 3


def test_the_child_imports_the_former_tree_not_this_checkout():
    tree = former.former_tree()
    assert (tree / "nudgeability" / "__init__.py").is_file()
    code = "import nudgeability.engine as e; print(e.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env={"PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip().startswith(str(tree.parent / "checkout"))


def test_run_child_runs_a_commits_code_or_todays_and_says_why_it_failed():
    """`run_child`, the side-by-side benchmarks' one way to start a child: a commit's child
    imports that commit's package, today's child this checkout's, with the extra environment
    seen; a failing child raises with its own error message."""
    found = subprocess.run(
        ["git", "-C", str(former.REPO), "cat-file", "-e", f"{former.FORMER_COMMIT}^{{commit}}"],
        capture_output=True,
    )
    if found.returncode != 0:
        pytest.skip(f"git commit {former.FORMER_COMMIT} is not in this checkout")
    code = "import os, nudgeability.engine as e; print(e.__file__, os.environ.get('NUDGE_PROBE'))"
    old = former.run_child(["-c", code], former.FORMER_COMMIT, {"NUDGE_PROBE": "seen"}).split()
    assert "/checkout/" in old[0] and not old[0].startswith(str(former.REPO))
    assert old[1] == "seen"
    today = former.run_child(["-c", code], None).split()
    assert today[0].startswith(str(former.REPO)) and today[1] == "None"
    with pytest.raises(RuntimeError, match="no_such_module"):
        former.run_child(["-c", "import no_such_module"], None)
