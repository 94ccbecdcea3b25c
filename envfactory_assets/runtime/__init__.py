"""Runtime for generated environments: static check, sandbox worker process, state hashing.

Plain Python (no Dagster). Modules:

- :mod:`.canonical`: ``canonical_json``, ``state_hash``.
- :mod:`.static_check`: ``static_check(source) -> list[str]``; the rules live in :mod:`.code_policy`.
- :mod:`.restricted`: restricted builtins and module proxies for executing checked code.
- :mod:`.engine`: in-process episodes and tool calls (runs inside the worker).
- :mod:`.worker`: the child process (``python -m envfactory_assets.runtime.worker``).
- :mod:`.protocol`: length-prefixed JSON framing between parent and worker.
- :mod:`.sandbox`: ``SandboxLimits``, ``SandboxWorker`` (parent side).
- :mod:`.errors`: ``ErrorType`` and the exceptions ``SandboxWorker`` raises.
- :mod:`.bench`: ``python -m envfactory_assets.runtime.bench`` micro-benchmarks.
"""

from envfactory_assets.runtime.canonical import canonical_json, state_hash
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
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
from envfactory_assets.runtime.static_check import static_check

__all__ = [
    "EnvironmentFault",
    "EnvironmentRejected",
    "EpisodeLost",
    "ErrorType",
    "SandboxError",
    "SandboxLimits",
    "SandboxWorker",
    "StateRejected",
    "UnknownEnvironment",
    "WorkerCrashed",
    "canonical_json",
    "state_hash",
    "static_check",
]
