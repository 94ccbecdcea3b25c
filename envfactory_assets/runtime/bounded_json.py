"""Bounded JSON reading: refuse a payload by what decoding it would cost, before decoding it.

A byte cap alone does not bound a JSON reader: ``[[],[],...]`` spends 3 bytes per empty list, which
decodes to about 64 bytes of Python objects (the list and the pointer to it), so a 24 MB reply became
more than 700 MiB of objects; deep nesting (``[[[[...``) makes recursive consumers (the standard
library's ``json``, ``copy.deepcopy``, ``repr``) raise ``RecursionError``. :func:`loads` therefore
checks, in this order and without building any object:

1. the size in bytes (``max_bytes``);
2. the nesting depth and an upper estimate of the decoded size (``max_depth``, ``max_decoded_bytes``)
   from one linear scan of the structural characters outside strings (:func:`measure`), vectorised
   with numpy in fixed-size chunks, so the scan's own memory is a few times the chunk, never the
   payload, and it cannot recurse;
3. the deadline, between chunks and before decoding;

and only then decodes with orjson (whose own depth limit, 1024, is above the default here).

Every reader of JSON that comes from code or clients the project does not trust must go through this
module: the sandbox parent reading a worker's reply (:class:`.protocol.FrameChannel`) and
``envfactory serve-env`` reading stdin lines (:mod:`envfactory_assets.mcp_server.transport`). A server
the project adds later must use it too.

The decoded-size estimate is ``width * len(payload) + VALUE_BYTES * (containers + separators + 1)``,
with ``separators`` the commas and colons outside strings: every JSON value (and every key) but the first
sits after a comma or colon, and costs at most one Python object plus the pointer to it. ``width`` is the
widest character storage the payload can make (PEP 393): a ``str`` holding one character above U+FFFF
stores every character in 4 bytes, one above U+00FF in 2, so ``"aaa...a\\ud83d\\ude00"`` decodes to 4
bytes per byte of JSON. It is 4 when the payload has a UTF-8 lead byte of a 4-byte sequence (0xF0 and
up) or a ``\\u`` escape of a surrogate (``\\ud800``-``\\udfff``), else 2 when it has a lead byte of a
character above U+00FF (0xC4 and up) or a ``\\u`` escape above ``\\u00ff``, else 1. The
constant was measured with ``tracemalloc`` on orjson's output for CPython 3.11 (an empty list is 56
bytes + an 8-byte pointer, a float 24 + 8, a short string 49 + its length + 8, a dict entry about 40
in its table); ``envfactory_assets_tests/test_bounded_json.py`` checks that the estimate stays above
the measured size for those shapes.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import numpy as np

#: Estimated Python bytes per JSON value (the object, its pointer, a dict entry's share), see above.
VALUE_BYTES = 80
#: Default bounds of :class:`JsonBounds`.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_DECODED_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_DEPTH = 512
#: Bytes scanned per numpy step; the scan's temporaries are at most about 40 bytes per byte of one chunk.
_CHUNK = 1 << 18

_QUOTE, _BACKSLASH = ord('"'), ord("\\")


@functools.cache
def _tables() -> tuple[Any, Any, Any, Any, Any]:
    """numpy and the byte tables of the scan: structural character, depth change, separator, a letter of a
    bare constant (:attr:`JsonShape.bare_constants`).

    numpy is imported on first use, not with the module: the sandbox worker imports the protocol
    module (which imports this one) and must not load numpy (its thread pools, its memory).
    """
    import numpy

    structural = numpy.zeros(256, dtype=bool)
    delta = numpy.zeros(256, dtype=numpy.int64)
    separator = numpy.zeros(256, dtype=bool)
    for char, change in (("[", 1), ("{", 1), ("]", -1), ("}", -1), (",", 0), (":", 0)):
        structural[ord(char)] = True
        delta[ord(char)] = change
        separator[ord(char)] = change == 0
    bare = numpy.zeros(256, dtype=bool)
    bare[[ord("N"), ord("I")]] = True  # NaN, Infinity, -Infinity
    return numpy, structural, delta, separator, bare


@dataclasses.dataclass(frozen=True)
class JsonBounds:
    """What one JSON payload may cost its reader.

    Attributes:
        max_bytes: the payload's largest size, bytes.
        max_decoded_bytes: the largest estimated size of the decoded Python objects, bytes (see the
            module docstring for the estimate).
        max_depth: the deepest nesting of arrays and objects (``[]`` is depth 1).

    Raises:
        ValueError: a bound that is not a positive integer.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    max_decoded_bytes: int = DEFAULT_MAX_DECODED_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"JsonBounds.{field.name} must be a positive integer, got {value!r}")


