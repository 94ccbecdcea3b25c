"""The progress bar of ``envfactory run``: drawn from the progress observations its run logs.

The run is found by a tag the CLI sets; a thread polls the run's event log for asset observations that
carry progress metadata (see :mod:`envfactory_assets.progress_meter`) and draws one bar per asset, and prints a
line when a step finishes (with its wall time), so stages without a progress meter show too.
"""

import sys
import threading
from typing import TextIO

import dagster as dg
from dagster import DagsterEventType

from envfactory_assets.progress_meter import DONE, LABEL, RATE, TOTAL, Progress, format_bar

RUN_TAG = "envfactory/cli_run"
_EVENTS = {
    DagsterEventType.ASSET_OBSERVATION,
    DagsterEventType.STEP_START,
    DagsterEventType.STEP_SUCCESS,
    DagsterEventType.STEP_FAILURE,
}


class RunProgressBar(threading.Thread):
    """Poll the run tagged ``RUN_TAG=token`` every ``poll_s`` seconds and draw its progress on ``out``.

    On a terminal the bar is redrawn in place; otherwise a line is printed at each quarter and at the end.
    Use as a context manager around the materialization; leaving it draws what is left and stops.
    ``steps`` limits the "done in" lines to those step keys (the CLI passes the asset steps, so asset
    checks, which are steps too, do not add lines).
    """

    def __init__(
        self,
        instance: dg.DagsterInstance,
        token: str,
        out: TextIO | None = None,
        poll_s: float = 0.5,
        steps: set[str] | None = None,
    ) -> None:
        super().__init__(daemon=True, name="envfactory-progress")
        self.instance, self.token, self.poll_s = instance, token, poll_s
        self.steps = steps  # steps that get a "done in" line (None: every step); a failed step always does
        self.out = out or sys.stderr
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.lines: list[str] = []  # every line drawn, for tests and the final newline
        self._stopping = threading.Event()
        self._run_id: str | None = None
        self._cursor: str | None = None
        self._quarter: dict[str, int] = {}
        self._open_line = False
        self._step_started: dict[str, float] = {}
        self.step_lines: list[str] = []  # one per finished step

    def __enter__(self) -> "RunProgressBar":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self.join(timeout=30)
        self._poll()
        if self._open_line:
            self.out.write("\n")
            self.out.flush()

    def run(self) -> None:
        while not self._stopping.wait(self.poll_s):
            try:
                self._poll()
            except Exception as exc:  # a bar must never break the run it draws
                self.out.write(f"(progress bar stopped: {type(exc).__name__}: {exc})\n")
                return

    def _poll(self) -> None:
        # ``envfactory run`` may make several runs with the same token (source_resources, then the rest):
        # follow the newest, after reading what is left of the previous one.
        runs = self.instance.get_runs(filters=dg.RunsFilter(tags={RUN_TAG: self.token}), limit=1)
        if runs and runs[0].run_id != self._run_id:
            if self._run_id is not None:
                self._read_observations()
            self._run_id, self._cursor = runs[0].run_id, None
        if self._run_id is not None:
            self._read_observations()

    def _read_observations(self) -> None:
        connection = self.instance.get_records_for_run(self._run_id, cursor=self._cursor, of_type=_EVENTS)
        self._cursor = connection.cursor
        for record in connection.records:
            event = record.event_log_entry.dagster_event
            if event.event_type == DagsterEventType.STEP_START:
                self._step_started[event.step_key] = record.event_log_entry.timestamp
                continue
            if event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
                self._step_done(
                    event.step_key,
                    event.event_type == DagsterEventType.STEP_SUCCESS,
                    record.event_log_entry.timestamp
                    - self._step_started.get(event.step_key, record.event_log_entry.timestamp),
                )
                continue
            observation = event.asset_observation_data.asset_observation
            metadata = observation.metadata
            if DONE in metadata and TOTAL in metadata:
                done, rate = int(metadata[DONE].value), float(metadata[RATE].value) if RATE in metadata else 0.0
                label = str(metadata[LABEL].value) if LABEL in metadata else observation.asset_key.to_user_string()
                self._draw(label, Progress(done, int(metadata[TOTAL].value), done / rate if rate > 0 else 0.0))

    def _step_done(self, step: str, ok: bool, seconds: float) -> None:
        """One line per finished step (stages without a bar show here that they ran, and how long)."""
        if ok and self.steps is not None and step not in self.steps:
            return
        line = f"{step:<22} {'done' if ok else 'FAILED'} in {seconds:.1f} s"
        if self._open_line:
            self.out.write("\n")
            self._open_line = False
        self.out.write(line + "\n")
        self.step_lines.append(line)
        self.out.flush()

    def _draw(self, label: str, progress: Progress) -> None:
        line = format_bar(f"{label:<22}", progress)
        if self.tty:
            if self._open_line and self.lines and not self.lines[-1].startswith(f"{label:<22}"):
                self.out.write("\n")
            self.out.write("\r" + line + "\x1b[K")
            self._open_line = True
        else:
            quarter = 4 * progress.done // max(1, progress.total)
            if quarter <= self._quarter.get(label, -1):
                return
            self._quarter[label] = quarter
            self.out.write(line + "\n")
        self.lines.append(line)
        self.out.flush()
