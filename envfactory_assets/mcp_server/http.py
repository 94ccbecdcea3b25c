"""Serve a verified environment as an MCP server over Streamable HTTP (``envfactory serve-env ENV_ID --http``).

One server process holds many MCP sessions at once; each session is its own episode: the first ``tools/list``
or ``tools/call`` of a session starts a sandbox worker of its own (its own process under bubblewrap, seccomp
and its control group) with an episode on the initial state, the state persists across that session's calls,
and no session ever sees another's. The ``mcp`` SDK's ``StreamableHTTPSessionManager`` keeps the sessions:

- at most ``max_sessions`` are open; one more ``initialize`` is answered HTTP 503 with a JSON-RPC error
  (``session_capacity: ...``, the cap, and what to do), and the sessions already open go on;
- a session with no request in flight (and no open GET stream: a connected SDK client keeps one) for
  ``idle_timeout_s`` is ended by the SDK; so is one the client ends (``DELETE``); either way its worker is
  stopped (the connection's exit stack) and its id answers 404 afterwards.

Every request body passes :class:`~envfactory_assets.serving.bounded_asgi.BoundedJsonMiddleware` first (its
bytes, nesting depth and the estimated size of its decoded objects, :mod:`envfactory_assets.runtime.
bounded_json`): a body past a bound is answered HTTP 413 with a JSON-RPC error and never decoded; one holding
``NaN`` or ``Infinity`` outside a string is answered HTTP 400 with a JSON-RPC parse error.

A sandbox worker dies with the *thread* that started it (bubblewrap's ``--die-with-parent`` is the kernel's
parent-death signal, which follows threads), and anyio, where blocking work usually goes, ends a worker thread
idle for 10 s as soon as another blocking call starts. So each session's worker is started, called and stopped
on a thread owned by that session (:class:`~envfactory_assets.mcp_server.session.SessionEpisode`), which lives
exactly as long as the session.

The sessions need the initialize handshake: the 2026-07-28 protocol's requests carry no session, so this server
advertises only the handshake-era versions in ``server/discover`` (the SDK's ``Client`` then falls back to
``initialize``), and a ``tools/call`` without a session is refused with a JSON-RPC error saying so.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from envfactory_assets.mcp_server.server import environment_server, resolve_initial_state
from envfactory_assets.mcp_server.session import SessionEpisode
from envfactory_assets.runtime.sandbox import SandboxLimits
from envfactory_assets.serving.bounded_asgi import BoundedJsonMiddleware
from envfactory_assets.serving.serve_env_settings import DEFAULT_MAX_ARGUMENT_BYTES, HttpSettings

#: The path of the MCP endpoint, as the SDK's ``streamable_http_app`` names it.
MCP_PATH = "/mcp"
#: JSON-RPC "server error" code of a session refused at the cap (the implementation-defined range).
SESSION_CAPACITY = -32000
_SESSION_ID_HEADER = b"mcp-session-id"
#: Seconds a stop of the server waits for open connections (a connected client's GET stream never ends).
_GRACEFUL_SHUTDOWN_S = 3


def _connection(ctx: ServerRequestContext[Any]) -> Connection:
    """The request's :class:`Connection`: one per MCP session on Streamable HTTP, with the ``state`` and the
    ``exit_stack`` (unwound when the session ends: DELETE, idle timeout, shutdown) the SDK provides for
    per-connection resources. SDK 2.3's ``Context.connection`` exposes it, but the low-level server's handlers
    get a ``ServerRequestContext``, which holds it only on its ``session``; ``test_serve_env_http`` fails
    if that changes."""
    connection = getattr(ctx, "connection", None)
    return connection if isinstance(connection, Connection) else ctx.session._connection


class SessionEpisodes:
    """The episodes of one HTTP server's open MCP sessions, by session id (the server's lifespan state)."""

    def __init__(
        self, environment: dict[str, Any], start_state: dict[str, Any], limits: SandboxLimits | None = None
    ) -> None:
        self._environment = environment
        self._start_state = start_state
        self._limits = limits
        self._lock = threading.Lock()
        self._episodes: dict[str, SessionEpisode] = {}

    def of(self, ctx: ServerRequestContext[Any]) -> SessionEpisode:
        """The episode of the request's MCP session, opened at the session's first use and stopped when the
        session ends (its connection's exit stack).

        Raises:
            MCPError: ``INVALID_REQUEST``: the request belongs to no session (a 2026-07-28 single-exchange
                request).
        """
        connection = _connection(ctx)
        episode = connection.state.get(SessionEpisode)
        if episode is not None:
            return episode
        session_id = connection.session_id
        if session_id is None:
            raise MCPError(
                types.INVALID_REQUEST,
                "serve-env --http keeps one episode per MCP session and this request belongs to none (protocol "
                "2026-07-28 requests are sessionless): connect with the initialize handshake (protocol versions "
                f"{', '.join(HANDSHAKE_PROTOCOL_VERSIONS)}), as the mcp SDK's Client does against this server",
            )
        episode = SessionEpisode(session_id, self._environment, self._start_state, self._limits)
        connection.state[SessionEpisode] = episode
        with self._lock:
            self._episodes[session_id] = episode
        connection.exit_stack.push_async_callback(self._end, episode)
        return episode

    async def _end(self, episode: SessionEpisode) -> None:
        with self._lock:
            self._episodes.pop(episode.session_id, None)
        await episode.aclose()

    def open_count(self) -> int:
        """How many sessions have an episode."""
        with self._lock:
            return len(self._episodes)

    def close_all(self) -> None:
        """Stop every episode's worker (the server is stopping)."""
        with self._lock:
            episodes, self._episodes = list(self._episodes.values()), {}
        for episode in episodes:
            try:
                episode.close()
            except Exception as exc:  # one worker that fails to stop must not keep the others
                print(f"serve-env: could not stop the worker of a session: {exc}", file=sys.stderr)


def build_http_server(
    environment: dict[str, Any],
    initial_state: str | dict[str, Any] = "valid",
    limits: SandboxLimits | None = None,
    max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
) -> Server[SessionEpisodes]:
    """The MCP server of ``environment`` for Streamable HTTP: the tools, checks and results of
    :func:`~envfactory_assets.mcp_server.server.build_server`, with one episode per MCP session (module
    docstring) instead of one per server run.

    Raises:
        ValueError: as :func:`~envfactory_assets.mcp_server.server.build_server`.
    """
    start_state = resolve_initial_state(environment, initial_state)

    @asynccontextmanager
    async def lifespan(_: Server[SessionEpisodes]) -> AsyncIterator[SessionEpisodes]:
        episodes = SessionEpisodes(environment, start_state, limits)
        try:
            yield episodes
        finally:
            episodes.close_all()

    async def run_call(
        ctx: ServerRequestContext[SessionEpisodes], name: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        return await ctx.lifespan_context.of(ctx).call(name, arguments)

    def start_episode(ctx: ServerRequestContext[SessionEpisodes]) -> None:
        if _connection(ctx).session_id is not None:  # the worker starts while the client reads the tools
            ctx.lifespan_context.of(ctx)

    server = environment_server(
        environment,
        initial_state,
        max_argument_bytes,
        lifespan,
        run_call,
        instructions_extra=" (each MCP session has its own episode)",
        on_list_tools=start_episode,
    )

    async def discover(ctx: ServerRequestContext[SessionEpisodes], params: types.RequestParams) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS),
            capabilities=server.get_capabilities(),
            instructions=server.instructions,
        )

    server.add_request_handler("server/discover", types.RequestParams, discover)
    return server


