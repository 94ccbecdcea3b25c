"""Error types of the sandbox: the ``error.type`` strings of structured results, and the exceptions
raised by :class:`.sandbox.SandboxWorker`."""

from __future__ import annotations

from enum import StrEnum


class ErrorType(StrEnum):
    """Values of ``error["type"]`` in a failed tool call result ``{"ok": False, "error": {...}}``.

    Tool-side errors (the episode stays open):

    - ``bad_arguments``: the arguments do not fit the tool's signature, or the tool raised ValueError.
    - ``not_found``: the tool raised LookupError (KeyError, IndexError...), e.g. a missing row.
    - ``precondition_failed``: the tool raised :class:`PreconditionFailed`: the row's state does not allow
      the operation (cancelling a cancelled or shipped order); nothing was changed.
    - ``tool_error``: the tool raised any other exception (a bug in the environment code).
    - ``unknown_tool`` / ``ambiguous_tool``: no tool / several tools of that name in the episode.
    - ``output_not_serializable``: the tool returned something that is not plain JSON.

    Faults (``error["episode_lost"]`` is True: the episode is closed, its state is gone):

    - ``timeout``: the call ran past ``call_timeout_s``.
    - ``memory``: the call hit the worker's address-space limit (MemoryError).
    - ``crash``: the worker process died (segfault, killed by the CPU limit or externally).
    - ``protocol``: the worker sent something that is not a valid response.
    - ``resource_limit``: the worker went past a limit the kernel or the parent enforces (memory of its
      control group, CPU time of one call, threads left running after a call, CPU used between calls); the
      message names the limit and ``error["limit"]`` its key (``memory_mb``, ``cpu_seconds``, ``max_tasks``,
      ``threads_after_call``, ``idle_cpu``), and the worker was killed.
    - ``too_large``: the worker's reply was past the parent's bounds (``SandboxLimits.max_response_mb``,
      ``max_response_depth``); it was not decoded. The call's effect on the state cannot be seen, so its
      episode is closed; a reply whose declared length is past the cap is not even read, and the worker
      is killed.
    - ``internal``: a bug in the worker itself.
    """

    BAD_ARGUMENTS = "bad_arguments"
    NOT_FOUND = "not_found"
    PRECONDITION_FAILED = "precondition_failed"
    TOOL_ERROR = "tool_error"
    UNKNOWN_TOOL = "unknown_tool"
    AMBIGUOUS_TOOL = "ambiguous_tool"
    OUTPUT_NOT_SERIALIZABLE = "output_not_serializable"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    CRASH = "crash"
    PROTOCOL = "protocol"
    RESOURCE_LIMIT = "resource_limit"
    TOO_LARGE = "too_large"
    INTERNAL = "internal"


class _SealedClass(type):
    """A metaclass whose classes take no new attributes after creation: a class shared by every episode's
    module cannot carry state from one episode to the next."""

    def __setattr__(cls, name: str, value: object) -> None:
        raise AttributeError(f"{cls.__name__} cannot be changed")

    def __delattr__(cls, name: str) -> None:
        raise AttributeError(f"{cls.__name__} cannot be changed")


class PreconditionFailed(Exception, metaclass=_SealedClass):
    """Raised by environment code when a row's state forbids the operation (an order that is already
    cancelled, or has shipped, cannot be cancelled). Every environment module sees it as a builtin name;
    the sandbox reports it as ``precondition_failed``. Tools raise it before changing anything. The class
    is sealed (no attribute can be set on it) because every episode's module sees the same class."""


def _rebuilt(cls: type, args: tuple, state: dict) -> SandboxError:
    """``cls`` with its message ``args`` and attributes ``state``, without calling its ``__init__``."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class SandboxError(Exception):
    """Base class of every exception raised by :class:`.sandbox.SandboxWorker`.

    The subclasses survive pickling with their attributes (a calibration pool process raises them in the
    parent): the default would call ``__init__`` with the message alone, which their signatures refuse.
    """

    def __reduce__(self) -> tuple:
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


class WorkerCrashed(SandboxError):
    """The worker process died, hung past its deadline, failed to start, or broke the protocol
    during an operation other than a tool call. The worker was killed; all its episodes are lost.

    Attributes:
        kind: ``"timeout"``, ``"crash"``, ``"protocol"`` or ``"startup"``.
        message: what happened, with the tail of the worker's stderr when useful.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class EnvironmentRejected(SandboxError):
    """Environment code failed the static check, failed to execute at import time, does not follow
    the module contract (``load``/``save``/tools), or crashed or hung the worker while loading.

    Attributes:
        env_id: the environment.
        violations: human-readable reasons, e.g. ``["line 1: import of 'os' is not allowed"]``.
    """

    def __init__(self, env_id: str, violations: list[str]) -> None:
        super().__init__(f"environment {env_id!r} rejected: " + "; ".join(violations))
        self.env_id = env_id
        self.violations = list(violations)


class StateRejected(SandboxError):
    """An environment's ``load`` refused a saved state (raised, timed out, ran out of memory, or
    returned something other than a dict).

    Attributes:
        env_id: the environment whose ``load`` refused the state.
        message: the reason, usually the ValueError message from ``load``.
    """

    def __init__(self, env_id: str, message: str) -> None:
        super().__init__(f"state rejected by {env_id!r}: {message}")
        self.env_id = env_id
        self.message = message


class EnvironmentFault(SandboxError):
    """Environment code failed outside a tool call: ``save`` raised or returned non-JSON, or ``load``
    refused the state its own ``save`` produced (during ``fork``).

    Attributes:
        env_id: the faulty environment (``"?"`` in the rare case the time budget ran out in the
            worker's own code between environments).
        cause: ``"exception"``, ``"timeout"``, ``"memory"``, ``"not_serializable"`` or ``"contract"``.
        message: details.
    """

    def __init__(self, env_id: str, cause: str, message: str) -> None:
        super().__init__(f"environment {env_id!r} failed ({cause}): {message}")
        self.env_id = env_id
        self.cause = cause
        self.message = message


class EpisodeLost(SandboxError):
    """The episode is not open: it was closed, discarded after a timeout or memory fault, lost when
    the worker restarted, or never existed.

    Attributes:
        episode_id: the episode asked for.
    """

    def __init__(self, episode_id: str) -> None:
        super().__init__(
            f"episode {episode_id!r} is not open (closed, discarded after a fault, or lost when the worker restarted)"
        )
        self.episode_id = episode_id


class UnknownEnvironment(SandboxError):
    """An episode names an environment that was never loaded into this worker.

    Attributes:
        env_id: the environment asked for.
    """

    def __init__(self, env_id: str) -> None:
        super().__init__(f"environment {env_id!r} is not loaded")
        self.env_id = env_id
