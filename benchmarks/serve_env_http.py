"""Call latency of ``envfactory serve-env ENV_ID --http``: p50/p95 of one MCP tool call over Streamable HTTP.

Starts one ``serve-env ENV_ID --http`` process on a free port of 127.0.0.1 and drives it with the ``mcp`` SDK's
own ``Client`` (Streamable HTTP). For each number of sessions in ``--sessions`` (default 1 and 4), that many
sessions are opened (each its own episode and sandbox worker), each makes ``--calls`` calls one after another,
all sessions at once, after a few warm-up calls; a call's latency is from the client's ``call_tool`` to its
result. Three calls are timed: ``ping`` (the SDK and HTTP round trip with no tool: the floor), a read
(``list_authors``-like: the first tool with no required argument) and, on the fixture environment, a write
(``create_author``). Usage::

    .venv/bin/python -m benchmarks.serve_env_http --calls 200
    .venv/bin/python -m benchmarks.serve_env_http --home ~/.envfactory --env-id apideck_com__crm --sessions 1,8

Without ``--home``, a home is made in a temporary folder whose store holds the fixture bookshop environment
(as ``benchmarks.serve_env_startup`` makes it). Prints a Markdown table: per call and sessions, p50 and p95 in
ms, and p50 over the ping's p50 in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
WARM_UP_CALLS = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cli_server(home: Path, command: list[str], probe: str) -> tuple[subprocess.Popen, str]:
    """``envfactory COMMAND... --port P`` on a free port of 127.0.0.1 in its own session, for ``home``; the
    process and its base URL once a GET of ``probe`` (a path) gets any HTTP answer.

    Raises:
        RuntimeError: the server exited or did not answer within 120 s (it is stopped).
    """
    import httpx

    port = _free_port()
    proc = subprocess.Popen(
        ["env", "--default-signal=INT,TERM", sys.executable, "-m", "envfactory_assets.cli", *command]
        + ["--port", str(port)],
        env={**os.environ, "ENVFACTORY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    base, what = f"http://127.0.0.1:{port}", " ".join(command[:1])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        try:
            httpx.get(base + probe, timeout=1)
            return proc, base
        except httpx.HTTPError:
            time.sleep(0.1)
    stop_server(proc)
    raise RuntimeError(f"{what} did not answer within 120 s")


def start_server(home: Path, env_id: str, max_sessions: int) -> tuple[subprocess.Popen, str]:
    """``serve-env ENV_ID --http`` on a free port, answering; the process and its endpoint URL.

    Raises:
        RuntimeError: the server exited or did not answer within 120 s.
    """
    command = ["serve-env", env_id, "--http", "--max-sessions", str(max_sessions)]
    proc, base = start_cli_server(home, command, "/mcp")
    return proc, base + "/mcp"


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM ``proc`` (it stops every session's worker), SIGKILL its group after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _calls(tools: list[Any]) -> dict[str, tuple[str, dict[str, Any]] | None]:
    """The timed calls by label: ``ping`` (None: no tool), a read tool with no required argument, and
    ``create_author`` where the environment has it."""
    calls: dict[str, tuple[str, dict[str, Any]] | None] = {"ping": None}
    read = next((t.name for t in tools if t.annotations.read_only_hint and not t.input_schema.get("required")), None)
    if read is not None:
        calls[f"read ({read})"] = (read, {})
    if any(t.name == "create_author" for t in tools):
        calls["write (create_author)"] = ("create_author", {"name": "Benchmark"})
    return calls


async def _session_times(url: str, n_calls: int) -> dict[str, list[float]]:
    from mcp import Client
    from mcp.shared.exceptions import MCPDeprecationWarning

    times: dict[str, list[float]] = {}
    async with Client(url) as client:
        for label, call in _calls((await client.list_tools()).tools).items():

            async def once(call: tuple[str, dict[str, Any]] | None = call) -> None:
                if call is None:
                    with warnings.catch_warnings():  # ping is gone from 2026-07-28; this session is 2025-11-25
                        warnings.simplefilter("ignore", MCPDeprecationWarning)
                        await client.send_ping()
                else:
                    result = await client.call_tool(*call)
                    if result.is_error:
                        raise RuntimeError(f"{call[0]} failed: {result.content[0].text[:500]}")

            for _ in range(WARM_UP_CALLS):  # the first call also waits for the session's worker to start
                await once()
            seconds = []
            for _ in range(n_calls):
                started = time.perf_counter()
                await once()
                seconds.append(time.perf_counter() - started)
            times[label] = seconds
    return times


def measure(url: str, n_calls: int, sessions: int) -> dict[str, list[float]]:
    """``{call label: [seconds of each call]}`` over ``sessions`` sessions calling at once, ``n_calls`` each."""

    async def run() -> list[dict[str, list[float]]]:
        return await asyncio.gather(*(_session_times(url, n_calls) for _ in range(sessions)))

    merged: dict[str, list[float]] = {}
    for times in asyncio.run(run()):
        for label, seconds in times.items():
            merged.setdefault(label, []).extend(seconds)
    return merged


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def markdown(results: dict[int, dict[str, list[float]]], env_id: str, n_calls: int, load: tuple[float, float]) -> str:
    """The table: per sessions and call, p50 and p95 in ms, and p50 over the ping's p50 at the same sessions."""
    lines = [
        f"`python -m benchmarks.serve_env_http --calls {n_calls}`: `serve-env {env_id} --http`, the mcp SDK's "
        f"Client over Streamable HTTP on 127.0.0.1, {n_calls} timed calls per session after {WARM_UP_CALLS} warm-up "
        f"calls, sessions calling at once. Load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end, "
        f"on {os.cpu_count()} cores.",
        "",
        "| sessions | call | p50 ms | p95 ms | p50 / ping p50 |",
        "|---|---|---|---|---|",
    ]
    for sessions, times in results.items():
        floor = statistics.median(times["ping"])
        for label, seconds in times.items():
            p50 = statistics.median(seconds)
            lines.append(
                f"| {sessions} | {label} | {p50 * 1000:.2f} | {_p(seconds, 95) * 1000:.2f} | {p50 / floor:.1f}x |"
            )
    return "\n".join(lines)


