"""The hybrid reward on hand-built cases, and rollouts scored through a real sandboxed environment."""

from __future__ import annotations

import copy
import json

import pytest

from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.tooluse.reward import (
    arguments_that_matter,
    empty_argument_calls,
    guarded_reward,
    hybrid_reward,
    is_empty_call,
    match_calls,
    state_match,
)
from envfactory_assets.tooluse.task_episode import ArgumentsTooLarge, TaskRunner

GOLD = [
    {"name": "list_books", "arguments": {"genre": "fiction", "limit": 5}},
    {"name": "update_book", "arguments": {"book_id": "b1", "price": 9.5}},
]
HASHES = {"shop": "aaa", "calendar": "bbb"}


def reward(predicted, final=HASHES, n_malformed=0, masked=("limit",)):
    return hybrid_reward(GOLD, predicted, final, HASHES, masked_arguments=masked, n_malformed=n_malformed)


def test_exact_match_in_any_order_scores_one():
    r = reward(list(reversed(GOLD)))
    assert (r.reward, r.trace, r.state, r.n_extra) == (1.0, 1.0, 1.0, 0)


def test_missing_call_loses_the_trace_half():
    r = reward(GOLD[:1])
    assert r.matched_gold == (True, False)
    assert (r.trace, r.reward) == (0.0, 0.5)


def test_extra_calls_cost_five_hundredths_each_capped_at_half():
    noise = {"name": "get_book", "arguments": {"book_id": "b2"}}
    assert reward(GOLD + [noise] * 3).reward == pytest.approx(0.85)
    capped = reward(GOLD + [noise] * 30)
    assert (capped.n_extra, capped.length_penalty, capped.reward) == (30, 0.5, 0.5)


def test_masked_argument_value_does_not_matter_but_an_unmasked_one_does():
    masked_diff = [{"name": "list_books", "arguments": {"genre": "fiction", "limit": 50}}, GOLD[1]]
    assert reward(masked_diff).trace == 1.0
    assert reward(masked_diff, masked=()).trace == 0.0
    wrong_price = [GOLD[0], {"name": "update_book", "arguments": {"book_id": "b1", "price": 9.0}}]
    r = reward(wrong_price)
    assert r.matched_gold == (True, False) and r.n_extra == 1
    assert r.reward == pytest.approx(0.45)


def test_malformed_calls_are_penalized_and_the_reward_never_goes_below_zero():
    assert reward(GOLD, n_malformed=2).reward == pytest.approx(0.9)
    r = reward([], final={}, n_malformed=40)
    assert (r.format_penalty, r.reward) == (0.5, 0.0)
    with pytest.raises(ValueError, match="n_malformed"):
        reward(GOLD, n_malformed=-1)


@pytest.mark.parametrize("bad", [float("nan"), -1, True, 1.0, "2", None])
def test_a_malformed_count_that_is_no_whole_number_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"n_malformed must be a whole number >= 0"):
        reward(GOLD, n_malformed=bad)
    with pytest.raises(ValueError, match=r"n_malformed must be a whole number >= 0"):
        guarded_reward(GOLD, GOLD, HASHES, HASHES, HASHES, [], n_malformed=bad, reply="done")


def test_arguments_match_as_json_numbers_and_booleans_are_no_numbers():
    gold = [{"name": "set_stock", "arguments": {"book_id": "b1", "count": 12, "shelf": {"row": 1, "ids": [3, 4]}}}]
    as_floats = [
        {"name": "set_stock", "arguments": {"book_id": "b1", "count": 12.0, "shelf": {"row": 1.0, "ids": [3.0, 4]}}}
    ]
    assert match_calls(gold, as_floats) == ([True], 0)
    assert match_calls(as_floats, gold) == ([True], 0)
    assert match_calls(gold, [{"name": "set_stock", "arguments": {**gold[0]["arguments"], "count": 12.5}}])[0] == [
        False
    ]
    flags = [{"name": "set_flag", "arguments": {"on": True, "level": 0}}]
    for wrong in ({"on": 1, "level": 0}, {"on": True, "level": False}, {"on": 1.0, "level": 0.0}):
        assert match_calls(flags, [{"name": "set_flag", "arguments": wrong}])[0] == [False], wrong
    # a default written as 10 is met by 10.0 as well
    tools = [
        {
            "type": "function",
            "function": {
                "name": "list_orders",
                "parameters": {"type": "object", "properties": {"limit": {"type": "integer", "default": 10}}},
            },
        }
    ]
    assert is_empty_call({"name": "list_orders", "arguments": {"limit": 10.0}}, tools)
    assert not is_empty_call({"name": "list_orders", "arguments": {"limit": True}}, tools)


