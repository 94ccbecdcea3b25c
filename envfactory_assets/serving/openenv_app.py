"""The RL tasks as an OpenEnv environment: ``openenv-core``'s ``Environment`` contract over a
:class:`~envfactory_assets.serving.sessions.SessionPool`, served by its own ``create_fastapi_app``.

OpenEnv's server makes one :class:`RLTaskEnvironment` per WebSocket connection (``/ws``, where an episode lives
as long as the connection) and one per HTTP request (``/reset``, ``/step``, ``/state``: stateless by
OpenEnv's design). The objects are thin handles: the episodes live in the pool, shared by the whole process.

- Over a WebSocket, ``reset`` opens an episode tied to the connection: the next reset or the connection's end
  closes it.
- Over HTTP, name the episode: ``reset`` with an ``episode_id`` opens an *addressable* episode that outlives
  the request; each action carries that ``episode_id``; it ends at its final answer, its step limit, or after
  the idle timeout. (Over a WebSocket a reset that names an ``episode_id`` opens one too.)

Bad requests get an error and leave the server serving: a :class:`~.errors.ServingError` is answered over HTTP
with its status and ``{"error": {"type", "message", ...}}``, over a WebSocket as OpenEnv's error frame whose
message starts with the type (``session_capacity: ...``); a body or message past the bounded reader's bounds
is refused before decoding (:mod:`.bounded_asgi`); an action that is not a :class:`ToolCallAction` gets
OpenEnv's own validation error (HTTP 422, ``VALIDATION_ERROR``).
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata

from envfactory_assets.runtime.bounded_json import DEFAULT_MAX_DECODED_BYTES, JsonBounds
from envfactory_assets.serving.bounded_asgi import BoundedJsonMiddleware
from envfactory_assets.serving.errors import BadRequest, ServingError
from envfactory_assets.serving.openenv_models import EpisodeObservation, EpisodeState, ToolCallAction
from envfactory_assets.serving.sessions import SessionPool, StepResult

RESET_OPTIONS = ("task_id", "seed", "split", "episode_id")


def message_bounds(pool: SessionPool) -> JsonBounds:
    """The bounds of one request body or WebSocket message: room for the largest arguments a call may have
    (twice, for escaping) and 1 MiB more, as ``serve-env`` sizes its lines; decoded size at least the reader's
    default; the reader's default depth."""
    max_bytes = 2 * pool.settings.max_argument_bytes + (1 << 20)
    return JsonBounds(max_bytes=max_bytes, max_decoded_bytes=max(DEFAULT_MAX_DECODED_BYTES, max_bytes))


