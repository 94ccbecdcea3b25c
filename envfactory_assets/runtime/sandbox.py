"""Parent side of the sandbox: :class:`SandboxWorker` drives one worker child process.

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
from typing import Any

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
from envfactory_assets.runtime.protocol import (
    ChannelClosed,
    ChannelTimeout,
    FrameChannel,
    ProtocolError,
    encode_frame,
)

WORKER_MODULE = "envfactory_assets.runtime.worker"
# The directory that contains the `envfactory_assets` package, put on the worker's PYTHONPATH.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_STDERR_TAIL_BYTES = 16 * 1024
_TRANSFER_BYTES_PER_S = 20e6  # conservative pipe throughput, added to deadlines for big payloads


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one worker process.

    Attributes:
        memory_mb: address-space limit (``RLIMIT_AS``) of the worker, MiB. The interpreter itself
            needs about 30-60 MiB of it.
        cpu_seconds: CPU seconds any single request may burn before the kernel kills the worker
            (``RLIMIT_CPU``, re-armed per request); the backstop if the parent is gone.
        call_timeout_s: wall-clock seconds for one tool call, and for each environment's part of
            ``load_environment``/``open_episode``/``save``/``state_hash``/``fork``.
        kill_grace_s: extra seconds the parent waits past a request's budget before it kills the
            worker (the worker first tries to stop the code itself and answer ``timeout``).
        startup_timeout_s: seconds a fresh worker may take to start and say it is ready.
        hash_seed: ``PYTHONHASHSEED`` of the worker (string hashing, set order). Verification replays
            in a second worker with another seed to catch tools whose results depend on it.
    """

    memory_mb: int = 1024
    cpu_seconds: int = 60
    call_timeout_s: float = 5.0
    kill_grace_s: float = 2.0
    startup_timeout_s: float = 30.0
    hash_seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.hash_seed <= 4294967295:
            raise ValueError("SandboxLimits.hash_seed must be in [0, 4294967295]")
        for field in dataclasses.fields(self):
            if field.name != "hash_seed" and getattr(self, field.name) <= 0:
                raise ValueError(f"SandboxLimits.{field.name} must be positive")


