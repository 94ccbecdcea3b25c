"""Micro-benchmarks of the runtime (run on demand, not part of the tests)::

    python -m envfactory_assets.runtime.bench [--rows 1000] [--repeat 200]
    python -m envfactory_assets.runtime.bench --replies [--repeat 5]

Prints one table row per operation: mean, median and 95th percentile wall time in milliseconds.
Worker rows include the pipe round trip and JSON encoding on both sides. ``--replies`` instead decodes
50 MiB replies with :func:`.bounded_json.loads` in one orjson call (``PIECE_BYTES`` raised above the reply)
and piecewise, and prints the decode time and the longest gap a thread ticking every 10 ms saw meanwhile.
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

import envfactory_assets.runtime.bounded_json as bounded_json
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


def _records(count: int) -> bytes:
    record = {"ok": True, "score": 0.25, "tags": ["a", "b", "c"], "meta": {"x": 1, "y": None}, "text": "t" * 120}
    return b"[" + b",".join(orjson.dumps({"id": i, "name": f"item{i}", **record}) for i in range(count)) + b"]"


#: name: (the reply, its bounds, the collector on while decoding). 200,000 small objects are past the default
#: decoded-size bound (an estimated 400 MiB): a parent with a larger ``max_response_mb`` reads them; the collector
#: is off for them, as its full pauses grow with every container alive in the process, not with the decoder.
REPLIES: dict[str, tuple[Callable[[], bytes], bounded_json.JsonBounds, bool]] = {
    "200k small objects, 46 MiB": (
        lambda: _records(200_000),
        bounded_json.JsonBounds(max_decoded_bytes=1 << 30),
        False,
    ),
    "130k escaped strings, 50 MiB": (
        lambda: b"[" + b",".join([b'"' + b'\\"' * 200 + b'"'] * 130_000) + b"]",
        bounded_json.JsonBounds(),
        True,
    ),
    "one string, 40 MiB": (lambda: b'"' + b"s" * (40 << 20) + b'"', bounded_json.JsonBounds(), True),
}


def _decode_once(payload: bytes, bounds: bounded_json.JsonBounds) -> tuple[float, float]:
    """(decode seconds, longest gap in seconds between two wake-ups of a thread sleeping 10 ms at a time)."""
    gaps = [0.0]
    stop = threading.Event()

    def tick() -> None:
        last = time.monotonic()
        while not stop.wait(0.01):
            now = time.monotonic()
            gaps[0] = max(gaps[0], now - last)
            last = now

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    time.sleep(0.05)
    started = time.perf_counter()
    decoded = bounded_json.loads(payload, bounds)
    elapsed = time.perf_counter() - started
    stop.set()
    thread.join()
    del decoded
    return elapsed, gaps[0]


def run_replies(repeat: int) -> list[str]:
    """For every reply of :data:`REPLIES`, decoded ``repeat`` times each way, in turn: the shortest decode time
    (other programs only ever add to it) and the median of the longest gaps, in one orjson call and piecewise
    (milliseconds), one line each."""
    lines = [f"{'reply':<30}  {'one call ms':>11}  {'gap ms':>7}  {'piecewise ms':>12}  {'gap ms':>7}"]
    piece = bounded_json.PIECE_BYTES
    for name, (make, bounds, collector) in REPLIES.items():
        payload = make()
        runs: dict[int, list[tuple[float, float]]] = {len(payload): [], piece: []}
        try:
            for _ in range(repeat):
                for piece_bytes, found in runs.items():
                    bounded_json.PIECE_BYTES = piece_bytes
                    gc.collect()
                    if not collector:
                        gc.disable()
                    try:
                        found.append(_decode_once(payload, bounds))
                    finally:
                        gc.enable()
        finally:
            bounded_json.PIECE_BYTES = piece
        figures = []
        for found in runs.values():
            figures += [min(r[0] for r in found) * 1000, statistics.median(r[1] for r in found) * 1000]
        lines.append(f"{name:<30}  {figures[0]:>11.0f}  {figures[1]:>7.0f}  {figures[2]:>12.0f}  {figures[3]:>7.0f}")
    return lines


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
    parser.add_argument("--repeat", type=int, default=None, help="runs of each operation (200; 5 with --replies)")
    parser.add_argument("--replies", action="store_true", help="decode 50 MiB replies instead (see above)")
    args = parser.parse_args(argv)
    if args.replies:
        print("\n".join(run_replies(args.repeat or 5)))
        return
    print(format_table(run(args.rows, args.repeat or 200)))


if __name__ == "__main__":
    main()