def run(
    n_calls: int = 200, sessions: tuple[int, ...] = (1, 4), home: Path | None = None, env_id: str | None = None
) -> str:
    """The Markdown table of :func:`measure` at each number of ``sessions`` on ``home`` and ``env_id`` (default:
    a fixture home made here), one server process for all."""
    from benchmarks.serve_env_startup import fixture_home

    with tempfile.TemporaryDirectory(prefix="serve_env_http_") as tmp:
        if home is None:
            home, env_id = fixture_home(Path(tmp))
        proc, url = start_server(home, env_id, max(sessions))
        try:
            load_start = os.getloadavg()[0]
            results = {n: measure(url, n_calls, n) for n in sessions}
            load_end = os.getloadavg()[0]
        finally:
            stop_server(proc)
        return markdown(results, env_id, n_calls, (load_start, load_end))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--home", type=Path, default=None, help="an ENVFACTORY_HOME whose store holds --env-id verified"
    )
    parser.add_argument("--env-id", default=None, help="the environment to serve (required with --home)")
    parser.add_argument("--calls", type=int, default=200, help="timed calls of each kind per session")
    parser.add_argument("--sessions", default="1,4", help="numbers of sessions calling at once, comma-separated")
    args = parser.parse_args(argv)
    if (args.home is None) != (args.env_id is None):
        parser.error("--home and --env-id go together")
    if args.calls < 2:
        parser.error("--calls must be at least 2 (a p95 needs several)")
    sessions = tuple(int(x) for x in args.sessions.split(","))
    print(run(args.calls, sessions, args.home, args.env_id))


if __name__ == "__main__":
    main()