class _ChildLost(Exception):
    """The worker had to be killed (or died) during a request."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


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
        except (OSError, ValueError):
            pass
        finally:
            stream.close()

    def text(self) -> str:
        with self._lock:
            return self._tail.decode("utf-8", "replace")

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def _kill_process(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's process group, reap it, close our pipe ends. Safe to call twice."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def _describe_exit(returncode: int | None, limits: SandboxLimits) -> str:
    if returncode is None:
        return "worker stopped responding"
    if returncode >= 0:
        return f"worker exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    hint = {
        "SIGXCPU": f" (CPU limit of {limits.cpu_seconds} s per request exceeded)",
        "SIGSEGV": " (segmentation fault, possibly out of memory in native code)",
        "SIGKILL": " (killed externally or by the out-of-memory killer)",
    }.get(name, "")
    return f"worker killed by {name}{hint}"


class SandboxWorker:
    """One sandboxed worker process holding many episodes of many environments.

    The child (``python -m envfactory_assets.runtime.worker``) is started lazily on first use, in its
    own session, with a minimal environment (``PYTHONHASHSEED=0`` for reproducible set order).

    Failure model: a tool call that exceeds ``call_timeout_s`` is first stopped inside the worker
    (its episode is discarded, other episodes survive); if the code cannot be stopped (it swallows
    the alarm, or loops in native code), or the worker crashes (segfault, CPU limit, killed), or it
    breaks the protocol, the child is killed and a fresh one is started lazily on the next request.
    **A restart loses every open episode of this worker** (they raise :class:`EpisodeLost`
    afterwards); loaded environments are *not* lost: their sources are kept here and re-loaded into
    the fresh child on demand. No method blocks longer than its time budget plus ``kill_grace_s``.

    Methods may be called from several threads, but an internal lock runs one request at a time;
    use several workers (one per thread or process) for parallelism.

    Args:
        limits: resource limits; defaults to :class:`SandboxLimits()`.
        python: interpreter for the child; defaults to ``sys.executable``.
    """

    def __init__(self, limits: SandboxLimits | None = None, *, python: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self._python = python or sys.executable
        self._lock = threading.RLock()
        self._request_ids = itertools.count(1)
        self._proc: subprocess.Popen | None = None
        self._channel: FrameChannel | None = None
        self._stderr: _StderrTail | None = None
        self._finalizer: weakref.finalize | None = None
        self._sources: dict[str, tuple[str, tuple[str, ...] | None]] = {}
        self._child_environments: set[str] = set()
        self._episodes: dict[str, tuple[str, ...]] = {}
        self._starts = 0
        self._closed = False

    # -- context manager and introspection -----------------------------------------------------
    def __enter__(self) -> SandboxWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """Process id of the running child, or None when none is running."""
        return self._proc.pid if self._proc is not None else None

    @property
    def starts(self) -> int:
        """How many child processes this worker has started (1 + number of restarts, once used)."""
        return self._starts

    @property
    def open_episodes(self) -> tuple[str, ...]:
        """Ids of the episodes open in the current child."""
        return tuple(self._episodes)

    def is_open(self, episode_id: str) -> bool:
        """Whether ``episode_id`` is open (not closed, discarded, or lost in a restart)."""
        return episode_id in self._episodes

    def stderr_tail(self) -> str:
        """The last ~16 KiB the current (or last) child wrote to stderr, including user prints."""
        return self._stderr.text() if self._stderr is not None else ""

    # -- operations ---------------------------------------------------------------------------
    def load_environment(self, env_id: str, source: str, tool_names: Sequence[str] | None = None) -> list[str]:
        """Check, compile and trial-run an environment module in the worker.

        Args:
            env_id: the environment's id (1-200 characters).
            source: the module's code, following the contract in ``docs/design.md``.
            tool_names: the tools to expose (every one must be ``def name(state, ...)``); by default
                every public module-level function whose first parameter is ``state``, except
                ``load`` and ``save``.

        Returns:
            The exposed tool names.

        Raises:
            EnvironmentRejected: static-check violations, import-time failure, contract violations,
                or the code crashed/hung the worker (which was then restarted).
            WorkerCrashed: the worker could not be started.
        """
        tools = tuple(tool_names) if tool_names is not None else None
        with self._lock:
            result = self._load_into_child(env_id, source, tools)
            self._sources[env_id] = (source, tools)
            return list(result["tools"])

    def _load_into_child(self, env_id: str, source: str, tools: tuple[str, ...] | None) -> dict[str, Any]:
        fields = {"env_id": env_id, "source": source, "tool_names": list(tools) if tools is not None else None}
        try:
            result = self._request("load_env", fields, self.limits.call_timeout_s)
        except _RemoteError as exc:
            if exc.type == "environment_rejected":
                raise EnvironmentRejected(env_id, list(exc.error.get("violations") or [str(exc)])) from None
            if exc.type in (ErrorType.TIMEOUT, ErrorType.MEMORY):
                raise EnvironmentRejected(env_id, [f"{exc.type}: {exc}"]) from None
            raise SandboxError(f"load_environment({env_id!r}) failed: {exc.error}") from None
        except _ChildLost as exc:
            raise EnvironmentRejected(env_id, [f"worker {exc.kind} while loading: {exc.message}"]) from None
        self._child_environments.add(env_id)
        return result

    def _ensure_loaded(self, env_ids: Sequence[str]) -> None:
        for env_id in env_ids:
            if env_id in self._child_environments:
                continue
            if env_id not in self._sources:
                raise UnknownEnvironment(env_id)
            source, tools = self._sources[env_id]
            self._load_into_child(env_id, source, tools)

    def open_episode(self, states: Mapping[str, Any]) -> str:
        """Open an episode: each environment's ``load`` receives its saved state.

        Args:
            states: ``{env_id: saved_state}`` for one or more loaded environments.

        Returns:
            The new episode id.

        Raises:
            StateRejected: an environment's ``load`` refused its state (names the env and reason).
            UnknownEnvironment: an env id was never loaded.
            WorkerCrashed: the worker died or hung (it was restarted; all episodes are lost).
            TypeError: a state is not JSON-serializable.
        """
        states = dict(states)
        if not states:
            raise ValueError("states must name at least one environment")
        with self._lock:
            self._ensure_loaded(list(states))
            try:
                result = self._request("open_episode", {"states": states}, self._budget(len(states)))
            except _RemoteError as exc:
                self._raise_remote(exc)
            except _ChildLost as exc:
                raise WorkerCrashed(exc.kind, exc.message) from None
            episode_id = result["episode_id"]
            self._episodes[episode_id] = tuple(states)
            return episode_id

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
            ``crash``/``protocol`` error or a timeout the worker could not stop by itself, *all*
            episodes of this worker are gone.

        Raises:
            EpisodeLost: the episode is not open.
            TypeError: ``arguments`` is not JSON-serializable.
        """
        with self._lock:
            if episode_id not in self._episodes:
                raise EpisodeLost(episode_id)
            fields = {"episode_id": episode_id, "tool": tool, "arguments": dict(arguments or {})}
            try:
                result = self._request("call", fields, self.limits.call_timeout_s)
            except _RemoteError as exc:
                if exc.type == "unknown_episode":
                    self._episodes.pop(episode_id, None)
                    raise EpisodeLost(episode_id) from None
                result = {"ok": False, "error": exc.error}
            except _ChildLost as exc:
                message = f"{exc.message}; all open episodes of this worker were lost (it restarts on next use)"
                return {"ok": False, "error": {"type": exc.kind, "message": message, "episode_lost": True}}
            if not result.get("ok") and result.get("error", {}).get("episode_lost"):
                self._episodes.pop(episode_id, None)
            return result

    def save(self, episode_id: str) -> dict[str, Any]:
        """The episode's saved states, ``{env_id: {"tables": ..., "meta": ...}}``.

        Raises:
            EpisodeLost, EnvironmentFault (``save`` failed or returned non-JSON), WorkerCrashed.
        """
        return self._episode_request("save", episode_id)

    def state_hash(self, episode_id: str) -> str:
        """sha256 hex of the canonical JSON of :meth:`save`'s result (see :func:`.canonical.state_hash`),
        computed inside the worker without transferring the state.

        Raises:
            EpisodeLost, EnvironmentFault, WorkerCrashed.
        """
        return self._episode_request("state_hash", episode_id)

    def fork(self, episode_id: str) -> str:
        """Open an independent copy of an episode and return its id.

        The copy is ``load(deep copy of save(state))`` in fresh module instances, so no mutation of
        one episode (state or module-level objects) ever shows in the other.

        Raises:
            EpisodeLost, EnvironmentFault, WorkerCrashed.
        """
        with self._lock:
            result = self._episode_request("fork", episode_id)
            new_id = result["episode_id"]
            self._episodes[new_id] = self._episodes[episode_id]
            return new_id

    def close_episode(self, episode_id: str) -> None:
        """Close an episode and free its state; a no-op for episodes that are not open."""
        with self._lock:
            if self._episodes.pop(episode_id, None) is None or self._proc is None:
                return
            try:
                self._request("close", {"episode_id": episode_id}, self.limits.call_timeout_s)
            except (_RemoteError, _ChildLost):
                pass

    def close(self) -> None:
        """Kill the worker process (if any). The object cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._discard_child()

    # -- plumbing -----------------------------------------------------------------------------
    def _budget(self, environment_count: int) -> float:
        return self.limits.call_timeout_s * max(1, environment_count)

    def _episode_request(self, op: str, episode_id: str) -> Any:
        with self._lock:
            env_ids = self._episodes.get(episode_id)
            if env_ids is None:
                raise EpisodeLost(episode_id)
            try:
                return self._request(op, {"episode_id": episode_id}, self._budget(len(env_ids)))
            except _RemoteError as exc:
                self._raise_remote(exc, episode_id)
            except _ChildLost as exc:
                raise WorkerCrashed(exc.kind, exc.message) from None

    def _raise_remote(self, exc: _RemoteError, episode_id: str | None = None) -> None:
        error = exc.error
        env_id = str(error.get("env_id", "?"))
        message = str(error.get("message", ""))
        if exc.type == "state_rejected":
            raise StateRejected(env_id, message) from None
        if exc.type == "environment_fault":
            raise EnvironmentFault(env_id, str(error.get("cause", "exception")), message) from None
        if exc.type in (ErrorType.TIMEOUT, ErrorType.MEMORY):  # budget ran out between environments
            raise EnvironmentFault(env_id, exc.type, message) from None
        if exc.type == "unknown_environment":
            self._child_environments.discard(env_id)
            raise UnknownEnvironment(env_id) from None
        if exc.type == "unknown_episode" and episode_id is not None:
            self._episodes.pop(episode_id, None)
            raise EpisodeLost(episode_id) from None
        raise SandboxError(f"worker error: {error}") from None

    def _request(self, op: str, fields: dict[str, Any], budget_s: float) -> Any:
        """Send one request and wait for its response, at most ``budget_s + kill_grace_s`` (+ transfer).

        Raises:
            _RemoteError: the worker answered ``ok: false``.
            _ChildLost: the worker died, hung or broke the protocol (it has been killed).
            WorkerCrashed: a fresh worker could not be started.
            SandboxError: this object is closed.
            TypeError: the request is not JSON-serializable.
        """
        if self._closed:
            raise SandboxError("SandboxWorker is closed")
        request_id = next(self._request_ids)
        frame = encode_frame({"id": request_id, "op": op, "timeout_s": budget_s, **fields})
        channel = self._ensure_started()
        deadline = time.monotonic() + budget_s + self.limits.kill_grace_s + len(frame) / _TRANSFER_BYTES_PER_S
        try:
            channel.send(frame, deadline)
            response = channel.receive(deadline)
        except ChannelTimeout:
            self._discard_child()
            raise _ChildLost(
                str(ErrorType.TIMEOUT), f"{op} did not finish within {budget_s:g} s; worker killed"
            ) from None
        except ChannelClosed:
            raise _ChildLost(str(ErrorType.CRASH), self._crash_message(op)) from None
        except ProtocolError as exc:
            self._discard_child()
            raise _ChildLost(str(ErrorType.PROTOCOL), f"{op}: {exc}; worker killed") from None
        if response.get("id") != request_id:
            self._discard_child()
            raise _ChildLost(str(ErrorType.PROTOCOL), f"{op}: response id mismatch; worker killed")
        if response.get("ok") is True:
            return response.get("result")
        error = response.get("error")
        raise _RemoteError(error if isinstance(error, dict) else {"type": "protocol", "message": str(error)})

    def _crash_message(self, op: str) -> str:
        proc = self._proc
        returncode = None
        if proc is not None:
            try:
                returncode = proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                returncode = None
        if self._stderr is not None:
            self._stderr.join(0.5)  # let the drain thread pick up the last words
        tail = self.stderr_tail().strip()[-1500:]
        self._discard_child()
        message = f"{_describe_exit(returncode, self.limits)} during {op}"
        return f"{message}; stderr tail:\n{tail}" if tail else message

    def _ensure_started(self) -> FrameChannel:
        if self._channel is not None:
            return self._channel
        command = [
            self._python,
            "-m",
            WORKER_MODULE,
            "--memory-mb",
            str(self.limits.memory_mb),
            "--cpu-seconds",
            str(self.limits.cpu_seconds),
        ]
        python_path = os.pathsep.join(p for p in (_PACKAGE_PARENT, os.environ.get("PYTHONPATH", "")) if p)
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "PYTHONPATH": python_path,
            "PYTHONHASHSEED": str(self.limits.hash_seed),
            "LC_ALL": "C.UTF-8",
        }
        proc = subprocess.Popen(  # noqa: S603 - fixed command, no shell
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=_PACKAGE_PARENT,
            start_new_session=True,
            close_fds=True,
        )
        self._starts += 1
        self._proc = proc
        self._stderr = _StderrTail(proc.stderr)
        self._finalizer = weakref.finalize(self, _kill_process, proc)
        channel = FrameChannel(proc.stdin.fileno(), proc.stdout.fileno())
        try:
            hello = channel.receive(time.monotonic() + self.limits.startup_timeout_s)
        except (ChannelTimeout, ChannelClosed, ProtocolError) as exc:
            message = f"worker failed to start: {exc}"
            if isinstance(exc, ChannelClosed):
                message = self._crash_message("startup")
            self._discard_child()
            raise WorkerCrashed("startup", message) from None
        if hello.get("ready") is not True:
            self._discard_child()
            raise WorkerCrashed("startup", f"unexpected first message from worker: {hello}")
        self._channel = channel
        return channel

    def _discard_child(self) -> None:
        """Kill the child (if any) and forget everything that lived in it."""
        self._channel = None
        self._episodes.clear()
        self._child_environments.clear()
        if self._proc is None:
            return
        self._proc = None
        if self._finalizer is not None:
            self._finalizer()  # kills the process group, reaps it, closes the pipes
            self._finalizer = None
