"""A benchmark's section of benchmarks/RESULTS.md names its script by the path from the
repository's root, however the script was started, and replaces only that section
(benchmarks/benchkit/results.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from benchkit import results

REPO = Path(__file__).resolve().parents[2]
OTHER = "<!-- BEGIN other -->\n## other\n\nkept\n<!-- END other -->\n"


def test_a_section_names_its_script_from_the_root_and_replaces_only_itself(tmp_path, monkeypatch):
    target = tmp_path / "RESULTS.md"
    target.write_text("# Benchmark results\n\n" + OTHER)
    monkeypatch.setattr(results, "RESULTS", target)
    monkeypatch.chdir(REPO / "benchmarks")  # started as `python cuts_memory.py` from benchmarks/
    monkeypatch.setattr(sys, "argv", ["cuts_memory.py", "--flag"])
    results.write_section("Cuts (benchmarks/cuts_memory.py)", "| a |\n|---|\n| 1 |")
    results.write_section("Cuts (benchmarks/cuts_memory.py)", "| a |\n|---|\n| 2 |")
    text = target.read_text()
    assert text.count("## Cuts (benchmarks/cuts_memory.py)") == 1
    assert "Command: `python benchmarks/cuts_memory.py --flag`" in text
    assert "| 2 |" in text and "| 1 |" not in text
    assert OTHER in text
