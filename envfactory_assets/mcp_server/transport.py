"""The stdio transport of ``serve-env``: newline-delimited JSON-RPC on stdin/stdout, answering what the SDK's
own stdio transport drops.

The ``mcp`` SDK's ``stdio_server`` hands a line it cannot parse to the server as an exception, which the
server only logs: a client that sent malformed JSON, or JSON that is not a JSON-RPC 2.0 message, never gets
a reply and waits forever. Here such a line is answered as JSON-RPC 2.0 asks: ``-32700`` (parse error) for
text that is not JSON, ``-32600`` (invalid request) for JSON that is not a message, with the request's id
when one can be read from it and ``null`` otherwise. A line longer than ``max_message_bytes`` is read no
further (never held in memory whole) and answered with ``-32600``, id ``null``. A line within that length
is first checked by :mod:`envfactory_assets.runtime.bounded_json` (nesting depth, estimated size of its
decoded objects) and, past a bound, answered with ``-32600`` without being parsed, so neither a deep nor an
amplifying message can exhaust the stack or the memory; any other failure while handling one line is
answered with ``-32603`` (internal error) and the server reads on. Every server the project adds must read
its input through this same module.

As in the SDK, while serving, file descriptor 0 reads the null device and 1 writes to stderr, so a child
process or a stray ``print`` cannot read from or write into the protocol stream.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from envfactory_assets.runtime.bounded_json import DEFAULT_MAX_DECODED_BYTES, JsonBounds, JsonTooLarge, measure

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
#: Longest stdin line read (one JSON-RPC message); far above any tool call's arguments cap.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
#: Longest piece of client text (an error detail) echoed back in a reply.
ECHO_CHARS = 300
_CHUNK = 1 << 18


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was, so no reply echoes a huge input back."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters in all)"


def _error(request_id: Any, code: int, message: str) -> SessionMessage:
    return SessionMessage(
        types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=clip(message)))
    )


def _request_id(value: Any) -> Any:
    """The id of a JSON object that failed validation, if it is a usable JSON-RPC id, else None."""
    if isinstance(value, dict):
        request_id = value.get("id")
        if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
            return request_id
    return None


def parse_line(line: bytes) -> SessionMessage | tuple[SessionMessage]:
    """A message from one stdin line, or a 1-tuple holding the error reply to send back instead."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception:  # noqa: BLE001 - the reply below says what is wrong
        message = None
    # A request whose id is not a string or integer (true, 1.5, null: MCP forbids null ids) validates as a
    # notification with an extra field, and would go unanswered; notifications are small, so look again.
    if message is not None and not (isinstance(message, types.JSONRPCNotification) and b'"id"' in line):
        return SessionMessage(message)
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return (_error(None, PARSE_ERROR, f"Parse error: the message is not valid JSON ({exc})"),)
    if message is not None and not (isinstance(value, dict) and "id" in value):
        return SessionMessage(message)  # '"id"' appeared only inside the params
    if isinstance(value, list):
        return (
            _error(
                None,
                INVALID_REQUEST,
                "Invalid Request: batches (JSON arrays) are not supported; send one JSON-RPC 2.0 message per line",
            ),
        )
    if not isinstance(value, dict):
        return (
            _error(
                None,
                INVALID_REQUEST,
                f"Invalid Request: expected a JSON-RPC 2.0 message object, got a JSON {type(value).__name__}",
            ),
        )
    problem = []
    if value.get("jsonrpc") != "2.0":
        problem.append('"jsonrpc" must be "2.0"')
    if "method" in value and not isinstance(value["method"], str):
        problem.append('"method" must be a string')
    if "method" not in value and "result" not in value and "error" not in value:
        problem.append('a request needs "method"')
    if "id" in value and _request_id(value) is None:
        problem.append('"id" must be a string or an integer')
    detail = "; ".join(problem) or "its fields do not form a request, notification or response"
    # a malformed response keeps its id out of the reply: that id names one of the server's own requests
    is_response = "method" not in value and ("result" in value or "error" in value)
    return (_error(None if is_response else _request_id(value), INVALID_REQUEST, f"Invalid Request: {detail}"),)


def _claim_stdio() -> tuple[int, int]:
    """Private duplicates of fds 0 and 1 for the protocol; fd 0 then reads /dev/null and fd 1 goes to stderr."""
    wire_in, wire_out = os.dup(0), os.dup(1)  # not inherited by children (Python's default)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    os.dup2(2, 1)
    return wire_in, wire_out


