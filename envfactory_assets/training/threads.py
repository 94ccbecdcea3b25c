"""CPU thread count for torch on a small, possibly shared machine.

Measured on the 2-core development machine (SmolLM2-135M, float32, SFT step = 2 rows of ~280 tokens):
with the machine otherwise idle, 2 torch threads took 4.2-4.3 s/step and 1 thread ~7 s/step; as soon as
other processes ran (load average 2-5), 2 threads took 14-37 s/step while 1 thread stayed at 7-10 s/step.
Greedy generation of 32 tokens under load: 17-25 s with 2 threads, 2.2-2.5 s with 1. OpenMP worker
threads spin while they wait, so a thread without a free core slows every step down. Hence: use only
cores that nothing else is using, at least 1.

"Something else" must not include this process: the load average counts it too, so a run that had been
busy for a minute (loading data, a previous stage) saw a load of ~1 on an idle 2-core machine and trained
on one thread (the recorded default run did). Where ``/proc/stat`` exists, the busy cores of *other*
processes are measured over a short window as the machine's busy CPU time minus this process's own.

A count chosen once can be wrong for the rest of a long stage: a test run or a build that happened to be busy
at that moment pinned a 24-step SFT to one thread after it had finished. :class:`ThreadGovernor` therefore
re-chooses between steps, from the CPU time other processes used since its last check (no extra waiting).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SAMPLE_SECONDS = 0.5
"""Window over which other processes' CPU use is measured (seconds)."""
IDLE_SLACK = 0.25
"""Busy-core share of other processes ignored as noise (a shell, a sleeping server waking up)."""


CGROUP_CPU_FILES = ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
"""Where a container's CPU quota is read (cgroup v2, then v1 with ``cpu.cfs_period_us`` beside it)."""


def cgroup_cpu_limit(paths: tuple[str, ...] = CGROUP_CPU_FILES) -> int | None:
    """Cores a CPU quota allows (quota / period rounded up), or None without a quota or a readable file.

    A container started with ``--cpus=2`` on a 64-core host sees 64 cores through ``sched_getaffinity``;
    64 torch threads on 2 cores' worth of time is the oversubscription :mod:`threads` exists to avoid.
    """
    for path in paths:
        try:
            with open(path, encoding="ascii") as f:
                fields = f.read().split()
            if path.endswith("cpu.max"):
                quota, period = fields[0], fields[1]
            else:
                quota = fields[0]
                with open(os.path.join(os.path.dirname(path), "cpu.cfs_period_us"), encoding="ascii") as f:
                    period = f.read().split()[0]
            if quota == "max" or int(quota) <= 0 or int(period) <= 0:
                return None
            return max(1, math.ceil(int(quota) / int(period)))
        except (OSError, ValueError, IndexError):
            continue
    return None


