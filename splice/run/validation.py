"""Checking a requested run before anything is loaded or written: each error names its flag.

`validate(requested, remote)` checks the settings that need no file and no model, in order of
cost (decoding, conditions, budgets, chunk size, signals, KV budget, dtype, quantised compute
mode, what a server cannot do, device, the KV pool's memory share and the chunk size of a sharded
CUDA run, family, resolution and its `--retrieve-k`), and returns what they resolve to.
`check_fits` checks, once the prompts are rendered, that no problem's longest sequence overflows
the model's context or one engine group the KV budget. Every failure is a one-line `ConfigError` (a ValueError) naming the
flag, and the file and line of the problem where there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from nudgeability.engine import GroupShape, batch_cost
from nudgeability.models.families import KNOWN_FAMILIES
from nudgeability.models.quant.compute import QUANT_COMPUTES
from nudgeability.splice.experiment.conditions import (
    NO_TOOL_BASE,
    Condition,
    ConditionSet,
    UnknownConditionError,
    base_of,
)
from nudgeability.splice.experiment.cuts import CutsError, parse_cuts
from nudgeability.splice.experiment.intervention_file import (
    InterventionFile,
    InterventionFileError,
    file_sha256,
    from_definitions,
    load_intervention_file,
)
from nudgeability.splice.experiment.prompts import ProblemPrompts
from nudgeability.splice.run.config import (
    DEFAULT_RETRIEVE_K,
    DTYPES,
    SERVER,
    ConfigError,
    RunConfig,
    resolve_decoding,
)
from nudgeability.splice.run.device_batching import batches_from_pool
from nudgeability.splice.run.remote import RemoteSpec
from nudgeability.splice.rundir.manifest import UserInterventions
from nudgeability.splice.tasks import Problem


@dataclass(frozen=True)
class Validated:
    """What the checked settings resolve to."""

    temperature: float
    top_p: float
    seeds: tuple[int, ...]
    conditions: list[Condition]  # canonical order, without the self-consistency samples
    device: str  # "cpu", "cuda", "cuda:N", or SERVER for a run on a server
    retrieve_k: int | None  # with --resolve only
    interventions: InterventionFile | None = None  # --interventions, loaded and checked
    cuts: str | None = None  # --cuts, in its canonical spelling


def validate(
    requested: RunConfig,
    remote: RemoteSpec | None = None,
    recorded: UserInterventions | None = None,
) -> Validated:
    """Check `requested` (and, for a run on a server, what a server cannot do); see the module
    docstring. Loads nothing and creates no file. `recorded`: the interventions a stored run's
    manifest holds (a resume, a replay), taken from there instead of the file (`_user_interventions`)."""
    temperature, top_p, seeds = resolve_decoding(requested.decoding, requested.seeds)
    if (requested.temperature, requested.top_p) not in ((None, None), (temperature, top_p)):
        raise ConfigError(
            f"temperature/top_p: --decoding {requested.decoding} uses {temperature}/{top_p}; "
            "leave them unset"
        )
    user = _user_interventions(requested, recorded)
    try:
        known = ConditionSet() if user is None else user.conditions
        conditions = known.parse((*requested.conditions, *(c.code for c in known.user)))
    except UnknownConditionError as exc:
        raise ConfigError(f"--conditions: {exc}") from None
    if min(requested.max_new_tokens, requested.max_new_tokens_arm) < 1:
        raise ConfigError("--max-new-tokens: budgets must be >= 1")
    if requested.chunk_size is not None and requested.chunk_size < 1:
        raise ConfigError(f"--chunk-size {requested.chunk_size}: must be >= 1")
    if requested.consistency_samples < 0:
        raise ConfigError(
            f"--consistency-samples {requested.consistency_samples}: must be >= 0 (0: none)"
        )
    if requested.max_batch_tokens is not None and requested.max_batch_tokens < 1:
        raise ConfigError(f"--max-batch-tokens {requested.max_batch_tokens}: must be >= 1")
    if requested.dtype is not None and requested.dtype not in DTYPES:
        raise ConfigError(f"--dtype {requested.dtype!r}: expected one of {', '.join(DTYPES)}")
    if requested.quant_compute is not None and requested.quant_compute not in QUANT_COMPUTES:
        raise ConfigError(
            f"--quant-compute {requested.quant_compute!r}: expected one of {', '.join(QUANT_COMPUTES)}"
        )
    _check_likelihoods(requested, conditions)
    cuts = _cuts(requested)
    _check_arm_samples(requested)
    if remote is not None:
        _check_remote(requested, remote)
    device = SERVER if remote is not None else resolve_device(requested.device)
    _check_pool_settings(requested, device)
    if requested.family is not None and requested.family not in KNOWN_FAMILIES:
        raise ConfigError(
            f"--family {requested.family!r}: unknown; known families: {', '.join(KNOWN_FAMILIES)}"
        )
    return Validated(
        temperature, top_p, tuple(seeds), conditions, device, _retrieve_k(requested), user, cuts
    )


def _check_arm_samples(requested: RunConfig) -> None:
    """`--samples-per-arm N`: N >= 1; above 1 only with sampled decoding (greedy samples would
    be copies) and without `--resolve` (resolutions are keyed by an arm's first sample)."""
    n = requested.samples_per_arm
    if not isinstance(n, int) or n < 1:
        raise ConfigError(f"--samples-per-arm {n}: must be a whole number >= 1")
    if n > 1 and requested.decoding != "sampled":
        raise ConfigError(
            f"--samples-per-arm {n}: greedy decoding gives one continuation per arm; add "
            "--decoding sampled"
        )
    if n > 1 and requested.resolve:
        raise ConfigError(
            f"--samples-per-arm {n}: the resolution phase resolves each arm's first sample only; "
            "run the samples without --resolve"
        )


def _cuts(requested: RunConfig) -> str | None:
    """`--cuts` read and spelled canonically (splice/experiment/cuts.py); refused with
    `--resolve`, whose resolutions are keyed by the paper's cut alone."""
    if requested.cuts is None:
        return None
    try:
        spec = parse_cuts(requested.cuts)
    except CutsError as exc:
        raise ConfigError(str(exc)) from None
    if requested.resolve:
        raise ConfigError(
            "--cuts: the resolution phase resolves the arms at the paper's cut only; run the "
            "extra cuts without --resolve"
        )
    return str(spec)


def _user_interventions(
    requested: RunConfig, recorded: UserInterventions | None
) -> InterventionFile | None:
    """`--interventions FILE` loaded and checked (its errors name the file, line and field). A
    stored run's (`recorded`) are read from its manifest, never by running the file, whose bytes
    must still hash to the recorded sha256. An edit of the reasoning is refused with `--resolve`,
    whose prompts continue the base's whole reasoning (splice/run/units/resolve.py)."""
    if requested.interventions is None:
        return None
    if recorded is None:
        user = load_intervention_file(requested.interventions)
    else:
        user = _recorded(Path(requested.interventions).expanduser().resolve(), recorded)
    edits = [i.code for i in user.interventions if i.edit is not None]
    if requested.resolve and edits:
        raise ConfigError(
            f"--resolve: the arms {', '.join(edits)} edit the base's reasoning, which the "
            "resolution phase does not follow yet; run them without --resolve"
        )
    return user


def _recorded(path: Path, recorded: UserInterventions) -> InterventionFile:
    """The stored run's interventions, from its manifest; the file only hashed."""
    try:
        sha256 = file_sha256(path)
    except OSError as exc:
        raise ConfigError(f"--interventions {path}: {exc.strerror or exc}") from None
    if sha256 != recorded.sha256:
        raise ConfigError(
            f"--interventions {path}: its sha256 {sha256[:12]}... is not the run's "
            f"inputs.interventions.sha256 {recorded.sha256[:12]}...: the file changed since the "
            "run; give the file the run used"
        )
    try:
        conditions = from_definitions(recorded.definitions, "manifest.json")
    except InterventionFileError as exc:
        raise ConfigError(f"--interventions: the run's recorded definitions: {exc}") from None
    return InterventionFile(str(path), sha256, conditions)


def _check_likelihoods(requested: RunConfig, conditions: list[Condition]) -> None:
    """`--score-openers` names arms of the run, and needs `--likelihoods`."""
    if not requested.score_openers:
        return
    if not requested.likelihoods:
        raise ConfigError("--score-openers: scores the action openers of --likelihoods; add it")
    arms = {c.code for c in conditions if c.kind == "arm"}
    for code in requested.score_openers:
        if code not in arms:
            raise ConfigError(f"--score-openers {code}: not an arm of this run's conditions")


def _check_pool_settings(requested: RunConfig, device: str) -> None:
    """`--gpu-memory-utilization`: a share in (0, 1] of the free memory of a device whose KV pool
    is sized from it (CUDA), and not beside `--max-batch-tokens`, which fixes the pool's size
    itself. A sharded run on such a device names its `--chunk-size`: the default there is what
    the pool holds (device_batching.py), which may differ between the machines of its shards."""
    fraction = requested.gpu_memory_utilization
    from_pool = batches_from_pool(device)
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise ConfigError(f"--gpu-memory-utilization {fraction!r}: expected a number in (0, 1]")
        if not 0 < fraction <= 1:
            raise ConfigError(f"--gpu-memory-utilization {fraction}: must be in (0, 1]")
        if requested.max_batch_tokens is not None:
            raise ConfigError(
                "--gpu-memory-utilization: sizes the KV pool from free device memory, but "
                "--max-batch-tokens already fixes its size; give one of the two"
            )
        if not from_pool:
            raise ConfigError(
                f"--gpu-memory-utilization: the KV pool's share of free CUDA memory; on {device} "
                "the pool grows with the work; leave it out"
            )
    if requested.static_decode and not from_pool:
        raise ConfigError(
            f"--static-decode: the fixed-shape decode with CUDA graphs runs on CUDA; on {device} "
            "leave it out"
        )
    if requested.shard is not None and requested.chunk_size is None and from_pool:
        raise ConfigError(
            f"--chunk-size: a --shard run on {device} must give it: its default is what the KV "
            "pool holds, which can differ between the machines of the shards"
        )


def _retrieve_k(requested: RunConfig) -> int | None:
    """`--retrieve-k`: only with the resolution phase (whose tools it widens), a whole number
    >= 1; None (the default) is 1 with --resolve and stays None without."""
    k = requested.retrieve_k
    if k is None:
        return DEFAULT_RETRIEVE_K if requested.resolve else None
    if not requested.resolve:
        raise ConfigError("--retrieve-k: tools run only in the resolution phase; add --resolve")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"--retrieve-k {k}: must be >= 1")
    return k


