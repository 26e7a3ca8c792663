"""benchmarks/gpu_check.py runs whole on CPU (`--dry-run`), as the GPU image would run it: from a
bare checkout (no installed `nudgeability`), without bitsandbytes or compressed-tensors. Every
section must run (not "skipped", not "failed"), and the deadline is one clock's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from benchkit.gpu.engine import DRY_SIZES
from helpers.session_once import built_once

from nudgeability.models.testing.reference import RTOL

REPO = Path(__file__).resolve().parents[2]

# Imported first in the child (a sitecustomize on its path): the installed package and the two
# libraries the GPU image lacks cannot be imported, as there.
BLOCKER = """
import sys
MISSING = {"nudgeability", "bitsandbytes", "compressed_tensors"}
class Missing:
    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in MISSING and (top != "nudgeability" or path is None):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None
sys.meta_path.insert(0, Missing())
"""
# Also in the child: every `Engine(...)` is logged (its keyword arguments, the benchkit frames
# that asked for it, and, where splice/run/engine_build.py `run_engine` built it, that call's
# config and derived options) to $ENGINE_LOG, one JSON line each.
RECORDER = """
import importlib.abc, importlib.machinery, inspect, json, os
ENGINE_LOG = os.environ["ENGINE_LOG"]
class Recorder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "nudgeability.engine.engine":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        run_module = spec.loader.exec_module
        def exec_module(module):
            run_module(module)
            init = module.Engine.__init__
            def recorded(self, model, tokenizer=None, **kwargs):
                frames = inspect.stack(0)
                built = [f for f in frames if f.function == "run_engine"
                         and f.filename.endswith("engine_build.py")]
                entry = {"kwargs": kwargs, "needle": any(
                    f.filename.endswith("needle.py") for f in frames), "callers": [
                    os.path.basename(f.filename) + ":" + f.function
                    for f in frames if "benchkit" in f.filename]}
                if built:
                    config = built[0].frame.f_locals["config"]
                    entry["config"] = {"device": config.device, "dtype": config.dtype,
                        "max_batch_tokens": config.max_batch_tokens,
                        "gpu_memory_utilization": config.gpu_memory_utilization,
                        "static_decode": config.static_decode}
                    entry["derived"] = built[0].frame.f_locals["derived"]
                with open(ENGINE_LOG, "a") as log:
                    log.write(json.dumps(entry, default=str) + "\\n")
                init(self, model, tokenizer, **kwargs)
            module.Engine.__init__ = recorded
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Recorder())
"""


def test_the_engine_sections_deadline_is_a_monotonic_time(monkeypatch):
    """gpu_check passes `time.monotonic() + budget`: a section runs its parts before it and
    skips them after it (at 397192c gpu_engine compared it with time.time(): all skipped)."""
    from benchkit.gpu import engine as gpu_engine

    ran = []
    parts = tuple((f"part {i}", lambda model, sizes, i=i: ran.append(i) or []) for i in range(3))
    monkeypatch.setattr(gpu_engine, "PARTS", parts)
    rows = gpu_engine.section(time.monotonic() + 600, dry_run=True)
    assert ran == [0, 1, 2] and not any("skipped" in r for _, r in rows), rows
    rows = gpu_engine.section(time.monotonic() - 1, dry_run=True)
    assert [r for c, r in rows if c.startswith("part")] == [
        "skipped: the section's time ran out"
    ] * 3


def _dry_run(out: Path) -> None:
    """gpu_check.py --dry-run from a bare checkout, its table and Engine log into `out`."""
    site, cwd = out / "site", out / "cwd"
    for directory in (site, cwd):
        directory.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER + RECORDER)
    env = dict(
        os.environ, PYTHONPATH=str(site), OUT=str(out), ENGINE_LOG=str(out / "engines.jsonl")
    )
    done = subprocess.run(
        # a budget no loaded machine runs out of: the test checks what runs, not how fast
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--dry-run", "--budget", "1e5"],
        cwd=cwd,  # not the repository: nothing found beside it
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (out / "stdout.txt").write_text(done.stdout)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """(stdout, $OUT/gpu_check.md, the Engines built) of one dry run a session
    (tests/helpers/session_once.py: however pytest-xdist splits this module)."""
    out = built_once(tmp_path_factory, "gpu-check-dry-run", _dry_run)
    engines = [json.loads(line) for line in (out / "engines.jsonl").read_text().splitlines()]
    return (out / "stdout.txt").read_text(), (out / "gpu_check.md").read_text(), engines


def _rows(text: str) -> list[tuple[str, str, str]]:
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [tuple(cell.strip() for cell in row) for row in rows[1:]]


@pytest.mark.slow
def test_dry_run_runs_every_section_from_a_bare_checkout(dry_run):
    stdout, saved, _ = dry_run
    assert _rows(saved) == _rows(stdout)  # $OUT/gpu_check.md holds the same table
    assert "nudgeability: bootstrapped from" in stdout
    rows = _rows(stdout)
    checks = [f"{s}: {c}" for s, c, _ in rows]
    for s, c, r in rows:
        if c == "nf4 layers and decode" or s == "invariant" and c.startswith("nf4 "):
            # bitsandbytes is missing, as on the GPU image
            assert r.startswith("skipped: bitsandbytes does not import"), r
            continue
        if c == "campaign, engine eager":  # the engine's tokens are HF generate_batch's, or
            # part from them only at HF's own near-tie at bf16's logit tolerance (the engine's CPU
            # kernels reduce in another order than HF's: on a tiny random model a tie tips either way)
            parts = r.split("tokens against HF: ")[1:]
            assert len(parts) == 2, r  # the bases and the arms
            for part in parts:
                same, rows_of = part.split(" rows identical")[0].split("/")
                assert same == rows_of, r
                bound = f"or parting at HF's own near-tie (margin ≤ {2 * RTOL[torch.bfloat16]:.1e}:"
                assert part.split(" rows identical ", 1)[1].startswith(bound), r
        if c.startswith("CUDA graph replay"):  # graphs exist on CUDA only
            assert r == "skipped: CUDA graphs need a CUDA device", r
            continue
        assert not r.startswith(("skipped", "failed")), (s, c, r)
    wanted = [
        "run: nudge run, bf16 checkpoint",
        "run: nudge run, fp8 checkpoint",
        "run: schedule nudge run settles, needle on its engine",
        "run: stream against by unit, strategyqa n=1",
        "engines: ",
        "quant: fp8 [256, 128] fused against exact, 64 rows",
        "quant: w4a16 [128, 256] fused against exact, 1 rows",
        "quant: decode step, fp8, 12 rows",
        "engine: arm ≡ solo, bf16",
        "engine: arm ≡ solo, w4a16 dense",
        "engine: arm ≡ solo, w4a16 fused",
        "engine: arm ≡ solo, fp8 dense",
        "engine: arm ≡ solo, fp8 fused",
        "engine: arm ≡ solo, bf16, sliding window",
        "engine: needle",
        "engine: prefill of",
        "engine: campaign, HF generate_batch",
        "engine: campaign, engine eager",
        "fused: rms_norm + residual, float16, 3 rows",
        "fused: q norm + rope, float32, 1 rows",
        "fused: decode step, 3 rows",
        "invariant: bf16 o_proj [128, 256]: rows differing",
        "invariant: w4a16 o_proj [128, 256], 3 rows",
        "paged: alone, max error vs fp32 softmax",
        "paged: among 5 others, last",
        "paged: in a prefill chunk of 17",
        "paged: permuted physical blocks",
        "paged: decode attention, arms 2 x 60, 3 rows",
        "fallbacks: ",
        "plan: profile of one graphed step, 12 rows",
        "plan: profile: ",
        "plan: plan: measured",
        "plan: plan: the paper's campaign",
    ]
    wanted += [
        f"plan: default path decode step, {fmt}, {n} rows"
        for fmt in ("bf16", "fp8", "w4a16")
        for n in (1, 12)
    ]
    wanted += [
        f"engine: decode step, {n} rows, {mode}"
        for n in DRY_SIZES["rows"]
        for mode in ("static decode + graphs", "eager")
    ]
    for want in wanted:
        assert any(c.startswith(want) for c in checks), (want, checks)
    # the fused paths ran (not the exact fallback), and the arms agree with HF's forward
    for _, c, r in rows:
        if c.endswith("arm ≡ solo on its records"):  # nudge run's arms, each replayed alone
            same, compared = r.split(" whole arms")[0].split("/")
            assert same == compared and int(compared) > 0, (c, r)
        if c.startswith("stream against by unit"):  # the CPU's products: invariant
            assert r.startswith("records identical"), (c, r)
        if c.startswith("schedule nudge run settles"):
            assert r.startswith("stream: the needle held"), (c, r)
        if c.endswith("manifest fallbacks"):
            assert r == "none", (c, r)
        if c.startswith("arm ≡ solo"):  # on nudge run's engine: the fixed-shape decode
            assert "decode path fixed-shape decode" in r, (c, r)
            agree, total = r.split("argmax agrees at ")[1].split(";")[0].split("/")
            assert int(agree) == int(total), (c, r)
        if c.startswith(("arm ≡ solo, w4a16 fused", "arm ≡ solo, fp8 fused")):
            assert "simd" in r, r
        if s == "invariant" and "rows differing" in c:  # the construction's promise
            assert r.startswith("invariant 0 (bitwise)"), (c, r)
        if s == "paged" and not c.startswith(("alone", "decode attention")):
            assert r == "same", (c, r)  # the paged kernel's bits depend on no batch
        if s == "fused" and "error / bound" in r:  # the kernels within their rounding bounds
            assert r.endswith("(within)"), (c, r)


def test_a_sections_parts_are_saved_as_they_finish(tmp_path, monkeypatch):
    """A device run cut at its limit inside a part must still bring back the parts before it:
    the section's `progress` writes the table so far to $OUT/gpu_check.md (the first H200 run's
    campaign part was cut inside HF's generate_batch, and the section's other rows were lost)."""
    import sys
    import types

    from benchkit.gpu import check

    seen = []

    def section(deadline, *, dry_run=False, progress=None):
        progress([("first part", "done")])
        seen.append((tmp_path / "gpu_check.md").read_text())
        raise KeyboardInterrupt  # the device tool's kill, as far as this section knows

    fake = types.ModuleType("fake_section")
    fake.section = section
    monkeypatch.setitem(sys.modules, "fake_section", fake)
    monkeypatch.setattr(check, "SECTIONS", {"fake": "fake_section"})
    monkeypatch.setenv("OUT", str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        check.run(["fake"], 60.0, dry_run=True)
    assert "| fake | first part | done |" in seen[0]


# the options a part may take other than the run's, for what it measures (engine_inputs.py)
DERIVABLE = {"max_rows", "prefill_tokens", "static_decode"}


@pytest.mark.slow
def test_every_engine_the_gpu_check_builds_is_nudge_runs(dry_run):
    """Each `Engine` the dry run made came from splice/run/engine_build.py `run_engine`: the GPU
    check's parts with the options `nudge run --device cuda` resolves (validation.py
    `device_defaults` for CUDA: the fixed-shape decode on, no KV budget, the pool from memory),
    plus only the derived options each names; the run section's with its own run's (on CPU)."""
    from dataclasses import replace

    from nudgeability.splice.run.config import RunConfig
    from nudgeability.splice.run.engine_build import engine_options
    from nudgeability.splice.run.validation import device_defaults

    *_, engines = dry_run
    cuda = RunConfig(device="cuda", dtype="bfloat16")
    cuda = replace(cuda, static_decode=device_defaults(cuda, "cuda").static_decode)
    runs = engine_options(cuda)
    assert runs == {"max_batch_tokens": None, "gpu_memory_utilization": None, "static_decode": True}
    assert len(engines) >= 20, engines
    parts = set()
    for engine in engines:
        if engine["needle"]:  # nudge run's own batch-invariance probe (engine/invariant/needle.py)
            assert any(c.startswith("nudge_run.py") for c in engine["callers"]), engine
            continue
        assert "config" in engine, engine  # built by run_engine
        callers = engine["callers"]
        parts.update(c.split(":")[0] for c in callers)
        if engine["config"]["device"] == "cpu":  # `nudge run` and `nudge plan` themselves
            assert any(c.startswith(("nudge_run.py", "plan.py:plan")) for c in callers), engine
            assert engine["derived"] == {}, engine
            assert engine["kwargs"] == {
                "max_batch_tokens": None,
                "gpu_memory_utilization": None,
                "static_decode": False,  # as `nudge run --device cpu` resolves it
            }
            continue
        assert {k: engine["config"][k] for k in runs} == runs, engine
        derived = engine["derived"]
        assert set(derived) <= DERIVABLE and derived.get("static_decode") in (None, False), engine
        assert engine["kwargs"] == {**runs, **derived}, engine
    wanted = {"engine.py", "engine_speed.py", "trunk.py", "plan.py", "nudge_run.py"}
    assert wanted <= parts, parts