def test_partial_state_match_is_the_share_of_matching_environments():
    assert state_match({"shop": "aaa", "calendar": "zzz"}, HASHES) == 0.5
    assert reward(GOLD, final={"shop": "aaa"}).reward == pytest.approx(0.75)
    with pytest.raises(ValueError, match="gold_state_hashes"):
        state_match({}, {})


def test_duplicate_gold_calls_need_distinct_predicted_calls():
    gold = [{"name": "ping", "arguments": {}}] * 2
    assert match_calls(gold, gold[:1]) == ([True, False], 0)
    assert match_calls(gold, gold * 2) == ([True, True], 2)


def test_arguments_that_are_not_an_object_are_an_error():
    with pytest.raises(ValueError, match="JSON object"):
        match_calls(GOLD, [{"name": "list_books", "arguments": "genre=fiction"}])


@pytest.fixture(scope="module")
def runner(bookshop):
    with TaskRunner({bookshop["env_id"]: bookshop}) as r:
        yield r


@pytest.fixture(scope="module")
def task(bookshop, runner) -> dict:
    """An RL row whose gold final state comes from executing its gold calls in the sandbox."""
    env_id = bookshop["env_id"]
    initial = {env_id: copy.deepcopy(bookshop["initial_states"][0]["state"])}
    book_id = initial[env_id]["tables"]["books"][0]["book_id"]
    row = {
        "id": "rl_test",
        "env_ids": [env_id],
        "tools": [openai_tool(t) for t in bookshop["tools"]],
        "gold_calls": [
            {"name": "update_book", "arguments": {"book_id": book_id, "price": 12.5}},
            {"name": "delete_book", "arguments": {"book_id": book_id}},
        ],
        "masked_arguments": ["limit"],
        "initial_state": initial,
        "final_state": initial,
    }
    episode = runner.episode(row)
    for call in row["gold_calls"]:
        episode.call(call["name"], call["arguments"])
    final = episode.final_states()
    episode.close()
    assert state_hash(final) != state_hash(initial)
    return {**row, "final_state": final}


def test_replaying_the_gold_calls_earns_full_reward(task, runner):
    episode = runner.episode(task)
    episode.call("books_list", {"limit": 3})
    for call in task["gold_calls"]:
        episode.call(call["name"], call["arguments"])
    r = episode.reward()
    episode.close()
    assert (r.trace, r.state, r.n_extra) == (1.0, 1.0, 1)
    assert r.reward == pytest.approx(0.95)


def test_rollouts_do_not_share_state(task, runner):
    first = runner.episode(task)
    first.call(task["gold_calls"][1]["name"], task["gold_calls"][1]["arguments"])
    second = runner.episode(task)
    assert second.final_state_hashes() == {e: state_hash(s) for e, s in task["initial_state"].items()}
    assert first.final_state_hashes() != second.final_state_hashes()
    first.close()
    second.close()


def test_wrong_and_malformed_calls_score_low(task, runner):
    episode = runner.episode(task)
    assert "unknown_tool" in episode.call("os_system", {"cmd": "rm -rf /"})
    assert "invalid_arguments" in episode.call("delete_book", "book_id=1")
    result = episode.call("update_book", {"book_id": "no-such-book", "price": 1.0})
    assert "error" in result
    episode.add_malformed()
    r = episode.reward()
    episode.close()
    assert (r.n_malformed, r.trace, r.state, r.n_extra) == (3, 0.0, 0.0, 1)
    assert r.reward == 0.0


