"""The settings of ``envfactory serve-env`` and ``serve-openenv``, in a module light enough for the command line
to read their defaults into its ``--help`` (the servers themselves take about a second to import)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from envfactory_assets.config_checks import finite_number, setting, whole_number

OWNER = "serve-env --http"
#: Default cap on one tool call's arguments (their JSON, in bytes). Without one, a single call could store a
#: value of any size in the session state, and every later list call would return it again.
DEFAULT_MAX_ARGUMENT_BYTES = 1_000_000

if TYPE_CHECKING:
    from envfactory_assets.runtime.bounded_json import JsonBounds


@dataclasses.dataclass(frozen=True)
class HttpSettings:
    """How many MCP sessions one ``serve-env --http`` process holds, for how long, and how big a call may be.

    Raises:
        SettingError: a value outside its range (checked when built).
    """

    max_sessions: int = setting(
        256,
        "most MCP sessions open at once (256: GRPO's num_generations 8 x a batch of 32 prompts), each with its "
        "own sandbox worker process (about 23 MiB, so about 6 GiB with every slot taken); one more initialize "
        "is refused with HTTP 503 and a session_capacity JSON-RPC error",
    )
    idle_timeout_s: float = setting(
        600.0,
        "a session with no request in flight and no open GET stream for this many seconds is ended and its "
        "worker stopped (its id answers 404 afterwards)",
    )
    max_argument_bytes: int = setting(
        DEFAULT_MAX_ARGUMENT_BYTES,
        "most bytes of one call's arguments as JSON; a larger call is a too_large tool error and does not run",
    )

    def __post_init__(self) -> None:
        whole_number(OWNER, "max_sessions", self.max_sessions, 1, 4096)
        finite_number(OWNER, "idle_timeout_s", self.idle_timeout_s, 0, None, low_open=True)
        whole_number(OWNER, "max_argument_bytes", self.max_argument_bytes, 1, 1 << 30)

    def body_bounds(self) -> JsonBounds:
        """The bounds of one request body: room for the largest arguments a call may have (twice, for
        escaping) and 1 MiB more, as the stdio server sizes its lines; a decoded size of at least the bounded
        reader's default; its default depth."""
        from envfactory_assets.runtime.bounded_json import DEFAULT_MAX_DECODED_BYTES, JsonBounds

        max_bytes = 2 * self.max_argument_bytes + (1 << 20)
        return JsonBounds(max_bytes=max_bytes, max_decoded_bytes=max(DEFAULT_MAX_DECODED_BYTES, max_bytes))


OPENENV_OWNER = "serve-openenv"


@dataclasses.dataclass(frozen=True)
class SessionSettings:
    """How many episodes a server holds and for how long.

    Raises:
        SettingError: a value outside its range (checked when built).
    """

    max_sessions: int = setting(
        256,
        "most episodes one server process holds open at once; one more reset is refused with a session_capacity "
        "error (256: GRPO's num_generations 8 x a batch of 32 prompts)",
    )
    idle_timeout_s: float = setting(
        600.0, "an episode that receives no request for this many seconds is closed (episode_expired afterwards)"
    )
    max_steps: int = setting(
        64,
        "most steps (tool calls and malformed calls) in one episode; the step that reaches it ends the episode "
        "and scores it as if the final answer had been given",
    )
    max_argument_bytes: int = setting(
        1_000_000, "most bytes of one call's arguments as JSON; a larger call is not run and counts as malformed"
    )
    workers: int = setting(
        1,
        "sandbox worker sets the episodes are spread over (each runs one tool call at a time and keeps one "
        "process per environment it has loaded, about 23 MiB each)",
    )
    open_tasks: int = setting(
        32,
        "tasks each worker set keeps opened for their next episodes (the initial state loaded once and shared "
        "copy-on-write by every episode of the task, the gold replay done once; two episodes each in the worker), "
        "the least recently used closed past it; 0 loads the initial state for every episode",
    )

    def __post_init__(self) -> None:
        whole_number(OPENENV_OWNER, "max_sessions", self.max_sessions, 1, 100_000)
        whole_number(OPENENV_OWNER, "open_tasks", self.open_tasks, 0, 100_000)
        finite_number(OPENENV_OWNER, "idle_timeout_s", self.idle_timeout_s, 0, None, low_open=True)
        whole_number(OPENENV_OWNER, "max_steps", self.max_steps, 1, 100_000)
        whole_number(OPENENV_OWNER, "max_argument_bytes", self.max_argument_bytes, 1, 1 << 30)
        whole_number(OPENENV_OWNER, "workers", self.workers, 1, 64)
