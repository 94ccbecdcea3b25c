"""Copy-on-write episode states: a fork shares every row it does not touch with the state it was forked from.

A :class:`Snapshot` holds one in-memory state (what an environment's ``load`` returned), copied once into a
frozen form that no code can change in place: every ``dict`` of it is a ``types.MappingProxyType`` over a dict
that only this module holds, every ``list`` a :class:`FrozenList` (a ``tuple``). :func:`fork_view` gives an
episode its own view of it in O(1): a :class:`CowDict` root whose storage holds the snapshot's frozen children
until the episode reaches them. Every path by which Python code reaches a child container (``d[k]``,
``d.get``, ``values``, ``items``, iteration of a list, ``pop``, slicing, ``copy``, ``|``, ``+``, ``*``,
``sorted``...) first replaces that child, in this view only, with a private copy: a plain ``dict``/``list``
when the child holds no containers (a flat row), else another copy-on-write node. So a tool that mutates a row
in place, or a list inside a row, changes only its own episode, and a sibling fork never sees the change.

Code that reads a node's storage through the unbound methods of ``dict``/``list`` themselves
(``dict.values(table)``, ``dict.get``, ``list.copy``, ``list.pop``, the same methods of ``defaultdict``) gets
the frozen children: it can read them, and any change in place raises ``TypeError`` or ``AttributeError`` (a
mapping proxy has no ``__setitem__`` or ``update``; :class:`FrozenList` names what to do instead). So the
snapshot's rows, and the per-row encodings kept for them (:mod:`.saved_tables`), hold for every episode forked
from it, whatever its tools do. Only introspection that environment code is not given (``gc``, ``ctypes``)
could reach the dicts behind the proxies; the trust boundary between environments is the worker process.

Comparison: :func:`same_value` tells whether two states hold the same JSON value. Views forked from one
snapshot still share every row they did not touch, so comparing a rollout's final state with the task's gold
state (a view of the same snapshot) costs a pass over the touched tables' entries in C and the touched rows
themselves; the stored ``state_hash`` (sha256 of canonical JSON) is unchanged and still computed for what
differs.
"""

from __future__ import annotations

import itertools
import operator
import types
from collections.abc import Callable
from typing import Any

import orjson

_LEAVES = (str, int, float, bool, type(None))
#: The containers a snapshot may hold; anything else (sets, tuples, objects) keeps the episode on plain forks.
_CONTAINERS = (dict, list)
_PROXY = types.MappingProxyType
_LEAF_TYPES = frozenset(_LEAVES)
_STR = frozenset({str})
#: Past this many children that are not the same object, two containers are compared by their encodings.
_MANY_DIFFERENT = 32
# Subclasses go to ``plain``, which refuses every one but this module's own (as the engine's encoders do).
_STRICT = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


_SHARED_LIST_MESSAGE = (
    "this list belongs to the state shared by every fork of the episode and cannot be changed in place; "
    "read it through the state (state[key], iteration) to change this episode's own copy"
)


