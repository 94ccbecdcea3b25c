"""Readers bounded by what they decode: the shared scanner, a real worker's oversized replies, and a failed
load ending its trust domain's process."""

from __future__ import annotations

import gc
import os
import random
import time
import tracemalloc
from collections.abc import Iterator

import orjson
import pytest

from envfactory_assets.runtime import EnvironmentRejected, SandboxLimits, SandboxWorker, bounded_json
from envfactory_assets.runtime.bounded_json import JsonBounds, JsonTooLarge
from envfactory_assets.runtime.protocol import HEADER, FrameChannel, encode_frame


def reference_shape(payload: bytes) -> tuple[int, int, int]:
    """(containers, separators, depth) by a plain character loop: the scanner must agree with it."""
    depth = deepest = containers = separators = 0
    in_string = escaped = False
    for char in payload.decode():
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            containers += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
        elif char in ",:":
            separators += 1
    return containers, separators, deepest


def random_value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 6 or roll < 0.4:
        return rng.choice([1, 2.5, 'a\\"[{,', "\\", '\\\\"x', "", None, True, '"]]', "}" * rng.randint(0, 5)])
    if roll < 0.7:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f'k{rng.random()}\\"[': random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 18])
def test_scan_agrees_with_a_character_loop_across_chunk_boundaries(monkeypatch, chunk: int) -> None:
    # escaped quotes and backslash runs that straddle a chunk boundary are the hard cases
    monkeypatch.setattr(bounded_json, "_CHUNK", chunk)
    rng = random.Random(chunk)
    for _ in range(200):
        payload = orjson.dumps(random_value(rng))
        shape = bounded_json.measure(payload)
        assert (shape.containers, shape.separators, shape.depth) == reference_shape(payload), payload


