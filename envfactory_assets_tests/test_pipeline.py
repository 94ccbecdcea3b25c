"""Audit what the session's ``envfactory run`` of the whole asset graph on the fixture corpus (``tiny_cli_run``)
stored; the asset graph's own shape."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from envfactory_assets.cli import COMMAND_TAG, config_for_selection
from envfactory_assets.cli import main as cli_main
from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS, defs
from envfactory_assets.defs.common import UpstreamGates
from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.envgen.tools import BEYOND_CRUD
from envfactory_assets.runner.materialize import materialize_pipeline
from envfactory_assets.store.db import Store
from envfactory_assets.store.gates import failed_environment_leaks, pass_rate
from envfactory_assets.store.lineage import checkpoint_lineage
from envfactory_assets_tests.tiny_run import THROUGH_REFINEMENT, tiny_run_config

SYNTH_SELECTION = [*THROUGH_REFINEMENT, "sft_dataset", "rl_dataset"]


@pytest.fixture(scope="module")
def home(tiny_cli_run) -> Path:
    """ENVFACTORY_HOME of the session's ``envfactory run`` of the whole graph (``tiny_cli_run``: the two runs
    the command makes, source_resources alone and then everything else, checks included). Its checkpoints are
    trained from, and evaluated on, a one-layer model with the base model's tokenizer: this run tests the
    graph, and SmolLM2-135M's own SFT, GRPO and evaluation are tested where their results are read
    (test_training_sft, test_grpo, test_evaluation). Tests here only read it; one that writes works on a copy."""
    return tiny_cli_run[1]


@pytest.fixture(scope="module")
def run(home) -> tuple[list[dg.DagsterRunStatus], list[dg.AssetCheckEvaluation]]:
    """The status of each run the command made (tagged with its command line; a UI on the same home may add
    runs of its own), and every asset check evaluation of those runs, as its Dagster instance (``home/dagster``)
    stored them."""
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        runs = [r for r in instance.get_runs() if COMMAND_TAG in r.tags]
        evaluations = [
            entry.dagster_event.event_specific_data
            for r in runs
            for entry in instance.all_logs(r.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        ]
    return [r.status for r in runs], evaluations


@pytest.fixture(scope="module")
def store(home, run) -> Store:
    return Store(home / "envfactory.duckdb")


def test_every_stage_is_materialized_and_every_check_passes(run, store):
    statuses, evaluations = run
    assert len(statuses) == 2 and set(statuses) == {dg.DagsterRunStatus.SUCCESS}, statuses
    assert evaluations and all(e.passed for e in evaluations), [
        (e.asset_check_key.to_user_string(), e.metadata) for e in evaluations if not e.passed
    ]
    counts = store.counts()
    for table, n in counts.items():
        # stage_times is written by the `envfactory run` command at its end, not by an asset (test_run_output);
        # ablation_evaluations by the ablations report, which a plain run leaves out (test_ablations)
        assert n > 0 or table in ("stage_times", "ablation_evaluations"), f"{table} is empty"
    assert counts["ablation_evaluations"] == 0
    assert counts["source_resources"] == 3  # bookshop, calendar, helpdesk; the others are rejected
    assert {r["reason"] for r in store.read("rejected_resources")} == {
        "unparseable",
        "not_openapi3",
        "no_stateful_resource",
        "no_domain",
    }


def test_trajectories_are_multi_turn_and_rl_rows_carry_states(store):
    raw = store.read("raw_trajectories", "status = 'passed'")
    assert raw and all(r["n_turns"] >= 2 for r in raw)
    for row in store.read("rl_dataset"):
        assert row["initial_state"] and row["final_state"]
        # an abstention row (no offered tool fits) has no gold call and leaves the state as it was
        assert row["gold_calls"] or row["final_state"] == row["initial_state"]
        assert row["prompt"][-1]["role"] == "user"
    for row in store.read("sft_dataset"):
        calls = [c for m in row["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        tool_names = {t["function"]["name"] for t in row["tools"]}
        assert calls and all(c["function"]["name"] in tool_names for c in calls)
        assert all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)


def test_checkpoints_are_sft_then_grpo_from_it(store):
    sft, grpo = sorted(store.read("checkpoints"), key=lambda r: r["stage"] == "grpo")
    assert (sft["stage"], grpo["stage"], grpo["parent_checkpoint_id"]) == ("sft", "grpo", sft["id"])
    rl = {r["id"]: r for r in store.read("rl_dataset")}
    assert grpo["rl_dataset_ids"] and all(rl[i]["split"] == "train" for i in grpo["rl_dataset_ids"])
    assert grpo["metrics"]["steps"] == 1 and len(grpo["metrics"]["reward_mean_per_step"]) == 1
    assert Path(grpo["path"], "model.safetensors").exists() and grpo["config"]["num_generations"] == 2
    lineage = checkpoint_lineage(store, grpo["id"])
    assert set(lineage["ids"]["rl_dataset"]) == set(grpo["rl_dataset_ids"])


def test_lineage_walks_from_the_checkpoint_to_exactly_the_sources_used(store):
    (ckpt,) = store.read("checkpoints", "stage = 'sft'")
    lineage = checkpoint_lineage(store, ckpt["id"])
    used_envs = {e for r in store.read("sft_dataset") if r["id"] in ckpt["sft_dataset_ids"] for e in r["env_ids"]}
    assert {s["resource_key"] for s in lineage["source_resources"]} == used_envs
    assert all(len(s["sha256"]) == 64 and s["license"] for s in lineage["source_resources"])
    assert Path(ckpt["path"], "config.json").exists()
    # the validity share counts exactly the drawn held-out prompts whose turn wants a call
    rl_rows = {r["id"]: r for r in store.read("rl_dataset")}
    drawn = ckpt["metrics"]["held_out_prompt_ids"]
    assert len(drawn) == 2 and all(rl_rows[i]["split"] == "validation" for i in drawn)
    assert ckpt["metrics"]["valid_tool_calls_after"]["total"] == sum(bool(rl_rows[i]["gold_calls"]) for i in drawn)


def test_cli_lineage_prints_text_and_json(store, home, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    (ckpt,) = store.read("checkpoints", "stage = 'sft'")
    assert cli_main(["lineage", ckpt["id"], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["checkpoint"]["id"] == ckpt["id"]
    assert (
        Path(data["checkpoint"]["absolute_path"]).is_absolute() and Path(data["checkpoint"]["absolute_path"]).is_dir()
    )
    for source in data["source_resources"]:  # the stored, corpus-relative path is kept next to the absolute one
        assert not Path(source["path"]).is_absolute() and Path(source["absolute_path"]).is_absolute()
        assert Path(source["absolute_path"]).is_file() and source["absolute_path"].endswith(source["path"])
    assert cli_main(["lineage", ckpt["id"]]) == 0
    text = capsys.readouterr().out
    assert ckpt["id"] in text and ("bookshop" in text or "calendar" in text)
    assert cli_main(["lineage", "ckpt_does_not_exist"]) == 2


def test_rerun_is_idempotent(home, run, one_layer_model_dir, tmp_path):
    # on a copy: the session's run stays as it was made, for the other modules that read it; the caches of
    # fixed inputs (the base model, the benchmark reference's embeddings) are linked, not copied
    copy = tmp_path / "home"
    caches = ("models", "embedding_cache")
    shutil.copytree(home, copy, symlinks=True, ignore=lambda folder, names: caches if Path(folder) == home else ())
    for name in caches:
        if (home / name).exists():
            (copy / name).symlink_to((home / name).resolve(), target_is_directory=True)
    home, store = copy, Store(copy / "envfactory.duckdb")
    before = store.counts()
    with dg.instance_for_test() as instance:
        again = materialize_pipeline(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance,
            run_config=config_for_selection(tiny_run_config(one_layer_model_dir), SYNTH_SELECTION),
            selection=SYNTH_SELECTION,
            resources={
                "envfactory": EnvFactoryHome(home=str(home)),
                "model_backend": ModelBackend(),
                "verification_gate": VerificationGate(),
            },
        )
    assert len(again) == 2 and all(r.success for r in again)
    assert store.counts() == before
    with store.connect() as con:
        assert con.execute("SELECT count(*) FROM raw_trajectories WHERE superseded").fetchone()[0] == 0


def test_gates_fail_when_a_failed_environment_leaks_or_the_pass_rate_drops(home, store, run, tmp_path):
    copy = Store(tmp_path / "mutated.duckdb")
    shutil.copy(store.path, copy.path)
    assert failed_environment_leaks(copy) == [] and pass_rate(copy)[0] == 1.0
    with copy.connect() as con:
        env_id = con.execute("SELECT env_id FROM current_verified_environments LIMIT 1").fetchone()[0]
        con.execute("UPDATE verified_environments SET status = 'failed' WHERE env_id = ?", [env_id])
    leaks = failed_environment_leaks(copy)
    assert leaks and all(leak.endswith(env_id) for leak in leaks)
    assert pass_rate(copy)[0] < 0.8


# The whole graph as it is built: a structural change (an asset, a dependency, a check, a partition, a job,
# a schedule or a sensor added, removed or rewired) fails here and shows up in review.
ASSET_DEPS = {
    "ablation_checkpoint": ["ablation_data"],
    "ablation_data": [],
    "ablation_evaluation": ["ablation_checkpoint"],
    "ablations_report": ["ablation_evaluation"],
    "benchmark_overlap_by_environment": ["tool_graph"],
    "checkpoints": ["rl_dataset", "sft_dataset"],
    "environment_quality_by_domain": ["environments", "verified_environments"],
    "environments": ["source_resources"],
    "evaluations": ["checkpoints", "rl_dataset"],
    "hf_dataset_export": ["sft_dataset"],
    "lineage_edges": [
        "checkpoints",
        "environments",
        "raw_trajectories",
        "refined_trajectories",
        "rl_dataset",
        "sft_dataset",
        "source_resources",
        "tool_chains",
        "verified_environments",
    ],
    "raw_trajectories": ["tool_chains"],
    "refined_trajectories": ["raw_trajectories"],
    "query_statistics": ["refined_trajectories"],
    "operation_coverage": ["source_resources"],
    "rejection_reasons": ["source_resources"],
    "rl_dataset": ["refined_trajectories"],
    "sampler_comparison": ["tool_chains"],
    "sft_dataset": ["refined_trajectories"],
    "sharegpt_export": ["sft_dataset"],
    "source_resources": [],
    "tool_chains": ["tool_graph"],
    "tool_graph": ["verified_environments"],
    "trajectory_diversity": ["refined_trajectories"],
    "trajectory_statistics": ["raw_trajectories", "refined_trajectories"],
    "turns_by_operator": ["refined_trajectories"],
    "verified_environments": ["environments"],
    "verl_export": ["rl_dataset"],
}
ASSET_CHECKS = {  # check key: blocking
    "checkpoints:grpo_did_not_collapse": True,
    "evaluations:every_checkpoint_evaluated": True,
    "evaluations:results_have_a_seed_spread": False,
    "hf_dataset_export:hf_dataset_export_is_complete": True,
    "raw_trajectories:no_failed_environment": True,
    "raw_trajectories:replies_state_only_the_results": True,
    "refined_trajectories:clarifications_ask_only_for_missing_values": True,
    "refined_trajectories:no_failed_environment": True,
    "refined_trajectories:replies_state_only_the_results": True,
    "refined_trajectories:user_text_without_spec_identifiers": False,
    "rl_dataset:no_failed_environment": True,
    "rl_dataset:rl_expectations": True,
    "rl_dataset:rl_rows_replay_exactly": True,
    "rl_dataset:rl_rows_won_by_a_complete_answer": True,
    "sft_dataset:no_failed_environment": True,
    "sft_dataset:sft_expectations": True,
    "sharegpt_export:sharegpt_export_is_complete": True,
    "tool_chains:no_failed_environment": True,
    "tool_graph:no_failed_environment": True,
    "environments:tool_names_are_readable": False,
    "verified_environments:verified_pass_rate_above_floor": True,
    "verl_export:verl_export_is_complete": True,
}
PARTITIONED = {"environments": "environment", "verified_environments": "environment"}  # dynamic partitions
ARM_PARTITIONED = {"ablation_data", "ablation_checkpoint", "ablation_evaluation"}  # static: one per ablation arm
JOBS = {"__ASSET_JOB", "full_pipeline", "resynthesis", "show_trajectory"}
SCHEDULES = {"nightly_resynthesis": ("0 3 * * *", "resynthesis")}
SENSORS = {"gated_automation", "resource_files"}


def test_asset_graph_snapshot():
    graph = defs.get_repository_def().asset_graph
    edges = sorted(
        (dep.to_user_string(), key.to_user_string())
        for key in graph.get_all_asset_keys()
        for dep in graph.get(key).parent_keys
    )
    stages = [
        ("source_resources", "environments"),
        ("environments", "verified_environments"),
        ("verified_environments", "tool_graph"),
        ("tool_graph", "tool_chains"),
        ("tool_chains", "raw_trajectories"),
        ("raw_trajectories", "refined_trajectories"),
        ("refined_trajectories", "sft_dataset"),
        ("refined_trajectories", "rl_dataset"),
        ("sft_dataset", "checkpoints"),
        ("rl_dataset", "checkpoints"),
    ]
    assert set(stages) <= set(edges)
    checks = {k.to_user_string() for k in graph.asset_check_keys}
    assert "verified_environments:verified_pass_rate_above_floor" in checks
    assert "rl_dataset:rl_rows_replay_exactly" in checks
    assert {
        k.to_user_string(): sorted(p.to_user_string() for p in graph.get(k).parent_keys)
        for k in graph.get_all_asset_keys()
    } == ASSET_DEPS
    assert {k.to_user_string(): graph.get_check_spec(k).blocking for k in graph.asset_check_keys} == ASSET_CHECKS
    partitioned = {
        k.to_user_string(): graph.get(k).partitions_def
        for k in graph.get_all_asset_keys()
        if graph.get(k).partitions_def is not None
    }
    dynamic = {k: p for k, p in partitioned.items() if isinstance(p, dg.DynamicPartitionsDefinition)}
    assert {k: p.name for k, p in dynamic.items()} == PARTITIONED
    assert set(partitioned) - set(dynamic) == ARM_PARTITIONED
    assert {tuple(partitioned[k].get_partition_keys()) for k in ARM_PARTITIONED} == {
        ("topology", "random_walk", "raw_queries")
    }
    repository = defs.get_repository_def()
    assert {job.name for job in repository.get_all_jobs()} == JOBS
    assert {s.name: (s.cron_schedule, s.job_name) for s in repository.schedule_defs} == SCHEDULES
    assert {s.name for s in repository.sensor_defs} == SENSORS
    # every gate of the code location is a blocking check on an asset's parent, read from this graph
    assert defs.resources["upstream_gates"] == UpstreamGates.of(graph)


def test_report_is_queried_from_the_store(store, home, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    out = tmp_path / "report.md"
    assert cli_main(["report", "--output", str(out)]) == 0
    text = out.read_text()
    n_raw = store.counts()["raw_trajectories"]
    assert f"| passed | {n_raw} |" in text
    assert "| ecommerce_retail | 1 | 1 |" in text and "implicit_reference" in text
    calibration = text.split("## Solvability calibration", 1)[1]
    n_refined = len(store.read("refined_trajectories", "status = 'passed'"))
    assert f"| passed | {n_refined} |" in calibration and re.search(r"\| 1\.0 \| \d+ \|", calibration)
    # tools per kind per domain add up to the passed environments' tools
    kinds = text.split("Tools of passed environments per kind", 1)[1].split("\n\n", 2)[1]
    total = next(line for line in kinds.splitlines() if line.startswith("| all |"))
    n_tools = sum(r["n_tools"] for r in store.read("environments", "status = 'built'"))
    assert total.rstrip(" |").endswith(f"| {n_tools}") and kinds.startswith("| domain | list |")
    # the share beyond CRUD and the turns holding a refused call, counted from the rows themselves
    tools = [t for r in store.read("environments", "status = 'built'") for t in r["tools"]]
    beyond = sum(t["kind"] in BEYOND_CRUD for t in tools)
    assert f"Tools beyond CRUD ({', '.join(BEYOND_CRUD)}): {beyond:,} of {len(tools):,} " in text
    turns = [t for r in store.read("refined_trajectories", "status = 'passed'") for t in r["turns"]]
    refused = sum(any(c.get("error") for c in t["calls"]) for t in turns)
    assert f"holding a refused call (`raw_trajectories.refusal_share`): {refused:,} of {len(turns):,} (" in text
    assert "mart `operation_coverage`" in text
    # the exports as the exports stage measured them: every RL and SFT row of this run, nothing wrong
    exports = text.split("## Exports", 1)[1].split("\n## ", 1)[0]
    audit = store.read("export_audits")[0]["audit"]
    assert f"over all {store.counts()['rl_dataset']} RL rows: an empty or blank response paid on 0 rows" in exports
    assert f"0 of {audit['sharegpt']['rows']} rows break its role rules" in exports and "Problems:" not in exports
    shown = re.findall(r"\| `(ref_[0-9a-f]+)` \|", text)  # ids a reader can pass to `envfactory show`
    assert shown and all(store.read("refined_trajectories", f"id = '{i}'") for i in shown)
    assert cli_main(["show", shown[0]]) == 0 and shown[0] in capsys.readouterr().out


def test_benchmark_overlap_tags_flow_into_the_datasets(store):
    tagged = {r["env_id"] for r in store.read("benchmark_overlap")}
    assert tagged == {"helpdesk"}
    # a tagged trajectory's rows land in the SFT or the RL split (the split is drawn), so the two are one stage here
    for tables in (("tool_chains",), ("raw_trajectories",), ("refined_trajectories",), ("sft_dataset", "rl_dataset")):
        rows = [(table, row) for table in tables for row in store.read(table)]
        assert any(row["benchmark_overlap"] for _, row in rows), tables
        for table, row in rows:
            assert bool(row["benchmark_overlap"]) == ("helpdesk" in row["env_ids"]), (table, row["env_ids"])


def test_sampler_comparison_mart_contrasts_topology_with_the_random_walk(store):
    rows = {r[0]: r for r in store.query("SELECT * FROM sampler_comparison").iter_rows()}
    assert set(rows) == {"topology", "random_walk"}
    topology, walk = rows["topology"], rows["random_walk"]
    assert topology[5] > walk[5]  # valid_share: only the topology-aware sampler satisfies dependencies
    raw_chain_ids = {r["tool_chain_id"] for r in store.read("raw_trajectories")}
    samplers = {c["sampler"] for c in store.read("tool_chains") if c["id"] in raw_chain_ids}
    assert samplers == {"topology"}


def test_expectation_suites_pass_on_the_datasets_and_catch_corrupted_rows(store):
    import copy

    from envfactory_assets.quality.suites import validate_rl, validate_sft

    sft, rl = store.read("sft_dataset"), store.read("rl_dataset")
    assert validate_sft(sft).success and validate_rl(rl).success
    bad_sft = copy.deepcopy(sft)
    call = next(m for m in bad_sft[0]["messages"] if m.get("tool_calls"))["tool_calls"][0]["function"]
    call["name"], call["arguments"] = "no_such_tool", '{"broken": '
    failed = {f["expectation"] for f in validate_sft(bad_sft).failures}
    assert {
        "tool_calls.expect_column_values_to_be_json_parseable",
        "tool_calls.expect_column_values_to_be_in_set",
    } <= failed
    bad_rl = copy.deepcopy(rl)
    bad_rl[0]["prompt"] = bad_rl[0]["prompt"][:-1]  # ends on the assistant/system, not the user
    bad_rl[0]["masked_arguments"] = ["page"]
    assert not validate_rl(bad_rl).success
    assert validate_sft([]).success is False


def test_trajectory_diversity_mart_matches_the_filter_report(store):
    from envfactory_assets.synth.refinement.filtering import diversity

    mart = store.query("SELECT * FROM trajectory_diversity").to_dicts()[0]
    expected = diversity(store.read("refined_trajectories"))
    assert mart["trajectories"] == expected["trajectories"] > 0
    assert (mart["distinct_tool_pairs"], mart["environments"], mart["domains"]) == (
        expected["distinct_tool_pairs"],
        expected["environments"],
        expected["domains"],
    )


def test_operation_coverage_mart_adds_up_to_the_scanned_documents(store):
    rows = list(store.query("SELECT outcome, name, operations FROM operation_coverage").iter_rows())
    documents = [r for r in store.read("source_resources") if r["kind"] == "openapi"]
    mapped = {name: n for outcome, name, n in rows if outcome == "mapped"}
    assert sum(mapped.values()) == sum(r["n_mapped_operations"] for r in documents) > 0
    assert set(mapped) <= {"list", "get", "create", "update", "delete", "search", "count", "action"}
    unmapped = {name for outcome, name, _ in rows if outcome == "unmapped"}
    # the fixture corpus has documents rejected after parsing; their operations are counted, not dropped
    assert {"document_no_stateful_resource", "document_no_domain"} <= unmapped
