"""The sandbox worker process.

Run as ``python -m envfactory_assets.runtime.worker [--memory-mb N] [--cpu-seconds N]``.

Reads length-prefixed JSON requests (see :mod:`.protocol`) on stdin and writes responses to the
*original* stdout; file descriptor 1 and ``sys.stdout`` are redirected to stderr before any
environment code runs, so stray prints (even from C code) can never corrupt the protocol.

Limits, set at start from the arguments or ``ENVFACTORY_SANDBOX_MEMORY_MB`` /
``ENVFACTORY_SANDBOX_CPU_SECONDS`` (0 = unlimited):

- ``RLIMIT_AS`` = memory (MiB): allocations beyond it raise MemoryError in the environment code.
- ``RLIMIT_CPU`` soft limit re-armed before every request is read to "CPU used so far + cpu seconds": a
  request that burns more CPU than that gets SIGXCPU, even if the parent is gone. The hard limit is the
  worker's lifetime CPU budget (``--cpu-lifetime-seconds``), set once: code that ignores SIGXCPU cannot
  raise the soft limit past it, and the kernel SIGKILLs the worker there. Per call, the parent enforces
  the CPU limit from the worker's own CPU time (:mod:`.sandbox`).
- a per-request wall-clock alarm (``timeout_s`` in the request, SIGALRM) that raises
  :class:`.engine.CallTimedOut` inside environment code; the parent kills the whole process if
  even that does not stop it.
- core dumps disabled; open files (``RLIMIT_NOFILE``), processes (``RLIMIT_NPROC``) and file size
  (``RLIMIT_FSIZE``, its private tmpfs) capped.
- a seccomp filter (:mod:`.seccomp_filter`): no new processes, programs, sockets or namespaces.

The worker exits when stdin closes. It is normally started inside the OS sandbox
(:mod:`.isolation`); these limits are what it adds from inside.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from envfactory_assets.runtime.engine import CallTimedOut, Engine, OperationError
from envfactory_assets.runtime.errors import ErrorType
from envfactory_assets.runtime.protocol import PROTOCOL_VERSION, ProtocolError, encode_frame, read_frame, write_frame
from envfactory_assets.runtime.seccomp_filter import install_seccomp_filter

MEMORY_ENV_VAR = "ENVFACTORY_SANDBOX_MEMORY_MB"
CPU_ENV_VAR = "ENVFACTORY_SANDBOX_CPU_SECONDS"
#: Open descriptors: the protocol's two, stdio, the interpreter's own, and a margin.
MAX_OPEN_FILES = 64
#: Processes of the sandbox user; the worker needs one, the filter refuses forks anyway.
MAX_PROCESSES = 16
#: Largest file the worker may write (only its private tmpfs is writable), bytes.
MAX_FILE_BYTES = 16 * 1024 * 1024


class Alarm:
    """Per-request wall-clock budget using SIGALRM (main thread only).

    A timer already running (an earlier request's, left to run out) is kept when it fires no later than this
    request's deadline: when it fires early, the handler sets it again for what is left. So a request sets
    the timer only when none would fire in time, and a busy worker makes about one ``setitimer`` per budget,
    not two per request; every request is still stopped at its own deadline.
    """

    def __init__(self) -> None:
        self.fired = False
        self._armed = False
        self._deadline = math.inf
        self._timer_at = math.inf  # when the running timer fires (monotonic); inf when none runs
        signal.signal(signal.SIGALRM, self._on_alarm)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        self._timer_at = math.inf
        if not self._armed:
            return
        left = self._deadline - time.monotonic()
        if left <= 0:
            self.fired = True
            raise CallTimedOut()
        self._timer_at = self._deadline
        signal.setitimer(signal.ITIMER_REAL, left)

    def deadline_passed(self) -> bool:
        return self.fired

    def arm(self, seconds: float | None) -> None:
        """Raise :class:`CallTimedOut` in the running code once ``seconds`` have passed (none: no budget); every
        :meth:`arm` is followed by :meth:`disarm`, in a ``finally``."""
        self.fired = False
        if not (seconds and seconds > 0):
            self._armed = False
            return
        self._deadline = time.monotonic() + seconds
        self._armed = True  # before the check: a timer that fires from here on is set again by the handler
        if self._timer_at > self._deadline:
            self._timer_at = self._deadline
            signal.setitimer(signal.ITIMER_REAL, seconds)

    def disarm(self) -> None:
        """End the budget :meth:`arm` started (its timer, when it fires later, does nothing)."""
        self._armed = False


def set_memory_limit(memory_mb: int) -> None:
    """Cap the address space at ``memory_mb`` MiB (soft and hard); 0 leaves it unlimited."""
    if memory_mb <= 0:
        return
    limit = memory_mb * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class CpuLimit:
    """The CPU soft limit, re-armed before every request to CPU used so far + ``cpu_seconds`` (0: unlimited).

    The CPU time is read with one clock read (``CLOCK_PROCESS_CPUTIME_ID``: user + system of every thread, the
    time ``RLIMIT_CPU`` counts) and the limits last set are kept here, so a request whose limit is unchanged
    (the same until a whole CPU second more was used) makes no ``getrusage`` or ``getrlimit``. Code that
    changes the soft limit itself can do so only during its own request (it could raise it to the hard limit
    then anyway); the next change of whole second sets it again. The hard limit is never raised.
    """

    def __init__(self, cpu_seconds: int) -> None:
        self.cpu_seconds = cpu_seconds
        self._soft, self._hard = resource.getrlimit(resource.RLIMIT_CPU)

    def rearm(self) -> None:
        """Set the soft limit to CPU used so far + ``cpu_seconds``."""
        if self.cpu_seconds <= 0:
            return
        soft = math.ceil(time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)) + self.cpu_seconds
        if self._hard != resource.RLIM_INFINITY:
            soft = min(soft, self._hard)
        if soft != self._soft:
            self._soft, self._hard = resource.getrlimit(resource.RLIMIT_CPU)
            if self._hard != resource.RLIM_INFINITY:
                soft = min(soft, self._hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, self._hard))
            self._soft = soft


def rearm_cpu_limit(cpu_seconds: int) -> None:
    """Set the CPU soft limit to CPU used so far + ``cpu_seconds``; 0 leaves it unlimited."""
    CpuLimit(cpu_seconds).rearm()


def set_cpu_lifetime(lifetime_seconds: int) -> None:
    """Set the hard ``RLIMIT_CPU`` to ``lifetime_seconds`` (the worker's whole CPU budget) and the soft
    limit to at most that; 0 leaves both as they are. Never raises the hard limit (an unprivileged
    process cannot)."""
    if lifetime_seconds <= 0:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        lifetime_seconds = min(lifetime_seconds, hard)
    if soft == resource.RLIM_INFINITY or soft > lifetime_seconds:
        soft = lifetime_seconds
    resource.setrlimit(resource.RLIMIT_CPU, (soft, lifetime_seconds))


def set_process_limits() -> None:
    """No core dumps; cap open files, processes and written file size (soft and hard)."""
    for limit, value in (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, MAX_OPEN_FILES),
        (resource.RLIMIT_NPROC, MAX_PROCESSES),
        (resource.RLIMIT_FSIZE, MAX_FILE_BYTES),
    ):
        _, hard = resource.getrlimit(limit)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(limit, (value, value))


def claim_protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """Move the protocol to private descriptors; point fd 0 at /dev/null and fd 1 at stderr."""
    protocol_in = os.fdopen(os.dup(0), "rb")
    protocol_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol_in, protocol_out


def reset_shared_state() -> None:
    """Undo per-thread state environment code may have changed (the decimal context)."""
    decimal = sys.modules.get("decimal")
    if decimal is not None:
        decimal.setcontext(decimal.Context())


def serve(engine: Engine, alarm: Alarm, request: dict[str, Any]) -> dict[str, Any]:
    """Run one request under its time budget and build the response (never raises)."""
    request_id = request.get("id")
    op = request.get("op")
    timeout = request.get("timeout_s")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        timeout = None
    try:
        alarm.arm(timeout)
        try:
            engine.close_all(request.get("close"))
            result = engine.dispatch(op, request)
        finally:
            alarm.disarm()
        return {"id": request_id, "ok": True, "result": result}
    except OperationError as exc:
        return {"id": request_id, "ok": False, "error": exc.as_dict()}
    except CallTimedOut:  # fired in the engine's own code around the user code
        return _fault_response(engine, request, ErrorType.TIMEOUT, f"{op} exceeded the time limit")
    except MemoryError:
        return _fault_response(engine, request, ErrorType.MEMORY, f"{op} ran out of memory")
    except Exception as exc:  # noqa: BLE001 - a bug in the worker: report, keep serving
        return _fault_response(engine, request, ErrorType.INTERNAL, f"{type(exc).__name__}: {exc}")


def _fault_response(engine: Engine, request: dict[str, Any], error_type: ErrorType, message: str) -> dict[str, Any]:
    error: dict[str, Any] = {"type": str(error_type), "message": message}
    if request.get("op") == "call" and isinstance(request.get("episode_id"), str):
        engine.close(request["episode_id"])  # state may be half-updated: do not let it be used
        error["episode_lost"] = True
    return {"id": request.get("id"), "ok": False, "error": error}


def _limit_from(value: int | None, env_var: str) -> int:
    if value is not None:
        return value
    raw = os.environ.get(env_var, "0")
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{env_var} must be an integer, got {raw!r}") from None


def serve_requests(
    protocol_in: BinaryIO,
    protocol_out: BinaryIO,
    handle: Callable[[dict[str, Any]], dict[str, Any]],
    before_each: Callable[[], None],
    *,
    seccomp: bool,
) -> int:
    """A worker's request loop: install the seccomp filter (last, after every import), say ready, then
    answer each framed request with ``handle(request)`` until the parent closes the pipe.

    ``before_each()`` runs before every request is read (re-arm the CPU limit, reset shared state): after the
    previous response is written, so it runs while the parent reads that response rather than while the parent
    waits for the next one. A response that cannot be framed (not JSON, over the frame limit) is answered with
    an ``internal`` error instead, so the parent always gets one frame per request.

    Returns the exit status: 0 when the parent closed the pipe, 2 on a malformed frame.
    """
    seccomp_problem = install_seccomp_filter() if seccomp else "disabled"
    write_frame(
        protocol_out,
        {"ready": True, "pid": os.getpid(), "protocol": PROTOCOL_VERSION, "seccomp": seccomp_problem or "on"},
    )
    while True:
        # Only the worker's own decoding of the request runs between this and the request: the CPU it takes
        # counts towards the request's limit, as the parent's CPU watch counts it from the send.
        before_each()
        try:
            request = read_frame(protocol_in)
        except EOFError:
            return 0
        except ProtocolError as exc:
            write_frame(protocol_out, {"id": None, "ok": False, "error": {"type": "protocol", "message": str(exc)}})
            return 2
        response = handle(request)
        request_id = request.get("id")
        try:
            frame = encode_frame(response)
        except (TypeError, ProtocolError) as exc:  # e.g. an oversized result
            frame = encode_frame(
                {"id": request_id, "ok": False, "error": {"type": "internal", "message": str(exc)[:2000]}}
            )
        # Freed before answering, not while waiting for the next request: the parent counts a worker's CPU
        # between its answer and the next request as code running on after its call (sandbox.IDLE_CPU_S),
        # and freeing a large reply's objects takes milliseconds.
        request = response = None
        protocol_out.write(frame)
        protocol_out.flush()
        frame = None


def main(argv: list[str] | None = None) -> int:
    """Serve requests until stdin closes. Returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m envfactory_assets.runtime.worker")
    parser.add_argument("--memory-mb", type=int, default=None, help=f"RLIMIT_AS in MiB (or ${MEMORY_ENV_VAR})")
    parser.add_argument("--cpu-seconds", type=int, default=None, help=f"CPU s per request (or ${CPU_ENV_VAR})")
    parser.add_argument(
        "--cpu-lifetime-seconds",
        type=int,
        default=0,
        help="hard RLIMIT_CPU: the worker's whole CPU budget, s (0 = unlimited)",
    )
    parser.add_argument(
        "--python-guards",
        choices=("on", "off"),
        default="on",
        help="static check and restricted builtins; 'off' only to test the OS layer alone",
    )
    parser.add_argument("--seccomp", choices=("on", "off"), default="on", help="install the seccomp filter")
    parser.add_argument(
        "--domain", default="", help="the trust domain (environment id) this worker serves; only for process listings"
    )
    args = parser.parse_args(argv)
    memory_mb = _limit_from(args.memory_mb, MEMORY_ENV_VAR)
    cpu_seconds = _limit_from(args.cpu_seconds, CPU_ENV_VAR)

    protocol_in, protocol_out = claim_protocol_streams()
    set_process_limits()
    set_memory_limit(memory_mb)
    set_cpu_lifetime(args.cpu_lifetime_seconds)
    cpu_limit = CpuLimit(cpu_seconds)
    cpu_limit.rearm()
    alarm = Alarm()
    engine = Engine(deadline_passed=alarm.deadline_passed, python_guards=args.python_guards == "on")

    # Imports the engine may need later happen now, before the filter; the filter comes last.
    def before_each() -> None:
        cpu_limit.rearm()
        reset_shared_state()

    return serve_requests(
        protocol_in,
        protocol_out,
        lambda request: serve(engine, alarm, request),
        before_each,
        seccomp=args.seccomp == "on",
    )


if __name__ == "__main__":
    sys.exit(main())
