"""Parent side of the sandbox: :class:`SandboxWorker` drives one worker process per environment.

Usage::

    with SandboxWorker(SandboxLimits(call_timeout_s=2.0)) as worker:
        worker.load_environment("todo", source)
        episode = worker.open_episode({"todo": saved_state})
        result = worker.call(episode, "create_task", {"title": "write report"})
        # {"ok": True, "output": {...}} or {"ok": False, "error": {"type": ..., "message": ...}}
        snapshot = worker.save(episode)          # {"todo": saved_state}
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import envfactory_assets.runtime.cgroups as cgroups
from envfactory_assets.runtime.bounded_json import JsonBounds, JsonTooLarge
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.runtime.errors import (
    EnvironmentFault,
    EnvironmentRejected,
    EpisodeLost,
    ErrorType,
    SandboxError,
    StateRejected,
    UnknownEnvironment,
    WorkerCrashed,
)
from envfactory_assets.runtime.isolation import bwrap_command, launcher_command, resolve_isolation
from envfactory_assets.runtime.protocol import (
    ChannelClosed,
    ChannelTimeout,
    FrameChannel,
    FrameTooLarge,
    ProtocolError,
    encode_frame,
)

WORKER_MODULE = "envfactory_assets.runtime.worker"
# The directory that contains the `envfactory_assets` package, put on the worker's PYTHONPATH.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_STDERR_TAIL_BYTES = 16 * 1024
#: The fastest the parent reads a worker's stderr, bytes per second: past it the worker blocks on a full pipe
#: (no CPU) instead of making the parent copy its stream and take the interpreter lock at its pace.
_STDERR_DRAIN_BYTES_PER_S = 8 * 1024 * 1024
_TRANSFER_BYTES_PER_S = 20e6  # conservative pipe throughput, added to deadlines for big payloads
#: How often the parent reads a worker's CPU time while a request runs, seconds.
CPU_POLL_S = 0.02
#: CPU a worker may use between its answer to one request and the next request, seconds. Environment code runs
#: only while a request does, and the worker frees a request's objects before it answers, so an honest worker
#: uses next to none there; code that keeps running after its call (a timer's signal handler, whatever it
#: patched into the worker's own loop) is killed past it, before it takes a core for the worker's lifetime.
IDLE_CPU_S = 0.02
#: How often the parent reads the CPU time of a worker that answered within the last second, seconds...
IDLE_POLL_S = 0.02
#: ...and of a worker idle for longer (most are, between rollouts: a slower pace costs the parent less).
IDLE_SLOW_POLL_S = 0.5
_IDLE_RECENT_S = 1.0
#: Most closed episodes a worker may keep until its next request closes them (:meth:`_Child.close_later`); past it
#: they are closed at once, so an idle worker never holds more than these states of closed episodes.
MAX_DEFERRED_CLOSES = 32


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one worker process.

    Attributes:
        memory_mb: address-space limit (``RLIMIT_AS``) of the worker, MiB. The interpreter itself
            needs about 30-60 MiB of it.
        cpu_seconds: CPU seconds any single request may burn: the parent reads the worker's CPU time
            (its control group, else ``/proc``) while the request runs and kills the worker past it
            (``resource_limit``); the worker's soft ``RLIMIT_CPU``, re-armed per request, is the backstop
            if the parent is gone.
        cpu_lifetime_s: the worker's whole CPU budget, seconds: its hard ``RLIMIT_CPU``, which code in it
            cannot raise; the kernel kills the worker there (a fresh one starts on next use).
        cpu_cores: the CPU quota of the worker's control group, in cores: however many threads it runs,
            a worker gets at most this much of the machine.
        max_tasks: most processes and threads in a worker's control group at once (``pids.max``).
        call_timeout_s: wall-clock seconds for one tool call, and for each environment's part of
            ``load_environment``/``open_episode``/``save``/``state_hash``/``fork``.
        kill_grace_s: extra seconds the parent waits past a request's budget before it kills the
            worker (the worker first tries to stop the code itself and answer ``timeout``).
        startup_timeout_s: seconds a fresh worker may take to start and say it is ready.
        hash_seed: ``PYTHONHASHSEED`` of the worker (string hashing, set order). Verification replays
            in a second worker with another seed to catch tools whose results depend on it.
        max_response_mb: the largest response the parent accepts from a worker, MiB, both in bytes and
            in the estimated size of its decoded objects (:mod:`.bounded_json`), so a reading parent
            grows by at most about twice this. A reply that declares more bytes kills the worker
            before anything is read; one whose decoded size would pass it is read but not decoded.
            Both are ``too_large`` errors.
        max_response_depth: the deepest nesting of arrays and objects accepted in a response; a deeper
            one is a ``too_large`` error, not decoded.
    """

    memory_mb: int = 1024
    cpu_seconds: int = 60
    cpu_lifetime_s: int = 3600
    cpu_cores: float = 1.0
    max_tasks: int = 64
    call_timeout_s: float = 5.0
    kill_grace_s: float = 2.0
    startup_timeout_s: float = 30.0
    hash_seed: int = 0
    max_response_mb: int = 64
    max_response_depth: int = 512

    def __post_init__(self) -> None:
        if not 0 <= self.hash_seed <= 4294967295:
            raise ValueError("SandboxLimits.hash_seed must be in [0, 4294967295]")
        for field in dataclasses.fields(self):
            if field.name != "hash_seed" and getattr(self, field.name) <= 0:
                raise ValueError(f"SandboxLimits.{field.name} must be positive")
        if self.cpu_lifetime_s < self.cpu_seconds:
            raise ValueError(
                f"SandboxLimits.cpu_lifetime_s ({self.cpu_lifetime_s}) must be at least cpu_seconds "
                f"({self.cpu_seconds}): it is the worker's whole CPU budget"
            )


