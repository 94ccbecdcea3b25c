"""Model-backed synthesis in threads: many trajectories' conversations in flight at once.

A stage whose roles ask a model (the query writer, the model solver, the simulated user, the refiner) spends
nearly all its time waiting for replies, so its trajectories run in threads, as many as the backend serves
at once (:func:`~envfactory_assets.llm.base.concurrency_of`: ``max_concurrency`` of an OpenAI-compatible
endpoint, 1 for a model loaded in this process). The turns of one trajectory stay in order, in one thread:
each starts from the state the one before left, and calibration keeps a turn only when it is solvable.

Each thread has its own sandbox worker: a worker runs one request at a time, and a child that crashes loses
every episode open in it, so threads sharing one would make a trajectory's result depend on what the others
did. Everything else a trajectory depends on is its own (seeds come from its ids, replies from its requests:
the response cache answers equal requests equally), so the results, yielded in input order, equal a
sequential run's; ``envfactory_assets_tests/test_model_concurrency.py`` checks it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from envfactory_assets.llm.base import concurrency_of
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
from envfactory_assets.synth.refinement.calibrate_pool import load_environments

T = TypeVar("T")
R = TypeVar("R")

#: Sandbox child processes (one per environment loaded, ~23 MiB each) the threads' workers hold together at
#: most: a sequential run's one worker holds this many (every environment of a default run), so threads add
#: no memory; a worker over its share stops its least recently used child and reloads it when needed again.
MAX_SANDBOX_PROCESSES = 128
#: Children each thread's worker may keep however many threads there are (a chain spans a few environments).
MIN_PROCESSES_PER_WORKER = 8


def role_concurrency(*roles: Any) -> int:
    """Threads for a stage played by ``roles`` (solvers, users, writers, refiners, or None): the largest
    :func:`~envfactory_assets.llm.base.concurrency_of` of their ``backend`` (1 for a programmatic role).
    Each backend bounds its own requests in flight, so a thread more than a slower backend serves waits."""
    return max([concurrency_of(getattr(r, "backend", None)) for r in roles if r is not None] or [1])


def map_with_workers(
    items: Sequence[T],
    work: Callable[[T, SandboxWorker], R],
    env_ids: Callable[[T], Iterable[str]],
    environments: dict[str, dict[str, Any]],
    threads: int,
    limits: SandboxLimits | None = None,
) -> Iterator[R]:
    """``work(item, worker)`` of every item, in ``threads`` threads, yielded in input order.

    Each thread makes its own :class:`SandboxWorker` on its first item and loads into it, once, the
    environments (of ``environments``) that ``env_ids(item)`` names before each item; every worker is
    closed at the end. ``threads`` is capped at ``len(items)``; 1 runs every item in one thread.

    Raises:
        whatever ``work`` raises, for the first failing item in input order, after the items already running
        have finished (the rest are not started).
    """
    items = list(items)
    if not items:
        return
    threads = max(1, min(int(threads), len(items)))
    per_worker = max(MIN_PROCESSES_PER_WORKER, MAX_SANDBOX_PROCESSES // threads)
    local = threading.local()
    workers: list[SandboxWorker] = []
    lock = threading.Lock()

    def run(item: T) -> R:
        own = getattr(local, "own", None)
        if own is None:
            worker = SandboxWorker(limits or SandboxLimits(), max_processes=per_worker)
            with lock:
                workers.append(worker)
            own = local.own = (worker, set())
        worker, loaded = own
        needed = set(env_ids(item)) - loaded
        load_environments(worker, environments, needed)
        loaded |= needed
        return work(item, worker)

    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="model-stage")
    futures = [pool.submit(run, item) for item in items]
    try:
        for future in futures:
            yield future.result()
    finally:
        for future in futures:
            future.cancel()
        pool.shutdown(wait=True)
        for worker in workers:
            worker.close()
