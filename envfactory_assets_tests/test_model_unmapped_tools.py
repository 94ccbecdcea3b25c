"""The model writes the tools of operations the rules do not map, against the scripted OpenAI-compatible server:
one passes at once, one fails the gate and is revised, one never passes and is reported; malformed replies are
refused with a message saying what is wrong."""

from __future__ import annotations

import copy
import json
import threading
import time

import dagster as dg
import orjson
import pytest

from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS
from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.envgen.builder import BuildError, build_environment
from envfactory_assets.envgen.estimate import estimate_environments, format_estimate
from envfactory_assets.envgen.model_tools import (
    MODEL_TOOLS_HEADER,
    judge_tool,
    read_reply,
    summarize_outcomes,
    tool_writer_messages,
    write_tool,
    write_unmapped_tools,
)
from envfactory_assets.envgen.stage import environment_row, operations_to_write, verification_row
from envfactory_assets.llm import OpenAICompatibleBackend, estimate_prompt_tokens
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.reporting.report import model_tool_outcomes, model_tool_section, run_report
from envfactory_assets.runner.materialize import materialize_pipeline
from envfactory_assets.sources.mcp_resources import unmapped_tool_operations
from envfactory_assets.sources.mcp_tools import MCP_KIND, TOOL_LIST_FORMAT, load_tool_list
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets.sources.unmapped import unmapped_operations
from envfactory_assets.store.db import Store
from envfactory_assets_tests.fixture_environments import FIXTURES

BOOKSHOP = FIXTURES / "bookshop.json"
#: Operations the rules leave unmapped, added to the bookshop document.
EXTRA_PATHS = {
    "/inventory/in-stock-count": {
        "get": {
            "operationId": "inventory.inStockCount",
            "summary": "Count the books that are in stock",
            "parameters": [
                {"name": "genre", "in": "query", "schema": {"$ref": "#/components/schemas/Book/properties/genre"}}
            ],
            "responses": {
                "200": {
                    "description": "ok",
                    "content": {
                        "application/json": {"schema": {"type": "object", "properties": {"count": {"type": "integer"}}}}
                    },
                }
            },
        }
    },
    "/books/{bookId}/restock": {
        "post": {
            "operationId": "books.restock",
            "summary": "Put a book back in stock; a book already in stock cannot be restocked",
            "parameters": [{"name": "bookId", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "ok"}},
        }
    },
    "/books/{bookId}/cover": {
        "put": {
            "operationId": "books.uploadCover",
            "summary": "Upload the cover image of a book",
            "responses": {"204": {"description": "stored"}},
        }
    },
}

COUNT_SPEC = {
    "name": "count_books_in_stock",
    "description": "Count the books that are in stock, optionally of one genre.",
    "kind": "count",
    "table": "books",
    "input_schema": {
        "type": "object",
        "properties": {
            "in_stock": {"type": "boolean", "description": "Whether the book is in stock."},
            "genre": {"type": "string", "enum": ["fiction", "poetry", "history", "science"]},
        },
        "required": [],
        "additionalProperties": False,
    },
    "output_schema": {
        "type": "object",
        "properties": {"count": {"type": "integer", "minimum": 0}},
        "required": ["count"],
        "additionalProperties": False,
    },
}
COUNT_CODE = """\
def count_books_in_stock(state, in_stock=None, genre=None):
    return {"count": len(_filtered(state, 'books', {'in_stock': in_stock, 'genre': genre}))}
"""
RESTOCK_SPEC = {
    "name": "restock_book",
    "description": "Put a book back in stock; refused when it is in stock already.",
    "kind": "action",
    "table": "books",
    "input_schema": {
        "type": "object",
        "properties": {"book_id": {"type": "string", "description": "Identifier of the book."}},
        "required": ["book_id"],
        "additionalProperties": False,
    },
    "output_schema": {"type": "object"},
    "action": {"verb": "restock", "field": "in_stock", "value": True, "blocked": [], "stamp": None},
}
#: Restocks a book in stock again: the gate's precondition check refuses it.
RESTOCK_NO_PRECONDITION = """\
def restock_book(state, book_id):
    row = _row(state, 'books', book_id)
    new = {**row, 'in_stock': True}
    state['tables']['books'][book_id] = new
    return dict(new)
"""
RESTOCK_CODE = """\
def restock_book(state, book_id):
    row = _row(state, 'books', book_id)
    if row.get('in_stock') is True:
        raise PreconditionFailed(f"book {book_id!r} is already in stock")
    new = {**row, 'in_stock': True}
    state['tables']['books'][book_id] = new
    return dict(new)
"""


