"""Piecewise decoding of large payloads (:func:`bounded_json.loads` above ``PIECE_BYTES``): the same result as one
``orjson.loads`` for every document, the same refusals, and a reader whose other threads keep running."""

from __future__ import annotations

import gc
import random
import threading
import time
import tracemalloc
import types
from collections.abc import Iterator

import orjson
import pytest

from envfactory_assets.runtime import bounded_json
from envfactory_assets.runtime.bounded_json import JsonBounds, JsonDeadlineExceeded
from envfactory_assets.runtime.lock_held_reads import python_thread_runqueue_waits_s

# -- random documents written as text: whitespace, escapes and raw UTF-8 chosen at random --------------------------

_CHARACTERS = ["a", "Z", " ", '"', "\\", "/", "\n", "\t", "\x00", "\x1f", "é", "ü", "\u0101", "\u20ac", "\U0001f600"]
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\n": "\\n", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_NUMBERS = [
    "0",
    "-0",
    "7",
    "-12",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",  # past 64 bits: orjson makes it a float
    "-9223372036854775809",
    "100000000000000000000000000000",
    "1.5",
    "-0.0",
    "1e308",
    "5e-324",
    "1E+2",
    "12.5e-3",
    "1e-400",
    "3.141592653589793238462643383279",
]
_KEYS = ["a", "b", "k", "\u00e9", "\U0001f600", 'q"', "\\"]  # few, so that keys repeat within an object


def _whitespace(rng: random.Random) -> str:
    return "".join(rng.choice(" \t\n\r") for _ in range(rng.choice([0, 0, 0, 1, 3])))


def _string(rng: random.Random, text: str) -> str:
    out = []
    for char in text:
        roll = rng.random()
        if char in _SHORT_ESCAPES and (roll < 0.5 or char in '"\\\n\t'):
            out.append(_SHORT_ESCAPES[char])
        elif ord(char) < 0x20 or roll < 0.3:
            if ord(char) > 0xFFFF:  # a surrogate pair, in either case of hex digits
                high, low = divmod(ord(char) - 0x10000, 0x400)
                escaped = f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
            else:
                escaped = f"\\u{ord(char):04x}"
            out.append(escaped.upper().replace("\\U", "\\u") if rng.random() < 0.5 else escaped)
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def random_document(rng: random.Random, depth: int = 0) -> str:
    """JSON text of a random value: nested arrays and objects (empty ones too), strings with every kind of
    escape, integers and floats at the edges of orjson's types, repeated keys."""
    roll = rng.random()
    if depth > 6 or roll < 0.35:
        kind = rng.random()
        if kind < 0.45:
            return _string(rng, "".join(rng.choice(_CHARACTERS) for _ in range(rng.choice([0, 1, 3, 12, 40]))))
        if kind < 0.85:
            return rng.choice(_NUMBERS)
        return rng.choice(["true", "false", "null"])
    count = rng.choice([0, 1, 2, 3, 5, 12])
    if roll < 0.65:
        items = [_whitespace(rng) + random_document(rng, depth + 1) + _whitespace(rng) for _ in range(count)]
        return "[" + ",".join(items) + (_whitespace(rng) if not items else "") + "]"
    members = [
        _whitespace(rng)
        + _string(rng, rng.choice(_KEYS))
        + _whitespace(rng)
        + ":"
        + _whitespace(rng)
        + random_document(rng, depth + 1)
        + _whitespace(rng)
        for _ in range(count)
    ]
    return "{" + ",".join(members) + (_whitespace(rng) if not members else "") + "}"


def assert_same(ours: object, theirs: object) -> None:
    """Equal values of the same types, dict keys in the same order (``==`` alone ignores both)."""
    assert type(ours) is type(theirs), (ours, theirs)
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for key in theirs:
            assert_same(ours[key], theirs[key])
    elif isinstance(theirs, list):
        assert len(ours) == len(theirs)
        for mine, other in zip(ours, theirs, strict=True):
            assert_same(mine, other)
    elif isinstance(theirs, float):
        assert repr(ours) == repr(theirs)  # -0.0 and 0.0 are ==
    else:
        assert ours == theirs


def outcome(decode, payload: bytes) -> object:
    try:
        return decode(payload)
    except orjson.JSONDecodeError:
        return orjson.JSONDecodeError


WIDE = JsonBounds(max_depth=1000)


#: (PIECE_BYTES, PIECE_VALUES): tiny pieces make every path run on small documents (runs, elements decoded
#: alone, members cut at their colons), cut by bytes or by structural characters
PIECES = [(1, 1), (8, 1 << 16), (64, 4), (1024, 2), (48, 1 << 16)]


