"""Relations between two resources (users who are members of groups, users who watch projects) on a fixture
document written for them: what extraction infers, what coverage counts, what the environment does in the
sandbox, the verification gate rejecting a broken implementation of each relation tool, and trajectories that
use them."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from envfactory_assets.envgen.stage import select_resources
from envfactory_assets.envgen.values import ValueFactory
from envfactory_assets.envgen.verify import valid_arguments, verify_environment
from envfactory_assets.quality.reply_facts import reply_problems
from envfactory_assets.runtime.sandbox import SandboxWorker, StateRejected
from envfactory_assets.sources.coverage import operation_coverage, summarize
from envfactory_assets.sources.relations import param_noun
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.synth.datasets.rows import replay_check, rl_rows, tools_of
from envfactory_assets.synth.refinement.solver.attempts import solve_turn
from envfactory_assets.synth.refinement.solver.base import SolverView
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.abstention import abstention_turn
from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory
from envfactory_assets_tests.fixture_environments import (
    document_spec,
    environment_fixture,
    environment_worker,
    failed_checks,
    failed_semantics,
    fixture_graph,
    mutate,
    states_where,
    valid_state,
)

KINDS = Path(__file__).parent / "fixtures" / "openapi_kinds"
DOCUMENT = "team_directory.json"

team = environment_fixture(KINDS / DOCUMENT, "team")


def _spec() -> dict:
    return document_spec(KINDS / DOCUMENT)


def test_extraction_reads_sub_collections_of_another_resource_as_relations():
    resources = {r.name: r for r in extract_resources(_spec())}
    # the sub-collections are no tables of copied user rows any more
    assert set(resources) == {"groups", "users", "projects"}
    (members,) = resources["groups"].relations
    assert (members.name, members.parent, members.member) == ("group_members", "groups", "users")
    assert (members.parent_field, members.member_field, members.role) == ("group_id", "user_id", "member")
    assert members.idempotent_add  # a PUT
    assert {k: (op.method, op.path) for k, op in members.operations.items()} == {
        "relation_list": ("get", "/groups/{group_id}/members"),
        "relation_add": ("put", "/groups/{group_id}/members/{user_id}"),
        "relation_remove": ("delete", "/groups/{group_id}/members/{user_id}"),
    }
    # {watcher_id} names no resource; the list's schema (User) does
    (watchers,) = resources["projects"].relations
    assert (watchers.member, watchers.member_field, watchers.role) == ("users", "user_id", "watcher")
    assert not watchers.idempotent_add  # a POST
    assert resources["users"].relations == []


def test_member_parameter_nouns():
    assert param_noun("{user_id}") == param_noun("{userId}") == param_noun("{username}") == "user"
    assert param_noun("{repository_id}") == "repository"
    assert param_noun("{id}") == param_noun("{name}") == ""


def _document(paths: dict) -> dict:
    row = {"type": "object", "properties": {"name": {"type": "string"}}}
    array = {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "array", "items": row}}}}}
    crud = {}
    for things in ("users", "groups", "projects"):
        crud[f"/{things}"] = {
            "get": {"responses": array},
            "post": {"requestBody": {"content": {"application/json": {"schema": row}}}},
        }
        crud[f"/{things}/{{{things[:-1]}_id}}"] = {"get": {"responses": array}}
    return {"openapi": "3.0.3", "info": {"title": "Shapes", "version": "1"}, "paths": {**crud, **paths}}


def _relations(spec: dict) -> list[tuple[str, str, str]]:
    return [(rel.path, rel.member, rel.member_field) for r in extract_resources(spec) for rel in r.relations]


def test_shapes_that_are_no_relation_stay_as_they_were():
    add = {"put": {"responses": {"204": {"description": "ok"}}}}
    # a singular word after an item names one value of it (a project's type), not a set of rows
    assert _relations(_document({"/projects/{project_id}/type/{user_id}": add})) == []
    # a POST on the sub-collection creates rows of their own: a nested resource
    nested = _document(
        {
            "/groups/{group_id}/users": {"post": {"responses": {}}, "get": {"responses": {}}},
            "/groups/{group_id}/users/{user_id}": add,
        }
    )
    assert _relations(nested) == []
    # a member item path with only a DELETE has no add: it reads as well as the deletion of an owned row
    assert _relations(_document({"/groups/{group_id}/users/{user_id}": {"delete": {"responses": {}}}})) == []
    # an add that sends the member's own schema writes that row (an upsert)
    upsert = {
        "put": {
            "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/User"}}}},
            "responses": {},
        }
    }
    spec = _document({"/groups/{group_id}/users/{user_id}": upsert})
    spec["components"] = {"schemas": {"User": {"type": "object", "properties": {"name": {"type": "string"}}}}}
    assert _relations(spec) == []
    # an operation named as an update changes a row, it adds no pair
    update = {"post": {"operationId": "UpdateUserGroup", "responses": {}}}
    assert _relations(_document({"/groups/{group_id}/users/{user_id}": update})) == []


def test_the_same_pairs_seen_from_both_sides_are_one_relation_and_a_self_relation_has_two_fields():
    add = {"put": {"responses": {"204": {"description": "ok"}}}}
    both = _document({"/groups/{group_id}/users/{user_id}": add, "/users/{user_id}/groups/{group_id}": add})
    assert _relations(both) == [("/groups/{group_id}/users", "users", "user_id")]
    # {follower_id} names no resource: the list's schema says followers are users
    users = {"type": "array", "items": {"$ref": "#/components/schemas/User"}}
    listed = {"get": {"responses": {"200": {"description": "ok", "content": {"application/json": {"schema": users}}}}}}
    follows = _document({"/users/{user_id}/followers": listed, "/users/{user_id}/followers/{follower_id}": add})
    follows["components"] = {"schemas": {"User": {"type": "object", "properties": {"name": {"type": "string"}}}}}
    assert _relations(follows) == [("/users/{user_id}/followers", "users", "follower_id")]


def test_coverage_counts_relation_operations_as_mapped_per_kind():
    coverage = operation_coverage(_spec())
    kinds = {(c.method, c.path): c.kind for c in coverage}
    assert kinds[("put", "/groups/{group_id}/members/{user_id}")] == "relation_add"
    assert kinds[("post", "/projects/{project_id}/watchers/{watcher_id}")] == "relation_add"
    assert kinds[("delete", "/groups/{group_id}/members/{user_id}")] == "relation_remove"
    assert kinds[("get", "/projects/{project_id}/watchers")] == "relation_list"
    summary = summarize(coverage)
    assert summary["mapped"] == summary["operations"] == 18
    assert {k: summary["by_kind"][k] for k in ("relation_add", "relation_remove", "relation_list")} == {
        "relation_add": 2,
        "relation_remove": 2,
        "relation_list": 2,
    }
    # a relation is kept with both of its resources: without users, the groups' members are beyond the cap
    capped = {(c.method, c.path): c for c in operation_coverage(_spec(), max_resources=1)}
    assert capped[("get", "/groups/{group_id}")].kind == "get"
    assert capped[("put", "/groups/{group_id}/members/{user_id}")].reason == "beyond_resource_cap"


def test_the_built_environment_has_relation_tables_and_tools(team):
    kinds = {t["name"]: t["kind"] for t in team["tools"] if t["table"] in ("group_members", "project_watchers")}
    assert kinds == {
        "list_group_members": "relation_list",
        "add_group_member": "relation_add",
        "remove_group_member": "relation_remove",
        "list_project_watchers": "relation_list",
        "watch_project": "relation_add",
        "unwatch_project": "relation_remove",
    }
    meta = team["tables"]["group_members"]
    assert meta["key"] is None and meta["foreign_keys"] == {"group_id": "groups", "user_id": "users"}
    valid = valid_state(team)
    pairs = [(r["group_id"], r["user_id"]) for r in valid["tables"]["group_members"]]
    groups = [r["group_id"] for r in valid["tables"]["groups"]]
    # 3 members of the first group, 2 of the second, 1 of the third, no pair twice
    assert [sum(1 for g, _ in pairs if g == group) for group in groups[:4]] == [3, 2, 1, 0]
    assert len(set(pairs)) == len(pairs)
    listed = next(t for t in team["tools"] if t["name"] == "list_group_members")
    assert listed["read_only"] and listed["output_schema"]["properties"]["items"]["items"]["required"][0] == "user_id"


def test_relation_tools_in_the_sandbox(team):
    state = valid_state(team)
    env_id = team["env_id"]
    group, project = state["tables"]["groups"][0]["group_id"], state["tables"]["projects"][0]["project_id"]
    members = [r["user_id"] for r in state["tables"]["group_members"] if r["group_id"] == group]
    outsider = next(r["user_id"] for r in state["tables"]["users"] if r["user_id"] not in members)
    watching = {r["user_id"] for r in state["tables"]["project_watchers"] if r["project_id"] == project}
    user = next(r["user_id"] for r in state["tables"]["users"] if r["user_id"] not in watching)
    with SandboxWorker() as worker:
        worker.load_environment(env_id, team["source"])
        episode = worker.open_episode({env_id: state})

        def call(name, **args):
            return worker.call(episode, name, args)

        page = call("list_group_members", group_id=group, limit=2)["output"]
        assert page["total"] == 3 and [u["user_id"] for u in page["items"]] == members[:2]
        added = call("add_group_member", group_id=group, user_id=outsider)
        assert added["ok"] and added["output"] == {
            "group_id": group,
            "user_id": outsider,
            "created_at": state["meta"]["now"],
        }
        saved = worker.save(episode)
        # a PUT: adding the pair again succeeds and changes nothing
        assert call("add_group_member", group_id=group, user_id=outsider)["output"] == added["output"]
        assert worker.save(episode) == saved
        # a POST: adding the pair again is refused
        assert call("watch_project", project_id=project, user_id=user)["ok"]
        again = call("watch_project", project_id=project, user_id=user)
        assert again["error"]["type"] == "precondition_failed" and "already a watcher" in again["error"]["message"]
        missing = call("add_group_member", group_id=group, user_id="use_99999")
        assert missing["error"]["type"] == "not_found"
        assert call("list_group_members", group_id="gro_99999")["error"]["type"] == "not_found"
        removed = call("remove_group_member", group_id=group, user_id=outsider)
        assert removed["output"] == {"group_id": group, "user_id": outsider, "removed": True}
        gone = call("remove_group_member", group_id=group, user_id=outsider)
        assert gone["error"]["type"] == "not_found" and "is not a member" in gone["error"]["message"]
        # deleting a user deletes their memberships, and only theirs
        before = worker.save(episode)[env_id]["tables"]["group_members"]
        assert call("delete_user", user_id=members[0])["ok"]
        after = worker.save(episode)[env_id]["tables"]["group_members"]
        assert after == [r for r in before if r["user_id"] != members[0]] and len(after) < len(before)


def test_a_state_with_a_pair_twice_or_a_pair_of_a_missing_row_is_rejected(team):
    with SandboxWorker() as worker:
        worker.load_environment(team["env_id"], team["source"])
        twice = valid_state(team)
        twice["tables"]["group_members"].append(dict(twice["tables"]["group_members"][0]))
        with pytest.raises(StateRejected, match="duplicate pair"):
            worker.open_episode({team["env_id"]: twice})
        dangling = valid_state(team)
        dangling["tables"]["group_members"][0]["user_id"] = "use_99999"
        with pytest.raises(StateRejected, match="references no row of users"):
            worker.open_episode({team["env_id"]: dangling})


def test_every_relation_tool_passes_the_gate_with_its_checks(team):
    report = verify_environment(team)
    assert report.status == "passed", report.reasons
    passed = {(c.check, c.tool) for c in report.checks if c.passed}
    for name in ("list_group_members", "add_group_member", "remove_group_member", "watch_project", "unwatch_project"):
        assert {("semantics", name), ("tool_invalid", name)} <= passed
    assert ("precondition", "watch_project") in passed  # the POST's duplicate is refused
    # the gate deletes a user who has memberships, so that it sees them go with the user
    state = valid_state(team)
    deleted = valid_arguments(
        team, next(t for t in team["tools"] if t["name"] == "delete_user"), state, ValueFactory(7)
    )
    assert any(r["user_id"] == deleted["user_id"] for r in state["tables"]["group_members"])


@pytest.mark.parametrize(
    ("pattern", "replacement", "check", "tool_name"),
    [
        # an add that does not record the pair
        (r"    rows\[key\] = row\n    return dict\(row\)", "    return dict(row)", "semantics", "add_group_member"),
        # an add that accepts a member that does not exist
        (
            r"        if value not in state\[\"tables\"\]\[target\]:",
            '        if field == rel["parent"] and value not in state["tables"][target]:',
            "tool_invalid",
            "add_group_member",
        ),
        # an add of a pair that is there already: a PUT that refuses it, a POST that accepts it
        (r"        if idempotent:\n            return dict\(rows\[key\]\)\n", "", "semantics", "add_group_member"),
        (
            r"raise PreconditionFailed\(f\"\{words\[1\]\}[^\n]*",
            "return dict(rows[key])",
            "precondition",
            "watch_project",
        ),
        # a remove that removes every member of the parent
        (
            r"    del rows\[key\]\n",
            '    for k in [k for k, r in rows.items() if r[TABLES[table]["relation"]["parent"]] == parent]:\n'
            "        del rows[k]\n",
            "semantics",
            "remove_group_member",
        ),
        # a remove of a pair that is not there that succeeds
        (
            r"raise LookupError\(f\"\{words\[1\]\} \{member!r\} is not[^\n]*",
            'return {"removed": False}',
            "tool_invalid",
            "remove_group_member",
        ),
        # a list that ignores its limit, and one that ignores its parent
        (r"found\[:size\]", "found", "semantics", "list_group_members"),
        (r" if r\[rel\[\"parent\"\]\] == parent\]", "]", "semantics", "list_group_members"),
        # a delete that leaves the deleted row's pairs behind
        (
            r"    for other, k in pairs:[^\n]*\n        del state\[\"tables\"\]\[other\]\[k\]\n",
            "",
            "semantics",
            "delete_user",
        ),
    ],
    ids=[
        "add-records-nothing",
        "add-accepts-a-missing-member",
        "idempotent-add-refuses-a-pair-it-holds",
        "post-add-accepts-a-pair-it-holds",
        "remove-removes-every-member",
        "remove-of-a-non-member-succeeds",
        "list-ignores-limit",
        "list-ignores-its-parent",
        "delete-keeps-the-row's-pairs",
    ],
)
def test_gate_rejects_a_broken_relation_implementation(team, pattern, replacement, check, tool_name):
    assert (check, tool_name) in failed_checks(mutate(team, pattern, replacement))


def test_a_relation_tool_no_state_can_check_fails_the_gate(team):
    def no_groups(state: dict) -> None:
        state["tables"]["group_members"].clear()
        state["tables"]["groups"].clear()

    failed = failed_semantics(states_where(team, no_groups))
    assert {"add_group_member", "remove_group_member", "list_group_members"} <= set(failed)
    assert "no loadable initial state has the rows of group_members" in failed["add_group_member"]


@pytest.fixture(scope="module")
def team_trajectories(team) -> list[dict]:
    envs = {team["env_id"]: team}
    graph = fixture_graph(envs)
    with environment_worker(envs) as worker:
        chains = sample_chains(graph, 24, "relations", SamplerConfig(min_tools=3))
        trajs = [synthesize_trajectory(c, graph, envs, worker, SynthConfig(min_turns=2)) for c in chains]
    return [{**t, "id": f"raw-{i}"} for i, t in enumerate(trajs) if t["status"] == "passed"]


def test_trajectories_ask_for_relation_tools_and_replies_state_what_they_did(team, team_trajectories):
    calls = [(turn, c) for t in team_trajectories for turn in t["turns"] for c in turn["calls"]]
    kinds = {c["kind"] for _, c in calls}
    assert {"relation_add", "relation_remove", "relation_list"} <= kinds
    for turn, call in calls:
        assert reply_problems(turn["assistant_summary"], turn["calls"]) == []
        if call["kind"] == "relation_remove":
            # a remove is asked of a pair the state holds, so it succeeds
            assert call["output"]["removed"] is True and not call.get("error")
    adds = [turn["query"] for turn, c in calls if c["kind"] == "relation_add" and len(turn["calls"]) == 1]
    assert adds and all(re.match(r"^Add .+ to (group|project) ", q) for q in adds), adds
    with environment_worker({team["env_id"]: team}) as worker:
        for traj in team_trajectories:
            for row in rl_rows(traj, {team["env_id"]: team}):
                problem = replay_check(row, worker)
                # an add and the remove of the same pair in one turn is a no-op task the dataset stage rejects
                assert problem is None or problem.startswith("no-op task"), problem


def test_no_abstention_asks_for_a_pair_the_relation_tools_could_make(team, team_trajectories):
    envs = {team["env_id"]: team}
    turns = [abstention_turn(team_trajectories[0], envs, 0, random.Random(i)) for i in range(40)]
    missing = [t["abstention"]["ability"] for t in turns if t and t["abstention"]["source"] == "missing_operation"]
    assert missing  # the team directory lacks some operations (no user update): those are asked for
    assert not any("member" in a or "watcher" in a for a in missing), missing


def test_the_solver_adds_and_removes_the_pair_a_request_names(team, team_trajectories):
    envs = {team["env_id"]: team}
    turns = [
        (traj, i)
        for traj in team_trajectories
        for i, turn in enumerate(traj["turns"])
        if len(turn["calls"]) == 1 and turn["calls"][0]["name"] in ("add_group_member", "remove_group_member")
    ]
    assert len({t["turns"][i]["calls"][0]["name"] for t, i in turns}) == 2
    with environment_worker(envs) as worker:
        for traj, i in turns:
            turn = traj["turns"][i]
            view = SolverView.for_turn(traj["turns"][:i], turn["query"], tools_of(envs, traj["env_ids"]))
            result = solve_turn(worker, turn["state_before"], view, ProgrammaticSolver(), turn, f"r{i}", k=2)
            assert result["accuracy"] == 1.0, (turn["query"], result["attempts"][0]["calls"])


def test_selection_counts_relation_operations_beyond_crud():
    accepted, _ = scan_rows(KINDS)
    row = next(r for r in accepted if r["path"] == DOCUMENT)
    assert row["operations_by_kind"]["relation_add"] == 2
    plain = {**row, "resource_key": "plain", "operations_by_kind": {"list": 4, "create": 4}}
    related = {**row, "resource_key": "related", "operations_by_kind": {"list": 4, "relation_add": 2}}
    assert [r["resource_key"] for r in select_resources([plain, related], 2)] == ["related", "plain"]
