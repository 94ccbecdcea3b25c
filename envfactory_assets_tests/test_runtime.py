"""SandboxWorker end to end: a real worker process running small contract-following environments."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Iterator

import pytest

from envfactory_assets.runtime import (
    EnvironmentFault,
    EnvironmentRejected,
    EpisodeLost,
    SandboxLimits,
    SandboxWorker,
    StateRejected,
    UnknownEnvironment,
    state_hash,
    static_check,
)
from envfactory_assets.runtime.sandbox import MAX_DEFERRED_CLOSES

# A todo-list environment following the module contract of docs/design.md.
TODO_SOURCE = '''
"""Todo list: one table `tasks` keyed by `task_id`; ids come from meta.next_id."""
import copy

TABLE = "tasks"
KEY = "task_id"


def load(data):
    if not isinstance(data, dict):
        raise ValueError("state must be an object")
    tables = data.get("tables")
    meta = data.get("meta")
    if not isinstance(tables, dict) or not isinstance(meta, dict):
        raise ValueError("state needs 'tables' and 'meta' objects")
    rows = tables.get(TABLE)
    if not isinstance(rows, list):
        raise ValueError("tables.tasks must be a list")
    seen = set()
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get(KEY), int):
            raise ValueError("every task needs an integer task_id")
        if row[KEY] in seen:
            raise ValueError(f"duplicate task_id {row[KEY]}")
        seen.add(row[KEY])
    if not isinstance(meta.get("next_id"), int):
        raise ValueError("meta.next_id must be an integer")
    return {"tables": {TABLE: [dict(row) for row in rows]}, "meta": dict(meta)}


def save(state):
    return copy.deepcopy(state)


def _rows(state):
    return state["tables"][TABLE]


def _position(state, task_id):
    for position, row in enumerate(_rows(state)):
        if row[KEY] == task_id:
            return position
    raise LookupError(f"task {task_id} not found")


def list_tasks(state, done=None):
    rows = [row for row in _rows(state) if done is None or row["done"] == done]
    return {"tasks": rows, "count": len(rows)}


def get_task(state, task_id):
    return {"task": _rows(state)[_position(state, task_id)]}


def create_task(state, title, done=False):
    if not isinstance(title, str) or not title.strip():
        raise ValueError("title must be a non-empty string")
    meta = state["meta"]
    row = {KEY: meta["next_id"], "title": title, "done": bool(done), "created_at": meta["now"]}
    state["tables"][TABLE] = _rows(state) + [row]
    state["meta"] = dict(meta, next_id=meta["next_id"] + 1)
    return {"task": row}


def delete_task(state, task_id):
    position = _position(state, task_id)
    rows = list(_rows(state))
    removed = rows.pop(position)
    state["tables"][TABLE] = rows
    return {"deleted": removed[KEY]}
'''

# Misbehaving tools (all of which pass the static check).
CHAOS_SOURCE = """
CACHE = {}


def load(data):
    return dict(data)


def save(state):
    return dict(state)


def spin(state):
    while True:
        pass


def stubborn_spin(state):
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass


def hog_memory(state, mb=4096):
    return {"size": len("x" * (mb * 1024 * 1024))}


def grow_memory(state):
    chunks = []
    while True:
        chunks.append("y" * 1_000_000 + str(len(chunks)))


def bad_output(state):
    return {"tags": {1, 2}}


def buggy(state):
    return 1 + "a"


def count_calls(state):
    CACHE["n"] = CACHE.get("n", 0) + 1
    return {"n": CACHE["n"]}


def noisy(state):
    print("hello from the tool")
    return {"printed": True}