def _json_rpc_error(code: int, message: str, data: dict[str, Any]) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message, "data": data}},
        ensure_ascii=False,
    ).encode()


def _refused_body(error: dict[str, Any]) -> bytes:
    """The JSON-RPC error of a body the bounded reader refused: a parse error when it is not JSON, else an
    invalid request."""
    code = types.PARSE_ERROR if error["type"] == "invalid_json" else types.INVALID_REQUEST
    return _json_rpc_error(code, error["message"], error)


class CapacityMessage:
    """Replaces the body of the SDK's refusal of a new session at its cap (HTTP 503 to a POST without a
    session id: the one 503 the SDK sends there) by a JSON-RPC error that names the cap and what to do."""

    def __init__(self, app: Any, settings: HttpSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or any(k.lower() == _SESSION_ID_HEADER for k, _ in scope.get("headers") or []):
            await self.app(scope, receive, send)
            return
        refused = False

        async def send_clear(message: dict[str, Any]) -> None:
            nonlocal refused
            if message["type"] == "http.response.start" and message["status"] == 503:
                refused = True
                body = _json_rpc_error(
                    SESSION_CAPACITY,
                    f"session_capacity: this server holds {self.settings.max_sessions} open MCP sessions, its cap "
                    f"(--max-sessions {self.settings.max_sessions}); retry once a session ends (its client closes "
                    f"it, or it is idle for {self.settings.idle_timeout_s:g} s) or start serve-env --http with a "
                    "larger --max-sessions",
                    {"type": "session_capacity", "max_sessions": self.settings.max_sessions},
                )
                await send(
                    {
                        "type": "http.response.start",
                        "status": 503,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"1"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
            if not refused:
                await send(message)

        await self.app(scope, receive, send_clear)


def create_http_app(server: Server[SessionEpisodes], settings: HttpSettings, host: str = "127.0.0.1") -> Any:
    """The ASGI app serving ``server`` at ``/mcp``: the SDK's Streamable HTTP app (sessions, the cap, the idle
    timeout, DNS-rebinding protection when ``host`` is local) behind the bounded reader and the clear capacity
    error."""
    bounds = settings.body_bounds()
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=True,
        max_request_body_size=bounds.max_bytes,  # the bounded reader in front answers first, more clearly
        session_idle_timeout=settings.idle_timeout_s,
        max_sessions=settings.max_sessions,
        host=host,
    )
    return BoundedJsonMiddleware(CapacityMessage(app, settings), bounds, http_error_body=_refused_body)


def serve_http(
    server: Server[SessionEpisodes], settings: HttpSettings, host: str = "127.0.0.1", port: int = 8000
) -> None:
    """Serve ``server`` over Streamable HTTP on ``host:port`` until SIGINT or SIGTERM; every session's worker is
    stopped before this returns (uvicorn waits a few seconds for open connections, then ends them)."""
    import uvicorn

    uvicorn.run(
        create_http_app(server, settings, host),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
    )
