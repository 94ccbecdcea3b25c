"""Canonical JSON encoding and state hashing.

Two saved states are "the same" when their canonical JSON encodings are byte-identical, so replays,
forks and the store can compare states by a short hash instead of by deep equality.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from envfactory_assets.runtime.cow_state import plain

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

    Notes:
        ``float('nan')`` and infinities are encoded as ``null`` (orjson behaviour), and ``Enum``
        members as their value; neither is valid in a saved state, so callers should not rely on them.
    """
    try:
        # ``plain`` reads an episode's copy-on-write nodes as the dicts and lists they are; it refuses
        # everything else with orjson's own message.
        return orjson.dumps(obj, default=plain, option=_CANONICAL_OPTIONS)
    except orjson.JSONEncodeError as exc:  # a TypeError subclass; re-raise with a plain type
        raise TypeError(f"not canonical JSON: {exc}") from None


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
