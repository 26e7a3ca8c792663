"""The files `nudge stats` writes and `nudge report` reads back: stats.json, grounding.json, tables.

stats.json (schema SCHEMA_VERSION) is one object:

    schema            SCHEMA_VERSION
    run_dirs          the run directories given, as strings
    experiments       one ExperimentSummary per experiment (estimators/summary.py)
    across            cohort -> AcrossExperiments: medians and Spearman rho per cohort
                      (open-weight or provider-served, per decoding config; estimators/across.py)
    claims            cohort -> the paper's cross-experiment statements (estimators/claims.py)
    delegation_value  one DelegationValueSummary per resolved experiment (delegation/summary.py);
                      absent when no run was resolved
    by_position       one PositionSummary per experiment whose arms were also forked at extra
                      cuts (`nudge run --cuts`; position/estimators.py); absent otherwise
    openers           one ExperimentOpeners per experiment whose arms carry P(TOOL) (`nudge run
                      --likelihoods`; estimators/openers.py); absent otherwise
    samples           one ExperimentSamples per experiment whose arms were sampled more than
                      once (`nudge run --samples-per-arm`; estimators/samples.py); absent
                      otherwise

grounding.json is a list of GroundingSummary (grounding/summary.py), written only when a run
stored uncertainty signals. Summaries are written by serialize.to_jsonable (every field and
property, NaN as null) and read back by from_jsonable into equal objects. `stats_files` gives
every file of a `nudge stats` output directory, the tables rendered by report/tables/;
`write_files` writes them together and atomically. A run without extra cuts writes exactly the
files and bytes it wrote before the by-position view existed, and a run without likelihoods
those it wrote before the opener checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from nudgeability.util.atomic import atomic_write_files, remove_temporaries
from nudgeability.util.json_errors import json_error

from ..delegation.summary import DelegationValueSummary
from ..estimators.across import AcrossExperiments, across_cohorts
from ..estimators.claims import claims_by_cohort
from ..estimators.openers import ExperimentOpeners
from ..estimators.samples import ExperimentSamples
from ..estimators.summary import ExperimentSummary
from ..grounding.summary import GroundingSummary
from ..position.estimators import PositionSummary
from ..records import RecordsError
from .serialize import from_jsonable, to_jsonable
from .tables import delegation as value_tables
from .tables import experiments as experiment_tables
from .tables import grid as grids
from .tables import grounding as grounding_tables
from .tables import openers as opener_tables
from .tables import position as position_tables
from .tables import samples as sample_tables
from .tables.paper import GRID_NAMES, GRIDS

STATS_FILE = "stats.json"
GROUNDING_FILE = "grounding.json"
SCHEMA_VERSION = 1
VALUE_KEY = "delegation_value"  # the key of stats.json that holds the delegation value
POSITION_KEY = "by_position"  # the key of stats.json that holds the by-position view
OPENERS_KEY = "openers"  # the key that holds the opener checks (--likelihoods)
SAMPLES_KEY = "samples"  # the key that holds S over every sample (--samples-per-arm)
TABLE_FILES = ("table.md", "table.csv", "table.tex")
# the paper's tables by number, and its cross-experiment statements: table1.md, ..., summaries.tex
PAPER_TABLE_FILES = tuple(
    f"{name}.{ext}" for name in ("table1", *GRID_NAMES) for ext in ("md", "csv", "tex")
)
VALUE_FILES = ("delegation_value.md", "delegation_value.csv", "delegation_value.tex")
GROUNDING_TABLE_FILES = ("grounding.md", "grounding.csv")


def stats_document(
    summaries: Sequence[ExperimentSummary],
    run_dirs: Sequence[str | Path],
    values: Sequence[DelegationValueSummary] = (),
    positions: Sequence[PositionSummary] = (),
    openers: Sequence[ExperimentOpeners] = (),
    samples: Sequence[ExperimentSamples] = (),
) -> dict:
    """The content of stats.json (module docstring)."""
    return {
        "schema": SCHEMA_VERSION,
        "run_dirs": [str(p) for p in run_dirs],
        "experiments": to_jsonable(list(summaries)),
        "across": to_jsonable(across_cohorts(summaries)),
        "claims": to_jsonable(claims_by_cohort(summaries)),
        **({VALUE_KEY: to_jsonable(list(values))} if values else {}),
        **({POSITION_KEY: to_jsonable(list(positions))} if positions else {}),
        **({OPENERS_KEY: to_jsonable(list(openers))} if openers else {}),
        **({SAMPLES_KEY: to_jsonable(list(samples))} if samples else {}),
    }


def _json(document) -> str:
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def stats_files(
    summaries: Sequence[ExperimentSummary],
    run_dirs: Sequence[str | Path],
    values: Sequence[DelegationValueSummary] = (),
    grounding: Sequence[GroundingSummary] = (),
    positions: Sequence[PositionSummary] = (),
    openers: Sequence[ExperimentOpeners] = (),
    samples: Sequence[ExperimentSamples] = (),
) -> dict[str, str]:
    """File name -> text of every file `nudge stats` writes: stats.json and the experiment
    tables; the delegation-value tables when a run was resolved; grounding.json and its tables
    when a run stored signals; the by-position table when a run forked arms at extra cuts; the
    opener table when arms carry P(TOOL); the samples table when arms were sampled N times."""
    files = {
        STATS_FILE: _json(stats_document(summaries, run_dirs, values, positions, openers, samples)),
        "table.md": experiment_tables.render_markdown(summaries),
        "table.csv": experiment_tables.render_csv(summaries),
        "table.tex": experiment_tables.render_latex(summaries),
        "table1.md": experiment_tables.render_markdown(summaries, table1_only=True),
        "table1.csv": experiment_tables.render_csv(summaries, table1_only=True),
        "table1.tex": experiment_tables.render_latex(summaries),
    }
    for build in GRIDS:
        files |= grids.files(build(summaries))
    if values:
        renderers = (
            value_tables.render_value_markdown,
            value_tables.render_value_csv,
            value_tables.render_value_latex,
        )
        files |= {name: render(values) for name, render in zip(VALUE_FILES, renderers)}
    if grounding:
        files[GROUNDING_FILE] = _json(to_jsonable(list(grounding)))
        renderers = (grounding_tables.render_markdown, grounding_tables.render_csv)
        files |= {name: render(grounding) for name, render in zip(GROUNDING_TABLE_FILES, renderers)}
    if positions:
        files |= grids.files(position_tables.by_position(positions))
    if openers:
        files |= grids.files(opener_tables.opener_grid(openers))
    if samples:
        files |= grids.files(sample_tables.samples_grid(samples))
    return files


def write_files(out: str | Path, files: Mapping[str, str]) -> list[Path]:
    """Write `files` (name -> text) into `out` together and atomically (all are complete on disk
    before any replaces its old version); return their paths in order. Temporaries a killed
    earlier write left behind are removed first."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    remove_temporaries(out, only_abandoned=True)
    return atomic_write_files({out / name: text.encode("utf-8") for name, text in files.items()})


