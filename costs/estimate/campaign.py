"""The paper's whole open-weight campaign on this device, from one model measured here.

`paper_campaign.toml` (or a user's `--campaign FILE`) lists the models, their formats and the
campaign's shape, every figure an assumption the estimate repeats. A model's decode step is the
measured model's efficiency against its bandwidth floor at each row count (rates.py
`Rates.efficiency`), applied to that model's own floor: the bytes its step reads (its weights in
its format, times the format's `slowdown`, and its KV) at this device's copy bandwidth. Its
prefill rate is the measured one scaled by the parameters (prefill is compute: FLOPs grow with
them). On CUDA its rows are what the KV pool holds beside its weights (splice/run/
device_batching.py `pool_rows`); its work runs on the measured run's schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import tomllib

from nudgeability.splice.run.config import DEFAULT_CHUNK_SIZE
from nudgeability.splice.run.device_batching import pool_rows

from .rates import Rates
from .schedule import stream_timeline, units_timeline
from .workload import BaseWork, Lengths, Workload

PAPER = Path(__file__).with_name("paper_campaign.toml")


class CampaignError(ValueError):
    """A campaign file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Format:
    bytes_per_param: float
    slowdown: float = 1.0


@dataclass(frozen=True)
class CampaignModel:
    name: str
    format: str
    params_b: float
    head_params_b: float
    kv_bytes_per_token: int
    window: int | None = None
    window_bytes_per_token: int = 0
    source: str = ""

    def weight_bytes(self, fmt: Format) -> float:
        """What a step reads of the weights: the body in its format, the LM head in bf16."""
        body = (self.params_b - self.head_params_b) * 1e9 * fmt.bytes_per_param
        return body + self.head_params_b * 1e9 * 2


@dataclass(frozen=True)
class Campaign:
    problems: int
    tasks: tuple[str, ...]
    max_new_tokens: int
    max_new_tokens_arm: int
    lengths: Lengths
    gpu_memory_utilization: float
    formats: dict[str, Format]
    models: tuple[CampaignModel, ...]
    where: str = str(PAPER)


@dataclass(frozen=True)
class TaskShape:
    """A task's prompts and arms as the measured model renders them (token counts)."""

    prompts: dict[str, float]  # base phase -> mean prompt tokens
    shared: dict[str, int]  # base phase -> its shared start
    arms: dict[str, tuple[int, ...]]  # base phase -> its arms' splice lengths


@dataclass(frozen=True)
class ModelEstimate:
    model: str
    task: str
    rows: int | None
    wall_seconds: float
    generated_tokens: float


@dataclass(frozen=True)
class CampaignEstimate:
    device: str
    campaign: Campaign
    runs: tuple[ModelEstimate, ...] = field(default=())

    @property
    def wall_seconds(self) -> float:
        return sum(r.wall_seconds for r in self.runs)

    @property
    def gpu_hours(self) -> float:
        """Hours of this one device (a GPU's, or the CPU's on a CPU run)."""
        return self.wall_seconds / 3600


def _field(data: dict, key: str, kind, where: str, default=None):
    if key not in data:
        if default is not None:
            return default
        raise CampaignError(f"{where}: field {key} missing")
    value = data[key]
    try:
        if kind is int and (isinstance(value, bool) or int(value) != value):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise CampaignError(f"{where}: field {key} = {value!r}: expected {kind.__name__}") from None


def load_campaign(path: str | Path | None = None) -> Campaign:
    """The campaign of `path` (default: the paper's); CampaignError naming the file and field."""
    path = Path(path) if path is not None else PAPER
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CampaignError(f"{path}: {exc}") from None
    where = str(path)
    problems = _field(data, "problems", int, where)
    formats = {}
    for name, spec in (data.get("formats") or {}).items():
        at = f"{where}: formats.{name}"
        formats[name] = Format(
            _field(spec, "bytes_per_param", float, at), _field(spec, "slowdown", float, at, 1.0)
        )
    models = []
    for i, spec in enumerate(data.get("models") or []):
        at = f"{where}: models[{i}]"
        model = CampaignModel(
            name=_field(spec, "name", str, at),
            format=_field(spec, "format", str, at),
            params_b=_field(spec, "params_b", float, at),
            head_params_b=_field(spec, "head_params_b", float, at),
            kv_bytes_per_token=_field(spec, "kv_bytes_per_token", int, at),
            window=spec.get("window"),
            window_bytes_per_token=_field(spec, "window_bytes_per_token", int, at, 0),
            source=str(spec.get("source", "")),
        )
        if model.format not in formats:
            raise CampaignError(f"{at}: field format = {model.format!r}: not in [formats]")
        models.append(model)
    if not models:
        raise CampaignError(f"{where}: field models missing (at least one [[models]] table)")
    budget = _field(data, "max_new_tokens", int, where)
    arm_budget = _field(data, "max_new_tokens_arm", int, where)
    base_tokens = _field(data, "base_tokens", float, where)
    arm_tokens = _field(data, "arm_tokens", float, where)
    try:
        lengths = Lengths(
            base_share=base_tokens / budget,
            arm_share=arm_tokens / arm_budget,
            closes=_field(data, "closes", float, where, 1.0),
            base_at_budget=_field(data, "at_budget", float, where, 0.0),
            arm_at_budget=_field(data, "at_budget", float, where, 0.0),
            source=f"{where} (bases {base_tokens:g} of {budget}, arms {arm_tokens:g} of "
            f"{arm_budget})",
        )
    except ValueError as exc:
        raise CampaignError(f"{where}: {exc}") from None
    return Campaign(
        problems=problems,
        tasks=tuple(_field(data, "tasks", list, where)),
        max_new_tokens=budget,
        max_new_tokens_arm=arm_budget,
        lengths=lengths,
        gpu_memory_utilization=_field(data, "gpu_memory_utilization", float, where, 0.9),
        formats=formats,
        models=tuple(models),
        where=where,
    )


