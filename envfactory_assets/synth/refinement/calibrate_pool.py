"""Calibration of many trajectories in several processes, each with its own sandbox worker.

Calibrating one trajectory depends only on the trajectory, the environments and the seeded solver and
simulated user (every attempt's seed comes from the task id,
:func:`~envfactory_assets.synth.refinement.solver.attempts.attempt_seed`),
so trajectories can be calibrated in any process and in any order. The results come back in input order
and equal a sequential run's; ``envfactory_assets_tests/test_calibrate_pool.py`` checks that on the fixtures.
The solver's own CPU work and the sandbox worker's each take about half of a trajectory's time, so one
process keeps about one core busy; a 2-core machine gains about 1.7x with 2 processes.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from envfactory_assets.config_checks import whole_number
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker

#: At most this many processes when the setting is 0 (auto): one per core, since each keeps one core busy.
MAX_AUTO_WORKERS = 8
#: Memory one process needs, for the auto setting: its own imports and rows, plus one sandbox worker per
#: environment it is sent (each a Python process with the environment loaded; 30-60 MiB measured).
BASE_MIB_PER_WORKER = 500
MIB_PER_ENVIRONMENT = 60
#: The largest setting: every process runs its own sandbox worker, which loads every environment it is sent
#: (tens of MiB each), so more processes than this exhaust memory long before they save time.
MAX_WORKERS = 64
#: Below this many trajectories per process, starting processes (imports, environment loads: seconds) costs
#: more than it saves, so the stage runs in its own process.
MIN_TRAJECTORIES_PER_WORKER = 40
#: Trajectories per task sent to a process: small enough for a steady progress bar and an even load.
CHUNK = 8

#: ``calibrate(raw trajectory, {env_id: environment}, worker) -> calibration``
Calibrate = Callable[[dict[str, Any], dict[str, dict[str, Any]], SandboxWorker], dict[str, Any]]


def resolve_workers(setting: int, n_trajectories: int, n_environments: int = 0) -> int:
    """Processes to calibrate ``n_trajectories`` over ``n_environments`` with: ``setting``, or for 0 one per core
    (at most :data:`MAX_AUTO_WORKERS`) as far as the available memory holds :data:`MIB_PER_ENVIRONMENT` per
    environment per process; never more than one per :data:`MIN_TRAJECTORIES_PER_WORKER` trajectories.

    Raises:
        SettingError: (a ValueError) ``setting`` is not a whole number in ``[0, MAX_WORKERS]``.
    """
    whole_number("calibration", "workers", setting, low=0, high=MAX_WORKERS)
    wanted = setting
    if not wanted:
        import psutil

        per_process = BASE_MIB_PER_WORKER + MIB_PER_ENVIRONMENT * n_environments
        fits = int(psutil.virtual_memory().available / 2**20 // per_process)
        wanted = min(os.cpu_count() or 1, MAX_AUTO_WORKERS, fits)
    return max(1, min(wanted, n_trajectories // MIN_TRAJECTORIES_PER_WORKER))


def load_environments(worker: SandboxWorker, environments: dict[str, dict[str, Any]], env_ids: Any) -> None:
    """Load each of ``env_ids`` into ``worker`` once. The worker keeps the sources and reloads them by
    itself after a restart, so nothing here tracks crashes."""
    for env_id in sorted(set(env_ids)):
        worker.load_environment(
            env_id, environments[env_id]["source"], origin=environments[env_id].get("origin", "untrusted")
        )


# one per pool process: its sandbox worker, the environments, the calibration function, what is loaded
_process: dict[str, Any] = {}


def _start(environments: dict[str, dict[str, Any]], calibrate: Calibrate, limits: SandboxLimits) -> None:
    from multiprocessing import util

    worker = SandboxWorker(limits).__enter__()
    # pool processes leave through os._exit, which skips atexit; multiprocessing's finalizers still run
    util.Finalize(worker, worker.__exit__, args=(None, None, None), exitpriority=10)
    _process.update(worker=worker, environments=environments, calibrate=calibrate, loaded=set())


def _calibrate_chunk(raws: list[dict[str, Any]]) -> list[dict[str, Any]]:
    worker, loaded = _process["worker"], _process["loaded"]
    needed = {e for r in raws for e in r["env_ids"]} - loaded
    load_environments(worker, _process["environments"], needed)
    loaded |= needed
    return [_process["calibrate"](raw, _process["environments"], worker) for raw in raws]


def calibrate_all(
    raws: Sequence[dict[str, Any]],
    environments: dict[str, dict[str, Any]],
    calibrate: Calibrate,
    workers: int,
    limits: SandboxLimits | None = None,
) -> Iterator[dict[str, Any]]:
    """``calibrate(raw, environments, worker)`` of every trajectory of ``raws``, yielded in input order.

    ``workers`` is the process count (:func:`resolve_workers`); 1 calibrates here in one sandbox worker. With
    more, ``calibrate`` must be picklable (a module-level function or a :func:`functools.partial` of one,
    with picklable arguments) and each process loads the environments of the trajectories it is sent, once.

    Raises:
        whatever ``calibrate`` raises, from the process that ran it (a sandbox error with its attributes).
        RuntimeError: a process ended without an answer (killed, out of memory, or its sandbox worker could
            not start); nothing of the run is returned.
    """
    limits = limits or SandboxLimits()
    if workers <= 1:
        with SandboxWorker(limits) as worker:
            load_environments(worker, environments, (e for r in raws for e in r["env_ids"]))
            for raw in raws:
                yield calibrate(raw, environments, worker)
        return
    chunks = [list(raws[i : i + CHUNK]) for i in range(0, len(raws), CHUNK)]
    # spawn, not fork: the caller may be a Dagster step with threads and open sockets
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start, initargs=(environments, calibrate, limits)
    ) as pool:
        futures = [pool.submit(_calibrate_chunk, chunk) for chunk in chunks]
        try:
            for future in futures:
                try:
                    results = future.result()
                except BrokenProcessPool as exc:
                    raise RuntimeError(
                        f"a calibration process ended without an answer ({exc}): killed, out of memory, or its "
                        f"sandbox worker could not start; workers=1 calibrates in this process and shows the "
                        f"error"
                    ) from exc
                yield from results
        finally:
            for future in futures:
                future.cancel()
