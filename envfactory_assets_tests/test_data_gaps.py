"""Abstention turns, parallel calls and converted values in the dataset rows, on the fixture environments;
the held-out split the dataset stage stores (no held-out environment reaches a train row, not even as an
abstention request; a row whose split moves is a new row)."""

from __future__ import annotations

import copy
import datetime as dt
import random

import pytest

from envfactory_assets.config_checks import SettingError
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.sources.names import singular
from envfactory_assets.store.db import Store
from envfactory_assets.synth.datasets.conversions import conversion_for
from envfactory_assets.synth.datasets.datagaps import (
    DataGapsConfig,
    GapStats,
    augment_trajectory,
    turn_kinds,
)
from envfactory_assets.synth.datasets.rows import replay_check, rl_rows, sft_row
from envfactory_assets.synth.refinement.phrasing import literal, words
from envfactory_assets.synth.stage import dataset_rows
from envfactory_assets.synth.trajectories.abstention import EVERYDAY_REQUESTS, abstention_turn
from envfactory_assets.synth.trajectories.parallel import (
    candidate_groups,
    order_independent,
    parallel_groups,
)
from envfactory_assets.tooluse.reward import hybrid_reward, match_calls
from envfactory_assets.tooluse.splits import (
    held_out_environments,
    stored_held_out,
    stored_split,
)
from envfactory_assets.training.sft import SFTConfigSpec
from envfactory_assets.training.stage import held_out_prompts, train_checkpoint
from envfactory_assets_tests.fixture_environments import (
    THREE_DOMAINS,
    build_fixture_environments,
    refined_like_rows,
)

OFF = DataGapsConfig(abstention_share=0.0, parallel_share=0.0, conversion_share=0.0, same_tool_parallel_share=0.0)


@pytest.fixture(scope="module")
def environments() -> dict:
    # no fixture environment is under the hash share, so the held-out fallback is helpdesk (the lowest bucket)
    return build_fixture_environments(*THREE_DOMAINS)


@pytest.fixture(scope="module")
def trajectories(environments, worker) -> list[dict]:
    out = refined_like_rows(environments, worker, 30, "gaps")
    assert len(out) >= 10 and {e for t in out for e in t["env_ids"]} == set(environments)
    return out


def _offered(trajectory, environments) -> set[str]:
    return {t["name"] for e in trajectory["env_ids"] for t in environments[e]["tools"]}


def test_an_abstention_turn_has_no_gold_call_and_its_rl_row_replays(trajectories, environments, worker):
    seen = 0
    for k, traj in enumerate(trajectories):
        position = k % (len(traj["turns"]) + 1)
        turn = abstention_turn(traj, environments, position, random.Random(k))
        assert turn is not None
        aug = {**traj, "turns": traj["turns"][:position] + [turn] + traj["turns"][position:]}
        row = next(r for r in rl_rows(aug, environments) if r["turn_index"] == position)
        assert row["gold_calls"] == [] and not row["changes_state"]
        assert row["prompt"][-1] == {"role": "user", "content": turn["query"]}
        assert row["initial_state"] == row["final_state"]
        assert replay_check(row, worker) is None
        # the SFT messages answer the request with text, never a call
        messages = sft_row(aug, environments)["messages"]
        i = messages.index({"role": "user", "content": turn["query"]})
        assert messages[i + 1] == {"role": "assistant", "content": turn["assistant_summary"]}
        seen += 1
    assert seen >= 10
    # the reward: no call is right, any call is wrong (even a read that leaves the state as it was)
    digest = {"e": "h"}
    assert hybrid_reward([], [], digest, digest).reward == 1.0
    wrong = hybrid_reward([], [{"name": "list_authors", "arguments": {}}], digest, digest)
    assert wrong.reward == 0.0 and wrong.trace == 0.0


def test_a_state_that_changes_is_not_passed_off_as_an_abstention_row(trajectories, environments, worker):
    traj = next(t for t in trajectories if any(c["kind"] not in ("list", "get") for c in t["turns"][0]["calls"]))
    turn = abstention_turn(traj, environments, 1, random.Random(0))
    tampered = {**turn, "state_after_hash": traj["turns"][0]["state_before_hash"]}
    aug = {**traj, "turns": [traj["turns"][0], tampered] + traj["turns"][1:]}
    row = next(r for r in rl_rows(aug, environments) if r["turn_index"] == 1)
    assert "do not reach" in replay_check(row, worker)