"""

FAST_LIMITS = SandboxLimits(memory_mb=256, cpu_seconds=20, call_timeout_s=0.5, kill_grace_s=1.0)


def todo_state(*titles: str) -> dict:
    rows = [
        {"task_id": i, "title": title, "done": False, "created_at": "2024-05-01T12:00:00Z"}
        for i, title in enumerate(titles, start=1)
    ]
    return {"tables": {"tasks": rows}, "meta": {"now": "2024-05-02T09:00:00Z", "seed": 0, "next_id": len(rows) + 1}}


def new_worker(limits: SandboxLimits = FAST_LIMITS) -> SandboxWorker:
    worker = SandboxWorker(limits)
    worker.load_environment("todo", TODO_SOURCE)
    worker.load_environment("chaos", CHAOS_SOURCE)
    return worker


@pytest.fixture(scope="module")
def worker() -> Iterator[SandboxWorker]:
    with new_worker() as shared:
        yield shared


@pytest.fixture
def fresh_worker() -> Iterator[SandboxWorker]:
    with new_worker() as own:
        yield own


def wait_until_dead(pid: int, timeout_s: float = 5.0) -> None:
    """Wait until ``pid`` is a zombie (killed, not yet reaped), then a moment for the sandbox inside
    it, which the kernel kills when bubblewrap dies (parent-death signal, PID namespace teardown)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                    break
        except FileNotFoundError:
            break
        time.sleep(0.01)
    time.sleep(0.2)


def output(result: dict) -> dict:
    assert result["ok"], result
    return result["output"]


def test_fixture_sources_pass_the_static_check() -> None:
    assert static_check(TODO_SOURCE) == []
    assert static_check(CHAOS_SOURCE) == []


def test_load_call_save_round_trip(worker: SandboxWorker) -> None:
    assert worker.load_environment("todo", TODO_SOURCE) == ["list_tasks", "get_task", "create_task", "delete_task"]
    episode = worker.open_episode({"todo": todo_state("buy milk")})

    created = output(worker.call(episode, "create_task", {"title": "write report"}))
    assert created == {
        "task": {"task_id": 2, "title": "write report", "done": False, "created_at": "2024-05-02T09:00:00Z"}
    }
    assert output(worker.call(episode, "get_task", {"task_id": 2}))["task"]["title"] == "write report"
    assert output(worker.call(episode, "list_tasks"))["count"] == 2

    saved = worker.save(episode)
    assert list(saved) == ["todo"]
    assert saved["todo"]["meta"]["next_id"] == 3
    assert [row["task_id"] for row in saved["todo"]["tables"]["tasks"]] == [1, 2]

    reopened = worker.open_episode(saved)
    assert worker.save(reopened) == saved
    assert worker.state_hash(reopened) == worker.state_hash(episode) == state_hash(saved)


def test_fork_is_isolated_both_ways(worker: SandboxWorker) -> None:
    original = worker.open_episode({"todo": todo_state("a", "b")})
    before = worker.state_hash(original)
    fork = worker.fork(original)
    assert worker.state_hash(fork) == before

    output(worker.call(fork, "delete_task", {"task_id": 1}))
    output(worker.call(fork, "create_task", {"title": "only in fork"}))
    assert worker.state_hash(original) == before
    assert output(worker.call(original, "list_tasks"))["count"] == 2

    output(worker.call(original, "create_task", {"title": "only in original"}))
    titles = [t["title"] for t in output(worker.call(fork, "list_tasks"))["tasks"]]
    assert titles == ["b", "only in fork"]

    worker.close_episode(original)
    assert output(worker.call(fork, "list_tasks"))["count"] == 2
    with pytest.raises(EpisodeLost):
        worker.call(original, "list_tasks")


def test_state_hash_is_equal_on_replay(worker: SandboxWorker) -> None:
    script = [
        ("create_task", {"title": "x"}),
        ("create_task", {"title": "y", "done": True}),
        ("delete_task", {"task_id": 1}),
    ]
    hashes = []
    for _ in range(2):
        episode = worker.open_episode({"todo": todo_state("seed row")})
        for tool, arguments in script:
            output(worker.call(episode, tool, arguments))
        hashes.append(worker.state_hash(episode))
        assert hashes[-1] == state_hash(worker.save(episode))
    assert hashes[0] == hashes[1]

    other = worker.open_episode({"todo": todo_state("seed row")})
    output(worker.call(other, "create_task", {"title": "different"}))
    assert worker.state_hash(other) != hashes[0]


