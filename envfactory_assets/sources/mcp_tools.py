"""Real MCP servers' tool lists as source resources (the second resource kind, next to OpenAPI).

Each installed server is started over stdio with the ``mcp`` SDK client, asked for its tools
(``tools/list``, every page), and stopped; the answer becomes a canonical JSON *tool-list document*
written under ``$ENVFACTORY_HOME/mcp_tool_lists/``. Its sha256 is the hash of those exact bytes.
A server that is missing, fails to start, or does not answer within the timeout gives a
:class:`McpFailure` instead; the caller goes on with the others.

Servers live outside the main virtualenv (``scripts/setup.sh`` installs them):
PyPI servers in ``$ENVFACTORY_HOME/mcp-servers/venv``, npm servers in ``$ENVFACTORY_HOME/mcp-servers/npm``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson

MCP_KIND = "mcp_tool_list"  # source_resources.kind of a tool list
TOOL_LIST_FORMAT = "envfactory.mcp_tool_list/1"
DEFAULT_TIMEOUT_S = 20.0
TOOL_LISTS_DIR = "mcp_tool_lists"
SERVERS_DIR = "mcp-servers"
MAX_PAGES = 50
MAX_NESTING = 64
"""Deepest nesting of objects/arrays a tool-list document may have. Real tool schemas stay under 20; the
canonical JSON encoder (orjson) stops at 255 levels, and a deeper document crashed the source stage."""

# The tool-list document: what the reader writes and what a user folder may hold.
TOOL_LIST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["format", "server", "package", "tools"],
    "properties": {
        "format": {"const": TOOL_LIST_FORMAT},
        "server": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "version": {"type": "string", "maxLength": 100},
            },
        },
        "package": {
            "type": "object",
            "required": ["name", "version", "license"],
            "properties": {
                "ecosystem": {"enum": ["pypi", "npm", "user"]},
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "version": {"type": "string", "maxLength": 100},
                "license": {"type": "string", "maxLength": 300},
            },
        },
        "tools": {
            "type": "array",
            "minItems": 1,
            "maxItems": 500,
            "items": {
                "type": "object",
                "required": ["name", "input_schema"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$"},
                    "description": {"type": "string", "maxLength": 20000},
                    "input_schema": {"type": "object"},
                    "output_schema": {"type": ["object", "null"]},
                },
            },
        },
    },
}


class ToolListError(ValueError):
    """A tool-list document that does not match :data:`TOOL_LIST_SCHEMA`; the message names the file."""


@dataclass(frozen=True)
class McpServer:
    """One installable MCP server: how to start it and which package it comes from.

    ``command``/``args`` are relative to ``$ENVFACTORY_HOME/mcp-servers`` when they start with ``./``.
    """

    name: str
    ecosystem: str  # "pypi" | "npm"
    package: str
    version: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


# Pinned in scripts/setup.sh as well; versions checked against the registries' metadata.
KNOWN_SERVERS: tuple[McpServer, ...] = (
    McpServer(
        "time", "pypi", "mcp-server-time", "2026.10.19", "./venv/bin/mcp-server-time", ("--local-timezone", "UTC")
    ),
    McpServer("git", "pypi", "mcp-server-git", "2026.10.19", "./venv/bin/mcp-server-git"),
    McpServer(
        "memory",
        "npm",
        "@modelcontextprotocol/server-memory",
        "2026.8.31",
        "node",
        ("./npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js",),
        {"MEMORY_FILE_PATH": "./work/memory.jsonl"},
    ),
    McpServer(
        "filesystem",
        "npm",
        "@modelcontextprotocol/server-filesystem",
        "2026.8.31",
        "node",
        ("./npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "./work/files"),
    ),
)


@dataclass(frozen=True)
class McpFailure:
    """A server that gave no tool list: ``reason`` is a code, ``detail`` says what happened."""

    server: str
    reason: str  # not_installed | start_failed | timeout | protocol_error | invalid_tool_list
    detail: str


def canonical_bytes(document: dict[str, Any]) -> bytes:
    """Canonical JSON (sorted keys, no spaces, UTF-8) of a tool-list document."""
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def _nesting(value: Any, stop: int) -> int:
    """Depth of nested dicts/lists in ``value`` (a scalar is 0), counted without recursion; stops past ``stop``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > stop:
                return deepest
            stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def validate_tool_list(document: Any, origin: str) -> dict[str, Any]:
    """Check ``document`` against :data:`TOOL_LIST_SCHEMA` and unique tool names.

    Raises:
        ToolListError: naming ``origin`` (the file) and the first problems with their JSON paths, or saying
            the document nests deeper than :data:`MAX_NESTING`.
    """
    from jsonschema import Draft202012Validator

    from envfactory_assets.sources.problems import schema_error_detail, schema_error_where

    depth = _nesting(document, MAX_NESTING)
    if depth > MAX_NESTING:
        raise ToolListError(f"{origin}: nested more than {MAX_NESTING} levels deep (objects and arrays)")
    errors = sorted(Draft202012Validator(TOOL_LIST_SCHEMA).iter_errors(document), key=lambda e: list(e.path))
    if errors:
        # the validator's own messages start with the offending value; say which rule broke instead
        shown = "; ".join(f"at {schema_error_where(e)}: {schema_error_detail(e)[:160]}" for e in errors[:3])
        raise ToolListError(f"{origin}: not a valid MCP tool list ({len(errors)} problem(s)): {shown}")
    names = [t["name"] for t in document["tools"]]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ToolListError(f"{origin}: tool names repeat: {dupes}")
    return document