def test_abstention_requests_are_not_served_by_the_offered_tools(trajectories, environments):
    sources = set()
    for k, traj in enumerate(trajectories * 3):
        turn = abstention_turn(traj, environments, 0, random.Random(100 + k))
        offered = [t for e in traj["env_ids"] for t in environments[e]["tools"]]
        sources.add(turn["abstention"]["source"])
        ability = turn["abstention"]["ability"]
        assert ability in turn["assistant_summary"]
        if turn["abstention"]["source"] == "everyday":
            topics = next(t for q, a, t in EVERYDAY_REQUESTS if q == turn["query"])
            assert not any(w in t["name"] or w in t["table"] for w in topics for t in offered)
            continue
        kind, thing = ability.split(" ", 1)
        thing = thing.removeprefix("a ").removeprefix("an ")
        # no offered tool does this operation on this table
        assert not any(
            t["kind"] == kind and thing in (words(t["table"]), words(singular(t["table"]))) for t in offered
        ), (turn["query"], ability)
    assert sources == {"foreign", "missing_operation", "everyday"}
    with pytest.raises(ValueError, match="position 9"):
        abstention_turn({"turns": [], "env_ids": []}, environments, 9, random.Random(0))


def test_parallel_calls_are_independent_and_the_reward_accepts_them_in_any_order(trajectories, environments, worker):
    grouped = 0
    for traj in trajectories:
        offset = 0
        for turn in traj["turns"]:
            groups = parallel_groups(turn, offset, worker)
            if groups is not None:
                assert sorted(i for g in groups for i in g) == list(range(len(turn["calls"])))
                for group in groups:
                    ids = {offset + i for i in group}
                    for i in group:  # no call of a group uses an output of another call of the group
                        assert not any(
                            p.get("source") == "output" and p.get("call") in ids
                            for p in turn["calls"][i]["provenance"].values()
                        )
                    gold = [
                        {"name": turn["calls"][i]["name"], "arguments": turn["calls"][i]["arguments"]} for i in group
                    ]
                    matched, extra = match_calls(gold, list(reversed(gold)))
                    assert all(matched) and extra == 0
                grouped += 1
            offset += len(turn["calls"])
    assert grouped >= 3
    # the SFT rendering: one assistant message with the group's calls, then one result per call, ids in order
    aug = next(
        a
        for a in (
            augment_trajectory(t, environments, "sft", DataGapsConfig(0.0, 1.0, 0.0), worker) for t in trajectories
        )
        if "parallel" in set().union(*map(turn_kinds, a["turns"]))
    )
    messages = sft_row(aug, environments)["messages"]
    i = next(i for i, m in enumerate(messages) if len(m.get("tool_calls") or []) > 1)
    ids = [c["id"] for c in messages[i]["tool_calls"]]
    assert [m["tool_call_id"] for m in messages[i + 1 : i + 1 + len(ids)]] == ids
    assert all(m["role"] == "tool" for m in messages[i + 1 : i + 1 + len(ids)])
    all_ids = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    assert len(all_ids) == len(set(all_ids))


def test_calls_whose_order_matters_stay_in_separate_messages(environments, worker):
    env_id = next(e for e, env in environments.items() if any(t["name"] == "create_author" for t in env["tools"]))
    env = environments[env_id]
    before = {env_id: copy.deepcopy(next(s["state"] for s in env["initial_states"] if s["name"] == "valid"))}
    episode = worker.open_episode(copy.deepcopy(before))
    try:
        calls = []
        for name, args in (("create_author", {"name": "Ada Lovelace"}), ("list_authors", {"limit": 100})):
            res = worker.call(episode, name, args)
            assert res["ok"], res
            calls.append(
                {
                    "name": name,
                    "arguments": args,
                    "output": res["output"],
                    "kind": name.split("_")[0],
                    "provenance": {a: {"source": "user"} for a in args},
                }
            )
        after = worker.save(episode)
    finally:
        worker.close_episode(episode)
    turn = {"calls": calls, "state_before": before, "state_after": after, "state_after_hash": state_hash(after)}
    # no provenance ties them, but the list's output depends on the create having run first
    assert candidate_groups(calls, 0) == [[0, 1]]
    assert not order_independent(turn, [[0, 1]], worker)
    assert parallel_groups(turn, 0, worker) is None
    assert order_independent(turn, [[0], [1]], worker)
    # a call that uses an earlier output is never grouped with it
    calls[1]["provenance"] = {"limit": {"source": "output", "call": 0, "path": "author_id"}}
    assert candidate_groups(calls, 0) == [[0], [1]]