@dataclasses.dataclass(frozen=True)
class JsonShape:
    """What :func:`measure` found: ``containers`` (arrays and objects), ``separators`` (commas and colons
    outside strings), ``depth`` (deepest nesting), ``decoded_bytes`` (the estimate) and ``size`` (bytes).
    When the scan stopped early at a bound, the counts are those seen up to there.

    ``bare_constants`` counts the bytes ``N`` and ``I`` outside strings: no JSON token holds them, but Python's
    ``json`` (which FastAPI and the ``mcp`` SDK decode bodies with) reads ``NaN``, ``Infinity`` and
    ``-Infinity`` there as floats no JSON encoder can write back. Nonzero means the payload is not JSON."""

    size: int
    containers: int
    separators: int
    depth: int
    decoded_bytes: int
    bare_constants: int = 0


class JsonTooLarge(ValueError):
    """A payload past one of its :class:`JsonBounds`: ``limit`` names it (``"max_bytes"``,
    ``"max_decoded_bytes"`` or ``"max_depth"``), ``bound`` is its value and ``observed`` what the payload
    reached (at least; the scan stops at the first bound passed)."""

    def __init__(self, limit: str, bound: int, observed: int, what: str = "JSON payload") -> None:
        unit = {"max_depth": "levels of nesting"}.get(limit, "bytes")
        measure_word = {"max_bytes": "is", "max_depth": "has"}.get(limit, "would decode to")
        super().__init__(f"{what} {measure_word} at least {observed} {unit}, past {limit}={bound}")
        self.limit = limit
        self.bound = bound
        self.observed = observed


class JsonDeadlineExceeded(TimeoutError):
    """The deadline passed while a payload was being checked, before it was decoded."""


def _estimate(size: int, containers: int, separators: int, width: int = 1) -> int:
    return width * size + VALUE_BYTES * (containers + separators + 1)


_U, _LOWER = ord("u"), 0x20


def _char_width(np: Any, chunk: np.ndarray, before: int) -> int:
    """The widest ``str`` storage (1, 2 or 4 bytes a character) the characters of ``chunk`` can make.

    ``before`` is the byte ending the previous chunk (a ``\\`` there escapes a ``u`` opening this one). It
    over-estimates, never under: a ``u`` after an escaped backslash counts as an escape, and an escape
    whose hex digits run past the chunk counts as a surrogate.
    """
    top = int(chunk.max())
    width = 4 if top >= 0xF0 else 2 if top >= 0xC4 else 1
    if width == 4:
        return width
    escapes = np.flatnonzero(chunk == _U)
    if escapes.size:
        previous = np.where(escapes > 0, chunk[np.maximum(escapes - 1, 0)], before)
        escapes = escapes[previous == _BACKSLASH]
    if not escapes.size:
        return width
    if int(escapes[-1]) + 2 >= chunk.size:
        return 4
    high = chunk[escapes + 1] | _LOWER  # hex digits, lower-cased
    low = chunk[escapes + 2] | _LOWER
    if np.any((high == ord("d")) & (low >= ord("8")) & (low <= ord("f"))):
        return 4
    if np.any((high != ord("0")) | (low != ord("0"))):
        return 2
    return width


def measure(
    payload: bytes | bytearray | memoryview, bounds: JsonBounds | None = None, deadline: float | None = None
) -> JsonShape:
    """Scan ``payload`` (UTF-8 JSON text) for its depth and estimated decoded size without decoding it.

    The scan is linear, iterative and chunked: quotes preceded by an odd run of backslashes are escaped,
    the others open and close strings, and only ``[]{},:`` outside strings count. It assumes JSON syntax
    (a backslash outside a string is invalid JSON, which the decoder then refuses); whatever the bytes,
    it ends in time linear in their length and allocates about 40 bytes per byte of one 256 KiB chunk.

    Args:
        payload: the JSON text.
        bounds: when given, stop at the first bound passed and raise :class:`JsonTooLarge`.
        deadline: a ``time.monotonic()`` time; checked before every 256 KiB chunk.

    Returns:
        The payload's :class:`JsonShape`.

    Raises:
        JsonTooLarge: the payload passes one of ``bounds``.
        JsonDeadlineExceeded: ``deadline`` passed during the scan.
    """
    view = memoryview(payload).cast("B")
    size = len(view)
    if bounds is not None and size > bounds.max_bytes:
        raise JsonTooLarge("max_bytes", bounds.max_bytes, size)
    np, structural_table, delta_table, separator_table, bare_table = _tables()
    containers = separators = depth = deepest = bare_constants = 0
    width, before = 1, 0  # widest character storage so far; the byte ending the previous chunk
    in_string = 0  # 1 while the scan is inside a string
    carried_run = 0  # backslashes that end the previous chunk
    for start in range(0, size, _CHUNK):
        if deadline is not None and time.monotonic() > deadline:
            raise JsonDeadlineExceeded("the deadline passed while checking a JSON payload")
        chunk = np.frombuffer(view[start : start + _CHUNK], dtype=np.uint8)
        real_quotes, carried_run = _unescaped_quotes(np, chunk, carried_run)
        if width < 4:
            width = max(width, _char_width(np, chunk, before))
        before = int(chunk[-1])
        structural = np.flatnonzero(structural_table[chunk])
        if structural.size:
            inside = (np.searchsorted(real_quotes, structural) + in_string) & 1
            outside = chunk[structural[inside == 0]]
            deltas = delta_table[outside]
            if deltas.size:
                path = np.cumsum(deltas) + depth
                deepest = max(deepest, int(path.max()))
                depth = int(path[-1])
                containers += int(np.count_nonzero(deltas == 1))
                separators += int(np.count_nonzero(separator_table[outside]))
        bare = np.flatnonzero(bare_table[chunk])
        if bare.size:
            bare_constants += int(np.count_nonzero(((np.searchsorted(real_quotes, bare) + in_string) & 1) == 0))
        in_string ^= int(real_quotes.size) & 1
        if bounds is not None:
            if deepest > bounds.max_depth:
                raise JsonTooLarge("max_depth", bounds.max_depth, deepest)
            decoded = _estimate(size, containers, separators, width)
            if decoded > bounds.max_decoded_bytes:
                raise JsonTooLarge("max_decoded_bytes", bounds.max_decoded_bytes, decoded)
    return JsonShape(
        size, containers, separators, deepest, _estimate(size, containers, separators, width), bare_constants
    )


