"""The ablations: the arm plan and its equal-rows rule, the orchestration (arms in their own homes, never the
main store), the report written from hand-built evaluation rows, and the datasets stage's raw-query switch."""

from __future__ import annotations

import hashlib
import json

import pytest

from envfactory_assets.ablations.orchestrate import AblationRun, run_ablations
from envfactory_assets.ablations.plan import (
    ARMS,
    arm_config,
    arm_home,
    configured_rows,
    equal_rows,
    select_arms,
)
from envfactory_assets.ablations.report import (
    ablations_markdown,
    compare_arms,
    write_ablations,
)
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

OFF = DataGapsConfig(abstention_share=0.0, parallel_share=0.0, conversion_share=0.0)
USER = {
    "ops": {
        "tool_chains": {"config": {"n_chains": 40}},
        "checkpoints": {"config": {"max_train_rows": 100, "max_steps": 5}},
    }
}


def _by_name(name):
    return next(a for a in ARMS if a.name == name)


def test_each_arm_gets_its_sampler_and_query_source_over_the_users_config(tmp_path):
    corpus = tmp_path / "corpus"
    before = json.dumps(USER, sort_keys=True)
    configs = {a.name: arm_config(USER, a, corpus) for a in ARMS}
    assert json.dumps(USER, sort_keys=True) == before  # the user's config is not changed
    for name, sampler, source in (
        ("topology", "topology", "refined"),
        ("random_walk", "random_walk", "refined"),
        ("raw_queries", "topology", "raw"),
    ):
        ops = configs[name]["ops"]
        assert ops["tool_chains"]["config"] == {"n_chains": 40, "sampler": sampler}
        assert ops["raw_trajectories"]["config"]["sampler"] == sampler
        assert ops["datasets"]["config"]["query_source"] == source
        assert ops["source_resources"]["config"]["corpus_dir"] == str(corpus)
        # SFT only, at the user's budget until the equal budget is set
        assert ops["checkpoints"]["config"] == {"max_train_rows": 100, "max_steps": 5, "grpo_max_steps": 0}
    budgeted = arm_config(USER, _by_name("random_walk"), corpus, max_train_rows=37)
    assert budgeted["ops"]["checkpoints"]["config"]["max_train_rows"] == 37
    own = {"ops": {"source_resources": {"config": {"corpus_dir": "/elsewhere"}}}}
    assert arm_config(own, ARMS[0], corpus)["ops"]["source_resources"]["config"]["corpus_dir"] == "/elsewhere"
    assert arm_home(tmp_path, ARMS[1]) == tmp_path / "ablations" / "random_walk"
    with pytest.raises(ValueError, match="max_train_rows=0"):
        arm_config(USER, ARMS[0], corpus, max_train_rows=0)
    with pytest.raises(ValueError, match="ops"):
        arm_config({"ops": ["tool_chains"]}, ARMS[0], corpus)
    assert [a.name for a in select_arms(["raw_queries"])] == ["topology", "raw_queries"]
    with pytest.raises(ValueError, match="unknown ablation arms"):
        select_arms(["random"])


def test_every_arm_trains_on_the_smallest_arms_row_count():
    assert equal_rows({"topology": 120, "random_walk": 80, "raw_queries": 120}, 256) == 80
    assert equal_rows({"topology": 120, "random_walk": 80}, 64) == 64  # the configured budget when smaller
    with pytest.raises(ValueError, match="random_walk"):
        equal_rows({"topology": 120, "random_walk": 0}, 64)
    assert configured_rows(USER, 64) == 100 and configured_rows({}, 64) == 64
    with pytest.raises(ValueError, match="max_train_rows"):
        configured_rows({"ops": {"checkpoints": {"config": {"max_train_rows": "all"}}}}, 64)


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