def test_a_conversion_turn_states_the_spoken_value_and_the_gold_call_keeps_the_field_form(trajectories, environments):
    converted = 0
    for traj in trajectories:
        aug = augment_trajectory(traj, environments, "sft", DataGapsConfig(0.0, 0.0, 1.0), None)
        for before, turn in zip(traj["turns"], aug["turns"], strict=False):
            conv = turn.get("conversion")
            if not conv:
                assert turn["query"] == before["query"]
                continue
            converted += 1
            assert literal(conv["value"]) in before["query"] and literal(conv["value"]) not in turn["query"]
            assert conv["spoken"] in turn["query"]
            assert turn["calls"] == before["calls"]  # the gold keeps the field's form
            assert any(c["arguments"].get(conv["argument"]) == conv["value"] for c in turn["calls"])
            value = dt.date.fromisoformat(conv["value"][:10])
            spoken = conv["spoken"].split(" at ")[0]
            if turn["query"].startswith("Today is "):  # a relative date: the stated date plus the offset
                today = dt.datetime.strptime(turn["query"].split(".")[0], "Today is %A, %d %B %Y").date()
                offset = {"tomorrow": 1, "a week from today": 7}.get(spoken)
                if spoken.startswith("in "):
                    offset = int(spoken.split()[1])
                if spoken.startswith("next "):
                    offset = (value - today).days
                    assert 2 <= offset <= 6 and value.strftime("%A") == spoken.split()[1]
                assert today + dt.timedelta(days=offset) == value
            else:
                cleaned = spoken.replace("st,", ",").replace("nd,", ",").replace("rd,", ",").replace("th,", ",")
                parsed = None
                for fmt in ("%B %d, %Y", "%d %B %Y", "%b %d, %Y"):
                    try:
                        parsed = dt.datetime.strptime(cleaned, fmt).date()
                        break
                    except ValueError:
                        continue
                assert parsed == value, conv
    assert converted >= 3


@pytest.mark.parametrize(
    "name, schema, value, spoken",
    [
        ("interest_rate", {"type": "number", "minimum": 0, "maximum": 1}, 0.03, "3%"),
        ("discount", {"type": "number", "description": "Discount as a fraction of the price."}, 0.125, "12.5%"),
        ("budget", {"type": "number"}, 1500, "1.5k"),
        ("revenue", {"type": "integer"}, 2_000_000, "2M"),
        ("price_cents", {"type": "integer"}, 1999, "$19.99"),
        ("duration_minutes", {"type": "integer"}, 90, "1.5 hours"),
        ("timeout_seconds", {"type": "integer"}, 120, "2 minutes"),
        ("weight_grams", {"type": "number"}, 2500, "2.5 kg"),
    ],
)
def test_conversions_follow_the_field_schema(name, schema, value, spoken):
    conv = conversion_for(name, schema, value, random.Random(0))
    assert conv is not None and conv.spoken == spoken


@pytest.mark.parametrize(
    "name, schema, value",
    [
        ("discount_percent", {"type": "number", "maximum": 100}, 3),  # already a percentage
        ("tax_rate", {"type": "number", "maximum": 100}, 0.2),  # bounds say it is not a fraction
        ("price", {"type": "number"}, 1234.56),  # no exact short form
        ("duration_minutes", {"type": "integer"}, 47),  # not whole or half hours
        ("title", {"type": "string"}, "2025-03-03"),  # a date only where the format says so
        ("in_stock", {"type": "boolean"}, True),
        ("tax", {"type": "number"}, 0.5),  # may be an amount: nothing says fraction
        ("price_min", {"type": "integer"}, 120),  # a minimum, not minutes
    ],
)
def test_no_conversion_where_the_schema_does_not_support_one(name, schema, value):
    assert conversion_for(name, schema, value, random.Random(0)) is None


