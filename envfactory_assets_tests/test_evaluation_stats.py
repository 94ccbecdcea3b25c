"""Evaluation statistics: task success (a score doing nothing cannot earn), the do-nothing baseline, paired
bootstrap intervals against the base model, the base model's result cache, and the results table."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.evaluation import synthetic
from envfactory_assets.evaluation.agent import run_agent
from envfactory_assets.evaluation.model_policy import DoNothingPolicy
from envfactory_assets.evaluation.run import (
    EvalSpec,
    ModelRef,
    ResultCache,
    do_nothing_model,
    evaluate_models,
)
from envfactory_assets.evaluation.scoring import covered_gold_calls, task_success
from envfactory_assets.evaluation.stats import paired_bootstrap, stratified_paired_bootstrap, tasks_needed
from envfactory_assets.tooluse.splits import row_split
from envfactory_assets.tooluse.task_episode import TaskRunner

# --- paired bootstrap -------------------------------------------------------------------------------------


def test_the_balanced_difference_resamples_within_categories():
    """Category a: 2 tasks, each +1; category b: 6 tasks, each 0. The balanced difference is (1 + 0) / 2 = 0.5
    and, drawn within categories, every resample gives exactly 0.5; drawn over all tasks (unstratified), the
    pooled difference is 0.25 and its interval is wide."""
    base, other = [0.0] * 8, [1.0, 1.0] + [0.0] * 6
    strata = ["a", "a"] + ["b"] * 6
    diff = stratified_paired_bootstrap(base, other, strata)
    assert (diff.difference, diff.low, diff.high, diff.n) == (0.5, 0.5, 0.5, 8)
    pooled = paired_bootstrap(base, other)
    assert pooled.difference == 0.25 and pooled.high - pooled.low > 0.3
    mixed = stratified_paired_bootstrap([0, 0, 0, 0], [1, 0, 1, 1], ["a", "a", "b", "b"])
    assert mixed.difference == pytest.approx((0.5 + 1.0) / 2) and mixed.low < 0.75 < mixed.high + 1e-9
    with pytest.raises(ValueError, match="strata"):
        stratified_paired_bootstrap([0.0], [1.0], ["a", "b"])


def test_identical_score_lists_give_a_zero_interval():
    scores = [0.0, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0]
    d = paired_bootstrap(scores, list(scores))
    assert (d.difference, d.low, d.high) == (0.0, 0.0, 0.0) and d.n == 8 and d.sd == 0.0


def test_a_constant_shift_gives_an_interval_at_the_shift():
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 0.9, size=50).tolist()
    d = paired_bootstrap(a, [x + 0.1 for x in a])
    assert d.difference == pytest.approx(0.1)
    assert d.low == pytest.approx(0.1, abs=1e-9) and d.high == pytest.approx(0.1, abs=1e-9)


def test_a_noisy_difference_is_covered_and_the_interval_shrinks_with_more_tasks():
    """Success/failure scores: b solves 15 more of 100 tasks than a (20 only a, 35 only b): the interval
    covers the known +0.15, excludes 0, and is about twice as wide at a quarter of the tasks."""
    a = [1] * 20 + [0] * 35 + [1] * 25 + [0] * 20
    b = [0] * 20 + [1] * 35 + [1] * 25 + [0] * 20
    d = paired_bootstrap(a, b, seed=7)
    assert d.difference == pytest.approx(0.15)
    assert d.low < 0.15 < d.high and d.low > 0
    # the normal approximation of the same interval: mean +- 1.96 sd / sqrt(n)
    half = 1.96 * d.sd / np.sqrt(100)
    assert d.low == pytest.approx(0.15 - half, abs=0.02) and d.high == pytest.approx(0.15 + half, abs=0.02)
    small = paired_bootstrap(a[::4], b[::4], seed=7)
    assert (small.high - small.low) > 1.6 * (d.high - d.low)
    assert paired_bootstrap(a, b, seed=7) == d  # seeded: the same inputs give the same interval


def test_bootstrap_refuses_unpaired_or_empty_lists():
    with pytest.raises(ValueError, match="pair them by task"):
        paired_bootstrap([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="no task"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="finite"):
        paired_bootstrap([float("nan")], [1.0])


def test_tasks_needed_for_a_ten_point_difference():
    # sd of a paired success difference when 30% of tasks are solved by only one of the two models: ~0.55
    assert tasks_needed(0.55, 0.10) == 238  # (1.96 + 0.84)^2 * 0.55^2 / 0.1^2
    assert tasks_needed(0.55, 0.10, power=0.5) == 117  # the half-width of the interval equals 0.1
    assert tasks_needed(0.55, 0.20) < tasks_needed(0.55, 0.10)


# --- task success on the bookshop fixture -----------------------------------------------------------------


def _tool_call(name, arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _scripted(first_message):
    """A policy whose first message in a turn is ``first_message`` and which then answers in words."""

    def generate(conversations, seed):
        return [
            first_message if not any(m["role"] == "tool" for m in msgs) else "Here it is." for msgs, _ in conversations
        ]

    return generate


def _row(bookshop, env_id, gold, changes):
    initial = {env_id: copy.deepcopy(bookshop["initial_states"][0]["state"])}
    return {
        "id": f"rl_stats_{gold[0]['name']}",
        "env_ids": [env_id],
        "turn_index": 0,
        "tools": [openai_tool(t) for t in bookshop["tools"]],
        "prompt": [{"role": "user", "content": "Please help with the book."}],
        "gold_calls": gold,
        "masked_arguments": [],
        "initial_state": initial,
        "final_state": initial,
        "benchmark_overlap": [],
        "changes_state": changes,
    }


def _run(runner, row, generate):
    task, restricted = synthetic.as_agent_task(row, max_tools=0)
    return run_agent(generate, [task], synthetic.episode_factory(runner, {row["id"]: restricted}), seed=0)[0]


def test_doing_nothing_and_empty_arguments_score_zero_where_the_hybrid_reward_pays(bookshop):
    env_id = bookshop["env_id"]
    book_id = bookshop["initial_states"][0]["state"]["tables"]["books"][0]["book_id"]
    read = _row(bookshop, env_id, [{"name": "get_book", "arguments": {"book_id": book_id}}], changes=False)
    delete = _row(bookshop, env_id, [{"name": "delete_book", "arguments": {"book_id": book_id}}], changes=True)
    with TaskRunner({env_id: bookshop}) as runner:
        episode = runner.episode(delete)  # the gold final state of the write task
        episode.call("delete_book", {"book_id": book_id})
        delete["final_state"] = episode.final_states()
        episode.close()
        nothing = {
            name: _run(runner, row, DoNothingPolicy().generate)["score"]
            for name, row in (("read", read), ("delete", delete))
        }
        empty = {
            name: _run(runner, row, _scripted(_tool_call(tool, {})))["score"]
            for name, row, tool in (("read", read, "get_book"), ("delete", delete, "delete_book"))
        }
        right = {
            name: _run(runner, row, _scripted(_tool_call(tool, {"book_id": book_id})))["score"]
            for name, row, tool in (("read", read, "get_book"), ("delete", delete, "delete_book"))
        }
        wrong = _run(runner, read, _scripted(_tool_call("get_book", {"book_id": "boo_99999"})))["score"]
    assert nothing["read"]["read_only"] and not nothing["delete"]["read_only"]
    # the paper's reward pays the do-nothing policy the state half on the read-only task; task success does not
    assert nothing["read"]["reward"] == pytest.approx(0.5) and nothing["read"]["success"] == 0.0
    assert nothing["delete"]["reward"] == 0.0 and nothing["delete"]["success"] == 0.0
    assert empty["read"]["success"] == 0.0 and empty["read"]["calls_covered"] == 0.0
    assert empty["read"]["reward"] == pytest.approx(0.45)  # the state half again, minus 0.05 for the unmatched call
    assert empty["delete"]["success"] == 0.0
    assert right["read"]["success"] == 1.0 and right["delete"]["success"] == 1.0
    assert wrong["success"] == 0.0


def test_a_write_with_the_right_state_but_without_the_required_call_fails():
    gold = [{"name": "update_book", "arguments": {"book_id": "b1", "price": 3.0}}]
    hashes = {"e": "after"}
    ok = task_success(
        gold, [{"name": "update_book", "arguments": {"book_id": "b1", "price": 3}}], hashes, hashes, {"e": "before"}
    )
    assert ok.success == 1.0 and not ok.read_only  # 3 == 3.0
    assert task_success(gold, [], hashes, hashes, {"e": "before"}).success == 0.0
    assert task_success(gold, gold, {"e": "other"}, hashes, {"e": "before"}).success == 0.0
    # masked (paging) arguments do not matter; an extra argument is allowed
    assert (
        task_success(
            [{"name": "books_list", "arguments": {"limit": 5, "genre": "x"}}],
            [{"name": "books_list", "arguments": {"genre": "x", "in_stock": True}}],
            {"e": "s"},
            {"e": "s"},
            {"e": "s"},
            masked_arguments=["limit"],
        ).success
        == 1.0
    )
    # no gold call: success is not calling
    assert task_success([], [], {"e": "s"}, {"e": "s"}, {"e": "s"}).success == 1.0
    assert task_success([], gold, {"e": "s"}, {"e": "s"}, {"e": "s"}).success == 0.0


def test_a_predicted_nan_or_infinity_covers_no_gold_value_not_even_null():
    gold = [{"name": "set_price", "arguments": {"book_id": "a", "price": None}}]
    for bad in (float("nan"), float("inf")):
        assert covered_gold_calls(gold, [{"name": "set_price", "arguments": {"book_id": "a", "price": bad}}]) == [False]
    assert covered_gold_calls(gold, gold) == [True]


def test_one_predicted_call_covers_one_gold_call_at_most():
    gold = [{"name": "get_book", "arguments": {"book_id": "a"}}, {"name": "get_book", "arguments": {}}]
    # the broad call could cover either; the matching gives the specific one to the specific gold call
    assert covered_gold_calls(
        gold, [{"name": "get_book", "arguments": {}}, {"name": "get_book", "arguments": {"book_id": "a"}}]
    ) == [True, True]
    assert covered_gold_calls(gold, [{"name": "get_book", "arguments": {"book_id": "a"}}]) == [True, False]


# --- the evaluation loop: baseline, intervals, cache ------------------------------------------------------


def _held_out_alias(bookshop):
    """The bookshop environment under an env id that ``row_split`` holds out (the synthetic benchmark's tasks
    are held-out rows only)."""
    env_id = next(
        f"{bookshop['env_id']}_{k}" for k in range(1000) if row_split([f"{bookshop['env_id']}_{k}"]) == "held_out"
    )
    state = copy.deepcopy(bookshop["initial_states"][0]["state"])
    return env_id, {**bookshop, "env_id": env_id}, state


class _CountingPolicy:
    """The policy of a model that makes the gold read of every task; counts its generation steps."""

    def __init__(self, book_ids):
        self.book_ids = book_ids
        self.steps = 0

    def generate(self, conversations, seed):
        self.steps += 1
        out = []
        for messages, _ in conversations:
            book = next(b for b in self.book_ids if b in messages[0]["content"])
            out.append("Found it." if messages[-1]["role"] == "tool" else _tool_call("get_book", {"book_id": book}))
        return out


def test_second_evaluation_of_the_base_model_reuses_its_cached_results(bookshop, tmp_path):
    env_id, env, state = _held_out_alias(bookshop)
    books = [b["book_id"] for b in state["tables"]["books"][:4]]
    rows = [
        {
            "id": f"rl_cache_{b}",
            "env_ids": [env_id],
            "turn_index": 0,
            "tools": [openai_tool(t) for t in bookshop["tools"]],
            "prompt": [{"role": "user", "content": f"Show me book {b}."}],
            "gold_calls": [{"name": "get_book", "arguments": {"book_id": b}}],
            "masked_arguments": [],
            "initial_state": {env_id: state},
            "final_state": {env_id: state},
            "benchmark_overlap": [],
            "split": "validation",
        }
        for b in books
    ]
    spec = EvalSpec(n_synthetic=None, n_bfcl=0, n_bfcl_single_turn=0, seeds=(0, 1), max_tools=0)
    loaded = []

    def load(model):
        loaded.append(model.label)
        return policies.setdefault(model.label, _CountingPolicy(books) if model.label == "base" else DoNothingPolicy())

    models = [ModelRef("base", "base", str(tmp_path), model_hash="weights-1"), do_nothing_model()]
    policies: dict = {}
    first_cache = ResultCache(tmp_path / "cache")
    first = evaluate_models(models, rows, {env_id: env}, spec, log=lambda _: None, cache=first_cache, load_policy=load)
    steps_after_first = policies["base"].steps
    # one stored unit per model and seed (the do-nothing baseline's reply is its fingerprint)
    assert first_cache.writes == 4 and first_cache.hits == 0 and steps_after_first > 0

    second_cache = ResultCache(tmp_path / "cache")
    second = evaluate_models(
        models, rows, {env_id: env}, spec, log=lambda _: None, cache=second_cache, load_policy=load
    )
    assert second_cache.hits == 4 and second_cache.writes == 0
    assert policies["base"].steps == steps_after_first and loaded.count("base") == 1  # not even loaded again
    assert loaded.count("do_nothing") == 1
    assert [(r["model"], r["subset"], r["mean"]) for r in second] == [
        (r["model"], r["subset"], r["mean"]) for r in first
    ]
    base_row = next(r for r in second if r["model"] == "base" and r["subset"] == "all")
    assert base_row["mean"] == 1.0 and base_row["metrics"]["cached"] and base_row["metrics"]["reward"] == 1.0
    nothing = next(r for r in second if r["model"] == "do_nothing" and r["subset"] == "all")
    assert nothing["mean"] == 0.0 and nothing["metrics"]["reward"] == pytest.approx(0.5)
    vs = nothing["metrics"]["vs_base"]
    assert (vs["difference"], vs["low"], vs["high"], vs["n"]) == (-1.0, -1.0, -1.0, 4)
    assert "vs_base" not in base_row["metrics"]

    # another weight hash or other settings are other entries; a seed already run is reused
    for changed_models, changed_spec, hits in (
        ([ModelRef("base", "base", str(tmp_path), model_hash="weights-2")], spec, 0),
        (models[:1], EvalSpec(n_synthetic=None, n_bfcl=0, n_bfcl_single_turn=0, seeds=(0, 2), max_tools=0), 1),
        (models[:1], EvalSpec(n_synthetic=None, n_bfcl=0, n_bfcl_single_turn=0, seeds=(0, 1), max_tools=2), 0),
    ):
        cache = ResultCache(tmp_path / "cache")
        evaluate_models(
            changed_models, rows, {env_id: env}, changed_spec, log=lambda _: None, cache=cache, load_policy=load
        )
        assert cache.hits == hits and cache.writes == 2 - hits


def test_results_table_shows_differences_with_intervals_and_the_do_nothing_row():
    from envfactory_assets.reporting.results_table import results_markdown

    def row(model, stage, benchmark, subset, mean, vs=None, reward=None):
        metrics = {"headline": "success"}
        if vs:
            metrics["vs_base"] = {
                "difference": vs[0],
                "low": vs[1],
                "high": vs[2],
                "n": 4,
                "sd": 0.1,
                "resamples": 10000,
                "confidence": 0.95,
                "seed": 0,
            }
        if reward is not None:
            metrics["reward"] = reward
        return {
            "model": model,
            "stage": stage,
            "benchmark": benchmark,
            "subset": subset,
            "mean": mean,
            "std": 0.05,
            "n_tasks": 4,
            "seeds": [0, 1, 2],
            "metrics": metrics,
            "config": {"sampling": {"temperature": 0.7, "max_new_tokens": 64}, "max_tool_rounds": 2},
        }

    rows = [
        row("ckpt_a", "sft", "synthetic_held_out", "all", 0.5, (0.25, 0.0, 0.5), 0.6),
        row("base", "base", "synthetic_held_out", "all", 0.25, None, 0.4),
        row("do_nothing", "do_nothing", "synthetic_held_out", "all", 0.0, (-0.25, -0.5, 0.0), 0.3),
        row("base", "base", "bfcl_single", "simple", 0.1),
        row("base", "base", "bfcl_single", "all", 0.2),
        row("ckpt_a", "sft", "bfcl_single", "simple", 0.3, (0.2, 0.1, 0.3)),
    ]
    lines = results_markdown(rows).splitlines()
    head = lines.index("| model | stage | all (n=4) | hybrid reward (all, secondary) |")
    assert lines[head + 2] == "| `base` | base | 0.250 ± 0.050 | 0.400 |"
    assert lines[head + 3] == "| `do_nothing` | does nothing | 0.000 ± 0.050; Δ -0.250 [-0.500, +0.000] | 0.300 |"
    assert lines[head + 4] == "| `ckpt_a` | SFT | 0.500 ± 0.050; Δ +0.250 [+0.000, +0.500] | 0.600 |"
    # a benchmark the table does not know gets its own table, categories after `all`
    single = lines.index("| model | stage | all (n=4) | simple (n=4) |")
    assert lines[single - 2] == "**bfcl_single**: success"
    assert lines[single + 3] == "| `ckpt_a` | SFT | n/a | 0.300 ± 0.050; Δ +0.200 [+0.100, +0.300] |"
    assert "paired bootstrap 95% interval over tasks (10,000 resamples, seed 0" in lines[-1]


def test_the_cpu_benchmark_config_is_sized_as_its_docs_state():
    """The shipped benchmark config loads into the evaluation settings and is as large as docs/evaluation.md
    ("Sizing the benchmark") says: 80% power for a 20-point synthetic difference at 30% discordance, a
    10-point half-width at 15%, at least 200 single-turn tasks; greedy."""
    from pathlib import Path

    import yaml

    from envfactory_assets.defs.evaluation.assets import EvaluationConfig

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "cpu_benchmark.yaml").read_text())
    config = EvaluationConfig(**data["ops"]["evaluations"]["config"])
    assert config.temperature == 0 and not config.full_sets
    assert config.n_synthetic >= tasks_needed(math.sqrt(0.30), difference=0.20)
    assert config.n_synthetic >= tasks_needed(math.sqrt(0.15), difference=0.10, power=0.5)
    assert config.n_bfcl_single_turn * 5 >= 200
    EvalSpec(n_synthetic=config.n_synthetic, n_bfcl=config.n_bfcl, seeds=tuple(config.seeds))
