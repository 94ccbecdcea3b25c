"""Episodes at memory speed: fork, comparison, one call and whole rollouts against their floors, in one run.

The environment is the programmatic builder's code (``envgen.codegen``) over one table of ``--rows`` rows, the
shape most environments have. Measured, as medians of ``--repeat`` tries:

- inside the worker (the worker's engine in this process, Python guards on, no pipe): a fork of a task's base
  and its close; the comparison of a final state with the gold one (``state_hashes`` with the task's reference:
  equal, and not equal, which saves and hashes the state); against the floors of a copy-on-write map over the
  table (``collections.ChainMap``) and of the exact hash (orjson canonical encoding + sha256 of the saved state),
  and the fork that loads ``save(state)`` afresh (what every fork did before);
- through the sandbox: one call of a trivial tool against a pipe echo to a worker process (same framing), their
  tries alternated; and the same pair again in a process held to one CPU, whose worker and echo processes
  inherit it (on an idle virtual machine a worker woken on the other, halted, virtual CPU waits for that CPU to
  wake, which the echo, woken on the caller's CPU, does not: this pair shows the call without that wait);
- a whole rollout's environment overhead as the parent sees it (fork the task's base, 5 calls, final-state
  hashes, close) on a 1-environment and a 3-environment task (three trust domains, three worker processes),
  against as many pipe echoes as it has round trips (a close rides on the worker's next request, the next
  rollout's fork, whose time includes it), tries alternated, and against the previous path (open the episode
  on the row's initial state, 5 calls, save and hash in the parent, close).

With ``--before DIR`` (a checkout of another commit), the previous path's rollouts also run with that
checkout's code, in a subprocess, in the same run. Usage::

    .venv/bin/python -m benchmarks.episode_speed --rows 1000 --repeat 200 [--before /tmp/before] [--write]

``--write`` puts the table into ``docs/BENCHMARKS.md`` (its own section, replaced on each run).
"""

from __future__ import annotations

import argparse
import collections
import copy
import hashlib
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from envfactory_assets.envgen.codegen import generate_source
from envfactory_assets.runtime.canonical import canonical_json, state_hash
from envfactory_assets.runtime.engine import Engine
from envfactory_assets.runtime.protocol import FrameChannel, encode_frame
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker

DOC = Path(__file__).resolve().parents[1] / "docs" / "BENCHMARKS.md"
SECTION = "## Episodes at memory speed"
TABLES = {
    "tasks": {
        "key": "task_id",
        "prefix": "task",
        "fields": {
            "title": {"type": "string"},
            "done": {"type": "boolean"},
            "priority": {"type": "integer", "minimum": 0, "maximum": 5},
            "owner": {"type": "string"},
            "notes": {"type": "string"},
        },
        "required": ["title"],
        "foreign_keys": {},
    }
}


def _tool(name: str, kind: str, props: list[str], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in props}, "required": required}
    return {"name": name, "description": name, "kind": kind, "table": "tasks", "input_schema": schema}


SOURCE = generate_source(
    "bench",
    "benchmark",
    TABLES,
    [
        _tool("get_task", "get", ["task_id"], ["task_id"]),
        _tool("update_task", "update", ["task_id", "title", "done", "priority"], ["task_id"]),
        _tool("create_task", "create", ["title", "priority"], ["title"]),
        _tool("list_tasks", "list", ["done", "limit"], []),
    ],
)
#: A rollout's calls: reads, updates and a create. A scan (``list_tasks``) is the tool's own work, not the
#: environment's overhead: it is measured on its own (``scan``).
CALLS = [
    ("get_task", {"task_id": "task_00005"}),
    ("update_task", {"task_id": "task_00005", "title": "call the vendor", "done": True}),
    ("create_task", {"title": "book the venue", "priority": 2}),
    ("get_task", {"task_id": "task_00007"}),
    ("update_task", {"task_id": "task_00007", "priority": 4}),
]
SCAN = ("list_tasks", {"done": True, "limit": 5})
PING = "def load(d):\n    return d\n\ndef save(s):\n    return s\n\ndef ping(state):\n    return {'pong': True}\n"
ECHO = textwrap.dedent("""\
    import sys
    from envfactory_assets.runtime.protocol import read_frame, write_frame
    out = sys.stdout.buffer
    while True:
        try:
            message = read_frame(sys.stdin.buffer)
        except EOFError:
            break
        write_frame(out, {"id": message.get("id"), "ok": True, "result": {"ok": True, "output": {"pong": True}}})
""")