def test_the_shares_follow_the_config(trajectories, environments, worker):
    copies = [{**t, "id": f"{t['id']}/{k}"} for k in range(12) for t in trajectories]
    share = 0.2
    config = DataGapsConfig(abstention_share=share, parallel_share=0.0, conversion_share=0.0)
    sft = [augment_trajectory(t, environments, "sft", config, None) for t in copies]
    sft_share = sum(any(x.get("abstention") for x in a["turns"]) for a in sft) / len(sft)
    rl = [augment_trajectory(t, environments, "rl", config, None) for t in copies]
    rl_turns = [x for a in rl for x in a["turns"]]
    rl_share = sum(1 for x in rl_turns if x.get("abstention")) / len(rl_turns)
    assert abs(sft_share - share) < 0.07 and abs(rl_share - share) < 0.07, (sft_share, rl_share)
    # conversion_share is the share of turns that allow a conversion
    half = [augment_trajectory(t, environments, "sft", DataGapsConfig(0.0, 0.0, 0.5), None) for t in copies]
    full = [augment_trajectory(t, environments, "sft", DataGapsConfig(0.0, 0.0, 1.0), None) for t in copies]
    n_half = sum(1 for a in half for x in a["turns"] if x.get("conversion"))
    n_full = sum(1 for a in full for x in a["turns"] if x.get("conversion"))
    assert n_full > 20 and 0.35 < n_half / n_full < 0.65, (n_half, n_full)
    # everything off leaves the trajectory as it was
    assert all(augment_trajectory(t, environments, "rl", OFF, worker) == t for t in trajectories)
    for bad in ({"abstention_share": 0.8}, {"parallel_share": -0.1}, {"conversion_share": float("nan")}):
        with pytest.raises(SettingError, match=next(iter(bad))):
            DataGapsConfig(**bad)


def test_the_datasets_stage_reports_the_kinds_it_wrote(trajectories, environments):
    stats, done = GapStats(), []
    sft, rl, rejected = dataset_rows(
        trajectories,
        environments,
        0.5,
        gaps=DataGapsConfig(0.3, 1.0, 1.0),
        gap_stats=stats,
        progress=lambda: done.append(1),
    )
    assert not rejected and stats.sft_rows == len(sft) and stats.rl_rows == len(rl)
    assert len(done) == len(trajectories)  # one progress call per trajectory, SFT or RL
    assert {r["refined_trajectory_id"] for r in sft} and {r["refined_trajectory_id"] for r in rl}
    assert stats.rl["abstention"] == sum(1 for r in rl if not r["gold_calls"]) > 0
    assert (
        stats.sft["parallel"]
        == sum(1 for r in sft if any(len(m.get("tool_calls") or []) > 1 for m in r["messages"]))
        > 0
    )
    assert stats.sft["conversion"] > 0
    # an SFT abstention turn is the last one (SFT's default loss covers only the last turn)
    assert stats.sft_last_turn["abstention"] == stats.sft["abstention"] > 0
    assert (
        sum(1 for r in sft if r["messages"][-2]["role"] == "user" and not r["messages"][-1].get("tool_calls"))
        >= stats.sft["abstention"]
    )
    # held-out prompts carry an abstention row's empty gold, so the checkpoint's unwanted-call share counts
    # it and its valid-call share leaves it out
    abstaining = {r["id"] for r in rl if not r["gold_calls"] and r["turn_index"] == 0}
    prompts = {p["id"]: p for p in held_out_prompts(rl, len(rl))}
    assert abstaining and abstaining <= set(prompts) and all(prompts[i]["gold_calls"] == [] for i in abstaining)
    shares = stats.shares()
    assert shares["rl"]["abstention"] == stats.rl["abstention"] / len(rl)
    off = GapStats()
    sft0, rl0, _ = dataset_rows(trajectories, environments, 0.5, gaps=OFF, gap_stats=off)
    assert sum(off.sft.values()) == sum(off.rl.values()) == 0 and all(r["gold_calls"] for r in rl0)
    assert not any(len(m.get("tool_calls") or []) > 1 for r in sft0 for m in r["messages"])