@pytest.mark.parametrize(("piece", "values"), PIECES)
def test_piecewise_decoding_equals_orjson_on_random_documents(monkeypatch, piece: int, values: int) -> None:
    monkeypatch.setattr(bounded_json, "PIECE_BYTES", piece)
    monkeypatch.setattr(bounded_json, "PIECE_VALUES", values)
    rng = random.Random(piece * values)
    for _ in range(250):
        payload = (_whitespace(rng) + random_document(rng) + _whitespace(rng)).encode()
        assert_same(bounded_json.loads(payload, WIDE), orjson.loads(payload))


@pytest.mark.parametrize("chunk", [3, 1 << 18])
def test_escapes_at_scan_chunk_and_piece_edges(monkeypatch, chunk: int) -> None:
    # a backslash run or an escaped quote ending a scan chunk, and a piece boundary next to either
    monkeypatch.setattr(bounded_json, "_CHUNK", chunk)
    monkeypatch.setattr(bounded_json, "PIECE_BYTES", 16)
    for width in range(1, 9):
        for tail in ['\\"', "\\\\", '\\\\\\"', "\\ud83d\\ude00", '\\"]', "\\u00e9,"]:
            text = "x" * width + tail
            payload = f'{{"{text}": ["{text}", {{"{text}": "{text}"}}, "{text}"], "k": "{text}"}}'.encode()
            assert_same(bounded_json.loads(payload, WIDE), orjson.loads(payload))


def test_duplicate_keys_keep_the_first_place_and_the_last_value_across_pieces(monkeypatch) -> None:
    monkeypatch.setattr(bounded_json, "PIECE_BYTES", 32)
    filler = '"' + "f" * 40 + '"'
    payload = (
        f'{{"a": 1, "b": {filler}, "c": [{filler}, {filler}], "a": {{"x": {filler}}}, "\\u0062": 2,'
        f' "d": 3, "a": [{filler}], "c": 4}}'
    ).encode()
    decoded = bounded_json.loads(payload)
    assert list(decoded.items()) == list(orjson.loads(payload).items())
    assert list(decoded) == ["a", "b", "c", "d"] and decoded["a"] == ["f" * 40] and decoded["b"] == 2


INVALID = [
    b"[1,]",
    b"[,1]",
    b"[1,,2]",
    b"[,]",
    b'{"a": 1,}',
    b'{,"a": 1}',
    b"{,}",
    b'{"a" 1}',
    b'{"a": 1 "b": 2}',
    b'{"a"}',
    b'{"a": 1, "b"}',
    b'{"a"::1}',
    b'{"a": 1: 2}',
    b"{1: 2}",
    b"{null: 2}",
    b'["a": 1]',
    b"[1 2]",
    b"[1]x",
    b"x[1]",
    b"[1]]",
    b"[[1]",
    b'{"a": 1]',
    b"[1}",
    b"]",
    b"[\x0c1]",
    b"[1]\x0b",
    b"[NaN]",
    b"[Infinity, -Infinity]",
    b"\xef\xbb\xbf[1]",  # a byte order mark
    b'["\xff\xfe"]',
    b'["\xc0\x80"]',
    b'["unterminated]',
    b'["a\\x"]',
    b'["\\ud800"]',
    b"[01]",
    b"[1.]",
    b"[-]",
    b"[tru]",
    b'"a" "b"',
    b'"a" junk',
    b"1 2",
    b"",
    b"   ",
    b'["raw\ncontrol"]',
]


@pytest.mark.parametrize(("piece", "values"), [(1, 1), (4, 1 << 16), (32, 2)])
def test_what_orjson_refuses_is_refused_wherever_it_sits(monkeypatch, piece: int, values: int) -> None:
    monkeypatch.setattr(bounded_json, "PIECE_BYTES", piece)
    monkeypatch.setattr(bounded_json, "PIECE_VALUES", values)
    filler = b'"' + b"p" * 40 + b'"'
    for fragment in INVALID:
        for payload in (
            fragment,
            b"[" + filler + b", " + fragment + b", " + filler + b"]",
            b'{"k": ' + fragment + b', "z": [' + filler + b"]}",
            b"[" + filler + b"," + fragment + b"]",
            fragment + b" " * 50,
        ):
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(payload)
            with pytest.raises(orjson.JSONDecodeError):
                bounded_json.loads(payload, WIDE)