class _ChildLost(Exception):
    """The worker had to be killed (or died) during a request; ``limit`` names the limit it went past (the
    :class:`SandboxLimits` field, ``threads_after_call`` or ``idle_cpu``) when that is why."""

    def __init__(self, kind: str, message: str, limit: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.limit = limit


class _RemoteError(Exception):
    """The worker answered a request with ``ok: false``."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message", ""))
        self.error = error
        self.type = str(error.get("type", ""))


class _StderrTail:
    """Drains the worker's stderr on a daemon thread, keeping the last few KiB for error messages."""

    def __init__(self, stream: Any) -> None:
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True, name="sandbox-stderr")
        self._thread.start()

    def _drain(self, stream: Any) -> None:
        try:
            fd = stream.fileno()
            while chunk := os.read(fd, 65536):
                with self._lock:
                    self._tail += chunk
                    del self._tail[:-_STDERR_TAIL_BYTES]
                if len(chunk) > 4096:  # short writes (prints, last words) pass at once
                    time.sleep(len(chunk) / _STDERR_DRAIN_BYTES_PER_S)
        except (OSError, ValueError):
            pass
        finally:
            stream.close()

    def text(self) -> str:
        with self._lock:
            return self._tail.decode("utf-8", "replace")

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class _CpuWatch:
    """Kills a worker once it has used more than ``limit_s`` CPU seconds since the watch started (plus
    ``unseen_s``, what it may have used before; or since ``start``, its CPU time then), reading its CPU time
    every :data:`CPU_POLL_S` on a daemon thread; :attr:`tripped` then names the limit."""

    def __init__(
        self, meter: Any, limit_s: float, kill: Any, unseen_s: float = 0.0, start: float | None = None
    ) -> None:
        self._meter, self._limit_s, self._kill = meter, limit_s, kill
        # counted from the CPU time read when the request was sent, or from now less what it may have used
        self._start = start if start is not None else meter.cpu_seconds() - unseen_s
        self.tripped = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sandbox-cpu-watch")
        self._thread.start()

    def used(self) -> float:
        return self._meter.cpu_seconds() - self._start

    def _run(self) -> None:
        while not self._stop.wait(CPU_POLL_S):
            used = self.used()
            if used > self._limit_s:
                self.tripped = f"CPU limit of {self._limit_s:g} s per call (used {used:.2f} s)"
                self._kill()
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class _IdleWatch:
    """Reads the CPU time of every idle worker of a :class:`SandboxWorker` on one daemon thread (every
    :data:`IDLE_POLL_S` for a worker that answered within the last second, every :data:`IDLE_SLOW_POLL_S` for the
    others) and kills one that used more than :data:`IDLE_CPU_S` since its last answer (:meth:`_Child.check_idle`).
    Holds its owner weakly and ends with it."""

    def __init__(self, owner: SandboxWorker) -> None:
        self._owner = weakref.ref(owner)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sandbox-idle-watch")
        self._thread.start()

    def _run(self) -> None:
        every_slow = max(1, round(IDLE_SLOW_POLL_S / IDLE_POLL_S))
        for tick in itertools.count(1):
            if self._stop.wait(IDLE_POLL_S):
                return
            if not self._check(slow=tick % every_slow == 0):
                return

    def _check(self, *, slow: bool) -> bool:
        """One round over the owner's workers; False once the owner is gone. (A method of its own, so that no
        reference to the owner or its workers outlives the round.)"""
        owner = self._owner()
        if owner is None:
            return False
        children = list(owner._children.values())  # one C-level copy: safe while the owner's thread edits it
        del owner
        now = time.monotonic()
        for child in children:
            child.check_idle(now, slow=slow)
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


def _end_worker(proc: subprocess.Popen, group: cgroups.WorkerCgroup | None) -> None:
    """Kill a worker's process group and everything in its control group, then remove the group."""
    kill_process(proc)
    if group is not None:
        group.remove()


def kill_process(proc: subprocess.Popen, *streams: Any) -> None:
    """SIGKILL a worker's process group, reap it, close our pipe ends and ``streams``. Safe to call twice."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for stream in (proc.stdin, proc.stdout, *streams):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


# What a well-formed result of each operation looks like; anything else means the worker (or code
# running in it) forged the protocol.
_RESULT_KEYS = {
    "load_env": ("tools", list),
    "open_episode": ("episode_id", str),
    "fork": ("episode_id", str),
    "call": ("ok", bool),
}


def _shape_ok(op: str, result: Any, env_id: str) -> bool:
    if op == "state_hashes":
        hashes = result.get("hashes") if isinstance(result, dict) else None
        return (
            isinstance(hashes, dict)
            and set(hashes) == {env_id}
            and isinstance(hashes[env_id], str)
            and len(hashes[env_id]) == 64
        )
    if op == "state_hash":
        return isinstance(result, str)
    if op == "save":
        # each worker holds one environment: a saved state under another id would overwrite that environment's
        # own (a forged final state, which the reward reads) when an episode's parts are merged
        return isinstance(result, dict) and set(result) == {env_id}
    expected = _RESULT_KEYS.get(op)
    if expected is None:
        return True
    key, kind = expected
    return isinstance(result, dict) and isinstance(result.get(key), kind)


def _real_uid(pid: int) -> int | None:
    """The host's real uid of process ``pid`` (from /proc), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _describe_exit(returncode: int | None, limits: SandboxLimits, contained: bool = False) -> str:
    if returncode is None:
        return "worker stopped responding"
    if contained and returncode > 128:  # bubblewrap exits 128 + n when its child dies of signal n
        returncode = 128 - returncode
    if returncode >= 0:
        return f"worker exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    hint = {
        "SIGXCPU": f" (CPU limit of {limits.cpu_seconds} s per request exceeded)",
        "SIGKILL": " (killed externally, by the out-of-memory killer, or at its lifetime CPU budget of "
        f"{limits.cpu_lifetime_s} s)",
        "SIGSEGV": " (segmentation fault, possibly out of memory in native code)",
    }.get(name, "")
    return f"worker killed by {name}{hint}"


class _Pending(NamedTuple):
    """A request sent to a worker whose response is still to be read (a tuple: made on every request)."""

    op: str
    request_id: int
    deadline: float
    budget_s: float
    cpu_start: float | None


