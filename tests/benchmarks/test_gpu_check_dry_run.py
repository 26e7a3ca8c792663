"""benchmarks/gpu_check.py runs whole on CPU (`--dry-run`), as the GPU image would run it: from a
bare checkout (no installed `nudgeability`), without bitsandbytes or compressed-tensors. Every
section must run (not "skipped", not "failed"), and the deadline is one clock's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

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


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(BLOCKER)
    out = tmp_path_factory.mktemp("out")
    env = dict(os.environ, PYTHONPATH=str(site), OUT=str(out))
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--dry-run"],
        cwd=tmp_path_factory.mktemp("cwd"),  # not the repository: nothing found beside it
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout, (out / "gpu_check.md").read_text()


def _rows(text: str) -> list[tuple[str, str, str]]:
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [tuple(cell.strip() for cell in row) for row in rows[1:]]


@pytest.mark.slow
def test_dry_run_runs_every_section_from_a_bare_checkout(dry_run):
    stdout, saved = dry_run
    assert _rows(saved) == _rows(stdout)  # $OUT/gpu_check.md holds the same table
    assert "nudgeability: bootstrapped from" in stdout
    rows = _rows(stdout)
    checks = [f"{s}: {c}" for s, c, _ in rows]
    for s, c, r in rows:
        if c == "nf4 layers and decode":  # bitsandbytes is missing, as on the GPU image
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
        for n in (1, 12, 64, 256)
        for mode in ("static decode + graphs", "eager")
    ]
    for want in wanted:
        assert any(c.startswith(want) for c in checks), (want, checks)
    # the fused paths ran (not the exact fallback), and the arms agree with HF's forward
    for _, c, r in rows:
        if c.startswith("arm ≡ solo"):
            agree, total = r.split("argmax agrees at ")[1].split(";")[0].split("/")
            assert int(agree) == int(total), (c, r)
        if c.startswith(("arm ≡ solo, w4a16 fused", "arm ≡ solo, fp8 fused")):
            assert "simd" in r, r
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
