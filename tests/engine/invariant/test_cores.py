"""The invariant products on several cores (engine/invariant/cpu/cores.py `Cores`): a product's tiles and
a wide weight's slices shared between threads give the very bits one thread gives, at every row
count, whatever runs beside them; and they are the product, to float32's rounding, against a
float64 matmul computed here."""

from __future__ import annotations

import gc
import io
import threading
import time

import pytest
import torch

from nudgeability.engine.invariant.cpu import weights
from nudgeability.engine.invariant.cpu.cores import CORES, Cores
from nudgeability.engine.invariant.cpu.products import tiled_matmul
from nudgeability.engine.invariant.linears import adopt, invariant_forward, product


def _one_thread_tiles(x: torch.Tensor, weight_t: torch.Tensor) -> torch.Tensor:
    """The reference schedule: every 16-row tile (zero-padded) and every column slice of the
    weight (`weights.column_slices`, fixed by its width) computed alone by the library's
    kernel, one after another, on this thread."""
    m, k = x.shape
    n = weight_t.shape[1]
    rows = weights.TILE_ROWS
    padded = -(-m // rows) * rows
    xp = torch.cat([x, x.new_zeros(padded - m, k)])
    out = torch.empty(padded, n)
    for t in range(0, padded, rows):
        tile = xp[t : t + rows]
        for s0, s1 in weights.column_slices(n):
            part = weight_t[:, s0:s1]
            if weights.ONEDNN:  # the library kernel an fp32 tile goes to
                rows_of = part.t().contiguous()
                got = torch.ops.mkldnn._linear_pointwise(tile, rows_of, None, "none", [], "")
            else:
                got = torch.bmm(tile.unsqueeze(0), part.unsqueeze(0))[0]
            out[t : t + rows, s0:s1] = got
    return out[:m]


@pytest.mark.parametrize("n", [64, 576, 1000, 4096 + 300])
@pytest.mark.parametrize("m", [1, 15, 16, 17, 40, 97])
def test_every_core_count_gives_the_bits_of_one_thread(m, n, cores):
    torch.manual_seed(m * 7 + n)
    k = 192
    x = torch.randn(m, k)
    weight = torch.randn(n, k)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        expected = _one_thread_tiles(x, weight.t())
        for count in (1, 2, 3, 4):
            cores(count)
            got = tiled_matmul(x, weight.t())
            assert torch.equal(got, expected), (m, n, count)
    finally:
        torch.set_num_threads(before)
    exact = (x.double() @ weight.double().t()).float()
    torch.testing.assert_close(expected, exact, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [64, 1000, 4096 + 300])
@pytest.mark.parametrize("m", [1, 17, 97])
def test_a_model_weight_gives_the_bits_of_one_thread_at_every_core_count(m, n, cores):
    """The same for a Parameter, whose slices go to the kernel reordered once (the path every
    model weight takes): against a one-thread tile loop of the library's calls on copies
    reordered here."""
    torch.manual_seed(m * 5 + n)
    k = 192
    x = torch.randn(m, k)
    weight = torch.nn.Parameter(torch.randn(n, k), requires_grad=False)
    padded = -(-m // weights.TILE_ROWS) * weights.TILE_ROWS
    xp = torch.cat([x, x.new_zeros(padded - m, k)])
    expected = torch.empty(padded, n)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for s0, s1 in weights.column_slices(n):
            if weights.ONEDNN:  # reordered up to the widest the rule allows, else plain
                part = weight.detach()[s0:s1].clone()
                if n <= weights.REORDER_MAX_COLUMNS:
                    part = torch.ops.mkldnn._reorder_linear_weight(part, 16)
            for t in range(0, padded, weights.TILE_ROWS):
                tile = xp[t : t + weights.TILE_ROWS]
                if weights.ONEDNN:
                    got = torch.ops.mkldnn._linear_pointwise(tile, part, None, "none", [], "")
                else:
                    got = tile @ weight.detach()[s0:s1].t()
                expected[t : t + weights.TILE_ROWS, s0:s1] = got
    finally:
        torch.set_num_threads(before)
    for count in (1, 2, 3):
        torch.set_num_threads(count)  # `invariant_forward` gives the cores torch's threads
        with invariant_forward():
            assert CORES.count == count
            assert torch.equal(product(x, weight), expected[:m]), (m, n, count)
    exact = (x.double() @ weight.detach().double().t()).float()
    torch.testing.assert_close(expected[:m], exact, rtol=1e-5, atol=1e-4)


def test_a_row_keeps_its_bits_whatever_else_shares_the_call(cores):
    """The needle in miniature: row 0 alone against row 0 among 1-80 others, at 2 cores, through
    a model weight (reordered) and a plain tensor (dense)."""
    cores(2)
    torch.manual_seed(1)
    weight = torch.nn.Parameter(torch.randn(1536, 576), requires_grad=False)
    needle = torch.randn(1, 576)
    with invariant_forward():
        for w in (weight, weight.detach().clone()):
            alone = product(needle, w)
            for others in (1, 15, 16, 31, 80):
                batch = torch.cat([needle, torch.randn(others, 576)])
                assert torch.equal(product(batch, w)[:1], alone), others


def test_a_model_weight_is_reordered_once_and_again_when_it_changes(cores):
    """A Parameter's slices are kept in oneDNN's layout between calls: an in-place write to the
    weight, or new data under it, must be seen by the next product (a stale copy would give the
    old weight's numbers), checked against a float64 matmul each time."""
    cores(2)
    torch.manual_seed(3)
    weight = torch.nn.Parameter(torch.randn(1000, 96), requires_grad=False)
    x = torch.randn(20, 96)

    def exact() -> torch.Tensor:
        return (x.double() @ weight.detach().double().t()).float()

    with invariant_forward():
        first = product(x, weight)
        torch.testing.assert_close(first, exact(), rtol=1e-5, atol=1e-4)
        assert torch.equal(product(x, weight), first)
        if weights.ONEDNN:
            kept = weights._PACKED[id(weight)]
            product(x, weight)
            assert weights._PACKED[id(weight)] is kept  # reused, not reordered again
        with torch.no_grad():
            weight.mul_(-2.0)
        torch.testing.assert_close(product(x, weight), exact(), rtol=1e-5, atol=1e-4)
        weight.data = torch.randn(1000, 96)
        torch.testing.assert_close(product(x, weight), exact(), rtol=1e-5, atol=1e-4)
        # a write the version counter cannot see is seen once the copies are forgotten (as
        # every ModelRunner does when it takes a model)
        weight.data.mul_(3.0)
        weights.forget_reordered([weight])
        torch.testing.assert_close(product(x, weight), exact(), rtol=1e-5, atol=1e-4)


def test_a_model_used_by_the_products_still_pickles_and_its_copies_go_with_it():
    layer = torch.nn.Linear(96, 600)
    adopt(layer)  # an `InvariantLinear` now: the engine's products inside its context
    with invariant_forward(), torch.inference_mode():
        expected = layer(torch.ones(2, 96))
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    with invariant_forward(), torch.inference_mode():
        assert torch.equal(again(torch.ones(2, 96)), expected)
    if weights.ONEDNN:
        key = id(layer.weight)
        assert key in weights._PACKED
        del layer
        gc.collect()
        assert key not in weights._PACKED  # dropped with its Parameter


def test_the_other_cores_run_in_the_callers_inference_mode(cores):
    """Inference mode is per thread: a job on another core writing an inference tensor must run
    in inference mode too, or torch refuses the in-place write."""
    cores(2)
    x, weight = torch.randn(64, 32), torch.randn(48, 32)
    with torch.inference_mode():
        got = tiled_matmul(x, weight.t())
    assert got.is_inference()
    torch.testing.assert_close(got, x @ weight.t(), rtol=1e-5, atol=1e-5)


def test_a_failing_job_raises_in_the_caller_after_every_job_ran():
    cores = Cores(3)
    ran = []
    lock = threading.Lock()

    def ok(i):
        def job():
            with lock:
                ran.append(i)

        return job

    def bad():
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        cores.run([ok(0), bad, ok(2)])
    assert sorted(ran) == [0, 2]
    cores.resize(1)


def test_spans_cover_every_item_once_in_order():
    for count in (1, 2, 3, 5):
        cores = Cores(count)
        for n in (1, 2, 7, 16):
            spans = cores.spans(n)
            assert [i for a, b in spans for i in range(a, b)] == list(range(n))
            assert len(spans) == min(count, n)
        cores.resize(1)
    with pytest.raises(ValueError, match="positive integer"):
        Cores(0)


def test_the_products_use_as_many_cores_as_torch_had_threads(cores):
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with invariant_forward():
            assert CORES.count == 3 and torch.get_num_threads() == 1
            product(torch.randn(64, 8), torch.randn(8, 8))
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 3 and CORES.count == 1
    finally:
        torch.set_num_threads(before)


def test_shared_work_runs_each_item_once_and_nested_work_stays_on_its_core():
    cores = Cores(3)
    done, inner_spans, threads = [], [], set()
    lock = threading.Lock()

    def item(i):
        def run():
            with lock:
                done.append(i)
                threads.add(threading.get_ident())
                inner_spans.append(cores.spans(64))  # what a product inside would split
            cores.run([lambda: None, lambda: None])  # nested: on this thread, no deadlock

        return run

    costs = [5.0, 1.0, 1.0, 1.0, 4.0, 2.0, 3.0]
    cores.share([item(i) for i in range(len(costs))], costs)
    assert sorted(done) == list(range(len(costs)))
    assert all(s == [(0, 64)] for s in inner_spans)
    assert 1 < len(threads) <= 3
    assert cores.spans(64) == [(0, 21), (21, 42), (42, 64)]  # outside, every core again
    cores.resize(1)


def test_inside_one_thread_shared_work_stays_on_the_calling_thread():
    """`one_thread` (a dispatch mode's, tests/helpers/capture_hazards.py): every job on the caller, every span whole; after
    it, the cores share again."""
    cores = Cores(3)
    threads = []

    def item():
        threads.append(threading.get_ident())

    with cores.one_thread():
        cores.share([item] * 6, [1.0] * 6)
        cores.run([item, item])
        assert cores.spans(64) == [(0, 64)]
    assert set(threads) == {threading.get_ident()} and len(threads) == 8
    threads.clear()

    def slow_item():  # long enough that the other cores take some
        threads.append(threading.get_ident())
        time.sleep(0.05)

    cores.share([slow_item] * 6, [1.0] * 6)
    assert len(set(threads)) > 1  # the negative control: outside, the other cores take jobs
    cores.resize(1)


@pytest.mark.parametrize("n", [1, 200, 511, 512, 576, 1000, 1536, 4096, 4097, 49152])
def test_column_slices_cover_the_weight_once_in_order(n):
    slices = weights.column_slices(n)
    assert slices[0][0] == 0 and slices[-1][1] == n
    assert all(a1 == b0 for (_, a1), (b0, _) in zip(slices, slices[1:]))
    assert all(s1 > s0 for s0, s1 in slices)
    assert all(s0 % 16 == 0 for s0, _ in slices)
    assert max(s1 - s0 for s0, s1 in slices) <= weights.SLICE_COLUMNS
    # a weight of two tiles' worth of work or more splits, so one tile is work for two cores
    assert (len(slices) >= 2) == (n >= weights.HALVED_COLUMNS)


def test_a_forked_child_starts_its_own_threads():
    # the parent's pool threads do not exist in a fork; the child's Cores must not submit to them
    import os

    from nudgeability.engine.invariant.cpu.cores import CORES

    CORES.resize(2)
    CORES.run([lambda: None, lambda: None])  # the parent's pool started
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: two cores again, on threads of its own
        ok = CORES.count == 1
        CORES.resize(2)
        got = []
        CORES.run([lambda: got.append(1), lambda: got.append(2)])
        os.write(write, b"ok" if ok and sorted(got) == [1, 2] else b"no")
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 2) == b"ok" and status == 0
    CORES.resize(1)
