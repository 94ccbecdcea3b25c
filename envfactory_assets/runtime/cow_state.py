"""Copy-on-write episode states: a fork shares every row it does not touch with the state it was forked from.

A :class:`Snapshot` holds one in-memory state (what an environment's ``load`` returned) that no environment
code ever sees again. :func:`fork_view` gives an episode its own view of it in O(1): a :class:`CowDict` root
whose containers are the snapshot's until the episode reaches them. Every path by which Python code reaches a
child container (``d[k]``, ``d.get``, ``values``, ``items``, iteration of a list, ``pop``, slicing, ``copy``,
``|``, ``+``, ``*``, ``sorted``...) first replaces that child, in this view only, with a private copy: a plain
``dict``/``list`` when the child holds no containers (a flat row), else another copy-on-write node. So a tool
that mutates a row in place, or a list inside a row, changes only its own episode; the snapshot's objects are
never handed out, and a sibling fork never sees the change.

What is not covered: code that reaches a node's storage through the unbound methods of ``dict``/``list``
themselves (``dict.values(row)``) gets the shared children. Environment code has no reason to do that, and the
trust boundary between environments is the worker process, not this module.

Comparison: :func:`same_value` tells whether two states hold the same JSON value. Views forked from one
snapshot still share every row they did not touch, so comparing a rollout's final state with the task's gold
state (a view of the same snapshot) costs a pass over the touched tables' entries in C and the touched rows
themselves; the stored ``state_hash`` (sha256 of canonical JSON) is unchanged and still computed for what
differs.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

import orjson

_LEAVES = (str, int, float, bool, type(None))
#: The containers a snapshot may hold; anything else (sets, tuples, objects) keeps the episode on plain forks.
_CONTAINERS = (dict, list)
#: Past this many children that are not the same object, two containers are compared by their encodings.
_MANY_DIFFERENT = 32
# Subclasses go to ``plain``, which refuses every one but this module's own (as the engine's encoders do).
_STRICT = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _own(child: Any, snapshot: Snapshot) -> Any:
    """A private copy of a shared container ``child``: a plain copy when it holds no containers."""
    if id(child) in snapshot.deep:
        return CowDict.over(child, snapshot) if type(child) is dict else CowList.over(child, snapshot)
    return child.copy()


class Snapshot:
    """A frozen in-memory state, shared by the views forked from it.

    Args:
        root: the state (a ``dict``); from now on only this module may hold references into it.

    Attributes:
        root: the frozen state.
        deep: ids of the snapshot's containers that hold containers (their copies are copy-on-write too).
        ids: ids of all its containers. The snapshot keeps them alive, so an id names one of them as long as the
            snapshot lives: a value whose id is here is the snapshot's own container.
        flat_rows: ``{id of a dict of the snapshot: whether every container it holds is a dict holding no
            container}`` (a table of flat rows, whose children are copied with ``dict.copy``), filled on first use.
        encodings: ``{id of a container of the snapshot: its canonical JSON}``, filled by whoever encodes one
            (:mod:`.saved_tables`); it holds as long as the snapshot, whose containers never change.
    """

    __slots__ = ("deep", "encodings", "flat_rows", "ids", "root")

    def __init__(self, root: dict[str, Any] | list[Any], deep: frozenset[int], ids: frozenset[int]) -> None:
        self.root = root
        self.deep = deep
        self.ids = ids
        self.flat_rows: dict[int, bool] = {}
        self.encodings: dict[int, bytes] = {}

    def holds_flat_rows(self, node: dict[str, Any]) -> bool:
        """Whether every container ``node`` (a dict of the snapshot) holds is a ``dict`` holding no container."""
        known = self.flat_rows.get(id(node))
        if known is None:
            children = [v for v in node.values() if type(v) in _CONTAINERS]
            known = self.flat_rows[id(node)] = self.deep.isdisjoint(map(id, children)) and all(
                type(v) is dict for v in children
            )
        return known


def freeze(state: Any, leaf: Callable[[Any], bool] | None = None) -> Snapshot | None:
    """A :class:`Snapshot` of ``state``, or None when it cannot be shared safely.

    Shared only when ``state`` is a ``dict`` (or a ``list``) whose whole tree is plain JSON: exact ``dict``
    (``str`` keys), ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``, with no container reachable
    twice (copies would split what the code sees as one object). Linear in the size of the state.
    ``leaf`` admits further values as immutable leaves (module-level data may hold builtin types).
    """
    if type(state) not in _CONTAINERS:
        return None
    seen: set[int] = set()
    deep: set[int] = set()
    stack = [state]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return None
        seen.add(id(node))
        if type(node) is dict:
            if not all(type(key) is str for key in node):
                return None
            children = node.values()
        else:
            children = node
        has_containers = False
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                has_containers = True
                stack.append(child)
            elif kind not in _LEAVES and (leaf is None or not leaf(child)):
                return None
        if has_containers:
            deep.add(id(node))
    return Snapshot(state, frozenset(deep), frozenset(seen))


def fork_view(snapshot: Snapshot) -> Any:
    """A private, copy-on-write view of ``snapshot``'s state for one episode (a :class:`CowDict`, or a
    :class:`CowList` for a list); O(1)."""
    if type(snapshot.root) is dict:
        return CowDict.over(snapshot.root, snapshot)
    return CowList.over(snapshot.root, snapshot)


class CowDict(dict):
    """A ``dict`` whose child containers are copied on first access (see the module docstring).

    Its storage always holds the current value (so ``==``, ``len``, ``in``, ``repr`` and encoders read it
    directly); children not yet copied are still the snapshot's, and every method that returns or iterates
    values copies them first.
    """

    __slots__ = ("_snapshot", "_source")

    @classmethod
    def over(cls, source: dict[str, Any], snapshot: Snapshot) -> CowDict:
        node = cls(source)
        node._source = source
        node._snapshot = snapshot
        return node

    def _child(self, key: Any, value: Any) -> Any:
        source = self._source
        if source is not None and type(value) in _CONTAINERS and source.get(key) is value:
            value = _own(value, self._snapshot)
            dict.__setitem__(self, key, value)
        return value

    def _own_all(self) -> None:
        source = self._source
        if source is None:
            return
        # In C loops (a table of a thousand rows is the usual case): which children are still the snapshot's
        # containers (their ids are the snapshot's, and no snapshot container is ever handed out, so it can only
        # sit where it was frozen), then their copies, stored back in one update.
        snapshot = self._snapshot
        keys, values = list(dict.keys(self)), list(dict.values(self))
        shared = list(map(snapshot.ids.__contains__, map(id, values)))
        if any(shared):
            pending = itertools.compress(values, shared)
            if snapshot.holds_flat_rows(source):
                copies: Any = map(dict.copy, pending)
            else:
                copies = [_own(value, snapshot) for value in pending]
            dict.update(self, zip(itertools.compress(keys, shared), copies, strict=True))
        self._source = None  # every child is private now: later reads need no check

    @classmethod
    def fromkeys(cls, iterable: Any, value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(iterable, value)

    def __getitem__(self, key: Any) -> Any:
        return self._child(key, dict.__getitem__(self, key))

    def get(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self._child(key, dict.__getitem__(self, key))
        return default

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self._child(key, dict.__getitem__(self, key))
        dict.__setitem__(self, key, default)
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            value = self._child(key, dict.__getitem__(self, key))
            dict.__delitem__(self, key)
            return value
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        self._own_all()
        return dict.popitem(self)

    def values(self) -> Any:
        self._own_all()
        return dict.values(self)

    def items(self) -> Any:
        self._own_all()
        return dict.items(self)

    def __iter__(self) -> Any:
        # Overriding iteration also makes C code that copies a dict (dict(d), {**d}, d | x) go through
        # keys() and __getitem__ instead of reading this node's storage directly.
        return dict.__iter__(self)

    def copy(self) -> dict[str, Any]:
        self._own_all()
        return dict(dict.items(self))

    __copy__ = copy

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        import copy as copy_module

        self._own_all()
        return copy_module.deepcopy(dict(dict.items(self)), memo)

    def __or__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        merged = self.copy()
        merged.update(other)
        return merged

    def __reduce_ex__(self, protocol: Any) -> Any:
        self._own_all()
        return (dict, (dict(dict.items(self)),))


class CowList(list):
    """A ``list`` whose child containers are copied on first access (see the module docstring)."""

    __slots__ = ("_shared", "_snapshot", "_source")

    @classmethod
    def over(cls, source: list[Any], snapshot: Snapshot) -> CowList:
        node = cls(source)
        node._source = source
        node._snapshot = snapshot
        node._shared = None
        return node

    def _shared_ids(self) -> set[int]:
        # Built on first use: a snapshot holds no container twice, so an id names one shared child.
        if self._shared is None:
            self._shared = {id(value) for value in self._source if type(value) in _CONTAINERS}
        return self._shared

    def _own_all(self) -> None:
        if self._source is None:
            return
        shared, snapshot = self._shared_ids(), self._snapshot
        for index, value in enumerate(list.__iter__(self)):
            if id(value) in shared:
                list.__setitem__(self, index, _own(value, snapshot))
        self._source = self._shared = None

    def __getitem__(self, index: Any) -> Any:
        if self._source is not None:
            if isinstance(index, slice):
                self._own_all()
            else:
                value = list.__getitem__(self, index)
                if type(value) in _CONTAINERS and id(value) in self._shared_ids():
                    value = _own(value, self._snapshot)
                    list.__setitem__(self, index, value)
                return value
        return list.__getitem__(self, index)

    def __iter__(self) -> Any:
        self._own_all()
        return list.__iter__(self)

    def __reversed__(self) -> Any:
        self._own_all()
        return list.__reversed__(self)

    def pop(self, *index: Any) -> Any:
        self._own_all()
        return list.pop(self, *index)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._own_all()
        list.sort(self, *args, **kwargs)

    def copy(self) -> list[Any]:
        self._own_all()
        return list.copy(self)

    __copy__ = copy

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        import copy as copy_module

        self._own_all()
        return copy_module.deepcopy(list.copy(self), memo)

    def __add__(self, other: Any) -> Any:
        if not isinstance(other, list):
            return NotImplemented
        return self.copy() + list(other)

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, list):
            return NotImplemented
        return list(other) + self.copy()

    def __mul__(self, count: Any) -> Any:
        return self.copy() * count

    __rmul__ = __mul__

    def __imul__(self, count: Any) -> Any:
        self._own_all()  # repeated children must be this episode's own objects
        return list.__imul__(self, count)

    def __reduce_ex__(self, protocol: Any) -> Any:
        self._own_all()
        return (list, (list.copy(self),))


# Seen from environment code, a copy-on-write node is a dict or a list: error messages that name a value's
# type (``type(v).__name__``) read the same as on a plain state.
for _cls, _name in ((CowDict, "dict"), (CowList, "list")):
    _cls.__name__ = _cls.__qualname__ = _name
    _cls.__module__ = "builtins"


def visible_type(value: Any) -> type:
    """``type(value)``, with a copy-on-write node reported as the ``dict`` or ``list`` it stands for."""
    kind = type(value)
    if kind is CowDict:
        return dict
    if kind is CowList:
        return list
    return kind


def plain(value: Any) -> Any:
    """orjson ``default`` hook: a copy-on-write node as its plain storage (children stay as they are, and the
    copy is only read by the encoder). Raises ``TypeError`` for anything else, as orjson expects."""
    kind = type(value)
    if kind is CowDict:
        return dict(dict.items(value))  # the storage as it is (dict.copy would read it through __getitem__)
    if kind is CowList:
        return list.copy(value)
    raise TypeError(f"Type is not JSON serializable: {kind.__name__}")


def same_value(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` hold the same JSON value: the same keys in the same order in every object, the
    same types (``1``, ``1.0`` and ``True`` differ) and values. Children that are the same object are equal at
    once, so two views of one snapshot cost what they changed. False also when a value is not plain JSON.

    True implies equal encodings (``canonical_json(a) == canonical_json(b)``), and so equal ``save`` results
    for a ``save`` that is a function of the state's value.
    """
    if a is b:
        return True
    kind = visible_type(a)
    if kind is not visible_type(b):
        return False
    if kind is dict:
        keys = list(dict.keys(a))
        other_keys = list(dict.keys(b))
        if keys != other_keys:  # in C, each pair of the same object equal at once
            return False
        if any(type(keys[i]) is not type(other_keys[i]) for i in _differing(keys, other_keys)):
            return False  # equal keys of other types (1 and 1.0 and True)
        mine, theirs = list(dict.values(a)), list(dict.values(b))
    elif kind is list:
        if len(a) != len(b):
            return False
        mine, theirs = list.copy(a), list.copy(b)  # the storage: iterating a view would copy its children
    elif kind in _LEAVES:
        return a == b if kind is not float else orjson.dumps(a) == orjson.dumps(b)  # 0.0 and -0.0 differ
    else:
        return False
    changed = _differing(mine, theirs)
    if len(changed) > _MANY_DIFFERENT:
        return _encoded(a) == _encoded(b)
    return all(same_value(mine[i], theirs[i]) for i in changed)


def _differing(mine: list[Any], theirs: list[Any]) -> list[int]:
    """The indexes at which two lists of the same length hold different objects (one pass in C)."""
    return list(itertools.compress(range(len(mine)), map(operator.is_not, mine, theirs)))


def _encoded(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value, default=plain, option=_STRICT)
    except TypeError:
        return None


__all__ = ["CowDict", "CowList", "Snapshot", "fork_view", "freeze", "plain", "same_value", "visible_type"]
