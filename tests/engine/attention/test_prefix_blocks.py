"""A prefix chunk's rows run in blocks of 64 positions fixed by the run (engine/attention/
cpu_attention.py `prefix_chunk`), so a prompt prefilled in chunks cut anywhere, inside a block or on
its edge, gives the bits of one chunk; and the blocks compute causal (and windowed) attention,
checked against a float64 softmax written here."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import random_ids

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.attention.cpu_attention import prefix_chunk
from nudgeability.engine.kv.kv_cache import LayerKV
from nudgeability.engine.scheduling.step_layout import PrefixChunk
from nudgeability.models.testing.tiny import tiny_model


@pytest.mark.parametrize("arch", ["llama", "gemma4"])  # gemma4: sliding-window layers too
def test_a_prompt_prefilled_in_chunks_cut_anywhere_gives_the_bits_of_one_chunk(arch):
    model = tiny_model(arch, seed=11)
    prompts = [random_ids(150, seed=1), random_ids(97, seed=2)]
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    whole = Engine(model).generate(prompts, params, return_logits=True)
    # 37 and 100 cut inside 64-position blocks, 64 on their edges, 10 inside and across windows
    for budget in (37, 64, 100, 10):
        chunked = Engine(model, prefill_tokens=budget).generate(prompts, params, return_logits=True)
        for a, b in zip(whole, chunked):
            assert a.token_ids == b.token_ids
            assert torch.equal(a.logits, b.logits), budget


class _Layout:
    def __init__(self):
        self.per_call: dict = {}


@pytest.mark.parametrize("window", [None, 50])
@pytest.mark.parametrize("c0,c1", [(0, 200), (70, 131), (128, 192), (5, 9)])  # 64-blocks
def test_a_chunk_is_causal_windowed_attention_over_its_run(window, c0, c1):
    kv, g, d, start, slots = 2, 3, 16, 40, 400
    gen = torch.Generator().manual_seed(c0 + c1)
    k = torch.randn(kv, slots, d, generator=gen)
    v = torch.randn(kv, slots, d, generator=gen)
    q = torch.randn(1, kv * g, c1 - c0, d, generator=gen)
    layout = _Layout()
    handle = LayerKV(layout=layout, k=k, v=v, window=window)
    chunk = PrefixChunk(t0=0, t1=c1 - c0, start=start, c0=c0, c1=c1)
    got = prefix_chunk(q, handle, layout, 0, chunk, d**-0.5, window)  # [1, L, H, D]
    # float64 reference: query at position p, head h, against run keys p' <= p (within window)
    for h in range(kv * g):
        keys = k[h // g, start : start + c1].double()
        values = v[h // g, start : start + c1].double()
        scores = q[0, h].double() @ keys.T * d**-0.5
        pos = torch.arange(c0, c1)[:, None]
        key_pos = torch.arange(c1)[None, :]
        visible = key_pos <= pos
        if window is not None:
            visible &= (pos - key_pos) < window
        want = scores.masked_fill(~visible, float("-inf")).softmax(-1) @ values
        torch.testing.assert_close(got[0, :, h].double(), want, rtol=1e-5, atol=1e-5)
