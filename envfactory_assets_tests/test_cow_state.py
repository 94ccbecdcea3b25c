"""Copy-on-write episode states and module templates, in process (the engine the worker runs)."""

from __future__ import annotations

import copy
import math

import orjson
import pytest

from envfactory_assets.runtime.canonical import canonical_json, state_hash
from envfactory_assets.runtime.cow_state import CowDict, fork_view, freeze, same_value
from envfactory_assets.runtime.engine import Engine, OperationError

MODULE = """
COUNTS = {"calls": 0, "seen": []}

def load(data):
    return {"tables": {"rows": {r["id"]: dict(r) for r in data["tables"]["rows"]}}, "meta": dict(data["meta"])}

def save(state):
    return {"tables": {"rows": [dict(r) for r in state["tables"]["rows"].values()]}, "meta": dict(state["meta"])}

def rename(state, row_id, name):
    row = state["tables"]["rows"][row_id]
    state["tables"]["rows"][row_id] = {**row, "name": name}
    COUNTS["calls"] += 1
    COUNTS["seen"].append(row_id)
    return {"calls": COUNTS["calls"], "types": [type(state).__name__, str(type(row) is dict)]}

def add(state, name):
    number = state["meta"]["next_id"]
    state["meta"]["next_id"] = number + 1
    state["tables"]["rows"][f"r{number}"] = {"id": f"r{number}", "name": name, "tags": []}
    return {"id": f"r{number}"}

def tag(state, row_id, label):
    state["tables"]["rows"][row_id]["tags"].append(label)
    return {}
"""


def _saved(n: int = 5) -> dict:
    rows = [{"id": f"r{i}", "name": f"row {i}", "tags": ["t"]} for i in range(n)]
    return {"tables": {"rows": rows}, "meta": {"next_id": n, "now": "2024-05-01T00:00:00Z"}}


def _engine() -> Engine:
    engine = Engine()
    engine.load_env("rows", MODULE)
    return engine


def _output(result: dict) -> object:
    assert result["ok"], result
    return orjson.loads(bytes(orjson.dumps(result["output"])))


def _hash(engine: Engine, episode: str) -> str:
    return state_hash(orjson.loads(orjson.dumps(engine.save(episode)))["rows"])


@pytest.mark.parametrize(
    "state",
    [
        {"a": {1, 2}},
        {"a": (1, 2)},
        {"a": {1: "x"}},
        {"a": CowDict({"b": 1})},
        "not a dict",
    ],
    ids=["set", "tuple", "int key", "subclass", "not a container"],
)
def test_only_plain_json_trees_are_frozen(state: object) -> None:
    assert freeze(state) is None


def test_a_container_reachable_twice_is_not_frozen() -> None:
    shared = {"x": 1}
    assert freeze({"a": shared, "b": shared}) is None
    assert freeze({"a": {"x": 1}, "b": {"x": 1}}) is not None


def test_a_view_copies_only_what_it_reaches() -> None:
    root = {"tables": {"big": {f"k{i}": {"v": i, "tags": [i]} for i in range(100)}, "small": {"k": {"v": 0}}}}
    snapshot = freeze(root)
    view = fork_view(snapshot)
    view["tables"]["big"]["k3"]["tags"].append("mine")
    assert root["tables"]["big"]["k3"]["tags"] == [3]
    small = dict.__getitem__(dict.__getitem__(view, "tables"), "small")
    assert id(small) in snapshot.ids and small == root["tables"]["small"]  # still the snapshot's: not copied
    big = dict.__getitem__(dict.__getitem__(view, "tables"), "big")
    assert id(dict.__getitem__(big, "k4")) in snapshot.ids and id(dict.__getitem__(big, "k3")) not in snapshot.ids
    assert view["tables"]["big"]["k3"]["tags"] == [3, "mine"]
    assert fork_view(snapshot)["tables"]["big"]["k3"]["tags"] == [3]


def test_same_value_is_the_exact_json_value() -> None:
    plain = {"tables": {"t": {f"k{i}": {"n": i, "s": "x"} for i in range(100)}}, "meta": {"next": 3, "f": 0.0}}
    snapshot = freeze(copy.deepcopy(plain))
    view, other = fork_view(snapshot), fork_view(snapshot)
    assert same_value(view, plain) and same_value(view, other)
    view["tables"]["t"]["k1"]["n"] = 1.0  # equal in Python, not in JSON
    assert not same_value(view, other) and not same_value(view, plain)
    view["tables"]["t"]["k1"]["n"] = True
    assert not same_value(view, other)
    view["tables"]["t"]["k1"] = {"n": 1, "s": "x"}
    assert same_value(view, other) and same_value(view, plain)
    view["meta"]["f"] = -0.0
    assert not same_value(view, other)
    view["meta"]["f"] = 0.0
    for i in range(50):  # many rows changed: compared by their encodings
        view["tables"]["t"][f"k{i}"] = dict(view["tables"]["t"][f"k{i}"])
    assert same_value(view, other)
    table = plain["tables"]["t"]
    reordered = {"tables": {"t": {"k1": table["k1"], "k0": table["k0"], **table}}, "meta": plain["meta"]}
    assert not same_value(reordered, plain)  # a table's order is its saved rows' order
    assert not same_value({"a": {1, 2}}, {"a": {1, 2}})
    assert not same_value({1: "x"}, {True: "x"})


