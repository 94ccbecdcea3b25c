"""The QueryGen model roles through the Dagster assets: ``raw_trajectories`` with ``query_writer: model`` and
``refined_trajectories`` with ``refiner: model``, the ``model_backend`` resource pointing at the scripted local
OpenAI-compatible server (answering every role by request content), on the fixture corpus. The turns record
what each role did, and each stage's metadata shows its requests, tokens, cache hits and wall time."""

from __future__ import annotations

import dagster as dg
import pytest

from envfactory_assets.catalog.environments import passed_environments
from envfactory_assets.cli import config_for_selection
from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS
from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.runner.materialize import materialize_pipeline
from envfactory_assets.store.db import Store
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.stage import refined_trajectory_rows
from envfactory_assets.synth.stub_roles import RoleReplies, gold_of
from envfactory_assets_tests.fixture_environments import FIXTURES

UPSTREAM = ["source_resources", "environments", "verified_environments", "tool_graph", "tool_chains"]
STAGES = ["raw_trajectories", "refined_trajectories"]
CONFIG = {
    "ops": {
        "source_resources": {"config": {"corpus_dir": str(FIXTURES), "include_mcp": False, "per_domain": 2}},
        "tool_graph": {"config": {"embedder": "hashing"}},
        "tool_chains": {"config": {"n_chains": 12, "min_tools": 3, "baseline_chains": 0}},
        "raw_trajectories": {"config": {}},
        "refined_trajectories": {"config": {"k": 2, "conversational_share": 0.0, "workers": 1}},
    }
}
MODEL_ROLES = {"raw_trajectories": {"query_writer": "model"}, "refined_trajectories": {"refiner": "model"}}


def _config(roles: dict[str, dict] | None = None) -> dict:
    ops = {k: {"config": {**v["config"], **(roles or {}).get(k, {})}} for k, v in CONFIG["ops"].items()}
    return {"ops": ops}


def _metadata(results, stage: str) -> dict:
    return {k: v.value for k, v in results[-1].asset_materializations_for_node(stage)[0].metadata.items()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The upstream stages, then both stages with the model roles, then ``raw_trajectories`` again (every reply
    now from the response cache). The scripted solver is told which calls solve each query by a programmatic
    calibration of the stored raw trajectories (the test's knowledge, not the stage's)."""
    home = tmp_path_factory.mktemp("querygen_assets")
    store = Store(home / "envfactory.duckdb")
    with dg.instance_for_test() as instance:

        def materialize(selection, model_backend, roles=None):
            results = materialize_pipeline(
                [*ALL_ASSETS, *ALL_CHECKS],
                instance,
                selection=selection,
                run_config=config_for_selection(_config(roles), selection),
                resources={
                    "envfactory": EnvFactoryHome(home=str(home)),
                    "model_backend": model_backend,
                    "verification_gate": VerificationGate(),
                },
            )
            assert all(r.success for r in results)
            return results

        materialize(UPSTREAM, ModelBackend())
        replies = RoleReplies(refuse_share=0.3)
        with FakeChatServer(responder=replies) as server:
            backend = ModelBackend(backend="openai", base_url=server.base_url, model="scripted", max_concurrency=4)
            raw = materialize(["raw_trajectories"], backend, MODEL_ROLES)
            raws = store.read("raw_trajectories", "status = 'passed'")
            programmatic = refined_trajectory_rows(
                raws,
                passed_environments(store).environments,
                config=CalibrationConfig(k=2, conversational_share=0.0, workers=1),
            )
            replies.gold.update(
                gold_of([t for r in programmatic for t in r["turns"]] + [t for r in raws for t in r["turns"]])
            )
            refined = materialize(["refined_trajectories"], backend, MODEL_ROLES)
            sent = len(server.requests)
            again = materialize(["raw_trajectories"], backend, MODEL_ROLES)
            resent = len(server.requests) - sent
    return {"raw": raw, "refined": refined, "again": again, "sent": sent, "resent": resent, "store": store}


def test_queries_are_written_through_the_model_in_both_roles(run):
    raw = [t for r in run["store"].read("raw_trajectories", "status = 'passed'") for t in r["turns"]]
    refined = [t for r in run["store"].read("refined_trajectories", "status = 'passed'") for t in r["turns"]]
    assert raw and refined
    writer = [t["query_writer"] for t in raw]
    # every turn was asked; some replies were refused (not JSON) and retried, the rest accepted
    assert {w["outcome"] for w in writer} <= {"model", "fallback"} and any(w["outcome"] == "model" for w in writer)
    assert any(w["refusals"] for w in writer)
    assert all(t["query"] == t["query_writer"]["draft"] for t in raw)  # the scripted writer keeps the draft
    outcomes = [t["refiner"]["outcome"] for t in refined]
    assert "model" in outcomes and set(outcomes) <= {"model", "fallback", "unchanged"}
    rewritten = [t for t in refined if t["refiner"]["outcome"] == "model" and t["query"].endswith(" Thanks.")]
    assert rewritten and all(t["solve_refined"]["passed"] > 0 for t in rewritten)  # solved by the model solver
    assert any(o["obtainable_from"] == "model refiner" for t in rewritten for o in t["operators"])
    # the refined turns still carry the writer's record (kept, refused or reverted)
    assert all(t["query_writer"]["outcome"] in ("model", "fallback", "reverted") for t in refined)


def test_each_stage_reports_requests_tokens_cache_hits_and_wall_time(run):
    raw, refined = _metadata(run["raw"], "raw_trajectories"), _metadata(run["refined"], "refined_trajectories")
    raw_turns = [t for r in run["store"].read("raw_trajectories") for t in r["turns"]]
    assert raw["query_writer"]["model"] + raw["query_writer"].get("fallback", 0) == len(raw_turns)
    assert raw["query_writer"]["refusals"] > 0 and refined["refiner"]["model"] > 0
    assert refined["query_writer"]["model"] > 0 and refined["solver"] == "model"
    for usage, roles in ((raw["model_usage"], {"query_writer"}), (refined["model_usage"], {"solver", "refiner"})):
        assert set(usage["by_role"]) == roles
        assert usage["calls"] > 0 and usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        assert usage["calls"] == sum(r["calls"] for r in usage["by_role"].values())
        assert usage["wall_s"] > 0
    # the writer's requests: one per refused reply and one per reply accepted, sent or (asked before) cached
    first = raw["model_usage"]
    assert first["calls"] + first["cached"] == raw["query_writer"]["model"] + raw["query_writer"]["refusals"]
    assert first["calls"] + refined["model_usage"]["calls"] == run["sent"]
    # the stage again: the same requests, every one answered from the response cache, none sent
    cached = _metadata(run["again"], "raw_trajectories")["model_usage"]
    assert run["resent"] == 0 and cached["calls"] == 0 and cached["cached"] == first["calls"] + first["cached"]
    assert cached["prompt_tokens"] == 0 and cached["wall_s"] > 0
