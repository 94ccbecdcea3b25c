"""Wire format between :class:`.sandbox.SandboxWorker` and the worker process.

A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8 JSON (one
object). The worker first sends ``{"ready": true, "pid": int, "protocol": 1}``; then every request
``{"id": int, "op": str, "timeout_s": float, ...}`` gets exactly one response
``{"id": int, "ok": true, "result": ...}`` or ``{"id": int, "ok": false, "error": {"type", "message", ...}}``.
A request may also carry ``"close": [episode id, ...]``: episodes the parent closed since its last request, which
the worker forgets before it runs the request (a closed episode costs no round trip of its own).
"""

from __future__ import annotations

import os
import select
import struct
import time
from typing import Any, BinaryIO

import orjson

from envfactory_assets.runtime.bounded_json import JsonBounds, JsonDeadlineExceeded, loads

PROTOCOL_VERSION = 1
HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 1 << 30  # 1 GiB: far above any sane state, below the 4 GiB header limit
#: Smallest read of the channel, bytes: a short reply needs no more, and ``os.read(n)`` allocates ``n`` bytes up front
#: (1 MiB cost an mmap and munmap per reply, about 13 us; 64 KiB comes from the heap).
_READ_CHUNK = 1 << 16
#: Largest read, bytes: a long frame is read in pieces of at most this size.
_MAX_READ = 8 << 20


class ProtocolError(Exception):
    """A frame is malformed: bad length, truncated, or not a JSON object."""


class FrameTooLarge(ProtocolError):
    """The worker declared a frame longer than the channel accepts; it was not read."""


class ChannelClosed(Exception):
    """The other end closed the pipe (the worker exited)."""


class ChannelTimeout(Exception):
    """The deadline passed before a frame could be sent or received."""


def encode_frame(message: Any) -> bytes:
    """Encode one message as a frame: header + JSON bytes.

    Raises:
        TypeError: if ``message`` is not JSON-serializable by orjson.
        ProtocolError: if the encoded message exceeds :data:`MAX_FRAME_BYTES`.
    """
    try:
        payload = orjson.dumps(message)
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"message is not JSON-serializable: {exc}") from None
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return HEADER.pack(len(payload)) + payload


def decode_payload(payload: bytes) -> dict[str, Any]:
    """Decode a frame's JSON payload.

    Raises:
        ProtocolError: if it is not a JSON object.
    """
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


def read_frame(stream: BinaryIO) -> dict[str, Any]:
    """Blocking read of one frame from a buffered binary stream (worker side).

    Raises:
        EOFError: the stream ended cleanly before a new frame.
        ProtocolError: truncated or malformed frame.
    """
    header = stream.read(HEADER.size)
    if not header:
        raise EOFError
    if len(header) != HEADER.size:
        raise ProtocolError("truncated frame header")
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    payload = stream.read(length)
    if len(payload) != length:
        raise ProtocolError("truncated frame payload")
    return decode_payload(payload)


def write_frame(stream: BinaryIO, message: Any) -> None:
    """Blocking write of one frame to a binary stream, flushed (worker side)."""
    stream.write(encode_frame(message))
    stream.flush()


def _poll_ms(seconds: float) -> int:
    return max(1, int(seconds * 1000) + 1)