class RLTaskEnvironment(Environment[ToolCallAction, EpisodeObservation, EpisodeState]):
    """One OpenEnv environment object (a WebSocket connection's, or one HTTP request's) over the shared pool.

    Args:
        pool: the server's episodes.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, pool: SessionPool) -> None:
        super().__init__()
        self._pool = pool
        self._episode_id: str | None = None
        self._owned = False
        self._state = EpisodeState()

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        split: str | None = None,
        **kwargs: Any,
    ) -> EpisodeObservation:
        """Open an episode (closing this connection's previous one): of ``task_id``, or of a task drawn with
        ``seed`` (within ``split``, ``"train"`` or ``"held_out"``, when given). ``episode_id`` names it and makes
        it addressable (module docstring).

        Raises:
            BadRequest, UnknownTask, EpisodeConflict, SessionCapacityError, EpisodeStartFailed: see
                :meth:`SessionPool.open`.
        """
        if kwargs:
            raise BadRequest(f"unknown reset option(s) {sorted(kwargs)[:5]}; reset takes {', '.join(RESET_OPTIONS)}")
        self._release()
        out = self._pool.open(task_id=task_id, seed=seed, split=split, episode_id=episode_id)
        self._episode_id, self._owned = out.episode_id, episode_id is None
        env_ids = list(self._pool.tasks.rows[out.task_id]["env_ids"])
        self._state = EpisodeState(episode_id=out.episode_id, task_id=out.task_id, env_ids=env_ids)
        return EpisodeObservation(
            episode_id=out.episode_id, task_id=out.task_id, env_ids=env_ids, prompt=out.prompt, tools=out.tools
        )

    def step(
        self, action: ToolCallAction, timeout_s: float | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> EpisodeObservation:
        """Execute one action in its episode (``action.episode_id``, the request's ``episode_id``, else this
        connection's). ``timeout_s`` is not used: each tool call has the sandbox's own time limit.

        Raises:
            BadRequest: no episode is named and this connection has none, or two different ones are named.
            UnknownEpisode, EpisodeExpired, EpisodeDone: that episode is not open.
        """
        named = {e for e in (action.episode_id, episode_id) if e is not None}
        if len(named) > 1:
            raise BadRequest(f"two episode ids given: {sorted(str(e)[:80] for e in named)}")
        eid = named.pop() if named else self._episode_id
        if eid is None:
            raise BadRequest("no episode: reset first (over HTTP, reset with an episode_id and pass it in each action)")
        if action.tool_name is not None:
            out = self._pool.call(eid, action.tool_name, action.arguments)
        elif action.unparsed_call is not None:
            out = self._pool.malformed(eid)
        else:
            out = self._pool.finish(eid, action.final_answer or "")
        return self._observe(out)

    @property
    def state(self) -> EpisodeState:
        """This connection's episode: its counts while open, its last state once ended."""
        if self._episode_id is not None and not self._state.done:
            try:
                session = self._pool.session(self._episode_id)
            except ServingError:
                return self._state
            return EpisodeState(
                episode_id=session.episode_id,
                task_id=session.task_id,
                env_ids=list(session.row["env_ids"]),
                step_count=session.step_count,
                n_calls=len(session.episode.calls),
                n_malformed=session.episode.n_malformed,
            )
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        tasks = self._pool.tasks
        return EnvironmentMetadata(
            name="envfactory-rl-tasks",
            description=(
                f"{len(tasks.rows)} EnvFactory RL tasks (rl_dataset version {tasks.version}) over "
                f"{len(tasks.environments)} executable tool environments; reset(task_id | seed [, split]), step a "
                "tool call or the final answer; the final step carries the reward and the state diff"
            ),
            version=tasks.version,
        )

    def close(self) -> None:
        """Close this connection's episode (not an addressable one, which outlives its request)."""
        self._release()

    def _release(self) -> None:
        if self._episode_id is not None and self._owned:
            self._pool.close_episode(self._episode_id)
        self._episode_id, self._owned = None, False

    def _observe(self, out: StepResult) -> EpisodeObservation:
        if out.episode_id == self._episode_id or self._episode_id is None:
            self._state = EpisodeState(
                episode_id=out.episode_id,
                task_id=out.task_id,
                env_ids=list(self._pool.tasks.rows[out.task_id]["env_ids"]),
                step_count=out.step_count,
                done=out.done,
                n_calls=out.n_calls,
                n_malformed=out.n_malformed,
            )
        return EpisodeObservation(
            episode_id=out.episode_id,
            task_id=out.task_id,
            env_ids=list(self._pool.tasks.rows[out.task_id]["env_ids"]),
            tool_name=out.tool_name,
            result=out.result,
            error=out.error,
            step_count=out.step_count,
            end_reason=out.end_reason,
            reward_breakdown=out.reward_breakdown,
            state_diff=out.state_diff,
            done=out.done,
            reward=out.reward,
        )


async def _serving_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServingError)
    return JSONResponse(status_code=exc.http_status, content={"error": exc.as_dict()})


def create_openenv_app(pool: SessionPool) -> FastAPI:
    """OpenEnv's FastAPI app (``create_fastapi_app``) serving ``pool``'s tasks, with the serving errors mapped to
    HTTP answers and the bounded reader in front of every body and message.

    WebSocket connections are capped at twice ``max_sessions`` (a connection that has not reset holds no
    episode, so the episode cap, with its ``session_capacity`` error, is the one met first) and reaped by
    OpenEnv after the same idle timeout as the episodes.
    """
    settings = pool.settings
    app = create_fastapi_app(
        functools.partial(RLTaskEnvironment, pool),
        ToolCallAction,
        EpisodeObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=2 * settings.max_sessions, session_timeout=settings.idle_timeout_s
        ),
    )
    app.add_exception_handler(ServingError, _serving_error)
    app.add_middleware(BoundedJsonMiddleware, bounds=message_bounds(pool))
    return app
