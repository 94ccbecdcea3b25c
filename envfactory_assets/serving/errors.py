"""The errors a served episode can end in, each with a stable ``type`` a client can branch on.

Every message starts with its type (``session_capacity: ...``), so a transport that forwards only the text
(OpenEnv's WebSocket ``EXECUTION_ERROR`` frames) still carries it; :meth:`ServingError.as_dict` gives the
structured form (``{"type", "message"}`` and any details) and :attr:`ServingError.http_status` the HTTP status
the OpenEnv app answers with.
"""

from __future__ import annotations

from typing import Any


class ServingError(Exception):
    """A request the server refuses, or an episode that cannot go on; the server itself keeps serving.

    Args:
        message: what is wrong, in words (the type is put in front).
        **details: JSON values that say more (``max_sessions``, ``task_id``...), in :meth:`as_dict`.
    """

    type = "serving_error"
    http_status = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(f"{self.type}: {message}")
        self.message = message
        self.details = details

    def as_dict(self) -> dict[str, Any]:
        """``{"type", "message", **details}``, JSON-ready."""
        return {"type": self.type, "message": self.message, **self.details}


class SessionCapacityError(ServingError):
    """The server already holds its cap of open episodes."""

    type = "session_capacity"
    http_status = 503


class UnknownTask(ServingError):
    """No served RL row has the task id asked for."""

    type = "unknown_task"
    http_status = 404


class UnknownEpisode(ServingError):
    """No open episode has the id given (never opened, closed, or ended long ago)."""

    type = "unknown_episode"
    http_status = 404


class EpisodeExpired(ServingError):
    """The episode was closed because no request came for it within the idle timeout."""

    type = "episode_expired"
    http_status = 410


class EpisodeDone(ServingError):
    """The episode has ended (final answer, step limit, or a lost worker); reset to start another."""

    type = "episode_done"
    http_status = 409


class EpisodeConflict(ServingError):
    """A reset named an episode id that an open episode already has."""

    type = "episode_conflict"
    http_status = 409


class EpisodeStartFailed(ServingError):
    """The task's environments could not be loaded or its initial state was refused in the sandbox."""

    type = "episode_start_failed"
    http_status = 503


class BadRequest(ServingError):
    """A request the server cannot act on: a step before any reset, an unknown reset option, a wrong type."""

    type = "bad_request"
    http_status = 400