def reply(spec: dict | str, code: str) -> str:
    body = spec if isinstance(spec, str) else json.dumps(spec, indent=1)
    return f"Here is the tool.\n\n```json\n{body}\n```\n\n```python\n{code}```\n"


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """``(resource row, environment)`` of the bookshop document with the three unmapped operations added."""
    root = tmp_path_factory.mktemp("unmapped")
    spec = orjson.loads(BOOKSHOP.read_bytes())
    spec["paths"].update(EXTRA_PATHS)
    path = root / "bookshop_plus.json"
    path.write_bytes(orjson.dumps(spec))
    resource = {**inspect_file(path, root).as_row(), "corpus_root": str(root), "id": "src_bookshop_plus"}

    return resource, build_environment(resource, spec), spec


def backend(server: FakeChatServer, **kw) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(server.base_url, "fake-coder", backoff_s=0.01, timeout_s=20, **kw)


def test_unmapped_operations_carry_what_the_document_says(shop):
    _, _, spec = shop
    ops = {(o["method"], o["path"]): o for o in unmapped_operations(spec, 4)}
    assert set(ops) == {
        ("GET", "/inventory/in-stock-count"),
        ("POST", "/books/{bookId}/restock"),
        ("PUT", "/books/{bookId}/cover"),
    }
    count = ops[("GET", "/inventory/in-stock-count")]
    assert count["reason"] == "no_stateful_collection" and count["operation_id"] == "inventory.inStockCount"
    assert count["parameters"][0]["schema"]["enum"] == ["fiction", "poetry", "history", "science"]  # $ref inlined
    assert count["response_schema"]["properties"]["count"] == {"type": "integer"}
    assert ops[("POST", "/books/{bookId}/restock")]["reason"] == "action_without_state"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no fences at all", "no ```json block"),
        (reply("{not json", COUNT_CODE), "not valid JSON"),
        (reply({**COUNT_SPEC, "kind": "report"}, COUNT_CODE), "kind 'report' must be one of"),
        (reply({**COUNT_SPEC, "table": "shelves"}, COUNT_CODE), "table 'shelves' must be one of"),
        (reply({**COUNT_SPEC, "name": "get_book"}, COUNT_CODE), "already a tool of the environment"),
        (reply({**COUNT_SPEC, "name": "load"}, COUNT_CODE), "is reserved"),
        (reply({**COUNT_SPEC, "description": "Count"}, COUNT_CODE), "description must be a sentence"),
        (reply({**COUNT_SPEC, "extra": 1}, COUNT_CODE), "unknown key 'extra'"),
        (
            reply(
                {
                    **COUNT_SPEC,
                    "input_schema": {
                        "type": "object",
                        "properties": {"shelf": {"type": "string"}},
                        "additionalProperties": False,
                    },
                },
                COUNT_CODE,
            ),
            "'shelf' is not a field of the table",
        ),
        (
            reply(
                {
                    **COUNT_SPEC,
                    "input_schema": {**COUNT_SPEC["input_schema"], "properties": {"in_stock": {"type": "string"}}},
                },
                COUNT_CODE,
            ),
            "must have its field's type 'boolean'",
        ),
        (reply({**COUNT_SPEC, "output_schema": {"type": 12}}, COUNT_CODE), "output_schema is not a valid JSON Schema"),
        (
            reply({**COUNT_SPEC, "output_schema": {"$ref": "http://example.invalid/s.json"}}, COUNT_CODE),
            "output_schema must be self-contained",
        ),
        (
            reply({**RESTOCK_SPEC, "action": {**RESTOCK_SPEC["action"], "field": "shelf"}}, RESTOCK_CODE),
            "action.field 'shelf'",
        ),
        (
            reply({**RESTOCK_SPEC, "action": {**RESTOCK_SPEC["action"], "stamp": ["published"]}}, RESTOCK_CODE),
            "action.stamp ['published'] must be null or another date-time field",
        ),
        (
            reply({**RESTOCK_SPEC, "action": {**RESTOCK_SPEC["action"], "value": "yes"}}, RESTOCK_CODE),
            "action value 'yes' is not a value",
        ),
        ("```json\n" + json.dumps(COUNT_SPEC) + "\n```", "no ```python block"),
        (reply(COUNT_SPEC, "from json import dumps\n" + COUNT_CODE), "`from ... import` may rebind"),
        (
            reply(COUNT_SPEC, COUNT_CODE + "\ndef load(data):\n    return data\n"),
            "'load' must be named _count_books_in_stock_",
        ),
        (reply(COUNT_SPEC, COUNT_CODE + "\nTABLES = {}\n"), "may only bind plain names _count_books_in_stock_"),
        (
            reply(COUNT_SPEC, COUNT_CODE + "\n_count_books_in_stock_x = TABLES.pop('authors')\n"),
            "may not call anything (it would run on import)",
        ),
        (
            reply(COUNT_SPEC, COUNT_CODE.replace("genre=None", "genre=TABLES.clear()")),
            "default values and annotations of 'count_books_in_stock' may not call anything",
        ),
        (reply(COUNT_SPEC, "class _count_books_in_stock_K:\n    pass\n" + COUNT_CODE), "no classes"),
        (
            reply(COUNT_SPEC, "def other(state):\n    return {}\n"),
            "must define the function 'count_books_in_stock' exactly once",
        ),
    ],
)
def test_malformed_replies_are_refused_with_what_is_wrong(shop, text, expected):
    _, env, spec = shop
    op = unmapped_operations(spec, 4)[0]
    draft = read_reply(env, op, text)
    problems = [*draft.spec_problems, *draft.code_problems]
    assert any(expected in p for p in problems), problems
    report = judge_tool(env, draft, None, 7)  # refused before anything runs
    assert report.status == "failed" and {c.check for c in report.checks} <= {"tool_spec", "tool_code"}


