"""Load and fault test of ``envfactory serve-openenv``: many concurrent clients on one server process, one
sandbox worker killed mid-run, and the original design (one MCP server process per environment of an episode)
beside it in the same run.

What runs (127.0.0.1 only; every phase is bounded by its count and by ``--timeout-s``, and stops by itself):

1. a home in a temporary folder whose store holds the three fixture environments and their RL rows
   (``envfactory_assets_tests.rl_tasks.store_with_rl_rows``); the task is ``rl_three_environments``: 3 gold
   calls, one in each of 3 environments;
2. ``serve-openenv`` on a free port; ``--clients`` asyncio clients (OpenEnv's own ``GenericEnvClient``, one
   WebSocket each) run ``--episodes`` episodes in all: ``reset``, the 3 gold calls as steps, a final answer.
   An episode is *ok* when it ends with the maximum reward and the same state diff as the first episode (a
   different diff would be state leaking between sessions); *lost* when it ends with the structured
   ``episode_lost`` error. When ``--kill-at`` of the episodes are done, one sandbox worker process of the
   server is killed (SIGKILL of its process group): only the episodes on it may be lost, and the server must
   go on serving;
3. the original design over ``--per-process-episodes`` episodes (``--per-process-clients`` at once): per
   episode, one ``serve-env ENV_ID`` process (MCP over stdio) for each environment of the task, each gold call
   sent to the process of its environment, then every process closed.

Usage::

    .venv/bin/python -m benchmarks.openenv_load --episodes 10000 --clients 64 --per-process-episodes 200

Prints a Markdown table: episodes per second, step latency p50/p99 (ms, a step's request to its reply), the
server's peak memory (its process and every process under it, RSS), and the episodes ok / lost / other.
Exits 1 when an episode outside the killed worker's failed, a diff differed, or the server stopped serving.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.serve_env_http import start_cli_server, stop_server

REPO_ROOT = Path(__file__).resolve().parents[1]
TASK_ID = "rl_three_environments"
FINAL_ANSWER = "Done: the book is there, the calendar and the ticket are made."


def _tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and every process under it, in MiB (0 when it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


class PeakMemory:
    """Samples :func:`_tree_rss_mib` of a process every ``interval_s`` on a thread; ``peak`` is the largest."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.pid, self.interval_s, self.peak = pid, interval_s, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_rss_mib(self.pid))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def start_openenv(home: Path, max_sessions: int) -> tuple[subprocess.Popen, str]:
    """``serve-openenv`` on a free port of 127.0.0.1, answering ``/health``; the process and its base URL.

    Raises:
        RuntimeError: the server exited or did not answer within 120 s.
    """
    command = ["serve-openenv", "--max-sessions", str(max_sessions), "--max-steps", "16"]
    return start_cli_server(home, command, "/health")


def kill_one_worker(server_pid: int) -> int:
    """SIGKILL the process group of one sandbox worker under ``server_pid``; its pid.

    Raises:
        RuntimeError: the server has no child process (no worker started).
    """
    from envfactory_assets_tests.worker_processes import children, kill_worker

    workers = sorted(children(server_pid))
    if not workers:
        raise RuntimeError(f"serve-openenv (pid {server_pid}) has no worker process to kill")
    kill_worker(workers[0])
    return workers[0]


def _count(outcomes: dict[str, int], what: str) -> None:
    outcomes[what] = outcomes.get(what, 0) + 1