def available_cores() -> int:
    """CPU cores this process may run on (``sched_getaffinity``, else ``os.cpu_count()``), capped by a
    container's CPU quota (:func:`cgroup_cpu_limit`), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return max(1, min(cores, limit) if limit else cores)


def _machine_busy_seconds(path: str = "/proc/stat") -> float:
    """Busy CPU seconds of the whole machine since boot (``/proc/stat``: all but idle and iowait).

    When this process runs at normal priority, time spent by niced processes (the ``nice`` column) is not
    counted: the scheduler gives them only what normal-priority threads leave (a ``nice -n 10`` job gets about
    a tenth of a contended core), so they should not cost this process a thread.

    Raises:
        OSError: unreadable; ValueError: the first line is not the ``cpu`` total with at least 4 counters
        (another layout would be read as CPU time).
    """
    with open(path, encoding="ascii") as f:
        words = f.readline().split()
    if len(words) < 5 or words[0] != "cpu":
        raise ValueError(f"{path}: first line is not the 'cpu' total: {' '.join(words)[:80]!r}")
    fields = [int(x) for x in words[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])  # guest time is already inside user/nice
    niced = fields[1] if os.getpriority(os.PRIO_PROCESS, 0) <= 0 else 0
    return (total - idle - niced) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def busy_cores_of_others(window: float = SAMPLE_SECONDS) -> float:
    """Cores kept busy by other processes over ``window`` seconds (machine busy time minus this process's).

    Returns:
        Average busy cores (>= 0.0, e.g. 1.0 = one core fully used by something else).

    Raises:
        OSError: ``/proc/stat`` cannot be read (not Linux); callers fall back to the load average.
    """
    machine, own, started = _machine_busy_seconds(), _own_cpu_seconds(), time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - started
    others = (_machine_busy_seconds() - machine) - (_own_cpu_seconds() - own)
    return max(0.0, others / elapsed)


def _threads_for(busy_others: float, cores: int) -> int:
    return max(1, min(cores, cores - math.ceil(max(0.0, busy_others - IDLE_SLACK))))


def suggested_torch_threads() -> int:
    """Cores not used by other processes, clamped to ``[1, cores]``.

    On Linux: cores minus :func:`busy_cores_of_others` (less :data:`IDLE_SLACK`) rounded up; 2 cores with
    another process using one -> 1. Elsewhere: cores minus the 1-minute load average rounded up.
    """
    cores = available_cores()
    try:
        return _threads_for(busy_cores_of_others(), cores)
    except (OSError, ValueError, IndexError):
        try:
            busy = math.ceil(os.getloadavg()[0])
        except (OSError, AttributeError):
            busy = 0
    return max(1, min(cores, cores - busy))


@contextmanager
def torch_threads(num_threads: int | None = None) -> Iterator[int]:
    """Run a block with ``torch.set_num_threads(n)`` and restore the previous count afterwards.

    Args:
        num_threads: threads to use; ``None`` means :func:`suggested_torch_threads`.

    Yields:
        The thread count in effect.

    Raises:
        ValueError: ``num_threads`` < 1.
    """
    import torch

    if num_threads is not None and num_threads < 1:
        raise ValueError("num_threads must be >= 1")
    chosen = num_threads or suggested_torch_threads()
    previous = torch.get_num_threads()
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(previous)


class ThreadGovernor:
    """Torch's thread count for a long stage, re-chosen between steps as other processes come and go.

    Use as a context manager (the previous count is restored on exit) and call :meth:`adjust` at step
    boundaries (a trainer callback, each generation batch). ``adjust`` measures the busy cores of other
    processes since the previous check (at least ``min_interval`` seconds ago; otherwise it keeps the count)
    and applies the same rule as :func:`suggested_torch_threads`. Where ``/proc/stat`` is missing it keeps the
    first choice.

    Args:
        num_threads: a fixed count (never adjusted); None = choose and adjust.
        min_interval: shortest measuring window in seconds.

    Attributes:
        threads: the count in effect.
        history: every count in effect, one entry per :meth:`adjust` call plus the first.

    Entering the same governor again while it is active (nested ``with``) keeps the count it first replaced, so
    the outermost exit restores that one.

    Raises:
        ValueError: ``num_threads`` < 1, or ``min_interval`` negative or not finite.
    """

    def __init__(self, num_threads: int | None = None, min_interval: float = 2.0) -> None:
        if num_threads is not None and num_threads < 1:
            raise ValueError("num_threads must be >= 1")
        if not (math.isfinite(min_interval) and min_interval >= 0):
            raise ValueError(f"min_interval must be a finite number of seconds >= 0, got {min_interval}")
        self.fixed = num_threads
        self._depth = 0
        self.min_interval = min_interval
        self.threads = 0
        self.history: list[int] = []
        self._previous = 0
        self._mark: tuple[float, float, float] | None = None

    def _snapshot(self) -> None:
        try:
            self._mark = (_machine_busy_seconds(), _own_cpu_seconds(), time.monotonic())
        except (OSError, ValueError, IndexError):
            self._mark = None

    def _apply(self, n: int) -> None:
        import torch

        if n != self.threads:
            torch.set_num_threads(n)
            self.threads = n
        self.history.append(n)

    @property
    def started(self) -> bool:
        """True once :meth:`start` has chosen a first count."""
        return bool(self.history)

    def start(self) -> ThreadGovernor:
        """Choose the first count (remembering the previous one for :meth:`stop`); returns self."""
        import torch

        if self._depth == 0:
            self._previous = torch.get_num_threads()
        self._depth += 1
        self._apply(self.fixed or suggested_torch_threads())
        self._snapshot()
        return self

    def stop(self) -> None:
        """Restore the count that was in effect before :meth:`start`."""
        import torch

        if self._depth == 0:
            return  # never started (or already stopped): nothing to restore
        self._depth -= 1
        if self._depth == 0 and self._previous:
            torch.set_num_threads(self._previous)
            self.threads = self._previous

    def __enter__(self) -> ThreadGovernor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def adjust(self) -> int:
        """Re-choose the count from other processes' CPU use since the last check; returns the count."""
        if self.fixed or self._mark is None or self._depth == 0:  # after stop() the restored count stays
            return self.threads
        machine, own, started = self._mark
        elapsed = time.monotonic() - started
        if elapsed <= 0 or elapsed < self.min_interval:  # min_interval 0 and a clock that did not move
            return self.threads
        try:
            others = ((_machine_busy_seconds() - machine) - (_own_cpu_seconds() - own)) / elapsed
        except (OSError, ValueError, IndexError):
            return self.threads
        self._apply(_threads_for(others, available_cores()))
        self._snapshot()
        return self.threads

    def summary(self) -> dict[str, float | int]:
        """``{"threads_first", "threads_mean", "threads_changes"}`` for a stage's metrics."""
        changes = sum(1 for a, b in zip(self.history, self.history[1:], strict=False) if a != b)
        mean = sum(self.history) / len(self.history) if self.history else 0.0
        return {
            "threads_first": self.history[0] if self.history else 0,
            "threads_mean": round(mean, 2),
            "threads_changes": changes,
        }


def governor_callback(governor: ThreadGovernor) -> Any:
    """A transformers ``TrainerCallback`` letting ``governor`` re-choose the thread count before each optimizer
    step (SFT and GRPO trainers both take it in ``callbacks``)."""
    from transformers import TrainerCallback

    class AdjustThreads(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            governor.adjust()

    return AdjustThreads()
