"""The process's cores for the invariant forward: independent fixed-shape kernel calls shared
between threads, each thread running torch on one thread, so that which core computes a call
decides no bit (engine/invariant/cpu/products.py says why the calls have fixed shapes)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager

import torch


class Cores:
    """`count` cores for independent fixed-shape kernel calls: the calling thread and
    `count - 1` persistent threads, each running torch on one thread.

    This is how the invariant forward uses every core without letting the core count into the
    sums: a product's tiles (or a wide weight's column slices) are split between the cores,
    and each core runs the very calls a single thread would, on the same shapes, one sequential
    kernel each (torch releases the GIL inside its kernels). Which core computes a tile decides
    nothing about its bits, so the records do not depend on the core count
    (tests/engine/invariant/test_cores.py). `invariant_products` sets the count for its duration and
    back to 1 after it; the threads stay, idle, for the next forward."""

    def __init__(self, count: int = 1):
        self.count = 1
        self._pool: ThreadPoolExecutor | None = None
        self._threads = 0
        self._running = False  # inside `run`: nested calls stay on their own core
        self.resize(count)

    def forget_threads(self) -> None:
        """After a fork: the child has none of the parent's threads; the next `resize` above one
        core starts its own (splice/run/workers.py forks its workers)."""
        self._pool, self._threads, self._running, self.count = None, 0, False, 1

    def resize(self, count: int) -> None:
        """Use `count` cores from now on (threads are started on first need, never stopped)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"cores must be a positive integer, got {count!r}")
        if count - 1 > self._threads:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(count - 1, "nudge-core")
            self._threads = count - 1
        self.count = count

    def run(self, jobs: list[Callable[[], None]]) -> None:
        """Run every job once: the first on the calling thread, the rest on the others; returns
        when all have finished (the first job's exception, if any, is raised here). A job that
        itself shares work (a product inside a group's attention) runs it on its own core."""
        if self.count == 1 or len(jobs) == 1 or self._running:
            for job in jobs:
                job()
            return
        # grad and inference mode are per thread: the others run their jobs in the caller's
        inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
        self._running = True
        try:
            futures = [self._pool.submit(_in_mode, job, inference, grad) for job in jobs[1:]]
            try:
                jobs[0]()
            finally:
                wait(futures)  # every job has finished before anything is raised or returned
        finally:
            self._running = False
        for future in futures:
            future.result()

    @property
    def alone(self) -> bool:
        """Whether a call made now runs on the calling thread alone: one core, or inside `run`,
        where the caller already has its core."""
        return self.count == 1 or self._running

    def share(self, work: list[Callable[[], None]], costs: list[float]) -> None:
        """Run every callable of `work` once, whole, dealt to the cores by their `costs` (the
        costliest first, each to the least loaded core). How they are dealt decides no bit:
        each is the same sequence of calls on whichever core runs it."""
        if self.count == 1 or self._running or len(work) < 2:
            for item in work:
                item()
            return
        bins: list[list[Callable[[], None]]] = [[] for _ in range(self.count)]
        loads = [0.0] * self.count
        for i in sorted(range(len(work)), key=lambda i: -costs[i]):
            core = loads.index(min(loads))
            bins[core].append(work[i])
            loads[core] += costs[i]

        def job(items: list[Callable[[], None]]) -> Callable[[], None]:
            return lambda: [item() for item in items]

        self.run([job(items) for items in bins if items])

    @contextmanager
    def one_thread(self) -> Iterator[None]:
        """Every `run` and `share` inside runs its jobs in turn on the calling thread: for
        whatever sees only its own thread's ops (a dispatch mode watching a forward,
        tests/helpers/capture_hazards.py). Which core runs a job decides no bit."""
        before = self._running
        self._running = True
        try:
            yield
        finally:
            self._running = before

    def spans(self, n: int) -> list[tuple[int, int]]:
        """`range(n)` cut into at most `count` contiguous, nearly equal spans (one span inside
        `run`, where the caller already has its core)."""
        parts = 1 if self._running else min(self.count, n)
        bounds = [n * i // parts for i in range(parts + 1)]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _in_mode(job: Callable[[], None], inference: bool, grad: bool) -> None:
    # A thread starts with OpenMP's and MKL's default thread counts, not the caller's one:
    # pinned here, so that every kernel a core runs is one sequential call.
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    with torch.inference_mode(inference), torch.set_grad_enabled(grad):
        job()


CORES = Cores()  # the process's cores; `invariant_forward` sizes them to torch's thread count
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=CORES.forget_threads)
