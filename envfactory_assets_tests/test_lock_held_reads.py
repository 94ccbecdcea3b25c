"""The heartbeat's reads keep the interpreter lock: another thread never runs while they read."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from envfactory_assets.runtime import lock_held_reads
from envfactory_assets.runtime.lock_held_reads import python_thread_runqueue_waits_s, read_small_file


def test_a_small_file_reads_as_python_reads_it(tmp_path) -> None:
    path = tmp_path / "cpu.stat"
    path.write_bytes(b"usage_usec 123456\nuser_usec 100000\n")
    assert read_small_file(str(path)) == path.read_bytes()
    assert read_small_file(str(path), limit=10) == b"usage_usec"
    assert read_small_file(str(tmp_path / "gone")) is None
    assert read_small_file(str(tmp_path)) is None  # a directory cannot be read


@pytest.mark.parametrize("calls", ["libc", "os fallback"])
def test_a_path_is_encoded_as_os_open_encodes_it(tmp_path, monkeypatch: pytest.MonkeyPatch, calls: str) -> None:
    """A name that is not UTF-8 (decoded by ``os.fsdecode`` with surrogates, as ``os.listdir`` gives it) reads its
    file; a NUL byte, which C would take for the end of the name, is refused as ``os.open`` refuses it. The same
    through libc and through the fallback used where libc cannot be loaded."""
    if calls == "os fallback":
        monkeypatch.setattr(lock_held_reads, "_CALLS", None)
    raw = os.path.join(os.fsencode(tmp_path), b"cpu\xe9.stat")
    with open(raw, "wb") as handle:
        handle.write(b"usage_usec 7\n")
    assert read_small_file(os.fsdecode(raw)) == b"usage_usec 7\n"
    assert read_small_file(raw) == b"usage_usec 7\n"
    with pytest.raises(ValueError, match="NUL"):
        read_small_file("/proc/self/status\0/schedstat")
    with pytest.raises(ValueError, match="negative"):
        read_small_file("/proc/self/status", limit=-1)


def test_every_python_thread_has_a_growing_runqueue_wait() -> None:
    started, stop = threading.Event(), threading.Event()

    def spin() -> None:
        started.set()
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        started.wait()
        first = python_thread_runqueue_waits_s()
        time.sleep(0.2)  # the two threads share the lock (and, on a busy machine, the cores)
        second = python_thread_runqueue_waits_s()
    finally:
        stop.set()
        thread.join()
    assert {threading.main_thread().native_id, thread.native_id} <= set(first)
    assert all(second[tid] >= first[tid] >= 0.0 for tid in first)


class _Rival:
    """A thread that counts its turns with the interpreter lock: it takes the lock, counts, and hands it back at
    once (``sleep(0)``). With a switch interval far longer than the test, it gets the lock back only when the
    main thread releases it, as a system call made through Python's own ``os`` functions does."""

    def __init__(self) -> None:
        self.turns = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.turns += 1
            time.sleep(0)

    def __enter__(self) -> _Rival:
        self._thread.start()
        while self.turns < 10:
            time.sleep(0.001)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def long_switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _rival_turns_during(read: Callable[[str], object], fifo: str) -> tuple[int, object]:
    """The rival's turns while ``read(fifo)`` waits 0.3 s for a writer process to open the FIFO and write."""
    writer = subprocess.Popen(["sh", "-c", f"sleep 0.3; printf waited > '{fifo}'"])
    try:
        with _Rival() as rival:
            time.sleep(0.01)  # the main thread takes the lock back from the rival at its next sleep(0)
            before = rival.turns
            value = read(fifo)
            return rival.turns - before, value
    finally:
        writer.wait(timeout=10)


def _os_read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def test_a_read_never_hands_the_interpreter_lock_to_another_thread(tmp_path, long_switch_interval: None) -> None:
    """A FIFO makes the read wait 0.3 s for its writer: a read that kept the lock lets no other thread run
    meanwhile, one through Python's own calls lets the rival run throughout."""
    fifo = str(tmp_path / "slow")
    os.mkfifo(fifo)
    assert _rival_turns_during(read_small_file, fifo) == (0, b"waited")
    turns, value = _rival_turns_during(_os_read, fifo)
    assert value == b"waited" and turns > 100


def test_runqueue_waits_are_read_keeping_the_lock(long_switch_interval: None) -> None:
    with _Rival() as rival:
        time.sleep(0.01)
        before = rival.turns
        for _ in range(100):
            python_thread_runqueue_waits_s()
        assert rival.turns == before
