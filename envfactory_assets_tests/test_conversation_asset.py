"""refined_trajectories with the conversational mode on: the synthesis assets materialized on the fixtures."""

from __future__ import annotations

import dagster as dg

from envfactory_assets.cli import config_for_selection
from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS
from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.runner.materialize import materialize_pipeline
from envfactory_assets.store.db import Store
from envfactory_assets_tests.fixture_environments import FIXTURES
from envfactory_assets_tests.tiny_run import THROUGH_REFINEMENT

SELECTION = [*THROUGH_REFINEMENT, "sft_dataset", "rl_dataset"]
CONFIG = {
    "ops": {
        "source_resources": {"config": {"corpus_dir": str(FIXTURES), "include_mcp": False, "per_domain": 2}},
        "tool_chains": {"config": {"n_chains": 16, "min_tools": 3, "baseline_chains": 0}},
        "refined_trajectories": {"config": {"k": 2, "conversational_share": 1.0}},
        "datasets": {"config": {"sft_share": 0.5}},
    }
}


def test_conversational_refinement_reaches_the_datasets_and_rl_rows_replay(tmp_path):
    with dg.instance_for_test() as instance:
        results = materialize_pipeline(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance,
            run_config=config_for_selection(CONFIG, SELECTION),
            selection=SELECTION,
            resources={
                "envfactory": EnvFactoryHome(home=str(tmp_path)),
                "model_backend": ModelBackend(),
                "verification_gate": VerificationGate(),
            },
        )
    assert all(r.success for r in results)  # the blocking rl_rows_replay_exactly check included
    refined = results[-1].asset_materializations_for_node("refined_trajectories")[0].metadata
    assert refined["simulated_user"].value == "programmatic" and refined["conversational_turns"].value > 0
    store = Store(tmp_path / "envfactory.duckdb")
    turns = [
        t for r in store.read("refined_trajectories", "status = 'passed'") for t in r["turns"] if t.get("clarification")
    ]
    assert turns and all(t["clarification"][0]["role"] == "assistant" for t in turns)
    questions = {t["clarification"][0]["content"] for t in turns}
    sft = store.read("sft_dataset")
    rl = store.read("rl_dataset")
    assert any(m["content"] in questions for r in sft for m in r["messages"] if m["role"] == "assistant") or any(
        r["prompt"][-2]["content"] in questions for r in rl if len(r["prompt"]) > 1
    )
