"""What ``envfactory run`` shows on the terminal and what goes to the run's log file.

By default the terminal gets only the progress bars and the final summary: everything the run itself
writes (Dagster's events at INFO and above, library progress bars, trainer loss lines, warnings) goes to
``$ENVFACTORY_HOME/logs/run-<time>-<token>.log``. ``--verbose`` leaves output where it was.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

#: the run config that keeps Dagster's DEBUG events (step starts, asset observations, ...) out of the log;
#: they stay in the instance's event log, which the UI reads
QUIET_LOGGERS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


def log_path(home: Path, token: str) -> Path:
    """``$ENVFACTORY_HOME/logs/run-YYYYmmdd-HHMMSS-<token>.log`` (UTC)."""
    return Path(home) / "logs" / f"run-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{token}.log"


def quiet_config(run_config: dict[str, Any]) -> dict[str, Any]:
    """``run_config`` with Dagster's console logger at INFO unless the config sets loggers itself."""
    return run_config if "loggers" in run_config else {**run_config, **QUIET_LOGGERS}


def _real_fd(stream: Any, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):  # a captured stream (pytest's capsys, an io.StringIO)
        return False


@contextlib.contextmanager
def output_to_log(path: Path) -> Iterator[TextIO]:
    """Send stdout and stderr to the file at ``path`` (appended) while the block runs; yield a stream to
    the terminal (what stderr was) for the progress bars.

    When stdout and stderr are the process's file descriptors 1 and 2, those descriptors are redirected too,
    so output of C extensions and child processes goes to the file as well; they are restored afterwards,
    also when the block raises.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    log = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
    fds = _real_fd(sys.stdout, 1) and _real_fd(sys.stderr, 2)
    saved: tuple[int, int] | None = None
    if fds:
        terminal: TextIO = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
        saved = (os.dup(1), os.dup(2))
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    else:
        terminal = sys.stderr
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            yield terminal
    finally:
        for stream in (sys.stdout, sys.stderr, log):
            with contextlib.suppress(Exception):
                stream.flush()
        if saved is not None:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            terminal.close()
        log.close()