class _Child:
    """One worker process: the trust domain of one environment (its id and code).

    Owns the process, its protocol channel and its stderr tail; a request that kills or loses the
    process raises :class:`_ChildLost` and the next request starts a fresh one.
    """

    def __init__(self, owner: SandboxWorker, label: str) -> None:
        self._owner = owner
        self.label = label
        self.proc: subprocess.Popen | None = None
        self.channel: FrameChannel | None = None
        self.stderr: _StderrTail | None = None
        self.finalizer: weakref.finalize | None = None
        self.loaded: set[str] = set()
        self.seccomp = ""
        self.cgroup: cgroups.WorkerCgroup | None = None
        self.meter: cgroups.WorkerCgroup | cgroups.ProcessTreeMeter | None = None
        self.baseline_tasks = 0
        self.closes: list[str] = []  # episodes to close with the next request (close_later)
        # (monotonic time, CPU seconds) at the worker's last answer while it waits for a request, else None; read
        # and changed under idle_lock, which the idle watch holds while it reads the meter and kills
        self.idle_lock = threading.Lock()
        self.idle_since: tuple[float, float] | None = None
        self.idle_tripped = ""

    @property
    def limits(self) -> SandboxLimits:
        return self._owner.limits

    def request(self, op: str, fields: dict[str, Any], budget_s: float) -> Any:
        """Send one request and wait for its response, at most ``budget_s + kill_grace_s`` (+ transfer).

        Raises:
            _RemoteError: the worker answered ``ok: false``.
            _ChildLost: the worker died, hung or broke the protocol (it has been killed).
            WorkerCrashed: a fresh worker could not be started.
        """
        return self.finish(self.start(op, fields, budget_s))

    def start(self, op: str, fields: dict[str, Any], budget_s: float, *, read_cpu: bool = False) -> _Pending:
        """Send one request without waiting for its response (:meth:`finish` reads it). ``read_cpu`` reads the
        worker's CPU time first, for a response that may be read later than one poll interval after.

        Raises:
            _ChildLost, WorkerCrashed: as :meth:`request`.
        """
        request_id = next(self._owner._request_ids)
        message = {"id": request_id, "op": op, "timeout_s": budget_s, **fields}
        if self.closes:  # episodes closed since the last request: the worker closes them before this one
            message["close"] = self.closes
        frame = encode_frame(message)
        self.closes = []
        channel = self.ensure_started()
        with self.idle_lock:  # from here on the worker's CPU is this request's
            self.idle_since = None
        if self.idle_tripped:
            self.kill()
            self._raise_if_limit(op, None)
        deadline = time.monotonic() + budget_s + self.limits.kill_grace_s + len(frame) / _TRANSFER_BYTES_PER_S
        cpu_start = self.meter.cpu_seconds() if read_cpu and self.meter is not None else None
        pending = _Pending(op, request_id, deadline, budget_s, cpu_start)
        try:
            channel.send(frame, deadline)
        except (ChannelTimeout, ChannelClosed, ProtocolError) as exc:
            self._failed(pending, exc, None)
        return pending

    def close_later(self, episode_id: str) -> None:
        """Close ``episode_id`` with this worker's next request (its ``close`` field: the worker closes those
        episodes first), so a rollout does not wait for a close of its own; past :data:`MAX_DEFERRED_CLOSES` of
        them, now. A close that fails (the worker is gone) needs nothing more: the episode went with the worker."""
        self.closes.append(episode_id)
        if len(self.closes) >= MAX_DEFERRED_CLOSES:
            try:
                self.request("close", {"episode_id": episode_id}, self.limits.call_timeout_s)
            except (_RemoteError, _ChildLost, WorkerCrashed):
                pass

    def finish(self, pending: _Pending) -> Any:
        """Wait for the response to a request :meth:`start` sent and check it (raises as :meth:`request`)."""
        op = pending.op
        channel = self.channel
        if channel is None:
            raise _ChildLost(str(ErrorType.CRASH), f"{op}: the worker was stopped before it answered")
        watch: _CpuWatch | None = None
        try:
            # Most requests are answered within one poll interval: the CPU watch (a thread) starts only for
            # those that are not, counting from the CPU time read when the request was sent, or else counting
            # the interval as fully used by every core of the machine.
            if self.meter is not None and not channel.wait_readable(CPU_POLL_S):
                if pending.cpu_start is not None:
                    watch = _CpuWatch(self.meter, self.limits.cpu_seconds, self.kill, start=pending.cpu_start)
                else:
                    unseen_s = CPU_POLL_S * (os.cpu_count() or 1)
                    watch = _CpuWatch(self.meter, self.limits.cpu_seconds, self.kill, unseen_s)
            response = channel.receive(pending.deadline)
        except (ChannelTimeout, ChannelClosed, ProtocolError, JsonTooLarge) as exc:
            if watch is not None:
                watch.stop()
            self._failed(pending, exc, watch)
        if watch is not None:
            watch.stop()
        cpu_now: float | None = None
        left = 0
        if self.meter is not None:
            cpu_now, tasks_now = self.meter.usage()
            left = tasks_now - self.baseline_tasks
        # The kernel's kill counters are read only when the worker may be gone: a process holding exactly the
        # tasks it started with was not killed (an out-of-memory kill ends every thread of the process; a
        # refused task is a kill only for a worker that is gone). A kill that lands after the response was
        # read is reported by the next request, which finds the channel closed.
        if watch is not None or left != 0:
            self._raise_if_limit(op, watch)
        if left > 0:  # environment code runs only while a request does: nothing may run on after it
            self.discard()
            raise _ChildLost(
                str(ErrorType.RESOURCE_LIMIT),
                f"{op} left {left} thread(s) running after it returned; worker killed",
                "threads_after_call",
            )
        self._start_idle(cpu_now)
        if response.get("id") != pending.request_id:
            self.discard()
            raise _ChildLost(str(ErrorType.PROTOCOL), f"{op}: response id mismatch; worker killed")
        if response.get("ok") is True:
            result = response.get("result")
            if not _shape_ok(op, result, self.label):
                self.discard()
                raise _ChildLost(str(ErrorType.PROTOCOL), f"{op}: malformed result from the worker; worker killed")
            return result
        error = response.get("error")
        raise _RemoteError(error if isinstance(error, dict) else {"type": "protocol", "message": str(error)})

    def _failed(self, pending: _Pending, exc: BaseException, watch: _CpuWatch | None) -> NoReturn:
        """Raise what a failed send or receive means (the worker is killed unless it stayed in step)."""
        op, budget_s = pending.op, pending.budget_s
        self._raise_if_limit(op, watch)
        if isinstance(exc, ChannelTimeout):
            self.discard()
            raise _ChildLost(
                str(ErrorType.TIMEOUT), f"{op} did not finish within {budget_s:g} s; worker killed"
            ) from None
        if isinstance(exc, ChannelClosed):
            raise _ChildLost(str(ErrorType.CRASH), self._crash_message(op)) from None
        if isinstance(exc, FrameTooLarge):
            self.discard()
            raise _ChildLost(str(ErrorType.TOO_LARGE), f"{op}: the reply is too large ({exc}); worker killed") from None
        if isinstance(exc, JsonTooLarge):
            # The whole frame was consumed, so the worker stays in step and keeps its other episodes.
            self._start_idle()
            error = {
                "type": str(ErrorType.TOO_LARGE),
                "env_id": self.label,
                "limit": exc.limit,
                "message": f"{op}: {exc}; the reply was not decoded",
            }
            if op == "call":
                error["episode_lost"] = True  # the call's effect on the state cannot be seen
            raise _RemoteError(error) from None
        self.discard()
        raise _ChildLost(str(ErrorType.PROTOCOL), f"{op}: {exc}; worker killed") from None

    def _start_idle(self, cpu_now: float | None = None) -> None:
        """The worker answered and waits for its next request: from now on the idle watch counts its CPU
        (from ``cpu_now``, its CPU time read at the answer, or read here)."""
        meter = self.meter
        if meter is not None:
            with self.idle_lock:
                self.idle_since = (time.monotonic(), meter.cpu_seconds() if cpu_now is None else cpu_now)

    def check_idle(self, now: float, *, slow: bool) -> None:
        """Kill the worker when it used more than :data:`IDLE_CPU_S` of CPU since its last answer (called by the
        idle watch; ``slow``: also a worker idle for longer than a second). The next request reports it."""
        with self.idle_lock:
            since, meter = self.idle_since, self.meter
            if since is None or meter is None or self.idle_tripped:
                return
            # a /proc walk (no control group) costs ~0.3 ms: such a worker is read at the slow pace only
            if not slow and (now - since[0] > _IDLE_RECENT_S or not isinstance(meter, cgroups.WorkerCgroup)):
                return
            used = meter.cpu_seconds() - since[1]
            if used > IDLE_CPU_S:
                self.idle_tripped = (
                    f"CPU limit between calls ({IDLE_CPU_S * 1000:g} ms after its last answer; used {used:.2f} s)"
                )
                self.kill()

    def kill(self) -> None:
        """SIGKILL the worker and everything in its control group (any thread; the request in flight then
        sees the channel close)."""
        if self.cgroup is not None:
            self.cgroup.kill()
        proc = self.proc
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _raise_if_limit(self, op: str, watch: _CpuWatch | None) -> None:
        """Raise ``resource_limit`` when the CPU watch killed the worker or its group hit a kernel limit."""
        if watch is not None:
            reason, limit = watch.tripped, "cpu_seconds"
        else:
            reason, limit = self.idle_tripped, "idle_cpu"
        if not reason and self.cgroup is not None:
            if self.cgroup.oom_killed():
                limit = "memory_mb"
                reason = (
                    f"memory limit of {self.limits.memory_mb} MiB (control group: heap, shared memory, "
                    "tmpfs and kernel memory together)"
                )
            # a refused thread is an error the code saw, not a kill: only a worker that is gone was stopped by it
            elif (self.proc is None or self.proc.poll() is not None) and self.cgroup.tasks_refused():
                reason, limit = f"task limit of {self.limits.max_tasks} processes and threads", "max_tasks"
        if reason:
            self.discard()
            raise _ChildLost(str(ErrorType.RESOURCE_LIMIT), f"{op}: worker killed at its {reason}", limit)

    def _crash_message(self, op: str) -> str:
        proc = self.proc
        returncode = None
        if proc is not None:
            try:
                returncode = proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                returncode = None
        if self.stderr is not None:
            self.stderr.join(0.5)  # let the drain thread pick up the last words
        tail = self.stderr_tail().strip()[-1500:]
        self.discard()
        message = f"{_describe_exit(returncode, self.limits, self._owner.isolation.contained)} during {op}"
        return f"{message}; stderr tail:\n{tail}" if tail else message

    def stderr_tail(self) -> str:
        return self.stderr.text() if self.stderr is not None else ""

    def command(self) -> list[str]:
        """The command line that starts this worker (inside bubblewrap when the OS layer is on)."""
        owner = self._owner
        argv = [
            owner._python,
            "-m",
            WORKER_MODULE,
            "--memory-mb",
            str(self.limits.memory_mb),
            "--cpu-seconds",
            str(self.limits.cpu_seconds),
            "--cpu-lifetime-seconds",
            str(self.limits.cpu_lifetime_s),
            "--python-guards",
            "on" if owner.python_guards else "off",
            "--seccomp",
            "on" if owner.isolation.seccomp else "off",
            f"--domain={self.label}",
        ]
        environment = {
            "PYTHONPATH": _PACKAGE_PARENT,
            "PYTHONHASHSEED": str(self.limits.hash_seed),
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        procs = self.cgroup.procs_files if self.cgroup is not None else []
        if owner.isolation.bwrap is None:
            return launcher_command(argv, procs) if procs else argv
        return bwrap_command(
            owner.isolation.bwrap, argv, {**environment, "HOME": "/tmp", "PATH": "/nonexistent"}, procs
        )

    def ensure_started(self) -> FrameChannel:
        if self.channel is not None:
            return self.channel
        owner = self._owner
        owner._make_room(self)
        support = owner.cgroup_support()
        if support.active:
            try:
                self.cgroup = cgroups.WorkerCgroup(
                    support,
                    memory_bytes=self.limits.memory_mb * 1024 * 1024,
                    pids_max=self.limits.max_tasks,
                    cpu_cores=self.limits.cpu_cores,
                )
            except OSError as exc:  # the probe made one: failing now is not a mode to fall back to silently
                raise WorkerCrashed("startup", f"cannot create the worker's control group: {exc}") from None
        if owner.isolation.bwrap is None:
            env = {
                "PATH": os.environ.get("PATH", os.defpath),
                "PYTHONPATH": _PACKAGE_PARENT,
                "PYTHONHASHSEED": str(self.limits.hash_seed),
                "LC_ALL": "C.UTF-8",
            }
        else:
            env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"}
        proc = subprocess.Popen(  # noqa: S603 - fixed command, no shell
            self.command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/" if owner.isolation.bwrap is not None else _PACKAGE_PARENT,
            start_new_session=True,
            close_fds=True,
        )
        owner._starts += 1
        self.proc = proc
        self.stderr = _StderrTail(proc.stderr)
        self.finalizer = weakref.finalize(self, _end_worker, proc, self.cgroup)
        max_bytes = self.limits.max_response_mb * 1024 * 1024
        bounds = JsonBounds(max_bytes=max_bytes, max_decoded_bytes=max_bytes, max_depth=self.limits.max_response_depth)
        channel = FrameChannel(proc.stdin.fileno(), proc.stdout.fileno(), max_frame_bytes=max_bytes, bounds=bounds)
        try:
            hello = channel.receive(time.monotonic() + self.limits.startup_timeout_s)
        except (ChannelTimeout, ChannelClosed, ProtocolError) as exc:
            message = f"worker failed to start: {exc}"
            if isinstance(exc, ChannelClosed):
                message = self._crash_message("startup")
            self.discard()
            raise WorkerCrashed("startup", message) from None
        if hello.get("ready") is not True:
            self.discard()
            raise WorkerCrashed("startup", f"unexpected first message from worker: {hello}")
        if owner.isolation.contained and os.geteuid() == 0 and _real_uid(proc.pid) == 0:
            self.discard()  # fail closed: the sandbox user must never be host root
            raise WorkerCrashed("startup", "the sandbox runs as host uid 0; refusing to use it")
        self.seccomp = str(hello.get("seccomp", ""))
        # The parent's CPU and left-thread checks belong to the OS layer: off with it (the negative control).
        if self.cgroup is not None or not owner.isolation.seccomp:
            self.meter = self.cgroup
        else:
            self.meter = cgroups.ProcessTreeMeter(proc.pid)
        self.baseline_tasks = self.meter.tasks() if self.meter is not None else 0
        if self.meter is not None:
            owner._watch_idle()
        self.channel = channel
        return channel

    def discard(self) -> None:
        """Kill the process (if any) and forget everything that lived in it."""
        self.channel = None
        self.closes = []
        self.loaded.clear()
        with self.idle_lock:  # the idle watch reads the meter under this lock: never a closed one
            self.meter = None
            self.idle_since = None
            self.idle_tripped = ""
        group, self.cgroup = self.cgroup, None
        if self.proc is not None:
            self.proc = None
            if self.finalizer is not None:
                self.finalizer()  # kills the process group and its control group, reaps it, closes the pipes
                self.finalizer = None
            self._owner._child_lost(self)
        elif group is not None:  # made for a start that failed before the process existed
            group.remove()


class SandboxWorker:
    """Sandboxed worker processes holding many episodes of many environments.

    Each environment (a trust domain: its id and its code) gets its own child process
    (``python -m envfactory_assets.runtime.worker``), started lazily on first use inside the OS
    sandbox (:mod:`.isolation`: bubblewrap namespaces, read-only view of the interpreter, the
    virtualenv and the package, a private tmpfs) with a minimal environment
    (``PYTHONHASHSEED`` from the limits). Code of two environments never shares an interpreter,
    so one environment cannot change another's results; an episode over several environments has
    one sub-episode in each environment's child, and this object routes each tool call to its
    owner.

    Failure model: a tool call that exceeds ``call_timeout_s`` is first stopped inside the worker
    (its episode is discarded, other episodes survive); if the code cannot be stopped (it swallows
    the alarm, or loops in native code), or the worker crashes (segfault, CPU limit, killed), or it
    breaks the protocol, that environment's child is killed and a fresh one is started lazily on
    the next request. **A restart loses every open episode that involves that environment** (they
    raise :class:`EpisodeLost` afterwards); loaded environments are *not* lost: their sources are
    kept here and re-loaded into the fresh child on demand. No method blocks longer than its time
    budget plus ``kill_grace_s`` per environment involved.

    Methods may be called from several threads, but an internal lock runs one request at a time;
    use several workers (one per thread or process) for parallelism.

    Args:
        limits: resource limits; defaults to :class:`SandboxLimits()`.
        python: interpreter for the children; defaults to ``sys.executable``.
        python_guards: keep the static check and restricted builtins inside the worker (default).
            ``False`` exists only to prove that the OS layer alone contains hostile code.
        max_processes: how many worker processes may run at once (~23 MiB resident each, measured); the
            least recently used one without an open episode is stopped to start another. The default
            holds every environment of a default run (95) at once: trajectory synthesis touches them in
            random order, and a lower cap restarts a worker for most chains.

    Raises:
        ValueError: ``max_processes`` < 1.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        python: str | None = None,
        python_guards: bool = True,
        max_processes: int = 128,
    ) -> None:
        if max_processes < 1:
            raise ValueError(f"max_processes must be >= 1, got {max_processes}")
        self.max_processes = max_processes
        self.limits = limits or SandboxLimits()
        self._python = python or sys.executable
        self.isolation = resolve_isolation(self._python)
        self.python_guards = python_guards
        self._lock = threading.RLock()
        self._request_ids = itertools.count(1)
        self._episode_ids = itertools.count(1)
        self._children: dict[str, _Child] = {}
        self._sources: dict[str, tuple[str, tuple[str, ...] | None]] = {}
        self._tools: dict[str, tuple[str, ...]] = {}
        self._episodes: dict[str, dict[str, str]] = {}
        self._last_child: _Child | None = None
        self._pinned: set[str] = set()  # environments of an episode being opened: never stopped
        self._starts = 0
        self._closed = False
        self._deferred: list[_Child] | None = None  # children lost while requests to others are in flight
        self._idle_watch: _IdleWatch | None = None

    def _watch_idle(self) -> None:
        """Start the idle watch (:class:`_IdleWatch`) with the first worker that has a CPU meter."""
        if self._idle_watch is None:
            self._idle_watch = _IdleWatch(self)

    # -- context manager and introspection -----------------------------------------------------
    def __enter__(self) -> SandboxWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def contained(self) -> bool:
        """Whether this worker's children run inside the OS sandbox (bubblewrap)."""
        return self.isolation.contained

    @property
    def pid(self) -> int | None:
        """Process id of the child used last (the bubblewrap process when contained), or None when
        it is not running."""
        child = self._last_child
        return child.proc.pid if child is not None and child.proc is not None else None

    @property
    def pids(self) -> dict[str, int]:
        """``{env_id: process id}`` of every running child."""
        return {env_id: c.proc.pid for env_id, c in self._children.items() if c.proc is not None}

    @property
    def starts(self) -> int:
        """How many child processes this worker has started (all environments, restarts included)."""
        return self._starts

    @property
    def open_episodes(self) -> tuple[str, ...]:
        """Ids of the open episodes."""
        return tuple(self._episodes)

    def is_open(self, episode_id: str) -> bool:
        """Whether ``episode_id`` is open (not closed, discarded, or lost in a restart)."""
        return episode_id in self._episodes

    def stderr_tail(self, env_id: str | None = None) -> str:
        """The last ~16 KiB a child wrote to stderr, including user prints: the child of ``env_id``,
        or the one used last."""
        child = self._children.get(env_id) if env_id is not None else self._last_child
        return child.stderr_tail() if child is not None else ""

    def cgroup_support(self) -> cgroups.CgroupSupport:
        """Whether this worker's children get control groups: as :func:`.cgroups.detect` says, except when the
        OS layer is switched off as a whole (:data:`.isolation.OS_LAYER_ENV_VAR`, the negative control), which
        switches them off too."""
        if not self.isolation.seccomp:
            return cgroups.CgroupSupport("none", f"the OS layer is switched off ({self.isolation.reason})")
        return cgroups.detect()

    @property
    def limits_mode(self) -> str:
        """What bounds a worker's memory, CPU and tasks here: control groups (v1/v2) with rlimits and seccomp,
        or rlimits and seccomp alone (with the reason)."""
        return self.cgroup_support().describe()

    def cpu_seconds(self, env_id: str) -> float | None:
        """CPU seconds the running child of ``env_id`` has used (its control group, else its process tree),
        or None when it is not running."""
        child = self._children.get(env_id)
        meter = child.meter if child is not None else None
        return meter.cpu_seconds() if meter is not None else None

    def seccomp_status(self, env_id: str) -> str:
        """``"on"`` when the child of ``env_id`` installed its seccomp filter, else why not."""
        child = self._children.get(env_id)
        return child.seccomp if child is not None else ""

    def held_episodes(self, env_id: str) -> int | None:
        """How many episodes the running child of ``env_id`` holds now, as it says (one request; it closes what was
        closed since its last one first), or None when it is not running.

        Raises:
            WorkerCrashed: the child died or broke the protocol (it was discarded).
        """
        with self._lock:
            self._check_open()
            if not self._running(env_id):
                return None
            try:
                result = self._children[env_id].request("ping", {}, self.limits.call_timeout_s)
            except _RemoteError as exc:
                raise SandboxError(f"worker error: {exc.error}") from None
            except _ChildLost as exc:
                raise WorkerCrashed(exc.kind, exc.message) from None
            return int(result["episodes"]) if isinstance(result, dict) else None

    # -- operations ---------------------------------------------------------------------------
    def load_environment(
        self, env_id: str, source: str, tool_names: Sequence[str] | None = None, *, origin: str = "untrusted"
    ) -> list[str]:
        """Check, compile and trial-run an environment module in its own worker process.

        Loading another version of ``env_id`` (different source) replaces the process: the new code
        is a new trust domain, and episodes of the old version are lost. A load that fails ends the
        process too (the module may have run and patched what it could reach before failing), so the
        next load, of this id or any other, starts in a fresh one.

        Args:
            env_id: the environment's id (1-200 characters).
            source: the module's code, following the contract in ``docs/design.md``.
            tool_names: the tools to expose (every one must be ``def name(state, ...)``); by default
                every public module-level function whose first parameter is ``state``, except
                ``load`` and ``save``.
            origin: where the code comes from: ``"template"`` (the offline builder's templates) may
                run without the OS sandbox, with a warning, when bubblewrap cannot start; any other
                origin (``"model"``, ``"untrusted"``) is refused then unless
                :data:`.isolation.UNSAFE_ENV_VAR` is set.

        Returns:
            The exposed tool names.

        Raises:
            EnvironmentRejected: static-check violations, import-time failure, contract violations,
                or the code crashed/hung the worker (which was then restarted).
            IsolationUnavailable: the OS sandbox cannot start and ``origin`` may not run without it.
            WorkerCrashed: the worker could not be started.
        """
        if not isinstance(env_id, str) or not 1 <= len(env_id) <= 200 or "\0" in env_id:
            raise ValueError(f"env_id must be a string of 1-200 characters without NUL, got {env_id!r:.80}")
        if not isinstance(source, str):
            raise TypeError(f"source of {env_id!r} must be a string, got {type(source).__name__}")
        tools = tuple(tool_names) if tool_names is not None else None
        with self._lock:
            self._check_open()
            self.isolation.check_may_run(origin)
            previous = self._sources.get(env_id)
            if previous is not None and previous != (source, tools) and env_id in self._children:
                self._children.pop(env_id).discard()
            child = self._child(env_id)
            result = self._load_into_child(child, env_id, source, tools)
            self._sources[env_id] = (source, tools)
            self._tools[env_id] = tuple(result["tools"])
            return list(result["tools"])

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("SandboxWorker is closed")

    def _child(self, env_id: str) -> _Child:
        child = self._children.pop(env_id, None)
        if child is None:
            child = _Child(self, env_id)
        self._children[env_id] = child  # most recently used last
        self._last_child = child
        return child

    def _make_room(self, starting: _Child) -> None:
        """Before ``starting`` starts a process: stop the least recently used idle workers (no part of
        an open episode) while :attr:`max_processes` are running. Their sources stay here, so they
        start again on demand; workers with open episodes are never stopped (the cap may be exceeded)."""
        running = [c for c in self._children.values() if c.proc is not None and c is not starting]
        busy = {env_id for parts in self._episodes.values() for env_id in parts} | self._pinned
        for child in running:
            if len(running) < self.max_processes:
                return
            if child.label not in busy:
                child.discard()
                running.remove(child)

    def _load_into_child(
        self, child: _Child, env_id: str, source: str, tools: tuple[str, ...] | None
    ) -> dict[str, Any]:
        """Load ``source`` into ``child``; a load that fails ends the child's process.

        The module may have run (and patched whatever it could reach) before it failed, and the process is
        its trust domain: the next load, of this id or any other code, starts in a fresh one.
        """
        fields = {"env_id": env_id, "source": source, "tool_names": list(tools) if tools is not None else None}
        try:
            result = child.request("load_env", fields, self.limits.call_timeout_s)
        except _RemoteError as exc:
            child.discard()
            if exc.type == "environment_rejected":
                raise EnvironmentRejected(env_id, list(exc.error.get("violations") or [str(exc)])) from None
            if exc.type in (ErrorType.TIMEOUT, ErrorType.MEMORY, ErrorType.TOO_LARGE):
                raise EnvironmentRejected(env_id, [f"{exc.type}: {exc}"]) from None
            raise SandboxError(f"load_environment({env_id!r}) failed: {exc.error}") from None
        except _ChildLost as exc:
            raise EnvironmentRejected(env_id, [f"worker {exc.kind} while loading: {exc.message}"]) from None
        except BaseException:
            child.discard()
            raise
        child.loaded.add(env_id)
        return result

    def _loaded_child(self, env_id: str) -> _Child:
        if env_id not in self._sources:
            raise UnknownEnvironment(env_id)
        child = self._child(env_id)
        if env_id not in child.loaded:
            source, tools = self._sources[env_id]
            self._load_into_child(child, env_id, source, tools)
        return child

    def _child_lost(self, child: _Child) -> None:
        """Every episode with a part in ``child`` is gone; close their parts in the other children (the
        lost child has no process any more, so :meth:`_close_parts` skips it). Deferred while requests to
        several children are in flight (:meth:`_fan_out`): a close sent meanwhile would cross their answers."""
        if self._deferred is not None:
            self._deferred.append(child)
            return
        for episode_id in [ep for ep, parts in self._episodes.items() if child.label in parts]:
            self._close_parts(self._episodes.pop(episode_id))

    def open_episode(self, states: Mapping[str, Any], *, shared: bool = False) -> str:
        """Open an episode: each environment's ``load`` receives its saved state.

        Args:
            states: ``{env_id: saved_state}`` for one or more loaded environments.
            shared: open a task's base for many rollouts: while it is never called, each :meth:`fork` of it
                starts from its state as loaded (shared copy-on-write, O(1)), as opening each rollout from
                ``states`` would; by default a fork starts from ``load(save(state))``.

        Returns:
            The new episode id.

        Raises:
            StateRejected: an environment's ``load`` refused its state (names the env and reason).
            UnknownEnvironment: an env id was never loaded.
            WorkerCrashed: a worker died or hung (it was restarted; its episodes are lost).
            TypeError: a state is not JSON-serializable.
        """
        states = dict(states)
        if not states:
            raise ValueError("states must name at least one environment")
        with self._lock:
            self._check_open()
            for env_id in states:
                if env_id not in self._sources:
                    raise UnknownEnvironment(env_id)
            parts: dict[str, str] = {}
            self._pinned = set(states)
            try:
                for env_id, state in states.items():
                    child = self._loaded_child(env_id)
                    try:
                        fields = {"states": {env_id: state}, "shared": shared}
                        result = child.request("open_episode", fields, self.limits.call_timeout_s)
                    except _RemoteError as exc:
                        self._raise_remote(exc)
                    except _ChildLost as exc:
                        raise WorkerCrashed(exc.kind, exc.message) from None
                    parts[env_id] = result["episode_id"]
            except BaseException:
                self._close_parts(parts)
                raise
            finally:
                self._pinned = set()
            episode_id = f"ep{next(self._episode_ids)}"
            self._episodes[episode_id] = parts
            return episode_id

    def _close_parts(self, parts: Mapping[str, str], *, later: bool = False) -> None:
        """Close an episode's parts in their running workers (a worker that is not running holds nothing of it):
        now, waiting for the answers, or ``later``, with each worker's next request (:meth:`_Child.close_later`).
        An episode that ended in an error is closed now: its worker may be out of step, and the close finds out."""
        running = {env_id: sub for env_id, sub in parts.items() if self._running(env_id)}
        if later:
            for env_id, sub in running.items():
                self._children[env_id].close_later(sub)
            return
        self._fan_out("close", [(env_id, {"episode_id": sub}) for env_id, sub in running.items()], touch=False)

    def _running(self, env_id: str) -> bool:
        child = self._children.get(env_id)
        return child is not None and child.proc is not None

    def _fan_out(
        self, op: str, requests: list[tuple[str, dict[str, Any]]], *, touch: bool = True
    ) -> list[tuple[str, Any]]:
        """Send ``op`` to each environment's worker first, then read the answers in the same order: the
        workers run at once, and the parent waits about as long as for the slowest. ``touch`` counts the
        workers as used (the least recently used idle one is stopped first, :meth:`_make_room`).

        Returns:
            ``[(env_id, result or the _RemoteError / _ChildLost / WorkerCrashed it raised)]``, in order.
        """
        outer = self._deferred
        if outer is None:
            self._deferred = []
        try:
            sent: list[tuple[str, _Child, Any]] = []
            for env_id, fields in requests:
                child = self._child(env_id) if touch else self._children[env_id]
                try:
                    pending = child.start(op, fields, self.limits.call_timeout_s, read_cpu=len(requests) > 1)
                except (_RemoteError, _ChildLost, WorkerCrashed) as exc:
                    sent.append((env_id, child, exc))
                else:
                    sent.append((env_id, child, pending))
            answers: list[tuple[str, Any]] = []
            for env_id, child, pending in sent:
                if isinstance(pending, BaseException):
                    answers.append((env_id, pending))
                    continue
                try:
                    answers.append((env_id, child.finish(pending)))
                except (_RemoteError, _ChildLost) as exc:
                    answers.append((env_id, exc))
            return answers
        finally:
            if outer is None:
                lost, self._deferred = self._deferred, None
                for child in lost:
                    self._child_lost(child)

    def _route(self, parts: Mapping[str, str], tool: str) -> tuple[str, str] | dict[str, Any]:
        """``(env_id, tool name)`` for a call in an episode over ``parts``, or an error result."""
        owners = [env_id for env_id in parts if tool in self._tools.get(env_id, ())]
        if len(owners) == 1:
            return owners[0], tool
        if len(owners) > 1:
            return {
                "ok": False,
                "error": {
                    "type": str(ErrorType.AMBIGUOUS_TOOL),
                    "message": f"tool {tool!r} exists in {sorted(owners)}; call it as 'env_id.{tool}'",
                },
            }
        env_id, _, name = tool.rpartition(".")
        if env_id in parts and name in self._tools.get(env_id, ()):
            return env_id, name
        return {
            "ok": False,
            "error": {"type": str(ErrorType.UNKNOWN_TOOL), "message": f"no tool named {tool!r} in this episode"},
        }

    def call(self, episode_id: str, tool: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Call one tool in an episode.

        Args:
            episode_id: an open episode.
            tool: the tool name, or ``"env_id.tool"`` when several of the episode's environments
                define that name.
            arguments: the keyword arguments (a JSON object); ``None`` means ``{}``.

        Returns:
            ``{"ok": True, "output": <JSON value>}`` or ``{"ok": False, "error": {"type": ...,
            "message": ..., ...}}``; the types are listed in :class:`.errors.ErrorType`. When
            ``error["episode_lost"]`` is true the episode is gone (timeout, memory, crash); after a
            ``crash``/``protocol`` error or a timeout the worker could not stop by itself, every
            episode involving that environment is gone.

        Raises:
            EpisodeLost: the episode is not open.
            TypeError: ``arguments`` is not JSON-serializable.
        """
        with self._lock:
            parts = self._episodes.get(episode_id)
            if parts is None:
                raise EpisodeLost(episode_id)
            routed = self._route(parts, tool)
            if isinstance(routed, dict):
                return routed
            env_id, name = routed
            child = self._child(env_id)
            fields = {"episode_id": parts[env_id], "tool": name, "arguments": dict(arguments or {})}
            try:
                result = child.request("call", fields, self.limits.call_timeout_s)
            except _RemoteError as exc:
                if exc.type == "unknown_episode":
                    self._drop(episode_id)
                    raise EpisodeLost(episode_id) from None
                result = {"ok": False, "error": exc.error}
            except _ChildLost as exc:
                message = (
                    f"{exc.message}; all open episodes of environment {env_id!r} were lost "
                    "(its worker restarts on next use)"
                )
                error = {"type": exc.kind, "message": message, "episode_lost": True}
                if exc.limit:
                    error["limit"] = exc.limit
                return {"ok": False, "error": error}
            if not result.get("ok") and result.get("error", {}).get("episode_lost"):
                self._drop(episode_id)
            return result

    def _drop(self, episode_id: str, *, later: bool = False) -> None:
        parts = self._episodes.pop(episode_id, None)
        if parts:
            self._close_parts(parts, later=later)

    def save(self, episode_id: str) -> dict[str, Any]:
        """The episode's saved states, ``{env_id: {"tables": ..., "meta": ...}}``.

        Raises:
            EpisodeLost, EnvironmentFault (``save`` failed or returned non-JSON), WorkerCrashed.
        """
        with self._lock:
            merged: dict[str, Any] = {}
            for _env_id, result in self._each_part("save", episode_id):
                merged.update(result)
            return merged

    def state_hash(self, episode_id: str) -> str:
        """sha256 hex of the canonical JSON of :meth:`save`'s result (see :func:`.canonical.state_hash`).

        Computed inside the worker without transferring the state when the episode has one
        environment; an episode over several transfers their states here and hashes them together.

        Raises:
            EpisodeLost, EnvironmentFault, WorkerCrashed.
        """
        with self._lock:
            parts = self._episodes.get(episode_id)
            if parts is None:
                raise EpisodeLost(episode_id)
            if len(parts) == 1:
                return self._each_part("state_hash", episode_id)[0][1]
            return state_hash(self.save(episode_id))

    def fork(self, episode_id: str) -> str:
        """Open an independent copy of an episode and return its id.

        The copy is ``load(deep copy of save(state))`` in fresh module instances of each
        environment's own worker, so no mutation of one episode (state or module-level objects)
        ever shows in the other.

        Raises:
            EpisodeLost, EnvironmentFault, WorkerCrashed.
        """
        with self._lock:
            forked: dict[str, str] = {}
            try:
                for env_id, result in self._each_part("fork", episode_id):
                    forked[env_id] = result["episode_id"]
            except BaseException:
                self._close_parts(forked)
                raise
            new_id = f"ep{next(self._episode_ids)}"
            self._episodes[new_id] = forked
            return new_id

    def state_hashes(self, episode_id: str, references: Sequence[str] = ()) -> dict[str, str]:
        """``{env_id: state hash}`` of the episode, each computed inside its environment's worker: exactly
        ``{env_id: canonical.state_hash(save(episode)[env_id])}``, with no state crossing the pipe.

        Args:
            episode_id: an open episode.
            references: open episodes holding states this one may end in, never called (a task's gold final
                state, its initial state): an environment whose state holds the same value as a reference's
                (compared in the worker, at the cost of what a fork of the task changed) gets that reference's
                hash, computed once, and is not saved again.

        Raises:
            EpisodeLost: ``episode_id`` or a reference is not open.
            EnvironmentFault, WorkerCrashed.
        """
        with self._lock:
            self._check_open()
            parts = self._episodes.get(episode_id)
            if parts is None:
                raise EpisodeLost(episode_id)
            others = {}
            for reference in references:
                if reference not in self._episodes:
                    raise EpisodeLost(reference)
                others[reference] = self._episodes[reference]
            requests = [
                (env_id, {"episode_id": sub, "references": [o[env_id] for o in others.values() if env_id in o]})
                for env_id, sub in parts.items()
            ]
            hashes: dict[str, str] = {}
            for env_id, result in self._fan_out("state_hashes", requests):
                if isinstance(result, _RemoteError):
                    lost = result.error.get("episode_id")
                    for reference, other in others.items():
                        if result.type == "unknown_episode" and other.get(env_id) == lost:
                            self._drop(reference)
                            raise EpisodeLost(reference) from None
                    self._raise_remote(result, episode_id)
                if isinstance(result, _ChildLost):
                    raise WorkerCrashed(result.kind, result.message) from None
                if isinstance(result, BaseException):
                    raise result
                hashes[env_id] = result["hashes"][env_id]
            return hashes

    def close_episode(self, episode_id: str) -> None:
        """Close an episode; a no-op for episodes that are not open. Its state is freed in each worker before the
        worker's next request (which carries the close), so closing costs no wait of its own."""
        with self._lock:
            self._drop(episode_id, later=True)

    def close(self) -> None:
        """Kill every worker process. The object cannot be used afterwards."""
        with self._lock:
            self._closed = True
            watch, self._idle_watch = self._idle_watch, None
            if watch is not None:
                watch.stop()
            children, self._children = list(self._children.values()), {}
            for child in children:
                child.discard()
            self._episodes.clear()

    # -- plumbing -----------------------------------------------------------------------------
    def _each_part(self, op: str, episode_id: str) -> list[tuple[str, Any]]:
        """Run ``op`` on every part of an episode, the workers at once (:meth:`_fan_out`); ``[(env_id,
        result), ...]`` in the episode's order. On a failure, the first one (in that order) is raised, and the
        episodes a ``fork`` did open in the other workers are closed."""
        self._check_open()
        parts = self._episodes.get(episode_id)
        if parts is None:
            raise EpisodeLost(episode_id)
        answers = self._fan_out(op, [(env_id, {"episode_id": sub}) for env_id, sub in parts.items()])
        failure = next((exc for _, exc in answers if isinstance(exc, BaseException)), None)
        if failure is None:
            return answers
        if op == "fork":
            opened = {e: r["episode_id"] for e, r in answers if not isinstance(r, BaseException)}
            self._close_parts({e: sub for e, sub in opened.items() if self._running(e)})
        if isinstance(failure, _RemoteError):
            self._raise_remote(failure, episode_id)
        if isinstance(failure, _ChildLost):
            raise WorkerCrashed(failure.kind, failure.message) from None
        raise failure

    def _raise_remote(self, exc: _RemoteError, episode_id: str | None = None) -> None:
        error = exc.error
        env_id = str(error.get("env_id", "?"))
        message = str(error.get("message", ""))
        if exc.type == "state_rejected":
            raise StateRejected(env_id, message) from None
        if exc.type == "environment_fault":
            raise EnvironmentFault(env_id, str(error.get("cause", "exception")), message) from None
        if exc.type in (ErrorType.TIMEOUT, ErrorType.MEMORY, ErrorType.TOO_LARGE):  # a budget ran out
            raise EnvironmentFault(env_id, exc.type, message) from None
        if exc.type == "unknown_environment":
            child = self._children.get(env_id)
            if child is not None:
                child.loaded.discard(env_id)
            raise UnknownEnvironment(env_id) from None
        if exc.type == "unknown_episode" and episode_id is not None:
            self._drop(episode_id)
            raise EpisodeLost(episode_id) from None
        raise SandboxError(f"worker error: {error}") from None
