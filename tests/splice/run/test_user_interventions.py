"""A user's interventions file end to end: the README's worked example (splice/README.md, *Your
own interventions*), read from the page, run on a tiny model. Each of its arms generates what HF
`generate` gives on the full edited prompt, built here (the with-tool messages, B's reasoning up
to the cut or, for the replace, up to the start of its last sentence found here by decoding, and
"Wait." tokenised on its own); `nudge stats` reads the user's pair, S checked against a loop over
the records; a resume with the file changed is refused naming the key; `nudge verify` replays it;
and only the run executes the file (a line appended to it marks each execution): a resume,
`nudge verify`, `nudge stats` and `nudge report` read its definitions from the manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers.engine_reference import family_greedy
from helpers.tiny_runs import nudge_run_args, read_records, run_nudge, run_verify
from transformers import AutoModelForCausalLM, AutoTokenizer

from nudgeability.models.families import get_family
from nudgeability.splice.experiment.prompts import prompt_sha256
from nudgeability.splice.tasks import get_task, sample_problems

README = Path(__file__).resolve().parents[3] / "splice" / "README.md"
N, BUDGETS, ARCH, PUSH = 4, "24,16", "qwen3", 2.5
# appended to the example: every execution of the file adds a line to FILE.ran
MARKER = "\nwith open(__file__ + '.ran', 'a') as ran:\n    ran.write('ran\\n')\n"


def readme_example() -> str:
    """The Python block of splice/README.md's *Your own interventions* section."""
    section = README.read_text(encoding="utf-8").split("## Your own interventions", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _prompt(family, task, problem) -> list[int]:
    messages, tools = task.with_tool(problem)
    lead = 1 if messages[0]["role"] == "system" else 0
    messages = messages[:lead] + family.demonstrations(tools) + messages[lead:]
    return family.render(messages, tools=tools, thinking=True)


def _last_sentence_start(family, reasoning: list[int]) -> int:
    """Where the last sentence begins, found by hand: the text's last sentence end (".", "!" or
    "?" and closing quotes before a blank, or a line break) with text after it, then the first
    token whose growing prefix decodes past the sentence's first character."""
    text = family.decode(reasoning)
    content = len(text.rstrip())
    first = 0
    for k, char in enumerate(text[:content]):
        ends = char == "\n"
        if char in ".!?":
            j = k + 1
            while j < len(text) and text[j] in ".!?\"')]”’":
                j += 1
            ends = j < len(text) and text[j].isspace() and text[j - 1] in ".!?\"')]”’"
        if ends:
            j = k + 1
            while j < content and text[j].isspace():
                j += 1
            if j < content:
                first = j
    if text[first:content] and text[first].isspace():
        first += len(text[first:]) - len(text[first:].lstrip())
    return next(
        (i for i in range(len(reasoning)) if len(family.decode(reasoning[: i + 1])) > first), 0
    )


def _run(root: Path, model, n: int, budgets: str, conditions: str, data: Path | None = None):
    """`nudge run` of the README's example file on `model` (None: SmolLM2), on the problems of
    `data` (None: the shipped file); (out, file, argv)."""
    path = root / "wait.py"
    path.write_text(readme_example() + MARKER, encoding="utf-8")
    out = root / "out"
    argv = nudge_run_args(
        model,
        out,
        n=n,
        max_new_tokens=budgets,
        conditions=conditions,
        interventions=path,
        data=data,
    )
    status, err = run_nudge(argv)
    assert status == 0, err
    return out, path, argv


def _check_arms(
    model_dir, out: Path, n: int, budget: int, data: Path | None = None
) -> list[tuple[int, int]]:
    """Every arm of the example equals HF greedy on its full prompt, built here; the replace
    arms' (kept, whole) reasoning lengths."""
    records = read_records(out)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    family = get_family(json.loads((out / "manifest.json").read_text())["family"], tokenizer)
    task = get_task("strategyqa")
    problems = {p.id: p for p in sample_problems(task.load(data), n, 0)}
    by_key = {(r["problem_id"], r["condition"]): r for r in records}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    splice = family.splice_ids("Wait.", sealed=False)
    arms = [r for r in records if r["condition"] in ("wait_replace", "wait_insert")]
    assert arms
    edits = []
    for arm in arms:
        base = by_key[(arm["problem_id"], "B")]
        reasoning = base["generated_ids"][: base["boundary"]]
        prompt = _prompt(family, task, problems[arm["problem_id"]])
        assert arm["prompt_sha256"] == prompt_sha256(prompt)
        keep = len(reasoning)
        if arm["condition"] == "wait_replace":
            keep = _last_sentence_start(family, reasoning)
            edits.append((keep, len(reasoning)))
        assert (arm["prefix_tokens"], arm["sentence_id"]) == (keep, None)
        want = family_greedy(model, tokenizer, family, prompt + reasoning[:keep] + splice, budget)
        assert arm["generated_ids"] == want, arm["condition"]
    return edits


def _brute_force_s(records: list[dict]) -> tuple[float | None, int]:
    """S of the pair `wait` by a loop over the records: over the problems whose + arm
    (wait_insert) and - arm (wait_replace) both completed (SELF, TOOL or OTHER), 100 x (the share
    of TOOL under - less the share under +); (S, n_S)."""
    kinds = {(r["problem_id"], r["condition"]): r["action"]["kind"] for r in records}
    tool_minus = tool_plus = n_s = 0
    for pid in {r["problem_id"] for r in records}:
        plus, minus = kinds.get((pid, "wait_insert")), kinds.get((pid, "wait_replace"))
        if plus in ("SELF", "TOOL", "OTHER") and minus in ("SELF", "TOOL", "OTHER"):
            n_s += 1
            tool_plus += plus == "TOOL"
            tool_minus += minus == "TOOL"
    return (100 * (tool_minus - tool_plus) / n_s if n_s else None), n_s


def _stats_pair(out: Path, where: Path) -> dict:
    status, err = run_nudge(["stats", out, "--out", where, "--n-boot", "200"])
    assert status == 0, err
    (experiment,) = json.loads((where / "stats.json").read_text())["experiments"]
    return experiment["pairs"]["wait"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_checkpoint):
    model_dir = tiny_checkpoint(ARCH, close_push=PUSH)
    root = tmp_path_factory.mktemp("user-interventions")
    return (model_dir, *_run(root, model_dir, N, BUDGETS, "primary"))


def test_the_example_arms_equal_hf_generate_on_the_edited_prompt(tiny_run):
    model_dir, out, _, _ = tiny_run
    # The tiny random model writes no sentence end: the replace keeps none of its reasoning.
    assert _check_arms(model_dir, out, N, int(BUDGETS.split(",")[1]))


def test_the_manifest_records_the_file_and_what_it_defined(tiny_run):
    _, out, path, _ = tiny_run
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["interventions"] == str(path)
    assert manifest["inputs"]["interventions"] == {
        "path": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    assert [d["code"] for d in manifest["interventions"]] == ["wait_replace", "wait_insert"]
    assert manifest["config"]["conditions"][-2:] == ["wait_replace", "wait_insert"]


def test_a_resume_with_the_file_changed_is_refused_naming_the_key(tiny_run, tmp_path):
    _, out, path, argv = tiny_run
    copy, changed = tmp_path / "out", tmp_path / "wait.py"
    shutil.copytree(out, copy)
    changed.write_text(path.read_text() + "# edited\n", encoding="utf-8")
    moved = [str(copy) if a == str(out) else str(changed) if a == str(path) else a for a in argv]
    status, err = run_nudge(moved)
    assert status != 0
    assert "inputs.interventions.sha256" in err, err
    same = [str(copy) if a == str(out) else a for a in argv]  # the same file: resumes
    assert run_nudge(same)[0] == 0


def test_nudge_verify_replays_the_users_arms(tiny_run):
    _, out, _, _ = tiny_run
    status, lines = run_verify(out, "--all")
    assert status == 0, lines


def test_only_the_run_executes_the_file(tiny_run, tmp_path):
    _, out, path, argv = tiny_run
    marker = Path(f"{path}.ran")
    assert marker.read_text() == "ran\n"  # the run's execution
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    status, lines = run_verify(copy, "--sample", "1")
    assert status == 0, lines
    assert run_nudge(["stats", copy, "--out", tmp_path / "stats", "--n-boot", "50"])[0] == 0
    assert run_nudge(["report", tmp_path / "stats", "--out", tmp_path / "report"])[0] == 0
    status, err = run_nudge([str(copy) if a == str(out) else a for a in argv])  # a resume
    assert status == 0, err
    assert marker.read_text() == "ran\n"


def test_stats_reads_the_users_pair_and_the_report_shows_its_arms(tiny_run, tmp_path):
    _, out, _, _ = tiny_run
    pair = _stats_pair(out, tmp_path / "stats")
    assert (pair["S"], pair["n_S"]) == _brute_force_s(read_records(out))
    assert "S wait" in (tmp_path / "stats" / "table.md").read_text(encoding="utf-8")
    status, err = run_nudge(["report", tmp_path / "stats", "--out", tmp_path / "report"])
    assert status == 0, err
    assert "wait_replace" in (tmp_path / "report" / "report.html").read_text(encoding="utf-8")


# The first problem of the shipped StrategyQA draw (seed 0) whose SmolLM2 B reasoning has a
# sentence before its last: the fifth (the first four write one sentence each, and their replace
# arm keeps none of it).
TWO_SENTENCES = "39764cc9679c2e0e6435"


@pytest.mark.slow
def test_on_smollm2_the_example_replaces_a_real_sentence_and_stats_reads_it(tmp_path):
    """The example on SmolLM2, on that one problem alone (a data file of its record: a
    problem's records do not depend on the others in the run, test_shared_start_runs.py)."""
    from nudgeability.models.smollm2 import converted_dir

    shipped = json.loads(get_task("strategyqa").default_data_path().read_text(encoding="utf-8"))
    data = tmp_path / "strategyqa.json"
    data.write_text(json.dumps([r for r in shipped if r["qid"] == TWO_SENTENCES]), encoding="utf-8")
    out, _, _ = _run(tmp_path, None, 1, "256,64", "conf,doubt", data)
    edits = _check_arms(converted_dir(), out, 1, 64, data)
    assert any(0 < keep < whole for keep, whole in edits), edits
    pair = _stats_pair(out, tmp_path / "stats")
    s, n_s = _brute_force_s(read_records(out))
    assert n_s > 0 and pair["n_S"] == n_s
    assert pair["S"] == pytest.approx(s)


def test_nudge_verify_rehashes_the_file_and_takes_it_moved(tiny_run, tmp_path):
    _, out, path, _ = tiny_run
    copy, moved = tmp_path / "out", tmp_path / "moved.py"
    shutil.copytree(out, copy)
    shutil.copy(path, moved)
    status, lines = run_verify(copy, "--sample", "0")
    assert status == 0 and "interventions files re-hashed" in lines[0], lines
    moved.write_text(path.read_text() + "# edited\n", encoding="utf-8")
    status, lines = run_verify(copy, "--sample", "0", "--interventions", moved)
    assert status != 0 and "interventions file" in lines[0], lines
    shutil.copy(path, moved)
    status, lines = run_verify(copy, "--sample", "1", "--interventions", moved)
    assert status == 0, lines
