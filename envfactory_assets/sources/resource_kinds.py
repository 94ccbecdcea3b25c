"""Source resources beyond the OpenAPI corpus: MCP tool lists and a user folder of resource files.

Rows have the ``source_resources`` / ``rejected_resources`` shape of :mod:`envfactory_assets.sources.stage`;
an MCP tool list is ``kind = "mcp_tool_list"`` with ``corpus_root`` the folder holding its file.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envfactory_assets.sources.domains import classify_domain
from envfactory_assets.sources.mcp_resources import McpMappingError, resources_from_tool_list
from envfactory_assets.sources.mcp_tools import (
    COMMITTED_DIR,
    MCP_KIND,
    TOOL_LIST_FORMAT,
    ToolListError,
    load_tool_list,
)
from envfactory_assets.sources.names import snake_case, to_identifier
from envfactory_assets.sources.problems import load_error_detail, schema_error_detail, schema_error_where
from envfactory_assets.sources.row_ids import source_row_id
from envfactory_assets.sources.scan import (
    DEFAULT_MAX_BYTES,
    DOCUMENT_SUFFIXES,
    Rejection,
    SourceResource,
    entry_rejection,
    inspect_file,
    load_document,
)
from envfactory_assets.store.ids import content_id

USER_RESOURCES_DIR = "user_resources"
# The least an OpenAPI document in the user folder must have before the scanner reads it.
USER_OPENAPI_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["openapi", "info", "paths"],
    "properties": {
        "openapi": {"type": "string", "pattern": "^3\\."},
        "info": {
            "type": "object",
            "required": ["title", "version"],
            "properties": {"title": {"type": "string"}, "version": {"type": "string"}},
        },
        "paths": {"type": "object", "minProperties": 1},
    },
}


def tool_list_domain(document: dict[str, Any]) -> str | None:
    """The domain of a tool list, by the OpenAPI domain classifier over its server name, tool names and
    descriptions (each tool name read as a path: ``git_commit`` -> ``/git/commit``)."""
    pseudo_spec = {
        "info": {
            "title": f"{document['server']['name']} {document['package']['name']}",
            "description": " ".join(t.get("description", "")[:300] for t in document["tools"]),
        },
        "paths": {"/" + t["name"].replace("_", "/"): {} for t in document["tools"]},
    }
    return classify_domain(pseudo_spec)[0]


def resource_key_of(document: dict[str, Any]) -> str:
    """``mcp__<server name>`` without the words ``mcp`` and ``server`` (``memory-server`` -> ``mcp__memory``)."""
    words = [w for w in snake_case(document["server"]["name"]).split("_") if w not in ("mcp", "server")]
    return "mcp__" + to_identifier("_".join(words) or document["package"]["name"], fallback="server", max_len=40)


def tool_list_resource(path: Path, root: Path) -> SourceResource | Rejection:
    """One tool-list file as an accepted resource, or a rejection naming what is wrong with it."""
    rel = path.relative_to(root).as_posix()
    try:
        document, digest = load_tool_list(path)
    except ToolListError as exc:
        return Rejection(rel, "", "invalid_tool_list", str(exc)[:500])
    try:
        n_resources = len(resources_from_tool_list(document)[0])
    except McpMappingError as exc:  # a server of computations only (fetch, a SQL query): no state to model
        return Rejection(rel, digest, "no_stateful_resource", str(exc)[:500], len(document["tools"]))
    except Exception:  # another defect of the schemas (a remote $ref): the build names it
        n_resources = len(document["tools"])
    domain = tool_list_domain(document)
    if domain is None:
        return Rejection(rel, digest, "no_domain", "no keyword of the tool names and descriptions maps to a domain")
    server, package = document["server"], document["package"]
    return SourceResource(
        resource_key=resource_key_of(document),
        kind=MCP_KIND,
        provider=package["name"],
        service=server["name"],
        title=f"{server['name']} {server.get('version', '')} (MCP server)".replace("  ", " "),
        version=package["version"],
        license_name=package["license"][:200],
        license_url="",
        path=rel,
        sha256=digest,
        size_bytes=path.stat().st_size,
        domain=domain,
        categories=[f"mcp:{package.get('ecosystem', 'user')}"],
        n_paths=len(document["tools"]),
        n_resources=n_resources,
        resource_names=[t["name"] for t in document["tools"][:4]],
    )


def _special_file_kind(path: Path) -> str:
    """What ``path`` (links followed) is when it is neither a regular file nor a folder, e.g. ``"FIFO"``;
    empty for a regular file."""
    mode = path.stat().st_mode
    if stat.S_ISREG(mode):
        return ""
    for test, name in (
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def _user_file(path: Path, root: Path, max_bytes: int) -> SourceResource | Rejection:
    from jsonschema import Draft202012Validator

    refused = entry_rejection(path, root)
    if refused is not None:
        return refused
    rel = path.relative_to(root).as_posix()
    try:
        kind = _special_file_kind(path)
    except OSError as exc:
        return Rejection(rel, "", "unreadable", f"{rel}: cannot read its file status ({type(exc).__name__})")
    if kind:  # opening a FIFO would block the scan, a device could stream forever: never read either
        return Rejection(rel, "", "not_a_regular_file", f"{rel}: a {kind}, not a regular file; it was not read")
    if path.stat().st_size > max_bytes:
        return Rejection(rel, "", "too_large", f"{path}: {path.stat().st_size} bytes > limit {max_bytes}")
    try:
        document = load_document(path.read_bytes(), path.suffix.lower())
    except Exception as exc:  # any parser error: the file is unusable, say which and why
        return Rejection(rel, "", "unparseable", f"{path}: {load_error_detail(exc)}")
    if isinstance(document, dict) and (document.get("format") == TOOL_LIST_FORMAT or "tools" in document):
        if path.suffix.lower() != ".json":  # its sha256 is that of canonical JSON: the file must be JSON
            return Rejection(
                rel,
                "",
                "invalid_tool_list",
                f"{path}: looks like an MCP tool list, but tool lists must be JSON files (.json)",
            )
        return tool_list_resource(path, root)
    errors = list(Draft202012Validator(USER_OPENAPI_SCHEMA).iter_errors(document))
    if errors:
        first = errors[0]
        return Rejection(
            rel,
            "",
            "invalid_user_resource",
            f"{path}: neither an MCP tool list ('format': {TOOL_LIST_FORMAT!r}) nor an OpenAPI 3 "
            f"document: at {schema_error_where(first)}: {schema_error_detail(first)}",
        )
    return inspect_file(path, root, max_bytes)


def _rows(
    results: Iterable[SourceResource | Rejection], root: Path, wanted: set[str] | None, taken: set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    accepted: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for result in results:
        if isinstance(result, SourceResource) and result.resource_key in taken:
            result = Rejection(
                result.path,
                result.sha256,
                "duplicate_key",
                f"resource key {result.resource_key} already taken by another file",
                result.n_operations,
            )
        if isinstance(result, SourceResource) and wanted is not None and result.domain not in wanted:
            result = Rejection(
                result.path, result.sha256, "domain_not_selected", f"domain {result.domain}", result.n_operations
            )
        row = {**result.as_row(), "corpus_root": str(root)}
        if isinstance(result, SourceResource):
            taken.add(result.resource_key)
            row["id"] = source_row_id(row)
            accepted.append(row)
        else:
            row["id"] = content_id("rej", row)
            rejected.append(row)
    return accepted, rejected


def mcp_rows(
    domains: Iterable[str] | None = None,
    taken: set[str] | None = None,
    folder: Path | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The committed MCP tool lists (``*.json`` of ``folder``, default
    :data:`~envfactory_assets.sources.mcp_tools.COMMITTED_DIR`) as ``(accepted, rejected)`` rows.

    No server is started: ``scripts/setup_mcp.sh`` lists the pinned servers in the sandbox and commits their lists,
    so every machine reads the same tools (a live read would depend on what is installed where the run happens).
    A missing folder gives no rows; a bad file is a rejection naming it.
    """
    root = (folder or COMMITTED_DIR).resolve()
    if not root.is_dir():
        return [], []
    return _rows(
        (tool_list_resource(p, root) for p in sorted(root.glob("*.json"))),
        root,
        set(domains) if domains else None,
        taken if taken is not None else set(),
    )


