"""Serve a verified environment as an MCP server over stdio (``envfactory serve-env <env-id>``).

Plain Python (no Dagster): :func:`load_environment_from_store` reads a verified environment from the
store, :func:`build_server` turns it into an MCP server (``mcp`` SDK 2.x, low-level ``Server``) whose
tools are exactly the environment's tools, and :func:`serve_stdio` runs it on stdin/stdout. Every tool
call runs in the project's sandbox worker; one server run is one episode, so the state persists across
the calls of one session.
"""

from envfactory_assets.mcp_server.loading import EnvironmentNotServable, load_environment_from_store
from envfactory_assets.mcp_server.server import build_server, resolve_initial_state, serve_stdio, tool_definitions
from envfactory_assets.mcp_server.session import EnvironmentSession

__all__ = [
    "EnvironmentNotServable",
    "EnvironmentSession",
    "build_server",
    "load_environment_from_store",
    "resolve_initial_state",
    "serve_stdio",
    "tool_definitions",
]
