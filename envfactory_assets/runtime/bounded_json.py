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
3. the deadline, between chunks and before decoding (and between pieces, below);

and only then decodes with orjson (whose own depth limit, 1024, is above the default here).

A payload longer than :data:`PIECE_BYTES` is decoded piecewise, so that the reader's other threads keep
running: orjson holds the interpreter lock for as long as one call lasts (0.3 to 0.5 s for 46 MiB of small
objects, which a parent with a larger ``max_response_mb`` reads; up to about 0.1 s for a 64 MiB reply within
the default bounds), which would stall the sandbox parent's other threads. The scan then also keeps the
positions of the structural characters outside strings and their nesting levels; the large arrays and
objects are cut at their own commas into runs of whole elements (members) of at most :data:`PIECE_BYTES` and
:data:`PIECE_VALUES`, each decoded by orjson wrapped as ``[...]`` (``{...}``) and appended (merged) in order;
an element larger than half a piece is decoded by itself the same way, an object member cut at its colon,
and a string or number is decoded whole (about 1 GiB/s). Between two pieces the Python loop lets other
threads run, and the deadline is checked. The result is equal to ``orjson.loads(payload)`` (types, values,
key order, and for a repeated key the first one's place with the last value, which is what both orjson and
merging dicts in order keep), and whatever orjson refuses is refused: a piece orjson refuses, or any
structure valid JSON cannot have (a closer without opener, a colon in an array, text after the document), is
an :class:`orjson.JSONDecodeError` at once, without decoding the rest. What piecewise decoding cannot
shorten is a pause of the cyclic garbage collector, which walks every container alive in the process (the
decoded-size bound caps a reply's share of them).

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
in its table); ``envfactory_assets_tests/test_bounded_readers.py`` checks that the estimate stays above
the measured size for those shapes.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import TYPE_CHECKING, Any, NoReturn

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
#: Longest run of JSON, bytes, one orjson call decodes while a payload is decoded piecewise (and the payload
#: size from which it is): orjson decodes about 100 MiB/s of small objects and 1 GiB/s of plain strings here, so
#: one piece holds the interpreter lock for about 10 ms at most, well within the 100 ms other threads may wait
#: even on a machine several times slower, while 50 pieces for 50 MiB keep the loop's own cost (a copy of each
#: piece, a merge) at a few percent of the decoding.
PIECE_BYTES = 1 << 20
#: Most structural characters (about one per value) in one piece: 1 MiB of ``[],[],...`` or ``1,2,...`` holds
#: 350,000 to 500,000 values, 30 to 50 ms of orjson; 65,536 of them take at most about 10 ms.
PIECE_VALUES = 1 << 16
#: orjson refuses a document nested deeper than this (1024 levels decode, 1025 do not): a payload deeper
#: than it (only where ``max_depth`` is set above it) is handed to orjson whole, which refuses it.
_ORJSON_MAX_DEPTH = 1024
#: Levels of nesting indexed by a pass each before all are, by one sort (see :class:`_Pieces`): a pass over
#: the levels of 5 million structural characters takes about 5 ms, the sort about 40 ms.
_LEVEL_PASSES = 4
_WHITESPACE = b" \t\n\r"  # JSON's whitespace, no more (bytes.strip() would also take \x0b and \x0c)

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
    """The deadline passed while a payload was being checked or decoded."""


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
    return _scan(payload, bounds, deadline, keep_structure=False)[0]


@dataclasses.dataclass(frozen=True)
class _Structure:
    """The structural characters outside strings of a payload, in order: ``positions`` (byte offsets), ``chars``
    (the bytes, uint8) and ``levels`` (the nesting level each sits at: an opener's and its closer's is the
    depth inside them, ``[`` at the top is 1; a comma's or colon's that of its container). None of it exists
    for a payload valid JSON cannot be (:attr:`broken`)."""

    positions: Any
    chars: Any
    levels: Any
    broken: str = ""