def scaled_rates(
    measured: Rates, measured_params: float, model: CampaignModel, fmt: Format
) -> Rates:
    """A campaign model's rates on this device (module docstring); `measured_params`: the
    measured model's parameters less its embedding table, as the campaign's less their head."""
    weights = model.weight_bytes(fmt) * fmt.slowdown
    scaled = replace(
        measured,
        weight_bytes=int(weights),
        kv_slot_bytes=model.kv_bytes_per_token,
        window=model.window,
        window_slot_bytes=model.window_bytes_per_token,
        prefill_tokens_per_s=measured.prefill_tokens_per_s
        * measured_params
        / ((model.params_b - model.head_params_b) * 1e9),
    )
    decode = tuple(
        (rows, measured.efficiency(rows) * scaled.floor_seconds(rows))
        for rows, _ in measured.decode
    )
    return replace(scaled, decode=decode)


def campaign_workload(
    campaign: Campaign, shape: TaskShape, chunk: int, problems: int | None = None
) -> Workload:
    """`problems` (default: the campaign's) of one task, in chunks of `chunk`."""
    problems = campaign.problems if problems is None else problems
    problem = tuple(
        BaseWork(phase, round(tokens), shape.shared.get(phase, 0), shape.arms.get(phase, ()))
        for phase, tokens in shape.prompts.items()
    )
    sizes = [min(chunk, problems - i) for i in range(0, problems, chunk)]
    return Workload(
        tuple(tuple(problem for _ in range(size)) for size in sizes),
        campaign.max_new_tokens,
        campaign.max_new_tokens_arm,
    )


def model_rows(
    campaign: Campaign, model: CampaignModel, fmt: Format, device_memory: int | None
) -> int | None:
    """The rows a CUDA run of `model` decodes together (None on CPU: rows are uncapped)."""
    if device_memory is None:
        return None
    pool = device_memory * campaign.gpu_memory_utilization - model.weight_bytes(fmt)
    slots = int(pool // model.kv_bytes_per_token) if pool > 0 else 0
    if slots < 1:
        raise CampaignError(
            f"{campaign.where}: {model.name} ({model.format}) does not fit this device's memory"
        )
    return pool_rows(slots, campaign.max_new_tokens, campaign.max_new_tokens_arm)


def estimate_campaign(
    campaign: Campaign,
    measured: Rates,
    measured_params: float,
    shapes: dict[str, TaskShape],
    schedule: str,
    device_memory: int | None,
    workers: int = 1,
) -> CampaignEstimate:
    """Every model x task of `campaign` on this device (module docstring); on a CPU, `workers`
    processes share each run's problems as `nudge run`'s workers do (the slowest's time)."""
    runs = []
    for model in campaign.models:
        fmt = campaign.formats[model.format]
        rates = scaled_rates(measured, measured_params, model, fmt)
        rows = model_rows(campaign, model, fmt, device_memory)
        for task in campaign.tasks:
            if task not in shapes:
                raise CampaignError(f"{campaign.where}: field tasks: no task {task!r}")
            share = -(-campaign.problems // max(1, workers))
            work = campaign_workload(campaign, shapes[task], rows or DEFAULT_CHUNK_SIZE, share)
            if schedule == "stream":
                line = stream_timeline(work, campaign.lengths, rates, max_rows=rows)
            else:
                line = units_timeline(work, campaign.lengths, rates, max_rows=rows)
            chunk = rows or DEFAULT_CHUNK_SIZE
            tokens = campaign_workload(campaign, shapes[task], chunk).generated_tokens(
                campaign.lengths
            )
            runs.append(ModelEstimate(model.name, task, rows, line.seconds, tokens))
    return CampaignEstimate(measured.device, campaign, tuple(runs))
