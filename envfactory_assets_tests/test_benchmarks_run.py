"""``python -m benchmarks.run`` lists every benchmark of benchmarks/ and runs one by name with its own arguments."""

from __future__ import annotations

import pytest

from benchmarks import run


def test_every_benchmark_is_listed_with_its_summary():
    names = run.benchmarks()
    assert {
        "conversation",
        "evaluation",
        "grpo",
        "incremental",
        "trajectory_stages",
        "value_semantics",
        "refinement",
        "model_concurrency",
        "serve_env_startup",
        "serve_env_http",
    } <= set(names)
    assert "run" not in names and "__init__" not in names
    assert run.summary(names["incremental"]).startswith("Time one incremental re-synthesis")
    assert run.summary(names["grpo"]).startswith("Benchmark: GRPO seconds per step")
    assert run.summary(names["serve_env_http"]).startswith("Call latency of ``envfactory serve-env ENV_ID --http``")


def test_one_benchmark_runs_by_name_with_its_arguments(capsys):
    assert run.run_one("conversation", ["--help"]) == 0
    assert "--chains" in capsys.readouterr().out


def test_an_unknown_benchmark_is_refused_with_the_names_to_choose_from():
    with pytest.raises(ValueError, match="no benchmark named 'nope'; choose one of .*conversation"):
        run.run_one("nope", [])
