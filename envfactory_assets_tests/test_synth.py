"""Trajectory synthesis, refinement and datasets on environments built from the fixture specs."""

from __future__ import annotations

import copy
import json
import random
import re

import jsonschema
import pytest

from envfactory_assets.envgen.tools import READ_KINDS
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.synth.datasets.rows import (
    complete_answer_problem,
    essential_calls,
    replay_check,
    rl_rows,
    sft_row,
    split_of,
)
from envfactory_assets.synth.refinement.operators import REFINEMENT_OPERATORS, parameter_default, refine_turns
from envfactory_assets.synth.refinement.report import future_identifiers
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory, to_messages
from envfactory_assets.synth.trajectories.turns import split_turns
from envfactory_assets.tooluse.reward import guarded_reward


@pytest.fixture(scope="module")
def trajectories(environments, graph, worker) -> list[dict]:
    chains = sample_chains(graph, 30, "test", SamplerConfig(min_tools=3))
    assert len(chains) >= 10
    return [synthesize_trajectory(c, graph, environments, worker, SynthConfig(min_turns=2)) for c in chains]


def test_split_turns_follows_the_paper_rule():
    rng = random.Random(0)
    for n in range(0, 16):
        turns = split_turns(n, rng)
        assert [i for t in turns for i in t] == list(range(n))
        assert all(1 <= len(t) <= 5 for t in turns)
    assert split_turns(12, random.Random(3)) == split_turns(12, random.Random(3))
    assert all(len(split_turns(6, random.Random(s), min_turns=2)) >= 2 for s in range(50))
    with pytest.raises(ValueError):
        split_turns(-1, rng)


def test_trajectories_execute_with_valid_arguments_and_consistent_states(trajectories, environments):
    passed = [t for t in trajectories if t["status"] == "passed"]
    assert len(passed) >= len(trajectories) // 2
    tools = {t["name"]: t for env in environments.values() for t in env["tools"]}
    for traj in passed:
        assert len(traj["turns"]) >= 2
        assert traj["turns"][0]["state_before_hash"] == traj["initial_state_hash"]
        assert traj["turns"][-1]["state_after_hash"] == traj["final_state_hash"] == state_hash(traj["final_state"])
        flat = [c for t in traj["turns"] for c in t["calls"]]
        for prev, nxt in zip(traj["turns"], traj["turns"][1:], strict=False):
            assert prev["state_after_hash"] == nxt["state_before_hash"]
        for call in flat:
            jsonschema.validate(call["arguments"], tools[call["name"]]["input_schema"])
            jsonschema.validate(call["output"], tools[call["name"]]["output_schema"])
            for arg, prov in call["provenance"].items():
                if prov["source"] == "output":  # the value really came from that earlier output
                    producer = flat[prov["call"]]["output"]
                    path = prov["path"]
                    if "[" in path:
                        array, rest = path.split("[", 1)
                        idx, field = rest.split("].")
                        assert producer[array][int(idx)][field] == call["arguments"][arg]
                    else:
                        assert producer[path] == call["arguments"][arg]
        for turn in traj["turns"]:
            assert turn["query"].endswith(".") and turn["target_tools"]


def test_a_failed_trajectory_says_why(environments, graph, worker):
    chain = sample_chains(graph, 1, "one", SamplerConfig(min_tools=2))[0]
    result = synthesize_trajectory(chain, graph, environments, worker, SynthConfig(min_turns=50))
    assert result["status"] == "failed" and "minimum 50" in result["reasons"][0]


def test_refinement_replaces_identifiers_with_obtainable_references(trajectories, environments):
    applied = 0
    for traj in (t for t in trajectories if t["status"] == "passed"):
        refined, ops = refine_turns(traj["turns"], environments)
        flat = [c for t in traj["turns"] for c in t["calls"]]
        for op in ops:
            if op["operator"] != "implicit_reference":
                continue
            applied += 1
            turn = refined[op["turn"]]
            assert json.dumps(op["value"]) not in json.dumps(turn["query"]), "literal id still in the query"
            assert op["reference"] in turn["query"]
            earlier = json.dumps([c["output"] for c in flat[: op["call"]]], ensure_ascii=False)
            if op["obtainable_from"].startswith("state:"):
                # a row the hidden state holds, named by its label: the agent finds it by listing the table
                assert json.dumps(op["value"]) in json.dumps(turn["state_before"]) and " whose " in op["reference"]
            else:
                assert json.dumps(op["value"], ensure_ascii=False) in earlier
            assert turn["query_raw"] != turn["query"]
        # refinement changes words, never calls
        assert [c["arguments"] for t in refined for c in t["calls"]] == [c["arguments"] for c in flat]
    assert applied > 0


