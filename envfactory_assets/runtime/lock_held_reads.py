"""Reads of small kernel files (``/proc``, cgroup files) that keep the interpreter lock.

A thread that measures how long the process's other threads are held up must not be held up by its own
measuring: Python's ``open``, ``read`` and ``os.listdir`` release the interpreter lock around each system call,
and each time the thread takes it back it waits behind whichever thread holds it (up to the switch interval,
5 ms, behind Python code; the whole call behind a C call). Reading four ``schedstat`` files that way costs a
heartbeat thread up to 30 ms a tick while the main thread decodes. These reads call libc through
:class:`ctypes.PyDLL`, which keeps the lock for the call (a ``/proc`` read takes microseconds), so the only
wait for the lock left in a tick is the one being measured.

Linux only, as the rest of the sandbox is; where libc cannot be loaded the reads fall back to ``os`` (the
lock is then released as before).
"""

from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["read_small_file", "python_thread_runqueue_waits_s"]

#: The most bytes one read returns; a ``schedstat`` line is about 40 bytes, a cgroup ``cpu.stat`` about 200.
READ_LIMIT = 4096


def _libc_calls() -> tuple[object, object, object] | None:
    try:
        libc = ctypes.PyDLL(None, use_errno=True)  # the process's own symbols, libc among them
        open_, read, close = libc.open, libc.read, libc.close
    except (OSError, AttributeError):
        return None
    open_.argtypes, open_.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
    read.argtypes, read.restype = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_ssize_t
    close.argtypes, close.restype = [ctypes.c_int], ctypes.c_int
    return open_, read, close


_CALLS = _libc_calls()


def read_small_file(path: str | bytes | os.PathLike[str], limit: int = READ_LIMIT) -> bytes | None:
    """The first ``limit`` bytes of the file at ``path``, read without releasing the interpreter lock.

    Args:
        path: a file the kernel answers at once (``/proc/...``, a cgroup file); a slow file would hold every
            thread of the process for the length of the read. Encoded as ``os.open`` encodes it
            (:func:`os.fsencode`), so a name that is not UTF-8 reads the file it names.
        limit: the most bytes read, one ``read(2)``.

    Returns:
        The bytes read, or None when the file cannot be opened or read (the thread it describes ended, the
        group was removed).

    Raises:
        ValueError: ``path`` holds a NUL byte (C would read the file named by its part before the NUL), or
            ``limit`` is negative.
    """
    encoded = os.fsencode(path)
    if b"\0" in encoded:
        raise ValueError(f"read_small_file: path {path!r} holds a NUL byte")
    if limit < 0:
        raise ValueError(f"read_small_file: limit {limit} is negative")
    if _CALLS is None:
        try:
            fd = os.open(encoded, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return os.read(fd, limit)
        except OSError:
            return None
        finally:
            os.close(fd)
    open_, read, close = _CALLS
    fd = open_(encoded, os.O_RDONLY | os.O_CLOEXEC)
    if fd < 0:
        return None
    try:
        buffer = ctypes.create_string_buffer(limit)
        count = read(fd, buffer, limit)
        return buffer.raw[:count] if count >= 0 else None
    finally:
        close(fd)


def python_thread_runqueue_waits_s() -> dict[int, float]:
    """``{native thread id: seconds spent runnable but waiting for a CPU}`` for every live Python thread of this
    process (``/proc/self/task/<tid>/schedstat``, second field, nanoseconds), read holding the interpreter lock.

    Only Python threads: a thread that holds the interpreter lock, or waits for it, is one of them, and the
    process's other threads (a numerical library's pool) never hold up the ones measured. Empty where the kernel
    keeps no ``schedstat``.
    """
    waits: dict[int, float] = {}
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None:
            continue
        text = read_small_file(f"/proc/self/task/{tid}/schedstat")
        if text is None:
            continue
        try:
            waits[tid] = int(text.split()[1]) / 1e9
        except (ValueError, IndexError):
            continue
    return waits
