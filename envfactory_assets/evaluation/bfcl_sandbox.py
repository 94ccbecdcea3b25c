"""Parent side of the BFCL executor's worker process: start it in the OS sandbox, talk to it, kill it.

One :class:`BFCLWorkerProcess` is one ``python -m envfactory_assets.evaluation.bfcl_worker`` process. It
holds the BFCL API instances of one task (model side and ground-truth side); the episode in
:mod:`.bfcl` owns it, sends it one request per call over the project's framing
(:mod:`envfactory_assets.runtime.protocol`), waits at most the call's time limit plus a grace period for
the answer, and kills it (its whole process group) when no answer comes.

The process is started the way :mod:`envfactory_assets.runtime.sandbox` starts environment workers: under
bubblewrap (:func:`envfactory_assets.runtime.isolation.bwrap_command`: read-only interpreter, virtualenv
and package, private ``/tmp``, no network, uid 65534) when :func:`resolve_isolation` says it can start,
else as a plain child process with a cleared environment (the BFCL classes are library code and the
model's calls are data, so the evaluation still runs; the process boundary and the time limit stay).
Inside, the worker sets rlimits and installs the seccomp filter (:mod:`.bfcl_worker`).

This module does not import :mod:`.bfcl` (which imports it).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

from envfactory_assets.runtime import cgroups
from envfactory_assets.runtime.isolation import (
    Isolation,
    bwrap_command,
    launcher_command,
    resolve_isolation,
)
from envfactory_assets.runtime.protocol import (
    ChannelClosed,
    ChannelTimeout,
    FrameChannel,
    ProtocolError,
    encode_frame,
)
from envfactory_assets.runtime.sandbox import kill_process

WORKER_MODULE = "envfactory_assets.evaluation.bfcl_worker"
#: Overrides the default per-call wall-clock limit (seconds) of :class:`ExecutorSettings`.
CALL_TIMEOUT_ENV_VAR = "ENVFACTORY_BFCL_CALL_TIMEOUT_S"
DEFAULT_CALL_TIMEOUT_S = 2.0
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_STDERR_TAIL_BYTES = 4096
_request_ids = itertools.count(1)
_warned: set[str] = set()


@dataclasses.dataclass(frozen=True)
class ExecutorSettings:
    """Limits of the BFCL executor's worker process.

    Attributes:
        call_timeout_s: wall-clock seconds one model call may take. The parent waits this plus
            ``kill_grace_s`` for the answer, then kills the worker, answers the model with an error
            text and restores the task's state in a fresh worker. Every BFCL ground-truth call takes
            well under a millisecond. Default 2 s, or ``$ENVFACTORY_BFCL_CALL_TIMEOUT_S``.
        kill_grace_s: extra seconds for the pipe and the scheduler before the worker is killed.
        startup_timeout_s: seconds a fresh worker may take to start and say it is ready.
        memory_mb: the worker's address-space limit (``RLIMIT_AS``), MiB; with control groups (as for
            environment workers, :mod:`envfactory_assets.runtime.cgroups`) also its group's memory limit,
            shared, tmpfs and kernel memory included.
        max_tasks: with control groups, the most processes and threads the worker may have at once
            (``pids.max``). BFCL's API classes start none.
        cpu_cores: with control groups, the worker's CPU quota in cores, so a spinning call never takes every
            core from the parent.
        test_probe: tests only: the worker accepts a ``probe_read`` request that opens a host path
            from inside the worker (to show what the sandbox lets a call see).
    """

    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    kill_grace_s: float = 0.5
    startup_timeout_s: float = 30.0
    memory_mb: int = 512
    max_tasks: int = 16
    cpu_cores: float = 1.0
    test_probe: bool = False

    def __post_init__(self) -> None:
        for name in ("call_timeout_s", "kill_grace_s", "startup_timeout_s", "memory_mb", "max_tasks", "cpu_cores"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not value > 0 or not math.isfinite(value):
                raise ValueError(f"ExecutorSettings.{name} must be a positive number, got {value!r}")

    @property
    def cpu_seconds(self) -> int:
        """CPU seconds one request may burn before the kernel kills the worker (``RLIMIT_CPU``, re-armed
        per request): the backstop when the parent is gone; the parent's wall clock acts first."""
        return math.ceil(self.call_timeout_s + self.kill_grace_s) + 1

    @classmethod
    def from_env(cls) -> ExecutorSettings:
        """Defaults, with ``call_timeout_s`` from :data:`CALL_TIMEOUT_ENV_VAR` when it is set.

        Raises:
            ValueError: the variable is not a positive number.
        """
        raw = os.environ.get(CALL_TIMEOUT_ENV_VAR, "").strip()
        if not raw:
            return cls()
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{CALL_TIMEOUT_ENV_VAR}={raw!r} is not a number of seconds") from None
        return cls(call_timeout_s=value)