def _refuse_change(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise TypeError(_SHARED_LIST_MESSAGE)


class _Sealed(type):
    """A class whose attributes cannot be set or deleted once it is made: environment code can reach
    :class:`FrozenList` through ``type()``, and the worker's other episodes use the same class."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if "_sealed" in vars(cls):
            raise TypeError(f"attributes of {cls.__name__} cannot be set")
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        raise TypeError(f"attributes of {cls.__name__} cannot be deleted")


class FrozenList(tuple, metaclass=_Sealed):
    """A ``list`` of a snapshot, frozen: a ``tuple`` that compares, orders and prints as the list it stands for.

    Environment code meets one only by reading a copy-on-write node's storage through ``dict``/``list``
    themselves; every method that would change a list raises ``TypeError`` saying so.
    """

    __slots__ = ()

    __hash__ = None  # type: ignore[assignment]  # a list is not hashable

    def __repr__(self) -> str:
        return repr(list(self))

    def copy(self) -> list[Any]:
        """A plain ``list`` of the same items (frozen children stay frozen)."""
        return list(self)

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse_change
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse_change


def _list_comparison(name: str) -> Callable[[FrozenList, Any], Any]:
    """``FrozenList``'s comparison ``name``: what it gives for the list the frozen list stands for (and a frozen
    ``other`` read as its list too), so ``== (1,)`` is false and ``< (1,)`` raises, as for a list."""
    compare = getattr(operator, name.strip("_"))

    def method(self: FrozenList, other: Any) -> Any:
        return compare(list(self), list(other) if type(other) is FrozenList else other)

    method.__name__ = method.__qualname__ = name
    return method


for _comparison in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(FrozenList, _comparison, _list_comparison(_comparison))
type.__setattr__(FrozenList, "_sealed", True)

_FROZEN = (_PROXY, FrozenList)


def _own(child: Any, snapshot: Snapshot) -> Any:
    """A private copy of a frozen container ``child`` of ``snapshot``: a plain copy when it holds no containers."""
    if id(child) in snapshot.deep:
        if type(child) is _PROXY:
            return CowDict.over(snapshot.inner[id(child)], snapshot)
        return CowList.over(child, snapshot)
    return child.copy()


class Snapshot:
    """A frozen in-memory state, shared by the views forked from it.

    Built by :func:`freeze`. Its containers are frozen (see the module docstring): the dicts only this
    snapshot holds, each seen by everything else through a ``MappingProxyType``, and :class:`FrozenList` s.

    Attributes:
        root: the frozen state: a ``dict`` whose children are frozen (or a :class:`FrozenList`).
        deep: ids of the frozen containers (proxies, frozen lists) that hold containers (their copies are
            copy-on-write too).
        ids: ids of all its containers (proxies, the dicts behind them, frozen lists). The snapshot keeps them
            alive, so an id names one of them as long as the snapshot lives: a value whose id is here is the
            snapshot's own container.
        inner: ``{id of a proxy in deep: the dict behind it}``, what a copy-on-write node over it starts from.
        origins: ids of the containers of the state it was frozen from (valid while that state lives).
        flat_rows: ``{id of a dict of the snapshot: whether every container it holds is a proxy holding no
            container}`` (a table of flat rows, whose children are copied with ``copy``), filled on first use.
        encodings: ``{id of a container of the snapshot: its canonical JSON}``, filled by whoever encodes one
            (:mod:`.saved_tables`); it holds as long as the snapshot, whose containers never change.
        tables: ``{id of a dict of the snapshot: (its keys, its values, their encodings)}`` for the tables
            :mod:`.saved_tables` has encoded whole, filled on first use; holds as :attr:`encodings` does.
    """

    __slots__ = ("deep", "encodings", "flat_rows", "ids", "inner", "origins", "root", "tables")

    def __init__(
        self,
        root: dict[str, Any] | FrozenList,
        deep: frozenset[int],
        ids: frozenset[int],
        inner: dict[int, dict[str, Any]],
        origins: frozenset[int],
    ) -> None:
        self.root = root
        self.deep = deep
        self.ids = ids
        self.inner = inner
        self.origins = origins
        self.flat_rows: dict[int, bool] = {}
        self.encodings: dict[int, bytes] = {}
        self.tables: dict[int, tuple[list[Any], list[Any], list[bytes]]] = {}

    def holds_flat_rows(self, node: dict[str, Any]) -> bool:
        """Whether every container ``node`` (a dict of the snapshot) holds is a proxy holding no container."""
        known = self.flat_rows.get(id(node))
        if known is None:
            children = [v for v in node.values() if type(v) in _FROZEN]
            known = self.flat_rows[id(node)] = self.deep.isdisjoint(map(id, children)) and all(
                type(v) is _PROXY for v in children
            )
        return known


class _NotPlain(Exception):
    """The state holds something :func:`freeze` does not share."""


def freeze(state: Any, leaf: Callable[[Any], bool] | None = None) -> Snapshot | None:
    """A :class:`Snapshot` of ``state`` (a frozen copy: ``state`` itself is left as it is), or None when it
    cannot be shared safely.

    Shared only when ``state`` is a ``dict`` (or a ``list``) whose whole tree is plain JSON: exact ``dict``
    (``str`` keys), ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``, with no container reachable
    twice (copies would split what the code sees as one object), nested less deeply than the interpreter's
    recursion limit. ``leaf`` admits further values as immutable leaves (module-level data may hold builtin
    types). Linear in the size of the state: one copy of every container.
    """
    if type(state) not in _CONTAINERS:
        return None
    builder = _Freezer(leaf)
    try:
        if type(state) is dict:
            root: Any = builder.entries(state)[0]
            builder.ids.add(id(root))
        else:
            root = builder.frozen(state)
    except (_NotPlain, RecursionError):
        return None
    return Snapshot(root, frozenset(builder.deep), frozenset(builder.ids), builder.inner, frozenset(builder.seen))


class _Freezer:
    """Builds the frozen copy of one state for :func:`freeze`, collecting what its :class:`Snapshot` keeps."""

    def __init__(self, leaf: Callable[[Any], bool] | None) -> None:
        self.leaf = leaf
        self.seen: set[int] = set()
        self.deep: set[int] = set()
        self.ids: set[int] = set()
        self.inner: dict[int, dict[str, Any]] = {}

    def frozen(self, node: Any) -> Any:
        """The frozen copy of the container ``node``: a proxy over a copy of a dict, a FrozenList of a list."""
        if type(node) is dict:
            copied, has_containers = self.entries(node)
            frozen: Any = _PROXY(copied)
            self.ids.add(id(copied))
            if has_containers:
                self.inner[id(frozen)] = copied
        else:
            if id(node) in self.seen:
                raise _NotPlain
            self.seen.add(id(node))
            items = list(map(self.child, node))
            has_containers = any(type(item) in _FROZEN for item in items)
            frozen = FrozenList(items)
        self.ids.add(id(frozen))
        if has_containers:
            self.deep.add(id(frozen))
        return frozen

    def entries(self, node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """A copy of the dict ``node`` with its containers frozen, and whether it holds any."""
        if id(node) in self.seen:
            raise _NotPlain
        self.seen.add(id(node))
        if not set(map(type, node)) <= _STR:
            raise _NotPlain
        if set(map(type, node.values())) <= _LEAF_TYPES:  # a flat row: checked and copied in C
            return node.copy(), False
        values = list(map(self.child, node.values()))
        return dict(zip(node, values, strict=True)), any(type(value) in _FROZEN for value in values)

    def child(self, value: Any) -> Any:
        kind = type(value)
        if kind is dict or kind is list:
            return self.frozen(value)
        if kind not in _LEAVES and (self.leaf is None or not self.leaf(value)):
            raise _NotPlain
        return value


def fork_view(snapshot: Snapshot) -> Any:
    """A private, copy-on-write view of ``snapshot``'s state for one episode (a :class:`CowDict`, or a
    :class:`CowList` for a list); O(1)."""
    if type(snapshot.root) is dict:
        return CowDict.over(snapshot.root, snapshot)
    return CowList.over(snapshot.root, snapshot)


class CowDict(dict):
    """A ``dict`` whose child containers are copied on first access (see the module docstring).

    Its storage always holds the current value (so ``==``, ``len`` and ``in`` read it directly); children not
    yet copied are still the snapshot's frozen ones, and every method that returns, iterates or prints values
    copies them first.
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
        if source is not None and type(value) in _FROZEN and source.get(key) is value:
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
                copies: Any = map(_PROXY.copy, pending)
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

    def __repr__(self) -> str:
        self._own_all()  # prints as the plain dict it stands for, not as the snapshot's frozen children
        return dict.__repr__(self)

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
    def over(cls, source: FrozenList, snapshot: Snapshot) -> CowList:
        node = cls(source)
        node._source = source
        node._snapshot = snapshot
        node._shared = None
        return node

    def _shared_ids(self) -> set[int]:
        # Built on first use: a snapshot holds no container twice, so an id names one shared child.
        if self._shared is None:
            self._shared = {id(value) for value in self._source if type(value) in _FROZEN}
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
                if type(value) in _FROZEN and id(value) in self._shared_ids():
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

    def __repr__(self) -> str:
        self._own_all()
        return list.__repr__(self)

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
    """orjson ``default`` hook: a copy-on-write node or a snapshot's frozen container as its plain storage
    (children stay as they are, and the copy is only read by the encoder). Raises ``TypeError`` for anything
    else, as orjson expects."""
    kind = type(value)
    if kind is CowDict:
        return dict(dict.items(value))  # the storage as it is (dict.copy would read it through __getitem__)
    if kind is CowList:
        return list.copy(value)
    if kind is _PROXY or kind is FrozenList:
        return value.copy()
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
    kind = _JSON_KIND.get(type(a), type(a))
    if kind is not _JSON_KIND.get(type(b), type(b)):
        return False
    if kind is dict:
        # the storage (a view's own methods would copy its children); a proxy's methods read the dict behind it
        keys = list(a.keys())
        other_keys = list(b.keys())
        if keys != other_keys:  # in C, each pair of the same object equal at once
            return False
        if any(type(keys[i]) is not type(other_keys[i]) for i in _differing(keys, other_keys)):
            return False  # equal keys of other types (1 and 1.0 and True)
        mine = list(a.values() if type(a) is _PROXY else dict.values(a))
        theirs = list(b.values() if type(b) is _PROXY else dict.values(b))
    elif kind is list:
        if len(a) != len(b):
            return False
        mine, theirs = _list_storage(a), _list_storage(b)
    elif kind in _LEAVES:
        return a == b if kind is not float else orjson.dumps(a) == orjson.dumps(b)  # 0.0 and -0.0 differ
    else:
        return False
    changed = _differing(mine, theirs)
    if len(changed) > _MANY_DIFFERENT:
        return _encoded(a) == _encoded(b)
    return all(same_value(mine[i], theirs[i]) for i in changed)


#: The JSON type each container type stands for.
_JSON_KIND: dict[type, type] = {CowDict: dict, _PROXY: dict, CowList: list, FrozenList: list}


def _list_storage(value: Any) -> list[Any]:
    """A list's items as stored: iterating a view would copy its children."""
    return list(value) if type(value) is FrozenList else list.copy(value)


def _differing(mine: list[Any], theirs: list[Any]) -> list[int]:
    """The indexes at which two lists of the same length hold different objects (one pass in C)."""
    return list(itertools.compress(range(len(mine)), map(operator.is_not, mine, theirs)))


def _encoded(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value, default=plain, option=_STRICT)
    except TypeError:
        return None


__all__ = [
    "CowDict",
    "CowList",
    "FrozenList",
    "Snapshot",
    "fork_view",
    "freeze",
    "plain",
    "same_value",
    "visible_type",
]
