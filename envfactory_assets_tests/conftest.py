"""Fixtures shared by the test modules: environments built from the fixture OpenAPI documents.

The corpus path itself is :data:`envfactory_assets_tests.fixture_environments.FIXTURES`.
"""

from __future__ import annotations

import pytest

from envfactory_assets_tests.fixture_environments import build_fixture_environment


@pytest.fixture(scope="module")
def bookshop() -> dict:
    """The bookshop environment (``fixtures/openapi/bookshop.json``), built by the programmatic builder."""
    return build_fixture_environment("bookshop.json")