class WorkerLost(Exception):
    """The worker had to be killed (timeout, broken protocol) or died during a request.

    Attributes:
        kind: ``"timeout"``, ``"crash"`` or ``"protocol"``.
        message: what happened, for the error text.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class WorkerStartFailed(RuntimeError):
    """A fresh worker did not start or did not say it was ready."""


class RemoteError(Exception):
    """The worker answered ``ok: false`` (``error`` holds ``type`` and ``message``)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(str(error.get("message", "")))
        self.error = error
        self.type = str(error.get("type", ""))


def _kill(proc: subprocess.Popen, stderr: Any, group: cgroups.WorkerCgroup | None = None) -> None:
    """SIGKILL the worker's process group, reap it, close our ends (stderr too), then kill what is left in its
    control group and remove the group. Safe to call twice."""
    kill_process(proc, stderr)
    if group is not None:
        group.remove()


def isolation_for_bfcl() -> Isolation:
    """The OS layer the workers start in; warns once per reason when bubblewrap cannot start."""
    isolation = resolve_isolation(sys.executable)
    if not isolation.contained and isolation.reason not in _warned:
        _warned.add(isolation.reason)
        warnings.warn(
            f"BFCL executor workers run without the OS sandbox ({isolation.reason}); "
            "the process boundary and the per-call time limit stay",
            RuntimeWarning,
            stacklevel=3,
        )
    return isolation


