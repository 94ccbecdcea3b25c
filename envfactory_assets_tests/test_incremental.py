"""Incremental re-synthesis: editing one document rebuilds only its environment partition and the chains and
trajectories that touch it; everything else keeps its ids, and an older checkpoint's lineage still walks."""

from __future__ import annotations

import shutil

import dagster as dg
import pytest

from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS, defs
from envfactory_assets.defs.incremental import PER_ENVIRONMENT, nightly_resynthesis, resource_files
from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.runner.materialize import materialize_pipeline, stale_assets
from envfactory_assets.store.db import Store
from envfactory_assets.store.ids import content_id
from envfactory_assets.store.lineage import checkpoint_lineage
from envfactory_assets_tests.fixture_environments import FIXTURES

SPANNING = ["tool_graph", "tool_chains", "raw_trajectories", "refined_trajectories", "sft_dataset", "rl_dataset"]
TABLES = [
    "environments",
    "verified_environments",
    "tool_chains",
    "raw_trajectories",
    "refined_trajectories",
    "sft_dataset",
    "rl_dataset",
]


def current_ids(store: Store) -> dict[str, dict[str, dict]]:
    return {t: {r["id"]: r for r in store.read(t)} for t in TABLES}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A fixture corpus copy, a home, one Dagster instance; the pipeline (to the datasets) built once."""
    root = tmp_path_factory.mktemp("incremental")
    corpus = root / "corpus"
    shutil.copytree(FIXTURES, corpus)
    home = root / "home"
    config = {
        "ops": {
            "source_resources": {"config": {"corpus_dir": str(corpus), "include_mcp": False, "per_domain": 2}},
            "tool_graph": {"config": {"embedder": "hashing"}},
            "tool_chains": {"config": {"n_chains": 24, "baseline_chains": 8}},
        }
    }
    resources = {
        "envfactory": EnvFactoryHome(home=str(home)),
        "model_backend": ModelBackend(),
        "verification_gate": VerificationGate(),
    }
    with dg.instance_for_test() as instance:
        results = materialize_pipeline(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance,
            resources,
            config,
            ["source_resources", "environments", "verified_environments", *SPANNING],
        )
        assert [r.success for r in results] == [True, True]
        yield {
            "corpus": corpus,
            "home": home,
            "instance": instance,
            "config": config,
            "resources": resources,
            "store": Store(home / "envfactory.duckdb"),
        }


def sensor_tick(world, cursor):
    with dg.build_sensor_context(
        instance=world["instance"], cursor=cursor, resources={"envfactory": world["resources"]["envfactory"]}
    ) as context:
        result = resource_files(context)
    return result


def test_partitions_are_the_stable_resource_keys(world):
    keys = world["instance"].get_dynamic_partitions("environment")
    envs = world["store"].read("environments")
    assert sorted(keys) == sorted(e["env_id"] for e in envs) and len(keys) == 3
    assert all(k == e["env_id"] for k, e in zip(sorted(keys), sorted(envs, key=lambda e: e["env_id"]), strict=False))


def test_editing_one_spec_resynthesizes_only_what_depends_on_it(world):
    store, instance = world["store"], world["instance"]
    before = current_ids(store)
    # a checkpoint trained on the current SFT rows (the training itself is covered by test_pipeline)
    sft_ids = sorted(before["sft_dataset"])
    ckpt = {
        "id": content_id("ckpt", sft_ids),
        "sft_dataset_version": content_id("v", sft_ids),
        "sft_dataset_ids": sft_ids,
        "base_model": "test",
        "base_model_hash": "0" * 16,
        "config": {},
        "metrics": {},
        "path": "",
        "stage": "sft",
        "parent_checkpoint_id": None,
        "rl_dataset_ids": [],
        "rl_dataset_version": None,
    }
    store.replace_current("checkpoints", [ckpt])

    baseline = sensor_tick(world, None)
    assert baseline.run_requests == [] and baseline.cursor  # the first tick only records what it sees
    assert sensor_tick(world, baseline.cursor).run_requests == []  # nothing changed: nothing to do

    spec = world["corpus"] / "helpdesk.json"
    spec.write_text(spec.read_text().replace('"Close a ticket"', '"Close a ticket for good"'))
    tick = sensor_tick(world, baseline.cursor)
    helpdesk = next(e for e in before["environments"].values() if "helpdesk" in e["env_id"])["env_id"]
    assert [(r.partition_key, r.run_key) for r in tick.run_requests] == [(helpdesk, tick.run_requests[0].run_key)]
    assert tick.run_requests[0].run_key.startswith(f"{helpdesk}@")
    again = sensor_tick(world, baseline.cursor)  # same change seen from the same cursor: the same run key
    assert [r.run_key for r in again.run_requests] == [tick.run_requests[0].run_key]
    assert sensor_tick(world, tick.cursor).run_requests == []  # the new cursor holds the change

    request = tick.run_requests[0]
    results = materialize_pipeline(
        [*ALL_ASSETS, *ALL_CHECKS],
        instance,
        world["resources"],
        request.run_config,
        PER_ENVIRONMENT,
        partitions=[request.partition_key],
    )
    assert all(r.success for r in results)
    built = [(e.asset_key.to_user_string(), e.partition) for r in results for e in r.get_asset_materialization_events()]
    assert sorted(built) == sorted(
        [("source_resources", None), ("environments", helpdesk), ("verified_environments", helpdesk)]
    )
    assert set(stale_assets(instance, ALL_ASSETS)) >= {"tool_graph"}

    schedule = nightly_resynthesis(dg.build_schedule_context(instance=instance))
    assert isinstance(schedule, dg.RunRequest)
    results = materialize_pipeline([*ALL_ASSETS, *ALL_CHECKS], instance, world["resources"], world["config"], SPANNING)
    assert all(r.success for r in results)
    reused = {
        e.asset_key.to_user_string(): e.materialization.metadata["reused_unchanged"].value
        for e in results[-1].get_asset_materialization_events()
        if "reused_unchanged" in e.materialization.metadata
    }
    assert isinstance(nightly_resynthesis(dg.build_schedule_context(instance=instance)), dg.SkipReason)
    assert "tool_graph" not in stale_assets(instance, ALL_ASSETS)

    after = current_ids(store)
    # environments: only helpdesk has a new version; the others keep their ids
    changed_env = {e["env_id"] for i, e in before["environments"].items() if i not in after["environments"]}
    assert changed_env == {helpdesk}
    assert {i for i, e in before["verified_environments"].items() if e["env_id"] != helpdesk} <= set(
        after["verified_environments"]
    )
    # chains: every chain not touching helpdesk is kept with its id; every chain touching it is replaced
    untouched = {i for i, c in before["tool_chains"].items() if helpdesk not in c["env_ids"]}
    touched = set(before["tool_chains"]) - untouched
    assert untouched and touched
    assert untouched <= set(after["tool_chains"]) and not touched & set(after["tool_chains"])
    assert reused["tool_chains"] == len(untouched)  # kept from the store, not re-sampled by luck
    assert reused["raw_trajectories"] == sum(
        1
        for r in before["raw_trajectories"].values()
        if r["tool_chain_id"] in untouched and before["tool_chains"][r["tool_chain_id"]]["sampler"] == "topology"
    )
    n_by_sampler = {s: sum(1 for c in before["tool_chains"].values() if c["sampler"] == s) for s in ("topology",)}
    assert sum(1 for c in after["tool_chains"].values() if c["sampler"] == "topology") == n_by_sampler["topology"]
    # trajectories and dataset rows of untouched chains keep their ids
    for table in ("raw_trajectories", "refined_trajectories"):
        keep = {i for i, r in before[table].items() if r["tool_chain_id"] in untouched}
        assert keep and keep <= set(after[table]), table
        gone = {i for i, r in before[table].items() if r["tool_chain_id"] in touched}
        assert not gone & set(after[table]), table
    kept_refined = {i for i, r in before["refined_trajectories"].items() if r["tool_chain_id"] in untouched}
    for table in ("sft_dataset", "rl_dataset"):
        keep = {i for i, r in before[table].items() if r["refined_trajectory_id"] in kept_refined}
        assert keep <= set(after[table]), table
    # the superseded versions stay, and the old checkpoint's lineage walks to the old helpdesk document
    lineage = checkpoint_lineage(store, ckpt["id"])
    assert lineage["counts"]["sft_dataset"] == len(sft_ids)
    old_sources = {s["resource_key"]: s["sha256"] for s in lineage["source_resources"]}
    now_sources = {s["resource_key"]: s["sha256"] for s in store.read("source_resources")}
    if helpdesk in old_sources:
        assert old_sources[helpdesk] != now_sources[helpdesk]


def test_a_new_user_document_becomes_a_partition(world, tmp_path):
    user_dir = world["home"] / "user_resources"
    user_dir.mkdir(exist_ok=True)
    first = sensor_tick(world, None)
    doc = (FIXTURES / "bookshop.json").read_text().replace('"bookshop.example"', '"mybooks"')
    (user_dir / "mybooks.json").write_text(doc)
    tick = sensor_tick(world, first.cursor)
    assert [r.partition_key for r in tick.run_requests] == ["mybooks"]
    assert [(req.partitions_def_name, list(req.partition_keys)) for req in tick.dynamic_partitions_requests] == [
        ("environment", ["mybooks"])
    ]
    request = tick.run_requests[0]
    before = set(world["instance"].get_dynamic_partitions("environment"))
    instance = dg.DagsterInstance.ephemeral()  # a scratch instance and store: the shared world stays as it is
    home = tmp_path / "home"
    (home / "user_resources").mkdir(parents=True)
    shutil.copy(user_dir / "mybooks.json", home / "user_resources")
    resources = {**world["resources"], "envfactory": EnvFactoryHome(home=str(home))}
    one_per_domain = {
        "ops": {
            "source_resources": {"config": {**request.run_config["ops"]["source_resources"]["config"], "per_domain": 1}}
        }
    }  # the 3 are in 3 domains
    results = materialize_pipeline(
        [*ALL_ASSETS, *ALL_CHECKS], instance, resources, one_per_domain, ["source_resources"]
    )
    assert results[0].success
    # the user document comes on top of the per-domain selection: no corpus environment is dropped for it
    assert set(instance.get_dynamic_partitions("environment")) == before | {"mybooks"}
    (user_dir / "mybooks.json").unlink()


def test_definitions_hold_the_sensor_the_schedule_and_real_code_versions():
    repo = defs.get_repository_def()
    assert repo.get_sensor_def("resource_files") is not None
    schedule = repo.get_schedule_def("nightly_resynthesis")
    assert schedule.cron_schedule == "0 3 * * *" and schedule.job_name == "resynthesis"
    graph = repo.asset_graph
    versions = {k.to_user_string(): graph.get(k).code_version for k in graph.get_all_asset_keys()}
    assert all(v and v != "1" for v in versions.values()), versions
    assert versions["environments"] != versions["tool_chains"]
    assert graph.get(dg.AssetKey("environments")).partitions_def is not None
    assert graph.get(dg.AssetKey("tool_graph")).partitions_def is None


def test_a_failed_gate_stops_downstream_stages_launched_in_a_later_run(world, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(world["store"].path, home / "envfactory.duckdb")
    # One stored verification says failed. Verifying again computes rows with the same ids, and a stored id is
    # kept as it is, so the gate sees a pass rate below 1 (a floor above 1 is refused as a setting).
    with Store(home / "envfactory.duckdb").connect() as con:
        con.execute(
            "UPDATE verified_environments SET status = 'failed' WHERE id = "
            "(SELECT min(id) FROM current_verified_environments)"
        )
    strict = {
        **world["resources"],
        "envfactory": EnvFactoryHome(home=str(home)),
        "verification_gate": VerificationGate(min_pass_rate=1.0),
    }
    with dg.instance_for_test() as instance:
        first = materialize_pipeline(
            [*ALL_ASSETS, *ALL_CHECKS], instance, strict, world["config"], PER_ENVIRONMENT, raise_on_error=False
        )
        blocking = [
            e for r in first for e in r.get_asset_check_evaluations() if e.severity == dg.AssetCheckSeverity.ERROR
        ]
        assert [(e.check_name, e.passed) for e in blocking] == [("verified_pass_rate_above_floor", False)]
        later = materialize_pipeline(
            [*ALL_ASSETS, *ALL_CHECKS], instance, strict, world["config"], ["tool_graph"], raise_on_error=False
        )
        assert not later[0].success
        failure = next(e for e in later[0].all_events if e.is_step_failure)
        assert "verified_pass_rate_above_floor" in str(failure.event_specific_data.error)
        before = Store(home / "envfactory.duckdb").counts()["tool_graph_nodes"]
    assert before == world["store"].counts()["tool_graph_nodes"]  # nothing was rewritten


def test_cli_names_an_unknown_partition(tmp_path, monkeypatch, capsys):
    from envfactory_assets.cli import main as cli_main

    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))  # restored after the test
    assert cli_main(["run", "--select", "environments", "--partition", "no_such_api"]) == 2
    err = capsys.readouterr().err
    assert "--partition" in err and "no_such_api" in err


def test_rows_made_by_another_code_version_are_made_again(world):
    """Same config, same chains, but the last materialization ran other code: nothing is reused, and the
    deterministic rows come back with the same ids."""
    store, instance = world["store"], world["instance"]
    before = {r["id"] for r in store.read("raw_trajectories")}
    last = instance.get_latest_materialization_event(dg.AssetKey("raw_trajectories")).asset_materialization
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            "raw_trajectories", metadata={"config": last.metadata["config"]}, tags={"dagster/code_version": "0" * 12}
        )
    )
    results = materialize_pipeline(
        [*ALL_ASSETS, *ALL_CHECKS], instance, world["resources"], world["config"], ["raw_trajectories"]
    )
    assert all(r.success for r in results)
    (event,) = [e for r in results for e in r.get_asset_materialization_events()]
    assert event.materialization.metadata["reused_unchanged"].value == 0
    assert {r["id"] for r in store.read("raw_trajectories")} == before
    # run again on the same code: every row is reused
    results = materialize_pipeline(
        [*ALL_ASSETS, *ALL_CHECKS], instance, world["resources"], world["config"], ["raw_trajectories"]
    )
    (event,) = [e for r in results for e in r.get_asset_materialization_events()]
    assert event.materialization.metadata["reused_unchanged"].value == len(before)
