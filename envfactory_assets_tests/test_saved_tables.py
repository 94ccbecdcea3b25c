"""Final-state comparison from kept row encodings: the same exact hashes as running ``save``, and every row a tool
could have changed in place encoded again."""

from __future__ import annotations

import builtins
import hashlib
import random
import textwrap
import types

import orjson
import pytest

from envfactory_assets.envgen.codegen import generate_source
from envfactory_assets.runtime.canonical import canonical_json
from envfactory_assets.runtime.cow_state import fork_view, freeze, plain
from envfactory_assets.runtime.engine import Engine, OperationError
from envfactory_assets.runtime.saved_tables import TABLE_SAVE_SOURCE, function_code, is_table_save, saved_items

TABLES = {
    "notes": {
        "key": "note_id",
        "prefix": "note",
        "fields": {"body": {"type": "string"}, "task_id": {"type": "string"}},
        "required": ["body"],
        "foreign_keys": {"task_id": "tasks"},
    },
    "tasks": {
        "key": "task_id",
        "prefix": "task",
        "fields": {"title": {"type": "string"}, "done": {"type": "boolean"}, "priority": {"type": "integer"}},
        "required": ["title"],
        "foreign_keys": {},
    },
}


def _tool(name: str, kind: str, table: str, props: list[str], required: list[str]) -> dict:
    types = {"done": "boolean", "priority": "integer", "limit": "integer"}
    schema = {
        "type": "object",
        "properties": {p: {"type": types.get(p, "string")} for p in props},
        "required": required,
    }
    return {"name": name, "description": name, "kind": kind, "table": table, "input_schema": schema}


SOURCE = generate_source(
    "planner",
    "test",
    TABLES,
    [
        _tool("get_task", "get", "tasks", ["task_id"], ["task_id"]),
        _tool("update_task", "update", "tasks", ["task_id", "title", "done", "priority"], ["task_id"]),
        _tool("create_task", "create", "tasks", ["title", "priority"], ["title"]),
        _tool("delete_task", "delete", "tasks", ["task_id"], ["task_id"]),
        _tool("list_tasks", "list", "tasks", ["done", "limit"], []),
        _tool("create_note", "create", "notes", ["body", "task_id"], ["body"]),
    ],
)


def _saved(n: int = 40) -> dict:
    tasks = [
        {
            "task_id": f"task_{i:05d}",
            "title": f"Task {i} é",
            "done": i % 3 == 0,
            "priority": i % 5,
            "created_at": "2024-05-01T12:00:00Z",
        }
        for i in range(1, n + 1)
    ]
    notes = [{"note_id": "note_00001", "body": 'ß "quoted"', "task_id": "task_00002", "created_at": "2024-05-01"}]
    state = {"tables": {"tasks": tasks, "notes": notes}, "meta": {"now": "2024-05-02", "seed": 7, "next_id": n + 1}}
    return orjson.loads(canonical_json(state))


def _by_save(engine: Engine, episode: str, env_id: str) -> str:
    """The exact hash as it always was: the environment's own ``save`` run on a plain copy of the state."""
    instance = engine.episodes[episode].instances[env_id]
    copied = orjson.loads(orjson.dumps(instance.state, default=plain))
    return hashlib.sha256(canonical_json(instance.save(copied))).hexdigest()


def _function(source: str, module_data: dict | None = None) -> types.FunctionType:
    """``save`` of ``source`` as a function over a module namespace holding ``module_data``."""
    namespace = {"__builtins__": builtins.__dict__, **(module_data or {})}
    return types.FunctionType(function_code(source, "save"), namespace)


def _kept(engine: Engine, episode: str, env_id: str) -> list[bytes] | None:
    instance = engine.episodes[episode].instances[env_id]
    return saved_items(instance.save, instance.state, instance.view_of)


def test_the_builders_save_is_the_table_save_and_lookalikes_are_not() -> None:
    engine = Engine()
    engine.load_env("planner", SOURCE)
    episode = engine.open_episode({"planner": _saved()})
    assert is_table_save(engine.episodes[episode].instances["planner"].save)
    other_constant = TABLE_SAVE_SOURCE.replace('"meta": dict', '"mota": dict')
    assert not is_table_save(_function(other_constant))
    assert not is_table_save(_function(TABLE_SAVE_SOURCE, {"dict": lambda row: {"forged": True}}))