def test_forks_share_the_frozen_state_and_never_see_each_other() -> None:
    engine = _engine()
    base = engine.open_episode({"rows": _saved()})
    first, second = engine.fork(base), engine.fork(base)
    assert engine.episodes[first].instances["rows"].view_of is engine.episodes[second].instances["rows"].view_of
    _output(engine.call(first, "tag", {"row_id": "r1", "label": "first"}))
    assert _output(engine.call(first, "rename", {"row_id": "r1", "name": "x"})) == {
        "calls": 1,
        "types": ["dict", "True"],
    }
    assert _output(engine.call(second, "rename", {"row_id": "r2", "name": "y"}))["calls"] == 1  # own module data
    saved_first = orjson.loads(orjson.dumps(engine.save(first)))["rows"]
    assert saved_first["tables"]["rows"][1] == {"id": "r1", "name": "x", "tags": ["t", "first"]}
    untouched = orjson.loads(orjson.dumps(engine.save(engine.fork(base))))["rows"]
    assert untouched == _saved()


def test_state_hashes_are_the_exact_hashes() -> None:
    engine = _engine()
    base = engine.open_episode({"rows": _saved()})
    gold = engine.fork(base)
    _output(engine.call(gold, "add", {"name": "new"}))
    _output(engine.call(gold, "rename", {"row_id": "r0", "name": "renamed"}))
    gold_hash = _hash(engine, gold)
    canonical = orjson.loads(canonical_json(orjson.loads(orjson.dumps(engine.save(gold)))["rows"]))
    sorted_reference = engine.open_episode({"rows": canonical})  # keys sorted: digests differ, hashes do not
    for reference in ((), (gold,), (sorted_reference,), (sorted_reference, gold, base)):
        right = engine.fork(base)
        _output(engine.call(right, "rename", {"row_id": "r0", "name": "renamed"}))
        _output(engine.call(right, "add", {"name": "new"}))
        wrong = engine.fork(base)
        _output(engine.call(wrong, "add", {"name": "other"}))
        assert engine.state_hashes(right, reference) == {"rows": gold_hash}
        assert engine.state_hashes(wrong, reference) == {"rows": _hash(engine, wrong)} != {"rows": gold_hash}
        assert engine.state_hashes(engine.fork(base), reference) == {"rows": _hash(engine, base)}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_canonical_json_refuses_a_non_finite_float_inside_a_view_without_copying_what_it_shares(bad: float) -> None:
    root = {"tables": {"t": {"a": {"x": bad, "tags": [1]}, "b": {"x": 1.0}}}, "meta": {"list": [[bad]]}}
    snapshot = freeze(root)
    view = fork_view(snapshot)
    for value in (view, dict.__getitem__(view, "meta"), fork_view(freeze({"l": [[bad]]}))["l"]):
        with pytest.raises(TypeError, match="is not a JSON number"):
            canonical_json(value)
    assert id(dict.__getitem__(view, "tables")) in snapshot.ids  # read through, never copied
    view["tables"]["t"]["a"]["x"] = 2.0
    view["meta"]["list"][0][0] = None
    assert canonical_json(view) == canonical_json(
        {"tables": {"t": {"a": {"x": 2.0, "tags": [1]}, "b": {"x": 1.0}}}, "meta": {"list": [[None]]}}
    )


NON_FINITE = """
def load(data):
    return data

def save(state):
    return state

def set_ratio(state, value):
    state["meta"]["ratio"] = float(value)
    return {}
"""


def test_a_non_finite_state_equal_to_its_reference_is_an_environment_fault() -> None:
    engine = Engine()
    engine.load_env("ratio", NON_FINITE)
    base = engine.open_episode({"ratio": {"meta": {"ratio": 0.0}, "rows": [{"id": 1}]}})
    reference = engine.fork(base)
    _output(engine.call(reference, "set_ratio", {"value": "nan"}))
    rollout = engine.fork(base)
    _output(engine.call(rollout, "set_ratio", {"value": "nan"}))
    for episode, references in ((rollout, [reference]), (rollout, []), (reference, [])):
        with pytest.raises(OperationError) as raised:
            engine.state_hashes(episode, references)
        assert (raised.value.error_type, raised.value.details["cause"]) == ("environment_fault", "not_serializable")
        assert "is not a JSON number" in raised.value.message


