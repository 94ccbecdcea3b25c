"""Canonical JSON encoding and state hashing.

Two saved states are "the same" when their canonical JSON encodings are byte-identical, so replays,
forks and the store can compare states by a short hash instead of by deep equality.
"""

from __future__ import annotations

import hashlib
import math
from types import MappingProxyType
from typing import Any

import orjson

from envfactory_assets.runtime.cow_state import CowDict, CowList, FrozenList, plain

# Sorted keys, no whitespace (orjson never emits any), UTF-8 kept as is (orjson never escapes
# non-ASCII). The pass-through options make datetimes, dataclasses and subclasses of dict/list/str/int
# fail instead of being converted silently: a canonical encoding must only see plain JSON values.
_CANONICAL_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def canonical_json(obj: Any) -> bytes:
    """Encode a JSON value canonically: object keys sorted, no whitespace, UTF-8 not escaped.

    Args:
        obj: a plain JSON value: ``dict`` with ``str`` keys, ``list``/``tuple``, ``str``, ``int``
            (64-bit range), ``float``, ``bool`` or ``None``, nested arbitrarily.

    Returns:
        The UTF-8 encoded JSON text as ``bytes``, e.g. ``canonical_json({"b": 1, "a": "é"})`` ==
        ``'{"a":"é","b":1}'.encode()``.

    Raises:
        TypeError: for a value that is not plain JSON: non-``str`` dict keys, integers outside the
            signed/unsigned 64-bit range, ``datetime``/``date`` objects, dataclasses, subclasses of
            ``dict``/``list``/``str``/``int`` (``OrderedDict``, ``defaultdict``...), sets, bytes.

        TypeError: for a float that is NaN or infinite: JSON has no such number, and orjson would write
            ``null``, so ``{"x": nan}`` and ``{"x": None}`` would hash alike.

    Notes:
        ``Enum`` members are encoded as their value (orjson behaviour); they are not valid in a saved
        state, so callers should not rely on it.
    """
    try:
        # ``plain`` reads an episode's copy-on-write nodes as the dicts and lists they are; it refuses
        # everything else with orjson's own message.
        encoded = orjson.dumps(obj, default=plain, option=_CANONICAL_OPTIONS)
    except orjson.JSONEncodeError as exc:  # a TypeError subclass; re-raise with a plain type
        raise TypeError(f"not canonical JSON: {exc}") from None
    # orjson writes a non-finite float as null, so only a text holding null can hide one
    if b"null" in encoded:
        refuse_non_finite(obj)
    return encoded


def refuse_non_finite(obj: Any) -> None:
    """Raise TypeError at the first NaN or infinite float in ``obj`` (already encoded, so plain JSON and
    copy-on-write nodes). A node's storage is read through ``dict``/``list`` themselves: its own methods would
    copy the children it still shares, and reading must not change what an episode shares."""
    stack = [obj]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):
                raise TypeError(f"not canonical JSON: {value!r} is not a JSON number")
        elif kind is dict or kind is CowDict:
            stack.extend(dict.values(value))
        elif kind is MappingProxyType:  # a snapshot's frozen dict
            stack.extend(value.values())
        elif kind is list or kind is tuple or kind is FrozenList:
            stack.extend(value)
        elif kind is CowList:
            stack.extend(list.copy(value))


def state_hash(saved_state: Any) -> str:
    """Hash a saved state (or any plain JSON value) by content.

    Args:
        saved_state: a plain JSON value, usually ``{"tables": {...}, "meta": {...}}`` or a mapping
            ``{env_id: saved_state}`` for a multi-environment episode.

    Returns:
        64 lowercase hex characters: the sha256 of ``canonical_json(saved_state)``. Equal for states
        that differ only in key order.

    Raises:
        TypeError: when ``saved_state`` is not plain JSON (see :func:`canonical_json`).
    """
    return hashlib.sha256(canonical_json(saved_state)).hexdigest()