async def _episodes(
    url: str, task: dict[str, Any], todo: list[int], latencies: list[float], outcomes: dict[str, int], diffs: list
) -> None:
    """One client: episodes taken from ``todo`` until it is empty, on one WebSocket."""
    from openenv.core import GenericEnvClient

    async with GenericEnvClient(base_url=url) as env:
        while todo:
            todo.pop()
            try:
                await env.reset(task_id=task["id"])
                end = None
                for call in task["gold_calls"]:
                    started = time.perf_counter()
                    step = await env.step({"tool_name": call["name"], "arguments": call["arguments"]})
                    latencies.append(time.perf_counter() - started)
                    if step.done:
                        end = step
                        break
                if end is None:
                    end = await env.step({"final_answer": FINAL_ANSWER})
            except Exception as exc:  # a refused reset or a closed socket: counted, the client goes on
                _count(outcomes, f"error: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            error = end.observation.get("error") or {}
            if end.observation.get("end_reason") == "episode_lost" or error.get("type") == "episode_lost":
                outcomes["lost"] += 1
            elif end.reward == 1.0:
                diff = json.dumps(end.observation.get("state_diff"), sort_keys=True)
                if not diffs:
                    diffs.append(diff)
                _count(outcomes, "ok" if diff == diffs[0] else "diff differs")
            else:
                _count(
                    outcomes, f"other: reward {end.reward}, {end.observation.get('end_reason')}, {error.get('type')}"
                )


async def _load(
    url: str, task: dict[str, Any], episodes: int, clients: int, on_progress: Any
) -> tuple[list[float], dict[str, int]]:
    todo = list(range(episodes))
    latencies: list[float] = []
    outcomes = {"ok": 0, "lost": 0}
    diffs: list[str] = []
    watcher = asyncio.create_task(on_progress(todo))
    await asyncio.gather(*(_episodes(url, task, todo, latencies, outcomes, diffs) for _ in range(clients)))
    watcher.cancel()
    return latencies, outcomes


def one_server(home: Path, task: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Phase 2: the figures of ``--episodes`` episodes on one ``serve-openenv`` process, a worker killed."""
    proc, url = start_openenv(home, max(256, args.clients))
    killed: list[int] = []
    kill_after = int(args.episodes * args.kill_at) if args.kill_at > 0 else None

    async def watch(todo: list[int]) -> None:
        while True:
            done = args.episodes - len(todo)
            if kill_after is not None and not killed and done >= kill_after:
                killed.append(await asyncio.to_thread(kill_one_worker, proc.pid))
            await asyncio.sleep(0.05)

    try:
        with PeakMemory(proc.pid) as memory:
            started = time.perf_counter()
            latencies, outcomes = asyncio.run(
                asyncio.wait_for(_load(url, task, args.episodes, args.clients, watch), args.timeout_s)
            )
            seconds = time.perf_counter() - started
        serving = proc.poll() is None and _still_serves(url, task)
    finally:
        stop_server(proc)
    return {
        "design": f"one serve-openenv process, {args.clients} WebSocket clients",
        "episodes": args.episodes,
        "seconds": seconds,
        "latencies": latencies,
        "outcomes": outcomes,
        "peak_mib": memory.peak,
        "killed_worker": killed[0] if killed else None,
        "serving_after": serving,
    }


def _still_serves(url: str, task: dict[str, Any]) -> bool:
    """Whether one more episode runs to the maximum reward after the load."""
    from openenv.core import GenericEnvClient

    with GenericEnvClient(base_url=url).sync() as env:
        env.reset(task_id=task["id"])
        for call in task["gold_calls"]:
            env.step({"tool_name": call["name"], "arguments": call["arguments"]})
        return env.step({"final_answer": FINAL_ANSWER}).reward == 1.0


def _per_process_episode(home: Path, task: dict[str, Any], tool_env: dict[str, str]) -> tuple[list[float], bool]:
    """One episode the original way: a ``serve-env`` process per environment of the task, each gold call sent
    to its environment's process; step latencies (s) and whether every call answered without error."""
    from benchmarks.serve_env_startup import INITIALIZE, _reply, _send

    env = {**os.environ, "ENVFACTORY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    procs = {
        env_id: subprocess.Popen(
            [sys.executable, "-m", "envfactory_assets.cli", "serve-env", env_id],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for env_id in task["env_ids"]
    }
    latencies, ok = [], True
    try:
        for proc in procs.values():
            _send(proc, INITIALIZE)
        for proc in procs.values():
            ok = ok and "result" in _reply(proc, 1)
            _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        for i, call in enumerate(task["gold_calls"], start=2):
            proc = procs[tool_env[call["name"]]]
            started = time.perf_counter()
            _send(proc, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": call_params(call)})
            reply = _reply(proc, i)
            latencies.append(time.perf_counter() - started)
            ok = ok and not reply.get("result", {}).get("isError", True)
    finally:
        for proc in procs.values():
            proc.stdin.close()
        for proc in procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return latencies, ok


def call_params(call: dict[str, Any]) -> dict[str, Any]:
    return {"name": call["name"], "arguments": call["arguments"]}


def per_process(home: Path, task: dict[str, Any], envs: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Phase 3: the figures of ``--per-process-episodes`` episodes the original way."""
    from concurrent.futures import ThreadPoolExecutor

    tool_env = {t["name"]: env_id for env_id in task["env_ids"] for t in envs[env_id]["tools"]}
    latencies: list[float] = []
    outcomes = {"ok": 0, "lost": 0, "other": 0}
    started = time.perf_counter()
    with ThreadPoolExecutor(args.per_process_clients) as pool:
        for lat, ok in pool.map(lambda _: _per_process_episode(home, task, tool_env), range(args.per_process_episodes)):
            latencies += lat
            outcomes["ok" if ok else "other"] += 1
    return {
        "design": f"one serve-env process per environment per episode, {args.per_process_clients} at once",
        "episodes": args.per_process_episodes,
        "seconds": time.perf_counter() - started,
        "latencies": latencies,
        "outcomes": outcomes,
        "peak_mib": None,
        "killed_worker": None,
        "serving_after": None,
    }


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1] if len(values) > 1 else values[0]


def format_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| design | episodes | episodes/s | step p50 (ms) | step p99 (ms) | peak memory (MiB) | ok / lost / other |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        outcomes = dict(r["outcomes"])
        rest = sum(v for k, v in outcomes.items() if k not in ("ok", "lost"))
        peak = "" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}"
        lines.append(
            f"| {r['design']} | {r['episodes']} | {r['episodes'] / r['seconds']:.1f} | "
            f"{1000 * _quantile(r['latencies'], 0.5):.1f} | {1000 * _quantile(r['latencies'], 0.99):.1f} | "
            f"{peak} | {outcomes['ok']} / {outcomes['lost']} / {rest} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--kill-at", type=float, default=0.5, help="share of episodes done when a worker is killed")
    parser.add_argument("--per-process-episodes", type=int, default=200)
    parser.add_argument("--per-process-clients", type=int, default=8)
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="the load phase's own limit")
    args = parser.parse_args(argv)
    if (
        args.episodes < 1
        or args.clients < 1
        or args.per_process_clients < 1
        or not 0 <= args.kill_at < 1
        or args.per_process_episodes < 0
        or not 0 < args.timeout_s < float("inf")
    ):
        parser.error(
            "--episodes, --clients and --per-process-clients must be >= 1, --kill-at in [0, 1), "
            "--per-process-episodes >= 0, --timeout-s a finite number > 0"
        )
    return args


def run(argv: list[str] | None = None) -> tuple[str, bool]:
    """The Markdown of one run (the table and what the kill did) and whether it held: the server still serving
    after the kill and no episode failing otherwise than with the killed worker."""
    from envfactory_assets_tests.rl_tasks import store_with_rl_rows

    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="openenv-load-") as tmp:
        home = Path(tmp) / "home"
        envs, rows = store_with_rl_rows(home)
        task = next(r for r in rows if r["id"] == TASK_ID)
        results = [one_server(home, task, args)]
        if args.per_process_episodes:
            results.append(per_process(home, task, envs, args))
    load = results[0]
    leaked = load["outcomes"].get("diff differs", 0)
    others = sum(v for k, v in load["outcomes"].items() if k not in ("ok", "lost"))
    text = (
        format_table(results)
        + f"\n\nOne sandbox worker killed after {args.kill_at:.0%} of the episodes: episodes lost with it "
        f"{load['outcomes']['lost']} (each ended with the structured `episode_lost` error); episodes with another "
        f"state diff than the first (state leaking between sessions) {leaked}; other failures {others}; the server "
        f"still serving afterwards: {load['serving_after']}. Every outcome: `{load['outcomes']}`."
    )
    return text, bool(load["serving_after"]) and not others


def main(argv: list[str] | None = None) -> int:
    text, held = run(argv)
    print(text)
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