@pytest.mark.parametrize(
    ("tool", "arguments", "error_type", "message_part"),
    [
        ("create_task", {}, "bad_arguments", "missing 1 required positional argument: 'title'"),
        ("create_task", {"title": "x", "colour": "red"}, "bad_arguments", "unexpected keyword argument 'colour'"),
        ("create_task", {"title": "  "}, "bad_arguments", "title must be a non-empty string"),
        ("get_task", {"task_id": 99}, "not_found", "task 99 not found"),
        ("delete_task", {"task_id": 99}, "not_found", "task 99 not found"),
        ("drop_tables", {}, "unknown_tool", "no tool named 'drop_tables'"),
        ("load", {}, "unknown_tool", "no tool named 'load'"),
    ],
)
def test_tool_errors_are_structured(
    worker: SandboxWorker, tool: str, arguments: dict, error_type: str, message_part: str
) -> None:
    episode = worker.open_episode({"todo": todo_state("a")})
    result = worker.call(episode, tool, arguments)
    assert result["ok"] is False
    assert result["error"]["type"] == error_type
    assert message_part in result["error"]["message"]
    assert worker.is_open(episode)  # tool errors keep the episode
    assert output(worker.call(episode, "list_tasks"))["count"] == 1


def test_environment_bugs_and_bad_outputs_are_structured(worker: SandboxWorker) -> None:
    episode = worker.open_episode({"chaos": {}})
    buggy = worker.call(episode, "buggy")["error"]
    assert buggy["type"] == "tool_error" and buggy["exception"] == "TypeError" and isinstance(buggy["line"], int)
    assert worker.call(episode, "bad_output")["error"]["type"] == "output_not_serializable"


def test_invalid_state_is_rejected_with_env_and_message(worker: SandboxWorker) -> None:
    state = todo_state("a")
    del state["meta"]["next_id"]
    with pytest.raises(StateRejected) as caught:
        worker.open_episode({"chaos": {}, "todo": state})
    assert caught.value.env_id == "todo"
    assert "meta.next_id must be an integer" in caught.value.message


def test_unsafe_or_broken_environments_are_rejected(worker: SandboxWorker) -> None:
    with pytest.raises(EnvironmentRejected) as caught:
        worker.load_environment("evil", "import os\n\ndef load(d):\n    return d\n\ndef save(s):\n    return s\n")
    assert caught.value.env_id == "evil"
    assert caught.value.violations == ["line 1: import of 'os' is not allowed"]

    with pytest.raises(EnvironmentRejected, match="missing function save"):
        worker.load_environment("no_save", "def load(data):\n    return data\n")
    with pytest.raises(EnvironmentRejected, match="line 3: module execution failed: ZeroDivisionError"):
        worker.load_environment("crashes", "def load(d):\n    return d\nx = 1 / 0\n")
    with pytest.raises(EnvironmentRejected, match="tool 'missing' is not defined"):
        worker.load_environment("todo_subset", TODO_SOURCE, tool_names=["list_tasks", "missing"])
    with pytest.raises(UnknownEnvironment):
        worker.open_episode({"never_loaded": {}})


def test_tool_names_limit_the_exposed_tools(worker: SandboxWorker) -> None:
    assert worker.load_environment("todo_read_only", TODO_SOURCE, tool_names=["list_tasks", "get_task"]) == [
        "list_tasks",
        "get_task",
    ]
    episode = worker.open_episode({"todo_read_only": todo_state("a")})
    assert worker.call(episode, "create_task", {"title": "x"})["error"]["type"] == "unknown_tool"


def test_tool_names_are_resolved_across_environments(worker: SandboxWorker) -> None:
    worker.load_environment("todo_b", TODO_SOURCE)
    episode = worker.open_episode({"todo": todo_state("a"), "todo_b": todo_state("b", "c"), "chaos": {}})
    assert worker.call(episode, "list_tasks")["error"]["type"] == "ambiguous_tool"
    assert output(worker.call(episode, "todo_b.list_tasks"))["count"] == 2
    assert output(worker.call(episode, "count_calls")) == {"n": 1}  # unique name, no prefix needed
    assert set(worker.save(episode)) == {"todo", "todo_b", "chaos"}