def stats_file(path: str | Path) -> Path:
    """The stats.json a path names: the file itself, or the one in a directory."""
    path = Path(path)
    return path / STATS_FILE if path.is_dir() else path


def is_stats(path: str | Path) -> bool:
    """Whether `path` is a stats.json (any .json file) or a directory holding one."""
    path = Path(path)
    return (path.is_dir() and (path / STATS_FILE).is_file()) or (
        path.is_file() and path.name.endswith(".json")
    )


def read_stats(path: str | Path) -> list[ExperimentSummary]:
    """The experiment summaries of a stats.json (or of a directory holding one)."""
    file = stats_file(path)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordsError(f"{file}:{exc.lineno}: {json_error(exc)}") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA_VERSION:
        raise RecordsError(
            f"{file}: not a {STATS_FILE} of schema {SCHEMA_VERSION}; rerun `nudge stats`"
        )
    try:
        return from_jsonable(list[ExperimentSummary], document["experiments"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordsError(f"{file}: {exc}") from None


def _read_key(path: str | Path, key: str, kind):
    """The list under `key` of a stats.json, read back as `kind` objects ([] when absent)."""
    file = stats_file(path)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
        return from_jsonable(list[kind], document.get(key, []))
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordsError(f"{file}: {exc}") from None


def read_values(path: str | Path) -> list[DelegationValueSummary]:
    """The delegation-value summaries stored in a stats.json ([] when it holds none)."""
    return _read_key(path, VALUE_KEY, DelegationValueSummary)


def read_positions(path: str | Path) -> list[PositionSummary]:
    """The by-position summaries stored in a stats.json ([] when it holds none)."""
    return _read_key(path, POSITION_KEY, PositionSummary)


def read_openers(path: str | Path) -> list[ExperimentOpeners]:
    """The opener checks stored in a stats.json ([] when it holds none)."""
    return _read_key(path, OPENERS_KEY, ExperimentOpeners)


def read_samples(path: str | Path) -> list[ExperimentSamples]:
    """The sampled pairs stored in a stats.json ([] when it holds none)."""
    return _read_key(path, SAMPLES_KEY, ExperimentSamples)


def read_run_dirs(path: str | Path) -> list[str]:
    """The run directories a stats.json was computed from, as given to `nudge stats`."""
    document = json.loads(stats_file(path).read_text(encoding="utf-8"))
    return [str(p) for p in document.get("run_dirs", [])]


def read_across(path: str | Path) -> dict[str, AcrossExperiments]:
    """The per-cohort medians and Spearman rho stored in a stats.json."""
    document = json.loads(stats_file(path).read_text(encoding="utf-8"))
    return from_jsonable(dict[str, AcrossExperiments], document["across"])


def read_grounding(directory: str | Path) -> list[GroundingSummary]:
    """The summaries of a grounding.json in `directory` (empty when there is none)."""
    file = Path(directory) / GROUNDING_FILE
    if not file.is_file():
        return []
    return from_jsonable(list[GroundingSummary], json.loads(file.read_text(encoding="utf-8")))
