"""MCP tool lists as the second resource kind: the stdio reader against the real installed servers, a
server that never answers, malformed files in the user folder, and MCP-built environments through the
unchanged verification gate.

The real servers are the ones ``scripts/setup.sh`` installs under ``$ENVFACTORY_HOME/mcp-servers``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import uuid
from pathlib import Path

import pytest

from envfactory_assets import settings
from envfactory_assets.envgen.builder import BuildError, build_mcp_environment
from envfactory_assets.sources.mcp_resources import resources_from_tool_list
from envfactory_assets.envgen.stage import environment_row, select_resources, verification_row
from envfactory_assets.sources.mcp_tools import (
    KNOWN_SERVERS,
    MCP_KIND,
    TOOL_LIST_FORMAT,
    McpFailure,
    ToolListError,
    canonical_bytes,
    installed_servers,
    load_tool_list,
    read_installed_servers,
    read_server,
    validate_tool_list,
)
from envfactory_assets.sources.resource_kinds import mcp_rows, user_folder_rows

SERVERS_ROOT = settings.envfactory_home() / "mcp-servers"
INSTALLED = installed_servers(SERVERS_ROOT)
needs_servers = pytest.mark.skipif(
    len(INSTALLED) < len(KNOWN_SERVERS),
    reason=f"MCP servers not installed under {SERVERS_ROOT} (run scripts/setup.sh); found {INSTALLED}",
)

PACKAGE = {"ecosystem": "user", "name": "notes-server", "version": "1.0.0", "license": "MIT"}


def notes_tool_list() -> dict:
    """A small hand-written tool list in the shape MCP servers answer (array argument of row objects)."""
    note = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "Title of the note"},
            "body": {"type": "string", "description": "Text of the note"},
            "pinned": {"type": "boolean", "description": "Whether the note is pinned"},
        },
        "required": ["title", "body"],
    }
    return {
        "format": TOOL_LIST_FORMAT,
        "server": {"name": "notes-server", "version": "1.0.0"},
        "package": PACKAGE,
        "tools": [
            {
                "name": "add_notes",
                "description": "Add notes to the notebook",
                "input_schema": {
                    "type": "object",
                    "properties": {"notes": {"type": "array", "items": note}},
                    "required": ["notes"],
                },
            },
            {
                "name": "list_notes",
                "description": "List the notes of the notebook",
                "input_schema": {"type": "object", "properties": {"limit": {"type": "integer"}}},
            },
            {
                "name": "remove_notes",
                "description": "Remove notes from the notebook",
                "input_schema": {
                    "type": "object",
                    "properties": {"titles": {"type": "array", "items": {"type": "string"}}},
                },
            },
            {
                "name": "summarize",
                "description": "Summarize the notebook",
                "input_schema": {"type": "object", "properties": {}},
            },
        ],
    }


def _pids_with_marker(marker: str) -> list[int]:
    needle = f"ENVFACTORY_MCP_SOURCE_MARKER={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        found.append(int(entry.name))
            except OSError:
                pass
    return found


def _server_processes() -> list[int]:
    """Live processes started from the installed servers' folder."""
    needle = str(SERVERS_ROOT.resolve()).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


# -- the real servers over stdio ---------------------------------------------------------------------
@needs_servers
def test_reader_lists_the_real_servers_tools_over_stdio(tmp_path):
    written, failures = read_installed_servers(tmp_path, timeout_s=30, servers_root=SERVERS_ROOT)
    assert failures == []
    assert sorted(p.name for p in written) == ["filesystem.json", "git.json", "memory.json", "time.json"]
    docs = {p.stem: json.loads(p.read_bytes()) for p in written}
    names = {k: {t["name"] for t in d["tools"]} for k, d in docs.items()}
    assert {"get_current_time", "convert_time"} <= names["time"]
    assert {"git_status", "git_log", "git_add", "git_commit", "git_create_branch"} <= names["git"]
    assert {
        "create_entities",
        "add_observations",
        "delete_entities",
        "read_graph",
        "search_nodes",
        "open_nodes",
    } <= names["memory"]
    assert {"read_text_file", "write_file", "list_directory"} <= names["filesystem"]
    assert docs["git"]["package"] == {
        "ecosystem": "pypi",
        "name": "mcp-server-git",
        "version": "2026.10.19",
        "license": "MIT",
    }
    assert docs["memory"]["package"]["version"] == "2026.8.31"
    time_tool = next(t for t in docs["time"]["tools"] if t["name"] == "get_current_time")
    assert time_tool["input_schema"]["required"] == ["timezone"] and time_tool["description"]
    assert _server_processes() == []  # every server was stopped
    for path in written:  # the file is the canonical JSON: its hash is the document's
        document, digest = load_tool_list(path)
        assert path.read_bytes() == canonical_bytes(document)
        assert digest == hashlib.sha256(path.read_bytes()).hexdigest()