def test_arguments_that_are_no_json_or_too_large_are_malformed_calls_each_with_its_own_reason(task, runner):
    episode = runner.episode(task)
    book = task["gold_calls"][1]["arguments"]["book_id"]
    for bad in (float("nan"), float("inf"), -float("inf"), 2**70):
        # NaN would reach the tool as null and match a gold null; a 70-bit integer has no canonical form
        result = json.loads(episode.call("update_book", {"book_id": book, "price": bad}, max_argument_bytes=10))
        assert result["error"] == "invalid_arguments" and "not plain JSON" in result["message"], result
        assert "max_argument_bytes" not in result["message"]
    with pytest.raises(ArgumentsTooLarge, match=r"are \d\d bytes as JSON, past max_argument_bytes=20; the call did"):
        episode.call("update_book", {"book_id": book, "price": 12.5}, max_argument_bytes=20)
    assert episode.calls == [] and episode.n_malformed == 5
    assert "error" not in json.loads(episode.call("update_book", {"book_id": book, "price": 12.5}, 1000))
    assert episode.n_malformed == 5 and len(episode.calls) == 1
    episode.close()


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "parameters": {
                "type": "object",
                "required": ["order_id"],
                "properties": {
                    "order_id": {"type": "string"},
                    "limit": {"type": "integer"},
                    "verbose": {"type": "boolean", "default": False},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_orders",
            "parameters": {
                "type": "object",
                "properties": {"limit": {"type": "integer"}, "status": {"type": "string", "default": "open"}},
            },
        },
    },
]
STILL = {"shop": "aaa"}  # a read-only turn: the gold final state is the initial one


def guarded(gold, predicted, final=STILL, initial=STILL, gold_state=STILL, n_malformed=0, reply="Here you are."):
    return guarded_reward(
        gold,
        predicted,
        final,
        gold_state,
        initial,
        TOOLS,
        masked_arguments=("limit",),
        n_malformed=n_malformed,
        reply=reply,
    )


def test_arguments_that_matter_are_required_unmasked_and_not_the_default():
    assert arguments_that_matter(
        {"name": "get_order", "arguments": {"order_id": "o1", "limit": 5}}, TOOLS, ("limit",)
    ) == {"order_id": "o1"}
    assert arguments_that_matter({"name": "list_orders", "arguments": {"limit": 5}}, TOOLS, ("limit",)) == {}
    assert is_empty_call({"name": "get_order", "arguments": {}}, TOOLS)
    assert is_empty_call({"name": "get_order", "arguments": {"limit": 3, "verbose": False}}, TOOLS, ("limit",))
    assert not is_empty_call({"name": "get_order", "arguments": {"verbose": True}}, TOOLS, ("limit",))
    assert not is_empty_call({"name": "get_order", "arguments": {"order_id": "o9"}}, TOOLS)


def test_a_call_with_empty_or_default_arguments_earns_nothing_where_the_arguments_matter():
    gold = [{"name": "get_order", "arguments": {"order_id": "o1"}}]
    for empty in ({}, {"limit": 20}, {"verbose": False}):
        call = [{"name": "get_order", "arguments": empty}]
        assert empty_argument_calls(gold, call, TOOLS, ("limit",)) == 1
        assert guarded(gold, call).reward == 0.0
        # the paper's formula paid the untouched state of a read: 0.5 minus one extra call
        assert hybrid_reward(gold, call, STILL, STILL, masked_arguments=("limit",)).reward == pytest.approx(0.45)
    assert guarded(gold, gold).reward == 1.0
    # even next to the right call, an empty one zeroes the rollout
    assert guarded(gold, gold + [{"name": "get_order", "arguments": {}}]).reward == 0.0
    # a write turn: the empty call changed nothing, the state half is not paid either
    assert guarded(gold, [{"name": "get_order", "arguments": {}}], gold_state={"shop": "bbb"}).reward == 0.0


