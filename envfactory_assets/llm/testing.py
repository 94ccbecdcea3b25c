"""A scripted OpenAI-compatible HTTP server for tests (stdlib only, one thread, 127.0.0.1, random port).

Usage::

    with FakeChatServer(["first reply", 429, "second reply"]) as server:
        backend = OpenAICompatibleBackend(server.base_url, "fake-model", backoff_s=0.01)
        ...
        server.requests   # the JSON bodies received, in order

Each script item answers one ``POST /v1/chat/completions``: a ``str`` is a 200 reply with that content;
an ``int`` is that HTTP status with an OpenAI-style error body; a ``dict`` may give ``status``,
``content``, ``usage`` (``{"prompt_tokens", "completion_tokens"}``, default chars/4) and ``headers``.
When the script runs out, ``responder(request_body) -> item`` answers (default: HTTP 500).

Requests are served each in its own thread, so concurrent clients are answered at once. For benchmarks,
``delay_s`` holds every reply that long (a model's latency), ``max_requests`` answers HTTP 503 beyond that
many requests, ``lifetime_s`` stops the server by itself after that many seconds, and ``keep_alive`` serves
HTTP/1.1 persistent connections (a client then opens one connection per thread, not one per request).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Item = Any  # str | int | dict


class FakeChatServer:
    """The scripted server; a context manager that starts and stops it.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        requests: JSON bodies of every chat request received (errors included), in order.
    """

    def __init__(
        self,
        script: Iterable[Item] = (),
        responder: Callable[[dict[str, Any]], Item] | None = None,
        *,
        delay_s: float = 0.0,
        max_requests: int | None = None,
        lifetime_s: float | None = None,
        keep_alive: bool = False,
    ) -> None:
        if (
            delay_s < 0
            or (max_requests is not None and max_requests < 0)
            or (lifetime_s is not None and lifetime_s <= 0)
        ):
            raise ValueError(
                f"FakeChatServer: delay_s={delay_s} and max_requests={max_requests} must be >= 0, "
                f"lifetime_s={lifetime_s} positive or None"
            )
        self.delay_s, self.max_requests, self.lifetime_s, self.keep_alive = (
            delay_s,
            max_requests,
            lifetime_s,
            keep_alive,
        )
        self._timer: threading.Timer | None = None
        self.stopped = threading.Event()
        self._script: deque[Item] = deque(script)
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    def push(self, *items: Item) -> None:
        """Append items to the script."""
        with self._lock:
            self._script.extend(items)

    def _next(self, body: dict[str, Any]) -> Item:
        with self._lock:
            self.requests.append(body)
            if self.max_requests is not None and len(self.requests) > self.max_requests:
                return {"status": 503, "message": f"FakeChatServer: more than max_requests={self.max_requests}"}
            if self._script:
                return self._script.popleft()
        return self.responder(body) if self.responder else 500

    def start(self) -> FakeChatServer:
        """Bind 127.0.0.1 on a free port and serve on a daemon thread."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if self.keep_alive else "HTTP/1.0"
            timeout = 60  # an idle persistent connection's thread ends after this many seconds

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                body = json.loads(raw or b"{}")
                started = time.monotonic()
                item = owner._next(body)
                if owner.delay_s:
                    time.sleep(max(0.0, owner.delay_s - (time.monotonic() - started)))
                if isinstance(item, int):
                    item = {"status": item}
                if isinstance(item, str):
                    item = {"content": item}
                status = int(item.get("status", 200))
                if status != 200:
                    self._send(
                        status,
                        {
                            "error": {
                                "message": item.get("message", f"scripted HTTP {status}"),
                                "type": "scripted",
                                "code": status,
                            }
                        },
                        item.get("headers"),
                    )
                    return
                content = item.get("content", "")
                prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
                usage = item.get("usage") or {
                    "prompt_tokens": -(-prompt_chars // 4),
                    "completion_tokens": -(-len(content) // 4),
                }
                usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(owner.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", ""),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                        "usage": usage,
                    },
                    item.get("headers"),
                )

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # many clients connecting at once are queued, not refused
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="fake-chat-server")
        self._thread.start()
        if self.lifetime_s is not None:
            self._timer = threading.Timer(self.lifetime_s, self.stop)
            self._timer.daemon = True
            self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (also called by the ``lifetime_s`` timer)."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        self.stopped.set()

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
