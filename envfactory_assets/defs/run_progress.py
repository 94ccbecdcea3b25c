"""The progress bar of ``envfactory run``: drawn from the progress observations its run logs.

The run is found by a tag the CLI sets; a thread polls the run's event log for asset observations that
carry progress metadata (see :mod:`envfactory_assets.progress`) and draws one bar per asset.
"""

import sys
import threading
from typing import Optional, TextIO

import dagster as dg
from dagster import DagsterEventType

from envfactory_assets.progress import DONE, RATE, TOTAL, Progress, format_bar

RUN_TAG = "envfactory/cli_run"


class RunProgressBar(threading.Thread):
    """Poll the run tagged ``RUN_TAG=token`` every ``poll_s`` seconds and draw its progress on ``out``.

    On a terminal the bar is redrawn in place; otherwise a line is printed at each quarter and at the end.
    Use as a context manager around the materialization; leaving it draws what is left and stops.
    """

    def __init__(self, instance: dg.DagsterInstance, token: str, out: Optional[TextIO] = None,
                 poll_s: float = 0.5) -> None:
        super().__init__(daemon=True, name="envfactory-progress")
        self.instance, self.token, self.poll_s = instance, token, poll_s
        self.out = out or sys.stderr
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.lines: list[str] = []  # every line drawn, for tests and the final newline
        self._stopping = threading.Event()
        self._run_id: Optional[str] = None
        self._cursor: Optional[str] = None
        self._quarter: dict[str, int] = {}
        self._open_line = False

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
        connection = self.instance.get_records_for_run(
            self._run_id, cursor=self._cursor, of_type=DagsterEventType.ASSET_OBSERVATION)
        self._cursor = connection.cursor
        for record in connection.records:
            observation = record.event_log_entry.dagster_event.asset_observation_data.asset_observation
            metadata = observation.metadata
            if DONE in metadata and TOTAL in metadata:
                done, rate = int(metadata[DONE].value), float(metadata[RATE].value) if RATE in metadata else 0.0
                self._draw(observation.asset_key.to_user_string(),
                           Progress(done, int(metadata[TOTAL].value), done / rate if rate > 0 else 0.0))

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
