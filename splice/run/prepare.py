"""Everything a run resolves before it touches the output directory: `prepare(requested)`.

The pipeline: validate the settings (validation.py, each error naming its flag), load the
sentences, the data file and the problem draw, then the model (or the server and its tokenizer)
and its family, render the prompts, their shared starts (splice/experiment/shared_start.py)
and the splice ids of every arm, check that every sequence fits (`check_fits`), and build the
resolved `RunConfig`, the manifest and the run's `Plan` from it. The chunk size is the run's
shape, settled before (splice/run/shape.py `settle`): on CUDA it is the rows the engine's KV pool
holds, so a CUDA run given none here is refused (splice/run/device_batching.py says why); on CPU
and on a server none means `DEFAULT_CHUNK_SIZE`. The result is a `Prepared`
experiment; a bad input raises a one-line ValueError (or OSError) naming the file, line, field
or flag, before any output exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from nudgeability.backends.base import Backend
from nudgeability.engine.invariant.cpu.reordered import reorder_linears
from nudgeability.models.families import Family, detect_family
from nudgeability.models.loader import LoadedModel, ModelSource, load_model
from nudgeability.models.quant.compute import DEFAULT_COMPUTE
from nudgeability.models.smollm2 import ALIAS as SMOLLM2
from nudgeability.models.smollm2 import EmbeddedModelMissing
from nudgeability.splice.experiment.conditions import ORACLE_BASE, Condition
from nudgeability.splice.experiment.openers import action_openers, check_exclusive
from nudgeability.splice.experiment.prompts import ProblemPrompts, render_prompts
from nudgeability.splice.experiment.sentences import Sentences, load_sentences
from nudgeability.splice.experiment.shared_start import SharedStarts, shared_starts
from nudgeability.splice.run.config import (
    DEFAULT_CHUNK_SIZE,
    SERVER,
    ConfigError,
    RunConfig,
    model_label,
)
from nudgeability.splice.run.device_batching import batches_from_pool
from nudgeability.splice.run.remote import (
    RemoteSpec,
    RemoteTokenizer,
    load_tokenizer,
    open_remote,
    register_conversations,
)
from nudgeability.splice.run.validation import (
    Validated,
    Workload,
    check_fits,
    device_defaults,
    validate,
)
from nudgeability.splice.rundir.manifest import (
    Shown,
    ShownProblem,
    UserInterventions,
    build_manifest,
    remote_manifest,
)
from nudgeability.splice.rundir.plan import Plan
from nudgeability.splice.tasks import Problem, Task, get_task, sample_problems
from nudgeability.splice.tasks.tools import Toolbox
from nudgeability.util.heap import release_freed_heap


@dataclass
class Prepared:
    """A validated experiment, ready to run."""

    config: RunConfig
    task: Task
    problems: list[Problem]
    sentences: Sentences
    loaded: LoadedModel | None  # None for a run on a server
    family: Family
    prompts: list[ProblemPrompts]
    splices: dict[str, tuple[int, ...]]
    manifest: dict = field(repr=False)
    # the conditions (with the self-consistency samples), units, keys and order of the run, read
    # from the manifest like every other reader of the run directory's plan
    plan: Plan = field(repr=False)
    toolbox: Toolbox | None = None  # the executable tools, when the run resolves its calls
    backend: Backend | None = None  # a server's (checked); None: the run builds the engine
    # each base's start, which the engine computes once (None on a server: its cache is its own)
    starts: SharedStarts | None = None


@dataclass
class _Model:
    """The model side of a run: a loaded checkpoint, or a server and the model's tokenizer."""

    spec: str  # what the manifest's config.model says
    family: Family
    source: ModelSource
    loaded: LoadedModel | None = None
    backend: Backend | None = None
    tokenizer: RemoteTokenizer | None = None
    quant_compute: str | None = None  # the mode a quantised checkpoint's linears took


