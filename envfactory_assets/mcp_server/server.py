"""An environment as an MCP server: the SDK's low-level ``Server`` with ``tools/list`` and ``tools/call``.

The high-level ``MCPServer`` (``FastMCP`` before SDK 2.x) derives a tool's input schema from a Python
signature; the environment's tools come with their JSON Schemas, so they are registered here as raw
``Tool`` definitions on the low-level server, whose handlers run each call in the sandbox.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from envfactory_assets.mcp_server.session import SessionEpisode
from envfactory_assets.mcp_server.transport import MAX_MESSAGE_BYTES, clip, stdio_transport
from envfactory_assets.runtime.sandbox import SandboxLimits
from envfactory_assets.serving.serve_env_settings import DEFAULT_MAX_ARGUMENT_BYTES
from envfactory_assets.tooluse.tool_calls import inert_tags

if TYPE_CHECKING:  # jsonschema is imported at the first tool call, not before the server answers initialize
    from jsonschema.protocols import Validator

SERVER_NAME_PREFIX = "envfactory-"


def resolve_initial_state(environment: dict[str, Any], initial_state: str | dict[str, Any]) -> dict[str, Any]:
    """The saved state to start from: a named initial state of the environment that is meant to load
    (``valid``, ``boundary``), or a saved state given as a dict (``load`` checks it when the server starts).

    Raises:
        ValueError: an unknown name, or a state the environment is meant to reject (``invalid``).
    """
    if isinstance(initial_state, dict):
        return copy.deepcopy(initial_state)
    states = {s["name"]: s for s in environment.get("initial_states") or []}
    loadable = sorted(name for name, s in states.items() if s.get("expect") == "load")
    if initial_state not in states or states[initial_state].get("expect") != "load":
        raise ValueError(
            f"environment {environment['env_id']!r} has no loadable initial state "
            f"{initial_state!r}; choose one of {loadable}"
        )
    return copy.deepcopy(states[initial_state]["state"])


def tool_definitions(environment: dict[str, Any]) -> list[types.Tool]:
    """The MCP ``Tool`` of each ToolSpec: name, description, input schema, output schema (declared when
    its root is an object, as MCP structured output requires before protocol 2026-07-28) and hints."""
    tools = []
    for spec in environment["tools"]:
        output_schema = spec.get("output_schema")
        kind = spec.get("kind")
        tools.append(
            types.Tool(
                name=spec["name"],
                description=spec.get("description") or spec["name"],
                input_schema=copy.deepcopy(spec["input_schema"]),
                output_schema=copy.deepcopy(output_schema) if _is_object_schema(output_schema) else None,
                annotations=types.ToolAnnotations(
                    read_only_hint=bool(spec.get("read_only")),
                    destructive_hint=(
                        kind in ("update", "delete", "action", "relation_remove") if not spec.get("read_only") else None
                    ),
                    open_world_hint=False,
                ),
            )
        )
    return tools


def _is_object_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "object"


def _clipped(value: Any) -> Any:
    """``value`` with every string in it cut by :func:`clip`: error details quote the client's input."""
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, dict):
        return {k: _clipped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clipped(v) for v in value[:20]]
    return value


def _error_result(error: dict[str, Any]) -> types.CallToolResult:
    text = inert_tags(json.dumps({"error": _clipped(error)}, ensure_ascii=False, sort_keys=True))
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _validator(schema: dict[str, Any]) -> Validator:
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    return validator_for(schema, default=Draft202012Validator)(schema)


def _argument_error(validator: Validator, arguments: dict[str, Any]) -> dict[str, Any] | None:
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    path = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return {
        "type": "bad_arguments",
        "message": f"arguments{path}: {error.message}",
        "schema_path": "/".join(str(p) for p in error.absolute_schema_path),
    }


