"""The configuration of one `nudge run`, as asked and as resolved, and its canonical JSON form.

A `RunConfig` holds every setting that can change a record: the model and its family, the task,
data file and problem draw, the decoding, the conditions, the token budgets, the sentences file,
the dtype and device, and the batching (chunk size and KV budget, or on CUDA the share of free
device memory the KV pool takes: batch composition can change floating-point results in the last
bits). As the user asks for a run (`nudge run`'s flags, parsed in cli/run.py, or `RunConfig(...)`
in Python) a field may be None, meaning "the default"; and `conditions` may hold presets.
`prepare` (splice/run/prepare.py) returns the resolved config: no None left but where the setting
is genuinely absent (`max_batch_tokens`, `gpu_memory_utilization`, `shard`), paths absolute,
conditions as codes in canonical order, `n` the number of problems drawn, `chunk_size` the one
settled before `prepare` (splice/run/shape.py `settle`: on CUDA by unit the rows the KV pool
holds at a fresh start, or the one the run it resumes recorded). Its canonical JSON (sorted keys) is stored in the run's manifest; a later
run against the same `--out` must resolve to the same config (splice/rundir/manifest_keys.py
`compare_manifests` names every key that differs).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from nudgeability.models.smollm2 import ALIAS as DEFAULT_MODEL  # the embedded model

DECODINGS = ("greedy", "sampled")
DTYPES = ("float32", "bfloat16", "float16")
SERVER = "server"  # the resolved dtype and device of a run on a server: they are the server's
SAMPLED_TEMPERATURE = 1.0
SAMPLED_TOP_P = 0.95
DEFAULT_SAMPLED_SEEDS = (0, 1, 2)
# the defaults run the embedded demo (SmolLM2 on the MuSiQue sample) in a few minutes on a CPU
DEFAULT_N = 3
DEFAULT_MAX_NEW_TOKENS = (256, 128)
DEFAULT_CHUNK_SIZE = 32
DEMO_TASK = (
    "strategyqa"  # `nudge run`'s first run shows the tool: the task whose report fills on SmolLM2
)
# `nudge run`'s problems drawn when --n is not given: MuSiQue's twenty paragraphs make each problem
# ~4x longer
DEFAULT_N_OF_TASK = {"strategyqa": 8, "musique": DEFAULT_N}
DEFAULT_RETRIEVE_K = 1  # as MuSiQue's prompt says: `retrieve` returns the best paragraph


class ConfigError(ValueError):
    """A command-line value or config that cannot be used; the message names the flag or key."""


@dataclass(frozen=True)
class RunConfig:
    """Every setting that decides the records of a run (see the module docstring).

    The defaults run the embedded demo; None is resolved by `prepare` as the comment says.
    """

    model: str = DEFAULT_MODEL  # 'smollm2', a checkpoint directory or .gguf, or a repo id
    model_label: str | None = None  # the experiment's model name (stats joins runs by it)
    family: str | None = None  # the model family; None: detected
    # None: float32 on CPU; on CUDA the checkpoint's own (bf16, or fp16 where it is fp16:
    # models/loader.py `gpu_compute_dtype`); resolved: the dtype the run computes in
    dtype: str | None = None
    device: str | None = None  # None: cuda if available, else cpu
    task: str = "musique"
    data: str | None = None  # the data file; None: the task's shipped sample
    n: int | None = DEFAULT_N  # problems to draw (None: all); resolved: problems drawn
    sample_seed: int = 0  # the seed of the problem draw
    decoding: str = "greedy"  # "greedy" | "sampled"
    temperature: float | None = None  # None: the decoding's
    top_p: float | None = None  # None: the decoding's
    seeds: tuple[int, ...] | None = None  # decoding seeds; None: (0,) greedy, (0, 1, 2) sampled
    conditions: tuple[str, ...] = ("all",)  # codes and presets; resolved: codes, canonical order
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS[0]  # budget of the bases (NT, B, oracle_B)
    max_new_tokens_arm: int = DEFAULT_MAX_NEW_TOKENS[1]  # each arm's budget after the splice
    sentences: str | None = None  # the sentences file; None: the shipped sentences.toml
    # a file of further interventions (splice/experiment/intervention_file.py), whose arms
    # join the conditions; None: the shipped conditions only
    interventions: str | None = None
    # problems per unit of work (and per base batch); None: settled (splice/run/shape.py):
    # DEFAULT_CHUNK_SIZE, but on CUDA by unit the rows the KV pool holds (shape.py `settle`)
    chunk_size: int | None = None
    max_batch_tokens: int | None = (
        None  # the engine's KV pool, in token slots; None: grows with the work (CUDA: see below)
    )
    # CUDA without max_batch_tokens: the share of free device memory the KV pool takes at start
    # (engine/kv/kv_pool.py); None: the engine's default (0.9). Not a CPU setting
    gpu_memory_utilization: float | None = None
    # CUDA: decode steps on fixed shapes replayed as CUDA graphs (engine/README.md, *Fixed-shape
    # decode*): faster steps on a GPU (benchmarks/gpu_check.py), a logit's last bits other than the
    # eager cascade's. Not a CPU setting
    # decode steps on fixed shapes replayed as CUDA graphs; None: on where the engine sizes its
    # KV pool from device memory (CUDA), off elsewhere; resolved: True or False
    static_decode: bool | None = None
    shard: tuple[int, int] | None = None  # (k, n): this run computes chunk i when i % n == k - 1
    consistency_samples: int = 0  # K unaided samples per problem for self-consistency (0: none)
    # B's token uncertainty and hidden state at the cut (splice/run/units/signals.py); on with --signals,
    # and with --consistency-samples (a grounded-nudge run)
    signals: bool = False
    resolve: bool = False  # the resolution phase: execute each TOOL record's call (resolve.py)
    # paragraphs MuSiQue's `retrieve` returns in the resolution phase, which alone may set it;
    # None: 1 with `resolve`, absent without
    retrieve_k: int | None = None
    # how a quantised checkpoint's linears compute: exact | fused | dense (models/quant/compute.py);
    # None: fused for a quantised checkpoint; resolved None for an unquantised one or a server
    quant_compute: str | None = None
    # each arm's splice log-probabilities and, on sealed arms, the action openers' probabilities
    # right after the think-close (splice/run/units/likelihoods.py); on with --likelihoods
    likelihoods: bool = False
    # further arms (codes) whose openers are scored, after an appended think-close
    score_openers: tuple[str, ...] = ()
    # further cuts of each base's reasoning, every arm forked at each (splice/experiment/cuts.py):
    # "all", fractions "0.25,0.5" or "sentences:3,7"; resolved: its canonical spelling. None:
    # the paper's cut alone
    cuts: str | None = None
    # sampled decoding: each arm decoded N times from its cut, sample k >= 1 from its own stream
    # (sample 0 is the arm's record as a run without it writes it); 1: once
    samples_per_arm: int = 1

    def to_dict(self) -> dict:
        """The config as plain JSON values (tuples become lists).

        A run without the resolution phase leaves out `resolve` and `retrieve_k`, one with the
        default signals `consistency_samples` and `signals`, one without an interventions file
        `interventions`, one without likelihoods
        `likelihoods` and `score_openers`, one with the paper's cut alone `cuts`, one
        decoding each arm once `samples_per_arm`, and one with the engine's default
        memory share `gpu_memory_utilization` or its eager decode (`static_decode` off), so its manifest is the one earlier versions wrote,
        and their runs still resume.
        """
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
        if not self.resolve:
            del data["resolve"], data["retrieve_k"]
        # Likewise the signals at their defaults (none), as earlier versions wrote.
        if not self.consistency_samples:
            del data["consistency_samples"]
        if not self.signals:
            del data["signals"]
        # Likewise no interventions file.
        if self.interventions is None:
            del data["interventions"]
        # Likewise the likelihoods, off unless asked for.
        if not self.likelihoods:
            del data["likelihoods"]
        if not self.score_openers:
            del data["score_openers"]
        if self.cuts is None:  # the paper's cut alone: as earlier versions wrote
            del data["cuts"]
        if self.samples_per_arm == 1:  # likewise one decoding of each arm
            del data["samples_per_arm"]
        if self.quant_compute is None:  # unquantised: the manifest earlier versions wrote
            del data["quant_compute"]
        if self.gpu_memory_utilization is None:  # the engine's default: as earlier versions wrote
            del data["gpu_memory_utilization"]
        if not self.static_decode:  # the eager cascade: as earlier versions wrote
            del data["static_decode"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        """The config of `to_dict`'s JSON form (a manifest's `config`); ConfigError naming a key
        that is unknown or missing."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"config.{unknown[0]}: not a setting of this version of nudgeability")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        # a resolved config leaves the eager decode out of its JSON (`to_dict`): off, not "the
        # device's default"
        values.setdefault("static_decode", False)
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"config: {exc}") from None

    def canonical_json(self) -> str:
        """Sorted-key JSON: equal configs give equal strings."""
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    @property
    def experiment(self) -> dict:
        """The `experiment` object of the manifest, as `nudgeability.stats` reads it."""
        return {
            "model": self.model_label,
            "task": self.task,
            "decoding": self.decoding,
            "seeds": list(self.seeds),
        }


