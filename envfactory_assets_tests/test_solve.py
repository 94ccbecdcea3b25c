"""Solvability calibration: the solver loop, the judge, calibrated refinement (fixture environments)."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest

from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.synth.datasets.rows import tools_of
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig, calibrate_trajectory
from envfactory_assets.synth.refinement.operators import refine_turns
from envfactory_assets.synth.refinement.report import refinement_report
from envfactory_assets.synth.refinement.solver.attempts import solve_turn
from envfactory_assets.synth.refinement.solver.base import Attempt, SolverView
from envfactory_assets.synth.refinement.solver.judge import judge_attempt
from envfactory_assets.synth.refinement.solver.model import ModelSolver
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets_tests.fixture_environments import (
    fixture_graph,
    passed_trajectories,
)


@pytest.fixture(scope="module")
def trajectories(environments, worker) -> list[dict]:
    graph = fixture_graph(environments)
    out = [
        {**traj, "id": f"raw-{i}", "domains": ["ecommerce_retail"]}
        for i, traj in passed_trajectories(environments, graph, worker, 30, "solve")
    ]
    assert len(out) >= 10
    return out


def _tools(environments, traj):
    return tools_of(environments, traj["env_ids"])


def test_the_solver_view_holds_only_the_conversation_and_tool_specs(trajectories, environments):
    assert [f.name for f in dataclasses.fields(SolverView)] == ["messages", "tools"]
    traj = trajectories[0]
    turn = traj["turns"][1]
    view = SolverView.for_turn(traj["turns"][:1], turn["query"], _tools(environments, traj))
    text = json.dumps(view.messages)
    assert view.messages[-1] == {"role": "user", "content": turn["query"]}
    # nothing of the turn being solved: no gold result, no state
    assert all(json.dumps(c["output"]) not in text for c in turn["calls"] if c["kind"] == "create")
    assert "state_after" not in text and "tables" not in text


def test_programmatic_solver_solves_raw_queries_and_ignores_gold(trajectories, environments, worker):
    solver = ProgrammaticSolver()
    accuracies = []
    for n, traj in enumerate(trajectories):
        for t, turn in enumerate(traj["turns"]):
            view = SolverView.for_turn(traj["turns"][:t], turn["query"], _tools(environments, traj))
            result = solve_turn(worker, turn["state_before"], view, solver, turn, f"{n}/{t}", k=2)
            accuracies.append(result["accuracy"])
            if n < 3:  # the gold turn reaches only the judge: corrupting it changes verdicts, never the calls
                bad = copy.deepcopy(turn)
                for c in bad["calls"]:
                    c["arguments"] = {k: "corrupted" for k in c["arguments"]}
                bad["target_tools"] = ["nothing"]
                again = solve_turn(worker, turn["state_before"], view, solver, bad, f"{n}/{t}", k=2)
                assert [a["calls"] for a in again["attempts"]] == [a["calls"] for a in result["attempts"]]
    assert sum(1 for a in accuracies if a > 0) / len(accuracies) > 0.9


def test_a_query_without_the_needed_values_is_not_solved(trajectories, environments, worker):
    traj = next(
        t
        for t in trajectories
        if any(
            c["kind"] in ("update", "delete") and any(a.endswith("_id") for a in c["arguments"])
            for c in t["turns"][0]["calls"]
        )
    )
    turn = traj["turns"][0]
    # the hidden identifiers are gone from the query: nothing in the conversation can recover them
    view = SolverView.for_turn([], "Please do what I want.", _tools(environments, traj))
    result = solve_turn(worker, turn["state_before"], view, ProgrammaticSolver(), turn, "blank", k=4)
    assert result["accuracy"] == 0.0 and all(not a["passed"] for a in result["attempts"])


def test_judge_checks_final_state_and_requested_facts(trajectories):
    turn = next(
        t
        for tr in trajectories
        for t in tr["turns"]
        if t["calls"][-1]["kind"] in ("get", "list") and t["calls"][-1]["output"]
    )
    gold_outputs = [
        {"name": c["name"], "arguments": c["arguments"], "ok": True, "output": c["output"]} for c in turn["calls"]
    ]
    assert judge_attempt(Attempt(gold_outputs, "", turn["state_after_hash"]), turn)[0]
    wrong_state = judge_attempt(Attempt(gold_outputs, "", "0" * 64), turn)
    assert not wrong_state[0] and "final state" in wrong_state[1]
    if turn["state_before_hash"] == turn["state_after_hash"]:
        no_facts = judge_attempt(Attempt([], "", turn["state_after_hash"]), turn)
        assert not no_facts[0] and "facts" in no_facts[1]


def test_attempts_differ_by_seed_when_a_reference_is_ambiguous(environments, worker, trajectories):
    env_id = "bookshop_example"
    state = {env_id: next(s["state"] for s in environments[env_id]["initial_states"] if s["name"] == "valid")}
    listing = [
        {"role": "user", "content": "Show me the books."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "books_list", "arguments": "{}"}}],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "books_list",
            "content": json.dumps({"items": state[env_id]["tables"]["books"], "total": 0}),
        },
        {"role": "user", "content": "Delete that book."},
    ]
    view = SolverView(tuple(listing), tuple(tools_of(environments, [env_id])))
    gold = {"state_after_hash": "x", "calls": []}
    result = solve_turn(worker, state, view, ProgrammaticSolver(), gold, "ambiguous", k=4)
    targets = {a["calls"][0]["arguments"]["book_id"] for a in result["attempts"]}
    assert len(targets) > 1  # each attempt samples among the listed books with its own seed


def test_calibration_reverts_unsolvable_refinements_and_ends_chains_at_unsolvable_turns(
    trajectories, environments, worker
):
    cals = [
        calibrate_trajectory(
            t, environments, worker, ProgrammaticSolver(), CalibrationConfig(k=4, conversational_share=0.0)
        )
        for t in trajectories
    ]
    turns = [t for c in cals for t in c["turns"]]
    assert all(t["accuracy"] > 0 and t["task_id"] and t["persona"] and t["solve_raw"]["k"] == 4 for t in turns)
    reverted = [t for t in turns if "query_refined_rejected" in t]
    narrowed = [t for t in turns if any("narrower refinement" in o.get("reason", "") for o in t["operators"])]
    assert reverted or narrowed, "the fixture chains contain refinements a solver cannot resolve"
    for t in reverted:
        assert t["query"] == t["query_raw"] and t["solve_refined"]["passed"] == 0
        assert all(o["reverted"] for o in t["operators"])
    for t in narrowed:  # what the solver could not resolve is undone; the turn keeps the rest of its refinement
        assert t["query"] != t["query_raw"] and t["solve_refined"]["passed"] > 0 and "query_redrawn_from" in t
        assert {o["operator"] for o in t["operators"] if not o.get("reverted")} <= {
            "implicit_reference",
            "goal_expansion",
            "user_clarification",
        }
    report = refinement_report(
        [
            {**c, "id": t["id"], "env_ids": t["env_ids"], "domains": t["domains"]}
            for c, t in zip(cals, trajectories, strict=False)
        ]
    )
    assert {"ambiguity", "implicit_constraint", "action_compression"} <= set(report["operators"])
    assert report["refined_accuracy_distribution"].get("0.00", 0) == len(reverted)
    assert len(report["refined_accuracy_distribution"]) > 1  # refinement makes some turns harder: not all 1.0
    assert "| before | after |" in report["examples_md"]
    # a turn whose raw query nobody can solve ends the chain there
    broken = copy.deepcopy(trajectories[0])
    broken["turns"][1]["query"] = "Hmm."
    cal = calibrate_trajectory(
        broken, environments, worker, ProgrammaticSolver(), CalibrationConfig(k=2, conversational_share=0.0)
    )
    assert len(cal["turns"]) == 1 and cal["status"] == "failed"
    assert any(r.startswith("unsolvable turn") for r in cal["reasons"])


def test_reading_each_tool_list_once_changes_no_refined_row(trajectories, environments, worker):
    """The solver reads a tool list once for every attempt and turn that shows it; the rows (queries,
    attempts, verdicts, conversational turns) must equal those of re-reading it on every attempt."""
    from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, providable_flags

    config = CalibrationConfig(k=4, conversational_share=0.5)
    flags = providable_flags(fixture_graph(environments))

    def rows(reuse: bool) -> list[dict]:
        return [
            calibrate_trajectory(
                t,
                environments,
                worker,
                ProgrammaticSolver(ask=True, reuse_tool_reading=reuse),
                config,
                user=ProgrammaticUser(),
                providable=flags,
            )
            for t in trajectories
        ]

    fresh, reused = rows(False), rows(True)
    assert json.dumps(reused, sort_keys=True) == json.dumps(fresh, sort_keys=True)
    assert any(t.get("clarification") for c in reused for t in c["turns"])  # the dialogue path ran too


def test_model_solver_runs_the_agent_loop_against_the_environment(environments, worker, trajectories):
    env_id = "bookshop_example"
    state = {env_id: next(s["state"] for s in environments[env_id]["initial_states"] if s["name"] == "valid")}
    call = '<tool_call>{"name": "create_author", "arguments": {"name": "Ada Lovelace"}}</tool_call>'
    view = SolverView.for_turn([], "Create a new author with name 'Ada Lovelace'.", tools_of(environments, [env_id]))
    with FakeChatServer([call, "Done: I created the author."]) as server:
        solver = ModelSolver(OpenAICompatibleBackend(server.base_url, "m", max_retries=0))
        result = solve_turn(worker, state, view, solver, {"state_after_hash": "unknown", "calls": []}, "m", k=1)
        sent = server.requests
    attempt = result["attempts"][0]
    assert attempt["calls"][0]["name"] == "create_author" and attempt["calls"][0]["ok"]
    assert attempt["answer"].startswith("Done")
    assert "<tool_response>" in json.dumps(sent[-1])  # the tool result went back to the model


def test_operators_b_and_c_are_grounded_in_the_state_and_the_tool_schema(trajectories, environments):
    seen = set()
    for traj in trajectories:
        turns, ops = refine_turns(traj["turns"], {e: environments[e] for e in traj["env_ids"]})
        calls = [c for t in turns for c in t["calls"]]
        for op in ops:
            turn, call = turns[op["turn"]], calls[op["call"]]
            seen.add(op["operator"])
            if op["operator"] == "ambiguity":  # "my most recent X" names the newest row of its table
                table = next(t["table"] for t in environments[call["env_id"]]["tools"] if t["name"] == call["name"])
                ids = [r[op["argument"]] for r in turn["state_before"][call["env_id"]]["tables"][table]]
                assert op["value"] == max(ids, key=lambda v: (len(v), v)) and "my most recent" in turn["query"]
            elif op["operator"] == "implicit_constraint":  # the filter's value stays, its parameter name goes
                assert f"'{op['value']}' " in turn["query"]
                assert f"{op['argument'].replace('_', ' ')} is '{op['value']}'" not in turn["query"]
            elif op["operator"] == "action_compression":  # the lookup leaves the query, not the gold calls
                assert call["kind"] == "list" and call in turn["calls"]
                assert op["reference"] not in turn["query"].lower() and " whose " in turn["query"]
    assert {"ambiguity", "implicit_constraint", "action_compression"} <= seen


def test_goal_merging_joins_two_turns_and_calibration_splits_an_unsolvable_merge(trajectories, environments, worker):
    from envfactory_assets.synth.refinement.operators import merge_goals

    traj = next(
        t
        for t in trajectories
        if len(t["turns"]) >= 3 and len(merge_goals(refine_turns(t["turns"], environments)[0])) == len(t["turns"]) - 1
    )
    refined, _ = refine_turns(traj["turns"], environments)
    merged = merge_goals(copy.deepcopy(refined))
    joined = next(t for t in merged if "merged_from" in t)
    first, second = joined["merged_from"]
    assert joined["calls"] == first["calls"] + second["calls"]
    assert joined["state_before"] == first["state_before"] and joined["state_after_hash"] == second["state_after_hash"]
    assert joined["operators"][-1]["operator"] == "goal_merging"
    good = calibrate_trajectory(
        traj, environments, worker, ProgrammaticSolver(), CalibrationConfig(k=2, conversational_share=0.0)
    )
    assert any(len(t.get("merged_from") or []) == 2 for t in good["turns"])
    # the second goal of the merge becomes unsolvable: the merge is split back and the chain ends at that goal
    broken = copy.deepcopy(traj)
    index = next(i for i, t in enumerate(refined) if t["query_raw"] == second["query_raw"])
    broken["turns"][index]["query"] = "Hmm."
    cal = calibrate_trajectory(
        broken, environments, worker, ProgrammaticSolver(), CalibrationConfig(k=2, conversational_share=0.0)
    )
    assert len(cal["turns"]) == index and "merged_from" not in cal["turns"][-1]
    assert any(o["operator"] == "goal_merging" and o["reverted"] for o in cal["turns"][-1]["operators"])


def _spec(name: str, description: str, props: dict, required: tuple = ()) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(required)},
        },
    }


def _recording_environment(failing: frozenset = frozenset()):
    """A tool caller that records calls; tools in ``failing`` answer like a row missing from their table."""
    calls = []

    def call(name, args):
        calls.append((name, args))
        if name in failing:
            return {"ok": False, "error": {"type": "not_found", "message": "no such row"}}
        return {"ok": True, "output": {}}

    return calls, call


def test_programmatic_solver_reads_labels_nouns_and_errors_like_an_agent():
    string = {"type": "string"}
    tools = (
        _spec(
            "create_connection_policy",
            "Create a connection policy",
            {"account_sid": string, "sid": string, "friendly_name": string},
        ),
        _spec("list_data_sources", "List data sources", {"limit": {"type": "integer"}, "apis_id": string}),
        _spec("list_graphql_apis", "List GraphQL APIs", {"limit": {"type": "integer"}}),
        _spec("delete_documents_id", "Delete a document", {"document_id": string}, ("document_id",)),
        _spec("database_delete_document", "Delete document", {"document_id": string}, ("document_id",)),
    )
    solver = ProgrammaticSolver()
    query = (
        "Create a new connection policy with account sid 'heavy-network', friendly name 'Alvarez', "
        "sid 'defense-road', then show me the datasources where apis id is 'api_00001'."
    )
    calls, env = _recording_environment()
    solver.attempt(SolverView.for_turn([], query, tools), env, seed=1)
    assert calls == [
        (
            "create_connection_policy",
            {"account_sid": "heavy-network", "friendly_name": "Alvarez", "sid": "defense-road"},
        ),
        ("list_data_sources", {"apis_id": "api_00001"}),
    ]
    # the document lives in one of two environments: an error makes the agent try the other delete tool
    for seed in range(4):
        calls, env = _recording_environment(failing=frozenset({"delete_documents_id"}))
        solver.attempt(SolverView.for_turn([], "Delete document 'doc_00002'.", tools), env, seed=seed)
        assert calls[-1] == ("database_delete_document", {"document_id": "doc_00002"})


def test_a_cached_tool_reading_is_not_changed_by_its_callers_specs_or_their_key_order():
    """The solver caches what it read of a tool list by the list's JSON. A caller that changes its specs
    afterwards (a parameter's type) must not change what a later, equal list reads as, and two lists that
    differ only in their parameters' order (which steers argument parsing) must not share a reading."""
    from envfactory_assets.synth.refinement.solver.programmatic import read_tools

    props = {"pages": {"type": "integer"}, "title": {"type": "string"}, "price": {"type": "number"}}
    original = (_spec("create_book", "Create a book", props, ("title",)),)
    query = "Create a book with pages 12, title 'Dune', price 9.5."

    def calls(tools, reuse=True):
        made, env = _recording_environment()
        ProgrammaticSolver(reuse_tool_reading=reuse).attempt(SolverView.for_turn([], query, tools), env, seed=1)
        return made

    mine = copy.deepcopy(original)
    assert calls(mine) == [("create_book", {"pages": 12, "title": "Dune", "price": 9.5})]
    for name in ("pages", "price"):
        mine[0]["function"]["parameters"]["properties"][name]["type"] = "string"
    fresh = copy.deepcopy(original)
    assert calls(fresh) == calls(fresh, reuse=False) == [("create_book", {"pages": 12, "title": "Dune", "price": 9.5})]
    reordered = (_spec("create_book", "Create a book", dict(reversed(props.items())), ("title",)),)
    assert list(read_tools(reordered).infos["create_book"].params) == ["price", "title", "pages"]
    # specs that are not JSON are read afresh rather than refused
    odd = (_spec("create_book", "Create a book", {"title": {"type": "string", "enum": {"Dune"}}}, ("title",)),)
    assert read_tools(odd).infos["create_book"].params["title"]["enum"] == {"Dune"}


def _bookshop_view(bookshop_env, query, earlier=()):
    tools = tools_of({bookshop_env["env_id"]: bookshop_env}, [bookshop_env["env_id"]])
    return SolverView.for_turn(list(earlier), query, tools)


@pytest.fixture(scope="module")
def bookshop_env(environments):
    return next(e for e in environments.values() if "books" in e["tables"])


def _accuracy(worker, env, state, query, gold_calls, k=4):
    """Solve ``query`` k times against the gold state reached by ``gold_calls`` from ``state``."""
    from envfactory_assets.runtime.canonical import state_hash as _hash

    episode = worker.open_episode(copy.deepcopy({env["env_id"]: state}))
    outputs = []
    for name, args in gold_calls:
        res = worker.call(episode, name, args)
        assert res["ok"], res
        outputs.append({"kind": name.split("_")[0], "output": res["output"]})
    after = worker.save(episode)
    worker.close_episode(episode)
    gold = {"state_after_hash": _hash(after), "calls": outputs}
    res = solve_turn(
        worker, {env["env_id"]: state}, _bookshop_view(env, query), ProgrammaticSolver(), gold, f"acc/{query}", k
    )
    return res["passed"]


def test_solver_fails_only_for_want_of_information(bookshop_env, worker):
    """Full information: 4/4; two rows match the description: about half; a required value missing: 0/4.
    The solver injects no noise of its own: every failure comes from what the query leaves open."""
    env = bookshop_env
    state = copy.deepcopy(next(s["state"] for s in env["initial_states"] if s["name"] == "valid"))
    books = state["tables"]["books"]
    target = books[0]
    assert (
        _accuracy(
            worker, env, state, f"Delete book '{target['book_id']}'.", [("delete_book", {"book_id": target["book_id"]})]
        )
        == 4
    )
    assert (
        _accuracy(
            worker,
            env,
            state,
            f"Please remove the book whose title is '{target['title']}'.",
            [("delete_book", {"book_id": target["book_id"]})],
        )
        == 4
    )
    # a second book with the same title: the description fits two rows
    twin = copy.deepcopy(state)
    twin["tables"]["books"][1]["title"] = target["title"]
    passes = [
        _accuracy(
            worker,
            env,
            twin,
            f"Go ahead and delete the book whose title is '{target['title']}'.",
            [("delete_book", {"book_id": target["book_id"]})],
            k=8,
        )
    ]
    assert 1 <= passes[0] <= 7, passes
    # the title a new book needs is not in the query: nothing to call with
    assert (
        _accuracy(
            worker, env, state, "Add a book.", [("books_create", {"title": "Dune", "author_id": books[0]["author_id"]})]
        )
        == 0
    )


def test_a_value_that_describes_a_referenced_row_does_not_fill_the_calls_own_parameter():
    """ "for the service whose account sid is 'AC1'": AC1 picks the service; the new role's own account sid
    stays unset (filling it made the final state differ from the goal and reverted such refined queries)."""
    text = {"type": "string"}
    tools = [
        _spec("list_services", "List services", {"limit": {"type": "integer"}}),
        _spec("create_role", "Create a role", {"service_id": text, "account_sid": text, "type": text}, ("service_id",)),
    ]
    services = {"items": [{"service_id": "ser_1", "account_sid": "AC1"}, {"service_id": "ser_2", "account_sid": "AC2"}]}
    messages = [
        {"role": "user", "content": "Show me the services."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "list_services", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c0", "name": "list_services", "content": json.dumps(services)},
        {"role": "assistant", "content": "There are 2 services."},
        {
            "role": "user",
            "content": "Create a new role for the service whose account sid is 'AC2' with type 'channel'.",
        },
    ]
    made: list[tuple[str, dict]] = []

    def call_tool(name: str, args: dict) -> dict:
        made.append((name, args))
        return {"ok": True, "output": {"role_id": "rol_1", **args}}

    for seed in range(4):
        made.clear()
        ProgrammaticSolver().attempt(SolverView(messages=messages, tools=tools), call_tool, seed)
        assert made == [("create_role", {"service_id": "ser_2", "type": "channel"})]


def test_an_apostrophe_inside_a_word_opens_no_literal():
    """ "I'd like a list of the workflows": the request's verb comes after "I'd"; the solver once read only
    "I" as the request and made no call."""
    tools = (
        _spec("get_all_workflows", "Get all workflows", {"limit": {"type": "integer"}}),
        _spec("delete_action", "Delete an action", {"action_id": {"type": "string"}}, ("action_id",)),
    )
    calls, env = _recording_environment()
    query = "Delete action 'act_1'. Then I'd like a list of the workflows, up to 10 of them. Many thanks."
    ProgrammaticSolver().attempt(SolverView.for_turn([], query, tools), env, seed=0)
    assert calls == [("delete_action", {"action_id": "act_1"}), ("get_all_workflows", {"limit": 10})]


def test_a_value_quoted_as_an_adjective_leaves_the_requests_object_readable():
    """ "list the 'ANG' credit notes": the object comes after the quoted currency."""
    currency = {"type": "string", "enum": ["ANG", "EUR"]}
    tools = (
        _spec("customers_all", "List customers", {"currency": currency, "limit": {"type": "integer"}}),
        _spec("credit_notes_all", "List credit notes", {"currency": currency, "limit": {"type": "integer"}}),
    )
    for seed in range(4):
        calls, env = _recording_environment()
        ProgrammaticSolver().attempt(SolverView.for_turn([], "Ok, list the 'ANG' credit notes.", tools), env, seed=seed)
        assert calls == [("credit_notes_all", {"currency": "ANG"})]


def test_a_tool_whose_name_says_more_than_the_request_loses_the_tie():
    """ "list the appointments" fits ``appointments_list`` and ``appointment_templates_list`` equally by verb
    and noun; the one whose name the request says in full wins on every seed, and the longer one still wins
    when the request names its templates."""
    limit = {"limit": {"type": "integer"}}
    tools = (
        _spec("appointment_templates_list", "List appointment templates", limit),
        _spec("appointments_list", "List appointments", limit),
    )
    for seed in range(8):
        calls, env = _recording_environment()
        ProgrammaticSolver().attempt(SolverView.for_turn([], "Please list the appointments.", tools), env, seed=seed)
        assert calls == [("appointments_list", {})]
        calls, env = _recording_environment()
        ProgrammaticSolver().attempt(
            SolverView.for_turn([], "Please list the appointment templates.", tools), env, seed=seed
        )
        assert calls == [("appointment_templates_list", {})]


def test_a_row_listed_per_parent_is_found_by_listing_the_parent_the_request_names():
    """ "the group whose name is 'RH' in space id 'spa_1'": no list reads every group, so the solver lists the
    groups of that space and takes the one named RH."""
    string = {"type": "string"}
    tools = (
        _spec(
            "list_groups",
            "List the groups of a space",
            {"space_id": string, "limit": {"type": "integer"}},
            ("space_id",),
        ),
        _spec("get_group", "Get a group", {"group_id": string}, ("group_id",)),
    )
    calls = []

    def call(name, args):
        calls.append((name, args))
        if name == "list_groups":
            rows = {
                "spa_1": [
                    {"group_id": "gro_1", "name": "RH", "space_id": "spa_1"},
                    {"group_id": "gro_2", "name": "IT", "space_id": "spa_1"},
                ]
            }.get(args["space_id"], [])
            return {"ok": True, "output": {"items": rows, "total": len(rows)}}
        return {"ok": True, "output": {"group_id": args["group_id"], "name": "RH"}}

    query = "Please fetch the group whose name is 'RH' in space id 'spa_1'."
    for seed in range(4):
        calls.clear()
        ProgrammaticSolver().attempt(SolverView.for_turn([], query, tools), call, seed=seed)
        assert calls == [("list_groups", {"space_id": "spa_1"}), ("get_group", {"group_id": "gro_1"})]


def test_an_identifier_copied_from_a_listed_row_is_read_from_the_row_the_request_points_at():
    """ "calendar id same as the course whose name is 'Mobile'": the value the named row carries, not a
    guess among the calendars seen."""
    string = {"type": "string"}
    tools = (
        _spec("list_courses", "List courses", {"limit": {"type": "integer"}}),
        _spec("create_course", "Create a course", {"name": string, "calendar_id": string}, ("name",)),
    )
    rows = [
        {"course_id": "cou_1", "name": "Staging", "calendar_id": "cal_7"},
        {"course_id": "cou_2", "name": "Mobile", "calendar_id": "cal_9"},
    ]
    for seed in range(6):
        for query, want in (
            (
                "List the courses. Then create a course with name 'X', calendar id same as the course "
                "whose name is 'Mobile'.",
                "cal_9",
            ),
            (
                "List the courses. Then create a course with name 'X', calendar id same as the first "
                "course in that list.",
                "cal_7",
            ),
        ):
            calls = []

            def call(name, args, calls=calls):
                calls.append((name, args))
                return {"ok": True, "output": {"items": rows} if name == "list_courses" else {"course_id": "cou_3"}}

            ProgrammaticSolver().attempt(SolverView.for_turn([], query, tools), call, seed=seed)
            assert calls[-1] == ("create_course", {"name": "X", "calendar_id": want}), (query, calls)


def test_a_foreign_key_named_through_a_row_seen_is_read_from_that_row():
    """ "for the legal entity of that business line": the legal entity id the looked-up business line holds,
    not another legal entity seen earlier."""
    string = {"type": "string"}
    tools = (
        _spec("list_legal_entities", "List legal entities", {"limit": {"type": "integer"}}),
        _spec("get_business_line", "Get a business line", {"business_line_id": string}, ("business_line_id",)),
        _spec(
            "create_transfer_instrument",
            "Create a transfer instrument",
            {"type": string, "legal_entity_id": string},
            ("type", "legal_entity_id"),
        ),
    )
    entities = [{"legal_entity_id": "leg_1", "name": "A"}, {"legal_entity_id": "leg_2", "name": "B"}]
    line = {"business_line_id": "bus_1", "legal_entity_id": "leg_2", "capability": "receivePayments"}
    for seed in range(6):
        calls = []

        def call(name, args, calls=calls):
            calls.append((name, args))
            return {
                "ok": True,
                "output": {"items": entities}
                if name == "list_legal_entities"
                else line
                if name == "get_business_line"
                else {"transfer_instrument_id": "tra_1"},
            }

        query = (
            "Show me the legal entities. Then look up business line 'bus_1' and tell me its details, and "
            "then create a new transfer instrument for the legal entity of that business line with type "
            "'recurringDetail'."
        )
        ProgrammaticSolver().attempt(SolverView.for_turn([], query, tools), call, seed=seed)
        assert calls[-1] == ("create_transfer_instrument", {"type": "recurringDetail", "legal_entity_id": "leg_2"}), (
            calls
        )


def test_a_flag_is_asked_for_by_what_it_says_and_read_back():
    import random

    from envfactory_assets.synth.refinement.phrasing import describe_call

    flag = {"type": "boolean", "description": "Whether the key can be used."}
    tool = {
        "name": "list_api_keys",
        "kind": "list",
        "table": "api_keys",
        "description": "List API keys",
        "input_schema": {"type": "object", "properties": {"is_active": flag, "limit": {"type": "integer"}}},
    }
    spec = {
        "type": "function",
        "function": {"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]},
    }
    for seed in range(6):
        text = describe_call(tool, "api_key_id", {"is_active": False}, rng=random.Random(seed))
        assert re.search(r"\bactive is (?:set to )?no\b", text) and "is active is" not in text, text
        calls, env = _recording_environment()
        ProgrammaticSolver().attempt(SolverView.for_turn([], text[0].upper() + text[1:] + ".", (spec,)), env, seed)
        assert calls == [("list_api_keys", {"is_active": False})], (text, calls)


def test_every_connective_the_writer_joins_requests_with_separates_them_for_the_solver():
    import random

    from envfactory_assets.synth.refinement.phrasing import join_sentences

    text = {"type": "string"}
    tools = (
        _spec("delete_book", "Delete a book", {"book_id": text}, ("book_id",)),
        _spec("list_books", "List books", {"limit": {"type": "integer"}}),
        _spec("create_book", "Create a book", {"title": text}, ("title",)),
    )
    parts = ["delete book 'boo_1'", "show me the books", "create a new book with title 'Dune'", "delete book 'boo_2'"]
    joined = set()
    for seed in range(80):
        query = join_sentences(parts, random.Random(seed))
        joined.add(query)
        calls, env = _recording_environment()
        ProgrammaticSolver().attempt(SolverView.for_turn([], query, tools), env, seed=seed)
        assert calls == [
            ("delete_book", {"book_id": "boo_1"}),
            ("list_books", {}),
            ("create_book", {"title": "Dune"}),
            ("delete_book", {"book_id": "boo_2"}),
        ], query
    assert len(joined) > 40