def build_server(
    environment: dict[str, Any],
    initial_state: str | dict[str, Any] = "valid",
    limits: SandboxLimits | None = None,
    max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
) -> Server[SessionEpisode]:
    """An MCP server whose tools are exactly ``environment``'s tools, each call run in a sandbox worker.

    Each run of the server (one stdio connection, one in-process client) starts its own worker and
    opens one episode on ``initial_state``; the state then persists across the calls of that session
    and is gone when the session ends. The worker starts in the background: ``initialize`` and
    ``tools/list`` are answered meanwhile, a tool call waits for it, and a worker that cannot start ends
    the run with its error. A tool error (bad arguments, missing row, a fault of the
    environment code) is an MCP tool error result (``isError``) whose text is the JSON
    ``{"error": {"type": ..., "message": ...}}``; arguments are checked against the tool's input
    schema before they reach the environment, after their size: arguments whose JSON is longer than
    ``max_argument_bytes`` are a ``too_large`` tool error and never run. Client text quoted in an error is
    cut to a few hundred characters. An unknown tool name is a protocol error (``INVALID_PARAMS``), as the
    MCP specification asks.

    Args:
        environment: the Environment dict (docs/design.md), e.g. from :func:`load_environment_from_store`.
        initial_state: ``"valid"``, ``"boundary"`` or a saved state dict.
        limits: sandbox limits of the worker; defaults to :class:`SandboxLimits()`.
        max_argument_bytes: most bytes of one call's arguments (as JSON); default 1,000,000.

    Raises:
        ValueError: ``initial_state`` names no loadable state, tool names repeat, or ``max_argument_bytes``
            is not a whole number >= 1.
    """
    start_state = resolve_initial_state(environment, initial_state)

    @asynccontextmanager
    async def lifespan(_: Server[SessionEpisode]) -> AsyncIterator[SessionEpisode]:
        # The worker starts on the episode's own thread (SessionEpisode: a worker dies with the thread that
        # started it) while the server answers initialize and tools/list; tool calls wait for it. If it cannot
        # start, its error cancels the serving loop and ends the run.
        episode = SessionEpisode("stdio", environment, start_state, limits)

        async def opened() -> None:
            await asyncio.wrap_future(episode.opened)

        try:
            async with anyio.create_task_group() as opening:
                opening.start_soon(opened)
                yield episode
        except BaseExceptionGroup as group:  # the worker's own error, not wrapped by the task group
            raise _sole(group) from None
        finally:
            episode.close()  # kills the worker: quick, and must happen even when cancelled

    async def run_call(
        ctx: ServerRequestContext[SessionEpisode], name: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        return await ctx.lifespan_context.call(name, arguments)

    return environment_server(environment, initial_state, max_argument_bytes, lifespan, run_call)


#: Runs one checked tool call in the calling request's episode: ``(ctx, tool name, arguments)`` to the
#: :meth:`EnvironmentSession.call` result (``{"ok": True, "output"}`` or ``{"ok": False, "error"}``).
RunCall = Callable[[ServerRequestContext[Any], str, dict[str, Any]], Awaitable[dict[str, Any]]]


def environment_server(
    environment: dict[str, Any],
    initial_state: str | dict[str, Any],
    max_argument_bytes: int,
    lifespan: Callable[[Server[Any]], AbstractAsyncContextManager[Any]],
    run_call: RunCall,
    instructions_extra: str = "",
    on_list_tools: Callable[[ServerRequestContext[Any]], None] | None = None,
) -> Server[Any]:
    """The MCP server of ``environment`` whose episodes are kept by ``lifespan`` and ``run_call``: the part
    :func:`build_server` (one episode per server run, stdio) and the Streamable HTTP server (one episode per
    MCP session) share: ``tools/list``, and ``tools/call``'s checks (unknown tool, argument size, input schema)
    and results, as :func:`build_server` describes them. ``on_list_tools(ctx)``, when given, runs at each
    ``tools/list`` (the HTTP server starts the session's worker there).

    Raises:
        ValueError: tool names repeat, or ``max_argument_bytes`` is not a whole number >= 1.
    """
    if not isinstance(max_argument_bytes, int) or isinstance(max_argument_bytes, bool) or max_argument_bytes < 1:
        raise ValueError(f"max_argument_bytes={max_argument_bytes!r}: expected a whole number >= 1")
    env_id = environment["env_id"]
    tools = tool_definitions(environment)
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        raise ValueError(
            f"environment {env_id!r} repeats tool names: {sorted({n for n in names if names.count(n) > 1})}"
        )
    schemas = {spec["name"]: copy.deepcopy(spec["input_schema"]) for spec in environment["tools"]}
    validators: dict[str, Validator] = {}  # made at a tool's first call: see _validator
    state_label = initial_state if isinstance(initial_state, str) else "a given saved state"

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if on_list_tools is not None:
            on_list_tools(ctx)
        return types.ListToolsResult(tools=[tool.model_copy(deep=True) for tool in tools])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        if name not in schemas:
            raise MCPError(
                types.INVALID_PARAMS, clip(f"Unknown tool: {clip(repr(name), 100)}; {env_id} has tools {names}")
            )
        arguments = params.arguments or {}
        size = len(json.dumps(arguments, ensure_ascii=False).encode())
        if size > max_argument_bytes:
            return _error_result(
                {
                    "type": "too_large",
                    "message": (
                        f"the arguments of {name} are {size} bytes of JSON; this server takes at most "
                        f"{max_argument_bytes} bytes per call (serve-env --max-argument-bytes); the call did not run"
                    ),
                }
            )
        if name not in validators:
            validators[name] = _validator(schemas[name])
        problem = _argument_error(validators[name], arguments)
        if problem is not None:
            return _error_result(problem)
        try:
            result = await run_call(ctx, name, arguments)
        except MCPError:
            raise
        except Exception as exc:  # noqa: BLE001 - a session problem must not end the connection
            return _error_result({"type": "internal", "message": f"{type(exc).__name__}: {exc}"})
        if not result.get("ok"):
            return _error_result(result.get("error") or {"type": "internal", "message": "no error detail"})
        output = result.get("output")
        return types.CallToolResult(
            # the text a client shows its model: no tag in it can end its response block or forge a call
            content=[types.TextContent(text=inert_tags(json.dumps(output, ensure_ascii=False)))],
            structured_content=output if isinstance(output, dict) else None,
        )

    return Server(
        f"{SERVER_NAME_PREFIX}{env_id}",
        version=_package_version(),
        title=f"EnvFactory environment {env_id}",
        description=f"Executable, stateful tool environment {env_id} ({environment.get('domain', '?')}) "
        "built and verified by EnvFactory-Assets",
        instructions=(
            f"Tools of the simulated API {env_id}. The state starts from the {state_label} initial "
            f"state and persists across calls in this session{instructions_extra}; errors come back as tool errors "
            'with a JSON {"error": {"type", "message"}} text.'
        ),
        lifespan=lifespan,
        get_tool_input_schema=lambda name: copy.deepcopy(schemas[name]) if name in schemas else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("envfactory-assets")
    except PackageNotFoundError:
        return "0"


async def _serve_stdio_async(server: Server[Any], max_message_bytes: int) -> None:
    async with stdio_transport(max_message_bytes) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(server: Server[Any], max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """Serve ``server`` on this process's stdin/stdout until the client closes stdin.

    Lines that are not JSON-RPC messages get JSON-RPC error replies (:mod:`.transport`), and a line longer
    than ``max_message_bytes`` is refused unread. An error that ends serving (the environment's worker could
    not start) is raised as itself, not inside the task group's ``ExceptionGroup``.
    """
    try:
        anyio.run(_serve_stdio_async, server, max_message_bytes)
    except BaseExceptionGroup as group:
        raise _sole(group) from None


def _sole(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside ``group`` (and the groups nested in it), or ``group`` when it holds several."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