def _package_license(server: McpServer, servers_root: Path) -> str:
    """The licence the installed package declares in its metadata (``unknown`` when it says nothing)."""
    if server.ecosystem == "npm":
        manifest = servers_root / "npm" / "node_modules" / server.package / "package.json"
        data = json.loads(manifest.read_text())
        lic = data.get("license")
        text = lic if isinstance(lic, str) else "unknown"
        if text.startswith("SEE LICENSE IN"):
            target = manifest.parent / text.split()[-1]
            text += "" if target.exists() else " (file not shipped in the package)"
        return text
    dist = servers_root / "venv" / "lib"
    metas = sorted(dist.glob(f"python3*/site-packages/{server.package.replace('-', '_')}-*.dist-info/METADATA"))
    for line in metas[0].read_text().splitlines() if metas else []:
        if line.startswith("License:") or line.startswith("License-Expression:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _installed_version(server: McpServer, servers_root: Path) -> str | None:
    if server.ecosystem == "npm":
        manifest = servers_root / "npm" / "node_modules" / server.package / "package.json"
        return json.loads(manifest.read_text()).get("version") if manifest.exists() else None
    metas = sorted(
        (servers_root / "venv" / "lib").glob(f"python3*/site-packages/{server.package.replace('-', '_')}-*.dist-info")
    )
    return metas[0].name.removesuffix(".dist-info").rsplit("-", 1)[1] if metas else None


def installed_servers(servers_root: Path, servers: tuple[McpServer, ...] = KNOWN_SERVERS) -> list[str]:
    """Names of the ``servers`` whose packages are installed under ``servers_root``."""
    return [s.name for s in servers if servers_root.is_dir() and _installed_version(s, servers_root)]


def _resolve(servers_root: Path, part: str) -> str:
    return str(servers_root / part[2:]) if part.startswith("./") else part


async def _list_tools(
    command: str, args: list[str], env: dict[str, str], cwd: Path, timeout_s: float, errlog: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import PaginatedRequestParams

    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    with anyio.fail_after(timeout_s):
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                tools: list[dict[str, Any]] = []
                cursor = None
                for _ in range(MAX_PAGES):
                    page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                    tools += [
                        {
                            "name": t.name,
                            "description": t.description or "",
                            "input_schema": t.input_schema,
                            "output_schema": t.output_schema,
                        }
                        for t in page.tools
                    ]
                    cursor = page.next_cursor
                    if not cursor:
                        break
                info = init.server_info
                return {"name": info.name, "version": info.version or ""}, tools


def read_server(
    command: str,
    args: list[str],
    *,
    package: dict[str, str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    server_label: str = "",
) -> dict[str, Any] | McpFailure:
    """Start one MCP server over stdio, list its tools, stop it; the tool-list document or a failure.

    ``package`` is ``{"ecosystem", "name", "version", "license"}``. The whole exchange (start,
    initialize, every ``tools/list`` page) must finish within ``timeout_s`` seconds; on any exit the
    SDK's stdio client terminates the server's process tree. Never raises for a misbehaving server.
    """
    label = server_label or package.get("name", command)
    work = cwd or Path.cwd()
    stderr_path = work / f".{Path(command).name}.stderr"
    try:
        with open(stderr_path, "w") as errlog:
            server_info, tools = anyio.run(_list_tools, command, args, env or {}, work, timeout_s, errlog)
    except TimeoutError:
        return McpFailure(label, "timeout", f"no tool list within {timeout_s:g} s")
    except OSError as exc:
        return McpFailure(label, "start_failed", f"{type(exc).__name__}: {exc}"[:300])
    except Exception as exc:  # anything the server said or did that the protocol does not allow
        tail = stderr_path.read_text(errors="replace")[-300:] if stderr_path.exists() else ""
        return McpFailure(label, "protocol_error", f"{type(exc).__name__}: {str(exc)[:200]} {tail}".strip())
    finally:
        stderr_path.unlink(missing_ok=True)
    document = {
        "format": TOOL_LIST_FORMAT,
        "server": server_info,
        "package": package,
        "tools": sorted(tools, key=lambda t: t["name"]),
    }
    try:
        return validate_tool_list(document, f"tools/list answer of {label}")
    except ToolListError as exc:
        return McpFailure(label, "invalid_tool_list", str(exc)[:400])


def read_installed_servers(
    home: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    servers: tuple[McpServer, ...] = KNOWN_SERVERS,
    servers_root: Path | None = None,
) -> tuple[list[Path], list[McpFailure]]:
    """Read every installed server's tool list into ``home/mcp_tool_lists/<name>.json``.

    Servers are looked for under ``servers_root`` (default ``home/mcp-servers``). Returns
    ``(written files, failures)``; a server whose package is not installed is a ``not_installed``
    failure. A file is only replaced once its new content is complete.
    """
    home = home.resolve()
    root = (servers_root or home / SERVERS_DIR).resolve()
    out_dir = home / TOOL_LISTS_DIR
    written: list[Path] = []
    failures: list[McpFailure] = []
    for server in servers:
        version = _installed_version(server, root) if root.is_dir() else None
        if version is None:
            failures.append(
                McpFailure(
                    server.name, "not_installed", f"{server.package} not found under {root} (run scripts/setup.sh)"
                )
            )
            continue
        (root / "work" / "files").mkdir(parents=True, exist_ok=True)
        package = {
            "ecosystem": server.ecosystem,
            "name": server.package,
            "version": version,
            "license": _package_license(server, root),
        }
        env = {k: _resolve(root, v) for k, v in server.env.items()}
        result = read_server(
            _resolve(root, server.command),
            [_resolve(root, a) for a in server.args],
            package=package,
            env=env,
            cwd=root / "work",
            timeout_s=timeout_s,
            server_label=server.name,
        )
        if isinstance(result, McpFailure):
            failures.append(result)
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / f"{server.name}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_bytes(canonical_bytes(result))
        os.replace(tmp, target)
        written.append(target)
    return written, failures


def load_tool_list(path: Path) -> tuple[dict[str, Any], str]:
    """Read and validate a tool-list file; returns ``(document, sha256 of its canonical JSON)``.

    Raises:
        ToolListError: for unparseable JSON or a document that breaks the schema (names the file).
    """
    from envfactory_assets.sources.problems import load_error_detail

    try:
        document = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ToolListError(f"{path}: {load_error_detail(exc)}") from exc
    validate_tool_list(document, str(path))
    return document, hashlib.sha256(canonical_bytes(document)).hexdigest()