@pytest.mark.parametrize("chunk", [1, 3, 1 << 18])
def test_scan_counts_nan_and_infinity_outside_strings_only(monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(bounded_json, "_CHUNK", chunk)
    for payload, bare in (
        (b'{"a": NaN, "b": [1.5, -Infinity]}', 3),  # each N and I outside a string
        (b"[Infinity]", 1),
        (b'{"NaN": "Infinity", "s": "a\\"NaN\\\\", "I": null}', 0),
        (orjson.dumps({"x": [1, 2.5e-3, None, True, False, "NaN"]}), 0),
    ):
        assert bounded_json.measure(payload).bare_constants == bare, payload


def decoded_size(payload: bytes) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        value = orjson.loads(payload)
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del value
    return size


SHAPES = {
    "empty lists": lambda n: [[]] * n,
    "empty dicts": lambda n: [{}] * n,
    "floats": lambda n: [i + 0.5 for i in range(n)],
    "big ints": lambda n: [10**12 + i for i in range(n)],
    "short strings": lambda n: [str(i) for i in range(n)],
    "records": lambda n: [{"id": i, "name": f"n{i}", "ok": True} for i in range(n // 3)],
    "one big object": lambda n: {f"key{i}": f"v{i}" for i in range(n)},
    "one-key objects": lambda n: [{"a": 1.5}] * n,
    "nested": lambda n: {"items": [[[]] * 100] * (n // 100)},
    # one character above U+FFFF (U+00FF) makes CPython store the whole string in 4 (2) bytes a character
    "astral strings": lambda n: [f"{i}\U0001f600" for i in range(n)],
    "one astral string": lambda n: "a" * (10 * n) + "\U0001f600",
    "one two-byte string": lambda n: "a" * (10 * n) + "\u0101",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_decoded_size_estimate_is_above_the_measured_size(shape: str) -> None:
    payload = orjson.dumps(SHAPES[shape](100_000))
    assert bounded_json.measure(payload).decoded_bytes >= decoded_size(payload)


ESCAPED_WIDE = {  # orjson writes raw UTF-8, a forged reply may write escapes; the digits may straddle chunks
    "surrogate pair": b'"' + b"a" * 1000 + b'\\ud83d\\ude00"',
    "upper-case surrogate": b'["' + b"a" * 1000 + b'\\uD83D\\uDE00", 1]',
    "two-byte escape": b'"' + b"a" * 1000 + b'\\u0101"',
}


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 18])
@pytest.mark.parametrize("name", sorted(ESCAPED_WIDE))
def test_decoded_size_estimate_counts_wide_characters_written_as_escapes(monkeypatch, chunk: int, name: str) -> None:
    monkeypatch.setattr(bounded_json, "_CHUNK", chunk)
    payload = ESCAPED_WIDE[name]
    assert bounded_json.measure(payload).decoded_bytes >= decoded_size(payload)


def test_latin_1_characters_keep_one_byte_a_character() -> None:
    for payload in (b'"' + b"a" * 1000 + b'\\u00e9"', ('"' + "a" * 1000 + '\u00e9"').encode()):
        assert bounded_json.measure(payload).decoded_bytes < 2 * len(payload), payload


def test_a_reply_of_one_astral_string_is_refused_by_its_decoded_size() -> None:
    # 1 MiB of JSON that CPython stores in 4 MiB: past a 2 MiB decoded bound, within a 2 MiB byte bound
    payload = b'"' + b"a" * (1 << 20) + b'\\ud83d\\ude00"'
    bounds = JsonBounds(max_bytes=2 << 20, max_decoded_bytes=2 << 20)
    with pytest.raises(JsonTooLarge) as refused:
        bounded_json.loads(payload, bounds)
    assert refused.value.limit == "max_decoded_bytes" and refused.value.observed >= 4 << 20


def test_amplifying_and_deep_payloads_are_refused_before_decoding() -> None:
    inner = [[]] * 1000
    payload = orjson.dumps({"items": [inner] * 8000})  # 24 MB that decodes to more than 500 MiB
    started = time.monotonic()
    with pytest.raises(JsonTooLarge) as refused:
        bounded_json.loads(payload)
    assert refused.value.limit == "max_decoded_bytes" and time.monotonic() - started < 2
    with pytest.raises(JsonTooLarge) as deep:
        bounded_json.loads(b"[" * 100_000 + b"]" * 100_000)
    assert deep.value.limit == "max_depth" and deep.value.observed > 512
    with pytest.raises(JsonTooLarge) as long:
        bounded_json.loads(b'"' + b"x" * 2000 + b'"', JsonBounds(max_bytes=1000))
    assert long.value.limit == "max_bytes"
    assert bounded_json.loads(b"[" * 512 + b"]" * 512) is not None  # the bound itself is allowed
    with pytest.raises(bounded_json.JsonDeadlineExceeded):
        bounded_json.loads(b"[]", deadline=time.monotonic() - 1)
    with pytest.raises(ValueError, match="max_depth"):
        JsonBounds(max_depth=0)


AMPLIFIER_SOURCE = """
def load(data):
    return dict(data)


def save(state):
    return dict(state)


def amplify(state, n=8000):
    inner = [[]] * 1000
    return {"items": [inner] * n}


def small(state):
    return {"fine": True}
"""

LIMITS = SandboxLimits(memory_mb=512, cpu_seconds=20, call_timeout_s=5.0, kill_grace_s=1.0)


@pytest.fixture
def amplifier() -> Iterator[SandboxWorker]:
    with SandboxWorker(LIMITS) as worker:
        worker.load_environment("amplifier", AMPLIFIER_SOURCE)
        yield worker


def test_amplifying_reply_is_too_large_within_deadline_and_bounded_memory(amplifier: SandboxWorker) -> None:
    keep = amplifier.open_episode({"amplifier": {}})
    episode = amplifier.open_episode({"amplifier": {}})
    pid = amplifier.pids["amplifier"]
    gc.collect()
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = amplifier.call(episode, "amplify")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    assert not result["ok"] and result["error"]["type"] == "too_large", result
    assert "max_decoded_bytes" in result["error"]["message"] and result["error"]["episode_lost"]
    assert elapsed < LIMITS.call_timeout_s + LIMITS.kill_grace_s, elapsed
    assert peak < 2 * LIMITS.max_response_mb * 1024 * 1024, peak
    # the reply was consumed whole: the same worker keeps serving, and its other episodes
    assert not amplifier.is_open(episode) and amplifier.is_open(keep)
    assert amplifier.call(keep, "small") == {"ok": True, "output": {"fine": True}}
    assert amplifier.pids["amplifier"] == pid


def test_channel_refuses_a_frame_deeper_than_the_bound_and_stays_in_step() -> None:
    # orjson in the worker cannot write past depth 255, but code that reaches the protocol pipe can
    to_worker_read, to_worker_write = os.pipe()
    from_worker_read, from_worker_write = os.pipe()
    try:
        channel = FrameChannel(to_worker_write, from_worker_read, bounds=JsonBounds(max_depth=512))
        deep = b'{"id": 1, "ok": true, "result": ' + b"[" * 600 + b"]" * 600 + b"}"
        os.write(from_worker_write, HEADER.pack(len(deep)) + deep + encode_frame({"id": 2, "ok": True}))
        with pytest.raises(JsonTooLarge, match="max_depth"):
            channel.receive(time.monotonic() + 5)
        assert channel.receive(time.monotonic() + 5) == {"id": 2, "ok": True}
    finally:
        for fd in (to_worker_read, to_worker_write, from_worker_read, from_worker_write):
            os.close(fd)


def test_reply_declaring_more_bytes_than_the_cap_kills_the_worker() -> None:
    limits = SandboxLimits(memory_mb=512, call_timeout_s=5.0, kill_grace_s=1.0, max_response_mb=1)
    with SandboxWorker(limits) as worker:
        worker.load_environment("amplifier", AMPLIFIER_SOURCE)
        episode = worker.open_episode({"amplifier": {}})
        pid = worker.pids["amplifier"]
        result = worker.call(episode, "amplify", {"n": 400})  # 1.2 MB on the wire
        assert result["error"]["type"] == "too_large" and "worker killed" in result["error"]["message"], result
        assert "amplifier" not in worker.pids or worker.pids["amplifier"] != pid
        assert worker.call(worker.open_episode({"amplifier": {}}), "small")["ok"]


PATCHING_THEN_FAILING = """
import math
math.tau = 3.0


def load(data):
    return dict(data)


def save(state):
    return dict(state)


def probe(state):
    return {"tau": math.tau}


raise ValueError("this version fails to load")
"""


def test_failed_load_ends_its_process_so_the_next_load_starts_fresh() -> None:
    # without the Python layer, as the containment corpus runs, the module's top level patches math
    reader = PATCHING_THEN_FAILING.replace("math.tau = 3.0", "").replace(
        'raise ValueError("this version fails to load")', ""
    )
    with SandboxWorker(LIMITS, python_guards=False) as worker:
        for env_id in ("patcher", "other"):
            with pytest.raises(EnvironmentRejected, match="fails to load"):
                worker.load_environment("patcher", PATCHING_THEN_FAILING)
            assert "patcher" not in worker.pids  # the failed load's process is gone
            worker.load_environment(env_id, reader)
            episode = worker.open_episode({env_id: {}})
            assert worker.call(episode, "probe")["output"]["tau"] > 6.28  # the failed module's patch is gone
