"""`envfactory serve-env`: a verified environment served as a real MCP server over stdio (mcp SDK 2.x),
talked to with the SDK's own stdio client; plus the in-process server for the failure paths."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.stage import environment_row, verification_row
from envfactory_assets.mcp_server import EnvironmentNotServable, build_server, load_environment_from_store
from envfactory_assets.runtime.sandbox import SandboxLimits
from envfactory_assets.settings import store_path
from envfactory_assets.sources.scan import SourceResource, inspect_file
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.store.db import Store
from envfactory_assets.store.ids import content_id
from envfactory_assets_tests.fixture_environments import FIXTURES

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "bookshop_example"
FAILED_ENV_ID = "bookshop_failed"


def build_bookshop() -> dict[str, Any]:
    resource = inspect_file(FIXTURES / "bookshop.json", FIXTURES)
    assert isinstance(resource, SourceResource), resource
    return build_environment(resource.as_row(), orjson.loads((FIXTURES / "bookshop.json").read_bytes()))


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """An ENVFACTORY_HOME whose store holds real source_resources / environments / verified_environments
    rows for bookshop.json (passed), plus a failed verification of another env id."""
    home = tmp_path_factory.mktemp("envfactory_home")
    corpus = home / "corpus"
    corpus.mkdir()
    shutil.copy(FIXTURES / "bookshop.json", corpus / "bookshop.json")
    accepted, rejected = scan_rows(corpus)
    assert [r["resource_key"] for r in accepted] == [ENV_ID] and not rejected
    env_row = environment_row(accepted[0])
    verified = verification_row(env_row)
    assert env_row["status"] == "built" and verified["status"] == "passed", verified["reasons"]
    failed = {**verified, "env_id": FAILED_ENV_ID, "status": "failed", "reasons": ["replay: outputs differ"]}
    failed["id"] = content_id("ver", {"env_id": FAILED_ENV_ID, "status": "failed"})
    store = Store(store_path(home))
    store.replace_current("source_resources", accepted)
    store.replace_current("environments", [env_row])
    store.replace_current("verified_environments", [verified, failed])
    return home


# -- helpers: the server as a subprocess, and the processes it leaves ---------------------------------
def _server_params(home: Path, marker: str, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "envfactory_assets.cli", "serve-env", *extra],
        env={"ENVFACTORY_HOME": str(home), "ENVFACTORY_MCP_TEST_MARKER": marker},
        cwd=str(REPO_ROOT),
    )


def _pids_with_marker(marker: str) -> list[int]:
    needle = f"ENVFACTORY_MCP_TEST_MARKER={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _error(result) -> dict[str, Any]:
    assert result.is_error, result
    return json.loads(result.content[0].text)["error"]


async def _all_authors(session: ClientSession | Client) -> list[dict[str, Any]]:
    result = await session.call_tool("list_authors", {"limit": 100})
    assert not result.is_error, result
    return result.structured_content["items"]


# -- over stdio ---------------------------------------------------------------------------------------
def test_serve_env_over_stdio_lists_tools_and_keeps_state_within_the_session(home, bookshop, tmp_path):
    marker = uuid.uuid4().hex
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        with open(tmp_path / "server.stderr", "w") as errlog:
            async with stdio_client(_server_params(home, marker, ENV_ID), errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    assert init.server_info.name == f"envfactory-{ENV_ID}"
                    assert init.capabilities.tools is not None

                    listed = {tool.name: tool for tool in (await session.list_tools()).tools}
                    specs = {spec["name"]: spec for spec in bookshop["tools"]}
                    assert sorted(listed) == sorted(specs)
                    for name, spec in specs.items():
                        assert listed[name].description == spec["description"]
                        assert listed[name].input_schema == spec["input_schema"]
                        assert listed[name].output_schema == spec["output_schema"]
                        assert listed[name].annotations.read_only_hint is spec["read_only"]

                    # the server process and its sandbox worker, to check that both go away afterwards (after a
                    # call: the worker starts in the background, a call waits for it)
                    before = await _all_authors(session)
                    servers = _pids_with_marker(marker)
                    assert len(servers) == 1, servers
                    seen["pids"] = servers + _children(servers[0])
                    assert len(seen["pids"]) == 2, seen["pids"]

                    created = await session.call_tool("create_author", {"name": "Ada Lovelace", "country": "GB"})
                    assert not created.is_error, created
                    author = created.structured_content
                    assert author["name"] == "Ada Lovelace" and author["author_id"]
                    assert json.loads(created.content[0].text) == author

                    got = await session.call_tool("get_author", {"author_id": author["author_id"]})
                    assert not got.is_error and got.structured_content == author
                    after = await _all_authors(session)
                    assert len(after) == len(before) + 1 and author in after

                    book = await session.call_tool(
                        "books_create", {"title": "Notes", "author_id": author["author_id"], "genre": "science"}
                    )
                    assert not book.is_error, book
                    listed_books = await session.call_tool("books_list", {"limit": 100, "genre": "science"})
                    assert book.structured_content in listed_books.structured_content["items"]

                    # invalid arguments: MCP tool errors with the structured error, state unchanged
                    missing = _error(await session.call_tool("create_author", {"country": "GB"}))
                    assert missing["type"] == "bad_arguments" and "name" in missing["message"]
                    wrong_type = _error(await session.call_tool("list_authors", {"limit": "ten"}))
                    assert wrong_type["type"] == "bad_arguments" and "limit" in wrong_type["message"]
                    extra = _error(await session.call_tool("get_author", {"author_id": "x", "bogus": 1}))
                    assert extra["type"] == "bad_arguments"
                    not_found = _error(await session.call_tool("get_author", {"author_id": "aut_missing"}))
                    assert not_found["type"] == "not_found" and "aut_missing" in not_found["message"]
                    with pytest.raises(MCPError, match="Unknown tool"):
                        await session.call_tool("drop_all_tables", {})
                    assert await _all_authors(session) == after

                    # the environment keeps references intact: the author goes only after their book
                    blocked = _error(await session.call_tool("delete_author", {"author_id": author["author_id"]}))
                    assert blocked["type"] == "bad_arguments"
                    book_id = book.structured_content["book_id"]
                    assert not (await session.call_tool("delete_book", {"book_id": book_id})).is_error
                    deleted = await session.call_tool("delete_author", {"author_id": author["author_id"]})
                    assert not deleted.is_error and deleted.structured_content["deleted"] is True
                    assert (
                        _error(await session.call_tool("get_author", {"author_id": author["author_id"]}))["type"]
                        == "not_found"
                    )

    anyio.run(scenario)
    assert _wait_gone(seen["pids"]) == [], f"processes left behind: {seen['pids']}"


def test_each_session_starts_from_its_initial_state(home, bookshop):
    """A new server run is a new episode: nothing carries over, and --state picks the initial state."""
    marker = uuid.uuid4().hex
    boundary = next(s for s in bookshop["initial_states"] if s["name"] == "boundary")["state"]

    async def scenario() -> None:
        # the SDK's high-level Client negotiates the 2026-07-28 era (server/discover, no initialize handshake)
        async with Client(_server_params(home, marker, ENV_ID, "--state", "boundary")) as client:
            assert client.session.protocol_version == "2026-07-28"
            authors = await _all_authors(client)
            assert [a["author_id"] for a in authors] == [a["author_id"] for a in boundary["tables"]["authors"]]
            assert any(not a["name"].isascii() for a in authors)
            created = await client.call_tool("create_author", {"name": "Ida"})
            assert not created.is_error
            assert created.structured_content["author_id"] not in [a["author_id"] for a in authors]

    anyio.run(scenario)
    assert _wait_gone(_pids_with_marker(marker)) == []


def test_the_worker_outlives_anyios_idle_threads_across_pauses(home):
    """A sandbox worker dies with the thread that started it; anyio ends its idle worker threads (here after
    0.2 s instead of 10 s) when another blocking call starts, so a worker started on one of them would be
    killed between two calls of a client that pauses while the server works."""
    marker = uuid.uuid4().hex
    code = (
        "import sys, anyio._backends._asyncio as backend; backend.WorkerThread.MAX_IDLE_TIME = 0.2; "
        "from envfactory_assets.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    params = _server_params(home, marker, ENV_ID)
    params.args = ["-c", code, "serve-env", ENV_ID]
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            created = await session.call_tool("create_author", {"name": "Ada"})
            assert not created.is_error, created
            servers = _pids_with_marker(marker)
            seen["workers"] = _children(servers[0])
            for _ in range(4):
                await anyio.sleep(0.5)
                async with anyio.create_task_group() as tasks:  # work on several of anyio's threads at once
                    for _ in range(3):
                        tasks.start_soon(session.list_tools)
                authors = await _all_authors(session)
                assert created.structured_content in authors
            assert _children(servers[0]) == seen["workers"]

    anyio.run(scenario)


@pytest.mark.parametrize(
    "env_id, expected",
    [
        ("no_such_env", "unknown environment 'no_such_env'"),
        (FAILED_ENV_ID, f"environment '{FAILED_ENV_ID}' is not verified"),
    ],
)
def test_serve_env_refuses_unknown_or_unverified_env_ids(home, env_id, expected):
    proc = subprocess.run(
        [sys.executable, "-m", "envfactory_assets.cli", "serve-env", env_id],
        env={**os.environ, "ENVFACTORY_HOME": str(home)},
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc
    assert expected in proc.stderr
    assert ENV_ID in proc.stderr  # lists the environments that can be served
    assert proc.stdout == ""


def test_serve_env_without_a_store_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "envfactory_assets.cli", "serve-env", ENV_ID],
        env={**os.environ, "ENVFACTORY_HOME": str(tmp_path / "empty_home")},
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "does not exist" in proc.stderr, proc
    assert not (tmp_path / "empty_home").exists()


# -- loading and the in-process server ----------------------------------------------------------------
def test_load_environment_from_store(home, bookshop):
    environment = load_environment_from_store(store_path(home), ENV_ID)
    assert environment["env_id"] == ENV_ID
    assert environment["tools"] == bookshop["tools"] and environment["source"] == bookshop["source"]
    with pytest.raises(EnvironmentNotServable, match="unknown environment 'nope'.*bookshop_example"):
        load_environment_from_store(store_path(home), "nope")


def test_loading_an_environment_imports_neither_pandas_nor_the_builders(home):
    """serve-env reads its environment before it can answer initialize: DuckDB alone, no pandas (which DuckDB
    imports for a bound parameter), polars, catalogue, curation or builder modules. Only the error path
    imports the catalogue, to name the environments that can be served."""
    heavy = [
        "pandas",
        "polars",
        "jsonschema",
        "envfactory_assets.catalog",
        "envfactory_assets.curation",
        "envfactory_assets.envgen.stage",
        "envfactory_assets.envgen.builder",
    ]
    probe = (
        "import sys; from envfactory_assets.mcp_server.loading import load_environment_from_store as load\n"
        f"environment = load(sys.argv[1], sys.argv[2]); assert environment['env_id'] == {ENV_ID!r}\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(store_path(home)), ENV_ID],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_build_server_refuses_states_meant_to_be_rejected(bookshop):
    with pytest.raises(ValueError, match="no loadable initial state 'invalid'"):
        build_server(bookshop, "invalid")


SPIN_TOOL = '''

def spin(state):
    """Loops forever: the sandbox must stop it."""
    n = 0
    while True:
        n = n + 1
'''


def test_a_call_that_loses_the_episode_is_an_error_and_the_state_survives(bookshop):
    """A tool that hangs is stopped by the sandbox; the server answers with a tool error, restores the
    state of before the call and keeps serving."""
    environment = copy.deepcopy(bookshop)
    environment["source"] += SPIN_TOOL
    environment["tools"].append(
        {
            "name": "spin",
            "description": "Loop forever",
            "kind": "get",
            "table": "authors",
            "read_only": True,
            "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
            "output_schema": {"type": "object"},
        }
    )
    server = build_server(environment, "valid", SandboxLimits(call_timeout_s=0.5, kill_grace_s=1.0))

    async def scenario() -> None:
        async with Client(server) as client:
            created = await client.call_tool("create_author", {"name": "Grace Hopper"})
            assert not created.is_error, created
            author_id = created.structured_content["author_id"]
            lost = _error(await client.call_tool("spin", {}))
            assert lost["type"] == "timeout" and lost["episode_lost"] is True and lost["state_restored"] is True
            got = await client.call_tool("get_author", {"author_id": author_id})
            assert not got.is_error and got.structured_content["name"] == "Grace Hopper"

    anyio.run(scenario)


def test_a_worker_that_cannot_start_ends_the_run_with_its_error(bookshop):
    """The worker starts in the background while the client connects; a state the environment rejects still
    ends the run, with the environment's own error (``serve-env`` reports it and exits 1)."""
    from envfactory_assets.runtime.errors import StateRejected

    server = build_server(bookshop, {"tables": {"authors": "not rows"}})

    async def scenario() -> None:
        async with Client(server) as client:
            await client.call_tool("list_authors", {})

    with pytest.raises(StateRejected, match="state rejected by 'bookshop_example'"):
        anyio.run(scenario)
