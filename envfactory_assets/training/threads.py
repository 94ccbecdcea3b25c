"""CPU thread count for torch on a small, possibly shared machine.

Measured on the 2-core development machine while other processes kept the load average at 4-5
(SmolLM2-135M, float32): one SFT step on 2 x 290 tokens took 17-25 s with 2 torch threads and 7-10 s
with 1; greedy generation of 32 tokens took 17-25 s with 2 threads and 2.2-2.5 s with 1. OpenMP worker
threads spin while waiting, so a second thread only helps when a core is actually free (unloaded, the same
step took ~3.7 s with 2 threads). Hence: threads = free cores, at least 1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def available_cores() -> int:
    """CPU cores this process may run on (``sched_getaffinity``, else ``os.cpu_count()``), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def suggested_torch_threads() -> int:
    """Cores minus the 1-minute load average (rounded), clamped to ``[1, cores]``."""
    cores = available_cores()
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = 0.0
    return max(1, min(cores, round(cores - load)))


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