def user_folder_rows(
    folder: Path,
    domains: Iterable[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    taken: set[str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every ``*.json``/``*.yaml`` file of a user folder (OpenAPI documents or MCP tool lists) as rows.

    A missing folder gives no rows. Each bad file is a rejection whose detail names the file and says what
    is wrong without quoting it: a name that is not UTF-8 (``undecodable_name``, shown with ``\\xNN``
    escapes), a symbolic link out of the folder (``link_outside_folder``, never read) or to nothing
    (``broken_link``), a FIFO, socket or device (``not_a_regular_file``, never opened), a syntax error (by line and
    column), a schema rule it breaks.
    """
    if not folder.is_dir():
        return [], []
    # every entry but a folder is listed (a broken link, a FIFO, a device too), so that each gets a row
    files = sorted(p for p in folder.rglob("*") if not p.is_dir() and p.suffix.lower() in DOCUMENT_SUFFIXES)
    return _rows(
        (_user_file(p, folder, max_bytes) for p in files),
        folder,
        set(domains) if domains else None,
        taken if taken is not None else set(),
    )


def extra_resource_rows(
    home: Path,
    domains: Iterable[str] | None,
    taken: set[str],
    include_mcp: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The committed MCP tool lists (:func:`mcp_rows`) plus the user folder ``home/user_resources``."""
    accepted, rejected = mcp_rows(domains, taken) if include_mcp else ([], [])
    more_acc, more_rej = user_folder_rows(home / USER_RESOURCES_DIR, domains, max_bytes, taken)
    return accepted + more_acc, rejected + more_rej