@pytest.mark.parametrize(("piece", "values"), PIECES[:4])
def test_random_damage_is_refused_exactly_when_orjson_refuses_it(monkeypatch, piece: int, values: int) -> None:
    """One byte of a valid document deleted, inserted or replaced: accepted iff orjson accepts, then equal."""
    monkeypatch.setattr(bounded_json, "PIECE_BYTES", piece)
    monkeypatch.setattr(bounded_json, "PIECE_VALUES", values)
    rng = random.Random(1000 + piece * values)
    refused = 0
    for _ in range(600):
        payload = bytearray(random_document(rng).encode())
        at = rng.randrange(len(payload) + 1)
        byte = rng.choice(b'[]{},:"\\ x0\t')
        operation = rng.randrange(3)
        if operation == 0 and at < len(payload):
            del payload[at]
        elif operation == 1 or at == len(payload):
            payload.insert(at, byte)
        else:
            payload[at] = byte
        payload = bytes(payload)
        expected = outcome(orjson.loads, payload)
        got = outcome(lambda p: bounded_json.loads(p, WIDE), payload)
        if expected is orjson.JSONDecodeError:
            refused += 1
            assert got is orjson.JSONDecodeError, payload
        else:
            assert got is not orjson.JSONDecodeError, payload
            assert_same(got, expected)
    assert refused > 120  # the damage mostly breaks the document: the refusal paths ran


def test_past_orjsons_depth_limit_is_refused_as_orjson_refuses_it(monkeypatch) -> None:
    monkeypatch.setattr(bounded_json, "PIECE_BYTES", 64)
    payload = b"[" * 1025 + b"1" + b"]" * 1025
    with pytest.raises(orjson.JSONDecodeError, match="depth"):
        bounded_json.loads(payload, JsonBounds(max_depth=2000))
    at_limit = b"[" * 1024 + b"1" + b"]" * 1024
    ours, theirs = bounded_json.loads(at_limit, JsonBounds(max_depth=2000)), orjson.loads(at_limit)
    for _ in range(1024):  # too deep for == and assert_same, which recurse
        assert type(ours) is type(theirs) is list and len(ours) == len(theirs) == 1
        ours, theirs = ours[0], theirs[0]
    assert ours == theirs == 1


# -- a 50 MiB reply: the reader's other threads keep running ---------------------------------------------------------


class Heartbeat:
    """A thread that sleeps 10 ms at a time and records the longest gap between two wake-ups, less the time the
    process's threads waited, runnable, for a CPU meanwhile (``/proc/self/task/*/schedstat``: on a loaded
    machine other programs had the cores). Waiting for the interpreter lock is not a run-queue wait: a decoder
    holding the lock counts whole. ``max_wall_gap_s`` is the plain longest gap."""

    def __init__(self) -> None:
        self.max_gap_s = 0.0
        self.max_wall_gap_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last, waits_last = time.monotonic(), python_thread_runqueue_waits_s()
        while not self._stop.wait(0.01):
            now, waits = time.monotonic(), python_thread_runqueue_waits_s()
            gap = now - last
            waited = sum(max(0.0, value - waits_last.get(tid, 0.0)) for tid, value in waits.items())
            self.max_gap_s = max(self.max_gap_s, max(0.0, gap - waited) if waits_last else gap)
            self.max_wall_gap_s = max(self.max_wall_gap_s, gap)
            last, waits_last = now, waits

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        time.sleep(0.05)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


#: Within 100 ms, as the sandbox parent's heartbeat must be (``containment.HEARTBEAT_MAX_GAP_S``).
MAX_GAP_S = 0.1


def records(count: int) -> bytes:
    """A list of ``count`` small objects of 16 values each, about 240 bytes: 200,000 make a 46 MiB reply."""
    return (
        b"["
        + b",".join(
            orjson.dumps(
                {
                    "id": i,
                    "name": f"item{i}",
                    "ok": True,
                    "score": i * 0.25,
                    "tags": ["a", "b", "c"],
                    "meta": {"x": i, "y": None},
                    "text": "t" * 120,
                }
            )
            for i in range(count)
        )
        + b"]"
    )


def deep_records(levels: int, count: int) -> bytes:
    """``levels`` objects nested through their ``"next"`` member, each holding ``count`` records."""
    level = records(count)[1:-1]
    head = b"".join(b'{"level": %d, "items": [%b], "next": ' % (i, level) for i in range(levels))
    return head + b"null" + b"}" * levels


# 46 MiB of records is an estimated 400 MiB decoded, past the default 64 MiB: bounds that let them through, as a
# parent with a larger max_response_mb has
LARGE = JsonBounds(max_bytes=64 << 20, max_decoded_bytes=1 << 30)

REPLIES = {
    "200k small objects": lambda: records(200_000),
    "one 40 MiB string": lambda: b'{"ok": true, "output": "' + b"s" * (40 << 20) + b'"}',
    "100 levels of 2,200 objects": lambda: deep_records(100, 2_200),
}


