"""Same-tool parallel turns (one read tool called for two or three targets in one assistant message) on the
fixture environments: executed in the sandbox, replayed as RL rows, won by their own answer, rendered and
parsed back through the chat template, asked for in the request, and set by their share."""

from __future__ import annotations

import json
import random

import pytest

from envfactory_assets.config_checks import SettingError
from envfactory_assets.envgen.tools import READ_KINDS
from envfactory_assets.synth.datasets.datagaps import DataGapsConfig, GapStats, augment_trajectory, turn_kinds
from envfactory_assets.synth.datasets.rows import complete_answer_problem, replay_check, rl_rows, sft_row
from envfactory_assets.synth.refinement.phrasing import spoken_forms
from envfactory_assets.synth.trajectories.same_tool_parallel import same_tool_parallel_turn
from envfactory_assets_tests.fixture_environments import (
    THREE_DOMAINS,
    build_fixture_environments,
    refined_like_rows,
)

ONLY = DataGapsConfig(abstention_share=0.0, parallel_share=0.0, conversion_share=0.0, same_tool_parallel_share=0.5)


@pytest.fixture(scope="module")
def environments() -> dict:
    return build_fixture_environments(*THREE_DOMAINS)


@pytest.fixture(scope="module")
def trajectories(environments, worker) -> list[dict]:
    return refined_like_rows(environments, worker, 30, "same-tool")


@pytest.fixture(scope="module")
def made(trajectories, environments, worker) -> list[tuple[dict, int, dict]]:
    out = []
    for k, traj in enumerate(trajectories):
        position = k % (len(traj["turns"]) + 1)
        turn = same_tool_parallel_turn(traj, environments, position, random.Random(k), worker)
        if turn is not None:
            out.append((traj, position, turn))
    return out


def _with(traj: dict, position: int, turn: dict) -> dict:
    turns = traj["turns"][:position] + [turn] + traj["turns"][position:]
    return {**traj, "turns": [{**t, "turn_index": i} for i, t in enumerate(turns)], "n_turns": len(turns)}


def test_a_turn_calls_one_read_tool_for_distinct_targets_and_changes_nothing(made, environments):
    assert len(made) >= 20
    kinds = set()
    for _, _, turn in made:
        names = {c["name"] for c in turn["calls"]}
        assert len(names) == 1 and 2 <= len(turn["calls"]) <= 3
        arguments = [json.dumps(c["arguments"], sort_keys=True) for c in turn["calls"]]
        assert len(set(arguments)) == len(arguments)  # every call a different target
        assert {len(c["arguments"]) for c in turn["calls"]} == {1}
        assert all(c["kind"] in READ_KINDS for c in turn["calls"])
        assert turn["state_before_hash"] == turn["state_after_hash"]
        assert turn["call_groups"] == [list(range(len(turn["calls"])))]
        assert turn_kinds(turn) == {"parallel", "same_tool_parallel"}
        kinds.add(turn["calls"][0]["kind"])
    assert {"get", "list"} <= kinds


def test_the_request_states_every_target_and_the_reply_is_not_empty(made):
    for _, _, turn in made:
        query = turn["query"]
        for call in turn["calls"]:
            (value,) = call["arguments"].values()
            assert any(form in query for form in spoken_forms(value)), (query, value)
        assert turn["assistant_summary"].strip()
        # the reply tells the targets apart: each one named (a key as the request gave it, a filter quoted)
        for call in turn["calls"]:
            (value,) = call["arguments"].values()
            assert str(value) in turn["assistant_summary"], (turn["assistant_summary"], value)


def test_its_rl_row_replays_and_is_won_by_the_turns_own_answer(made, environments, worker):
    writers = {t["name"] for e in environments.values() for t in e["tools"] if t["kind"] not in READ_KINDS}
    for traj, position, turn in made:
        aug = _with(traj, position, turn)
        row = next(r for r in rl_rows(aug, environments) if r["turn_index"] == position)
        assert [c["name"] for c in row["gold_calls"]] == [c["name"] for c in turn["calls"]]
        assert not row["changes_state"]
        assert replay_check(row, worker) is None
        assert complete_answer_problem(row, worker, writers) is None
        # the states of the turns after it are untouched: their rows replay as before
        for later in rl_rows(aug, environments)[position + 1 :]:
            assert replay_check(later, worker) is None


def test_the_sft_message_round_trips_through_the_chat_template_and_the_parser(made, environments):
    """The turn's calls are one assistant message; the project's chat template renders it and the tool-call
    parser the evaluation uses reads back exactly those calls, the same function several times."""
    from envfactory_assets.tooluse.chat_template import render_chat
    from envfactory_assets.tooluse.tool_calls import parse_tool_calls

    for traj, position, turn in made[:10]:
        row = sft_row(_with(traj, position, turn), environments)
        messages = row["messages"]
        i = messages.index({"role": "user", "content": turn["query"]})
        message = messages[i + 1]
        assert [c["function"]["name"] for c in message["tool_calls"]] == [c["name"] for c in turn["calls"]]
        prompt = render_chat(messages[: i + 1], tools=row["tools"], add_generation_prompt=True)
        rendered = render_chat(messages[: i + 2], tools=row["tools"])
        parsed = parse_tool_calls(rendered[len(prompt) :])
        assert parsed.format_errors == 0
        assert parsed.calls == [{"name": c["name"], "arguments": c["arguments"]} for c in turn["calls"]]