@pytest.mark.parametrize("seed", range(6))
def test_hashes_and_saves_from_kept_encodings_are_those_of_running_save(seed: int) -> None:
    rng = random.Random(seed)
    engine = Engine()
    engine.load_env("planner", SOURCE)
    base = engine.open_episode({"planner": _saved()}, shared=True)
    gold = engine.fork(base)
    engine.call(gold, "update_task", {"task_id": "task_00003", "title": "gold"})
    calls = [
        lambda: ("get_task", {"task_id": f"task_{rng.randint(1, 45):05d}"}),
        lambda: ("update_task", {"task_id": f"task_{rng.randint(1, 42):05d}", "title": rng.choice(["gold", "x"])}),
        lambda: ("create_task", {"title": rng.choice(["a", "b"]), "priority": rng.randint(0, 4)}),
        lambda: ("delete_task", {"task_id": f"task_{rng.randint(1, 42):05d}"}),
        lambda: ("list_tasks", {"done": rng.choice([True, False])}),
        lambda: ("create_note", {"body": "n", "task_id": f"task_{rng.randint(1, 42):05d}"}),
    ]
    for _ in range(12):
        episode = engine.fork(base)
        for _ in range(rng.randint(0, 5)):
            engine.call(episode, *rng.choice(calls)())
            assert _kept(engine, episode, "planner") is not None
            expected = _by_save(engine, episode, "planner")
            assert engine.state_hashes(episode, [gold, base]) == {"planner": expected}
            assert engine.state_hashes(episode) == {"planner": expected}
            assert hashlib.sha256(orjson.dumps(engine.save(episode))[11:-1]).hexdigest() == expected
        assert engine.state_hashes(gold, [base]) == {"planner": _by_save(engine, gold, "planner")}
    plain_episode = engine.open_episode({"planner": _saved()})  # not shared: no snapshot, nothing kept
    assert engine.state_hashes(plain_episode) == {"planner": _by_save(engine, plain_episode, "planner")}


def test_save_returns_the_canonical_encoding_of_running_save() -> None:
    engine = Engine()
    engine.load_env("planner", SOURCE)
    base = engine.open_episode({"planner": _saved()}, shared=True)
    episode = engine.fork(base)
    engine.call(episode, "update_task", {"task_id": "task_00004", "done": True})
    instance = engine.episodes[episode].instances["planner"]
    expected = canonical_json(instance.save(orjson.loads(orjson.dumps(instance.state, default=plain))))
    assert orjson.dumps(engine.save(episode)) == b'{"planner":' + expected + b"}"


@pytest.mark.parametrize(
    "tables",
    [
        {},
        {"z": {}, "a": {"k": {"x": 1}}},
        {"é": {"1": {"b": [1, {"c": None}], "a": '\u0001"\\'}}, "Z": {"2": {}}, 'q"': {}, "\u00ff": {"3": {"n": -0.0}}},
    ],
    ids=["no tables", "empty table", "odd names and values"],
)
def test_kept_items_join_to_the_canonical_encoding(tables: dict) -> None:
    save = _function(TABLE_SAVE_SOURCE)
    state = {"tables": tables, "meta": {"b": 1, "a": [2.5]}}
    snapshot = freeze(state)
    for view, source in ((state, None), (fork_view(snapshot), snapshot), (fork_view(snapshot), snapshot)):
        assert b",".join(saved_items(save, view, source)) == canonical_json(save(orjson.loads(orjson.dumps(state))))


def test_states_save_would_not_read_as_tables_run_save_itself() -> None:
    source = TABLE_SAVE_SOURCE + textwrap.dedent("""\

        def load(data):
            return data

        def pairs(state):
            state["tables"]["t"]["k"] = [["a", 1]]
            return {}

        def drop_meta(state):
            del state["meta"]
            return {}
    """)
    engine = Engine()
    engine.load_env("odd", source)
    base = engine.open_episode({"odd": {"tables": {"t": {"j": {"a": 0}}}, "meta": {}}}, shared=True)
    episode = engine.fork(base)
    engine.call(episode, "pairs", {})
    assert _kept(engine, episode, "odd") is None  # a row of pairs: dict(r) makes an object of it
    assert engine.state_hashes(episode, [base]) == {"odd": _by_save(engine, episode, "odd")}
    broken = engine.fork(base)
    engine.call(broken, "drop_meta", {})
    with pytest.raises(OperationError) as raised:
        engine.state_hashes(broken, [base])
    assert (raised.value.error_type, raised.value.details["cause"]) == ("environment_fault", "exception")