def _scan(
    payload: bytes | bytearray | memoryview, bounds: JsonBounds | None, deadline: float | None, keep_structure: bool
) -> tuple[JsonShape, _Structure | None]:
    """:func:`measure`, keeping the :class:`_Structure` too when ``keep_structure`` (one scan for both).

    The structure costs 7 to 15 bytes per structural character (at most about 2 per 80 bytes of the
    ``max_decoded_bytes`` bound, since every container and separator counts there and closers match openers);
    its collection stops at the first closer or separator outside every container (``broken``: not JSON).
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
    kept: list[tuple[Any, Any, Any]] | None = [] if keep_structure else None
    broken = ""
    position_type = np.int32 if size < 1 << 31 else np.int64
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
                if kept is not None:
                    levels = path + (deltas < 0)  # a closer sits at the depth it closes
                    if int(levels.min()) < 1:
                        broken, kept = "a closer or separator outside every array and object", None
                    else:
                        at = (structural[inside == 0] + start).astype(position_type)
                        kept.append((at, outside, levels.astype(np.int32)))
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
    shape = JsonShape(
        size, containers, separators, deepest, _estimate(size, containers, separators, width), bare_constants
    )
    if not keep_structure:
        return shape, None
    if not broken and (depth != 0 or in_string):
        broken = "an array, object or string left open at the end"
    if kept is None or broken:
        return shape, _Structure(None, None, None, broken)
    if not kept:
        empty = np.zeros(0, dtype=np.int32)
        return shape, _Structure(empty, np.zeros(0, dtype=np.uint8), empty)
    positions = np.concatenate([part[0] for part in kept])
    chars = np.concatenate([part[1] for part in kept])
    kept_levels = [part[2] for part in kept]
    kept.clear()
    level_type = np.int16 if deepest < 1 << 15 else np.int32
    return shape, _Structure(positions, chars, np.concatenate(kept_levels).astype(level_type))


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

    A payload longer than :data:`PIECE_BYTES` is decoded piecewise (see the module docstring): no orjson call
    holds the interpreter lock for more than one piece, and the deadline is checked between pieces. The
    result equals ``orjson.loads(payload)``, and what orjson refuses is refused.

    Args:
        payload: UTF-8 JSON text.
        bounds: defaults to ``JsonBounds()`` (64 MiB, 64 MiB decoded, depth 512).
        deadline: a ``time.monotonic()`` time, checked before decoding and between pieces.
        what: names the payload in error messages (``"the worker's reply"``).

    Raises:
        JsonTooLarge: past a bound (nothing was decoded).
        JsonDeadlineExceeded: the deadline passed before or while decoding.
        orjson.JSONDecodeError: not valid JSON (a ``ValueError``).
    """
    bounds = bounds or JsonBounds()
    if len(memoryview(payload).cast("B")) > PIECE_BYTES:
        return _loads_piecewise(payload, bounds, deadline, what)
    if not _within_bounds_unscanned(payload, bounds):
        _measure_within(payload, bounds, deadline, what)
    if deadline is not None and time.monotonic() > deadline:
        raise JsonDeadlineExceeded(f"the deadline passed before {what} was decoded")
    return orjson.loads(payload)


def _loads_piecewise(
    payload: bytes | bytearray | memoryview, bounds: JsonBounds, deadline: float | None, what: str
) -> Any:
    try:
        shape, structure = _scan(payload, bounds, deadline, keep_structure=True)
    except JsonTooLarge as exc:
        raise JsonTooLarge(exc.limit, exc.bound, exc.observed, what) from None
    if deadline is not None and time.monotonic() > deadline:
        raise JsonDeadlineExceeded(f"the deadline passed before {what} was decoded")
    assert structure is not None
    if structure.broken:
        raise orjson.JSONDecodeError(f"{what} is not JSON: {structure.broken}", "", 0)
    if shape.depth > _ORJSON_MAX_DEPTH:
        return orjson.loads(payload)  # refused at orjson's own depth limit
    view = memoryview(payload).cast("B")
    return _Pieces(view, structure, deadline, what).value(0, len(view))


_OPEN_ARRAY, _OPEN_OBJECT, _COMMA, _COLON = ord("["), ord("{"), ord(","), ord(":")


@dataclasses.dataclass
class _Frame:
    """An array or object being filled by :meth:`_Pieces.value`: its elements (members) cut at its commas
    (``starts``, ``ends``, ``big``: decoded by itself, ``colons``: a member's colon, None for an array), the
    ``runs`` of them to decode as ``(first, last)`` element indices, and the next run to decode."""

    result: Any
    colons: Any
    starts: Any
    ends: Any
    big: Any
    runs: list[tuple[int, int]]
    next: int = 0