def saved_state(rows: int) -> dict[str, Any]:
    """A saved state of the benchmark environment with ``rows`` rows, keys sorted as the store keeps them."""
    tasks = [
        {
            "task_id": f"task_{i:05d}",
            "title": f"Task number {i} with a realistic title",
            "done": i % 3 == 0,
            "priority": i % 5,
            "owner": "ana@example.com",
            "notes": "call the vendor before friday",
            "created_at": "2024-05-01T12:00:00Z",
        }
        for i in range(1, rows + 1)
    ]
    state = {"tables": {"tasks": tasks}, "meta": {"now": "2024-05-02T09:30:00Z", "seed": 7, "next_id": rows + 1}}
    return orjson.loads(canonical_json(state))


def paired_medians_us(first: Callable[[], Any], second: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median wall times of ``first`` and ``second`` in microseconds, their ``repeat`` tries alternated (after 3
    warm-up calls of each), so that a load that comes and goes on a shared machine weighs on both alike."""
    for _ in range(3):
        first()
        second()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for function, out in ((first, samples[0]), (second, samples[1])):
            start = time.perf_counter()
            function()
            out.append(time.perf_counter() - start)
    return statistics.median(samples[0]) * 1e6, statistics.median(samples[1]) * 1e6


def median_us(function: Callable[[], Any], repeat: int) -> float:
    """Median wall time of ``function`` in microseconds over ``repeat`` tries, after 3 warm-up calls."""
    for _ in range(3):
        function()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def in_worker(rows: int, repeat: int) -> dict[str, float]:
    """Fork and comparison inside the worker's engine, and their floors."""
    saved = saved_state(rows)
    engine = Engine()
    engine.load_env("bench", SOURCE)
    base = engine.open_episode({"bench": saved}, shared=True)
    reference = engine.fork(base)
    for name, arguments in CALLS:
        engine.call(reference, name, arguments)

    def fork_close() -> None:
        engine.close(engine.fork(base))

    def rollout_state() -> str:
        episode = engine.fork(base)
        for name, arguments in CALLS:
            engine.call(episode, name, arguments)
        return episode

    equal = [rollout_state() for _ in range(repeat + 3)]
    unequal = []
    for _ in range(repeat + 3):
        episode = engine.fork(base)
        engine.call(episode, "create_task", {"title": "something else"})
        unequal.append(episode)
    equal_iter, unequal_iter = iter(equal), iter(unequal)
    table = {row["task_id"]: row for row in saved["tables"]["tasks"]}
    plain = engine.open_episode({"bench": saved})

    def reload_fork() -> None:  # the fork every fork was: load(save(state)) in a fresh module
        engine.episodes[plain].instances["bench"].touched()
        engine.close(engine.fork(plain))

    return {
        "fork": median_us(fork_close, repeat),
        "compare_equal": median_us(lambda: engine.state_hashes(next(equal_iter), [reference]), repeat),
        "compare_unequal": median_us(lambda: engine.state_hashes(next(unequal_iter), [reference]), repeat),
        "floor_cow_map": median_us(lambda: collections.ChainMap({}, table), repeat),
        "floor_exact_hash": median_us(lambda: hashlib.sha256(canonical_json(saved)).hexdigest(), repeat),
        "reload_fork": median_us(reload_fork, max(10, repeat // 10)),
    }


class _Echo:
    """A plain worker process that answers every frame at once (the pipe's floor)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        self.proc = subprocess.Popen(  # a fixed command, no shell
            [sys.executable, "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self.channel = FrameChannel(self.proc.stdin.fileno(), self.proc.stdout.fileno())
        self._ids = iter(range(1, 1 << 62))

    def round_trip(self) -> None:
        frame = encode_frame({"id": next(self._ids), "op": "call", "timeout_s": 5.0, "episode_id": "ep1-x"})
        deadline = time.monotonic() + 5
        self.channel.send(frame, deadline)
        self.channel.receive(deadline)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def through_sandbox(rows: int, repeat: int) -> dict[str, float]:
    """One call and whole rollouts through the sandbox, the pipe echo, and the previous rollout path."""
    saved = saved_state(rows)
    echo = _Echo()
    results: dict[str, float] = {}
    with SandboxWorker(SandboxLimits()) as worker:
        worker.load_environment("ping", PING, origin="template")
        small = worker.open_episode({"ping": {}})

        def call() -> None:
            worker.call(small, "ping")

        results["call"], results["echo"] = paired_medians_us(call, echo.round_trip, repeat)
        for n_envs in (1, 3):
            env_ids = [f"bench_{i}" for i in range(n_envs)]
            for env_id in env_ids:
                worker.load_environment(env_id, SOURCE, origin="template")
            states = {env_id: saved for env_id in env_ids}
            base = worker.open_episode(states, shared=True)
            reference = worker.fork(base)
            for index, (name, arguments) in enumerate(CALLS):
                worker.call(reference, f"{env_ids[index % n_envs]}.{name}", arguments)

            def rollout(ids: list[str] = env_ids, base: str = base, reference: str = reference) -> None:
                episode = worker.fork(base)
                for index, (name, arguments) in enumerate(CALLS):
                    worker.call(episode, f"{ids[index % len(ids)]}.{name}", arguments)
                worker.state_hashes(episode, [reference])
                worker.close_episode(episode)

            def previous(ids: list[str] = env_ids, states: dict = states) -> None:
                episode = worker.open_episode(copy.deepcopy(states))
                for index, (name, arguments) in enumerate(CALLS):
                    worker.call(episode, f"{ids[index % len(ids)]}.{name}", arguments)
                {env_id: state_hash(state) for env_id, state in worker.save(episode).items()}
                worker.close_episode(episode)

            # round trips of a rollout: a fork and a hash per environment, and the calls (a close rides on the
            # worker's next request)
            trips = 2 * n_envs + len(CALLS)
            results[f"rollout_{n_envs}"], results[f"echo_rollout_{n_envs}"] = paired_medians_us(
                rollout, lambda t=trips: [echo.round_trip() for _ in range(t)], repeat
            )
            results[f"previous_{n_envs}"] = median_us(previous, max(10, repeat // 10))
    echo.close()
    return results


ONE_CPU_SCRIPT = textwrap.dedent("""\
    import json, os, sys
    from benchmarks import episode_speed as bench
    from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the worker and the echo inherit it
    repeat = int(sys.argv[1])
    echo = bench._Echo()
    with SandboxWorker(SandboxLimits()) as worker:
        worker.load_environment("ping", bench.PING, origin="template")
        episode = worker.open_episode({"ping": {}})
        call, floor = bench.paired_medians_us(lambda: worker.call(episode, "ping"), echo.round_trip, repeat)
    echo.close()
    print(json.dumps({"call_one_cpu": call, "echo_one_cpu": floor}))
""")


def on_one_cpu(repeat: int) -> dict[str, float]:
    """One call against a pipe echo, in a process held to one CPU with its worker and echo (see the module
    docstring); empty where the process cannot set its CPU affinity."""
    if not hasattr(os, "sched_setaffinity"):
        return {}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(  # a fixed command, no shell
        [sys.executable, "-c", ONE_CPU_SCRIPT, str(repeat)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


BEFORE_SCRIPT = textwrap.dedent("""\
    import copy, json, statistics, sys, time
    from envfactory_assets.runtime.canonical import state_hash
    from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
    source, saved, calls, repeat = json.loads(sys.stdin.read())
    out = {}
    with SandboxWorker(SandboxLimits()) as worker:
        for n in (1, 3):
            ids = [f"bench_{i}" for i in range(n)]
            for env_id in ids:
                worker.load_environment(env_id, source, origin="template")
            base = worker.open_episode({e: saved for e in ids})
            samples = {"fork": [], "open": []}
            for _ in range(repeat + 3):
                for kind in samples:
                    start = time.perf_counter()
                    if kind == "fork":
                        episode = worker.fork(base)
                    else:
                        episode = worker.open_episode(copy.deepcopy({e: saved for e in ids}))
                    for index, (name, arguments) in enumerate(calls):
                        worker.call(episode, f"{ids[index % n]}.{name}", arguments)
                    if kind == "fork":
                        worker.state_hash(episode)
                    else:
                        {e: state_hash(s) for e, s in worker.save(episode).items()}
                    worker.close_episode(episode)
                    samples[kind].append(time.perf_counter() - start)
            for kind, values in samples.items():
                out[f"before_{kind}_{n}"] = statistics.median(values[3:]) * 1e6
    print(json.dumps(out))
""")


def before(checkout: Path, rows: int, repeat: int) -> dict[str, float]:
    """The previous code's rollouts (fork or open, 5 calls, hash, close), run from ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    payload = json.dumps([SOURCE, saved_state(rows), CALLS, repeat])
    done = subprocess.run(  # a fixed command, no shell
        [sys.executable, "-c", BEFORE_SCRIPT], input=payload, capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown(rows: int, repeat: int, figures: dict[str, float]) -> str:
    """The section's table: each figure, its floor, the ratio and the target."""

    def line(what: str, key: str, floor_key: str | None, floor_what: str, target: str) -> str:
        value = figures[key]
        if floor_key is None:
            return f"| {what} | {value:,.1f} | | | {target} |"
        floor = figures[floor_key]
        return f"| {what} | {value:,.1f} | {floor_what}: {floor:,.1f} | {value / floor:.2f}x | {target} |"

    lines = [
        f"{rows:,} rows, medians of {repeat} tries (of {max(10, repeat // 10)} for the reloading paths), "
        "microseconds, one run:",
        "",
        "| measure | us | floor (same run) | ratio | target |",
        "|---|---:|---|---:|---|",
        line("fork + close, in the worker", "fork", "floor_cow_map", "copy-on-write map (ChainMap)", "<= 50 us"),
        line(
            "first fork of an episode: load(save(state)) and freeze (every fork before)",
            "reload_fork",
            "fork",
            "fork now",
            "",
        ),
        line(
            "comparison with the gold state, equal, in the worker",
            "compare_equal",
            "floor_exact_hash",
            "sha256 of canonical JSON",
            "<= 500 us",
        ),
        line(
            "comparison, not equal (saved and hashed), in the worker",
            "compare_unequal",
            "floor_exact_hash",
            "sha256 of canonical JSON",
            "<= 500 us",
        ),
        line("one call through the sandbox worker", "call", "echo", "pipe echo to a worker", "<= 2x"),
    ]
    if "call_one_cpu" in figures:
        lines.append(
            line(
                "same call, parent and worker held to one CPU",
                "call_one_cpu",
                "echo_one_cpu",
                "pipe echo on that CPU",
                "<= 2x",
            )
        )
    for n in (1, 3):
        target = "<= 1,000 us" if n == 1 else "<= 2,000 us"
        lines.append(
            line(
                f"rollout, {n} environment(s): fork, 5 calls, hashes, close",
                f"rollout_{n}",
                f"echo_rollout_{n}",
                f"{2 * n + len(CALLS)} pipe echoes",
                target,
            )
        )
        lines.append(
            line(
                "same rollout, previous path (open, save to parent)",
                f"previous_{n}",
                f"rollout_{n}",
                "rollout now",
                "",
            )
        )
        for kind in ("fork", "open"):
            key = f"before_{kind}_{n}"
            if key in figures:
                lines.append(
                    line(f"same rollout, previous code ({kind}, hash)", key, f"rollout_{n}", "rollout now", "")
                )
    return "\n".join(lines)


#: The hand-kept notes of ``benchmarks/notes.md`` that explain this table (its subsection under this title).
NOTES_TITLE = "### Episodes at memory speed: where the time goes"


def notes() -> str:
    """This benchmark's subsection of ``benchmarks/notes.md`` ('' when there is none)."""
    path = Path(__file__).with_name("notes.md")
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if NOTES_TITLE not in text:
        return ""
    rest = text.split(NOTES_TITLE, 1)[1]
    end = rest.find("\n### ")
    return NOTES_TITLE + (rest[:end] if end >= 0 else rest).rstrip() + "\n"


def write_section(text: str, command: str) -> None:
    """Replace (or append) this benchmark's section of ``docs/BENCHMARKS.md``, with its notes."""
    body = f"{SECTION}\n\nWritten by `{command}`.\n\n{text}\n\n{notes()}"
    doc = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Benchmarks\n"
    if SECTION in doc:
        head, _, rest = doc.partition(SECTION)
        following = rest.find("\n## ")
        doc = head + body + (rest[following + 1 :] if following >= 0 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + body
    DOC.write_text(doc, encoding="utf-8")


def run(rows: int = 1000, repeat: int = 200, before_checkout: Path | None = None) -> str:
    """Every measure in one run; the Markdown table."""
    figures = {**in_worker(rows, repeat), **through_sandbox(rows, repeat), **on_one_cpu(repeat)}
    if before_checkout is not None:
        figures.update(before(before_checkout, rows, max(10, repeat // 10)))
    return markdown(rows, repeat, figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows of the environment's table")
    parser.add_argument("--repeat", type=int, default=200, help="tries per measure")
    parser.add_argument("--before", type=Path, default=None, help="a checkout of the previous code")
    parser.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    args = parser.parse_args()
    if args.rows < 10 or args.repeat < 5:
        parser.error("--rows must be >= 10 and --repeat >= 5")
    table = run(args.rows, args.repeat, args.before)
    print(table)
    if args.write:
        command = f"python -m benchmarks.episode_speed --rows {args.rows} --repeat {args.repeat}"
        if args.before is not None:
            command += " --before CHECKOUT"
        write_section(table, command + " --write")


if __name__ == "__main__":
    main()
