"""The ablations: the arm plan and its equal-rows rule, the step ledger, the report written from hand-built
evaluation rows, the datasets stage's raw-query switch, and one arm's steps materialized as assets on the
fixture corpus with a one-layer model (each step in the arm's own home, skipped on a re-run, the report from a
partial set of arms, nothing of it in a plain run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from envfactory_assets.ablations.plan import (
    ARMS,
    Arm,
    arm_config,
    arm_home,
    arm_named,
    check_shared_syntheses,
    require_rows,
    sft_config,
    synthesis_settings,
)
from envfactory_assets.ablations.report import ablations_markdown, compare_arms, write_ablations
from envfactory_assets.ablations.shared_synthesis import copy_store
from envfactory_assets.ablations.steps import StepLedger, step_key
from envfactory_assets.config_checks import SettingError
from envfactory_assets.evaluation.stats import paired_bootstrap
from envfactory_assets.synth.datasets.datagaps import DataGapsConfig
from envfactory_assets.synth.refinement.operators import refine_turns
from envfactory_assets.synth.run_settings import DatasetRunSpec
from envfactory_assets.synth.stage import (
    DEFAULT_QUERY_SOURCE,
    dataset_rows,
    with_query_source,
)
from envfactory_assets_tests.fixture_environments import (
    build_fixture_environments,
    fixture_graph,
    passed_trajectories,
)
from envfactory_assets_tests.tiny_run import TINY_RUN_CONFIG, link_shared_caches

OFF = DataGapsConfig(abstention_share=0.0, parallel_share=0.0, conversion_share=0.0, same_tool_parallel_share=0.0)
USER = {
    "ops": {
        "tool_chains": {"config": {"n_chains": 40}},
        "checkpoints": {"config": {"max_train_rows": 100, "max_steps": 5}},
    }
}


def test_each_arm_gets_its_sampler_and_query_source_over_the_users_config(tmp_path):
    corpus = tmp_path / "corpus"
    before = json.dumps(USER, sort_keys=True)
    configs = {a.name: arm_config(USER, a, corpus) for a in ARMS}
    assert json.dumps(USER, sort_keys=True) == before  # the user's config is not changed
    for name, sampler, source, chains in (
        ("topology", "topology", "refined", 40),
        ("random_walk", "random_walk", "refined", 120),  # three times: most random walks are not executable
        ("raw_queries", "topology", "raw", 40),
    ):
        ops = configs[name]["ops"]
        assert ops["tool_chains"]["config"] == {"n_chains": chains, "sampler": sampler}
        assert ops["raw_trajectories"]["config"]["sampler"] == sampler
        assert ops["datasets"]["config"]["query_source"] == source
        assert ops["source_resources"]["config"]["corpus_dir"] == str(corpus)
    # without the user's n_chains, three times the default
    assert arm_config({}, arm_named("random_walk"), corpus)["ops"]["tool_chains"]["config"]["n_chains"] == 9000
    assert "n_chains" not in arm_config({}, arm_named("topology"), corpus)["ops"]["tool_chains"]["config"]
    with pytest.raises(ValueError, match="chain_factor=0, expected a whole number >= 1"):
        Arm("x", "x", {}, chain_factor=0)
    own = {"ops": {"source_resources": {"config": {"corpus_dir": "/elsewhere"}}}}
    assert arm_config(own, ARMS[0], corpus)["ops"]["source_resources"]["config"]["corpus_dir"] == "/elsewhere"
    assert arm_home(tmp_path, ARMS[1]) == tmp_path / "ablations" / "random_walk"
    with pytest.raises(ValueError, match="ops"):
        arm_config({"ops": ["tool_chains"]}, ARMS[0], corpus)
    # SFT only: GRPO off whatever the checkpoint settings say
    assert sft_config({"max_steps": 5, "grpo_max_steps": 3}) == {
        "ops": {"checkpoints": {"config": {"max_steps": 5, "grpo_max_steps": 0}}}
    }
    assert arm_named("raw_queries") is ARMS[2]
    with pytest.raises(ValueError, match="unknown ablation arm 'random'"):
        arm_named("random")


def test_every_arm_trains_on_the_configured_rows_or_is_refused():
    require_rows("topology", 120, 64)
    require_rows("topology", 64, 64)
    with pytest.raises(ValueError, match="random_walk has 50 train-split SFT rows, fewer than max_train_rows=64"):
        require_rows("random_walk", 50, 64)


def test_the_raw_query_arm_shares_the_topology_arms_synthesis_and_differs_only_in_the_datasets_op(tmp_path):
    topology, raw = arm_named("topology"), arm_named("raw_queries")
    assert raw.shares_synthesis_of == "topology" and arm_named("random_walk").shares_synthesis_of is None
    mine, theirs = arm_config(USER, raw, tmp_path), arm_config(USER, topology, tmp_path)
    assert mine != theirs and synthesis_settings(mine) == synthesis_settings(theirs)
    assert "datasets" not in synthesis_settings(mine)["ops"] and "datasets" in mine["ops"]  # the input is kept
    # an arm may share only a synthesis whose settings are its own outside the datasets op
    sampler = Arm("walk_raw", "random walk, raw", {"tool_chains": {"sampler": "random_walk"}}, "topology")
    with pytest.raises(ValueError, match="walk_raw shares the synthesis of topology but its settings differ"):
        check_shared_syntheses((topology, sampler))
    with pytest.raises(ValueError, match="'nowhere', which is not an arm"):
        check_shared_syntheses((topology, Arm("x", "x", {}, "nowhere")))
    with pytest.raises(ValueError, match="cannot share the synthesis of itself"):
        Arm("x", "x", {}, "x")


def test_a_shared_store_is_copied_whole_with_its_write_ahead_log_folded_in(tmp_path):
    import duckdb

    source, home = tmp_path / "topology", tmp_path / "raw_queries"
    source.mkdir()
    home.mkdir()
    with pytest.raises(FileNotFoundError, match="the arm whose synthesis is shared has not run"):
        copy_store(source, home)
    con = duckdb.connect(str(source / "envfactory.duckdb"))
    con.execute("SET checkpoint_threshold = '1GB'")  # the rows stay in the write-ahead log until CHECKPOINT
    con.execute("CREATE TABLE t AS SELECT range AS i FROM range(1000)")
    assert (source / "envfactory.duckdb.wal").exists()
    con.close()
    with duckdb.connect(str(home / "envfactory.duckdb")) as old:
        old.execute("CREATE TABLE stale AS SELECT 1 AS i")
    target = copy_store(source, home)
    assert target == home / "envfactory.duckdb" and not (home / "envfactory.duckdb.wal").exists()
    with duckdb.connect(str(target), read_only=True) as copied:
        assert copied.execute("SELECT count(*), sum(i) FROM t").fetchone() == (1000, 499500)
        assert not copied.execute("SELECT * FROM information_schema.tables WHERE table_name = 'stale'").fetchall()
    assert [p.name for p in home.iterdir() if p.name.endswith(".copy")] == []  # no temporary file left


def test_the_ledger_skips_a_finished_step_only_for_the_same_settings_and_inputs(tmp_path):
    ledger = StepLedger(tmp_path / "arm")
    data_key = step_key("data", {"n_chains": 24}, {})
    assert ledger.finished("data", data_key) is None and ledger.entries() == {}
    ledger.record("data", data_key, {"train_rows": 30, "sft_dataset_version": "v_1"}, 12.34)
    assert ledger.finished("data", data_key) == {"train_rows": 30, "sft_dataset_version": "v_1"}
    assert ledger.finished("data", step_key("data", {"n_chains": 25}, {})) is None  # a setting changed
    ckpt_key = step_key("checkpoint", {"max_steps": 2}, {"data": "v_1"})
    assert ckpt_key != step_key("checkpoint", {"max_steps": 2}, {"data": "v_2"})  # the data changed
    ledger.record("checkpoint", ckpt_key, {"checkpoint_id": "ckpt_1"}, 5.0)
    assert set(StepLedger(tmp_path / "arm").entries()) == {"data", "checkpoint"}
    assert ledger.entries()["data"]["seconds"] == 12.3
    # new data drops the checkpoint made from the old data
    ledger.record("data", step_key("data", {"n_chains": 25}, {}), {"train_rows": 31}, 1.0)
    assert set(ledger.entries()) == {"data"} and ledger.outputs("checkpoint") is None
    (tmp_path / "arm" / "ablation_steps.json").write_text("{not json")
    assert ledger.entries() == {}  # an unreadable ledger runs every step again
    with pytest.raises(ValueError, match="ablation step 'sft'"):
        step_key("sft", {}, {})


def _results(scores: list[float]) -> list[dict]:
    return [{"task_id": f"t{i}", "seed": 0, "score": {"success": s}, "n_calls": 1} for i, s in enumerate(scores)]


def _row(model: str, scores: list[float], stage: str = "sft", benchmark: str = "synthetic_held_out") -> dict:
    return {
        "model": model,
        "stage": stage,
        "benchmark": benchmark,
        "subset": "all",
        "n_tasks": len(scores),
        "seeds": [0],
        "mean": sum(scores) / len(scores),
        "std": 0.0,
        "per_seed": {},
        "metrics": {"headline": "success"},
        "results": _results(scores),
    }


TOPO = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
WALK = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
RAW = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]


def _rows() -> list[dict]:
    return [
        _row("base", [0.0] * 8, "base"),
        _row("topology", TOPO),
        _row("random_walk", WALK),
        _row("raw_queries", RAW),
    ]


def test_the_report_compares_arms_by_the_paired_interval_on_shared_tasks(tmp_path):
    compared = compare_arms(_rows())
    assert [(c["control"], c["treatment"]) for c in compared] == [
        ("topology", "random_walk"),
        ("topology", "raw_queries"),
    ]
    walk = compared[0]["difference"]
    expected = paired_bootstrap(TOPO, WALK).as_dict()
    assert walk == expected and walk["difference"] == pytest.approx(-0.375) and walk["n"] == 8
    assert compared[1]["difference"]["difference"] == pytest.approx(-0.125)
    # an arm missing from a benchmark gives no comparison there
    only_one = _rows() + [_row("topology", TOPO, benchmark="bfcl_v3_single_turn")]
    assert [c["benchmark"] for c in compare_arms(only_one)] == ["synthetic_held_out"] * 2
    steps = {
        a.name: {
            "data": {"outputs": {"train_rows": 90, "settings": {"ops": {}}}, "seconds": 3600.0},
            "checkpoint": {"outputs": {"training_rows": 50, "checkpoint_id": f"ckpt_{a.name}"}, "seconds": 1800.0},
            "evaluation": {"outputs": {}, "seconds": 600.0},
        }
        for a in ARMS
    }
    text = write_ablations(tmp_path / "docs" / "ablations.md", _rows(), steps)
    assert (tmp_path / "docs" / "ablations.md").read_text() == text
    assert "| `random_walk` | data, checkpoint, evaluation | 90 | 50 | ckpt_random_walk | 3600 / 1800 / 600 |" in text
    assert f"{walk['difference']:+.3f} [{walk['low']:+.3f}, {walk['high']:+.3f}] (n=8)" in text
    assert "the paper reports gains from both" in text.lower() and "EnvFactory, ablations" in text
    assert "Not run yet" not in text and "waiting for" not in text
    # a partial set of arms: the comparison it can make, the other one waiting
    partial = ablations_markdown([r for r in _rows() if r["model"] != "random_walk"], {"topology": steps["topology"]})
    assert "| (a) random-walk sampler instead of the topology-aware one | waiting for `random_walk` |" in partial
    assert "| `random_walk` | none | - | - | - | - / - / - |" in partial
    assert "(b) raw queries instead of refined ones | synthetic_held_out" in partial
    pending = ablations_markdown([], {})
    assert "Not run yet" in pending and "envfactory ablations --config configs/ablations.yaml" in pending
    assert pending.split("\n")[2].startswith("**No arm has been run yet")  # said before any table
    assert "No arm has been run yet" not in text and "No arm has been run yet" not in partial


def test_the_arm_selections_and_settings_exist_in_the_pipeline_graph(tmp_path):
    from envfactory_assets.ablations.plan import DATA_SELECTION
    from envfactory_assets.defs.ablations.arm_runs import arm_graph
    from envfactory_assets.defs.dagster_private import asset_graph
    from envfactory_assets.defs.selection import config_for_selection, selected_ops
    from envfactory_assets.defs.synth.assets import DatasetConfig

    graph = asset_graph([a for a in arm_graph() if isinstance(a, dg.AssetsDefinition)])
    data_ops = selected_ops(graph, DATA_SELECTION)
    assert {"source_resources", "tool_chains", "raw_trajectories", "refined_trajectories", "datasets"} <= data_ops
    assert not {"checkpoints", "evaluations"} & data_ops
    for arm in ARMS:  # every op an arm configures is an op of the graph (config_for_selection raises otherwise)
        config = arm_config(USER, arm, tmp_path)
        assert set(config_for_selection(graph, config, DATA_SELECTION)["ops"]) <= data_ops
    assert DatasetConfig().query_source == DEFAULT_QUERY_SOURCE == "refined"
    assert DatasetConfig(query_source="raw").check_settings() == (DatasetRunSpec(query_source="raw"), DataGapsConfig())
    with pytest.raises(SettingError, match="query_source"):
        DatasetConfig(query_source="unrefined").check_settings()


def test_every_arm_trains_and_is_evaluated_as_the_cpu_benchmark_recipe():
    """configs/ablations.yaml gives every arm the CPU benchmark's SFT recipe (GRPO aside) and its evaluation
    tasks, so an arm's SFT checkpoint is comparable with the recipe's and each step fits its hour."""
    from envfactory_assets.cli import _load_run_config

    root = Path(__file__).resolve().parents[1]
    ablations = _load_run_config(str(root / "configs" / "ablations.yaml"))["ops"]
    recipe = _load_run_config(str(root / "configs" / "cpu_benchmark.yaml"))["ops"]
    sft = {k: v for k, v in recipe["checkpoints"]["config"].items() if not k.startswith("grpo_")}
    assert ablations["ablation_checkpoint"]["config"] == sft
    assert ablations["ablation_evaluation"]["config"] == recipe["evaluations"]["config"]


def test_a_plain_run_and_the_full_pipeline_job_leave_the_ablations_out():
    from envfactory_assets.definitions import defs
    from envfactory_assets.defs.pipeline_runs import plain_run_assets

    graph = defs.get_repository_def().asset_graph
    ablations = {"ablation_data", "ablation_checkpoint", "ablation_evaluation", "ablations_report"}
    everything = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert ablations <= everything
    assert plain_run_assets(graph) == everything - ablations
    job = {k.to_user_string() for k in defs.resolve_job_def("full_pipeline").asset_layer.selected_asset_keys}
    assert job == everything - ablations
    # and no pipeline asset reads an ablation asset, so `X+` selections never reach them
    assert all(
        not {p.to_user_string() for p in graph.get(k).parent_keys} & ablations
        for k in graph.get_all_asset_keys()
        if k.to_user_string() not in ablations
    )


@pytest.fixture(scope="module")
def environments() -> dict:
    return build_fixture_environments("bookshop.json", "calendar & tasks.json", "helpdesk.json")


@pytest.fixture(scope="module")
def refined(environments, worker) -> list[dict]:
    graph = fixture_graph(environments)
    out = []
    for i, t in passed_trajectories(environments, graph, worker, 20, "ablations"):
        turns, _ = refine_turns(t["turns"], environments, seed=str(i))
        out.append(
            {
                **t,
                "turns": turns,
                "id": f"ref_{i}",
                "n_turns": len(turns),
                "domains": sorted({environments[e]["domain"] for e in t["env_ids"]}),
            }
        )
    assert len(out) >= 5
    return out


def _user_texts(rows: list[dict]) -> list[list[str]]:
    return [[m["content"] for m in r["messages"] if m["role"] == "user"] for r in rows]


def _calls(rows: list[dict]) -> list[list]:
    return [[m.get("tool_calls") for m in r["messages"] if m["role"] == "assistant"] for r in rows]


def test_raw_query_source_builds_the_same_rows_from_the_queries_before_refinement(refined, environments):
    sft_ref, _, _ = dataset_rows(refined, environments, 1.0, gaps=OFF)
    sft_raw, _, _ = dataset_rows(refined, environments, 1.0, gaps=OFF, query_source="raw")
    assert len(sft_ref) == len(sft_raw) == len(refined)
    assert _user_texts(sft_ref) == [[t["query"] for t in r["turns"]] for r in refined]
    assert _user_texts(sft_raw) == [[t["query_raw"] for t in r["turns"]] for r in refined]
    assert _user_texts(sft_raw) != _user_texts(sft_ref)  # refinement rewrote some queries
    assert _calls(sft_raw) == _calls(sft_ref)  # only the queries differ
    assert {r["id"] for r in sft_raw}.isdisjoint(r["id"] for r in sft_ref)
    assert with_query_source(refined[0], "refined") is refined[0]
    with pytest.raises(ValueError, match="query_source='unrefined'"):
        with_query_source(refined[0], "unrefined")


# Each arm's synthesis: the session's tiny run's (the fixture corpus, small counts).
SYNTHESIS = {"ops": {op: TINY_RUN_CONFIG["ops"][op] for op in ("source_resources", "tool_chains")}}


def _materialize(home: Path, instance, run_config: dict, selection, partitions=None) -> list:
    from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS
    from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate
    from envfactory_assets.runner.materialize import materialize_pipeline

    return materialize_pipeline(
        [*ALL_ASSETS, *ALL_CHECKS],
        instance,
        {
            "envfactory": EnvFactoryHome(home=str(home)),
            "model_backend": ModelBackend(),
            "verification_gate": VerificationGate(),
        },
        run_config,
        selection=selection,
        partitions=partitions,
    )


def _arm_runs(home: Path) -> int:
    """Runs recorded by the Dagster instance of the arm home ``home``."""
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        return len(instance.get_run_records())


def _metadata(results: list, asset: str) -> dict:
    events = [e for r in results for e in r.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: v.value for k, v in events[-1].materialization.metadata.items()}


@pytest.mark.slow
def test_one_arm_materialized_step_by_step_in_its_own_home_skips_a_rerun_and_reports(
    tmp_path, one_layer_model_dir, tiny_cli_run
):
    from envfactory_assets.store.db import Store

    main = tmp_path / "home"
    main.mkdir()
    # the main store, whose held-out tasks every arm is evaluated on: a copy of the session's tiny run's
    shutil.copyfile(tiny_cli_run[1] / "envfactory.duckdb", main / "envfactory.duckdb")
    # the arm's tool_graph embeds the benchmark reference as every home's does: from the shared cache
    link_shared_caches(main / "ablations" / "topology")
    synthesis = tmp_path / "synthesis.yaml"
    synthesis.write_text(json.dumps(SYNTHESIS))  # JSON is YAML
    model = str(one_layer_model_dir)
    config = {
        "ops": {
            "ablation_data": {"config": {"synthesis_config": str(synthesis)}},
            "ablation_checkpoint": {
                "config": {"base_model": model, "max_steps": 2, "max_train_rows": 4, "n_eval_prompts": 1}
            },
            "ablation_evaluation": {
                "config": {
                    "base_model": model,
                    "n_synthetic": 2,
                    "n_bfcl": 0,
                    "n_bfcl_single_turn": 0,
                    "max_new_tokens": 8,
                    "max_tool_rounds": 1,
                }
            },
        }
    }
    with dg.instance_for_test() as instance:
        main_store = Store(main / "envfactory.duckdb")
        main_sft = sorted(r["id"] for r in main_store.read("sft_dataset"))
        for step in ("ablation_data", "ablation_checkpoint", "ablation_evaluation"):
            results = _materialize(main, instance, config, step, partitions=["topology"])
            assert [r.success for r in results] == [True]
            assert [r.dagster_run.tags.get("dagster/partition") for r in results] == ["topology"]
        arm = main / "ablations" / "topology"
        assert sorted(r["id"] for r in main_store.read("sft_dataset")) == main_sft  # the main dataset is untouched
        arm_store = Store(arm / "envfactory.duckdb")
        assert arm_store.read("sft_dataset") and not arm_store.read("evaluations", "model = 'random_walk'")
        (ckpt,) = arm_store.read("checkpoints")  # SFT only
        assert ckpt["stage"] == "sft" and len(ckpt["sft_dataset_ids"]) == 4
        ledger = StepLedger(arm).entries()
        assert set(ledger) == {"data", "checkpoint", "evaluation"}
        assert ledger["checkpoint"]["outputs"]["checkpoint_id"] == ckpt["id"]
        models = {r["model"] for r in arm_store.read("evaluations")}
        assert models == {"base", "do_nothing", "topology"}
        # a re-run of every step of the arm finds each finished with the same settings: nothing runs in the arm
        runs = _arm_runs(arm)
        again = _materialize(
            main, instance, config, ["ablation_data", "ablation_checkpoint", "ablation_evaluation"], ["topology"]
        )
        assert [r.success for r in again] == [True]
        for asset in ("ablation_data", "ablation_checkpoint", "ablation_evaluation"):
            assert _metadata(again, asset)["skipped"] is True
        assert _arm_runs(arm) == runs and StepLedger(arm).entries() == ledger
        # a changed setting runs that step again ...
        config["ops"]["ablation_evaluation"]["config"]["max_new_tokens"] = 6
        third = _metadata(
            _materialize(main, instance, config, "ablation_evaluation", ["topology"]), "ablation_evaluation"
        )
        assert "skipped" not in third and third["units_computed"] > 0
        assert StepLedger(arm).entries()["evaluation"]["key"] != ledger["evaluation"]["key"]
        # ... and back: every (model, benchmark, seed) result, the base model's too, comes from the result cache
        config["ops"]["ablation_evaluation"]["config"]["max_new_tokens"] = 8
        back = _metadata(
            _materialize(main, instance, config, "ablation_evaluation", ["topology"]), "ablation_evaluation"
        )
        assert back["units_computed"] == 0 and back["units_reused"] == third["units_computed"]
        # the raw-query arm copies the topology arm's synthesis and runs the datasets step alone over it
        raw = main / "ablations" / "raw_queries"
        shared = _materialize(main, instance, config, "ablation_data", ["raw_queries"])
        assert [r.success for r in shared] == [True]
        with dg.DagsterInstance.from_config(str(raw / "dagster")) as raw_instance:
            built = {
                entry.asset_materialization.asset_key.to_user_string()
                for record in raw_instance.get_run_records()
                for entry in raw_instance.all_logs(
                    record.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
                )
            }
        assert built == {"sft_dataset", "rl_dataset"}
        raw_store = Store(raw / "envfactory.duckdb")
        refined_ids = sorted(r["id"] for r in arm_store.read("refined_trajectories"))
        assert sorted(r["id"] for r in raw_store.read("refined_trajectories")) == refined_ids
        raw_sft = {r["refined_trajectory_id"]: r for r in raw_store.read("sft_dataset")}
        topo_sft = {r["refined_trajectory_id"]: r for r in arm_store.read("sft_dataset")}
        assert raw_sft.keys() == topo_sft.keys()
        assert _calls(list(raw_sft.values())) == _calls([topo_sft[k] for k in raw_sft])
        assert _user_texts(list(raw_sft.values())) != _user_texts([topo_sft[k] for k in raw_sft])
        assert StepLedger(raw).outputs("data")["synthesis_of"] == "topology"
        # the report from the one arm evaluated
        report = _materialize(main, instance, config, "ablations_report")
        assert [r.success for r in report] == [True]
    page = (main / "ablations" / "ablations.md").read_text()
    assert "waiting for `random_walk`" in page and "| `topology` | data, checkpoint, evaluation |" in page
    assert "Not run yet" not in page and "### Every model on every benchmark" in page
    table = main_store.read("ablation_evaluations")
    assert {r["arm"] for r in table} == {None, "topology"} and {r["model"] for r in table} == models


def test_the_command_names_a_wrong_arm_and_a_step_whose_input_is_missing(tmp_path, monkeypatch, capsys):
    from envfactory_assets.cli import main as cli_main

    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    assert cli_main(["ablations", "--arm", "bogus"]) == 2
    assert "unknown ablation arm 'bogus'; known: ['topology', 'random_walk', 'raw_queries']" in capsys.readouterr().err
    assert cli_main(["run", "--select", "ablation_data", "--partition", "nope"]) == 2
    assert "neither environment partitions nor ablation arms: ['nope']" in capsys.readouterr().err
    assert cli_main(["ablations", "--step", "data", "--arm", "raw_queries"]) == 1
    err = capsys.readouterr().err
    assert "shares the synthesis of the topology arm, whose data step has not finished" in err
    assert "envfactory run --select ablation_data --partition topology" in err
    assert not (tmp_path / "ablations" / "raw_queries" / "envfactory.duckdb").exists()
    assert cli_main(["ablations", "--step", "checkpoint", "--arm", "random_walk"]) == 2
    err = capsys.readouterr().err
    assert "reads ablation_data, which was never materialized" in err
    assert "envfactory run --select ablation_data --partition ARM" in err