def test_module_level_objects_are_private_to_each_episode(worker: SandboxWorker) -> None:
    episode = worker.open_episode({"chaos": {}})
    assert output(worker.call(episode, "count_calls")) == {"n": 1}
    assert output(worker.call(episode, "count_calls")) == {"n": 2}
    assert output(worker.call(worker.open_episode({"chaos": {}}), "count_calls")) == {"n": 1}
    assert output(worker.call(worker.fork(episode), "count_calls")) == {"n": 1}


def test_prints_do_not_corrupt_the_protocol(worker: SandboxWorker) -> None:
    episode = worker.open_episode({"chaos": {}})
    assert output(worker.call(episode, "noisy")) == {"printed": True}
    deadline = time.monotonic() + 2
    while "hello from the tool" not in worker.stderr_tail() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "hello from the tool" in worker.stderr_tail()


def test_infinite_loop_is_stopped_and_worker_keeps_other_episodes(fresh_worker: SandboxWorker) -> None:
    bystander = fresh_worker.open_episode({"todo": todo_state("keep me")})
    sibling = fresh_worker.open_episode({"chaos": {}})
    episode = fresh_worker.open_episode({"chaos": {}})
    pid = fresh_worker.pids["chaos"]
    started = time.monotonic()
    result = fresh_worker.call(episode, "spin")
    assert time.monotonic() - started < FAST_LIMITS.call_timeout_s + FAST_LIMITS.kill_grace_s
    assert result["ok"] is False
    assert result["error"]["type"] == "timeout" and result["error"]["episode_lost"] is True
    assert fresh_worker.pids["chaos"] == pid  # stopped inside the worker, no restart
    assert output(fresh_worker.call(sibling, "count_calls")) == {"n": 1}
    assert not fresh_worker.is_open(episode)
    with pytest.raises(EpisodeLost):
        fresh_worker.call(episode, "count_calls")
    assert output(fresh_worker.call(bystander, "list_tasks"))["count"] == 1


def test_unstoppable_loop_kills_the_worker_which_restarts(fresh_worker: SandboxWorker) -> None:
    bystander = fresh_worker.open_episode({"todo": todo_state("kept")})
    sibling = fresh_worker.open_episode({"chaos": {}})
    mixed = fresh_worker.open_episode({"todo": todo_state("lost"), "chaos": {}})
    first_pid = fresh_worker.pids["chaos"]
    starts = fresh_worker.starts
    episode = fresh_worker.open_episode({"chaos": {}})
    started = time.monotonic()
    result = fresh_worker.call(episode, "stubborn_spin")
    assert time.monotonic() - started < FAST_LIMITS.call_timeout_s + FAST_LIMITS.kill_grace_s + 2.0
    assert result["error"]["type"] == "timeout" and result["error"]["episode_lost"] is True
    assert "chaos" not in fresh_worker.pids  # killed; restarted lazily
    # Every episode with a part in the killed environment's worker is gone, others are not.
    for lost in (sibling, mixed):
        with pytest.raises(EpisodeLost):
            fresh_worker.call(lost, "count_calls")
    assert output(fresh_worker.call(bystander, "list_tasks"))["count"] == 1
    # Environments survive the restart: they are re-loaded into the fresh child on demand.
    again = fresh_worker.open_episode({"chaos": {}})
    assert fresh_worker.pids["chaos"] != first_pid
    assert fresh_worker.starts == starts + 1
    assert output(fresh_worker.call(again, "count_calls"))["n"] == 1