def test_on_a_read_the_state_half_needs_the_trace_and_argument_free_reads_still_pay_an_empty_call():
    gold = [{"name": "get_order", "arguments": {"order_id": "o1"}}]
    nothing = guarded(gold, [])
    assert (nothing.trace, nothing.state, nothing.reward) == (0.0, 0.0, 0.0)
    assert hybrid_reward(gold, [], STILL, STILL).reward == 0.5  # the paper pays doing nothing half
    wrong = guarded(gold, [{"name": "get_order", "arguments": {"order_id": "o2"}}])
    assert (wrong.state, wrong.reward) == (0.0, 0.0)
    free = [{"name": "list_orders", "arguments": {"limit": 10}}]  # limit is masked: no argument matters
    assert guarded(free, [{"name": "list_orders", "arguments": {}}]).reward == 1.0
    # a write turn keeps the paper's state term: the right end state without the right trace is half
    write = guarded(gold, [{"name": "list_orders", "arguments": {}}], final={"shop": "bbb"}, gold_state={"shop": "bbb"})
    assert (write.trace, write.state, write.reward) == (0.0, 1.0, pytest.approx(0.45))


def test_where_no_call_is_wanted_any_call_fails_the_trace():
    assert guarded([], []).reward == 1.0
    called = guarded([], [{"name": "list_orders", "arguments": {}}])
    assert (called.trace, called.reward) == (0.0, 0.0)
    # the paper's reward agrees: with no gold call (an abstention turn) a call is the wrong answer
    assert hybrid_reward([], [{"name": "list_orders", "arguments": {}}], STILL, STILL).reward == 0.0
    assert guarded([], [], n_malformed=2).reward == 0.0  # a block that did not parse is still a call
    # the gold of an abstention row is a reply that declines or asks: saying nothing is not it
    silent = guarded([], [], reply=" \n")
    assert (silent.trace, silent.reward) == (0.0, 0.0)
    with pytest.raises(ValueError, match="reply"):
        guarded([], [], reply=None)


def test_the_training_reward_of_a_real_rollout_zeroes_an_empty_delete(task, runner, bookshop):
    from envfactory_assets.tooluse.task_environment import environment_class
    from envfactory_assets.training.training_reward import training_reward

    one = {**task, "gold_calls": task["gold_calls"][1:]}  # delete the book
    episode = runner.episode(one)
    episode.call("delete_book", one["gold_calls"][0]["arguments"])
    one = {**one, "final_state": episode.final_states()}
    episode.close()
    cls = environment_class(one["tools"])
    right, empty = cls(runner), cls(runner)
    for env in (right, empty):
        env.reset(**one)
    right.delete_book(**one["gold_calls"][0]["arguments"])
    empty._dispatch("delete_book", {})
    assert training_reward(right).reward == 1.0
    assert training_reward(empty).reward == 0.0 and empty._episode.calls == [{"name": "delete_book", "arguments": {}}]
    for env in (right, empty):
        env._close()


def test_held_out_split_is_by_environment_stable_and_near_its_share():
    from envfactory_assets.tooluse.splits import is_held_out_environment, row_split

    ids = [f"provider_{i}:api" for i in range(2000)]
    held = [e for e in ids if is_held_out_environment(e)]
    assert 0.07 < len(held) / len(ids) < 0.13
    assert held == [e for e in ids if is_held_out_environment(e)]
    assert row_split([ids[0], held[0]]) == "held_out"
    assert row_split([e for e in ids[:50] if e not in held]) == "train"
    assert not any(is_held_out_environment(e, 0.0) for e in ids)
    with pytest.raises(ValueError, match="share"):
        is_held_out_environment("x", 1.5)


def test_every_document_states_the_held_out_share_of_environments_the_code_uses():
    """README and docs/*.md: every percentage stated next to held-out environments is ``HELD_OUT_SHARE``."""
    import re
    from pathlib import Path

    from envfactory_assets.tooluse.splits import HELD_OUT_SHARE

    repo = Path(__file__).resolve().parents[1]
    statements = []
    for doc in [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]:
        text = " ".join(doc.read_text(encoding="utf-8").split())  # a statement may wrap across lines
        for match in re.finditer(r"(\d+(?:\.\d+)?) ?(%|percent)", text):
            window = text[max(0, match.start() - 80) : match.end() + 60].lower()
            if re.search(r"held.out|hold.out|holds out|environment share", window) and "environment" in window:
                statements.append((doc.name, float(match[1]), window))
    assert {name for name, _, _ in statements} >= {"README.md", "evaluation.md"}, statements
    wrong = [s for s in statements if s[1] != round(100 * HELD_OUT_SHARE, 6)]
    assert not wrong, wrong


