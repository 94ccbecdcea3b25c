"""Bad inputs to the source scan, the OpenAI-compatible backend and the tool-call parser.

Each test feeds the real input (a file with an undecodable name, a symbolic link, a broken reply from a
local HTTP server, a megabyte of model output) to the real code and checks what comes out.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envfactory_assets.llm import (
    LLMError,
    MalformedReply,
    OpenAICompatibleBackend,
    request_key,
)
from envfactory_assets.sources.resource_kinds import user_folder_rows
from envfactory_assets.sources.scan import Rejection, scan_corpus
from envfactory_assets.sources.stage import all_resource_rows
from envfactory_assets.store.db import Store
from envfactory_assets.tooluse.tool_calls import MAX_TOOL_CALL_BLOCKS, parse_tool_calls
from envfactory_assets_tests.fixture_environments import FIXTURES

MARKER = "SECRET-MARKER-7f3a"
SECRET_TEXT = f"root:x:0:0:{MARKER}:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"


def _rejections(rows: list[dict]) -> dict[str, tuple[str, str]]:
    return {r["path"]: (r["reason"], r["detail"]) for r in rows}


# --- source folders: names that are not UTF-8 ----------------------------------------------------------


def test_file_name_that_is_not_utf8_is_one_rejection_and_the_rest_is_stored(tmp_path: Path) -> None:
    # one such name used to fail the whole source_resources step (UnicodeEncodeError writing the rows)
    home = tmp_path / "home"
    user = home / "user_resources"
    user.mkdir(parents=True)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (user / "helpdesk.json").write_bytes((FIXTURES / "helpdesk.json").read_bytes())
    try:
        with open(os.fsencode(user) + b"/bad\xff.json", "wb") as handle:
            handle.write((FIXTURES / "bookshop.json").read_bytes())
    except OSError:
        pytest.skip("this filesystem refuses file names that are not UTF-8")

    accepted, rejected = all_resource_rows(corpus, home, include_mcp=False)
    assert [r["path"] for r in accepted] == ["helpdesk.json"]
    assert [(r["path"], r["reason"]) for r in rejected] == [("bad\\xff.json", "undecodable_name")]
    assert "bad\\xff.json" in rejected[0]["detail"] and "not valid UTF-8" in rejected[0]["detail"]

    store = Store(home / "envfactory.duckdb", retry_seconds=1.0)
    store.replace_current("source_resources", accepted)
    store.replace_current("rejected_resources", rejected)
    assert [r["path"] for r in store.read("source_resources")] == ["helpdesk.json"]
    assert [r["path"] for r in store.read("rejected_resources")] == ["bad\\xff.json"]


# --- source folders: symbolic links and file content in details ---------------------------------------


def test_a_fifo_in_the_user_folder_gets_a_rejected_row_and_is_never_opened(tmp_path: Path) -> None:
    folder = tmp_path / "user_resources"
    folder.mkdir()
    os.mkfifo(folder / "x.json")  # opening it for reading would block the scan forever
    (folder / "helpdesk.json").write_bytes((FIXTURES / "helpdesk.json").read_bytes())
    (folder / "pipe.yaml").symlink_to("x.json")  # a link to it, inside the folder
    accepted, rejected = user_folder_rows(folder)
    assert [r["path"] for r in accepted] == ["helpdesk.json"]
    reasons = _rejections(rejected)
    assert {p: r for p, (r, _) in reasons.items()} == {
        "x.json": "not_a_regular_file",
        "pipe.yaml": "not_a_regular_file",
    }
    assert "FIFO" in reasons["x.json"][1] and "not read" in reasons["x.json"][1]


def test_links_out_of_the_user_folder_are_refused_unread(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text(SECRET_TEXT)
    (outside / "shop.json").write_bytes((FIXTURES / "bookshop.json").read_bytes())
    folder = tmp_path / "user_resources"
    (folder / "real").mkdir(parents=True)
    (folder / "real" / "helpdesk.txt").write_bytes((FIXTURES / "helpdesk.json").read_bytes())
    (folder / "passwd.yaml").symlink_to(outside / "passwd")
    (folder / "passwd.json").symlink_to(outside / "passwd")
    (folder / "shop.json").symlink_to(Path("..") / "outside" / "shop.json")  # a valid document, still outside
    (folder / "inside.json").symlink_to(Path("real") / "helpdesk.txt")  # stays in the folder: read
    (folder / "gone.json").symlink_to(folder / "nothing.json")

    accepted, rejected = user_folder_rows(folder)
    assert [r["path"] for r in accepted] == ["inside.json"]
    reasons = _rejections(rejected)
    assert {p: r for p, (r, _) in reasons.items()} == {
        "passwd.yaml": "link_outside_folder",
        "passwd.json": "link_outside_folder",
        "shop.json": "link_outside_folder",
        "gone.json": "broken_link",
    }
    assert "passwd.yaml" in reasons["passwd.yaml"][1] and "outside the folder" in reasons["passwd.yaml"][1]
    stored = json.dumps(rejected)
    assert MARKER not in stored and "root:x" not in stored and "daemon" not in stored

    # the corpus scanner refuses the same links (the corpus folder is configurable too)
    by_path = {r.path: r for r in scan_corpus(folder)}
    assert by_path["passwd.yaml"].reason == "link_outside_folder"
    assert MARKER not in json.dumps([r.as_row() for r in by_path.values()])


def test_rejection_details_say_what_is_wrong_without_quoting_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "user_resources"
    folder.mkdir()
    (folder / "text.yaml").write_text(SECRET_TEXT)  # a YAML string, not a map
    (folder / "syntax.yaml").write_text(f"openapi: 3.0.0\ninfo: [{MARKER}\npaths: {{}}\n")
    (folder / "syntax.json").write_text(f'{{"openapi": "3.0.0",\n "info": {MARKER}}}')
    (folder / "info.json").write_text(json.dumps({"openapi": "3.0.0", "info": MARKER, "paths": {"/a": {}}}))
    tool_list = {
        "format": "envfactory.mcp_tool_list/1",
        "server": {"name": "notes"},
        "package": {"name": "notes", "version": "1", "license": "MIT"},
        "tools": [{"name": f"bad name {MARKER}", "input_schema": {"type": "object"}}],
    }
    (folder / "tools.json").write_text(json.dumps(tool_list))
    (folder / "repeat.yaml").write_text(f"openapi: 3.0.0\n{MARKER}: 1\n{MARKER}: 2\n")

    accepted, rejected = user_folder_rows(folder)
    assert accepted == []
    reasons = _rejections(rejected)
    assert MARKER not in json.dumps(rejected) and "root:x" not in json.dumps(rejected)
    assert reasons["text.yaml"][0] == "invalid_user_resource"
    assert "should be of type 'object' (found string)" in reasons["text.yaml"][1]
    assert reasons["syntax.yaml"][0] == "unparseable" and "not valid YAML at line 3" in reasons["syntax.yaml"][1]
    assert reasons["syntax.json"][0] == "unparseable" and "not valid JSON at line 2" in reasons["syntax.json"][1]
    assert "at info: should be of type 'object'" in reasons["info.json"][1]
    assert reasons["tools.json"][0] == "invalid_tool_list"
    assert "tools/0/name" in reasons["tools.json"][1] and "pattern" in reasons["tools.json"][1]
    assert reasons["repeat.yaml"][0] == "unparseable" and "appears twice" in reasons["repeat.yaml"][1]
    for path, (_, detail) in reasons.items():
        assert path in detail  # still names the file

    corpus = {r.path: r for r in scan_corpus(folder)}
    assert isinstance(corpus["syntax.yaml"], Rejection) and corpus["syntax.yaml"].reason == "unparseable"
    assert MARKER not in corpus["syntax.yaml"].detail and "line 3" in corpus["syntax.yaml"].detail


# --- the OpenAI-compatible backend against a real local HTTP server -------------------------------------


class _Replies:
    """A local HTTP server answering each ``POST`` with the next scripted ``(status, body)``."""

    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies = list(bodies)
        self.calls = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.calls += 1
                body = owner.bodies.pop(0) if len(owner.bodies) > 1 else owner.bodies[0]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _reply(content: object) -> bytes:
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    ).encode()


@pytest.fixture()
def replies() -> Iterator[list[_Replies]]:
    started: list[_Replies] = []
    yield started
    for server in started:
        server.close()


PROMPT = [{"role": "user", "content": "list the open tickets"}]
PARAMS = {"max_tokens": 16, "temperature": 0.0}


def _stored(cache: Path) -> int:
    """Rows the cache file holds for PROMPT (read with sqlite3, not through the cache class)."""
    with sqlite3.connect(cache) as db:
        return db.execute(
            "SELECT count(*) FROM responses WHERE key = ?", (request_key("test-model", PROMPT, PARAMS),)
        ).fetchone()[0]


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": []}',
        b'{"id": "c1", "object": "chat.completion", "created": 0, "model": "m"}',
        b"<html><body>502 Bad Gateway</body></html>",
        b'{"choices": [{"index": 0}]}',
    ],
)
def test_a_reply_that_is_not_a_completion_is_an_error_naming_the_endpoint_and_is_not_cached(
    tmp_path: Path, replies: list[_Replies], body: bytes
) -> None:
    # used to be cached as an empty completion (no choices) or to surface as a bare JSONDecodeError
    server = _Replies([body])
    replies.append(server)
    cache = tmp_path / "cache.sqlite"
    backend = OpenAICompatibleBackend(
        server.base_url, "test-model", max_retries=1, backoff_s=0.01, timeout_s=10, cache_path=cache
    )
    with pytest.raises(MalformedReply) as info:
        backend.complete(PROMPT, role="code_writer", max_tokens=16)
    message = str(info.value)
    assert isinstance(info.value, LLMError)
    assert server.base_url in message and "test-model" in message and "attempt 2 of 2" in message
    assert server.calls == 2 and _stored(cache) == 0
    assert backend.usage()["calls"] == 0 and backend.tokens_used == 0

    # once the endpoint answers properly, the real reply is returned and cached
    server.bodies = [_reply("ticket 1, ticket 2")]
    assert backend.complete(PROMPT, role="code_writer", max_tokens=16).text == "ticket 1, ticket 2"
    assert _stored(cache) == 1
    assert backend.complete(PROMPT, role="code_writer", max_tokens=16).cached
    backend.close()


def test_an_empty_reply_is_returned_but_never_replayed_from_the_cache(tmp_path: Path, replies: list[_Replies]) -> None:
    server = _Replies([_reply(""), _reply(None), _reply("the real answer")])
    replies.append(server)
    cache = tmp_path / "cache.sqlite"
    backend = OpenAICompatibleBackend(server.base_url, "test-model", max_retries=0, cache_path=cache)
    assert backend.complete(PROMPT, role="x", max_tokens=16).text == ""
    assert _stored(cache) == 0
    assert backend.complete(PROMPT, role="x", max_tokens=16).text == ""
    assert backend.complete(PROMPT, role="x", max_tokens=16).text == "the real answer"
    assert server.calls == 3 and _stored(cache) == 1
    backend.close()

    # an empty reply that an earlier version cached is asked again, not replayed
    with sqlite3.connect(cache) as db:
        db.execute("UPDATE responses SET text = ''")
    server.bodies = [_reply("asked again")]
    backend = OpenAICompatibleBackend(server.base_url, "test-model", max_retries=0, cache_path=cache)
    reply = backend.complete(PROMPT, role="x", max_tokens=16)
    assert (reply.text, reply.cached, server.calls) == ("asked again", False, 4)
    backend.close()


def test_a_content_that_is_not_text_names_endpoint_model_and_attempt(replies: list[_Replies]) -> None:
    server = _Replies([_reply(42)])
    replies.append(server)
    backend = OpenAICompatibleBackend(server.base_url, "test-model", max_retries=0)
    with pytest.raises(MalformedReply, match=r"base_url=.*model='test-model'.*attempt 1 of 1.*not a string"):
        backend.complete(PROMPT, role="x", max_tokens=16)
    backend.close()


# --- the tool-call parser ---------------------------------------------------------------------------------


def test_a_close_tag_inside_a_json_string_does_not_end_the_block() -> None:
    text = '<tool_call>{"name": "post_note", "arguments": {"body": "type </tool_call> to finish"}}</tool_call> done'
    result = parse_tool_calls(text)
    assert result.calls == [{"name": "post_note", "arguments": {"body": "type </tool_call> to finish"}}]
    assert result.format_errors == 0 and result.content == "done"
    opening = parse_tool_calls(
        '<tool_call>{"name": "post_note", "arguments": {"body": "<tool_call>"}}</tool_call>'
        '<tool_call>{"name": "list_notes"}</tool_call>'
    )
    assert [c["name"] for c in opening.calls] == ["post_note", "list_notes"] and opening.format_errors == 0


def _best_time(text: str, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        parse_tool_calls(text)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize(
    "unit",
    [
        "<tool_call></tool_call>",
        "<tool_call>",
        "<tool_call>{",
        '<tool_call>"a\\',
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>',
    ],
)
def test_parse_time_grows_linearly_with_the_output(unit: str) -> None:
    # a megabyte of empty blocks (about 43,000) used to be decoded block by block: 0.1 to 5 s per output.
    # Sizes 16x apart: linear work takes ~16x as long, quadratic ~256x; the bound sits between with room
    # for a loaded machine's noise, and an absolute budget per MB catches a slow constant.
    small = unit * (500_000 // len(unit))
    large = unit * (8_000_000 // len(unit))
    result = parse_tool_calls(large)
    assert result.format_errors + len(result.calls) <= MAX_TOOL_CALL_BLOCKS + 1
    t_small, t_large = _best_time(small), _best_time(large)
    assert t_large < 8 * 0.6, f"8 MB took {t_large:.2f} s (budget 0.6 s per MB)"
    assert t_large <= 64 * max(t_small, 0.002), f"0.5 MB {t_small:.3f} s, 8 MB {t_large:.3f} s"


def test_calls_before_the_block_limit_are_kept() -> None:
    good = "".join(f'<tool_call>{{"name": "step_{i}", "arguments": {{}}}}</tool_call>' for i in range(3))
    result = parse_tool_calls("first " + good + "<tool_call></tool_call>" * 50_000)
    assert [c["name"] for c in result.calls] == ["step_0", "step_1", "step_2"]
    assert result.format_errors == MAX_TOOL_CALL_BLOCKS - 3 + 1
    assert result.content == "first"
