"""`envfactory serve-env ENV_ID --http`: a verified environment served over MCP Streamable HTTP by one real server
process on a free port of 127.0.0.1, driven by the `mcp` SDK's own Streamable HTTP client (and raw HTTP where the
wire itself is checked): one episode (one sandbox worker) per MCP session, the session cap, idle expiry, the
bounded reader on request bodies, and a stop by SIGTERM that takes every worker with it.

The server runs with anyio's idle worker threads ended after 0.5 s instead of 10 s, so a sandbox worker started
on one of them (it would die with that thread) would be caught within the test's pauses."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from benchmarks.serve_env_startup import fixture_home
from envfactory_assets.cli import main
from envfactory_assets.runtime.bounded_json import DEFAULT_MAX_DECODED_BYTES, JsonTooLarge, measure
from envfactory_assets_tests.worker_processes import children, kill_worker, running

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_SESSIONS = 2
IDLE_TIMEOUT_S = 2.0
ANYIO_THREAD_IDLE_S = 0.5
#: The server's body bound with the default --max-argument-bytes (HttpSettings.body_bounds).
MAX_BODY_BYTES = 2 * 1_000_000 + (1 << 20)
SERVER = (
    "import sys, anyio._backends._asyncio as backend; "
    f"backend.WorkerThread.MAX_IDLE_TIME = {ANYIO_THREAD_IDLE_S}; "
    "from envfactory_assets.cli import main; sys.exit(main(sys.argv[1:]))"
)
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[subprocess.Popen, str]]:
    """``serve-env bookshop_example --http`` with a cap of 2 sessions and a 2 s idle timeout, started as a
    background shell would (SIGINT and SIGTERM at their defaults: ``env --default-signal``); yields the process
    and the endpoint's URL, and stops it by its process id."""
    home, env_id = fixture_home(tmp_path_factory.mktemp("serve_env_http"))
    port = _free_port()
    command = ["env", "--default-signal=INT,TERM", sys.executable, "-c", SERVER, "serve-env", env_id, "--http"]
    command += ["--port", str(port), "--max-sessions", str(MAX_SESSIONS), "--idle-timeout-s", str(IDLE_TIMEOUT_S)]
    proc = subprocess.Popen(
        command,
        env={**os.environ, "ENVFACTORY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def answers() -> bool:
        try:
            httpx.get(url, timeout=1)
            return True
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        assert _wait_until(answers, 60) and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
        yield proc, url
    finally:
        _stop(proc)


@pytest.fixture()
def idle_server(server) -> tuple[subprocess.Popen, str]:
    """The module's server once the sessions of the tests before have ended: a session's worker is stopped
    after its DELETE returns, which a loaded machine may take a moment to do, and the tests count workers."""
    proc, _ = server
    assert _wait_until(lambda: not _workers(proc), 30), f"workers of earlier sessions still run: {_workers(proc)}"
    return server


def _workers(proc: subprocess.Popen) -> set[int]:
    """The server's sandbox workers (its child processes)."""
    return {pid for pid in children(proc.pid) if running(pid)}


async def _both(a: Client, b: Client, tool: str, arguments: dict[str, Any]) -> list[Any]:
    """The results of one call of ``tool`` in each of two sessions, sent at once."""
    return await asyncio.gather(a.call_tool(tool, arguments), b.call_tool(tool, arguments))


async def _connect_error(url: str) -> BaseException | None:
    """The error a new SDK ``Client`` gets connecting to ``url`` (out of the task groups that carry it)."""
    try:
        async with Client(url):
            return None
    except BaseException as exc:  # the caller checks what it is
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        return exc


def _items(result) -> list[dict[str, Any]]:
    assert not result.is_error, result
    return result.structured_content["items"]


def test_sessions_list_tools_keep_their_own_state_and_never_share_it(idle_server):
    proc, url = idle_server
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with Client(url) as a, Client(url) as b:
            # the SDK's Client probes server/discover, is told the handshake-era versions, and initializes
            assert a.session.protocol_version == "2025-11-25"
            tools = {t.name: t for t in (await a.list_tools()).tools}
            assert {"create_author", "get_author", "list_authors", "books_create", "delete_book"} <= set(tools)
            assert tools["create_author"].input_schema["required"] == ["name"]
            # both sessions' first calls at once: the server runs them on two threads at once
            start, start_b = map(_items, await _both(a, b, "list_authors", {"limit": 100}))
            assert start_b == start

            ada = (await a.call_tool("create_author", {"name": "Ada Lovelace", "country": "GB"})).structured_content
            got = await a.call_tool("get_author", {"author_id": ada["author_id"]})
            assert not got.is_error and got.structured_content == ada
            assert ada in _items(await a.call_tool("list_authors", {"limit": 100}))
            # the other session's episode never sees it, and its own writes stay its own
            assert _items(await b.call_tool("list_authors", {"limit": 100})) == start
            missing = await b.call_tool("get_author", {"author_id": ada["author_id"]})
            assert missing.is_error and json.loads(missing.content[0].text)["error"]["type"] == "not_found"
            ida = (await b.call_tool("create_author", {"name": "Ida"})).structured_content
            assert ida not in _items(await a.call_tool("list_authors", {"limit": 100}))

            # one worker per session, each still the same after anyio has ended its idle threads (it ends them
            # when a new blocking call starts while others have idled past MAX_IDLE_TIME)
            workers = _workers(proc)
            assert len(workers) == 2, workers
            for _ in range(2):
                await anyio.sleep(2 * ANYIO_THREAD_IDLE_S)
                after_a, after_b = map(_items, await _both(a, b, "list_authors", {"limit": 100}))
                assert ada in after_a and ida in after_b
            await anyio.sleep(0.2)
            assert _workers(proc) == workers
            seen["workers"] = workers

    anyio.run(scenario)
    # the clients ended their sessions (DELETE): both workers are stopped
    assert _wait_until(lambda: not any(running(p) for p in seen["workers"])), seen["workers"]


def test_a_sessionless_2026_call_is_refused_with_an_error_that_says_how_to_connect(server):
    proc, url = server

    async def scenario() -> None:
        async with Client(url, mode="2026-07-28") as client:  # single-exchange requests: no MCP session
            assert "create_author" in {t.name for t in (await client.list_tools()).tools}
            with pytest.raises(MCPError, match="keeps one episode per MCP session .* initialize handshake"):
                await client.call_tool("list_authors", {"limit": 1})

    anyio.run(scenario)
    assert not _workers(proc)


def test_a_session_past_the_cap_is_refused_with_503_and_a_clear_error_until_one_ends(idle_server):
    proc, url = idle_server

    async def scenario() -> None:
        async with Client(url) as a:
            async with Client(url) as b:
                await a.call_tool("list_authors", {"limit": 1})
                await b.call_tool("list_authors", {"limit": 1})
                refused = await _connect_error(url)
                assert isinstance(refused, MCPError), refused
                assert str(refused).startswith("session_capacity: this server holds 2 open MCP sessions")
                async with httpx.AsyncClient() as raw:
                    refused = await raw.post(url, json=INITIALIZE, headers=HEADERS)
                assert refused.status_code == 503
                error = refused.json()["error"]
                assert error["data"] == {"type": "session_capacity", "max_sessions": MAX_SESSIONS}
                assert "--max-sessions" in error["message"]
                # the open sessions go on
                assert not (await a.call_tool("list_authors", {"limit": 1})).is_error
            assert _wait_until(lambda: len(_workers(proc)) == 1)
            async with Client(url) as c:  # b's slot is free again
                assert not (await c.call_tool("list_authors", {"limit": 1})).is_error

    anyio.run(scenario)


def test_an_idle_session_expires_its_worker_stops_and_its_id_is_gone(idle_server):
    proc, url = idle_server
    session_ids: list[str] = []

    async def remember(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            session_ids.append(response.headers["mcp-session-id"])

    async def scenario() -> None:
        http = httpx2.AsyncClient(timeout=30, event_hooks={"response": [remember]})
        # a client that goes away without ending its session (no DELETE)
        async with http, streamable_http_client(url, http_client=http, terminate_on_close=False) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert not (await session.call_tool("create_author", {"name": "Left behind"})).is_error

    workers = _workers(proc)
    anyio.run(scenario)
    assert len(workers) == 0 and len(_workers(proc)) == 1 and session_ids
    assert _wait_until(lambda: not _workers(proc), IDLE_TIMEOUT_S + 10), "the idle session's worker still runs"
    gone = httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        headers={**HEADERS, "mcp-session-id": session_ids[-1], "mcp-protocol-version": "2025-11-25"},
    )
    assert gone.status_code == 404


def test_a_killed_worker_loses_only_its_sessions_call_and_every_session_goes_on(idle_server):
    proc, url = idle_server

    async def scenario() -> None:
        async with Client(url) as a:
            ada = (await a.call_tool("create_author", {"name": "Ada Lovelace"})).structured_content
            (a_worker,) = _workers(proc)
            async with Client(url) as b:
                ida = (await b.call_tool("create_author", {"name": "Ida"})).structured_content
                assert len(_workers(proc)) == 2
                kill_worker(a_worker)  # SIGKILL mid-episode
                lost = await a.call_tool("list_authors", {"limit": 100})
                assert lost.is_error
                error = json.loads(lost.content[0].text)["error"]
                assert (error["type"], error["episode_lost"], error["state_restored"]) == ("crash", True, True)
                assert isinstance(error["session_id"], str) and error["session_id"]
                # the other session never noticed; its state is its own
                after_b = _items(await b.call_tool("list_authors", {"limit": 100}))
                assert ida in after_b and ada not in after_b
                # the killed session goes on in a fresh worker, from its state before the lost call
                after_a = _items(await a.call_tool("list_authors", {"limit": 100}))
                assert ada in after_a and ida not in after_a
                assert a_worker not in _workers(proc) and len(_workers(proc)) == 2
        async with Client(url) as c:  # and a new session starts as usual
            assert not (await c.call_tool("list_authors", {"limit": 1})).is_error

    anyio.run(scenario)


def test_malformed_calls_get_clear_errors_and_the_session_goes_on(server):
    proc, url = server

    def call(request_id: int, name: str, arguments: Any) -> bytes:
        params = {"name": name, "arguments": arguments}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()

    with httpx.Client(timeout=30) as http:
        opened = http.post(url, json=INITIALIZE, headers=HEADERS)
        headers = {**HEADERS, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        answers = {
            "not json": http.post(url, content=b"{not json", headers=headers),
            "not a message": http.post(url, content=b'{"jsonrpc": "2.0", "id": 5}', headers=headers),
            "unknown tool": http.post(url, content=call(6, "os_system", {}), headers=headers),
            "bad arguments": http.post(url, content=call(7, "list_authors", {"limit": "x"}), headers=headers),
        }
        assert answers["not json"].status_code == 400
        assert answers["not json"].json()["error"]["code"] == -32700
        assert answers["not a message"].status_code == 400
        assert answers["not a message"].json()["error"]["message"].startswith("Validation error")
        assert "Unknown tool: 'os_system'" in answers["unknown tool"].json()["error"]["message"]
        result = answers["bad arguments"].json()["result"]
        assert result["isError"] and json.loads(result["content"][0]["text"])["error"]["type"] == "bad_arguments"
        unknown = http.post(url, content=call(8, "list_authors", {}), headers={**headers, "mcp-session-id": "nosuch"})
        assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "Session not found"
        fine = http.post(url, content=call(9, "list_authors", {"limit": 1}), headers=headers).json()["result"]
        assert not fine["isError"] and fine["structuredContent"]["total"] >= 1
        assert http.delete(url, headers=headers).status_code == 200
    assert _wait_until(lambda: not _workers(proc))


def _amplifying_body() -> bytes:
    """A JSON-RPC request within the byte bound whose decoded objects pass the decoded-size bound."""
    filler = b"[" + b",".join([b"[]"] * (MAX_BODY_BYTES // 3 - 100)) + b"]"
    body = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_authors","arguments":{"x":' + filler
    body += b"}}}"
    assert len(body) <= MAX_BODY_BYTES
    with pytest.raises(JsonTooLarge) as refused:
        measure(body, _body_bounds())
    assert refused.value.limit == "max_decoded_bytes"
    return body


def _body_bounds():
    from envfactory_assets.serving.serve_env_settings import HttpSettings

    bounds = HttpSettings().body_bounds()
    assert (bounds.max_bytes, bounds.max_decoded_bytes) == (MAX_BODY_BYTES, DEFAULT_MAX_DECODED_BYTES)
    return bounds


@pytest.mark.parametrize(
    "body, limit",
    [
        (
            b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"x":"' + b"a" * MAX_BODY_BYTES + b'"}}',
            "max_bytes",
        ),  # fmt: skip
        (b"[" * 100_000, "max_depth"),
        (None, "max_decoded_bytes"),
    ],
    ids=["oversized", "deep", "amplifying"],
)
def test_a_body_past_the_bounded_reader_is_refused_undecoded_and_the_session_goes_on(server, body, limit):
    proc, url = server
    body = _amplifying_body() if body is None else body

    async def scenario() -> None:
        async with Client(url) as client:
            before = _items(await client.call_tool("list_authors", {"limit": 100}))
            # the SDK client's own oversized call gets the reader's error as an MCP error
            if limit == "max_bytes":
                with pytest.raises(MCPError, match=r"too_large: the request body .* past max_bytes="):
                    await client.call_tool("create_author", {"name": "x" * MAX_BODY_BYTES})
            async with httpx.AsyncClient() as raw:
                refused = await raw.post(url, content=body, headers=HEADERS)
            assert refused.status_code == 413
            error = refused.json()["error"]
            assert error["code"] == -32600 and error["data"]["limit"] == limit
            assert error["message"].startswith("too_large: ") and "not decoded" in error["message"]
            assert _items(await client.call_tool("list_authors", {"limit": 100})) == before

    anyio.run(scenario)


def test_a_body_holding_nan_or_infinity_gets_a_json_rpc_parse_error_and_the_session_goes_on(server):
    proc, url = server

    async def scenario() -> None:
        async with Client(url) as client:
            before = _items(await client.call_tool("list_authors", {"limit": 100}))
            async with httpx.AsyncClient() as raw:
                for token in (b"NaN", b"Infinity", b"-Infinity"):
                    body = b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_authors",'
                    refused = await raw.post(url, content=body + b'"arguments":{"limit":%s}}}' % token, headers=HEADERS)
                    assert refused.status_code == 400, refused.text
                    error = refused.json()["error"]
                    assert error["code"] == -32700 and error["data"]["type"] == "invalid_json"
                    assert error["message"].startswith("invalid_json: the request body holds NaN")
            assert _items(await client.call_tool("list_authors", {"limit": 100})) == before

    anyio.run(scenario)


def test_bad_options_are_refused_before_serving(tmp_path, monkeypatch, capsys):
    from envfactory_assets.serving.serve_env_settings import HttpSettings

    assert HttpSettings().max_sessions >= 256  # GRPO's num_generations x a batch, as serve-openenv
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path))
    cases = [
        (["--http", "--max-sessions", "0"], "max_sessions=0: expected a whole number in [1, 4096]"),
        (["--http", "--idle-timeout-s", "0"], "idle_timeout_s=0.0: expected a finite number > 0"),
        (["--port", "9000"], "--port: only with --http (without it, serve-env speaks MCP over stdio)"),
    ]
    for args, expected in cases:
        assert main(["serve-env", "bookshop_example", *args]) == 2
        assert expected in capsys.readouterr().err


def test_sigterm_stops_the_server_and_every_session_worker(idle_server):
    proc, url = idle_server

    async def open_session() -> None:
        async with Client(url) as client:
            assert not (await client.call_tool("list_authors", {"limit": 1})).is_error
            workers.update(_workers(proc))
            proc.send_signal(signal.SIGTERM)  # a client still connected
            await anyio.to_thread.run_sync(proc.wait, 30)

    workers: set[int] = set()
    try:
        anyio.run(open_session)
    except BaseException:  # the server went away under the client: its own error on the way out
        pass
    assert proc.returncode == 0, proc.stderr.read()
    assert len(workers) == 1 and _wait_until(lambda: not any(running(p) for p in workers))
    assert "serve-env: bookshop_example over MCP Streamable HTTP" in proc.stderr.read()