def test_a_row_is_described_by_what_the_user_knows_only_when_a_list_tool_can_find_it(trajectories, environments):
    """ "the book whose title is 'Dune'" asks the agent to list the books; when listing that table needs an
    argument the user never gave, the agent could only guess, so the row keeps its identifier."""
    passed = [t for t in trajectories if t["status"] == "passed"]
    tools = {t["name"]: (e, t) for e, env in environments.items() for t in env["tools"]}

    def described(envs):
        out = set()
        for traj in passed:
            flat = [c for t in traj["turns"] for c in t["calls"]]
            for op in refine_turns(traj["turns"], envs)[1]:
                if op["obtainable_from"].startswith("state:"):
                    env_id, tool = tools[flat[op["call"]]["name"]]
                    table = (
                        tool["table"]
                        if op["argument"] == envs[env_id]["tables"][tool["table"]]["key"]
                        else envs[env_id]["tables"][tool["table"]]["foreign_keys"][op["argument"]]
                    )
                    out.add((env_id, table))
        return out

    before = described(environments)
    assert before
    env_id, table = sorted(before)[0]
    changed = copy.deepcopy(environments)
    for tool in changed[env_id]["tools"]:
        if tool["kind"] == "list" and tool["table"] == table:
            tool["input_schema"]["properties"]["region"] = {"type": "string"}
            tool["input_schema"]["required"] = [*tool["input_schema"].get("required", []), "region"]
    after = described(changed)
    assert (env_id, table) not in after and after == before - {(env_id, table)}


def test_rl_rows_replay_exactly_and_tampering_is_caught(trajectories, environments, worker):
    rows = [r for t in trajectories if t["status"] == "passed" for r in rl_rows(t, environments)]
    assert rows
    assert all(replay_check(r, worker) is None for r in rows)
    writer = next(r for r in rows if r["changes_state"])
    tampered = copy.deepcopy(writer)
    tampered["gold_calls"] = [
        c
        for c in tampered["gold_calls"]
        if not any(c["name"] == t["name"] and not t["read_only"] for e in environments.values() for t in e["tools"])
    ]
    assert replay_check(tampered, worker) is not None
    noop = {**copy.deepcopy(writer), "final_state_hash": state_hash(writer["initial_state"])}
    assert "no-op" in replay_check(noop, worker)


def _trimmed_as_before(row: dict, traj: dict) -> dict:
    """``row`` with the gold calls trimmed by the earlier rule: writes, reads a later call uses by provenance,
    the last read of a read-only turn."""
    offset = sum(len(t["calls"]) for t in traj["turns"][: row["turn_index"]])
    calls = traj["turns"][row["turn_index"]]["calls"]
    used = {p["call"] for c in calls for p in c["provenance"].values() if p.get("source") == "output"}
    keep = [i for i, c in enumerate(calls) if c["kind"] not in READ_KINDS or offset + i in used]
    if calls and all(c["kind"] in READ_KINDS for c in calls) and len(calls) - 1 not in keep:
        keep.append(len(calls) - 1)
    return {**row, "gold_calls": [row["executed_calls"][i] for i in keep]}


