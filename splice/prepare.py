"""Everything a run checks and resolves before it touches the output directory.

`prepare(config)` validates the user's choices in order of cost (decoding, conditions, budgets,
sentences, data and the problem draw, then the model, its family and the prompts) and returns a
`Prepared` experiment: the resolved `RunConfig`, the problems, their rendered prompts, the splice
ids of every arm and the manifest. A bad input raises a one-line ValueError (or OSError) naming
the file, line, field or flag, before any output exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from nudgeability.backends.base import Backend
from nudgeability.engine import GroupShape, batch_cost
from nudgeability.models.families import KNOWN_FAMILIES, Family, detect_family
from nudgeability.models.loader import LoadedModel, ModelSource, load_model
from nudgeability.models.smollm2 import ALIAS as SMOLLM2
from nudgeability.models.smollm2 import EmbeddedModelMissing
from nudgeability.splice.backend_setup import (
    RemoteSpec,
    load_tokenizer,
    open_remote,
    register_conversations,
    remote_manifest,
)
from nudgeability.splice.experiment.conditions import (
    NO_TOOL_BASE,
    ORACLE_BASE,
    Condition,
    UnknownConditionError,
    base_of,
    parse_conditions,
    with_consistency,
)
from nudgeability.splice.experiment.prompts import ProblemPrompts, render_prompts
from nudgeability.splice.experiment.sentences import Sentences, load_sentences
from nudgeability.splice.manifest import build_manifest
from nudgeability.splice.run_config import (
    DTYPES,
    SERVER,
    ConfigError,
    RunConfig,
    resolve_decoding,
)
from nudgeability.splice.tasks import Problem, Task, get_task, sample_problems
from nudgeability.splice.tasks.tools import Toolbox


@dataclass
class Prepared:
    """A validated experiment, ready to run."""

    config: RunConfig
    task: Task
    problems: list[Problem]
    conditions: list[Condition]
    sentences: Sentences
    loaded: LoadedModel | None  # None for a run on a server
    family: Family
    prompts: list[ProblemPrompts]
    splices: dict[str, tuple[int, ...]]
    manifest: dict = field(repr=False)
    toolbox: Toolbox | None = None  # the executable tools, when the run resolves its calls
    backend: Backend | None = None  # a server's (checked); None: the run builds the engine


def model_label(spec: str) -> str:
    """The experiment's model name: 'smollm2', a repo id, or a directory's / GGUF file's name."""
    path = Path(spec)
    if spec == SMOLLM2 or not path.exists():
        return spec
    return path.stem if path.is_file() else path.resolve().name