# A tool that changes rows in place without writing through the state: rows it read in an earlier call, kept in
# module data, and the nested objects of rows. Only rows still shared with the snapshot keep their encodings, so
# each of these is encoded again.
HIDDEN_MUTATOR = TABLE_SAVE_SOURCE + textwrap.dedent("""\

    KEPT = []

    def load(data):
        return data

    def peek(state, key):
        KEPT.append(state["tables"]["items"][key])
        return {}

    def peek_all(state):
        KEPT.extend(state["tables"]["items"].values())
        return {}

    def scribble(state, text):
        for row in KEPT:
            row["name"] = text
            row["tags"].append(text)
        return {}

    def reorder(state, key):
        items = state["tables"]["items"]
        items[key] = items.pop(key)
        return {}
""")


def _items_state(n: int = 6) -> dict:
    rows = {f"r{i}": {"name": f"row {i}", "tags": ["a"]} for i in range(n)}
    return {"tables": {"items": rows}, "meta": {"now": "2024-05-01"}}


@pytest.mark.parametrize(
    "calls",
    [
        [("peek", {"key": "r2"}), ("scribble", {"text": "x"})],
        [("peek_all", {}), ("scribble", {"text": "x"})],
        [("peek", {"key": "r2"}), ("hash", {}), ("scribble", {"text": "x"})],
        [("peek", {"key": "r2"}), ("scribble", {"text": "row 2"}), ("hash", {}), ("scribble", {"text": "y"})],
        [("reorder", {"key": "r1"})],
    ],
    ids=["kept row", "every row", "after a comparison", "twice", "moved row"],
)
@pytest.mark.parametrize("python_guards", [True, False], ids=["guards", "no-guards"])
def test_a_row_changed_in_place_is_seen_by_the_comparison(calls: list, python_guards: bool) -> None:
    engine = Engine(python_guards=python_guards)
    engine.load_env("items", HIDDEN_MUTATOR)
    base = engine.open_episode({"items": _items_state()}, shared=True)
    gold = engine.fork(base)
    sibling = engine.fork(base)
    gold_hash = engine.state_hashes(gold)["items"]
    episode = engine.fork(base)
    for name, arguments in calls:
        if name == "hash":
            engine.state_hashes(episode, [gold])
        else:
            assert engine.call(episode, name, arguments)["ok"]
    assert _kept(engine, episode, "items") is not None  # the comparison reads kept encodings, never save
    changed = engine.state_hashes(episode, [gold, base])["items"]
    assert changed == _by_save(engine, episode, "items") != gold_hash
    assert engine.state_hashes(sibling, [gold]) == {"items": gold_hash}
    assert engine.state_hashes(engine.fork(base), [gold]) == {"items": gold_hash}


def test_a_table_that_kept_its_keys_encodes_only_the_rows_no_longer_the_snapshots(monkeypatch) -> None:
    from envfactory_assets.runtime import saved_tables

    engine = Engine()
    engine.load_env("planner", SOURCE)
    base = engine.open_episode({"planner": _saved(300)}, shared=True)
    warm = engine.fork(base)
    engine.call(warm, "update_task", {"task_id": "task_00001", "title": "warm"})
    assert _kept(engine, warm, "planner") is not None  # the snapshot's tables encoded whole once
    snapshot = engine.episodes[warm].instances["planner"].view_of
    assert sorted(len(keys) for keys, _, _ in snapshot.tables.values()) == [1, 300]
    encoded: list = []

    def counting(value):
        encoded.append(value)
        return canonical_json(value)

    monkeypatch.setattr(saved_tables, "canonical_json", counting)
    episode = engine.fork(base)
    engine.call(episode, "update_task", {"task_id": "task_00120", "title": "changed"})
    engine.call(episode, "get_task", {"task_id": "task_00007"})  # read: handed out, so encoded again
    engine.call(episode, "create_task", {"title": "new", "priority": 1})
    encoded.clear()
    items = _kept(engine, episode, "planner")
    rows = [v for v in encoded if isinstance(v, dict) and "task_id" in v]
    assert sorted(r["task_id"] for r in rows) == ["task_00007", "task_00120", "task_00301"]
    assert hashlib.sha256(b",".join(items)).hexdigest() == _by_save(engine, episode, "planner")
    # a row removed: the keys no longer begin with the snapshot's, so every row goes the row-by-row way
    engine.call(episode, "delete_task", {"task_id": "task_00002"})
    items = _kept(engine, episode, "planner")
    assert hashlib.sha256(b",".join(items)).hexdigest() == _by_save(engine, episode, "planner")
    assert engine.state_hashes(episode, [warm]) == {"planner": _by_save(engine, episode, "planner")}