def prepare(
    requested: RunConfig,
    loaded: LoadedModel | None = None,
    remote: RemoteSpec | None = None,
    recorded: UserInterventions | None = None,
) -> Prepared:
    """Validate and resolve the run `requested` asks for (see the module docstring); creates no file.

    `loaded` reuses a model already in memory (it must be the one `requested.model` names).
    `remote` sends the run to a server instead (see remote.py): `requested.model` is then the
    model name the server answers to, and no model is loaded here. `recorded`: a stored run's
    interventions (its manifest's), read from there instead of running the file again.
    """
    valid = validate(requested, remote, recorded)
    defaults = device_defaults(requested, valid.device)
    requested = replace(
        requested,
        dtype=defaults.dtype,
        static_decode=defaults.static_decode,
        chunk_size=_chunk_size(requested, valid.device),
    )
    sentences = load_sentences(requested.sentences)
    task = get_task(requested.task)
    data = Path(requested.data) if requested.data is not None else task.default_data_path()
    if not data.is_file():
        raise FileNotFoundError(
            f"{data}: no such data file; pass an official {task.name} file with --data"
        )
    data = data.resolve()
    problems = sample_problems(task.load(data), requested.n, requested.sample_seed, source=data)
    # StrategyQA's search index is read now: a bad file fails before any output
    toolbox = task.toolbox(data, retrieve_k=valid.retrieve_k) if requested.resolve else None
    model = _open_model(requested, valid.device, loaded, remote)
    oracle = any(condition.code == ORACLE_BASE for condition in valid.conditions)
    prompts = [render_prompts(task, model.family, problem, oracle) for problem in problems]
    splices = _splices(model.family, sentences, valid.conditions)
    if requested.likelihoods:
        for base in {c.base for c in valid.conditions if c.kind == "arm"}:
            check_exclusive(action_openers(model.family, task, base), model.family, base)
    starts = shared_starts(task, model.family, oracle) if model.backend is None else None
    work = Workload(
        data,
        problems,
        prompts,
        valid.conditions,
        splices,
        requested.max_new_tokens,
        requested.max_new_tokens_arm,
    )
    # a server refuses a prompt too long for its context itself, with a clear 400
    check_fits(
        work, None if model.loaded is None else _context(model.loaded), requested.max_batch_tokens
    )
    if model.backend is not None:
        register_conversations(model.backend, task, problems, prompts)
    config = _resolved(requested, valid, model, task, data, problems, sentences)
    manifest = build_manifest(
        config,
        [p.id for p in problems],
        model.source,
        sentences.sha256,
        torch.get_num_threads(),
        _shown(problems, sentences, valid.conditions),
        None if starts is None else starts.to_manifest(),
        _user_inputs(valid),
    )
    if model.backend is not None:
        manifest = remote_manifest(
            manifest,
            model.backend.describe(),
            model.backend.continuation,
            model.tokenizer.directory,
            model.tokenizer.files,
        )
    return Prepared(
        config,
        task,
        problems,
        sentences,
        model.loaded,
        model.family,
        prompts,
        splices,
        manifest,
        Plan.from_manifest(manifest),
        toolbox,
        model.backend,
        starts,
    )


def _open_model(
    requested: RunConfig, device: str, loaded: LoadedModel | None, remote: RemoteSpec | None
) -> _Model:
    """Load the checkpoint (or reuse `loaded`), or open the server and the model's tokenizer."""
    if remote is not None:
        spec = requested.model  # the server's name for it, sent as given
        tokenizer = load_tokenizer(remote.tokenizer or requested.model)
        family = detect_family(tokenizer.directory, tokenizer.tokenizer, override=requested.family)
        backend = open_remote(remote, spec, family)
        source = ModelSource(spec=spec, directory=tokenizer.directory)
        return _Model(spec, family, source, backend=backend, tokenizer=tokenizer)
    spec = _model_spec(requested.model)
    if loaded is None:
        loaded = load_run_model(requested, device)
    family = detect_family(loaded.source.directory, loaded.tokenizer, override=requested.family)
    quant_compute = _quant_compute(requested, loaded.source)
    return _Model(spec, family, loaded.source, loaded=loaded, quant_compute=quant_compute)


def load_run_model(requested: RunConfig, device: str) -> LoadedModel:
    """Load the checkpoint `requested.model` names, owned by the run: its fp32 CPU linears kept
    only in oneDNN's layout, the weights' memory once (engine/invariant/cpu/reordered.py; the same bits as the
    kept copy a model handed to `prepare` gets). Workers share the parent's (workers.py)."""
    try:
        loaded = load_model(
            _model_spec(requested.model),
            device=device,
            dtype=getattr(torch, requested.dtype),
            quant_compute=requested.quant_compute or DEFAULT_COMPUTE,
        )
    except EmbeddedModelMissing as exc:
        raise ConfigError(f"--model {requested.model}: {exc}") from None
    if reorder_linears(loaded.model):
        release_freed_heap()
    return loaded