def test_a_well_formed_reply_reads_into_a_model_tool_spec(shop):
    _, env, spec = shop
    op = next(o for o in unmapped_operations(spec, 4) if o["path"].endswith("restock"))
    draft = read_reply(env, op, reply(RESTOCK_SPEC, RESTOCK_CODE))
    assert draft.spec_problems == draft.code_problems == ()
    assert draft.spec["read_only"] is False and draft.spec["written_by"] == "model"
    assert draft.spec["operation"] == {
        "method": "POST",
        "path": "/books/{bookId}/restock",
        "operation_id": "books.restock",
    }
    assert draft.spec["action"]["thing"] == "book" and draft.spec["action"]["state"] == "in stock"
    assert draft.code == RESTOCK_CODE


def _responder(env: dict):
    """Answers by the operation asked for (requests arrive concurrently) and notes how many were in flight at
    once: the module for the code writer; count: right at once; restock: a draft without its precondition, then
    the right one; cover: never right (unreadable JSON, then code the static check rejects)."""
    in_flight, peak, lock = [0], [0], threading.Lock()

    def respond(body: dict) -> str:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        try:
            time.sleep(0.2)  # a model's latency: lets concurrent requests overlap
            system, user = body["messages"][0]["content"], body["messages"][1]["content"]
            if system.startswith("You write the Python module"):
                return "```python\n" + env["source"] + "```"
            revision = "Your previous reply failed verification" in user
            if '"path": "/inventory/in-stock-count"' in user:
                return reply(COUNT_SPEC, COUNT_CODE)
            if '"path": "/books/{bookId}/restock"' in user:
                return reply(RESTOCK_SPEC, RESTOCK_CODE if revision else RESTOCK_NO_PRECONDITION)
            cover = {**COUNT_SPEC, "name": "upload_book_cover", "description": "Store the cover image of a book."}
            if revision:
                return reply(cover, "import os\n" + COUNT_CODE.replace("count_books_in_stock", "upload_book_cover"))
            return reply("{'name': 'upload_book_cover'", "pass\n")
        finally:
            with lock:
                in_flight[0] -= 1

    return respond, peak


@pytest.fixture(scope="module")
def written(shop):
    """``(environments row, most requests in flight at once)`` of the document built with the scripted model."""
    resource, env, _ = shop
    respond, peak = _responder(env)
    with FakeChatServer(responder=respond) as server:
        row = environment_row(resource, backend(server, max_concurrency=4), max_revisions=2, tool_threads=4)
    return row, peak[0]