def test_the_share_sets_the_sft_rows_that_end_on_one_and_zero_turns_it_off(trajectories, environments, worker):
    stats = GapStats()
    for traj in trajectories * 3:
        traj = {**traj, "id": f"{traj['id']}/{len(stats.sft_last_turn) + stats.sft_rows}"}
        out = augment_trajectory(traj, environments, "sft", ONLY, worker)
        assert len(out["turns"]) - len(traj["turns"]) in (0, 1)
        assert out["turns"][: len(traj["turns"])] == traj["turns"]  # added last, the rest as it was
        stats.add_sft(out["turns"])
    share = stats.shares()["sft_last_turn"]["same_tool_parallel"]
    assert 0.3 <= share <= 0.6, share
    off = DataGapsConfig(abstention_share=0.0, parallel_share=0.0, conversion_share=0.0, same_tool_parallel_share=0)
    assert all(augment_trajectory(t, environments, "sft", off, worker) == t for t in trajectories)
    # without a worker nothing can be executed, so no turn is added
    assert all(augment_trajectory(t, environments, "sft", ONLY, None) == t for t in trajectories)


def test_an_rl_trajectory_gets_one_anywhere_and_every_row_still_replays(trajectories, environments, worker):
    stats, positions = GapStats(), set()
    for traj in trajectories:
        out = augment_trajectory(traj, environments, "rl", ONLY, worker)
        for i, turn in enumerate(out["turns"]):
            if turn.get("same_tool_parallel"):
                positions.add("last" if i == len(out["turns"]) - 1 else "inside")
        for row in rl_rows(out, environments):
            assert replay_check(row, worker) is None
            stats.add_rl(out["turns"][row["turn_index"]], row["gold_calls"])
    assert positions == {"last", "inside"}
    assert stats.rl["same_tool_parallel"] >= 5


def test_a_share_out_of_range_is_refused_naming_it():
    for bad in (0.8, -0.1, float("nan")):
        with pytest.raises(SettingError, match="same_tool_parallel_share"):
            DataGapsConfig(same_tool_parallel_share=bad)


def test_a_position_outside_the_trajectory_is_refused(trajectories, environments, worker):
    traj = trajectories[0]
    with pytest.raises(ValueError, match=f"position {len(traj['turns']) + 1}"):
        same_tool_parallel_turn(traj, environments, len(traj["turns"]) + 1, random.Random(0), worker)


def test_the_training_mix_keeps_same_tool_turns_as_their_own_kind_even_past_the_token_cut(trajectories, environments):
    """``example_kind`` tells a same-tool parallel turn from parallel calls of different tools, and the
    stratified mix keeps a row's same-tool last turn alone when the cut drops it from the row."""
    from envfactory_assets.synth.stage import dataset_rows
    from envfactory_assets.training.stage import example_kind, training_examples

    gaps = DataGapsConfig(abstention_share=0.0, parallel_share=1.0, conversion_share=0.0, same_tool_parallel_share=0.5)
    sft, _, _ = dataset_rows(trajectories, environments, 1.0, gaps=gaps)
    kinds = {r["id"]: example_kind(r) for r in sft}

    def last_turn_groups(row):
        last_user = max(i for i, m in enumerate(row["messages"]) if m["role"] == "user")
        return [
            [c["function"]["name"] for c in m["tool_calls"]] for m in row["messages"][last_user:] if m.get("tool_calls")
        ]

    ends = [r for r in sft if kinds[r["id"]] == "same_tool_parallel"]
    assert len(ends) >= 5
    assert all(any(len(g) >= 2 and len(set(g)) == 1 for g in last_turn_groups(r)) for r in ends)
    # a chain's parallel group calls different tools: that stays "parallel"
    mixed = [r for r in sft if kinds[r["id"]] == "parallel"]
    assert mixed and all(len(set(g)) == len(g) for r in mixed for g in last_turn_groups(r))
    examples = training_examples(sft, len(sft) * 2, max_tokens=700, mix="stratified")
    alone = [e for e in examples if e["id"].endswith("#last_turn") and example_kind(e) == "same_tool_parallel"]
    assert alone, "no same-tool last turn was kept alone past the cut"
    assert all(sum(m["role"] == "user" for m in e["messages"]) == 1 for e in alone)


