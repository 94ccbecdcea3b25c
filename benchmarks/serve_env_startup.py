"""Start time of ``envfactory serve-env``: from spawning the process to the reply to MCP ``initialize``.

Each try spawns ``python -m envfactory_assets.cli serve-env ENV_ID`` with its stdin and stdout as pipes, writes
one ``initialize`` request, and times the reply line; then it sends ``notifications/initialized`` and
``tools/list`` and times that reply, and a call of the first tool that takes no required argument (the first
call waits for the environment's sandbox worker), then closes stdin and waits for the server to exit. Two
baselines are spawned in the same rounds, interleaved with the server so that a shared machine's load drifts
over all of them alike: ``python -c pass`` (the interpreter's own start) and ``python -c "import mcp"`` (the
``mcp`` SDK's import, the floor of any server answering with the SDK). With ``--before DIR`` (a checkout of
another commit, e.g. ``git worktree add --detach /tmp/before main``), serve-env is also spawned from that
checkout in the same rounds, so a change's before and after share the load. The baselines are timed to a
line they print once their code has run, not to their exit. Usage::

    .venv/bin/python -m benchmarks.serve_env_startup --tries 9
    .venv/bin/python -m benchmarks.serve_env_startup --home ~/.envfactory --env-id apideck_com__crm --before /tmp/before

Without ``--home``, a home is made in a temporary folder whose store holds the fixture bookshop environment,
built and verified (a few seconds). Prints a Markdown table of medians (and the fastest try) and the ratio of
each median to ``python -c pass``'s; ``benchmarks.run`` puts it into ``docs/BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
#: How long one server may take to answer before the try fails (a loaded machine, not a hang, is expected).
REPLY_TIMEOUT_S = 60.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "benchmarks.serve_env_startup", "version": "0"},
    },
}


def fixture_home(root: Path) -> tuple[Path, str]:
    """``(ENVFACTORY_HOME, env id)``: a home under ``root`` whose store holds the fixture bookshop environment
    with a passed verification, as ``test_mcp_server`` builds it."""
    from envfactory_assets.envgen.stage import environment_row, verification_row
    from envfactory_assets.settings import store_path
    from envfactory_assets.sources.stage import scan_rows
    from envfactory_assets.store.db import Store
    from envfactory_assets_tests.fixture_environments import FIXTURES

    home, corpus = root / "home", root / "corpus"
    corpus.mkdir(parents=True)
    shutil.copy(FIXTURES / "bookshop.json", corpus / "bookshop.json")
    accepted, _ = scan_rows(corpus)
    env_row = environment_row(accepted[0])
    verified = verification_row(env_row)
    if verified["status"] != "passed":
        raise RuntimeError(f"the fixture bookshop environment failed verification: {verified['reasons']}")
    store = Store(store_path(home))
    store.replace_current("source_resources", accepted)
    store.replace_current("environments", [env_row])
    store.replace_current("verified_environments", [verified])
    return home, env_row["env_id"]


def _spawn_line(code: str) -> float:
    """Seconds from spawning ``python -c code`` to a line it prints once ``code`` has run: as for serve-env,
    the time to an answer, without the interpreter's exit (which tears down every module imported)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{code}; print(flush=True)"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    proc.stdout.readline()
    seconds = time.perf_counter() - started
    if proc.wait() != 0:
        raise RuntimeError(f"python -c {code!r} failed (exit {proc.returncode})")
    return seconds


def _reply(proc: subprocess.Popen, request_id: int) -> dict[str, Any]:
    """The next message on the server's stdout with ``request_id`` (notifications before it are skipped)."""
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"serve-env closed its stdout before replying (exit {proc.wait()})")
        message = json.loads(line)
        if message.get("id") == request_id:
            return message


def _send(proc: subprocess.Popen, message: dict[str, Any]) -> None:
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _free_tool(tools: list[dict[str, Any]]) -> str | None:
    """The first tool with no required argument (its call needs no data of the environment), or None."""
    return next((t["name"] for t in tools if not (t.get("inputSchema") or {}).get("required")), None)