def _unescaped_quotes(np: Any, chunk: np.ndarray, carried_run: int) -> tuple[np.ndarray, int]:
    """Positions of the quotes in ``chunk`` that are not escaped, and the run of backslashes ending it.

    ``carried_run`` is the run of backslashes that ended the previous chunk: it continues into this one.
    """
    quotes = np.flatnonzero(chunk == _QUOTE)
    backslash = chunk == _BACKSLASH
    if not backslash.any():
        if carried_run & 1 and quotes.size and quotes[0] == 0:
            quotes = quotes[1:]  # escaped by the backslashes that ended the previous chunk
        return quotes, 0
    plain = np.flatnonzero(~backslash)  # every quote is among these
    if plain.size == 0:
        return quotes, carried_run + chunk.size
    trailing_run = chunk.size - 1 - int(plain[-1])
    if quotes.size:
        rank = np.searchsorted(plain, quotes)  # index of each quote among the non-backslash bytes
        previous = np.where(rank > 0, plain[np.maximum(rank - 1, 0)], -1)
        run = quotes - previous - 1 + np.where(rank > 0, 0, carried_run)
        quotes = quotes[(run & 1) == 0]
    return quotes, trailing_run


def loads(
    payload: bytes | bytearray | memoryview,
    bounds: JsonBounds | None = None,
    deadline: float | None = None,
    what: str = "JSON payload",
) -> Any:
    """Decode ``payload`` with orjson once :func:`measure` has found it within ``bounds``.

    Args:
        payload: UTF-8 JSON text.
        bounds: defaults to ``JsonBounds()`` (64 MiB, 64 MiB decoded, depth 512).
        deadline: a ``time.monotonic()`` time; decoding starts only before it. Decoding itself is not
            interrupted, but the bounds cap its cost (about 0.2 s for 64 MiB of objects).
        what: names the payload in error messages (``"the worker's reply"``).

    Raises:
        JsonTooLarge: past a bound (nothing was decoded).
        JsonDeadlineExceeded: the deadline passed before decoding.
        orjson.JSONDecodeError: not valid JSON (a ``ValueError``).
    """
    bounds = bounds or JsonBounds()
    if not _within_bounds_unscanned(payload, bounds):
        _measure_within(payload, bounds, deadline, what)
    if deadline is not None and time.monotonic() > deadline:
        raise JsonDeadlineExceeded(f"the deadline passed before {what} was decoded")
    return orjson.loads(payload)


def _within_bounds_unscanned(payload: bytes | bytearray | memoryview, bounds: JsonBounds) -> bool:
    """Whether ``payload`` is within ``bounds`` whatever its content, without the scan: its nesting is at most
    its count of ``[`` and ``{`` bytes, and its decoded size at most :func:`_estimate` with every byte a
    separator and 4-byte characters. True for the short replies of most requests."""
    if not isinstance(payload, (bytes, bytearray)):
        return False
    size = len(payload)
    if size > bounds.max_bytes or _estimate(size, size, 0, 4) > bounds.max_decoded_bytes:
        return False
    return payload.count(b"[") + payload.count(b"{") <= bounds.max_depth


def _measure_within(
    payload: bytes | bytearray | memoryview, bounds: JsonBounds, deadline: float | None, what: str
) -> None:
    try:
        measure(payload, bounds, deadline)
    except JsonTooLarge as exc:
        raise JsonTooLarge(exc.limit, exc.bound, exc.observed, what) from None