def test_the_reply_tells_the_targets_apart_for_every_read_kind(environments):
    """Each sentence of a reply to several calls of one tool names what its call was for: a count says which
    filter it counted, a keyed read names the key beside the row's label; without ``name_rows`` the plain
    sentences are unchanged."""
    from envfactory_assets.synth.refinement.replies import write_reply
    from envfactory_assets.synth.trajectories.execution import ToolIndex

    index = ToolIndex(environments)
    books = index.tools["books_list"]
    key = index.key_of(books)
    # the fixture documents have no count operation: the same table and filter as a count
    count = {**books, "name": "count_books", "kind": "count"}
    tools = {**index.tools, "count_books": count}
    counted = [
        {"name": "count_books", "arguments": {"genre": v}, "output": {"count": 1}} for v in ("fiction", "history")
    ]
    listed = [
        {"name": "books_list", "arguments": {"genre": v}, "output": {"items": [{key: f"boo_{v}", "genre": v}]}}
        for v in ("fiction", "history")
    ]
    for calls in (counted, listed):
        for seed in range(20):
            reply = write_reply(calls, tools, lambda tool: key, f"s{seed}", name_rows=True)
            assert "'fiction'" in reply and "'history'" in reply, reply
    plain = [write_reply(counted, tools, lambda tool: key, f"s{seed}") for seed in range(20)]
    assert not any("'fiction'" in r for r in plain)


def _one_turn_with_state(traj: dict, state: dict) -> dict:
    from envfactory_assets.runtime.canonical import state_hash

    digest = state_hash(state)
    turn = {**traj["turns"][0], "state_before": state, "state_after": state}
    turn.update(state_before_hash=digest, state_after_hash=digest)
    return {**traj, "turns": [turn]}


def test_a_key_a_person_cannot_state_is_never_a_target(trajectories, environments, worker):
    """A key with a control character or spaces around it cannot be typed back into a call from the request
    (a carriage return, a tab, a padded identifier): its row is never one of the targets."""
    traj = next(t for t in trajectories if t["env_ids"] == ["bookshop_example"])
    for bad in ("cr\rhere", "tab\there", " padded "):
        state = json.loads(json.dumps(traj["turns"][0]["state_before"]))
        books = state["bookshop_example"]["tables"]["books"]
        books[0]["book_id"] = bad
        aug = _one_turn_with_state(traj, state)
        for seed in range(12):
            turn = same_tool_parallel_turn(aug, environments, 1, random.Random(seed), worker)
            assert turn is None or all(bad not in c["arguments"].values() for c in turn["calls"]), turn["query"]


def test_a_search_is_never_asked_for_without_its_text():
    """A same-tool turn over a search varies a filter, never the searched text, so its request would read
    "search the tickets for  where status is 'open'": searches are left out of the plans."""
    from envfactory_assets.synth.trajectories.execution import ToolIndex
    from envfactory_assets.synth.trajectories.same_tool_parallel import _plans

    props = {"query": {"type": "string"}, "status": {"type": "string"}}
    tool = {"name": "search_tickets", "kind": "search", "table": "tickets", "description": "Search tickets"}
    tool["input_schema"] = {"type": "object", "properties": props, "required": []}
    env = {"env_id": "desk", "tools": [tool], "tables": {"tickets": {"key": "ticket_id"}}}
    state = {"desk": {"tables": {"tickets": [{"ticket_id": f"t{i}", "status": s} for i, s in enumerate("ab")]}}}
    index = ToolIndex({"desk": env})
    assert _plans(index, ["desk"], state) == []


def test_a_position_that_is_not_a_whole_number_is_refused_naming_it(trajectories, environments, worker):
    traj = trajectories[0]
    for bad in (True, 1.0, "1", None):
        with pytest.raises(ValueError, match="position"):
            same_tool_parallel_turn(traj, environments, bad, random.Random(0), worker)


def test_the_reply_names_each_target_even_when_the_result_does_not_show_it(environments):
    """A read that found nothing, a count whose output is not a number and a keyed read whose row does not
    hold its key under the argument's name still say which target each sentence is about."""
    from envfactory_assets.synth.refinement.replies import write_reply
    from envfactory_assets.synth.trajectories.execution import ToolIndex

    index = ToolIndex(environments)
    books, get_book = index.tools["books_list"], index.tools["get_book"]
    key = index.key_of(books)
    tools = {**index.tools, "count_books": {**books, "name": "count_books", "kind": "count"}}
    genres = ("fiction", "history")
    empty = [{"name": "books_list", "arguments": {"genre": v}, "output": {"items": [], "total": 0}} for v in genres]
    vague = [{"name": "count_books", "arguments": {"genre": v}, "output": {"count": "many"}} for v in genres]
    keyless = [
        {"name": "get_book", "arguments": {key: k}, "output": {"title": f"Title {k}", "genre": "fiction"}}
        for k in ("boo_1", "boo_2")
    ]
    assert get_book["kind"] == "get"
    for calls, said in (
        (empty, ("'fiction'", "'history'")),
        (vague, ("'fiction'", "'history'")),
        (keyless, ("boo_1", "boo_2")),
    ):
        for seed in range(20):
            reply = write_reply(calls, tools, lambda tool: key, f"s{seed}", name_rows=True)
            assert all(s in reply for s in said), reply
