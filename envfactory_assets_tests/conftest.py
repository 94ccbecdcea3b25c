"""Fixtures shared by the test modules: environments built from the fixture OpenAPI documents, their tool
graph and a sandbox worker with them loaded (module scope: each module builds its own; a module that needs
other documents overrides ``environments`` and gets a graph and a worker of those).

The corpus path itself is :data:`envfactory_assets_tests.fixture_environments.FIXTURES`.
"""

from __future__ import annotations

import pytest

from envfactory_assets_tests.fixture_environments import (
    build_fixture_environment,
    build_fixture_environments,
    environment_worker,
    fixture_graph,
)


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