def test_the_orchestration_writes_only_to_arm_homes_and_trains_every_arm_on_equal_rows(tmp_path):
    main = tmp_path / "home"
    main.mkdir()
    store = main / "envfactory.duckdb"
    store.write_bytes(b"main store")
    digest = hashlib.sha256(store.read_bytes()).hexdigest()
    calls, rows = [], {"topology": 90, "random_walk": 50, "raw_queries": 90}

    def materialize(home, config, selection):  # stands in for the Dagster runner: records and writes in `home`
        calls.append((home, selection, config))
        (home / "envfactory.duckdb").write_text(json.dumps({"selection": selection}))

    ticks = iter(range(0, 1000, 10))
    run = run_ablations(
        main,
        USER,
        main / "npm",
        materialize,
        lambda h: rows[h.name],
        lambda h: {"id": f"ckpt_{h.name}", "path": str(h / "checkpoints")},
        lambda ckpts: _rows(),
        default_max_train_rows=64,
        log=lambda _: None,
        clock=lambda: float(next(ticks)),
    )
    assert hashlib.sha256(store.read_bytes()).hexdigest() == digest
    assert {h for h, _, _ in calls} == {main.resolve() / "ablations" / a.name for a in ARMS}
    assert all(h != main.resolve() and (h / "envfactory.duckdb").exists() for h, _, _ in calls)
    # all data first (the budget needs every arm's rows), then every arm's SFT at the same budget
    assert [s for _, s, _ in calls] == ["*sft_dataset"] * 3 + ["checkpoints"] * 3
    assert run.budget == 50 and run.train_rows == rows
    budgets = {h.name: c["ops"]["checkpoints"]["config"]["max_train_rows"] for h, s, c in calls if s == "checkpoints"}
    assert budgets == {"topology": 50, "random_walk": 50, "raw_queries": 50}
    assert run.configs["raw_queries"]["ops"]["datasets"]["config"]["query_source"] == "raw"
    assert run.seconds == {"synthesis": 10.0, "training": 10.0, "evaluation": 10.0, "total": 30.0}
    with pytest.raises(ValueError, match="no train-split SFT row"):
        run_ablations(
            main,
            USER,
            main / "npm",
            materialize,
            lambda h: 0,
            lambda h: {},
            lambda c: [],
            default_max_train_rows=64,
            log=lambda _: None,
        )


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

    run = AblationRun(
        arms=ARMS,
        homes={a.name: tmp_path / a.name for a in ARMS},
        train_rows={"topology": 90, "random_walk": 50, "raw_queries": 90},
        budget=50,
        checkpoints={a.name: {"id": f"ckpt_{a.name}"} for a in ARMS},
        evaluations=_rows(),
        configs={"topology": {"ops": {"datasets": {"config": {"query_source": "refined"}}}}},
        seconds={"synthesis": 3600.0, "training": 1800.0, "evaluation": 600.0, "total": 6000.0},
    )
    text = write_ablations(tmp_path / "docs" / "ablations.md", run)
    assert (tmp_path / "docs" / "ablations.md").read_text() == text
    assert "**50** SFT rows" in text and "| total | 6000 |" in text and "ckpt_random_walk" in text
    assert f"{walk['difference']:+.3f} [{walk['low']:+.3f}, {walk['high']:+.3f}] (n=8)" in text
    assert "the paper reports gains from both" in text.lower() and "EnvFactory, ablations" in text
    assert "Not run yet" not in text
    pending = ablations_markdown(None)
    assert "Not run yet" in pending and "envfactory ablations --config configs/ablations.yaml" in pending


def test_the_arm_selections_and_settings_exist_in_the_pipeline_graph(tmp_path):
    from envfactory_assets.definitions import defs
    from envfactory_assets.defs.synth.assets import DatasetConfig
    from envfactory_assets.runner.selection import config_for_selection, selected_ops

    graph = defs.get_repository_def().asset_graph
    data_ops = selected_ops(graph, "*sft_dataset")
    assert {"source_resources", "tool_chains", "raw_trajectories", "refined_trajectories", "datasets"} <= data_ops
    assert not {"checkpoints", "evaluations"} & data_ops
    for arm in ARMS:  # every op an arm configures is an op of the graph (config_for_selection raises otherwise)
        config = arm_config(USER, arm, tmp_path, 10)
        assert set(config_for_selection(graph, config, "*sft_dataset")["ops"]) <= data_ops
    assert DatasetConfig().query_source == DEFAULT_QUERY_SOURCE == "refined"
    assert DatasetConfig(query_source="raw").check_settings() == (DatasetRunSpec(query_source="raw"), DataGapsConfig())
    with pytest.raises(SettingError, match="query_source"):
        DatasetConfig(query_source="unrefined").check_settings()


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
