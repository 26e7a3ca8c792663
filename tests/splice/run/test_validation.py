"""`validate` and `check_fits` (splice/run/validation.py) called directly: each refusal names its
flag (and the file and line of the problem at fault), with the slot counts worked out by hand
from the engine's documented shapes (engine/scheduling/scheduler.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nudgeability.splice.experiment.conditions import parse_conditions
from nudgeability.splice.experiment.prompts import ProblemPrompts
from nudgeability.splice.run.config import SERVER, ConfigError, RunConfig
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.remote import RemoteSpec, remote_spec
from nudgeability.splice.run.validation import Workload, check_fits, validate
from nudgeability.splice.tasks import Problem


def test_a_valid_request_resolves_its_decoding_conditions_and_device():
    valid = validate(RunConfig(decoding="sampled", conditions=("conf",), device="cpu"))
    assert (valid.temperature, valid.top_p, valid.seeds) == (1.0, 0.95, (0, 1, 2))
    assert [c.code for c in valid.conditions] == ["NT", "B", "conf"]
    assert valid.device == "cpu"
    assert validate(RunConfig(), RemoteSpec("http://x/v1")).device == SERVER


@pytest.mark.parametrize(
    "changes,named",
    [
        ({"temperature": 0.7}, "temperature/top_p: --decoding greedy uses 0.0/1.0"),
        ({"conditions": ("nope",)}, "--conditions: unknown condition 'nope'"),
        ({"max_new_tokens_arm": 0}, "--max-new-tokens: budgets must be >= 1"),
        ({"chunk_size": 0}, "--chunk-size 0: must be >= 1"),
        ({"consistency_samples": -1}, "--consistency-samples -1: must be >= 0"),
        ({"max_batch_tokens": 0}, "--max-batch-tokens 0: must be >= 1"),
        ({"dtype": "int8"}, "--dtype 'int8': expected one of float32, bfloat16, float16"),
        ({"device": "tpu"}, "--device 'tpu': expected cpu, cuda or cuda:N"),
        ({"family": "nope"}, "--family 'nope': unknown"),
        ({"resolve": True, "retrieve_k": 0}, "--retrieve-k 0: must be >= 1"),
    ],
)
def test_each_bad_setting_names_its_flag(changes, named):
    with pytest.raises(ConfigError) as error:
        validate(RunConfig(**{"device": "cpu", **changes}))
    assert str(error.value).startswith(named)


@pytest.fixture
def cuda_pool(monkeypatch):
    """The engine's device test answers as on CUDA (its KV pool sized from free memory), on CPU."""
    from nudgeability.engine import engine as engine_module

    monkeypatch.setattr(engine_module, "sizes_pool_from_memory", lambda device: True)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"gpu_memory_utilization": 0.0}, "--gpu-memory-utilization 0.0: must be in (0, 1]"),
        ({"gpu_memory_utilization": 1.5}, "--gpu-memory-utilization 1.5: must be in (0, 1]"),
        ({"gpu_memory_utilization": -0.2}, "--gpu-memory-utilization -0.2: must be in (0, 1]"),
        (
            {"gpu_memory_utilization": float("nan")},
            "--gpu-memory-utilization nan: must be in (0, 1]",
        ),
        (
            {"gpu_memory_utilization": "0.5"},
            "--gpu-memory-utilization '0.5': expected a number in (0, 1]",
        ),
        (
            {"gpu_memory_utilization": 0.5, "max_batch_tokens": 4096},
            "--gpu-memory-utilization: sizes the KV pool from free device memory, but "
            "--max-batch-tokens already fixes its size; give one of the two",
        ),
        (
            {"shard": (1, 2)},
            "--chunk-size: a --shard run on cpu must give it: its default is what the KV pool "
            "holds, which can differ between the machines of the shards",
        ),
    ],
)
def test_the_kv_pool_s_memory_share_on_cuda_is_checked_in_one_line(cuda_pool, changes, message):
    with pytest.raises(ConfigError) as error:
        validate(RunConfig(**{"device": "cpu", **changes}))
    assert str(error.value) == message
    # the edges of (0, 1] are allowed, and a sharded run that names its chunk size
    for share in (1, 1.0, 0.05):
        assert validate(RunConfig(device="cpu", gpu_memory_utilization=share)).device == "cpu"
    assert validate(RunConfig(device="cpu", shard=(1, 2), chunk_size=8)).device == "cpu"


def test_the_memory_share_is_refused_where_no_pool_is_sized_from_memory():
    """On CPU the pool grows with the work, and a server batches on its own: the flag would be
    a silent no-op there, so it is refused, naming it. A CPU shard keeps the fixed default."""
    with pytest.raises(ConfigError) as error:
        validate(RunConfig(device="cpu", gpu_memory_utilization=0.5))
    assert str(error.value) == (
        "--gpu-memory-utilization: the KV pool's share of free CUDA memory; on cpu the pool "
        "grows with the work; leave it out"
    )
    with pytest.raises(ConfigError) as error:
        validate(RunConfig(gpu_memory_utilization=0.5), RemoteSpec("http://x/v1"))
    assert str(error.value) == (
        "--gpu-memory-utilization: the engine's KV pool; a server batches on its own"
    )
    assert validate(RunConfig(device="cpu", shard=(1, 2))).device == "cpu"