class BFCLWorkerProcess:
    """One worker process. :meth:`spawn` starts it without waiting; the first :meth:`request` waits for
    its ready message, so many tasks' workers start in parallel.

    Args:
        settings: the limits.
        isolation: from :func:`isolation_for_bfcl` (probed once per process).
    """

    def __init__(self, settings: ExecutorSettings, isolation: Isolation) -> None:
        self.settings = settings
        self.isolation = isolation
        self.proc: subprocess.Popen | None = None
        self.channel: FrameChannel | None = None
        self.seccomp = ""
        self.ready = False
        self._stderr: Any = None
        self._finalizer: weakref.finalize | None = None
        self.cgroup: cgroups.WorkerCgroup | None = None

    @property
    def contained(self) -> bool:
        return self.isolation.contained

    def command(self) -> list[str]:
        """The command line that starts the worker (inside bubblewrap when the OS layer is on)."""
        s = self.settings
        argv = [
            sys.executable,
            "-m",
            WORKER_MODULE,
            "--memory-mb",
            str(s.memory_mb),
            "--cpu-seconds",
            str(s.cpu_seconds),
        ]
        if s.test_probe:
            argv.append("--test-probe")
        procs = self.cgroup.procs_files if self.cgroup is not None else []
        if self.isolation.bwrap is None:
            return launcher_command(argv, procs) if procs else argv
        environment = {
            "PYTHONPATH": _PACKAGE_PARENT,
            "PYTHONHASHSEED": "0",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": "/tmp",
            "PATH": "/nonexistent",
        }
        return bwrap_command(self.isolation.bwrap, argv, environment, procs)

    def spawn(self) -> None:
        """Start the process (does not wait for it), in its own control group when the OS layer is on and
        the kernel offers one (the worker joins it before it runs any Python).

        Raises:
            WorkerStartFailed: the control group could not be made although the kernel offers them.
        """
        if self.proc is not None:
            return
        support = cgroups.detect() if self.isolation.contained else None
        if support is not None and support.active:
            try:
                self.cgroup = cgroups.WorkerCgroup(
                    support,
                    memory_bytes=self.settings.memory_mb * 1024 * 1024,
                    pids_max=self.settings.max_tasks,
                    cpu_cores=self.settings.cpu_cores,
                )
            except OSError as exc:  # offered but failing: not a mode to fall back to silently
                raise WorkerStartFailed(f"cannot create the BFCL worker's control group: {exc}") from None
        if self.isolation.bwrap is None:
            env = {
                "PATH": os.environ.get("PATH", os.defpath),
                "PYTHONPATH": _PACKAGE_PARENT,
                "PYTHONHASHSEED": "0",
                "LC_ALL": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        else:
            env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"}
        # stderr goes to an unlinked file: no drain thread per worker, and a full pipe can never block it
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by _kill
        try:
            proc = subprocess.Popen(  # noqa: S603 - fixed command, no shell
                self.command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=env,
                cwd="/",
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            if self.cgroup is not None:
                self.cgroup.remove()
                self.cgroup = None
            raise
        self.proc = proc
        self._finalizer = weakref.finalize(self, _kill, proc, self._stderr, self.cgroup)
        self.channel = FrameChannel(proc.stdin.fileno(), proc.stdout.fileno())

    def _await_ready(self) -> FrameChannel:
        if self.proc is None:
            self.spawn()
        assert self.channel is not None
        if self.ready:
            return self.channel
        try:
            # counted from now, not from the spawn: a hello that waited in the pipe is still read
            hello = self.channel.receive(time.monotonic() + self.settings.startup_timeout_s)
        except (ChannelTimeout, ChannelClosed, ProtocolError) as exc:
            message = f"BFCL worker failed to start: {exc}"
            if isinstance(exc, ChannelClosed):
                message = self._exit_message("startup")
            self.kill()
            raise WorkerStartFailed(message) from None
        if hello.get("ready") is not True:
            self.kill()
            raise WorkerStartFailed(f"BFCL worker: unexpected first message {hello}")
        self.seccomp = str(hello.get("seccomp", ""))
        self.ready = True
        return self.channel

    def request(self, op: str, fields: dict[str, Any], budget_s: float) -> Any:
        """Send one request; wait for its answer at most ``budget_s + kill_grace_s``.

        Raises:
            RemoteError: the worker answered ``ok: false`` (it keeps running).
            WorkerLost: no answer in time, the worker died, or it broke the protocol (it is killed).
            WorkerStartFailed: the worker did not start.
        """
        channel = self._await_ready()
        request_id = next(_request_ids)
        frame = encode_frame({"id": request_id, "op": op, **fields})
        deadline = time.monotonic() + budget_s + self.settings.kill_grace_s + len(frame) / 20e6
        try:
            channel.send(frame, deadline)
            response = channel.receive(deadline)
        except ChannelTimeout:
            self.kill()
            raise WorkerLost("timeout", f"did not finish within {budget_s:g} s") from None
        except ChannelClosed:
            message = self._exit_message(op)
            self.kill()
            raise WorkerLost("crash", message) from None
        except ProtocolError as exc:
            self.kill()
            raise WorkerLost("protocol", f"broke the protocol ({exc})") from None
        if response.get("id") != request_id:
            self.kill()
            raise WorkerLost("protocol", "answered another request")
        if response.get("ok") is True:
            return response.get("result")
        error = response.get("error")
        raise RemoteError(error if isinstance(error, dict) else {"type": "protocol", "message": str(error)})

    def _exit_message(self, op: str) -> str:
        returncode = None
        if self.proc is not None:
            try:
                returncode = self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                returncode = None
        if returncode is None:
            what = "the worker stopped responding"
        else:
            if self.contained and returncode > 128:  # bubblewrap exits 128 + n when its child dies of signal n
                returncode = 128 - returncode
            if returncode >= 0:
                what = f"the worker exited with status {returncode}"
            else:
                try:
                    what = f"the worker was killed by {signal.Signals(-returncode).name}"
                except ValueError:
                    what = f"the worker was killed by signal {-returncode}"
        tail = self.stderr_tail().strip()[-600:]
        return f"{what} during {op}" + (f"; stderr: {tail}" if tail else "")

    def stderr_tail(self) -> str:
        """The last few KiB the worker wrote to stderr (its stdout goes there too)."""
        stream = self._stderr
        if stream is None or stream.closed:
            return ""
        try:
            size = os.fstat(stream.fileno()).st_size
            return os.pread(stream.fileno(), _STDERR_TAIL_BYTES, max(0, size - _STDERR_TAIL_BYTES)).decode(
                "utf-8", "replace"
            )
        except OSError:
            return ""

    def exited(self) -> bool:
        """Whether the process was started and has exited since (checked without blocking)."""
        return self.proc is not None and self.proc.poll() is not None

    @property
    def pid(self) -> int | None:
        """Process id of the worker (the bubblewrap process when contained), None when not running."""
        return self.proc.pid if self.proc is not None else None

    def kill(self) -> None:
        """Kill the process group and forget the process. Safe to call twice."""
        self.channel = None
        self.ready = False
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self.proc = None
        self._stderr = None
        self.cgroup = None