def default_n(task: str) -> int:
    """The problems `nudge run --task TASK` draws when --n is not given."""
    return DEFAULT_N_OF_TASK.get(task, DEFAULT_N)


def model_label(spec: str) -> str:
    """The experiment's model name: 'smollm2', a repo id, or a directory's / GGUF file's name."""
    path = Path(spec)
    if spec == DEFAULT_MODEL or not path.exists():
        return spec
    return path.stem if path.is_file() else path.resolve().name


def default_out(config: RunConfig) -> Path:
    """Where a run goes when no --out is given: runs/<model>-<task>-<decoding>, with -shardKofN
    for a shard; '/' in a repo id becomes '--'. The model's label is the config's, else the one
    `prepare` will resolve (`model_label`), so a requested config names the same directory."""
    label = config.model_label or model_label(config.model)
    name = f"{label.replace('/', '--')}-{config.task}-{config.decoding}"
    if config.shard is not None:
        name += f"-shard{config.shard[0]}of{config.shard[1]}"
    return Path("runs") / name


def resolve_decoding(
    decoding: str, seeds: tuple[int, ...] | None
) -> tuple[float, float, tuple[int, ...]]:
    """(temperature, top_p, seeds) of a decoding mode.

    Greedy is deterministic and runs once, as seed 0; giving other seeds is an error. Sampled
    decoding uses temperature 1.0 and top-p 0.95, each seed a full replicate (default 0, 1, 2).
    """
    if decoding not in DECODINGS:
        raise ConfigError(f"--decoding {decoding!r}: expected one of {', '.join(DECODINGS)}")
    if decoding == "greedy":
        if seeds not in (None, (0,)):
            raise ConfigError(
                "--seeds: greedy decoding is deterministic and runs as seed 0; "
                "pass --decoding sampled to run several seeds"
            )
        return 0.0, 1.0, (0,)
    return SAMPLED_TEMPERATURE, SAMPLED_TOP_P, seeds if seeds is not None else DEFAULT_SAMPLED_SEEDS
