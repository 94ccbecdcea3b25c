"""The canonical encoding of a table-layout environment's saved state, from its rows' kept encodings.

Most environments (every one the programmatic builder writes) keep their state as ``{"tables": {name: {key:
row}}, "meta": {...}}`` and save it with :data:`TABLE_SAVE_SOURCE`'s ``save``: each table's rows in order, each
row copied, and the meta copied. For such a ``save`` the engine knows what ``canonical_json(save(state))`` is
without running it: the meta's encoding and, per table, the rows' encodings joined in order. A row that is still
the frozen snapshot's own object (:mod:`.cow_state`: never handed to environment code, so never changed) has
the same encoding in every episode forked from that snapshot (its containers are frozen: nothing can change
them in place); it is encoded once per snapshot and kept. Every
other row (read by a tool, changed, created: the rows a tool could have mutated in place) is encoded again each
time. So the comparison of a rollout's final state costs the rows it touched, one join and one sha256.

A ``save`` is recognised by its compiled code (instructions, constants, names; not line numbers or file), with
``dict`` resolving to the builtin ``dict``; anything else, and any state whose shape ``save`` would not read as
tables of rows (a missing key, a row that is not a dict), goes back to running ``save`` itself
(:func:`saved_items` returns None), which also gives the same errors as before.
"""

from __future__ import annotations
import __future__

import itertools
import operator
import types
from typing import Any

import orjson

from envfactory_assets.runtime.canonical import canonical_json
from envfactory_assets.runtime.cow_state import CowDict, Snapshot

#: The ``save`` the programmatic builder writes (``envgen.codegen``), as its text; recognised by its code.
TABLE_SAVE_SOURCE = '''def save(state):
    """In-memory state -> saved state; save(load(x)) == x."""
    return {"tables": {t: [dict(r) for r in rows.values()] for t, rows in state["tables"].items()},
            "meta": dict(state["meta"])}
'''
#: A table, a row or the meta as the state's storage holds it: a snapshot's own is a read-only proxy.
_DICTS = (dict, CowDict, types.MappingProxyType)
#: Past this many rows to encode that no snapshot holds (a table its tools scanned), one orjson call for the
#: table is cheaper than one per row.
_MANY_PRIVATE = 64


#: Compiler flags of ``from __future__`` imports: what they change shows in the instructions.
_FUTURE_FLAGS = sum(getattr(__future__, name).compiler_flag for name in __future__.all_feature_names)


def _fingerprint(code: types.CodeType) -> tuple[Any, ...]:
    """What a code object does, without where it was written (line numbers, file name, ``__future__`` flags)."""
    consts = tuple(_fingerprint(c) if isinstance(c, types.CodeType) else (type(c), c) for c in code.co_consts)
    return (
        code.co_name,
        code.co_argcount,
        code.co_posonlyargcount,
        code.co_kwonlyargcount,
        code.co_flags & ~_FUTURE_FLAGS,
        code.co_code,
        consts,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
    )


def function_code(source: str, name: str) -> types.CodeType:
    """The code object of the function ``name`` defined at the top level of ``source`` (compiled, not run).

    Raises:
        ValueError: ``source`` defines no function ``name``.
    """
    module = compile(source, "<source>", "exec", dont_inherit=True)
    for constant in module.co_consts:
        if isinstance(constant, types.CodeType) and constant.co_name == name:
            return constant
    raise ValueError(f"source defines no function {name!r}")


_TABLE_SAVE = _fingerprint(function_code(TABLE_SAVE_SOURCE, "save"))
#: ``id(code object) -> whether it is the table save``: code objects are shared by every namespace of a module.
_KNOWN: dict[int, tuple[types.CodeType, bool]] = {}


def is_table_save(save: Any) -> bool:
    """Whether ``save`` is :data:`TABLE_SAVE_SOURCE`'s function, with ``dict`` the builtin ``dict`` where it runs."""
    if type(save) is not types.FunctionType or save.__closure__ or save.__defaults__ or save.__kwdefaults__:
        return False
    code = save.__code__
    known = _KNOWN.get(id(code))
    if known is None or known[0] is not code:
        known = _KNOWN[id(code)] = (code, _fingerprint(code) == _TABLE_SAVE)  # the code is kept, so its id is too
    if not known[1]:
        return False
    scope = save.__globals__
    if "dict" in scope:
        return False
    builtins_scope = scope.get("__builtins__")
    if type(builtins_scope) is types.ModuleType:
        builtins_scope = vars(builtins_scope)
    return type(builtins_scope) is dict and builtins_scope.get("dict") is dict