# --- the held-out split the dataset stage stores --------------------------------------------------------
def test_train_rows_never_ask_for_a_held_out_environments_tools(trajectories, environments):
    """Abstention requests may come from another environment's tools; a train row's never from a held-out
    environment's (the helpdesk's tickets), or training would see the tools it is evaluated on."""
    held = held_out_environments(e for t in trajectories for e in t["env_ids"])
    assert held == {"helpdesk"}
    copies = [{**t, "id": f"{t['id']}/{k}"} for k in range(4) for t in trajectories]
    sft, _, _ = dataset_rows(copies, environments, 1.0, gaps=DataGapsConfig(0.5, 0.0, 0.0))
    train = [r for r in sft if r["split"] == "train"]
    asked = [m["content"] for r in train for m in r["messages"] if m["role"] == "user"]
    assert len(train) > 40 and asked
    assert [q for q in asked if "ticket" in q.lower()] == []
    # validation rows may still be asked for other environments' tools: only train rows are restricted
    foreign = [
        m["content"]
        for r in sft
        if r["split"] == "validation"
        for m in r["messages"]
        if m["role"] == "user" and ("book" in m["content"].lower() or "calendar" in m["content"].lower())
    ]
    assert foreign


def test_a_row_whose_split_moves_is_a_new_row_in_the_store(trajectories, environments, tmp_path):
    """Without helpdesk trajectories the fallback moves to bookshop: its rows move from train to
    validation. The store keeps a stored id's row as it is, so the moved rows must come with new ids, and
    then every current row's split is the new one."""
    store = Store(tmp_path / "store.duckdb")
    sft, rl, _ = dataset_rows(trajectories, environments, 0.5, gaps=OFF)
    store.replace_current_tables({"sft_dataset": sft, "rl_dataset": rl})
    rest = [t for t in trajectories if "helpdesk" not in t["env_ids"]]
    assert held_out_environments(e for t in rest for e in t["env_ids"]) == {"bookshop_example"}
    sft2, rl2, _ = dataset_rows(rest, environments, 0.5, gaps=OFF)
    moved = [r for r in sft2 + rl2 if "bookshop_example" in r["env_ids"]]
    assert moved and all(r["split"] == "validation" for r in moved)
    assert {r["id"] for r in moved}.isdisjoint(r["id"] for r in sft + rl)
    store.replace_current_tables({"sft_dataset": sft2, "rl_dataset": rl2})
    current = store.read("sft_dataset") + store.read("rl_dataset")
    expected = {r["id"]: r["split"] for r in sft2 + rl2}
    assert {r["id"]: r["split"] for r in current} == expected
    assert stored_held_out(current) == {"bookshop_example"}


def test_stored_splits_that_would_train_on_a_held_out_environment_are_refused(tmp_path):
    """What a store written before the split was part of the row id could hold: an environment both in a
    train row and as the only environment of a validation row. Training refuses it before loading a model."""
    rows = [
        {"id": "sft_a", "env_ids": ["bookshop_example"], "split": "train"},
        {"id": "sft_b", "env_ids": ["calendar_tasks"], "split": "train"},
        {"id": "rl_a", "env_ids": ["bookshop_example"], "split": "validation"},
    ]
    with pytest.raises(ValueError, match="rl_a: stored split 'validation'.*bookshop_example.*train rows too"):
        stored_held_out(rows)
    with pytest.raises(ValueError, match="rl_a: stored split 'validation'"):
        train_checkpoint(
            rows[:2], rows[2:], "no-such-model", tmp_path / "models", tmp_path / "ckpt", SFTConfigSpec(), 10, 1, "v"
        )
    assert not (tmp_path / "ckpt").exists()
    # a validation row that shares a train environment but has one of its own is consistent
    mixed = [*rows[:2], {**rows[2], "env_ids": ["bookshop_example", "helpdesk"]}]
    assert stored_held_out(mixed) == {"helpdesk"}
    assert [stored_split(r) for r in mixed] == ["train", "train", "held_out"]
