"""The per-row log-probability and entropy kernel (engine/sampling/row_stats.py) under
TRITON_INTERPRET=1 on CPU tensors: accurate against a float64 reference, and a row's results bit
for bit the same alone and among any number of other rows, at any position. Negative control: the
same kernel with its block chosen from the row count, as a reduction that adapts its split to the
batch does, changes a row's bits."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from nudgeability.engine.sampling import row_stats as rs  # noqa: E402

VOCAB = 2500  # three blocks of 1024, the last partial


def _logits(rows: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scale = torch.tensor([0.5, 4.0, 20.0])[torch.arange(rows) % 3, None]
    return torch.randn(rows, VOCAB, generator=gen) * scale


def test_against_a_float64_reference():
    logits = _logits(7, seed=1)
    tokens = torch.tensor([0, 5, VOCAB - 1, 1023, 1024, 2047, 77])
    logp, entropy = rs.row_stats(logits, tokens)
    ref = torch.log_softmax(logits.double(), dim=-1)
    want_logp = ref.gather(1, tokens[:, None]).squeeze(1)
    want_entropy = -(ref.exp() * ref).sum(-1)
    assert logp.dtype == entropy.dtype == torch.float32
    # fp32 sums over the vocabulary: a few units of 2^-24 per term, relative to the row's scale
    assert torch.allclose(logp.double(), want_logp, rtol=1e-5, atol=1e-4)
    assert torch.allclose(entropy.double(), want_entropy, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("others", [1, 2, 3, 17, 33])
def test_a_row_alone_is_bitwise_the_row_among_others(others):
    rows = _logits(others + 1, seed=others)
    tokens = torch.randint(VOCAB, (others + 1,), generator=torch.Generator().manual_seed(2))
    together = rs.row_stats(rows, tokens)
    for at in {0, others // 2, others}:
        alone = rs.row_stats(rows[at : at + 1], tokens[at : at + 1])
        assert torch.equal(alone[0], together[0][at : at + 1])
        assert torch.equal(alone[1], together[1][at : at + 1])


def test_a_block_chosen_by_the_row_count_changes_the_bits(monkeypatch):
    """The test above would see a reduction whose split follows the batch: here the block is
    halved for a launch of many rows, and some row's entropy changes in its last bits."""
    rows = _logits(33, seed=5)
    tokens = torch.zeros(33, dtype=torch.long)
    alone = [rs.row_stats(rows[i : i + 1], tokens[i : i + 1])[1] for i in range(33)]
    monkeypatch.setattr(rs, "BLOCK", 256)  # what a batch-aware launch would pick for 33 rows
    together = rs.row_stats(rows, tokens)[1]
    assert not all(torch.equal(a, together[i : i + 1]) for i, a in enumerate(alone))