@pytest.fixture
def collector_held() -> Iterator[None]:
    """The cyclic garbage collector off while decoding: each full collection walks every container alive in the
    process, whoever made it (about 250 ms once a million records' dicts and lists are alive), a pause of the
    heap's size, not of the decoder's (the default decoded-size bound caps a reply's share: 400,000 empty lists,
    a pause of 20 to 30 ms in a bare interpreter, 70 to 110 ms in pytest's larger heap)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def decode_with_heartbeat(payload: bytes, bounds: JsonBounds) -> tuple[object, Heartbeat]:
    with Heartbeat() as heartbeat:
        decoded = bounded_json.loads(payload, bounds)
    return decoded, heartbeat


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_a_50_mib_reply_is_decoded_while_another_thread_runs_every_100_ms(name: str, collector_held: None) -> None:
    payload = REPLIES[name]()
    assert len(payload) >= 40 << 20
    decoded, heartbeat = decode_with_heartbeat(payload, LARGE)
    print(f"{name}: longest gap {heartbeat.max_gap_s * 1000:.0f} ms (wall {heartbeat.max_wall_gap_s * 1000:.0f})")
    assert heartbeat.max_gap_s < MAX_GAP_S, (heartbeat.max_gap_s, heartbeat.max_wall_gap_s)
    assert decoded == orjson.loads(payload)


def test_the_heartbeat_sees_one_orjson_call_on_a_50_mib_reply(monkeypatch, collector_held: None) -> None:
    """The check above can fail: decoded in one orjson call (a piece as large as the reply), the same 46 MiB of
    small objects holds the interpreter lock for well over 100 ms (about 300 ms here)."""
    payload = records(200_000)
    monkeypatch.setattr(bounded_json, "PIECE_BYTES", len(payload))
    _, heartbeat = decode_with_heartbeat(payload, LARGE)
    print(f"one orjson call: longest gap {heartbeat.max_gap_s * 1000:.0f} ms")
    assert heartbeat.max_gap_s >= MAX_GAP_S, (heartbeat.max_gap_s, heartbeat.max_wall_gap_s)


def test_a_50_mib_reply_at_the_default_bounds_leaves_the_parent_running_with_the_collector_on() -> None:
    # 130,000 strings of escaped quotes: 50 MiB the default bounds let through (an estimated 60 MiB decoded), few
    # containers, so that the collector's pauses stay short; one orjson call holds the lock 60 to 100 ms here
    payload = b"[" + b",".join([b'"' + b'\\"' * 200 + b'"'] * 130_000) + b"]"
    gc.collect()
    decoded, heartbeat = decode_with_heartbeat(payload, JsonBounds())
    print(f"longest gap {heartbeat.max_gap_s * 1000:.0f} ms (wall {heartbeat.max_wall_gap_s * 1000:.0f})")
    assert heartbeat.max_gap_s < MAX_GAP_S, (heartbeat.max_gap_s, heartbeat.max_wall_gap_s)
    assert decoded == orjson.loads(payload)


def test_the_deadline_passing_mid_decode_raises_between_pieces(monkeypatch) -> None:
    payload = records(20_000)  # 4.5 MiB: 9 pieces or more
    chunks = -(-len(payload) // bounded_json._CHUNK)
    ticks = iter(range(1_000_000))
    # a clock that moves one tick a reading: the scan reads it once a chunk, decoding once before and once a
    # piece, so a deadline a few ticks past the scan passes after the first pieces were decoded
    monkeypatch.setattr(bounded_json, "time", types.SimpleNamespace(monotonic=lambda: next(ticks)))
    with pytest.raises(JsonDeadlineExceeded, match="was being decoded"):
        bounded_json.loads(payload, LARGE, deadline=chunks + 3)
    assert next(ticks) < chunks + 10  # it stopped at once, not after the rest of the pieces


def test_decoding_a_50_mib_reply_stays_within_twice_the_decoded_bound() -> None:
    # strings of 350 bytes: 50 MiB within the default bounds (an estimate of 61 MiB)
    payload = b"[" + b",".join(b'"%d%s"' % (i, b"q" * 340) for i in range(150_000)) + b"]"
    bounds = JsonBounds()
    gc.collect()
    tracemalloc.start()
    try:
        decoded = bounded_json.loads(payload, bounds)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(decoded) == 150_000
    print(f"peak {peak / 2**20:.1f} MiB besides the {len(payload) / 2**20:.1f} MiB payload")
    assert peak + len(payload) < 2 * bounds.max_decoded_bytes, peak