def test_a_small_corpus_still_holds_out_one_environment_and_the_stages_read_the_stored_split():
    from envfactory_assets.tooluse.splits import held_out_environments, is_held_out_environment, stored_split

    # three environments at 10% usually have none under the share on their own: one is held out anyway
    small = next(
        [f"shop_{i}:api", f"shop_{i + 1}:api", f"shop_{i + 2}:api"]
        for i in range(0, 300, 3)
        if not any(is_held_out_environment(f"shop_{j}:api") for j in range(i, i + 3))
    )
    held = held_out_environments(small)
    assert len(held) == 1 and held <= set(small)
    assert held_out_environments(reversed(small)) == held  # order of discovery does not matter
    assert held_out_environments(small[:1]) == frozenset()  # one environment is all training
    assert held_out_environments(small, 0.0) == frozenset()
    # a large corpus keeps exactly the hash rule
    ids = [f"provider_{i}:api" for i in range(500)]
    assert held_out_environments(ids) == {e for e in ids if is_held_out_environment(e)}
    assert stored_split({"id": "r", "split": "validation"}) == "held_out"
    assert stored_split({"id": "r", "split": "train"}) == "train"
    with pytest.raises(ValueError, match="'r'.*re-materialize sft_dataset"):
        stored_split({"id": "r", "env_ids": ["x"]})


def test_an_empty_response_earns_nothing_in_training_and_in_the_verl_export_alike(
    task, bookshop, tmp_path, monkeypatch
):
    """An abstention row (gold: a reply that declines or asks, no call) and a row whose gold changes one of two
    environments: GRPO's reward of a rollout (its decoded completion through ``execute_tool_text``) and the
    verl export's ``compute_score`` of the same text agree; an empty completion earns 0 on both rows."""
    from envfactory_assets.exports import verl_reward
    from envfactory_assets.tooluse.task_environment import environment_class
    from envfactory_assets.training.grpo import execute_tool_text
    from envfactory_assets.training.training_reward import training_reward

    env_id = bookshop["env_id"]
    abstention = {
        **task,
        "id": "rl_abstain",
        "gold_calls": [],
        "executed_calls": [],
        "final_state": task["initial_state"],
    }
    # a second environment the gold leaves untouched: doing nothing matches half of the gold state
    other = f"{env_id}_copy"
    two = {
        **task,
        "id": "rl_two",
        "env_ids": [env_id, other],
        "initial_state": {**task["initial_state"], other: task["initial_state"][env_id]},
        "final_state": {**task["final_state"], other: task["initial_state"][env_id]},
    }
    environments = {env_id: bookshop, other: {**bookshop, "env_id": other}}
    path = tmp_path / "environments.json"  # the runner below stands in for the one compute_score loads from it
    monkeypatch.setenv(verl_reward.ENVIRONMENTS_ENV, str(path))
    replies = {"": 0.0, "  \n": 0.0, "<think>nothing to do</think>": 0.0}
    with TaskRunner(environments) as two_runner:
        declines = "None of my tools can do that; could you do it in the shop's app?"
        for row, right in ((abstention, declines), (two, "")):
            truth = {
                "gold_calls": row["gold_calls"],
                "executed_calls": row.get("executed_calls") or [],
                "masked_arguments": row["masked_arguments"],
                "final_state_hashes": {e: state_hash(s) for e, s in row["final_state"].items()},
                "env_ids": row["env_ids"],
                "tool_names": [t["function"]["name"] for t in row["tools"]],
                "tools": row["tools"],
                "initial_state": row["initial_state"],
            }
            cases = dict(replies)
            if right:
                cases[right] = 1.0
            for text, expected in cases.items():
                env = environment_class(row["tools"])(two_runner)
                env.reset(**row)
                execute_tool_text(env, text)
                trained = training_reward(env).reward
                env._close()
                verl_reward._runners[path] = two_runner
                try:
                    exported = verl_reward.compute_score("envfactory", text, truth)["score"]
                finally:
                    verl_reward._runners.pop(path)
                assert (trained, exported) == (expected, expected), (row["id"], text)