def saved_items(save: Any, state: Any, snapshot: Snapshot | None) -> list[bytes] | None:
    """Pieces of ``canonical_json(save(state))`` (their join by ``b","`` is it), without running ``save``; None
    when that cannot be known this way.

    Args:
        save: the environment's ``save`` function (used only when :func:`is_table_save` holds).
        state: the episode's in-memory state (a copy-on-write view or plain JSON containers). Read through the
            storage of its dicts, so nothing it shares with its snapshot is copied.
        snapshot: the frozen state ``state`` is a view of, or None; its rows' encodings are kept on it
            (``Snapshot.encodings``).

    Returns:
        The pieces (mostly one row's encoding each, the same ``bytes`` object for a row still shared with the
        snapshot: two lists compare equal in one pass when the states share their rows), or None: ``save`` is
        not the table save, the state is not tables of dict rows and a meta dict, or a value is not plain JSON
        (running ``save`` gives the error).
    """
    if not is_table_save(save) or type(state) not in _DICTS:
        return None
    tables = _get(state, "tables")
    meta = _get(state, "meta")
    if type(tables) not in _DICTS or type(meta) not in _DICTS:
        return None
    try:
        # Joined once by the caller (a large bytes object costs its allocation each time it is copied): items
        # joined by commas, each table's key carried by its first item. Table names in code point order, the
        # UTF-8 byte order canonical_json sorts by.
        items = [b'{"meta":' + canonical_json(meta)]
        opening = b'"tables":{'
        sources = _source_tables(tables, snapshot)
        for name in sorted(_keys(tables)):
            table = _table_items(_get(tables, name), snapshot, sources.get(name)) if type(name) is str else None
            if table is None:
                return None
            table[0] = opening + orjson.dumps(name) + b":" + table[0]
            opening = b""
            items += table
        if opening:
            items.append(opening + b"}}")
        else:
            items[-1] += b"}}"
        return items
    except (TypeError, ValueError):
        return None


def _values(node: Any) -> Any:
    """The values a dict of ``_DICTS`` holds, read without copying what it shares: a node's storage (its own
    methods would copy its children), or a proxy's (read-only already)."""
    return node.values() if type(node) is types.MappingProxyType else dict.values(node)


def _keys(node: Any) -> Any:
    return node.keys() if type(node) is types.MappingProxyType else dict.keys(node)


def _get(node: Any, key: str) -> Any:
    return node.get(key) if type(node) is types.MappingProxyType else dict.get(node, key)


def _source_tables(tables: Any, snapshot: Snapshot | None) -> Any:
    """``{table name: the snapshot's frozen table}`` the state's tables node ``tables`` started from (its own
    frozen node, or a copy-on-write node over it whose children were not all copied), else ``{}``."""
    if snapshot is None:
        return {}
    if type(tables) is types.MappingProxyType and id(tables) in snapshot.ids:
        return tables
    if type(tables) is CowDict and tables._snapshot is snapshot and tables._source is not None:
        return tables._source
    return {}


def _table_items(rows: Any, snapshot: Snapshot | None, source: Any = None) -> list[bytes] | None:
    """Items whose comma join is the canonical encoding of ``[dict(r) for r in rows.values()]``, or None.

    ``source`` is the snapshot's frozen table ``rows`` started from, if any: then only the positions whose row is
    no longer the source's are encoded (:func:`_aligned_items`)."""
    if type(rows) not in _DICTS:
        return None
    parts = None
    if type(source) is types.MappingProxyType and snapshot is not None and id(source) in snapshot.ids:
        parts = _aligned_items(rows, source, snapshot)
    if parts is None:
        parts = _row_items(list(_values(rows)), snapshot)
        if parts is None:
            return None
    if not parts:
        return [b"[]"]
    parts[0] = b"[" + parts[0]
    parts[-1] += b"]"
    return parts


def _row_items(values: list[Any], snapshot: Snapshot | None) -> list[bytes] | None:
    """The canonical encodings of the rows ``values``, in order (a new list; one item for all of them when
    none is the snapshot's and there are many), or None when a row is not a dict."""
    if not values:
        return []
    kept = snapshot.encodings if snapshot is not None else {}
    parts = list(map(kept.get, map(id, values)))
    if None in parts:  # only rows that passed the checks below are kept
        missing = list(itertools.compress(range(len(parts)), map(operator.not_, parts)))
        if not set(map(type, [values[i] for i in missing])) <= set(_DICTS):
            return None
        shared = snapshot.ids if snapshot is not None else frozenset()
        if (
            len(missing) == len(parts)
            and len(parts) > _MANY_PRIVATE
            and not any(map(shared.__contains__, map(id, values)))
        ):
            return [canonical_json(values)[1:-1]]
        for i in missing:
            part = parts[i] = canonical_json(values[i])
            if id(values[i]) in shared:  # a snapshot row: never handed out, so its encoding holds with the snapshot
                kept[id(values[i])] = part
    return parts


def _aligned_items(rows: Any, source: types.MappingProxyType, snapshot: Snapshot) -> list[bytes] | None:
    """:func:`_row_items` of ``rows``, a table that started as the snapshot's frozen table ``source``, from the
    source's encodings kept whole on the snapshot (``Snapshot.tables``): a table whose keys still begin with the
    source's, in order, re-encodes only the positions whose row is no longer the source's (changed, created),
    found by identity in one pass in C. None when that does not apply (a row removed or moved, most rows
    private, a row that is not a dict): the caller goes the row-by-row way."""
    whole = snapshot.tables.get(id(source))
    if whole is None:
        values = list(source.values())
        parts = _row_items(values, snapshot)
        if parts is None or len(parts) != len(values):
            return None
        whole = snapshot.tables[id(source)] = (list(source.keys()), values, parts)
    keys, values, parts = whole
    if rows is source:
        return parts.copy()
    n = len(keys)
    if list(itertools.islice(_keys(rows), n)) != keys:
        return None
    now = list(_values(rows))
    changed = list(itertools.compress(range(n), map(operator.is_not, now, values)))
    changed += range(n, len(now))
    if len(changed) > _MANY_PRIVATE and 2 * len(changed) > len(now):
        return None
    if not set(map(type, [now[i] for i in changed])) <= set(_DICTS):
        return None
    out = parts + [b""] * (len(now) - n)
    for i in changed:
        out[i] = canonical_json(now[i])
    return out


__all__ = ["TABLE_SAVE_SOURCE", "function_code", "is_table_save", "saved_items"]
