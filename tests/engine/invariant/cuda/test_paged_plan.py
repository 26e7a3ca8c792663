"""The paged kernel's launch (engine/invariant/cuda/paged_attention.py) without the interpreter:
every compile-time constant the same for a token alone and among 1 to 511 others, with the
device's properties mocked to 114 or 132 SMs and capability 8.0 or 9.0, or unreadable; only the
grid's tile count follows the tokens. The kernel itself is replaced by a recorder of its launch
(what is under test here is what the launch reads, not what the kernel computes)."""

from __future__ import annotations

import pytest
import torch

import nudgeability.engine.invariant.cuda.paged_attention as paged
from nudgeability.engine.invariant.cuda.paged_tables import TableBuilder

SWEEP = (1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511)
KV, G, D, BS = 8, 4, 128, 16


class Recorder:
    """Stands in for the jitted kernel: `kernel[grid](*args, **constants)` records both."""

    def __init__(self):
        self.launches: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid):
        def launch(*args, **constants):
            self.launches.append((grid, constants))

        return launch


def launches(tokens: int) -> list[tuple[tuple, dict]]:
    """The two launches of one step of `tokens` decode arms of one group (prefix, then own)."""
    builder = TableBuilder(paged.tile_tokens(G), BS)
    builder.group(0, tokens, ((BS, 1000, 0),))
    for i in range(tokens):
        builder.row(
            i, 40 + i % 7, 41 + i % 7, 1000, blocks=[(100 + 4 * i + b) * BS for b in range(4)]
        )
    tables = builder.tensors("cpu")
    k = torch.empty(KV, 2200 * BS, D, dtype=torch.float16)  # never read: the kernel is recorded
    q = torch.zeros(tokens, KV * G, D, dtype=torch.float16)
    positions = torch.full((tokens,), 1040, dtype=torch.long)
    recorder = Recorder()
    paged._paged_kernel, saved = recorder, paged._paged_kernel
    try:
        paged.row_attention(q, k, k, positions, tables, D**-0.5)
    finally:
        paged._paged_kernel = saved
    return recorder.launches


@pytest.mark.parametrize(
    "properties",
    [None, (114, (8, 0)), (132, (9, 0)), "unreadable"],
)
def test_constants_are_the_same_for_every_batch_and_device(monkeypatch, properties):
    if properties == "unreadable":

        def refuse(*args, **kwargs):
            raise AssertionError("the launch read the device")

        monkeypatch.setattr(torch.cuda, "get_device_properties", refuse)
        monkeypatch.setattr(torch.cuda, "get_device_capability", refuse)
    elif properties is not None:
        sms, capability = properties

        class Props:
            multi_processor_count = sms
            major, minor = capability

        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: Props())
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    seen = None
    for tokens in SWEEP:
        (prefix_grid, prefix), (own_grid, own) = launches(tokens)
        assert prefix_grid == (-(-tokens // paged.tile_tokens(G)), KV)
        assert own_grid == (tokens, KV)
        if seen is None:
            seen = (prefix, own)
        assert (prefix, own) == seen, f"{tokens} tokens"
    assert seen[0]["SPLIT"] == paged.SPLIT and seen[0]["BLOCK_N"] == paged.BLOCK_N
    assert seen[0]["ROWS"] == 16 and seen[0]["TOKENS"] == 4