def test_a_module_with_a_class_is_executed_for_every_episode() -> None:
    engine = Engine()
    engine.load_env("classy", "class Box:\n    n = 0\n\ndef load(d):\n    return d\n\ndef save(s):\n    return s\n")
    engine.load_env("rows", MODULE)
    assert engine.environments["classy"].template is None
    assert engine.environments["rows"].template is not None


def test_a_module_whose_load_sets_module_state_is_executed_for_every_episode() -> None:
    """A ``load`` that rebinds a module-level name sets up state per episode: later forks must run it again, so
    no template is made. The static check refuses ``global`` outright; with the Python layer off (as the
    containment corpus runs) the template must still not be made."""
    with pytest.raises(OperationError, match="'global' statements are not allowed"):
        Engine().load_env("stateful_load", "def load(d):\n    global SEEN\n    SEEN = 1\n    return d\n")
    engine = Engine(python_guards=False)
    source = (
        "SEEN = None\n\n"
        "def load(d):\n    global SEEN\n    SEEN = d.get('mark')\n    return d\n\n"
        "def save(s):\n    return s\n\n"
        "def seen(state):\n    'Which mark the load saw'\n    return SEEN\n"
    )
    engine.load_env("stateful_load", source)
    assert engine.environments["stateful_load"].template is None


def test_the_snapshot_cannot_be_changed_past_a_views_methods() -> None:
    """``dict.get``, ``list.copy`` and the like read a view's storage, which holds the snapshot's frozen
    containers: they read as the plain values, print as them, and refuse every change in place."""
    root = {"tables": {"t": {"a": {"n": 1, "tags": [1], "sub": {"x": 1}}}}, "meta": {"l": [[1], {"y": 2}]}}
    snapshot = freeze(copy.deepcopy(root))
    view = fork_view(snapshot)
    row = dict.get(view["tables"]["t"], "a")
    assert row == root["tables"]["t"]["a"] and dict.get(view, "meta") == root["meta"]
    with pytest.raises(TypeError, match="does not support item assignment"):
        row["n"] = 2
    with pytest.raises(TypeError, match="shared by every fork"):
        row["tags"].append(2)
    with pytest.raises(TypeError, match="does not support item assignment"):
        row["sub"]["x"] = 2
    nested = list.copy(view["meta"]["l"])
    assert nested == [[1], {"y": 2}] and repr(nested) == "[[1], mappingproxy({'y': 2})]"
    assert nested[0] == [1] and [1] == nested[0] and nested[0] != (1,) and nested[0] < [2] and not nested[0] > [1]
    with pytest.raises(TypeError, match="unhashable"):
        hash(nested[0])
    with pytest.raises(TypeError, match="not supported"):
        _ = nested[0] < (2,)
    with pytest.raises(TypeError, match="cannot be set"):
        type(nested[0]).copy = list  # the class every episode of the worker shares
    for change in (nested[0].append, nested[0].extend, nested[0].remove, nested[0].pop):
        with pytest.raises(TypeError, match="shared by every fork"):
            change(1)
    with pytest.raises(TypeError, match="shared by every fork"):
        nested[0][0] = 2
    with pytest.raises(TypeError):
        copy.copy(row)
    assert repr(fork_view(snapshot)) == repr(root)  # a view prints as the plain state
    view["tables"]["t"]["a"]["tags"].append(2)  # the view's own copy changes, the snapshot does not
    assert row["tags"] == [1] and view["tables"]["t"]["a"]["tags"] == [1, 2]
    assert same_value(fork_view(snapshot), root) and canonical_json(fork_view(snapshot)) == canonical_json(root)


MODULE_DATA = """
SEEN = {"ids": [], "by": {"x": 1}}

def load(data):
    return data

def save(state):
    return state

def scribble(state):
    dict.get(SEEN, "ids").append(1)

def read(state):
    return SEEN
"""


def test_module_data_cannot_be_changed_past_a_views_methods() -> None:
    engine = Engine()
    engine.load_env("seen", MODULE_DATA)
    assert engine.environments["seen"].template is not None  # module data served as views of one snapshot
    base = engine.open_episode({"seen": {}})
    first, second = engine.fork(base), engine.fork(base)
    result = engine.call(first, "scribble", {})
    assert not result["ok"] and "shared by every fork" in result["error"]["message"]
    assert _output(engine.call(second, "read", {})) == {"ids": [], "by": {"x": 1}}