def _release_stdio(wire_in: int, wire_out: int) -> None:
    for fd, target in ((wire_in, 0), (wire_out, 1)):
        try:
            os.dup2(fd, target)
        except OSError:
            pass
    # wire_in is not closed: a reader thread abandoned at cancellation may still block on it


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def message_bounds(max_message_bytes: int) -> JsonBounds:
    """The :class:`JsonBounds` of one stdin line: its bytes, the default depth, and a decoded size of at
    least the default (64 MiB) and at least the line cap (a long string argument decodes to its length)."""
    return JsonBounds(max_bytes=max_message_bytes, max_decoded_bytes=max(DEFAULT_MAX_DECODED_BYTES, max_message_bytes))


def parse_bounded_line(line: bytes, bounds: JsonBounds) -> SessionMessage | tuple[SessionMessage]:
    """:func:`parse_line` once ``line`` is within ``bounds``; a line past them, or one whose handling fails
    in any other way, gets its error reply (a 1-tuple) instead of an exception."""
    try:
        measure(line, bounds)
    except JsonTooLarge as exc:
        return (_error(None, INVALID_REQUEST, f"Invalid Request: {exc}; it was not parsed"),)
    try:
        return parse_line(line)
    except Exception as exc:  # noqa: BLE001 - one bad line must not end the server
        return (_error(None, INTERNAL_ERROR, f"Internal error while reading the message: {type(exc).__name__}"),)


async def _read_lines(
    fd: int,
    max_bytes: int,
    replies: MemoryObjectSendStream[SessionMessage],
    messages: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    """Feed every line of ``fd`` to ``messages`` (parsed) or answer it on ``replies``, until end of input."""
    async with messages, replies:
        try:
            await _feed(fd, max_bytes, replies, messages)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the server stopped listening: nothing left to deliver


async def _feed(
    fd: int,
    max_bytes: int,
    replies: MemoryObjectSendStream[SessionMessage],
    messages: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    too_long = _error(
        None,
        INVALID_REQUEST,
        f"Invalid Request: the message is longer than this server's limit of {max_bytes} bytes; it was not read",
    )
    bounds = message_bounds(max_bytes)
    buffer = bytearray()
    skipping = False  # inside a line longer than max_bytes: drop the rest of it
    while True:
        chunk = await anyio.to_thread.run_sync(os.read, fd, _CHUNK, abandon_on_cancel=True)
        if not chunk:
            break
        start = 0
        while True:
            end = chunk.find(b"\n", start)  # only the new bytes are searched: linear in the line's length
            if end < 0:
                if not skipping:
                    buffer += chunk[start:]
                    if len(buffer) > max_bytes:
                        skipping = True
                        buffer.clear()
                        await replies.send(too_long)
                break
            if skipping:
                skipping = False
            else:
                buffer += chunk[start:end]
                line = bytes(buffer)
                buffer.clear()
                await (replies.send(too_long) if len(line) > max_bytes else _deliver(line, bounds, replies, messages))
            start = end + 1
    if buffer and not skipping:  # a last message without its newline
        await _deliver(bytes(buffer), bounds, replies, messages)


async def _deliver(
    line: bytes,
    bounds: JsonBounds,
    replies: MemoryObjectSendStream[SessionMessage],
    messages: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    if not line.strip():
        return
    # off the event loop: checking and parsing a long line takes a moment, and replies keep flowing meanwhile
    parsed = await anyio.to_thread.run_sync(parse_bounded_line, line, bounds)
    if isinstance(parsed, tuple):
        await replies.send(parsed[0])
    else:
        await messages.send(parsed)


async def _write_messages(fd: int, outgoing: MemoryObjectReceiveStream[SessionMessage]) -> None:
    async with outgoing:
        async for message in outgoing:
            text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            await anyio.to_thread.run_sync(_write_all, fd, text.encode() + b"\n")


@asynccontextmanager
async def stdio_transport(max_message_bytes: int = MAX_MESSAGE_BYTES) -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` for ``Server.run`` over this process's stdin and stdout.

    Every stdin line that is not a JSON-RPC message gets its error reply here; the rest reach the read
    stream. On exit, reading stops and whatever was sent before is still written out.
    """
    wire_in, wire_out = _claim_stdio()
    incoming_send, incoming_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing_send, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](16)
    replies = outgoing_send.clone()
    reading = anyio.CancelScope()

    async def read() -> None:
        with reading:
            await _read_lines(wire_in, max_message_bytes, replies, incoming_send)

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_write_messages, wire_out, outgoing_receive)
            tasks.start_soon(read)
            try:
                yield incoming_receive, outgoing_send
            finally:
                # the server is done: stop reading (the reader may wait on a client that keeps stdin open),
                # and let the writer finish what is queued once every sender has closed
                reading.cancel()
                outgoing_send.close()
                incoming_receive.close()
    finally:
        _release_stdio(wire_in, wire_out)