def test_retrieve_k_is_the_resolution_phase_s_and_defaults_to_one_there():
    """`--retrieve-k` widens a tool of the resolution phase: the library refuses it without
    `resolve` (as `nudge run` does), and resolves the default to 1 only where tools run."""
    with pytest.raises(ConfigError) as error:
        validate(RunConfig(retrieve_k=5, device="cpu"))
    assert str(error.value) == "--retrieve-k: tools run only in the resolution phase; add --resolve"
    assert validate(RunConfig(device="cpu")).retrieve_k is None
    assert validate(RunConfig(resolve=True, device="cpu")).retrieve_k == 1
    assert validate(RunConfig(resolve=True, retrieve_k=3, device="cpu")).retrieve_k == 3
    with pytest.raises(ConfigError, match=r"^--retrieve-k True: must be >= 1$"):
        validate(RunConfig(resolve=True, retrieve_k=True, device="cpu"))


def test_prepare_refuses_retrieve_k_without_resolve_before_loading_anything():
    # the model named does not exist: the refusal must come first, from the settings alone
    with pytest.raises(ConfigError, match=r"^--retrieve-k: tools run only in the resolution"):
        prepare(RunConfig(model="/nowhere/at/all", retrieve_k=5, device="cpu"))


@pytest.mark.parametrize(
    "flags,named",
    [
        ({"backend": "local", "base_url": "http://x/v1"}, "--base-url: only with --backend openai"),
        ({"backend": "local", "served_model": "m-1"}, "--served-model: only with --backend openai"),
        ({"backend": "openai"}, "--backend openai: needs --base-url URL"),
    ],
)
def test_the_flags_of_a_server_need_one(flags, named):
    with pytest.raises(ConfigError) as error:
        remote_spec(**flags)
    assert str(error.value).startswith(named)
    assert remote_spec("local") is None
    assert remote_spec("openai", "http://x/v1", api="chat") == RemoteSpec("http://x/v1", api="chat")


@pytest.mark.parametrize(
    "changes,spec,named",
    [
        ({"signals": True}, {}, "--signals/--consistency-samples:"),
        ({"max_batch_tokens": 100}, {}, "--max-batch-tokens: the engine's budget"),
        ({"resolve": True}, {"api": "chat"}, "--resolve: a chat-level run cannot continue"),
    ],
)
def test_what_a_server_cannot_do_names_its_flag(changes, spec, named):
    with pytest.raises(ConfigError) as error:
        validate(RunConfig(**changes), RemoteSpec("http://x/v1", **spec))
    assert str(error.value).startswith(named)


def _workload(conditions: str, splices: dict, budgets=(4, 2)) -> Workload:
    problem = Problem(id="q7", task="strategyqa", question="?", gold=True, source_line=31)
    prompts = ProblemPrompts(unaided=tuple(range(10)), with_tool=tuple(range(12)), oracle=None)
    return Workload(
        Path("data.json"), [problem], [prompts], parse_conditions(conditions), splices, *budgets
    )


def test_a_prompt_longer_than_the_context_names_the_problem_and_its_line():
    work = _workload("primary", {"empty": (), "conf": (1, 2, 3), "doubt": (1, 2), "neutral": (9,)})
    # B: 12 prompt tokens + 4 base tokens + the longest splice (3) + 2 arm tokens = 21 positions
    check_fits(work, 21, None)
    with pytest.raises(ConfigError) as error:
        check_fits(work, 20, None)
    assert str(error.value) == (
        "data.json:31: problem q7: the B prompt (12 tokens) plus the token budgets needs 21 "
        "positions, more than the model's context of 20; lower --max-new-tokens"
    )


def test_a_kv_budget_one_group_could_exceed_names_the_group_and_its_need():
    splices = {"empty": (), "conf": (1, 2, 3), "doubt": (1, 2), "neutral": (1, 2, 3, 4, 5)}
    work = _workload("primary", splices)
    # B's arms: prefix 12 + 4 - 1 = 15; the empty splice borrows its last token: prefix 14, suffixes
    # 1, 4, 3, 6; each row holds its own suffix + arm budget (2) - 1, as the engine takes blocks as
    # rows grow (engine/kv/kv_pool.py), no longer the longest suffix: 14 + 2 + 5 + 4 + 7 = 32
    check_fits(work, None, 32)
    with pytest.raises(ConfigError) as error:
        check_fits(work, None, 31)
    assert str(error.value) == (
        "--max-batch-tokens 31: data.json:31: problem q7's B arms can need 32 KV token slots; "
        "raise the budget to at least 32, or lower --max-new-tokens"
    )
    # NT alone: prompt 10, borrowed to 9 + one row of 1 + 4 - 1 = 4 slots = 13
    check_fits(_workload("NT", {}), None, 13)
    with pytest.raises(ConfigError, match="problem q7's NT can need 13 KV token slots"):
        check_fits(_workload("NT", {}), None, 12)


def test_the_fixed_shape_decode_is_a_cuda_setting(cuda_pool):
    """`--static-decode` (CUDA graphs of fixed-shape decode steps) where the pool is sized from
    device memory, as on CUDA; refused on a CPU and on a server, naming the flag."""
    assert validate(RunConfig(device="cpu", static_decode=True)).device == "cpu"


def test_the_fixed_shape_decode_is_refused_off_cuda():
    with pytest.raises(ConfigError) as error:
        validate(RunConfig(device="cpu", static_decode=True))
    assert str(error.value) == (
        "--static-decode: the fixed-shape decode with CUDA graphs runs on CUDA; on cpu leave it out"
    )
    with pytest.raises(ConfigError) as error:
        validate(RunConfig(static_decode=True), RemoteSpec("http://x/v1"))
    assert str(error.value) == (
        "--static-decode: the in-process engine's setting; a server decodes on its own"
    )