@needs_servers
def test_mcp_rows_are_source_resources_with_kind_license_and_domain(tmp_path):
    accepted, rejected = mcp_rows(tmp_path, timeout_s=30, servers_root=SERVERS_ROOT)
    assert rejected == []
    by_key = {r["resource_key"]: r for r in accepted}
    assert sorted(by_key) == ["mcp__git", "mcp__memory", "mcp__secure_filesystem", "mcp__time"]
    assert {r["kind"] for r in accepted} == {MCP_KIND}
    assert by_key["mcp__git"]["domain"] == "developer_tools"
    assert by_key["mcp__time"]["domain"] == "productivity"
    assert by_key["mcp__git"]["license_name"] == "MIT" and by_key["mcp__git"]["provider"] == "mcp-server-git"
    for row in accepted:
        path = Path(row["corpus_root"]) / row["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == row["sha256"]
    # every tool list is built, on top of the per-domain choice
    assert [r["resource_key"] for r in select_resources(accepted, per_domain=0)] == sorted(by_key)
    assert select_resources(accepted, 0, exclude=["mcp__git"]) == [by_key[k] for k in sorted(by_key) if k != "mcp__git"]


@needs_servers
def test_environments_built_from_real_tool_lists_pass_the_verification_gate(tmp_path):
    accepted, _ = mcp_rows(tmp_path, timeout_s=30, servers_root=SERVERS_ROOT)
    rows = {r["resource_key"]: r for r in accepted}
    for key in ("mcp__memory", "mcp__time", "mcp__git"):
        env_row = environment_row(rows[key])
        assert env_row["status"] == "built", env_row["reasons"]
        verified = verification_row(env_row)
        assert verified["status"] == "passed", (key, verified["reasons"])
        if key == "mcp__memory":
            tools = {t["name"]: t for t in env_row["tools"]}
            assert tools["create_entities"]["kind"] == "create" and tools["create_entities"]["table"] == "entities"
            assert tools["delete_entities"]["kind"] == "delete" and tools["open_nodes"]["kind"] == "get"
            # read_graph reads both tables: one tool per table, each named by it
            assert tools["read_graph_entities"]["kind"] == "list" and tools["read_graph_relations"]["kind"] == "list"
            assert {"name", "entity_type"} <= set(tools["create_entities"]["input_schema"]["properties"])
            assert "add_observations" in env_row["provenance"]  # not mapped, and said so
        if key == "mcp__time":
            (tool,) = env_row["tools"]
            assert tool["name"] == "get_current_time" and tool["kind"] == "get"
            rows_ = env_row["initial_states"][0]["state"]["tables"]["current_times"]
            assert rows_ and all("datetime" in r and "timezone" in r for r in rows_)  # time is state, not clock
            assert "convert_time" in env_row["provenance"]
        if key == "mcp__git":
            kinds = {t["name"]: (t["kind"], t["table"]) for t in env_row["tools"]}
            assert kinds["git_commit"] == ("create", "commits") and kinds["git_log"] == ("list", "commits")
            assert kinds["git_create_branch"] == ("create", "branches")


# -- hostile and broken servers ----------------------------------------------------------------------
def test_a_server_that_never_answers_times_out_and_leaves_no_process(tmp_path):
    script = tmp_path / "silent_server.py"
    script.write_text(
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "while True:\n"
        "    time.sleep(1)\n"
    )
    marker = uuid.uuid4().hex
    started = time.monotonic()
    result = read_server(
        sys.executable,
        [str(script)],
        package=PACKAGE,
        cwd=tmp_path,
        timeout_s=2,
        env={"ENVFACTORY_MCP_SOURCE_MARKER": marker},
    )
    elapsed = time.monotonic() - started
    assert isinstance(result, McpFailure) and result.reason == "timeout", result
    assert elapsed < 15, elapsed
    deadline = time.monotonic() + 10
    while _pids_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pids_with_marker(marker) == []


def test_a_server_that_prints_garbage_and_exits_is_a_failure_not_a_crash(tmp_path):
    script = tmp_path / "garbage_server.py"
    script.write_text("import sys\nsys.stdout.write('this is not json-rpc\\n')\nsys.stdout.flush()\n")
    result = read_server(sys.executable, [str(script)], package=PACKAGE, cwd=tmp_path, timeout_s=5)
    assert isinstance(result, McpFailure) and result.reason in ("protocol_error", "timeout"), result
    missing = read_server(str(tmp_path / "no_such_server"), [], package=PACKAGE, cwd=tmp_path, timeout_s=5)
    assert isinstance(missing, McpFailure) and missing.reason == "start_failed"


def test_servers_that_are_not_installed_are_reported_not_started(tmp_path):
    written, failures = read_installed_servers(tmp_path, servers_root=tmp_path / "nothing_here")
    assert written == [] and {f.reason for f in failures} == {"not_installed"}
    assert mcp_rows(tmp_path, servers_root=tmp_path / "nothing_here") == ([], [])


# -- the user folder -----------------------------------------------------------------------------------
def test_user_folder_accepts_tool_lists_and_openapi_and_names_each_bad_file(tmp_path):
    folder = tmp_path / "user_resources"
    folder.mkdir()
    (folder / "notes.json").write_text(json.dumps(notes_tool_list(), indent=1))
    bookshop = Path(__file__).parent / "fixtures" / "openapi" / "bookshop.json"
    (folder / "bookshop.json").write_bytes(bookshop.read_bytes())
    no_schema = notes_tool_list()
    del no_schema["tools"][0]["input_schema"]
    (folder / "no_schema.json").write_text(json.dumps(no_schema))
    twice = notes_tool_list()
    twice["tools"].append(dict(twice["tools"][1]))
    (folder / "twice.json").write_text(json.dumps(twice))
    (folder / "truncated.json").write_text(json.dumps(notes_tool_list())[:-40])
    (folder / "other.json").write_text(json.dumps({"hello": "world"}))

    accepted, rejected = user_folder_rows(folder)
    assert sorted((r["path"], r["kind"]) for r in accepted) == [("bookshop.json", "openapi"), ("notes.json", MCP_KIND)]
    reasons = {r["path"]: (r["reason"], r["detail"]) for r in rejected}
    assert reasons["no_schema.json"][0] == "invalid_tool_list"
    assert "no_schema.json" in reasons["no_schema.json"][1] and "input_schema" in reasons["no_schema.json"][1]
    assert reasons["twice.json"][0] == "invalid_tool_list" and "list_notes" in reasons["twice.json"][1]
    assert reasons["truncated.json"][0] == "unparseable" and "truncated.json" in reasons["truncated.json"][1]
    assert reasons["other.json"][0] == "invalid_user_resource" and "openapi" in reasons["other.json"][1]
    notes = next(r for r in accepted if r["kind"] == MCP_KIND)
    # the stored hash is the canonical JSON's, not the (indented) file's
    assert notes["sha256"] == hashlib.sha256(canonical_bytes(notes_tool_list())).hexdigest()


def test_validate_tool_list_names_the_origin_and_the_problem():
    bad = notes_tool_list()
    bad["tools"][1]["name"] = "list notes; rm -rf"
    with pytest.raises(ToolListError, match=r"fileX\.json: .*tools/1/name"):
        validate_tool_list(bad, "fileX.json")
    with pytest.raises(ToolListError, match="format"):
        validate_tool_list({**notes_tool_list(), "format": "something/2"}, "f.json")


def test_a_user_tool_list_becomes_a_verified_environment(tmp_path):
    folder = tmp_path / "user_resources"
    folder.mkdir()
    (folder / "notes.json").write_text(json.dumps(notes_tool_list()))
    (row,), _ = user_folder_rows(folder)
    env_row = environment_row(row)
    assert env_row["status"] == "built", env_row["reasons"]
    tools = {t["name"]: t for t in env_row["tools"]}
    assert {n: t["kind"] for n, t in tools.items()} == {
        "add_notes": "create",
        "list_notes": "list",
        "remove_notes": "delete",
    }
    assert set(tools["add_notes"]["input_schema"]["properties"]) == {"title", "body", "pinned"}
    assert tools["add_notes"]["input_schema"]["required"] == ["title", "body"]
    assert "summarize" in env_row["provenance"]
    verified = verification_row(env_row)
    assert verified["status"] == "passed", verified["reasons"]
    # a changed file is refused at build time, not silently rebuilt
    (folder / "notes.json").write_text(json.dumps({**notes_tool_list(), "tools": notes_tool_list()["tools"][:2]}))
    assert environment_row(row)["status"] == "build_failed"


def test_a_tool_list_with_no_readable_table_is_a_build_error():
    doc = notes_tool_list()
    doc["tools"] = [t for t in doc["tools"] if t["name"] in ("add_notes", "summarize")]
    with pytest.raises(BuildError, match="no table with a read tool"):
        build_mcp_environment(
            {"resource_key": "mcp__notes", "domain": "productivity", "path": "n.json", "sha256": "0" * 64}, doc
        )
    resources, unmapped = resources_from_tool_list(notes_tool_list())
    assert [r.name for r in resources] == ["notes"] and unmapped == [
        "summarize: no CRUD verb or object in its name and schemas"
    ]


def test_a_tool_list_with_a_remote_reference_becomes_a_build_failed_row(tmp_path):
    doc = notes_tool_list()
    doc["tools"][0]["input_schema"]["properties"]["notes"]["items"] = {"$ref": "https://example.invalid/note.json"}
    folder = tmp_path / "user_resources"
    folder.mkdir()
    (folder / "remote.json").write_text(json.dumps(doc))
    (row,), _ = user_folder_rows(folder)
    env_row = environment_row(row)
    assert env_row["status"] == "build_failed"
    assert "remote.json" in env_row["reasons"][0] and "$ref" in env_row["reasons"][0]