def _quant_compute(requested: RunConfig, source: ModelSource) -> str | None:
    """The compute mode the loaded model's quantised linears took (None: not quantised)."""
    if source.quant_compute is None:
        if requested.quant_compute is not None:
            raise ConfigError(
                f"--quant-compute {requested.quant_compute}: {source.spec} is not a quantised checkpoint"
            )
        return None
    mode = source.quant_compute["mode"]
    if requested.quant_compute not in (None, mode):
        raise ConfigError(
            f"--quant-compute {requested.quant_compute}: the model given was loaded with {mode}"
        )
    return mode


def _context(loaded: LoadedModel) -> int | None:
    """The model's context length (positions), when its config states one."""
    config = loaded.model.config
    return getattr(getattr(config, "text_config", None) or config, "max_position_embeddings", None)


def _resolved(requested, valid: Validated, model: _Model, task, data, problems, sentences):
    """The resolved config: every default filled in, paths absolute, conditions as codes."""
    remote = model.backend is not None
    return RunConfig(
        model=model.spec,
        model_label=requested.model_label or model_label(model.spec),
        family=model.family.name,
        dtype=SERVER if remote else requested.dtype,
        device=valid.device,
        task=task.name,
        data=str(data),
        n=len(problems),
        sample_seed=requested.sample_seed,
        decoding=requested.decoding,
        temperature=valid.temperature,
        top_p=valid.top_p,
        seeds=valid.seeds,
        conditions=tuple(c.code for c in valid.conditions),
        max_new_tokens=requested.max_new_tokens,
        max_new_tokens_arm=requested.max_new_tokens_arm,
        sentences=str(Path(sentences.source).resolve()),
        interventions=None if valid.interventions is None else valid.interventions.path,
        chunk_size=requested.chunk_size,
        max_batch_tokens=requested.max_batch_tokens,
        gpu_memory_utilization=requested.gpu_memory_utilization,
        static_decode=requested.static_decode,
        shard=requested.shard,
        consistency_samples=requested.consistency_samples,
        signals=requested.signals or requested.consistency_samples > 0,
        resolve=requested.resolve,
        retrieve_k=valid.retrieve_k,
        quant_compute=model.quant_compute,
        likelihoods=requested.likelihoods,
        cuts=valid.cuts,
        samples_per_arm=requested.samples_per_arm,
        score_openers=tuple(
            c.code for c in valid.conditions if c.code in set(requested.score_openers)
        ),
    )


def _chunk_size(requested: RunConfig, device: str) -> int:
    """The chunk size settled (splice/run/shape.py `settle`), else the fixed default; a device
    whose KV pool is sized from free memory (CUDA) has no default but its pool's rows."""
    if requested.chunk_size is not None:
        return requested.chunk_size
    if batches_from_pool(device):
        raise ConfigError(
            f"--chunk-size: a run on {device} takes it from its engine's KV pool: settle the "
            "run's shape first (splice/run/shape.py `settle`, as `nudge run` does) or give one"
        )
    return DEFAULT_CHUNK_SIZE


def _model_spec(model: str) -> str:
    """Existing paths become absolute (a resumed run may start elsewhere); other specs stay as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if model != SMOLLM2 and path.exists() else model


def _shown(problems: list[Problem], sentences: Sentences, conditions: list[Condition]) -> Shown:
    """What the run shows the model, for the report (splice/rundir/manifest.py `Shown`)."""
    inserted = {}
    for condition in conditions:
        chosen = _inserted(sentences, condition) if condition.kind == "arm" else ""
        if chosen:
            inserted[condition.code] = chosen
    return Shown(
        {p.id: ShownProblem(p.question, p.gold) for p in problems},
        inserted,
    )


def _splices(
    family: Family, sentences: Sentences, conditions: list[Condition]
) -> dict[str, tuple[int, ...]]:
    """The ids each arm appends at the cut: nothing for the empty splice, else the family's splice."""
    splices = {}
    for condition in conditions:
        if condition.kind != "arm":
            continue
        text = _inserted(sentences, condition)
        splices[condition.code] = tuple(family.splice_ids(text, sealed=condition.seal))
    return splices


def _inserted(sentences: Sentences, condition: Condition) -> str:
    """The text an arm inserts at the cut: a user's arm's own, else its sentence ("": none)."""
    if condition.text is not None:
        return condition.text
    chosen = sentences.sentence_for(condition)
    return "" if chosen is None else chosen[1]


def _user_inputs(valid: Validated) -> UserInterventions | None:
    """The interventions file for the manifest: its path, sha256 and definitions."""
    user = valid.interventions
    if user is None:
        return None
    return UserInterventions(user.path, user.sha256, user.definitions())
