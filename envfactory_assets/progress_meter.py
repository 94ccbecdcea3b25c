"""Progress of a long stage (environments built, verified, chains executed, ...): done, total, rate.

A :class:`ProgressMeter` counts finished items and hands a :class:`Progress` to a sink once per shard
(every ``shard`` items), at least every ``min_interval_s`` seconds while items finish, and at the end. The
Dagster layer's sink logs it and records an asset observation; ``envfactory run`` draws a bar from those
observations (:func:`format_bar`). A command made of a few long named steps (``envfactory report``) draws the
same bar with a :class:`StepLine`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

#: metadata keys of a progress observation (asset observation metadata); LABEL, when present, names the bar
#: (a multi-asset's step, which no single asset key names), else the observed asset's key does
DONE, TOTAL, RATE, LABEL = "progress_done", "progress_total", "progress_rate_per_s", "progress_label"


@dataclass(frozen=True)
class Progress:
    """``done`` of ``total`` items after ``elapsed_s`` seconds of wall time."""

    done: int
    total: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Items per second so far (0.0 before any time has passed)."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current rate, or None while the rate is unknown."""
        return (self.total - self.done) / self.rate if self.rate > 0 else None

    def as_metadata(self) -> dict[str, float | int]:
        return {DONE: self.done, TOTAL: self.total, RATE: round(self.rate, 3)}


class ProgressMeter:
    """Counts finished items (thread-safe) and emits :class:`Progress` to ``sink`` per shard.

    Args:
        total: number of items; 0 emits one final ``0/0`` progress on :meth:`finish`.
        sink: called with each :class:`Progress`, under the meter's lock (never concurrently).
        shard: emit after every ``shard`` items (default: a twentieth of ``total``, at least 1).
        min_interval_s: also emit when this many seconds passed since the last emission.
        clock: monotonic seconds (injectable for tests).

    Raises:
        ValueError: ``total`` < 0 or ``shard`` < 1.
    """

    def __init__(
        self,
        total: int,
        sink: Callable[[Progress], None],
        shard: int | None = None,
        min_interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        if shard is not None and shard < 1:
            raise ValueError(f"shard must be >= 1, got {shard}")
        self.total = total
        self.shard = shard or max(1, total // 20)
        self._sink, self._clock, self._interval = sink, clock, min_interval_s
        self._start = self._last_time = clock()
        self._done = self._last_done = 0
        self._lock = threading.Lock()

    def advance(self, n: int = 1) -> None:
        """Record ``n`` more finished items."""
        with self._lock:
            self._set(self._done + n)

    def update(self, done: int) -> None:
        """Record that ``done`` items have finished in all (for callers that count themselves)."""
        with self._lock:
            self._set(done)

    def finish(self) -> None:
        """Emit the final progress unless it was just emitted."""
        with self._lock:
            if self._last_done != self._done or self._done == 0:
                self._emit()

    def _set(self, done: int) -> None:
        self._done = min(done, self.total) if self.total else done
        now = self._clock()
        if (
            self._done - self._last_done >= self.shard
            or self._done == self.total
            or now - self._last_time >= self._interval
        ):
            self._emit(now)

    def _emit(self, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        self._last_done, self._last_time = self._done, now
        self._sink(Progress(self._done, self.total, now - self._start))


def format_bar(label: str, progress: Progress, width: int = 30, rate: bool = True) -> str:
    """One line: ``label [#####.....] done/total  rate/s  eta``; ``width`` is the bar's characters. Without
    ``rate`` the line ends at ``done/total`` (items of very unequal length, whose rate predicts nothing)."""
    share = progress.done / progress.total if progress.total else 1.0
    filled = int(round(share * width))
    bar = f"{label} [{'#' * filled}{'.' * (width - filled)}] {progress.done}/{progress.total}"
    if not rate:
        return bar
    eta = f"  eta {progress.eta_s:.0f} s" if progress.eta_s is not None and progress.done < progress.total else ""
    return f"{bar}  {progress.rate:.1f}/s{eta}"


class StepLine:
    """Which of ``total`` named steps a command is at, drawn on ``out`` (default: stderr) as ``envfactory run``
    draws its bars: on a terminal one line redrawn in place, elsewhere one line per step. Each line is
    :func:`format_bar` of the steps done (without rate), then the step now running; :meth:`close` (leaving the ``with``
    block without an exception) draws the last one with the total time.

    Args:
        label: what the line is about (the command).
        total: number of steps; each call ``line(name)`` starts the next one.
        out: the stream (a stream whose ``isatty()`` is true gets the redrawn line).
        clock: monotonic seconds (injectable for tests).

    Raises:
        ValueError: ``total`` < 1.
    """

    def __init__(
        self, label: str, total: int, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        self.label, self.total, self._clock = label, total, clock
        self.out = out or sys.stderr
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self._start = clock()
        self._done = 0
        self._started = False

    def __call__(self, name: str) -> None:
        """Step ``name`` starts: the steps started before it are done."""
        if self._started:
            self._done = min(self._done + 1, self.total)
        self._started = True
        self._draw(f"  {name}")

    def close(self) -> None:
        """All steps are done: draw the last line (a terminal's line then ends)."""
        self._done = self.total
        self._draw(f"  done in {self._clock() - self._start:.1f} s")
        if self.tty:
            self.out.write("\n")
            self.out.flush()

    def __enter__(self) -> StepLine:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
        elif self.tty and self._started:  # the command failed: end the line, claim nothing done
            self.out.write("\n")
            self.out.flush()

    def _draw(self, what: str) -> None:
        # steps differ widely in length (a report's take from 1 to 30 s): no rate, no eta
        progress = Progress(self._done, self.total, self._clock() - self._start)
        line = format_bar(self.label, progress, rate=False) + what
        self.out.write(f"\r{line}\x1b[K" if self.tty else line + "\n")
        self.out.flush()