def test_memory_hogs_are_stopped() -> None:
    # A generous time limit: filling 256 MiB can take a while on a loaded machine.
    limits = dataclasses.replace(FAST_LIMITS, call_timeout_s=10.0)
    with new_worker(limits) as worker:
        worker.open_episode({"chaos": {}})
        pid = worker.pids["chaos"]
        for tool in ("hog_memory", "grow_memory"):
            episode = worker.open_episode({"chaos": {}})
            result = worker.call(episode, tool)
            assert result["ok"] is False
            assert result["error"]["type"] == "memory", result
            assert result["error"]["episode_lost"] is True
        assert worker.pids["chaos"] == pid
        assert output(worker.call(worker.open_episode({"chaos": {}}), "count_calls")) == {"n": 1}


def test_crashed_worker_becomes_structured_error_and_recovers(fresh_worker: SandboxWorker) -> None:
    episode = fresh_worker.open_episode({"todo": todo_state("a")})
    pid = fresh_worker.pid
    os.kill(pid, signal.SIGKILL)
    wait_until_dead(pid)
    result = fresh_worker.call(episode, "list_tasks")
    assert result["ok"] is False
    assert result["error"]["type"] == "crash" and "SIGKILL" in result["error"]["message"]
    assert output(fresh_worker.call(fresh_worker.open_episode({"todo": todo_state("b")}), "list_tasks"))["count"] == 1


def test_cpu_limit_kills_a_runaway_request() -> None:
    limits = SandboxLimits(memory_mb=256, cpu_seconds=1, call_timeout_s=10.0, kill_grace_s=0.5)
    with new_worker(limits) as worker:
        episode = worker.open_episode({"chaos": {}})
        started = time.monotonic()
        result = worker.call(episode, "stubborn_spin")
        assert time.monotonic() - started < limits.call_timeout_s  # the CPU limit struck first
        # the parent reads the worker's CPU time and kills it at the limit, before the kernel's SIGXCPU backstop
        assert result["error"]["type"] == "resource_limit", result
        assert "CPU limit of 1 s per call" in result["error"]["message"]
        assert result["error"]["episode_lost"] and not worker.is_open(episode)


def test_closed_episodes_are_freed_by_the_workers_next_request() -> None:
    with new_worker() as worker:
        base = worker.open_episode({"todo": todo_state("a", "b"), "chaos": {}}, shared=True)
        forks = [worker.fork(base) for _ in range(5)]
        assert worker.held_episodes("todo") == worker.held_episodes("chaos") == 6
        for fork in forks:
            worker.close_episode(fork)
            with pytest.raises(EpisodeLost):
                worker.call(fork, "list_tasks")
        assert worker.held_episodes("todo") == worker.held_episodes("chaos") == 1  # freed before the ping ran
        for _ in range(MAX_DEFERRED_CLOSES + 3):  # past the bound they are freed without another request
            worker.close_episode(worker.fork(base))
        assert worker.held_episodes("todo") == 1 and worker.held_episodes("missing") is None
        assert worker.call(base, "list_tasks")["ok"]


def test_close_is_idempotent_and_final() -> None:
    worker = new_worker()
    pids = list(worker.pids.values())
    assert pids
    worker.close()
    worker.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(Exception, match="closed"):
        worker.load_environment("todo", TODO_SOURCE)


NON_FINITE_SOURCE = """
def load(data):
    return dict(data)


def save(state):
    return dict(state)


def set_ratio(state, value):
    state["ratio"] = float(value)
    return {"ratio": str(state["ratio"])}
"""


def test_a_state_holding_nan_or_infinity_is_an_environment_fault_never_hashed_as_null(worker: SandboxWorker) -> None:
    worker.load_environment("non_finite", NON_FINITE_SOURCE)
    episode = worker.open_episode({"non_finite": {}})
    assert output(worker.call(episode, "set_ratio", {"value": "1.5"})) == {"ratio": "1.5"}
    assert worker.save(episode) == {"non_finite": {"ratio": 1.5}}
    for text in ("nan", "inf", "-inf"):
        output(worker.call(episode, "set_ratio", {"value": text}))
        with pytest.raises(EnvironmentFault) as raised:
            worker.save(episode)
        assert (raised.value.env_id, raised.value.cause) == ("non_finite", "not_serializable")
        assert "is not a JSON number" in raised.value.message
