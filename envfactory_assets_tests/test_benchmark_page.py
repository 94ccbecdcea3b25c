"""The benchmark page (docs/cpu_benchmark.md): targets judged on rows the evaluation itself computes."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfactory_assets.evaluation import bfcl_single_turn as st
from envfactory_assets.evaluation.model_policy import DoNothingPolicy
from envfactory_assets.evaluation.run import EvalSpec, ModelRef, do_nothing_model, evaluate_models
from envfactory_assets.reporting.benchmark_page import CPU_BENCHMARK_TARGETS, benchmark_page, target_results
from envfactory_assets_tests.test_bfcl_single_turn import ReplayPolicy


@pytest.fixture(scope="module")
def rows():
    """Base model (never calls), an SFT checkpoint that answers every task with its ground truth, and one that
    never calls either: 4 BFCL single-turn tasks per category, greedy."""
    sample = st.load_tasks(4, draw=2)
    spec = EvalSpec(n_synthetic=0, n_bfcl=0, n_bfcl_single_turn=4, task_draw=2, seeds=(0,))
    models = [
        ModelRef("base", "base", "/nowhere"),
        do_nothing_model(),
        ModelRef("ckpt_gold", "sft", "/nowhere", "ckpt_gold"),
        ModelRef("ckpt_mute", "sft", "/nowhere", "ckpt_mute"),
    ]
    return evaluate_models(
        models,
        [],
        {},
        spec,
        log=lambda m: None,
        load_policy=lambda m: ReplayPolicy(sample) if m.label == "ckpt_gold" else DoNothingPolicy(),
    )


def test_a_checkpoint_that_answers_right_meets_every_target_and_one_that_never_calls_meets_only_irrelevance(rows):
    gold = target_results(rows, "ckpt_gold")
    assert [t.subset for t, _, _ in gold] == [t.subset for t in CPU_BENCHMARK_TARGETS]
    assert all(met is True for _, _, met in gold), gold
    simple = gold[0][1]
    assert simple.startswith("1.000 (Δ +1.000 [+1.000, +1.000])")
    mute = {t.subset: (figure, met) for t, figure, met in target_results(rows, "ckpt_mute")}
    assert mute["irrelevance"] == ("1.000 (Δ +0.000 [+0.000, +0.000])", True)
    assert mute["simple"][1] is False and mute["parallel"][1] is False
    assert mute["balanced"] == ("0.200 (Δ +0.000 [+0.000, +0.000])", False)  # equal to the base model is no gain
    assert all(met is None for _, _, met in target_results(rows, "no_such_model"))


def test_the_page_states_wall_time_settings_targets_and_tables(rows):
    checkpoints = [
        {
            "id": "ckpt_gold",
            "stage": "sft",
            "config": {"max_steps": 100, "learning_rate": 1e-4, "loss_on": "last_turn", "device": "cpu_bf16"},
            "metrics": {"train_mix": "stratified", "examples_by_kind": {"no_call": 76, "calls": 124, "parallel": 56}},
        },
        {"id": "ckpt_mute", "stage": "sft", "config": {}},
        {"id": "ckpt_x", "stage": "grpo", "config": {}},
    ]
    times = [
        ("checkpoints", 1500.0, 900.0, 1.1, "SUCCESS", "2026-12-06 10:00:00", 1, 1500.0, 1500.0),
        ("evaluations", 1200.0, 900.0, 1.4, "SUCCESS", "2026-12-06 10:25:00", 1, 1200.0, 1200.0),
        ("sft_dataset", 60.0, 900.0, 1.0, "SUCCESS", "2026-12-06 09:00:00", 1, 60.0, 60.0),
    ]
    page = benchmark_page(rows, checkpoints, times, title="CPU benchmark", command="envfactory run --select x")
    assert page.startswith("# CPU benchmark\n") and "envfactory run --select x" in page
    assert "| `checkpoints` | 25.0 min | 1.10 | SUCCESS | 2026-12-06 10:00 |" in page and "| both | 45.0 min |" in page
    assert "sft_dataset" not in page.split("## What was run")[0]  # only the benchmark's own steps are timed
    assert (
        "- SFT `ckpt_gold`: `max_steps: 100`, `learning_rate: 0.0001`, `device: cpu_bf16`, `train_mix: stratified`, "
        "examples by "
        "last-turn kind no_call 76, calls 124, parallel 56"
    ) in page
    assert "- SFT+GRPO `ckpt_x`: settings not recorded" in page and "- SFT `ckpt_mute`: settings not" in page
    assert "`n_bfcl_single_turn: 4` (per category), `task_draw: 2`, `seeds: [0]`" in page
    assert "`max_new_tokens: 64`, `device: auto`" in page  # the precision the rows were generated in
    # a targets table per SFT checkpoint
    gold, mute = page.split("## Targets: SFT checkpoint `ckpt_gold`")[1].split("## Targets: SFT checkpoint `ckpt_mute`")
    assert "**no**" not in gold and gold.count("| yes |") == 5
    assert "| `irrelevance` accuracy at least 60% | 1.000 (Δ +0.000 [+0.000, +0.000]) | yes |" in mute
    assert "| balanced score above the base model's, interval above zero | 0.200 (Δ +0.000" in mute
    assert "**BFCL v3 single-turn (non-live AST)**" in page
    empty = benchmark_page([], [], [], title="T", command="c")
    assert "No stage times recorded" in empty and "## Targets" not in empty


def test_results_page_refuses_two_destinations_and_a_missing_store(tmp_path, monkeypatch, capsys):
    from envfactory_assets.cli import main as cli_main

    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    page = tmp_path / "cpu_benchmark.md"
    assert cli_main(["results", "--page", str(page), "--into", str(tmp_path / "x.md")]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert cli_main(["results", "--page", str(page)]) == 2
    assert "does not exist yet" in capsys.readouterr().err and not page.exists()


def test_a_page_names_the_cpu_benchmark_only_for_rows_its_config_made(rows, tmp_path, monkeypatch, capsys):
    """The rows of the default run's settings (32 SFT steps, 4 single-turn tasks per category) are not the
    CPU benchmark's: ``results --page`` says which recorded settings differ from configs/cpu_benchmark.yaml
    and writes nothing; with ``--command`` naming what made them, it writes the page stating that command."""
    import yaml

    from envfactory_assets.cli import main as cli_main
    from envfactory_assets.reporting.benchmark_page import settings_mismatches
    from envfactory_assets.settings import store_path
    from envfactory_assets.store.db import Store

    home = tmp_path / "home"
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    unread = dict.fromkeys(
        ("base_model", "base_model_hash", "parent_checkpoint_id", "path", "rl_dataset_version", "sft_dataset_version"),
        "",
    )
    checkpoints = [
        {
            **unread,
            "id": name,
            "stage": "sft",
            "config": config,
            "metrics": {},
            "rl_dataset_ids": [],
            "sft_dataset_ids": [],
        }
        for name, config in (
            ("ckpt_gold", {"max_steps": 32, "learning_rate": 1e-4}),
            ("ckpt_mute", {"max_steps": 100, "learning_rate": 1e-4}),
        )
    ]
    store = Store(store_path(home))
    store.append("checkpoints", checkpoints)
    store.append("evaluations", rows)
    page = tmp_path / "cpu_benchmark.md"
    assert cli_main(["results", "--page", str(page)]) == 2
    err = capsys.readouterr().err
    assert "not made by `envfactory run --select checkpoints,evaluations --config configs/cpu_benchmark.yaml`" in err
    assert "checkpoints max_steps: 100 in the config, 32 in the store's sft rows" in err
    assert "evaluations n_bfcl_single_turn: 40 in the config, 4 in the store's evaluation rows" in err
    assert not page.exists()
    assert cli_main(["results", "--page", str(page), "--command", "envfactory run --config mine.yaml"]) == 0
    assert "```bash\nenvfactory run --config mine.yaml\n```" in page.read_text()
    # the benchmark's own settings contradict nothing the same settings recorded
    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "cpu_benchmark.yaml").read_text())
    same = [{"id": "c", "stage": "sft", "config": {"max_steps": 100, "learning_rate": 1e-4}}]
    evaluation = [{"config": {**config["ops"]["evaluations"]["config"], "sampling": {"temperature": 0.0}}}]
    assert settings_mismatches(config, same, evaluation) == []
    assert settings_mismatches(config, same, [{"config": {"sampling": {"temperature": 0.7}}}]) == [
        "evaluations temperature: 0.0 in the config, 0.7 in the store's evaluation rows"
    ]
