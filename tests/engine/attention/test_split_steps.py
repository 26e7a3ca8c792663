"""Steps that prefill some rows while others decode run their decode rows with fixed shapes and
the rest on the eager cascade (engine/attention/static_dispatch.py, a split step), and give the
tokens HF's solo `generate` gives and the unsplit eager engine gives. On CPU the fixed-shape rows
run FlexAttention's eager reference on the same buffers a CUDA graph would replay."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model

NEW = 12


def staggered(engine: Engine, return_logits=True) -> dict[str, tuple[list[int], object]]:
    """Work that arrives while other work decodes: a prompt, then a second prompt and a fork
    submitted a few steps later each, stepped to the end. Name -> (full prompt, completion)."""
    params = SamplingParams(max_new_tokens=NEW, ignore_eos=True)
    prompts = {"a": random_ids(30, seed=1), "b": random_ids(70, seed=2)}
    prefix, suffixes = random_ids(45, seed=3), [random_ids(n, seed=10 + n) for n in (2, 0, 7)]
    refs = {"a": engine.submit_generate(prompts["a"], params, return_logits=return_logits)}
    done = {}
    for step in range(40):
        if step == 3:
            refs["b"] = engine.submit_generate(prompts["b"], params, return_logits=return_logits)
        if step == 6:
            arms = engine.submit_fork(
                ForkRequest(prefix, suffixes, params), return_logits=return_logits
            )
            for i, (ref, suffix) in enumerate(zip(arms, suffixes)):
                refs[f"arm{i}"] = ref
                prompts[f"arm{i}"] = prefix + suffix
        if engine.busy:
            done.update({ref.id: completion for ref, completion in engine.step()})
    assert not engine.busy
    return {name: (prompts[name], done[ref.id]) for name, ref in refs.items()}


@pytest.mark.parametrize("arch", ["llama", "gemma4"])
def test_decode_rows_of_a_prefilling_step_run_fixed_shapes_and_give_hf_s_tokens(arch):
    model = tiny_model(arch, num_layers=2, seed=7)
    engine = Engine(model, static_decode=True)
    eager_plans = []
    run_eager = engine._run_eager

    def spy(plan):
        eager_plans.append(plan)
        return run_eager(plan)

    engine._run_eager = spy
    split = staggered(engine)
    # the split path ran (else this test would pass on the all-eager engine), and no decode row
    # ever went to the eager cascade: every eager forward only prefilled
    assert engine.stats.split_steps >= 2, engine.stats
    assert all(s1 - s0 > 1 for plan in eager_plans for _, s0, s1 in plan.row_chunks)
    unsplit = staggered(Engine(model))
    for name, (prompt, completion) in split.items():
        assert_matches_reference(model, completion, prompt, NEW, engine.eos_ids)
        assert completion.token_ids == unsplit[name][1].token_ids, name
        assert torch.allclose(completion.logits, unsplit[name][1].logits, rtol=0, atol=1e-4)


def test_the_fused_greedy_ids_are_the_argmax_of_the_lm_head_and_hf_s_tokens(monkeypatch):
    """Greedy rows that keep no logits take the ids computed with the fixed-shape forward
    (`graphed_decode.with_greedy_head`): at every such step they equal the argmax of the model's
    own head on the same hidden states, and the completions equal HF's solo greedy tokens and
    those of the un-fused path (the same work keeping its logits)."""
    from nudgeability.engine import engine as engine_module
    from nudgeability.models.testing.reference import hf_greedy

    model = tiny_model("qwen3", num_layers=2, seed=8)
    head = model.get_output_embeddings()
    checked = []
    choose = engine_module.choose_tokens

    def compared(rows, run, runner):
        tokens, logits = choose(rows, run, runner)
        if run.fused:
            with torch.inference_mode():  # the model's own head, outside the engine's products
                expected = torch.nn.functional.linear(run.last, head.weight).argmax(dim=-1)
            assert tokens == expected.tolist()
            checked.append(len(tokens))
        return tokens, logits

    monkeypatch.setattr(engine_module, "choose_tokens", compared)
    engine = Engine(model, static_decode=True)
    runs = staggered(engine, return_logits=False)
    assert engine.stats.fused_greedy_steps == len(checked) >= 5
    assert engine.stats.split_steps >= 2
    unfused = Engine(model, static_decode=True)  # return_logits: every step's logits path
    logits_path = staggered(unfused, return_logits=True)
    assert unfused.stats.fused_greedy_steps == 0 and unfused.stats.static_steps >= 5
    for name, (prompt, completion) in runs.items():
        assert completion.token_ids == hf_greedy(model, prompt, NEW, logits=False).tokens
        assert completion.token_ids == logits_path[name][1].token_ids


def test_one_token_prefill_chunks_run_with_fixed_shapes_and_only_the_rows_at_their_end_choose():
    """At one prefill token a step, a fork's arms compute their suffixes a token at a time: the
    arm whose suffix ended decodes beside one still prefilling, both one-token rows in one bucket,
    and only the first chooses a token (`StepPlan.sampling_positions`; taking every row of the
    bucket as choosing gave the decoding arm the other's token)."""
    model = tiny_model("llama", num_layers=2, seed=9)
    engine = Engine(model, static_decode=True, prefill_tokens=1)
    prefix, suffixes = random_ids(4, seed=4), [random_ids(8, seed=1), random_ids(2, seed=21)]
    params = SamplingParams(max_new_tokens=NEW)  # an arm stops at EOS, as HF's run does
    partial = []
    decode = engine.static_dispatch._decode

    def spy(plan, *args):
        partial.append(0 < len(plan.sampling()) < len(plan.row_chunks))
        return decode(plan, *args)

    engine.static_dispatch._decode = spy
    arms = engine.fork(prefix, suffixes, params, return_logits=True)
    assert sum(partial) >= 5
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, NEW, engine.eos_ids)
