"""Micro-benchmarks of the runtime (run on demand, not part of the tests)::

    python -m envfactory_assets.runtime.bench [--rows 1000] [--repeat 200]

Prints one table row per operation: mean, median and 95th percentile wall time in milliseconds.
Worker rows include the pipe round trip and JSON encoding on both sides.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker

# A contract-following environment with the shape generated code usually has.
BENCH_ENV_SOURCE = """
def load(data):
    tables = data.get("tables")
    meta = data.get("meta")
    if not isinstance(tables, dict) or not isinstance(meta, dict):
        raise ValueError("state needs 'tables' and 'meta'")
    rows = tables.get("tasks")
    if not isinstance(rows, list):
        raise ValueError("tables.tasks must be a list")
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), int):
            raise ValueError("every task needs an integer task_id")
    return {"tables": {"tasks": [dict(row) for row in rows]}, "meta": dict(meta)}


def save(state):
    return {"tables": {"tasks": [dict(row) for row in state["tables"]["tasks"]]}, "meta": dict(state["meta"])}


def get_task(state, task_id):
    for row in state["tables"]["tasks"]:
        if row["task_id"] == task_id:
            return {"task": row}
    raise LookupError(f"task {task_id} not found")


def ping(state):
    return {"pong": True}
"""


def make_state(rows: int) -> dict[str, Any]:
    """A saved todo state with ``rows`` rows of 6 fields each."""
    return {
        "tables": {
            "tasks": [
                {
                    "task_id": i,
                    "title": f"Task number {i} with a realistic title",
                    "done": i % 3 == 0,
                    "priority": i % 5,
                    "tags": ["work", "urgent"] if i % 2 else ["home"],
                    "created_at": "2024-05-01T12:00:00Z",
                }
                for i in range(1, rows + 1)
            ]
        },
        "meta": {"now": "2024-05-02T09:30:00Z", "seed": 7, "next_id": rows + 1},
    }


def measure(function: Callable[[], Any], repeat: int) -> list[float]:
    """Wall time of ``repeat`` calls, in milliseconds, after 3 warm-up calls."""
    for _ in range(3):
        function()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def run(rows: int, repeat: int) -> list[tuple[str, list[float]]]:
    """Run every benchmark; returns ``[(label, samples_ms)]``."""
    state = make_state(rows)
    results: list[tuple[str, list[float]]] = [
        (f"state_hash, {rows} rows (in process)", measure(lambda: state_hash(state), repeat)),
        (f"orjson round trip, {rows} rows (in process)", measure(lambda: orjson.loads(orjson.dumps(state)), repeat)),
        (f"copy.deepcopy, {rows} rows (in process)", measure(lambda: copy.deepcopy(state), max(10, repeat // 4))),
    ]
    with SandboxWorker(SandboxLimits()) as worker:
        worker.load_environment("bench", BENCH_ENV_SOURCE, origin="template")
        episode = worker.open_episode({"bench": state})
        small = worker.open_episode({"bench": make_state(1)})
        results.append(("tool call round trip, trivial tool", measure(lambda: worker.call(small, "ping"), repeat)))
        results.append(
            (
                f"tool call round trip, get_task on {rows} rows",
                measure(lambda: worker.call(episode, "get_task", {"task_id": rows}), repeat),
            )
        )
        results.append((f"state_hash via worker, {rows} rows", measure(lambda: worker.state_hash(episode), repeat)))

        def fork_and_close() -> None:
            worker.close_episode(worker.fork(episode))

        results.append((f"fork + close via worker, {rows} rows", measure(fork_and_close, repeat)))
        results.append((f"save via worker, {rows} rows", measure(lambda: worker.save(episode), repeat)))

        def open_and_close() -> None:
            worker.close_episode(worker.open_episode({"bench": state}))

        results.append((f"open_episode + close, {rows} rows", measure(open_and_close, repeat)))
    results += _three_environment_rollouts(rows, max(10, repeat // 4))
    return results


def _three_environment_rollouts(rows: int, repeat: int) -> list[tuple[str, list[float]]]:
    """A task over three environments (three trust domains, so three worker processes): worker
    start, and a rollout = fork the task's episode, 5 tool calls, final-state hash, close."""
    starts = []
    for _ in range(max(3, repeat // 5)):
        with SandboxWorker(SandboxLimits()) as fresh:
            began = time.perf_counter()
            fresh.load_environment("bench_a", BENCH_ENV_SOURCE, origin="template")
            fresh.open_episode({"bench_a": make_state(1)})
            starts.append((time.perf_counter() - began) * 1000)
    env_ids = ("bench_a", "bench_b", "bench_c")
    state = make_state(rows)
    with SandboxWorker(SandboxLimits()) as worker:
        for env_id in env_ids:
            worker.load_environment(env_id, BENCH_ENV_SOURCE, origin="template")
        task = worker.open_episode({env_id: state for env_id in env_ids})

        def rollout() -> None:
            episode = worker.fork(task)
            for index in range(5):
                worker.call(episode, f"{env_ids[index % 3]}.get_task", {"task_id": index + 1})
            worker.state_hash(episode)
            worker.close_episode(episode)

        return [
            ("worker start + load + open (one environment)", starts),
            (f"rollout on 3 environments x {rows} rows (fork, 5 calls, hash, close)", measure(rollout, repeat)),
        ]


def format_table(results: list[tuple[str, list[float]]]) -> str:
    """Render ``run``'s results as a fixed-width text table (milliseconds)."""
    width = max(len(label) for label, _ in results)
    lines = [f"{'operation':<{width}}  {'n':>5}  {'mean ms':>9}  {'p50 ms':>9}  {'p95 ms':>9}"]
    for label, samples in results:
        ordered = sorted(samples)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        lines.append(
            f"{label:<{width}}  {len(samples):>5}  {statistics.fmean(samples):>9.3f}  "
            f"{statistics.median(samples):>9.3f}  {p95:>9.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m envfactory_assets.runtime.bench")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    print(format_table(run(args.rows, args.repeat)))


if __name__ == "__main__":
    main()