class FrameChannel:
    """Parent side of the pipe pair: every send and receive is bounded by a deadline, so a hung
    or dead worker can never block the caller.

    Args:
        write_fd: the worker's stdin pipe (set non-blocking here).
        read_fd: the worker's protocol output pipe (set non-blocking here).
        max_frame_bytes: the largest frame accepted from the worker; a longer declared length is a
            :class:`FrameTooLarge` before anything is read, so a worker cannot make the parent
            allocate more than this.
        bounds: what decoding one frame may cost (:mod:`.bounded_json`); by default its byte cap is
            ``max_frame_bytes`` with the default depth bound and decoded-size bound.
    """

    def __init__(
        self, write_fd: int, read_fd: int, max_frame_bytes: int = MAX_FRAME_BYTES, bounds: JsonBounds | None = None
    ) -> None:
        self._max_frame_bytes = min(max_frame_bytes, MAX_FRAME_BYTES)
        self._bounds = bounds or JsonBounds(max_bytes=self._max_frame_bytes)
        self._write_fd = write_fd
        self._read_fd = read_fd
        self._buffer = bytearray()
        self._readable = False  # the last poll found the pipe readable and nothing was read since
        os.set_blocking(write_fd, False)
        os.set_blocking(read_fd, False)
        # poll, not select: select fails for descriptors above FD_SETSIZE (1024) in busy parents.
        self._write_poll = select.poll()
        self._write_poll.register(write_fd, select.POLLOUT)
        self._read_poll = select.poll()
        self._read_poll.register(read_fd, select.POLLIN)

    def send(self, frame: bytes, deadline: float) -> None:
        """Write a whole frame (from :func:`encode_frame`) before ``deadline`` (``time.monotonic``).

        Raises:
            ChannelTimeout: the pipe stayed full until the deadline.
            ChannelClosed: the worker closed its end.
        """
        view = memoryview(frame)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout("timed out sending a request")
            # Write first, wait only when the pipe is full: a request frame almost always fits the pipe at once.
            try:
                written = os.write(self._write_fd, view)
            except BlockingIOError:
                self._write_poll.poll(_poll_ms(remaining))
                continue
            except (BrokenPipeError, ConnectionResetError, OSError) as exc:
                raise ChannelClosed(f"worker pipe closed while sending: {exc}") from None
            view = view[written:]

    def receive(self, deadline: float) -> dict[str, Any]:
        """Read one frame before ``deadline`` (``time.monotonic`` seconds) and decode it within the
        channel's bounds (:func:`.bounded_json.loads`), so neither reading nor decoding outlasts it.

        Raises:
            ChannelTimeout: no complete frame before the deadline (or the deadline passed while the
                frame was being checked).
            ChannelClosed: end of stream (the worker exited).
            FrameTooLarge: the declared length is past ``max_frame_bytes`` (nothing was read).
            JsonTooLarge: the frame was read whole but decoding it would pass a bound (its depth or
                decoded size); the channel stays in step, since the whole frame was consumed.
            ProtocolError: malformed frame.
        """
        header = self._read_exact(HEADER.size, deadline)
        (length,) = HEADER.unpack(header)
        if length > self._max_frame_bytes:
            raise FrameTooLarge(f"frame of {length} bytes exceeds {self._max_frame_bytes}")
        payload = self._read_exact(length, deadline)
        try:
            message = loads(payload, self._bounds, deadline, what="the worker's reply")
        except JsonDeadlineExceeded as exc:
            raise ChannelTimeout(str(exc)) from None
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(f"frame is not JSON: {exc}") from None
        if not isinstance(message, dict):
            raise ProtocolError("frame is not a JSON object")
        return message

    def wait_readable(self, timeout_s: float) -> bool:
        """Whether the worker has started to answer (bytes buffered or waiting in the pipe) within
        ``timeout_s`` seconds; reads nothing."""
        if self._buffer or self._readable:
            return True
        self._readable = bool(self._read_poll.poll(max(0, int(timeout_s * 1000))))
        return self._readable

    def _read_exact(self, size: int, deadline: float) -> bytes | bytearray:
        while len(self._buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout("timed out waiting for the worker")
            if not self._readable and not self._read_poll.poll(_poll_ms(remaining)):
                continue
            self._readable = False
            try:
                # Bounded reads: os.read(n) allocates n bytes up front, so asking for a whole
                # declared frame at once would multiply the parent's memory by the number of reads.
                chunk = os.read(self._read_fd, min(_MAX_READ, max(_READ_CHUNK, size - len(self._buffer))))
            except BlockingIOError:
                continue
            except OSError as exc:
                raise ChannelClosed(f"worker pipe failed: {exc}") from None
            if not chunk:
                raise ChannelClosed("worker closed its output")
            self._buffer += chunk
        if len(self._buffer) == size:  # the usual case: hand the buffer over instead of copying it
            data, self._buffer = self._buffer, bytearray()
            return data
        with memoryview(self._buffer) as view:
            data = view[:size].tobytes()
        del self._buffer[:size]
        return data