def prepare(
    requested: RunConfig, loaded: LoadedModel | None = None, remote: RemoteSpec | None = None
) -> Prepared:
    """Validate and resolve the run `requested` asks for (see the module docstring); creates no file.

    `loaded` reuses a model already in memory (it must be the one `requested.model` names).
    `remote` sends the run to a server instead (see backend_setup.py): `requested.model` is then
    the model name the server answers to, and no model is loaded here.
    """
    temperature, top_p, seeds = resolve_decoding(requested.decoding, requested.seeds)
    if (requested.temperature, requested.top_p) not in ((None, None), (temperature, top_p)):
        raise ConfigError(
            f"temperature/top_p: --decoding {requested.decoding} uses {temperature}/{top_p}; "
            "leave them unset"
        )
    try:
        conditions = parse_conditions(requested.conditions)
    except UnknownConditionError as exc:
        raise ConfigError(f"--conditions: {exc}") from None
    base_budget, arm_budget = requested.max_new_tokens, requested.max_new_tokens_arm
    if min(base_budget, arm_budget) < 1:
        raise ConfigError("--max-new-tokens: budgets must be >= 1")
    if requested.chunk_size < 1:
        raise ConfigError(f"--chunk-size {requested.chunk_size}: must be >= 1")
    if requested.consistency_samples < 0:
        raise ConfigError(
            f"--consistency-samples {requested.consistency_samples}: must be >= 0 (0: none)"
        )
    if requested.max_batch_tokens is not None and requested.max_batch_tokens < 1:
        raise ConfigError(f"--max-batch-tokens {requested.max_batch_tokens}: must be >= 1")
    if requested.dtype not in DTYPES:
        raise ConfigError(f"--dtype {requested.dtype!r}: expected one of {', '.join(DTYPES)}")
    if remote is not None and remote.api == "chat" and requested.resolve:
        raise ConfigError(
            "--resolve: a chat-level run cannot continue after a tool result; use --api completions"
        )
    if remote is not None and (requested.signals or requested.consistency_samples):
        raise ConfigError(
            "--signals/--consistency-samples: the uncertainty signals read the in-process engine's "
            "per-token entropies and hidden states; run them with --backend local"
        )
    if remote is not None and requested.max_batch_tokens is not None:
        raise ConfigError("--max-batch-tokens: the engine's budget; a server batches on its own")
    device = SERVER if remote is not None else _device(requested.device)
    if requested.family is not None and requested.family not in KNOWN_FAMILIES:
        raise ConfigError(
            f"--family {requested.family!r}: unknown; known families: {', '.join(KNOWN_FAMILIES)}"
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
    toolbox = None
    if requested.resolve:  # StrategyQA's search index is read now: a bad file fails before output
        if isinstance(requested.retrieve_k, bool) or requested.retrieve_k < 1:
            raise ConfigError(f"--retrieve-k {requested.retrieve_k}: must be >= 1")
        toolbox = task.toolbox(data, retrieve_k=requested.retrieve_k)

    backend = tokenizer = None
    if remote is not None:
        spec = requested.model  # the server's name for it, sent as given
        tokenizer = load_tokenizer(remote.tokenizer or requested.model)
        family = detect_family(tokenizer.directory, tokenizer.tokenizer, override=requested.family)
        backend = open_remote(remote, spec, family)
        source = ModelSource(spec=spec, directory=tokenizer.directory)
    else:
        spec = _model_spec(requested.model)
        if loaded is None:
            try:
                loaded = load_model(spec, device=device, dtype=getattr(torch, requested.dtype))
            except EmbeddedModelMissing as exc:
                raise ConfigError(f"--model {requested.model}: {exc}") from None
        family = detect_family(loaded.source.directory, loaded.tokenizer, override=requested.family)
        source = loaded.source
    oracle = any(condition.code == ORACLE_BASE for condition in conditions)
    prompts = [render_prompts(task, family, problem, oracle) for problem in problems]
    splices = _splices(family, sentences, conditions)
    if backend is None:  # a server refuses a prompt too long for its context with a clear 400
        _check_context(
            loaded, data, problems, prompts, conditions, splices, base_budget, arm_budget
        )
    else:
        register_conversations(backend, task, problems, prompts)
    if requested.max_batch_tokens is not None:
        _check_batch_budget(
            requested.max_batch_tokens,
            data,
            problems,
            prompts,
            conditions,
            splices,
            base_budget,
            arm_budget,
        )

    config = RunConfig(
        model=spec,
        model_label=requested.model_label or model_label(spec),
        family=family.name,
        dtype=SERVER if remote is not None else requested.dtype,
        device=device,
        task=task.name,
        data=str(data),
        n=len(problems),
        sample_seed=requested.sample_seed,
        decoding=requested.decoding,
        temperature=temperature,
        top_p=top_p,
        seeds=tuple(seeds),
        conditions=tuple(c.code for c in conditions),
        max_new_tokens=base_budget,
        max_new_tokens_arm=arm_budget,
        sentences=str(Path(sentences.source).resolve()),
        chunk_size=requested.chunk_size,
        max_batch_tokens=requested.max_batch_tokens,
        shard=requested.shard,
        consistency_samples=requested.consistency_samples,
        signals=requested.signals or requested.consistency_samples > 0,
        resolve=requested.resolve,
        retrieve_k=requested.retrieve_k,
    )
    conditions = with_consistency(conditions, requested.consistency_samples)
    manifest = build_manifest(config, [p.id for p in problems], source, sentences.sha256)
    if backend is not None:
        manifest = remote_manifest(manifest, backend, tokenizer)
    return Prepared(
        config,
        task,
        problems,
        conditions,
        sentences,
        loaded,
        family,
        prompts,
        splices,
        manifest,
        toolbox,
        backend,
    )


def _device(device: str | None) -> str:
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


def _model_spec(model: str) -> str:
    """Existing paths become absolute (a resumed run may start elsewhere); other specs stay as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if model != SMOLLM2 and path.exists() else model


def _splices(
    family: Family, sentences: Sentences, conditions: list[Condition]
) -> dict[str, tuple[int, ...]]:
    """The ids each arm appends at the cut: nothing for the empty splice, else the family's splice."""
    splices = {}
    for condition in conditions:
        if condition.kind != "arm":
            continue
        chosen = sentences.sentence_for(condition)
        text = "" if chosen is None else chosen[1]
        splices[condition.code] = tuple(family.splice_ids(text, sealed=condition.sealed))
    return splices


def _check_context(
    loaded, data, problems, prompts, conditions, splices, base_budget, arm_budget
) -> None:
    """Refuse up front a problem whose longest sequence would not fit the model's context."""
    config = loaded.model.config
    limit = getattr(getattr(config, "text_config", None) or config, "max_position_embeddings", None)
    if limit is None:
        return
    longest_splice = max((len(ids) for ids in splices.values()), default=0)
    bases = {base_of(condition) for condition in conditions}
    arms = any(condition.kind == "arm" for condition in conditions)
    for problem, prompt in zip(problems, prompts):
        for base in sorted(bases):
            # an arm continues at most base_budget - 1 reasoning tokens, then its splice and budget
            needed = len(prompt.for_base(base)) + base_budget
            if base != NO_TOOL_BASE and arms:
                needed += longest_splice + arm_budget
            if needed > limit:
                raise ConfigError(
                    f"{data}:{problem.source_line}: problem {problem.id}: the {base} prompt "
                    f"({len(prompt.for_base(base))} tokens) plus the token budgets needs {needed} "
                    f"positions, more than the model's context of {limit}; lower --max-new-tokens"
                )


def _check_batch_budget(
    budget, data, problems, prompts, conditions, splices, base_budget, arm_budget
) -> None:
    """Refuse up front a KV budget that one problem's largest engine group could exceed mid-run.

    A base is a prompt run alone (an empty suffix); an arms group's prefix is the prompt plus at
    most `base_budget - 1` reasoning tokens, with one suffix (the splice) per arm.
    """
    for problem, prompt in zip(problems, prompts):
        shapes = {}
        for base in sorted({base_of(condition) for condition in conditions}):
            length = len(prompt.for_base(base))
            shapes[base] = GroupShape.of(length, (0,), (base_budget,))
            arms = [c for c in conditions if c.kind == "arm" and c.parent == base]
            if arms:
                shapes[f"{base} arms"] = GroupShape.of(
                    length + base_budget - 1,
                    [len(splices[c.code]) for c in arms],
                    (arm_budget,) * len(arms),
                )
        for name, shape in shapes.items():
            need = batch_cost([shape])
            if need > budget:
                raise ConfigError(
                    f"--max-batch-tokens {budget}: {data}:{problem.source_line}: problem {problem.id}'s "
                    f"{name} can need {need} KV token slots; raise the budget to at least {need}, or lower "
                    "--max-new-tokens"
                )
