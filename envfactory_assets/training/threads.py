"""CPU thread count for torch on a small, possibly shared machine.

Measured on the 2-core development machine (SmolLM2-135M, float32, SFT step = 2 rows of ~280 tokens):
with the machine otherwise idle, 2 torch threads took 4.2-4.3 s/step and 1 thread ~7 s/step; as soon as
other processes ran (load average 2-5), 2 threads took 14-37 s/step while 1 thread stayed at 7-10 s/step.
Greedy generation of 32 tokens under load: 17-25 s with 2 threads, 2.2-2.5 s with 1. OpenMP worker
threads spin while they wait, so a thread without a free core slows every step down. Hence: use only
cores that nothing else is using (cores minus the load average rounded up), at least 1.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager


def available_cores() -> int:
    """CPU cores this process may run on (``sched_getaffinity``, else ``os.cpu_count()``), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def suggested_torch_threads() -> int:
    """Cores minus the 1-minute load average rounded up, clamped to ``[1, cores]`` (2 cores, load 0.5 -> 1)."""
    cores = available_cores()
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = 0.0
    return max(1, min(cores, cores - math.ceil(load)))


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
