"""Real MCP servers' tool lists as source resources (the second resource kind, next to OpenAPI).

Each installed server is started over stdio with the ``mcp`` SDK client, asked for its tools
(``tools/list``, every page), and stopped; the answer becomes a canonical JSON *tool-list document*
written under ``$ENVFACTORY_HOME/mcp_tool_lists/``. Its sha256 is the hash of those exact bytes.
A server that is missing, fails to start, or does not answer within the timeout gives a
:class:`McpFailure` instead; the caller goes on with the others.

Servers live outside the main virtualenv (``scripts/setup_mcp.sh`` installs them):
PyPI servers in ``$ENVFACTORY_HOME/mcp-servers/venv``, npm servers in ``$ENVFACTORY_HOME/mcp-servers/npm``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
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
                    "title": {"type": "string", "maxLength": 300},
                    "annotations": {"type": "object"},
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


def _npm(name: str, package: str, version: str, *args: str, **env: str) -> McpServer:
    """An npm server started as ``node <its dist/index.js> *args``."""
    entry = f"./npm/node_modules/{package}/dist/index.js"
    return McpServer(name, "npm", package, version, "node", (entry, *args), dict(env))


# Pinned in scripts/setup_mcp.sh as well; versions checked against the registries' metadata. Servers that need
# credentials (or a database) to run but not to list their tools get dummy values: the listing runs without network.
# Left out: mcp-server-sqlite 2025.4.25 (fails on start with the current mcp SDK) and server-redis (connects to
# Redis before it answers).
KNOWN_SERVERS: tuple[McpServer, ...] = (
    McpServer(
        "time", "pypi", "mcp-server-time", "2026.10.19", "./venv/bin/mcp-server-time", ("--local-timezone", "UTC")
    ),
    McpServer("git", "pypi", "mcp-server-git", "2026.10.19", "./venv/bin/mcp-server-git"),
    McpServer("fetch", "pypi", "mcp-server-fetch", "2026.10.24", "./venv/bin/mcp-server-fetch"),
    _npm("memory", "@modelcontextprotocol/server-memory", "2026.8.31", MEMORY_FILE_PATH="memory.jsonl"),
    _npm("filesystem", "@modelcontextprotocol/server-filesystem", "2026.8.31", "files"),
    _npm("everything", "@modelcontextprotocol/server-everything", "2026.8.31"),
    _npm("sequential-thinking", "@modelcontextprotocol/server-sequential-thinking", "2026.8.31"),
    _npm("github", "@modelcontextprotocol/server-github", "2025.4.8", GITHUB_PERSONAL_ACCESS_TOKEN="dummy-token"),
    _npm(
        "gitlab",
        "@modelcontextprotocol/server-gitlab",
        "2025.4.25",
        GITLAB_PERSONAL_ACCESS_TOKEN="dummy-token",
        GITLAB_API_URL="https://gitlab.invalid/api/v4",
    ),
    _npm("slack", "@modelcontextprotocol/server-slack", "2025.4.25", SLACK_BOT_TOKEN="xoxb-dummy", SLACK_TEAM_ID="T0"),
    _npm("brave-search", "@modelcontextprotocol/server-brave-search", "0.6.2", BRAVE_API_KEY="dummy-key"),
    _npm("google-maps", "@modelcontextprotocol/server-google-maps", "0.6.2", GOOGLE_MAPS_API_KEY="dummy-key"),
    _npm("postgres", "@modelcontextprotocol/server-postgres", "0.6.2", "postgresql://127.0.0.1/none"),
)
#: The pinned servers' tool lists as committed with the package (written by ``scripts/setup_mcp.sh``): what
#: ``source_resources`` reads, so that neither the quick start nor CI installs a server.
COMMITTED_DIR = Path(__file__).resolve().with_name(TOOL_LISTS_DIR)


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
                            **({"title": t.title} if t.title else {}),
                            **(
                                {"annotations": t.annotations.model_dump(mode="json", exclude_none=True)}
                                if t.annotations
                                else {}
                            ),
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


def _interpreter_home(servers_root: Path) -> list[str]:
    """Host folders a server's interpreter needs besides ``/usr``: the base Python of the servers' venv (its
    ``pyvenv.cfg`` ``home``) and the installation of ``node``, when either lives outside ``/usr``."""
    homes: list[str] = []
    cfg = servers_root / "venv" / "pyvenv.cfg"
    for line in cfg.read_text().splitlines() if cfg.exists() else []:
        key, _, value = line.partition("=")
        if key.strip() == "home":
            homes.append(str(Path(value.strip()).resolve().parent))
    node = shutil.which("node")
    if node:
        homes.append(str(Path(node).resolve().parents[1]))
    return sorted({h for h in homes if h != "/usr" and not h.startswith("/usr/")})


def sandboxed(command: str, args: list[str], env: dict[str, str], servers_root: Path, bwrap: str) -> list[str]:
    """The bubblewrap command line that runs one MCP server (``command *args``) with no network.

    The server sees, read-only, ``/usr`` (with the ``/lib``/``/lib64`` links), ``servers_root`` (its
    packages) and its interpreter's installation; its working folder is a private tmpfs at ``/tmp`` (holding an
    empty ``files`` folder for the filesystem server); every namespace is unshared (no network), and the
    environment is exactly ``env`` plus ``PATH``, ``HOME`` and ``LC_ALL``. The same boundary as the sandbox of
    generated code (:func:`envfactory_assets.runtime.isolation.bwrap_command`) but with the servers' folders
    bound instead of the project's, and the server process keeps its own uid inside the namespace.
    """
    line = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    # the tmpfs first: a servers folder below /tmp must land on top of it, not under it
    line += ["--hostname", "sandbox", "--tmpfs", "/tmp", "--dir", "/tmp/files", "--ro-bind", "/usr", "/usr"]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin")):
        if os.path.islink(link):
            line += ["--symlink", target, link]
    for path in [*_interpreter_home(servers_root), str(servers_root)]:
        line += ["--ro-bind", path, path]
    line += ["--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp"]
    line += ["--clearenv"]
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LC_ALL": "C.UTF-8"}
    for key, value in sorted({**base, **env}.items()):
        line += ["--setenv", key, value]
    return [*line, "--", command, *args]


def read_installed_servers(
    home: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    servers: tuple[McpServer, ...] = KNOWN_SERVERS,
    servers_root: Path | None = None,
    out_dir: Path | None = None,
    bwrap: str | None = None,
) -> tuple[list[Path], list[McpFailure]]:
    """Read every installed server's tool list into ``out_dir/<name>.json`` (default ``home/mcp_tool_lists``).

    Servers are looked for under ``servers_root`` (default ``home/mcp-servers``). With ``bwrap`` (the
    bubblewrap executable) each server runs in the sandbox of :func:`sandboxed` (no network). Returns
    ``(written files, failures)``; a server whose package is not installed is a ``not_installed``
    failure. A file is only replaced once its new content is complete; it holds the document as JSON with
    sorted keys, indented when written into ``out_dir`` (readable diffs of committed lists).
    """
    home = home.resolve()
    root = (servers_root or home / SERVERS_DIR).resolve()
    pretty = out_dir is not None
    out_dir = out_dir or home / TOOL_LISTS_DIR
    written: list[Path] = []
    failures: list[McpFailure] = []
    for server in servers:
        version = _installed_version(server, root) if root.is_dir() else None
        if version is None:
            failures.append(
                McpFailure(
                    server.name, "not_installed", f"{server.package} not found under {root} (run scripts/setup_mcp.sh)"
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
        command, args = _resolve(root, server.command), [_resolve(root, a) for a in server.args]
        if bwrap:
            command, args, env = bwrap, sandboxed(command, args, env, root, bwrap)[1:], {}
        result = read_server(
            command,
            args,
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
        pretty_json = orjson.dumps(result, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
        tmp.write_bytes(pretty_json if pretty else canonical_bytes(result))
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


def main(argv: list[str] | None = None) -> int:
    """``python -m envfactory_assets.sources.mcp_tools SERVERS_ROOT OUT_DIR``: list every pinned server installed
    under ``SERVERS_ROOT`` in the bubblewrap sandbox (no network) and write its tool list to ``OUT_DIR``; exits 1
    when a pinned server is missing or fails, or bubblewrap is not installed."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m envfactory_assets.sources.mcp_tools", description=main.__doc__)
    parser.add_argument("servers_root", type=Path, help="folder holding venv/ and npm/ of the MCP servers")
    parser.add_argument("out_dir", type=Path, help="folder the tool lists are written to (<server>.json)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a server has to list its tools")
    args = parser.parse_args(argv)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        print("error: bubblewrap (bwrap) is not installed; the servers are only listed inside it")
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    written, failures = read_installed_servers(
        args.servers_root, args.timeout, servers_root=args.servers_root, out_dir=args.out_dir, bwrap=bwrap
    )
    for path in written:
        document = orjson.loads(path.read_bytes())
        print(
            f"{path.name}: {len(document['tools'])} tools ({document['package']['name']} "
            f"{document['package']['version']}, {document['package']['license']})"
        )
    for failure in failures:
        print(f"error: {failure.server}: {failure.reason}: {failure.detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