def _check_remote(requested: RunConfig, remote: RemoteSpec) -> None:
    """What a run on a server cannot do, naming the flag."""
    if requested.quant_compute is not None:
        raise ConfigError(
            "--quant-compute: the in-process engine's setting; a server computes on its own"
        )
    if remote.api == "chat" and requested.resolve:
        raise ConfigError(
            "--resolve: a chat-level run cannot continue after a tool result; use --api completions"
        )
    if requested.signals or requested.consistency_samples:
        raise ConfigError(
            "--signals/--consistency-samples: the uncertainty signals read the in-process engine's "
            "per-token entropies and hidden states; run them with --backend local"
        )
    if requested.likelihoods:
        raise ConfigError(
            "--likelihoods: the splice's log-probabilities come from the in-process engine's "
            "prefill of each arm; run them with --backend local"
        )
    if requested.max_batch_tokens is not None:
        raise ConfigError("--max-batch-tokens: the engine's budget; a server batches on its own")
    if requested.gpu_memory_utilization is not None:
        raise ConfigError(
            "--gpu-memory-utilization: the engine's KV pool; a server batches on its own"
        )
    if requested.static_decode:
        raise ConfigError(
            "--static-decode: the in-process engine's setting; a server decodes on its own"
        )


def resolve_device(device: str | None) -> str:
    """`--device` as torch names it: cuda when available and none is asked for, else cpu; a
    ConfigError naming the flag for a device that is unknown or not on this machine."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"--device {device!r}: expected cpu, cuda or cuda:N") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"--device {device}: CUDA is not available on this machine; pass --device cpu"
        )
    if parsed.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {device!r}: expected cpu, cuda or cuda:N")
    return str(parsed)


@dataclass(frozen=True)
class Workload:
    """The sequences a run will ask for, as far as their lengths go (what `check_fits` reads)."""

    data: Path  # the data file (the problem's line is named in a message)
    problems: Sequence[Problem]
    prompts: Sequence[ProblemPrompts]
    conditions: Sequence[Condition]
    splices: dict[str, tuple[int, ...]]  # arm code -> the ids appended at the cut
    base_budget: int
    arm_budget: int


def check_fits(work: Workload, context: int | None, max_batch_tokens: int | None) -> None:
    """Refuse up front a problem whose longest sequence would not fit the model's `context`, or
    whose largest engine group could exceed `max_batch_tokens` mid-run (None: no limit)."""
    if context is not None:
        _check_context(work, context)
    if max_batch_tokens is not None:
        _check_batch_budget(work, max_batch_tokens)


def _check_context(work: Workload, limit: int) -> None:
    longest_splice = max((len(ids) for ids in work.splices.values()), default=0)
    bases = {base_of(condition) for condition in work.conditions}
    arms = any(condition.kind == "arm" for condition in work.conditions)
    for problem, prompt in zip(work.problems, work.prompts):
        for base in sorted(bases):
            # an arm continues at most base_budget - 1 reasoning tokens, then its splice and budget
            needed = len(prompt.for_base(base)) + work.base_budget
            if base != NO_TOOL_BASE and arms:
                needed += longest_splice + work.arm_budget
            if needed > limit:
                raise ConfigError(
                    f"{work.data}:{problem.source_line}: problem {problem.id}: the {base} prompt "
                    f"({len(prompt.for_base(base))} tokens) plus the token budgets needs {needed} "
                    f"positions, more than the model's context of {limit}; lower --max-new-tokens"
                )


def _check_batch_budget(work: Workload, budget: int) -> None:
    """A base is a prompt run alone (an empty suffix); an arms group's prefix is the prompt plus
    at most `base_budget - 1` reasoning tokens, with one suffix (the splice) per arm."""
    for problem, prompt in zip(work.problems, work.prompts):
        shapes = {}
        for base in sorted({base_of(condition) for condition in work.conditions}):
            length = len(prompt.for_base(base))
            shapes[base] = GroupShape.of(length, (0,), (work.base_budget,))
            arms = [c for c in work.conditions if c.kind == "arm" and c.base == base]
            if arms:
                shapes[f"{base} arms"] = GroupShape.of(
                    length + work.base_budget - 1,
                    [len(work.splices[c.code]) for c in arms],
                    (work.arm_budget,) * len(arms),
                )
        for name, shape in shapes.items():
            need = batch_cost([shape])
            if need > budget:
                raise ConfigError(
                    f"--max-batch-tokens {budget}: {work.data}:{problem.source_line}: problem "
                    f"{problem.id}'s {name} can need {need} KV token slots; raise the budget to "
                    f"at least {need}, or lower --max-new-tokens"
                )


@dataclass(frozen=True)
class DeviceDefaults:
    """What a run computes in on its device when the flags leave it to the device."""

    dtype: str  # one of DTYPES (a run on a server: the server's, set by prepare)
    static_decode: bool  # graphed fixed-shape decode


def device_defaults(requested: RunConfig, device: str) -> DeviceDefaults:
    """`requested`'s dtype and decode as asked, or else as `device` suits them: on CPU float32
    and the eager cascade (the batch-invariant path); where the engine sizes its KV pool from
    device memory (CUDA), the checkpoint's own compute dtype (models/loader.py
    `gpu_compute_dtype`, which reads its config.json: no weight is loaded) and decode steps on
    fixed shapes replayed as CUDA graphs."""
    gpu = batches_from_pool(device)
    static_decode = gpu if requested.static_decode is None else requested.static_decode
    dtype = requested.dtype
    if dtype is None:
        if gpu:
            from nudgeability.models.loader import gpu_compute_dtype, resolve

            dtype = gpu_compute_dtype(resolve(requested.model))
        else:
            dtype = "float32"
    return DeviceDefaults(dtype, static_decode)