def test_the_model_writes_the_unmapped_tools_under_the_gate(shop, written):
    _, env, spec = shop
    row, peak = written
    assert peak >= 2  # the operations' requests were in flight together
    assert row["status"] == "built", row["reasons"]
    outcomes = {o["path"]: o for o in row["revisions"]["unmapped_operations"]}
    assert [o["path"] for o in row["revisions"]["unmapped_operations"]] == [
        o["path"] for o in unmapped_operations(spec, 4)
    ]
    # passes at once
    count = outcomes["/inventory/in-stock-count"]
    assert count["status"] == "passed" and len(count["attempts"]) == 1 and count["reasons"] == []
    # fails the gate's precondition check, is revised, passes
    restock = outcomes["/books/{bookId}/restock"]
    assert restock["status"] == "passed" and [a["revision"] for a in restock["attempts"]] == [0, 1]
    first = restock["attempts"][0]
    assert any(c["check"] == "precondition" and not c["passed"] for c in first["report"])
    assert "+    if row.get('in_stock') is True:" in restock["attempts"][1]["diff"]
    # never passes: reported with its reasons, not added
    cover = outcomes["/books/{bookId}/cover"]
    assert cover["status"] == "failed" and cover["stop_reason"] == "no improvement"
    assert [c["check"] for c in cover["attempts"][0]["report"]] == ["tool_spec"]
    assert "not valid JSON" in cover["attempts"][0]["report"][0]["detail"]
    assert [c["check"] for c in cover["attempts"][1]["report"]] == ["static_check"]
    assert cover["reasons"][0].startswith("no improvement after 2 attempt(s)")
    # the passing tools are in the environment, the failed one is not
    names = [t["name"] for t in row["tools"]]
    assert names[-2:] == ["count_books_in_stock", "restock_book"] and "upload_book_cover" not in names
    assert row["n_tools"] == len(env["tools"]) + 2
    assert MODEL_TOOLS_HEADER in row["source"] and row["source"].endswith(RESTOCK_CODE)
    assert all(t.get("written_by") == "model" for t in row["tools"][-2:])
    # the whole environment, rules' tools and model tools together, passes verification
    verified = verification_row(row)
    assert verified["status"] == "passed", verified["reasons"]
    assert {"count_books_in_stock", "restock_book"} <= {c["tool"] for c in verified["checks"]}


def test_a_reviser_that_repeats_the_broken_tool_is_reported(shop):
    _, env, spec = shop
    op = next(o for o in unmapped_operations(spec, 4) if o["path"].endswith("restock"))
    broken = reply(RESTOCK_SPEC, RESTOCK_NO_PRECONDITION)
    with FakeChatServer([broken, broken, broken]) as server:
        outcome = write_tool(env, op, backend(server), max_revisions=2)
        assert len(server.requests) == 2
        revise_prompt = server.requests[1]["messages"][1]["content"]
    assert '"check": "precondition"' in revise_prompt and RESTOCK_NO_PRECONDITION in revise_prompt
    assert json.dumps(RESTOCK_SPEC, indent=1) in revise_prompt  # the spec as the model wrote it, not as read
    assert outcome["status"] == "failed" and outcome["stop_reason"] == "no improvement"
    assert any("precondition" in r for r in outcome["reasons"]) and outcome["tool"]["name"] == "restock_book"


def test_two_operations_naming_the_same_tool_keep_the_first(shop):
    _, env, spec = shop
    ops = [o for o in unmapped_operations(spec, 4) if not o["path"].endswith("restock")]
    before = copy.deepcopy(env)
    with FakeChatServer([reply(COUNT_SPEC, COUNT_CODE), reply(COUNT_SPEC, COUNT_CODE)]) as server:
        out_env, outcomes = write_unmapped_tools(env, ops, backend(server), max_revisions=0)
    assert [o["status"] for o in outcomes] == ["passed", "failed"]
    assert outcomes[1]["stop_reason"] == "name taken" and "GET /inventory/in-stock-count" in outcomes[1]["reasons"][0]
    assert [t["name"] for t in out_env["tools"]].count("count_books_in_stock") == 1
    assert env == before and len(out_env["tools"]) == len(env["tools"]) + 1


def test_the_estimate_counts_one_tool_writer_request_per_unmapped_operation(shop):
    resource, env, spec = shop
    ops = unmapped_operations(spec, 4)
    with FakeChatServer([]) as server:
        est = estimate_environments([resource], backend(server), max_revisions=2)
        assert server.requests == []
    assert est["unmapped_operations"] == len(ops) == 3
    assert est["tool_drafts"]["calls"] == 3 and est["tool_revisions_worst_case"]["calls"] == 6
    assert est["tool_drafts"]["prompt_tokens_est"] == sum(
        estimate_prompt_tokens(tool_writer_messages(env, op)) for op in ops
    )
    assert est["total_worst_case"]["calls"] == 3 * (1 + 3)
    assert "tools of 3 operations the rules do not map: 3 calls" in format_estimate(est, "openai")


