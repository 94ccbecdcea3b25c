"""An ASGI middleware that passes a request body or a WebSocket message on only once the bounded JSON reader
(:mod:`envfactory_assets.runtime.bounded_json`) has found it within its bounds.

The framework behind it (FastAPI, as OpenEnv's ``create_app`` builds it) decodes bodies and messages with the
standard library's ``json``, whose cost a byte cap alone does not bound (``[[],[],...]`` decodes to about 20
times its size; deep nesting raises ``RecursionError``). So before any decoding:

- an HTTP body larger than ``max_bytes`` (by its ``Content-Length``, or as it streams in) is answered
  ``413`` and never read further; one within it whose depth or estimated decoded size passes the bounds is
  answered ``413`` too, undecoded; anything else is handed on unchanged;
- a WebSocket message past a bound is answered with an OpenEnv error frame (``{"type": "error", "data":
  {"message", "code"}}``) on the same connection and dropped; the connection and its episode go on;
- a body or message holding ``NaN``, ``Infinity`` or ``-Infinity`` outside its strings
  (:attr:`~envfactory_assets.runtime.bounded_json.JsonShape.bare_constants`) is not JSON, though the standard
  library's ``json`` decodes it into floats that no handler can answer with (FastAPI then failed with HTTP
  500): it is refused as invalid JSON, HTTP ``400`` or an error frame with OpenEnv's code ``INVALID_JSON``.

One refused request never ends the server or another client's episode. Closing a WebSocket whose client has
already gone is not reported as an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from envfactory_assets.runtime.bounded_json import JsonBounds, JsonTooLarge, measure

_BODY_METHODS = {"POST", "PUT", "PATCH"}


def not_json_error(what: str) -> dict[str, Any]:
    """The ``{"type": "invalid_json", "message"}`` error of a payload (named ``what``) that holds a bare
    ``NaN``, ``Infinity`` or ``-Infinity``."""
    return {
        "type": "invalid_json",
        "message": f"invalid_json: {what} holds NaN, Infinity or -Infinity outside a string, which JSON has no "
        "number for (send a number, null or a string); it was not decoded",
    }


def too_large_error(exc: JsonTooLarge, what: str) -> dict[str, Any]:
    """The ``{"type": "too_large", "message", "limit", "bound"}`` error of a payload refused as ``what``."""
    named = JsonTooLarge(exc.limit, exc.bound, exc.observed, what)
    return {
        "type": "too_large",
        "message": f"too_large: {named}; it was not decoded",
        "limit": exc.limit,
        "bound": exc.bound,
    }


class BoundedJsonMiddleware:
    """Wraps an ASGI app so every request body and WebSocket message is checked first (module docstring).

    Args:
        app: the ASGI app (OpenEnv's FastAPI app).
        bounds: the bounds of one body or message.
        http_error_body: the JSON body of a refused HTTP request, from its :func:`too_large_error` or
            :func:`not_json_error` dict (default ``{"error": <that dict>}``; an MCP server answers with a
            JSON-RPC error instead).
    """

    def __init__(
        self, app: Any, bounds: JsonBounds, http_error_body: Callable[[dict[str, Any]], bytes] | None = None
    ) -> None:
        self.app = app
        self.bounds = bounds
        self.http_error_body = http_error_body or _error_body

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("method") in _BODY_METHODS:
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self.app(scope, self._websocket_receive(receive, send), _closing_tolerant(send))
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        declared = next((v for k, v in scope.get("headers") or [] if k.lower() == b"content-length"), None)
        try:
            size = int(declared) if declared is not None else 0
        except ValueError:
            size = 0
        if size > self.bounds.max_bytes:
            await _refuse_too_large(send, self.http_error_body, JsonTooLarge("max_bytes", self.bounds.max_bytes, size))
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before sending the body: nothing to answer
            body += message.get("body", b"")
            if len(body) > self.bounds.max_bytes:
                too_large = JsonTooLarge("max_bytes", self.bounds.max_bytes, len(body))
                await _refuse_too_large(send, self.http_error_body, too_large)
                return
            if not message.get("more_body"):
                break
        if body:
            try:
                shape = measure(bytes(body), self.bounds)
            except JsonTooLarge as exc:
                await _refuse_too_large(send, self.http_error_body, exc)
                return
            if shape.bare_constants:
                await _refuse(send, 400, self.http_error_body(not_json_error("the request body")))
                return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _websocket_receive(self, receive: Any, send: Any) -> Any:
        async def bounded_receive() -> dict[str, Any]:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                data = message.get("bytes")
                if data is None:
                    data = (message.get("text") or "").encode("utf-8", "surrogatepass")
                try:
                    if len(data) > self.bounds.max_bytes:
                        raise JsonTooLarge("max_bytes", self.bounds.max_bytes, len(data))
                    shape = measure(data, self.bounds)
                except JsonTooLarge as exc:
                    error, code = too_large_error(exc, "the message"), "VALIDATION_ERROR"
                else:
                    if not shape.bare_constants:
                        return message
                    error, code = not_json_error("the message"), "INVALID_JSON"  # OpenEnv's code for bad JSON
                frame = {"type": "error", "data": {"message": error["message"], "code": code, **error}}
                await send({"type": "websocket.send", "text": json.dumps(frame)})

        return bounded_receive


def _closing_tolerant(send: Any) -> Any:
    """``send``, except that closing a WebSocket the client has already closed is not an error (the server
    then has nothing left to tell it; OpenEnv closes every socket at its session's end, and a failure there would
    be logged as an application error for each client that hung up first)."""

    async def send_or_already_closed(message: dict[str, Any]) -> None:
        try:
            await send(message)
        except OSError:  # uvicorn's ClientDisconnected
            if message.get("type") != "websocket.close":
                raise

    return send_or_already_closed


def _error_body(error: dict[str, Any]) -> bytes:
    return json.dumps({"error": error}).encode()


async def _refuse_too_large(send: Any, error_body: Callable[[dict[str, Any]], bytes], exc: JsonTooLarge) -> None:
    await _refuse(send, 413, error_body(too_large_error(exc, "the request body")))


async def _refuse(send: Any, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