def test_the_turns_own_calls_win_every_rl_row_and_trimmed_reads_are_caught(trajectories, environments, worker):
    writers = {t["name"] for e in environments.values() for t in e["tools"] if not t["read_only"]}
    passed = [t for t in trajectories if t["status"] == "passed"]
    pairs = [(r, t) for t in passed for r in rl_rows(t, environments)]
    assert all(complete_answer_problem(r, worker, writers) is None for r, _t in pairs)
    for row, traj in pairs:  # the gold is every call the turn ran: its reply reports each one's result
        assert row["gold_calls"] == row["executed_calls"]
        assert len(row["gold_calls"]) == len(traj["turns"][row["turn_index"]]["calls"])
    # the earlier trimming left out reads the reply reports (the follow-up read of a row just written, a
    # look-up before acting): a model that makes them, as the turn did, was charged for them
    before = [_trimmed_as_before(r, t) for r, t in pairs]
    trimmed = [r for r in before if len(r["gold_calls"]) < len(r["executed_calls"])]
    assert trimmed
    for row in trimmed:
        assert "leave out the read" in complete_answer_problem(row, worker, writers)
        without = {k: v for k, v in row.items() if k != "executed_calls"}
        gold = {e: state_hash(s) for e, s in row["final_state"].items()}
        initial = {e: state_hash(s) for e, s in row["initial_state"].items()}
        charged = guarded_reward(
            row["gold_calls"],
            row["executed_calls"],
            gold,
            gold,
            initial,
            row["tools"],
            masked_arguments=row["masked_arguments"],
            reply=row["gold_reply"],
        )
        assert charged.reward < 1.0 and charged.n_extra == len(row["executed_calls"]) - len(row["gold_calls"])
        # the turn's own calls are never charged; a call the turn did not make still is (0.05 each)
        excused = guarded_reward(
            row["gold_calls"],
            row["executed_calls"],
            gold,
            gold,
            initial,
            row["tools"],
            masked_arguments=row["masked_arguments"],
            executed_calls=row["executed_calls"],
            reply=row["gold_reply"],
        )
        assert excused.n_extra == 0 and excused.length_penalty == 0.0
        other = {"name": row["executed_calls"][0]["name"], "arguments": {"not_an_argument": 1}}
        extra = guarded_reward(
            row["gold_calls"],
            [*row["executed_calls"], other],
            gold,
            gold,
            initial,
            row["tools"],
            masked_arguments=row["masked_arguments"],
            executed_calls=row["executed_calls"],
            reply=row["gold_reply"],
        )
        assert extra.n_extra == 1 and extra.length_penalty == 0.05
        assert "no executed_calls" in complete_answer_problem(without, worker, writers)
    # an abstention row: its gold is the reply that declines, no call; a row without that reply wins nothing
    row = pairs[0][0]
    abstention = {
        **row,
        "gold_calls": [],
        "executed_calls": [],
        "final_state": row["initial_state"],
        "gold_reply": "None of my tools can book a flight; a travel site can.",
    }
    assert complete_answer_problem(abstention, worker, writers) is None
    assert "no gold_reply" in complete_answer_problem({**abstention, "gold_reply": ""}, worker, writers)
    assert all(r["gold_reply"] == t["turns"][r["turn_index"]]["assistant_summary"] for r, t in pairs)


def test_essential_calls_are_every_call_of_the_turn():
    calls = [
        {"kind": "list", "provenance": {}},
        {"kind": "delete", "provenance": {}},
        {"kind": "get", "provenance": {}},
    ]
    assert essential_calls(calls) == [0, 1, 2]
    assert essential_calls([]) == []


