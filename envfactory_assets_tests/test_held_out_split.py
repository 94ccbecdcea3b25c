"""The held-out split as the dataset stage stores it: a held-out environment reaches no train row, not even
as an abstention request, and a row whose split moves (the fallback environment changes with the corpus) is
a new row rather than the stored one kept with its old split."""

from __future__ import annotations

import pytest

from envfactory_assets.store.db import Store
from envfactory_assets.synth.datagaps import DataGapsConfig
from envfactory_assets.synth.stage import dataset_rows
from envfactory_assets.tooluse.splits import held_out_environments, stored_held_out, stored_split
from envfactory_assets.training.stage import train_checkpoint
from envfactory_assets.training.sft import SFTConfigSpec
from envfactory_assets_tests.fixture_environments import (
    build_fixture_environments,
    fixture_graph,
    passed_trajectories,
)

OFF = DataGapsConfig(abstention_share=0.0, parallel_share=0.0, conversion_share=0.0)


@pytest.fixture(scope="module")
def environments() -> dict:
    # no fixture environment is under the hash share, so the fallback holds out helpdesk (the lowest bucket)
    return build_fixture_environments("bookshop.json", "calendar & tasks.json", "helpdesk.json")


@pytest.fixture(scope="module")
def trajectories(environments, worker) -> list[dict]:
    graph = fixture_graph(environments)
    out = [{**t, "id": f"ref_{i}", "n_turns": len(t["turns"]),
            "domains": sorted({environments[e]["domain"] for e in t["env_ids"]})}
           for i, t in passed_trajectories(environments, graph, worker, 30, "held-out")]
    assert {e for t in out for e in t["env_ids"]} == set(environments)
    return out


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
    foreign = [m["content"] for r in sft if r["split"] == "validation" for m in r["messages"]
               if m["role"] == "user" and ("book" in m["content"].lower() or "calendar" in m["content"].lower())]
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
    rows = [{"id": "sft_a", "env_ids": ["bookshop_example"], "split": "train"},
            {"id": "sft_b", "env_ids": ["calendar_tasks"], "split": "train"},
            {"id": "rl_a", "env_ids": ["bookshop_example"], "split": "validation"}]
    with pytest.raises(ValueError, match="rl_a: stored split 'validation'.*bookshop_example.*train rows too"):
        stored_held_out(rows)
    with pytest.raises(ValueError, match="rl_a: stored split 'validation'"):
        train_checkpoint(rows[:2], rows[2:], "no-such-model", tmp_path / "models", tmp_path / "ckpt",
                         SFTConfigSpec(), 10, 1, "v")
    assert not (tmp_path / "ckpt").exists()
    # a validation row that shares a train environment but has one of its own is consistent
    mixed = [*rows[:2], {**rows[2], "env_ids": ["bookshop_example", "helpdesk"]}]
    assert stored_held_out(mixed) == {"helpdesk"}
    assert [stored_split(r) for r in mixed] == ["train", "train", "held_out"]