class _Pieces:
    """Decodes spans of one payload piecewise from its :class:`_Structure` (see the module docstring).

    The structural characters of one level, in order, are indexed on first use (:meth:`_level`): there an opener
    is followed by its container's own commas and colons and then by its closer, so finding them costs a binary
    search and the container's own separators, never a pass over what is nested inside. A level is indexed by
    one pass over the levels, or, once :data:`_LEVEL_PASSES` levels were, all of them by one stable sort (a
    reply's large containers usually sit at one or two levels; a deep chain of them needs the sort).
    """

    def __init__(self, view: memoryview, structure: _Structure, deadline: float | None, what: str) -> None:
        np = _tables()[0]
        self._np = np
        self._view = view
        self._deadline = deadline
        self._what = what
        self._positions = structure.positions
        self._chars = structure.chars
        self._levels = structure.levels
        self._by_level: dict[int, tuple[Any, Any]] = {}
        self._order: Any = None
        self._level_start: Any = None

    def _level(self, level: int) -> tuple[Any, Any]:
        """The indices of the structural characters at ``level``, in order, and where the closers are among them."""
        cached = self._by_level.get(level)
        if cached is not None:
            return cached
        np = self._np
        if self._order is None and len(self._by_level) >= _LEVEL_PASSES:
            self._order = np.argsort(self._levels, kind="stable")
            self._level_start = np.concatenate(([0], np.cumsum(np.bincount(self._levels))))
        if self._order is not None:
            members = self._order[int(self._level_start[level]) : int(self._level_start[level + 1])]
        else:
            members = np.flatnonzero(self._levels == level)
        kinds = self._chars[members]
        cached = self._by_level[level] = (members, np.flatnonzero((kinds == ord("]")) | (kinds == ord("}"))))
        return cached

    def value(self, start: int, end: int) -> Any:
        """The JSON value that ``[start, end)`` of the payload holds, with whitespace around it.

        Iterative: the containers being filled are a stack of :class:`_Frame` (each new container is put in
        its parent empty and filled in place, so the parent's order is kept), so nesting as deep as the
        depth bound never recurses in Python.

        Raises:
            orjson.JSONDecodeError: the span is not one JSON value.
            JsonDeadlineExceeded: the deadline passed.
        """
        opened = self._open(start, end)
        if not isinstance(opened, _Frame):
            return opened
        stack = [opened]
        while stack:
            frame = stack[-1]
            if frame.next == len(frame.runs):
                stack.pop()
                continue
            first, last = frame.runs[frame.next]
            frame.next += 1
            self._check_deadline()
            start, end = int(frame.starts[first]), int(frame.ends[last])
            if frame.big[first]:
                key = None
                if frame.colons is not None:  # an object member: "key": value, cut at its colon
                    colon = int(frame.colons[first])
                    key = self._orjson(self._view[start:colon], start)
                    if not isinstance(key, str):
                        self._invalid("an object key that is not a string", start)
                    start = colon + 1
                child = self._open(start, end)
                if isinstance(child, _Frame):
                    stack.append(child)
                    child = child.result
                if key is None:
                    frame.result.append(child)
                else:
                    frame.result[key] = child
            elif frame.colons is None:
                part = self._orjson(b"".join((b"[", self._view[start:end], b"]")), start - 1)
                if len(part) != last - first + 1:  # a blank element: "[ ]" is a list, "[1, ]" is not JSON
                    self._invalid("an empty array element", start)
                frame.result += part
            else:
                part = self._orjson(b"".join((b"{", self._view[start:end], b"}")), start - 1)
                if first == last and len(part) != 1:
                    self._invalid("an empty object member", start)
                # orjson keeps a duplicate key's first place with its last value, and so does merging in order
                frame.result.update(part)
        return opened.result

    def _open(self, start: int, end: int) -> Any:
        """The value of ``[start, end)`` when one orjson call decodes it (at most a piece, a string or number,
        an empty container), else a :class:`_Frame` for the array or object it holds."""
        self._check_deadline()
        np = self._np
        if end - start <= PIECE_BYTES:
            inside = int(np.searchsorted(self._positions, end)) - int(np.searchsorted(self._positions, start))
            if inside <= PIECE_VALUES:
                return self._orjson(self._view[start:end], start)
        first = self._first_non_blank(start, end)
        if first == end:
            self._invalid("no value", start)
        opener = self._view[first]
        if opener not in (_OPEN_ARRAY, _OPEN_OBJECT):
            return self._orjson(self._view[start:end], start)  # a string or number: one orjson call, fast
        index = int(np.searchsorted(self._positions, first))
        if index >= self._positions.size or int(self._positions[index]) != first:
            self._invalid("an opener the scan did not see", first)
        members, closers = self._level(int(self._levels[index]))
        rank = int(np.searchsorted(members, index))
        found = int(np.searchsorted(closers, rank))
        if found >= closers.size:
            self._invalid("an unclosed container", first)
        closer_rank = int(closers[found])
        closer = int(members[closer_rank])
        close = int(self._positions[closer])
        if int(self._chars[closer]) != opener + 2:  # "]" follows "[" by 2 in ASCII, "}" follows "{"
            self._invalid("a closer of the other kind", close)
        if self._first_non_blank(close + 1, end) != end:
            self._invalid("text after a value", close + 1)
        inner = members[rank + 1 : closer_rank]
        separators = self._positions[inner]
        kinds = self._chars[inner]
        blank = not separators.size and self._first_non_blank(first + 1, close) == close
        if opener == _OPEN_ARRAY:
            if bool((kinds != _COMMA).any()):
                self._invalid("a colon in an array", int(separators[int(np.argmax(kinds != _COMMA))]))
            return [] if blank else _Frame([], None, *self._runs(first, close, separators))
        if blank:
            return {}
        if separators.size % 2 == 0 or bool((kinds[0::2] != _COLON).any()) or bool((kinds[1::2] != _COMMA).any()):
            self._invalid("object members that are not key: value", first)
        return _Frame({}, separators[0::2], *self._runs(first, close, separators[1::2]))

    def _runs(self, open_at: int, close_at: int, commas: Any) -> tuple[Any, Any, Any, list[tuple[int, int]]]:
        """The elements between ``open_at`` and ``close_at`` cut at ``commas`` (their ``starts``, ``ends``, and
        ``big``: larger than half a piece, in bytes or structural characters), and the runs to decode as
        ``(first, last)`` element indices.

        A big element is a run by itself; the others run together while they start within one half-piece
        window of the payload's bytes and of its structural characters, so a run spans at most
        :data:`PIECE_BYTES` and :data:`PIECE_VALUES`.
        """
        np = self._np
        # in the positions' own type: a search of them with values of another type would copy them all
        kind = self._positions.dtype
        starts = np.concatenate((np.array([open_at + 1], dtype=kind), commas + 1))
        ends = np.concatenate((commas, np.array([close_at], dtype=kind)))
        half, half_values = max(1, PIECE_BYTES // 2), max(1, PIECE_VALUES // 2)
        first_inside = np.searchsorted(self._positions, starts)
        big = ((ends - starts) > half) | ((np.searchsorted(self._positions, ends) - first_inside) > half_values)
        window, value_window = starts // half, first_inside // half_values
        new_run = np.ones(starts.size, dtype=bool)
        new_run[1:] = big[1:] | big[:-1] | (window[1:] != window[:-1]) | (value_window[1:] != value_window[:-1])
        firsts = np.flatnonzero(new_run)
        lasts = np.append(firsts[1:], starts.size) - 1
        return starts, ends, big, list(zip(firsts.tolist(), lasts.tolist(), strict=True))

    def _orjson(self, text: bytes | memoryview, offset: int) -> Any:
        """``orjson.loads(text)``, where ``text`` starts at byte ``offset`` of the payload (a wrapping bracket
        included), its error naming the byte of the payload."""
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            self._invalid(exc.msg, max(0, offset + exc.pos))

    def _first_non_blank(self, start: int, end: int) -> int:
        """The first byte of ``[start, end)`` that is not JSON whitespace, or ``end``; reads windows growing
        from 64 bytes, so it costs little where the answer is near ``start``."""
        step = 64
        while start < end:
            stop = min(end, start + step)
            rest = bytes(self._view[start:stop]).lstrip(_WHITESPACE)
            if rest:
                return stop - len(rest)
            start, step = stop, min(step * 8, _CHUNK)
        return end

    def _check_deadline(self) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise JsonDeadlineExceeded(f"the deadline passed while {self._what} was being decoded")

    def _invalid(self, reason: str, position: int) -> NoReturn:
        raise orjson.JSONDecodeError(f"{self._what} is not JSON: {reason}", "", position)


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