def serve_env_try(home: Path, env_id: str, checkout: Path = REPO_ROOT) -> dict[str, float]:
    """One spawn of serve-env from ``checkout``: seconds from spawn to the replies to ``initialize``,
    ``tools/list`` and the first tool call (absent when no tool takes no required argument).

    Raises:
        RuntimeError: the server exited, answered with an error, or took over :data:`REPLY_TIMEOUT_S`.
    """
    env = {**os.environ, "ENVFACTORY_HOME": str(home), "PYTHONPATH": str(checkout)}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "envfactory_assets.cli", "serve-env", env_id],
        env=env,
        cwd=checkout,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    timer = None
    try:
        timer = threading.Timer(REPLY_TIMEOUT_S, proc.kill)  # a hung server ends the try, not the benchmark
        timer.start()
        _send(proc, INITIALIZE)
        initialized = _reply(proc, 1)
        out = {"initialize": time.perf_counter() - started}
        if "result" not in initialized:
            raise RuntimeError(f"initialize failed: {initialized}")
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = _reply(proc, 2)["result"]["tools"]
        out["tools/list"] = time.perf_counter() - started
        name = _free_tool(tools)
        if name is not None:
            _send(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": {}}})
            called = _reply(proc, 3)
            if called.get("result", {}).get("isError", True):
                raise RuntimeError(f"tools/call {name} failed: {called}")
            out["first tools/call"] = time.perf_counter() - started
        proc.stdin.close()  # end of input: the server stops its sandbox worker and exits
        proc.wait(timeout=REPLY_TIMEOUT_S)
        return out
    except Exception as exc:
        raise RuntimeError(f"{exc}; stderr: {proc.stderr.read().decode(errors='replace')[-2000:]}") from None
    finally:
        if timer is not None:
            timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _commit(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True, text=True
    )
    return done.stdout.strip() or checkout.name


def measure(home: Path, env_id: str, tries: int, before: Path | None = None) -> dict[str, list[float]]:
    """``{what: [seconds of each try]}`` for the two baselines and serve-env's replies (from ``before`` too,
    when given), in rounds (one of each per round) so that they share the machine's load."""
    checkouts = [(f"serve-env at {_commit(REPO_ROOT)}", REPO_ROOT)]
    if before is not None:
        checkouts.insert(0, (f"serve-env at {_commit(before)} (before)", before))
    times: dict[str, list[float]] = {}
    for _, checkout in checkouts:  # a warm-up: compiled bytecode, the store file in the page cache
        serve_env_try(home, env_id, checkout)
    for _ in range(tries):
        times.setdefault("python -c pass", []).append(_spawn_line("pass"))
        times.setdefault('python -c "import mcp"', []).append(_spawn_line("import mcp"))
        for label, checkout in checkouts:
            for what, seconds in serve_env_try(home, env_id, checkout).items():
                times.setdefault(f"{label}: {what} reply", []).append(seconds)
    return times


def markdown(times: dict[str, list[float]], env_id: str, load: tuple[float, float]) -> str:
    """The table: each measure's median and fastest try in seconds, and its median over the baseline's."""
    base = statistics.median(times["python -c pass"])
    tries = len(times["python -c pass"])
    lines = [
        f"`python -m benchmarks.serve_env_startup`: `serve-env {env_id}`, {tries} tries of each, "
        "interleaved; from spawn to the reply (the baselines: to a line printed after the code ran). "
        f"Load average (1 min) "
        f"{load[0]:.1f} at the start, {load[1]:.1f} at the end, on {os.cpu_count()} cores.",
        "",
        "| from spawn to | median s | fastest s | median / python -c pass |",
        "|---|---|---|---|",
    ]
    for what, values in times.items():
        median = statistics.median(values)
        lines.append(f"| {what} | {median:.3f} | {min(values):.3f} | {median / base:.1f}x |")
    return "\n".join(lines)


def run(tries: int = 9, home: Path | None = None, env_id: str | None = None, before: Path | None = None) -> str:
    """The Markdown table of :func:`measure` on ``home`` and ``env_id`` (default: a fixture home made here)."""
    with tempfile.TemporaryDirectory(prefix="serve_env_startup_") as tmp:
        if home is None:
            home, env_id = fixture_home(Path(tmp))
        load_start = os.getloadavg()[0]
        times = measure(home, env_id, tries, before)
        return markdown(times, env_id, (load_start, os.getloadavg()[0]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help="an ENVFACTORY_HOME whose store holds --env-id verified (default: a fixture home)",
    )
    parser.add_argument("--env-id", default=None, help="the environment to serve (required with --home)")
    parser.add_argument("--tries", type=int, default=9, help="spawns of each measure (the median is reported)")
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a checkout of another commit whose serve-env is measured in the same rounds",
    )
    args = parser.parse_args(argv)
    if (args.home is None) != (args.env_id is None):
        parser.error("--home and --env-id go together")
    print(run(args.tries, args.home, args.env_id, args.before))


if __name__ == "__main__":
    main()
