"""Every consumer of a step's logits (greedy and sampled tokens, `return_logits`, token statistics)
reads one LM-head product per forward of the step (engine/sampling/choose.py): the fixed-shape
decode's, computed with its forward at the bucket's shape (`graphed_decode.with_greedy_head`), and
the eager part's own in a split step; never the head again at another row count. On CPU the
fixed-shape rows run FlexAttention's eager reference on the buffers a CUDA graph would replay;
each completion is held to HF's solo greedy run (tests/helpers/engine_reference.py), and the logits
a row keeps are, bit for bit, the rows of the product its step's forward computed."""

from __future__ import annotations

from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model

NEW = 6


def test_each_forward_of_a_step_computes_one_head_product_that_every_consumer_reads():
    model = tiny_model("llama", num_layers=2, seed=7)
    engine = Engine(model, static_decode=True)
    runner, products, per_step = engine.runner, [], []
    head = runner.logits

    def counted(hidden):
        out = head(hidden)
        products.append(out)
        return out

    runner.logits = counted
    params = SamplingParams(max_new_tokens=NEW, ignore_eos=True, token_stats=True)
    first = random_ids(20, seed=1)
    refs = [engine.submit_generate(first, params, return_logits=True)]
    prefix, suffixes = random_ids(25, seed=3), [random_ids(n, seed=10 + n) for n in (2, 5)]
    done = {}
    for step in range(40):
        if step == 2:  # prefilled while the first prompt decodes: split steps
            refs += engine.submit_fork(ForkRequest(prefix, suffixes, params), return_logits=True)
        if not engine.busy:
            break
        before, calls = engine.stats.forward_calls, len(products)
        had = {ref.id: _kept(engine, done, ref) for ref in refs}
        done.update({ref.id: out for ref, out in engine.step()})
        per_step.append((engine.stats.forward_calls - before, len(products) - calls))
        for ref in refs:  # a row's new logits are, bitwise, a row of one of this step's products
            logits = _kept(engine, done, ref)
            if len(logits) > len(had[ref.id]):
                new = logits[-1]
                assert any((p == new).all(-1).any() for p in products[calls:]), (step, ref)
    assert engine.stats.static_steps > 0 and engine.stats.split_steps > 0
    assert all(heads <= forwards for forwards, heads in per_step), per_step
    for prompt, ref in zip([first] + [prefix + s for s in suffixes], refs):
        assert_matches_reference(model, done[ref.id], prompt, NEW, engine.eos_ids)
        assert len(done[ref.id].logprobs) == len(done[ref.id].entropies) == NEW


def _kept(engine: Engine, done: dict, ref) -> list:
    """The logits `ref`'s row has kept so far (a finished row's from its completion)."""
    row = engine._rows.get(ref.id)
    if row is not None:
        return list(row.logits)
    return list(done[ref.id].logits) if ref.id in done else []
