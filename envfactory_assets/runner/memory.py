"""Peak resident memory of this process, sampled in a thread, so that each step of an in-process run gets
the peak of its own time window rather than the process's lifetime peak; the machine's load average is
sampled with it, so a step's time can be read with how busy the machine was.

On Linux each sample reads the kernel's high-water mark (``VmHWM`` of ``/proc/self/status``) and resets it
(writing ``5`` to ``/proc/self/clear_refs``), so a sample is the true peak of the interval since the one
before, short spikes included. Elsewhere (no ``/proc``) a sample is ``getrusage``'s lifetime peak, which
only grows. Memory of child processes (sandbox workers, calibration processes) is not counted.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Callable

_STATUS, _CLEAR_REFS = "/proc/self/status", "/proc/self/clear_refs"


def _peak_kib_since_last_read() -> int | None:
    """The process's peak RSS in KiB since the previous call (Linux), or its lifetime peak (elsewhere)."""
    try:
        with open(_STATUS, encoding="ascii") as status:
            peak = next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")), None)
        with open(_CLEAR_REFS, "w", encoding="ascii") as clear:
            clear.write("5")  # 5: reset the high-water mark to the current RSS (proc(5))
        return peak
    except (OSError, ValueError):
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return maxrss // 1024 if sys.platform == "darwin" else maxrss  # bytes on macOS, KiB on Linux


class PeakMemory(threading.Thread):
    """Samples this process's peak RSS every ``interval_s`` seconds while used as a context manager.

    ``samples`` holds ``(from, to, MiB)``: the peak between the two wall-clock times (``time.time()``, the
    clock of Dagster's step stats); ``loads`` holds ``(time, load)``: the 1-minute load average
    (``os.getloadavg``: runnable processes, this one's threads included) at each sample. Leaving the block
    takes a last sample and stops the thread.
    """

    def __init__(self, interval_s: float = 0.5, clock: Callable[[], float] = time.time) -> None:
        super().__init__(daemon=True, name="envfactory-memory")
        self.interval_s, self.clock = interval_s, clock
        self.samples: list[tuple[float, float, float]] = []
        self.loads: list[tuple[float, float]] = []
        self._stopping = threading.Event()
        self._since = clock()
        self._lock = threading.Lock()

    def __enter__(self) -> PeakMemory:
        self._since = self.clock()
        _peak_kib_since_last_read()  # the first interval starts here
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self.join(timeout=10)
        self._sample()

    def run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        with self._lock:
            kib, now = _peak_kib_since_last_read(), self.clock()
            if kib is not None:
                self.samples.append((self._since, now, round(kib / 1024, 1)))
            self._since = now
            try:
                self.loads.append((now, os.getloadavg()[0]))
            except OSError:  # no load average on this platform
                pass

    def peak_mib(self, start: float, end: float) -> float | None:
        """The highest sample whose interval overlaps ``[start, end]`` (wall-clock seconds), or None when none
        does. A sample's interval may reach up to ``interval_s`` into a neighbouring step."""
        with self._lock:
            peaks = [mib for since, until, mib in self.samples if since <= end and until >= start]
        return max(peaks) if peaks else None

    def mean_load(self, start: float, end: float) -> float | None:
        """The mean 1-minute load average sampled within ``[start, end + interval_s]`` (wall-clock seconds: the
        sample that ends a step shorter than ``interval_s`` counts for it), or None when no sample falls there
        (a platform without a load average). It lags: the 1-minute average takes about a minute to follow a
        change."""
        with self._lock:
            loads = [load for when, load in self.loads if start <= when <= end + self.interval_s]
        return round(sum(loads) / len(loads), 2) if loads else None
