"""MCP tool lists as the second resource kind: the stdio reader against the real installed servers, a
server that never answers, malformed files in the user folder, and MCP-built environments through the
unchanged verification gate.

The real servers are the ones ``scripts/setup_mcp.sh`` installs under ``$ENVFACTORY_HOME/mcp-servers``; their
committed tool lists are tested without them in test_mcp_signatures.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from envfactory_assets import settings
from envfactory_assets.envgen.builder import BuildError, build_mcp_environment
from envfactory_assets.envgen.stage import environment_row, verification_row
from envfactory_assets.sources.mcp_resources import resources_from_tool_list
from envfactory_assets.sources.mcp_tools import (
    COMMITTED_DIR,
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
    sandboxed,
    validate_tool_list,
)
from envfactory_assets.sources.resource_kinds import mcp_rows, user_folder_rows

SERVERS_ROOT = settings.envfactory_home() / "mcp-servers"
INSTALLED = installed_servers(SERVERS_ROOT)
needs_servers = pytest.mark.skipif(
    len(INSTALLED) < len(KNOWN_SERVERS),
    reason=f"MCP servers not installed under {SERVERS_ROOT} (run scripts/setup_mcp.sh); found {INSTALLED}",
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
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_committed_lists_are_what_the_pinned_servers_answer_in_the_sandbox(tmp_path):
    out = tmp_path / "lists"
    written, failures = read_installed_servers(
        tmp_path, timeout_s=60, servers_root=SERVERS_ROOT, out_dir=out, bwrap=shutil.which("bwrap")
    )
    assert failures == []
    assert sorted(p.name for p in written) == sorted(p.name for p in COMMITTED_DIR.glob("*.json"))
    for path in written:
        assert load_tool_list(path)[0] == load_tool_list(COMMITTED_DIR / path.name)[0], path.name
    assert _server_processes() == []  # every server was stopped


def test_sandboxed_listing_shares_no_network_and_binds_the_servers_read_only(tmp_path):
    line = sandboxed("node", ["index.js"], {"SLACK_BOT_TOKEN": "xoxb-dummy"}, tmp_path, "/usr/bin/bwrap")
    assert line[0] == "/usr/bin/bwrap" and line[-3:] == ["--", "node", "index.js"]
    assert "--unshare-all" in line and "--share-net" not in line and "--clearenv" in line
    binds = [line[i + 1] for i, part in enumerate(line) if part == "--ro-bind"]
    assert str(tmp_path) in binds and "/usr" in binds
    assert not [line[i + 1] for i, part in enumerate(line) if part == "--bind"]  # nothing writable but /tmp
    assert line.index("--tmpfs") < line.index(str(tmp_path))  # the servers' folder lands on top of /tmp
    assert ["--setenv", "SLACK_BOT_TOKEN", "xoxb-dummy"] == line[line.index("SLACK_BOT_TOKEN") - 1 :][:3]


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
    assert mcp_rows(folder=tmp_path / "nothing_here") == ([], [])


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
    # the server's own signature: an array of notes, each with its fields
    assert set(tools["add_notes"]["input_schema"]["properties"]) == {"notes"}
    item = tools["add_notes"]["input_schema"]["properties"]["notes"]["items"]
    assert set(item["properties"]) == {"title", "body", "pinned"} and item["required"] == ["title", "body"]
    assert tools["remove_notes"]["mcp_binding"]["params"]["titles"] == {"role": "keys", "field": "title"}
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