def test_sft_messages_are_openai_chat_with_json_string_arguments(trajectories, environments):
    traj = next(t for t in trajectories if t["status"] == "passed")
    row = sft_row(traj, environments)
    assert row["messages"][0]["role"] == "system"
    calls = [m for m in row["messages"] if m.get("tool_calls")]
    assert calls and all(isinstance(m["tool_calls"][0]["function"]["arguments"], str) for m in calls)
    tool_msgs = [m for m in row["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == len(calls)
    messages = to_messages(
        [
            {
                "query": "Créer «café»",
                "assistant_summary": "ok",
                "calls": [{"name": "x", "arguments": {"title": "東京"}, "output": {"ok": "é"}}],
            }
        ]
    )
    assert "東京" in messages[2]["tool_calls"][0]["function"]["arguments"]
    assert split_of("raw_1") == split_of("raw_1") and {split_of(f"r{i}") for i in range(50)} == {"sft", "rl"}


def _values_before(turns: list[dict], t_idx: int) -> str:
    """What exists when turn ``t_idx`` is asked: its starting state and every earlier turn's results."""
    return json.dumps(
        [turns[t_idx]["state_before"]] + [c["output"] for t in turns[:t_idx] for c in t["calls"]], ensure_ascii=False
    )


def test_no_query_quotes_a_value_that_does_not_exist_yet(trajectories, environments):
    """An identifier a create call of the same turn assigns is named by what creates it, in the raw query
    (which calibration may fall back to) and in the refined one."""
    checked = 0
    for traj in (t for t in trajectories if t["status"] == "passed"):
        refined, _ = refine_turns(traj["turns"], environments, seed="t", persona="a shop owner")
        for t_idx, turn in enumerate(refined):
            before = _values_before(refined, t_idx)
            created = [
                c["output"][k]
                for c in turn["calls"]
                if c["kind"] == "create" and isinstance(c["output"], dict)
                for k in c["output"]
                if k.endswith("_id") and isinstance(c["output"][k], str)
            ]
            for value in created:
                if json.dumps(value) in before:
                    continue
                checked += 1
                assert f"'{value}'" not in turn["query_raw"], (value, turn["query_raw"])
                assert f"'{value}'" not in turn["query"], (value, turn["query"])
    assert checked > 0


def test_every_gold_argument_is_given_by_the_user_or_masked(trajectories, environments):
    """An RL row's gold argument is stated in the conversation (literally, as a spoken date or yes/no, or as
    a value an earlier result or the starting state holds for a named row), or masked as not mattering, and
    a masked argument is never required by its tool."""
    from envfactory_assets.synth.refinement.phrasing import spoken_forms

    schemas = {t["name"]: t["input_schema"] for e in environments.values() for t in e["tools"]}
    rows_checked = 0
    for n, traj in enumerate(t for t in trajectories if t["status"] == "passed"):
        refined, _ = refine_turns(traj["turns"], environments, seed=f"g{n}")
        for row, turn in zip(rl_rows({**traj, "turns": refined}, environments), refined, strict=False):
            prompt = json.dumps(row["prompt"], ensure_ascii=False)
            state = json.dumps(turn["state_before"], ensure_ascii=False)
            for call in row["gold_calls"]:
                for arg, value in call["arguments"].items():
                    if arg in row["masked_arguments"]:
                        # masked: optional, and either stated or the value the API assumes when it is left out
                        schema = schemas[call["name"]]
                        assert arg not in schema.get("required", [])
                        stated = re.search(rf"\b{value}\b", turn["query"]) is not None
                        assert stated or value == parameter_default(schema["properties"][arg]), (
                            arg,
                            value,
                            turn["query"],
                        )
                        continue
                    given = (
                        json.dumps(value, ensure_ascii=False) in prompt
                        or any(f in turn["query"] for f in spoken_forms(value))
                        or str(value) in turn["query"]
                    )
                    named = json.dumps(value, ensure_ascii=False) in prompt + state or json.dumps(value) in json.dumps(
                        [c["output"] for c in turn["calls"]]
                    )
                    assert given or (arg.endswith("_id") and named), (arg, value, turn["query"])
            rows_checked += 1
    assert rows_checked > 0


def test_refined_queries_read_as_a_person_writes(trajectories, environments):
    """Several sentence plans, spoken names, the persona's register, no ordinal references, and the figures
    targets on the fixtures: literal identifiers in at most 15% of turns taking one, refined != raw in 80%."""
    from envfactory_assets.synth.refinement.report import query_statistics

    rows = []
    for n, traj in enumerate(t for t in trajectories if t["status"] == "passed"):
        refined, _ = refine_turns(traj["turns"], environments, seed=f"p{n}", persona="a librarian")
        rows.append({"status": "passed", "turns": refined})
    queries = [t["query"] for r in rows for t in r["turns"]]
    assert not any(" in that list" in q for q in queries)
    openers = {q.split()[0] for q in queries}
    assert len(openers) >= 4, openers
    assert any(q.startswith(("Hello", "Good morning")) for q in queries)
    stats = query_statistics(rows)
    raw = query_statistics(rows, field="query_raw")
    assert stats["literal_identifier_share"] <= 0.15 < raw["literal_identifier_share"], (stats, raw)
    assert stats["refined_differs_share"] >= 0.8
    assert stats["distinct_trigrams_per_1000"] >= 1.3 * raw["distinct_trigrams_per_1000"]
    replies = {t["assistant_summary"].split()[0] for r in rows for t in r["turns"]}
    assert len(replies) >= 3, replies


def test_a_description_phrase_that_labels_two_fields_names_neither():
    """Both timestamps of a bundle are "The date and time ...": the request names each by its own words, so
    the solver (which reads labels back) cannot put one date into the other field."""
    import random

    from envfactory_assets.synth.refinement.phrasing import describe_call
    from envfactory_assets.synth.refinement.solver.base import SolverView
    from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver

    stamp = {"type": "string", "format": "date-time"}
    tool = {
        "name": "create_bundle",
        "kind": "create",
        "table": "bundles",
        "description": "Create a bundle",
        "input_schema": {
            "type": "object",
            "properties": {
                "date_created": {**stamp, "description": "The date and time in GMT when the bundle was created."},
                "date_updated": {**stamp, "description": "The date and time in GMT when the bundle was last updated."},
                "email": {"type": "string", "description": "The email address of the bundle's owner."},
            },
        },
    }
    args = {"date_updated": "2024-04-28T16:21:00Z", "email": "kim@example.org"}
    spec = {
        "type": "function",
        "function": {"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]},
    }
    for seed in range(12):
        text = describe_call(tool, "bundle_id", args, rng=random.Random(seed))
        assert "date and time" not in text and "date updated" in text, text
        made = []
        ProgrammaticSolver().attempt(
            SolverView.for_turn([], text[0].upper() + text[1:] + ".", [spec]),
            lambda name, a, made=made: made.append((name, a)) or {"ok": True, "output": {}},
            seed,
        )
        assert made == [("create_bundle", args)], (text, made)


def test_a_value_created_in_the_turn_is_named_by_what_created_it_whichever_result_carries_it():
    from envfactory_assets.synth.refinement.phrasing import new_value_refs

    tools = {
        "create_book": {"table": "books"},
        "get_book": {"table": "books"},
        "create_review": {"table": "reviews"},
        "update_book": {"table": "books"},
    }
    keys = {"books": "book_id", "reviews": "review_id"}
    key_of = lambda name: keys[tools[name]["table"]]  # noqa: E731
    history = [
        {"name": "create_book", "kind": "create", "output": {"book_id": "boo_9", "title": "Dune"}},
        {"name": "get_book", "kind": "get", "output": {"book_id": "boo_9", "title": "Dune"}},
        # a review of a book that existed before the turn: it carries boo_1, it did not create it
        {"name": "create_review", "kind": "create", "output": {"review_id": "rev_3", "book_id": "boo_1"}},
    ]
    via_lookup = {
        "arguments": {"book_id": "boo_9"},
        "provenance": {"book_id": {"source": "output", "call": 1, "path": "book_id"}},
    }
    assert new_value_refs(via_lookup, history, 0, tools, key_of) == {"book_id": "the new book"}
    carried = {
        "arguments": {"book_id": "boo_1"},
        "provenance": {"book_id": {"source": "output", "call": 2, "path": "book_id"}},
    }
    assert new_value_refs(carried, history, 0, tools, key_of) == {}
    assert new_value_refs(via_lookup, history, 2, tools, key_of) == {}  # created in an earlier turn


def test_a_row_created_earlier_in_the_episode_is_named_not_quoted_when_drawn_from_the_state(
    environments, graph, worker
):
    """A create then an update of a row drawn from the live state (no producer edge): when the draw lands on
    the new row, its id came from the create's result, and the raw query names it instead of quoting it."""
    from envfactory_assets.synth.sampling.sampler import Chain

    env_id = "bookshop_example"
    tools = (f"{env_id}.books_create", f"{env_id}.update_book")
    hits = 0
    for seed in range(60):
        chain = Chain(tools=tools, servers=(env_id,), seed=seed, sampler="topology")
        traj = synthesize_trajectory(chain, graph, environments, worker, SynthConfig(min_turns=1, max_turn_len=2))
        if traj["status"] != "passed" or len(traj["turns"]) != 1:
            continue
        create, update = traj["turns"][0]["calls"]
        new_id = create["output"]["book_id"]
        if update["arguments"].get("book_id") != new_id:
            assert update["provenance"]["book_id"] == {"source": "state"}
            continue
        hits += 1
        assert update["provenance"]["book_id"] == {"source": "output", "call": 0, "path": "book_id"}
        assert new_id not in traj["turns"][0]["query"], traj["turns"][0]["query"]
        assert "the new book" in traj["turns"][0]["query"]
    assert hits > 0


def test_goal_merging_never_joins_a_request_to_one_quoting_what_it_creates():
    from envfactory_assets.synth.refinement.operators import merge_goals

    def turn(query, calls):
        return {
            "query": query,
            "query_raw": query,
            "calls": calls,
            "intent": [],
            "target_tools": [],
            "assistant_summary": "",
            "operators": [],
            "state_before": {},
            "state_after": {},
            "state_after_hash": "",
            "turn_index": 0,
        }

    create = {
        "kind": "create",
        "name": "create_score",
        "arguments": {"title": "A"},
        "output": {"score_id": "sco_25", "title": "A"},
    }
    listing = {"kind": "list", "name": "list_tracks", "arguments": {"score_id": "sco_25"}, "output": {"items": []}}
    other = {"kind": "list", "name": "list_tracks", "arguments": {"score_id": "sco_1"}, "output": {"items": []}}
    # three calls: too many to merge, so the first pair is the only candidate
    tail = turn("Show me the scores.", [{"kind": "list", "name": "list_scores", "arguments": {}, "output": {}}] * 3)
    quoting = [
        turn("Create a score titled 'A'.", [create]),
        turn("List the tracks of score 'sco_25'.", [listing]),
        tail,
    ]
    assert [t["query"] for t in merge_goals(copy.deepcopy(quoting))] == [t["query"] for t in quoting]
    apart = [turn("Create a score titled 'A'.", [create]), turn("List the tracks of score 'sco_1'.", [other]), tail]
    merged = merge_goals(copy.deepcopy(apart))
    assert len(merged) == 2 and merged[0]["operators"][-1]["operator"] == "goal_merging"


def test_a_table_listed_only_per_parent_is_scoped_by_the_parent_identifier():
    from envfactory_assets.synth.trajectories.execution import ToolIndex

    def tool(name, kind, table, required, props=("limit",)):
        schema = {
            "type": "object",
            "properties": {p: {"type": "string"} for p in (*props, *required)},
            "required": list(required),
        }
        return {"name": name, "kind": kind, "table": table, "input_schema": schema}

    env = {
        "env_id": "spaces",
        "tables": {
            "groups": {"key": "group_id", "foreign_keys": {"space_id": "spaces"}},
            "spaces": {"key": "space_id", "foreign_keys": {}},
        },
        "tools": [
            tool("list_groups", "list", "groups", ("space_id",)),
            tool("get_group", "get", "groups", ("group_id",)),
            tool("list_spaces", "list", "spaces", ()),
        ],
    }
    index = ToolIndex({"spaces": env})
    assert index.list_scope("spaces", "groups") == ("space_id",)
    assert index.list_scope("spaces", "spaces") is None  # listable as is: no scope needed
    assert not index.listable("spaces", "groups") and index.listable("spaces", "spaces")


def test_a_listed_row_nothing_tells_apart_is_named_by_its_place_in_the_list():
    from envfactory_assets.synth.refinement.operators import _reference

    items = [{"payee_id": f"pay_{i}", "created_at": "2024-01-01T00:00:00Z"} for i in range(5)]
    listing = {"kind": "list", "output": {"items": items}}
    assert _reference(listing, "items[1].payee_id", True, "payees") == "the second payee in that list"
    assert _reference(listing, "items[4].payee_id", True, "payees") is None  # too far down to point at
    named = {
        "kind": "list",
        "output": {"items": [{"payee_id": "pay_1", "name": "Ann"}, {"payee_id": "pay_2", "name": "Bo"}]},
    }
    assert _reference(named, "items[1].payee_id", True, "payees") == "the payee whose name is 'Bo'"


def test_an_identifier_copied_from_a_listed_row_is_named_by_that_row():
    from envfactory_assets.synth.refinement.operators import _copied_from_row

    items = [
        {"course_id": "cou_1", "name": "Staging", "calendar_id": "cal_7"},
        {"course_id": "cou_2", "name": "Mobile", "calendar_id": "cal_9"},
    ]
    listing = {"kind": "list", "name": "list_courses", "output": {"items": items}}
    prov = {"source": "output", "call": 0, "path": "items[1].calendar_id"}
    rng = random.Random(0)
    assert _copied_from_row(listing, prov, "calendar_id", [listing], 1, "courses", False, True, rng) == (
        "same as the course whose name is 'Mobile'"
    )
    assert _copied_from_row(listing, prov, "title", [listing], 1, "courses", False, True, rng) is None  # a value
    # a looked-up row's foreign key: the user names the row it points at through the row they saw
    lookup = {"kind": "get", "name": "get_course", "output": items[1]}
    single = {**prov, "path": "calendar_id"}
    for seed in range(6):
        phrase = _copied_from_row(
            lookup, single, "calendar_id", [lookup], 1, "courses", False, True, random.Random(seed)
        )
        assert phrase in (
            "the calendar of that course",
            "the calendar of this course",
            "the calendar of the same course",
        ), phrase
    created = {"kind": "create", "name": "create_course", "output": items[0]}
    assert _copied_from_row(created, single, "calendar_id", [created], 1, "courses", True, True, rng).startswith(
        "the calendar of the "
    )  # "... of the new course"
    # not for an identifier that names no row (a display id), nor once a later result carries the field
    assert _copied_from_row(lookup, single, "calendar_id", [lookup], 1, "courses", False, False, rng) is None
    later = {"kind": "get", "name": "get_calendar", "output": {"calendar_id": "cal_1"}}
    assert _copied_from_row(lookup, single, "calendar_id", [lookup, later], 2, "courses", False, True, rng) is None


def test_refinement_refuses_an_operator_it_does_not_know(trajectories, environments):
    traj = trajectories[0]
    with pytest.raises(ValueError, match="unknown operators"):
        refine_turns(traj["turns"], environments, operators=REFINEMENT_OPERATORS | {"paraphrase"})


def test_a_narrower_draw_applies_only_its_operators_and_never_quotes_a_value_not_assigned_yet(
    trajectories, environments
):
    narrow = frozenset({"implicit_reference"})
    checked = 0
    for n, traj in enumerate(trajectories):
        full, _ = refine_turns(traj["turns"], environments, seed=f"n{n}")
        for state_references in (True, False):
            turns, ops = refine_turns(
                traj["turns"], environments, seed=f"n{n}", operators=narrow, state_references=state_references
            )
            assert {o["operator"] for o in ops} <= narrow
            if not state_references:
                assert not any(o["obtainable_from"].startswith("state") for o in ops)
            assert all(not future_identifiers(turns, i) for i in range(len(turns)))
            checked += sum(1 for a, b in zip(full, turns, strict=False) if a["query"] != b["query"])
    assert checked > 0  # the fixture chains carry operators the narrower draws leave out


def test_an_update_never_asks_to_set_a_field_to_the_value_it_holds(trajectories, environments):
    """Where an earlier call of the trajectory showed the row (and no call wrote it since), no optional argument
    of an update repeats a value the row held: "set its currency to 'CHF'" of a row in CHF asks for nothing."""
    tools = {t["name"]: t for env in environments.values() for t in env["tools"]}
    checked = 0
    for traj in (t for t in trajectories if t["status"] == "passed"):
        flat = [c for t in traj["turns"] for c in t["calls"]]
        for i, call in enumerate(flat):
            tool = tools[call["name"]]
            if tool["kind"] != "update" or call.get("error"):
                continue
            required = set(tool["input_schema"].get("required", []))
            key = next(k for k in required if k in call["arguments"] and k.endswith("_id"))
            shown = None
            for earlier in reversed(flat[:i]):
                rows = earlier["output"].get("items", [earlier["output"]])
                row = next((r for r in rows if isinstance(r, dict) and r.get(key) == call["arguments"][key]), None)
                if row is not None:
                    shown = None if tools[earlier["name"]]["kind"] not in READ_KINDS | {"create", "update"} else row
                    break
            if shown is None:
                continue
            checked += 1
            repeated = {n: v for n, v in call["arguments"].items() if n not in required and shown.get(n) == v}
            assert not repeated, (call["name"], repeated, shown)
    assert checked >= 3
