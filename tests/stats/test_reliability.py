"""`nudge stats` / `nudge report` never mix runs silently, never lose the previous output, and say
why a result is empty (issue 12, items 2, 3, 6 and 8).

Fault injection: the child process sets RLIMIT_FSIZE with SIGXFSZ at its default action, so the
kernel kills it inside the write that crosses the limit: a kill in the middle of writing
stats.json (or a figure) after the previous version exists.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np

from nudgeability.cli import main
from nudgeability.splice.rundir.seal import write_sealed_manifest

KILL_DURING_WRITE = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from nudgeability.cli import main
sys.exit(main({argv!r}))
"""


def _table(planted, n=120, seed=5):
    return planted.sample(np.random.default_rng(seed), n)


def _run_dir(runs, planted, path, *, config=None, seed=5, seeds=(0,), prefix="p", **kw):
    lines = runs.records_from_arrays(_table(planted, seed=seed), prefix=prefix)
    directory = runs.write_run_dir(path, lines, **kw)
    if config is not None:
        manifest = json.loads((directory / "manifest.json").read_text())
        manifest["config"] = config
        manifest["experiment"]["seeds"] = list(seeds)
        (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def _config(**changes) -> dict:
    config = {
        "model": "/m/tiny",
        "family": "qwen3",
        "dtype": "float32",
        "device": "cpu",
        "task": "musique",
        "data": "/d/musique.jsonl",
        "n": 120,
        "sample_seed": 0,
        "decoding": "greedy",
        "temperature": 0.0,
        "top_p": 1.0,
        "seeds": [0],
        "conditions": ["NT", "B", "conf", "doubt"],
        "max_new_tokens": 512,
        "max_new_tokens_arm": 256,
        "sentences": "/s/sentences.toml",
        "chunk_size": 32,
        "max_batch_tokens": None,
        "shard": None,
    }
    config.update(changes)
    return config


def _stats(capsys, *argv) -> tuple[int, str]:
    status = main(["stats", *map(str, argv), "--n-boot", "200"])
    return status, capsys.readouterr().err


# ------------------------------------------------------------------ 2. no silent pooling
def test_runs_of_different_settings_are_not_pooled(tmp_path, runs, planted, capsys):
    a = _run_dir(runs, planted, tmp_path / "a", config=_config())
    b = _run_dir(
        runs,
        planted,
        tmp_path / "b",
        seed=6,
        prefix="q",  # other problems: nothing but the manifests tells the runs apart
        config=_config(max_new_tokens=1024, sample_seed=3),
    )
    status, err = _stats(capsys, a, b, "--out", tmp_path / "o")
    assert status == 2, err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in err
    for needle in ("config.max_new_tokens", "config.sample_seed", str(b), "--label"):
        assert needle in line, line
    assert not (tmp_path / "o" / "stats.json").exists()


def test_a_label_per_run_keeps_them_as_separate_rows(tmp_path, runs, planted, capsys):
    a = _run_dir(runs, planted, tmp_path / "a", config=_config())
    b = _run_dir(runs, planted, tmp_path / "b", seed=6, config=_config(max_new_tokens=1024))
    out = tmp_path / "o"
    status, err = _stats(
        capsys, a, b, "--label", f"{a}=short", "--label", f"{b}=long", "--out", out
    )
    assert status == 0, err
    experiments = json.loads((out / "stats.json").read_text())["experiments"]
    assert sorted(e["model"] for e in experiments) == ["tiny (long)", "tiny (short)"]
    assert [e["n_problems"] for e in experiments] == [120, 120]


def test_runs_that_differ_only_in_shard_seeds_or_batching_are_pooled(
    tmp_path, runs, planted, capsys
):
    first = _config(decoding="sampled", seeds=[0], shard=[1, 2], chunk_size=8)
    second = _config(decoding="sampled", seeds=[1], shard=[2, 2], max_batch_tokens=4096)
    a = _run_dir(runs, planted, tmp_path / "a", config=first, decoding="sampled")
    lines = runs.records_from_arrays(_table(planted, seed=6), seed=1, prefix="q")
    b = runs.write_run_dir(tmp_path / "b", lines, decoding="sampled", seeds=(1,))
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["config"] = second
    (b / "manifest.json").write_text(json.dumps(manifest))
    status, err = _stats(capsys, a, b, "--out", tmp_path / "o")
    assert status == 0, err
    (experiment,) = json.loads((tmp_path / "o" / "stats.json").read_text())["experiments"]
    assert experiment["n_rows"] == 240


# ------------------------------------------------------------------ 3. atomic outputs
def _killed(argv, limit):
    code = KILL_DURING_WRITE.format(limit=limit, argv=[str(a) for a in argv])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_a_kill_while_stats_json_is_rewritten_keeps_the_previous_one(
    tmp_path, runs, planted, capsys
):
    a = _run_dir(runs, planted, tmp_path / "a", config=_config())
    out = tmp_path / "o"
    assert _stats(capsys, a, "--out", out)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(before["stats.json"]) > 4096
    done = _killed(["stats", a, "--out", out, "--n-boot", "300"], limit=4096)
    assert done.returncode == -signal.SIGXFSZ, done.stderr
    after = {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")}
    assert after == before
    # The next run removes what the killed one left and writes whole files.
    assert _stats(capsys, a, "--out", out)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(before)


def test_a_kill_while_a_figure_is_rewritten_keeps_the_previous_one(tmp_path, runs, planted, capsys):
    a = _run_dir(runs, planted, tmp_path / "a", config=_config())
    stats_dir, report = tmp_path / "o", tmp_path / "r"
    assert _stats(capsys, a, "--out", stats_dir)[0] == 0
    assert main(["report", str(stats_dir), "--out", str(report)]) == 0
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    done = _killed(["report", a, "--out", report, "--n-boot", "300"], limit=2048)
    assert done.returncode == -signal.SIGXFSZ, done.stderr
    after = {p.name: p.read_bytes() for p in report.iterdir() if not p.name.startswith(".")}
    assert after == before


def _shard(path, k, problems, pad):
    path.mkdir(parents=True)
    manifest = {
        "experiment": {"model": "m", "task": "strategyqa", "decoding": "greedy", "seeds": [0]},
        "config": {"shard": [k, 2], "chunk_size": 1, "conditions": ["NT"], "seeds": [0]},
        "problems": problems,
    }
    mine = problems[k - 1 :: 2]
    lines = [json.dumps({"problem_id": p, "condition": "NT", "seed": 0, "pad": pad}) for p in mine]
    (path / "records.jsonl").write_text("".join(line + "\n" for line in lines))
    (path / "parts").mkdir()
    write_sealed_manifest(path, manifest)  # a finished shard: merge takes only sealed ones
    return path


def test_a_merge_killed_midway_leaves_nothing_that_the_next_merge_does_not_remove(tmp_path, capsys):
    problems = [f"q{i}" for i in range(8)]
    s1 = _shard(tmp_path / "s1", 1, problems, "x" * 1000)
    s2 = _shard(tmp_path / "s2", 2, problems, "x" * 1000)
    target = tmp_path / "runs" / "merged"
    target.parent.mkdir()
    done = _killed(["merge", target, s1, s2], limit=3000)
    assert done.returncode == -signal.SIGXFSZ, done.stderr
    assert not target.exists()
    assert [p.name for p in target.parent.iterdir() if p.name.startswith(".merged.tmp-")]
    assert main(["merge", str(target), str(s1), str(s2)]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in target.parent.iterdir()) == ["merged"]


# ------------------------------------------------------------------ 6. messages
def test_stats_warns_when_no_record_gives_a_competence_label(tmp_path, runs, planted, capsys):
    lines = [
        line
        for line in runs.records_from_arrays(_table(planted))
        if json.loads(line)["condition"] != "NT"
    ]
    a = runs.write_run_dir(tmp_path / "a", lines)
    status, err = _stats(capsys, a, "--out", tmp_path / "o")
    assert status == 0
    warnings = [line for line in err.splitlines() if "competence" in line]
    assert len(warnings) == 1 and "NT" in warnings[0] and "tiny" in warnings[0], err


def test_report_on_a_stats_directory_without_stats_json_says_so(tmp_path, capsys):
    stats_dir = tmp_path / "stats"
    stats_dir.mkdir()
    (stats_dir / "table.md").write_text("| |\n")
    assert main(["report", str(stats_dir), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "stats.json" in err and "manifest.json: missing" not in err, err


# ------------------------------------------------------------------ 8. an empty figure says why
def test_an_s_vs_l_figure_without_any_defined_l_says_why(tmp_path, runs, planted, monkeypatch):
    from nudgeability.stats import load_experiments, summarize
    from nudgeability.stats.report.figures import experiments as figures

    arrays = _table(planted)
    arrays["s"] = np.full_like(arrays["s"], -1)  # no competence label: L undefined
    a = runs.write_run_dir(tmp_path / "a", runs.records_from_arrays(arrays))
    (summary,) = [summarize(t, n_boot=100) for t in load_experiments([a])]
    assert np.isnan(summary.L)
    drawn = []
    monkeypatch.setattr(
        figures, "save_figure", lambda figure, out, stem: drawn.append(figure) or []
    )
    figures.plot_s_vs_l([summary], tmp_path)
    texts = " ".join(t.get_text() for t in drawn[0].axes[0].texts)
    assert "no experiment" in texts.lower() and "L" in texts, texts
