"""Environments built by the programmatic builder from the fixture OpenAPI documents, for tests."""

from __future__ import annotations

from pathlib import Path

import orjson

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.sources.scan import inspect_file

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"


def build_fixture_environment(name: str) -> dict:
    """The environment built from ``fixtures/openapi/<name>`` (a JSON OpenAPI document)."""
    resource = inspect_file(FIXTURES / name, FIXTURES)
    return build_environment(resource.as_row(), orjson.loads((FIXTURES / name).read_bytes()))


def build_fixture_environments(*names: str) -> dict[str, dict]:
    """``{env_id: environment}`` for each fixture document in ``names``."""
    envs = (build_fixture_environment(n) for n in names)
    return {env["env_id"]: env for env in envs}
