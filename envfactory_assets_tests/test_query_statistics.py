"""The query figures (synth.refinement.report.query_statistics) and the marts that compute them in SQL, on fixture
turns."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import MiniLMEmbedder
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.store.db import Store
from envfactory_assets.store.ids import content_id
from envfactory_assets.store.schema import columns
from envfactory_assets.store.sql_models import load_models, materialize_model
from envfactory_assets.synth.refinement.operators import refine_turns
from envfactory_assets.synth.refinement.report import query_statistics
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory
from envfactory_assets_tests.fixture_environments import build_fixture_environments


@pytest.fixture(scope="module")
def refined_rows() -> list[dict]:
    envs = build_fixture_environments("bookshop.json", "calendar & tasks.json")
    graph = build_tool_graph(tools_from_environments(envs.values()), MiniLMEmbedder())
    rows = []
    with SandboxWorker() as w:
        for env_id, env in envs.items():
            w.load_environment(env_id, env["source"])
        for i, chain in enumerate(sample_chains(graph, 12, "stats", SamplerConfig(min_tools=3))):
            traj = synthesize_trajectory(chain, graph, envs, w, SynthConfig(min_turns=2))
            if traj["status"] != "passed":
                continue
            turns, ops = refine_turns(traj["turns"], envs, seed=f"s{i}", persona="a shop owner")
            for k, t in enumerate(turns):
                t["accuracy"] = 1.0 if k % 2 == 0 else 0.5
            rows.append({"status": "passed", "turns": turns, "operators": ops, "env_ids": traj["env_ids"]})
    assert len(rows) >= 4
    return rows


def _stored(store: Store, rows: list[dict]) -> None:
    out = []
    for n, r in enumerate(rows):
        row = dict.fromkeys(columns("refined_trajectories"))
        row.update(
            raw_trajectory_id=f"raw_{n}",
            tool_chain_id=f"chain_{n}",
            env_ids=r["env_ids"],
            domains=[],
            status="passed",
            reasons=[],
            n_turns=len(r["turns"]),
            operators=r["operators"],
            turns=[{k: v for k, v in t.items() if k not in ("state_before", "state_after")} for t in r["turns"]],
        )
        row["id"] = content_id("ref", {"n": n, "q": [t["query"] for t in r["turns"]]})
        out.append(row)
    store.replace_current("refined_trajectories", out)


def test_query_statistics_mart_matches_the_python_figures(refined_rows, tmp_path: Path):
    store = Store(tmp_path / "home" / "envfactory.duckdb", retry_seconds=1.0)
    _stored(store, refined_rows)
    models = {m.name: m for m in load_models()}
    assert materialize_model(store, models["query_statistics"]).rows == 1
    mart = store.query("SELECT * FROM query_statistics").to_dicts()[0]
    # fewer than 1,000 queries: the row order does not change any figure
    stored = [{"status": "passed", "turns": r["turns"]} for r in store.read("refined_trajectories")]
    expected = query_statistics(stored)
    for figure in (
        "queries",
        "distinct_trigrams_per_1000",
        "literal_identifier_share",
        "mean_words",
        "refined_differs_share",
    ):
        assert mart[figure] == pytest.approx(expected[figure], abs=1e-4), figure
    assert mart["solved_4_of_4_share"] == pytest.approx(
        sum(1 for r in stored for t in r["turns"] if t["accuracy"] == 1.0) / expected["queries"], abs=1e-4
    )
    assert materialize_model(store, models["turns_by_operator"]).rows > 0
    by = {(r["kind"], r["value"]): r["share"] for r in store.query("SELECT * FROM turns_by_operator").to_dicts()}
    for op, share in expected["operator_share"].items():
        assert by[("operator", op)] == pytest.approx(share, abs=1e-4)
    assert by[("accuracy", "1.00")] + by[("accuracy", "0.50")] == pytest.approx(1.0)


def test_literal_identifier_share_counts_only_turns_whose_calls_take_one():
    turn = lambda q, args: {  # noqa: E731
        "query": q,
        "query_raw": "x",
        "turns": [],
        "calls": [{"arguments": args}],
        "accuracy": 1.0,
    }
    rows = [
        {
            "status": "passed",
            "turns": [
                turn("Delete book 'boo_1'.", {"book_id": "boo_1"}),
                turn("Delete the book whose title is 'Dune'.", {"book_id": "boo_2"}),
                turn("Show me the books.", {"limit": 5}),
            ],
        }
    ]
    stats = query_statistics(rows)
    assert stats["literal_identifier_share"] == 0.5 and stats["queries"] == 3
    assert stats["refined_differs_share"] == 1.0