def test_the_outcomes_reach_the_stage_metadata_and_the_report(written, tmp_path):
    row, _ = written
    figures = summarize_outcomes([row, {"env_id": "programmatic", "revisions": None}])
    assert {k: figures[k] for k in ("operations", "passed", "failed")} == {"operations": 3, "passed": 2, "failed": 1}
    assert figures["failed_by_stop_reason"] == {"no improvement": 1} and figures["attempts"] == 5
    assert figures["failed_examples"][0].startswith("bookshop_example PUT /books/{bookId}/cover: no improvement")
    store = Store(tmp_path / "envfactory.duckdb")
    helpdesk = {
        **inspect_file(FIXTURES / "helpdesk.json", FIXTURES).as_row(),
        "corpus_root": str(FIXTURES),
        "id": "src_h",
    }
    store.replace_current("environments", [row, environment_row(helpdesk)])  # a programmatic row has no revisions
    with store.connect(read_only=True) as con:
        outcomes = model_tool_outcomes(con)
    assert outcomes == [("passed", "passed", 2), ("failed", "no improvement", 1)]
    section = "\n".join(model_tool_section(outcomes))
    assert "| failed | no improvement | 1 |" in section and model_tool_section([]) == []
    assert section in run_report(store)


def test_the_environments_asset_reports_the_model_tools_in_its_metadata(shop, tmp_path):
    resource, env, _ = shop
    respond, _ = _responder(env)
    home = tmp_path / "home"
    with FakeChatServer(responder=respond) as server, dg.instance_for_test() as instance:
        results = materialize_pipeline(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance,
            raise_on_error=False,
            selection=["source_resources", "environments", "verified_environments"],
            run_config={
                "ops": {
                    "source_resources": {
                        "config": {"corpus_dir": resource["corpus_root"], "include_mcp": False, "per_domain": 2}
                    }
                }
            },
            resources={
                "envfactory": EnvFactoryHome(home=str(home)),
                "model_backend": ModelBackend(
                    backend="openai", base_url=server.base_url, model="scripted", max_revisions=2
                ),
                "verification_gate": VerificationGate(),
            },
        )
    assert results[-1].success
    meta = {k: v.value for k, v in results[-1].asset_materializations_for_node("environments")[0].metadata.items()}
    figures = meta["model_tools"]
    assert {k: figures[k] for k in ("operations", "passed", "failed")} == {"operations": 3, "passed": 2, "failed": 1}
    assert figures["failed_by_stop_reason"] == {"no improvement": 1}
    assert set(meta["model_usage"]["by_role"]) == {"code_writer", "tool_writer", "tool_reviser"}
    verified = Store(home / "envfactory.duckdb").read("verified_environments")
    assert [v["status"] for v in verified] == ["passed"]


def notes_tool_list() -> dict:
    """A small MCP tool list: notes that can be added, listed and removed, and a tool no CRUD kind maps."""
    note = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "body": {"type": "string"}, "pinned": {"type": "boolean"}},
        "required": ["title", "body"],
    }
    return {
        "format": TOOL_LIST_FORMAT,
        "server": {"name": "notes-server", "version": "1.0.0"},
        "package": {"ecosystem": "user", "name": "notes-server", "version": "1.0.0", "license": "MIT"},
        "tools": [
            {
                "name": "add_notes",
                "description": "Add notes to the notebook",
                "input_schema": {"type": "object", "properties": {"notes": {"type": "array", "items": note}}},
            },
            {
                "name": "list_notes",
                "description": "List the notes of the notebook",
                "input_schema": {"type": "object", "properties": {"limit": {"type": "integer"}}},
            },
            {
                "name": "summarize",
                "description": "Summarize the pinned notes of the notebook",
                "input_schema": {
                    "type": "object",
                    "properties": {"pinned": {"type": "boolean", "description": "Only pinned notes."}},
                    "required": ["pinned"],
                },
            },
        ],
    }


def test_an_mcp_tool_lists_unmapped_tools_go_to_the_model_too(tmp_path):
    path = tmp_path / "notes.json"
    path.write_bytes(orjson.dumps(notes_tool_list()))
    document, digest = load_tool_list(path)
    resource = {"kind": MCP_KIND, "sha256": digest, "corpus_root": str(tmp_path), "path": "notes.json"}
    (summarize,) = operations_to_write(resource, path)
    assert summarize == unmapped_tool_operations(document)[0]
    assert {k: summarize[k] for k in ("method", "path", "operation_id", "reason")} == {
        "method": "MCP",
        "path": "summarize",
        "operation_id": "summarize",
        "reason": "no_crud_mapping",
    }
    assert summarize["summary"] == "Summarize the pinned notes of the notebook"
    assert summarize["parameters"] == [
        {
            "name": "pinned",
            "in": "arguments",
            "required": True,
            "description": "Only pinned notes.",
            "schema": {"type": "boolean", "description": "Only pinned notes."},
        }
    ]
    path.write_bytes(path.read_bytes().replace(b"Summarize", b"Sum up"))
    with pytest.raises(BuildError, match="changed since it was scanned"):
        operations_to_write(resource, path)
