"""Decontamination tags against BFCL v3 multi-turn (function docs shipped by the bfcl-eval wheel)."""

from __future__ import annotations

import orjson
import pytest

from envfactory_assets.decontam.benchmarks import benchmark_availability, bfcl_multi_turn_tools
from envfactory_assets.decontam.tagging import benchmark_tags, overlap_rows
from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.graph.embeddings import MiniLMEmbedder
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets_tests.fixture_environments import FIXTURES

pytestmark = pytest.mark.skipif(not bfcl_multi_turn_tools(), reason="bfcl-eval is not installed (scripts/setup.sh)")


def env_of(name: str) -> dict:
    resource = inspect_file(FIXTURES / name, FIXTURES)
    return build_environment(resource.as_row(), orjson.loads((FIXTURES / name).read_bytes()))


def test_bfcl_reference_holds_the_multi_turn_api_classes():
    tools = bfcl_multi_turn_tools()
    suites = {t.suite for t in tools}
    assert {"ticket_api", "gorilla_file_system", "travel_booking", "vehicle_control"} <= suites
    assert any(t.name == "close_ticket" for t in tools)
    assert "sierra-research/tau2-bench" in benchmark_availability()["tau2"]


def test_a_ticketing_environment_is_tagged_and_a_bookshop_is_not():
    helpdesk, bookshop = env_of("helpdesk.json"), env_of("bookshop.json")
    rows = overlap_rows([helpdesk, bookshop], bfcl_multi_turn_tools(), MiniLMEmbedder())
    tags = benchmark_tags(rows)
    assert tags == {helpdesk["env_id"]: ["bfcl_v3_multi_turn"]}
    matched = {(r["tool_name"], r["benchmark_tool"]) for r in rows}
    assert ("create_ticket", "create_ticket") in matched
    assert all(r["suite"] == "ticket_api" for r in rows if r["match"] == "name")
