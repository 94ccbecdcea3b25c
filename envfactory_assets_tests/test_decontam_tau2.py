"""Decontamination tags against tau2-bench (airline, retail, telecom tool names from the packaged reference)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from envfactory_assets.decontam.benchmarks import all_benchmark_tools, tau2_reference, tau2_tools
from envfactory_assets.decontam.tagging import benchmark_tags, overlap_rows
from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.graph.embeddings import MiniLMEmbedder
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets_tests.fixture_environments import FIXTURES


def _op(op_id: str, summary: str, body: bool = False) -> dict:
    op = {
        "operationId": op_id,
        "summary": summary,
        "responses": {
            "200": {
                "description": "ok",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Reservation"}}},
            }
        },
    }
    if body:
        op["requestBody"] = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Reservation"}}}}
    return op


def airline_spec() -> dict:
    """An OpenAPI document of a small airline booking service (real input for the builder)."""
    return {
        "openapi": "3.0.0",
        "info": {"title": "Airline booking", "version": "1.0", "x-apisguru-categories": ["transport"]},
        "paths": {
            "/reservations": {
                "post": _op("book_reservation", "Book a flight reservation for a passenger", True),
                "get": _op("list_reservations", "List flight reservations"),
            },
            "/reservations/{reservation_id}": {
                "get": _op("get_reservation_details", "Get the details of a flight reservation"),
                "delete": _op("cancel_reservation", "Cancel a flight reservation"),
            },
        },
        "components": {
            "schemas": {
                "Reservation": {
                    "type": "object",
                    "required": ["origin", "destination"],
                    "properties": {
                        "origin": {"type": "string", "description": "Origin airport"},
                        "destination": {"type": "string", "description": "Destination airport"},
                        "cabin": {"type": "string", "enum": ["economy", "business"]},
                    },
                }
            }
        },
    }


def env_from(spec: dict, tmp_path: Path, name: str) -> dict:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(spec))
    resource = inspect_file(path, tmp_path)
    return build_environment(resource.as_row(), spec)


def test_the_packaged_tau2_reference_names_its_source_and_three_domains():
    doc = tau2_reference()
    assert doc["repository"] == "sierra-research/tau2-bench"
    assert sorted(doc["domains"]) == ["airline", "retail", "telecom"]
    for entry in doc["domains"].values():
        assert entry["path"].startswith("src/tau2/domains/") and len(entry["commit"]) == 40
    tools = tau2_tools()
    names = {(t.suite, t.name) for t in tools}
    assert {("airline", "book_reservation"), ("retail", "cancel_pending_order"), ("telecom", "suspend_line")} <= names
    assert all(t.benchmark == "tau2" and t.description for t in tools)
    assert {t.benchmark for t in all_benchmark_tools()} >= {"tau2"}


def test_an_airline_environment_is_tagged_tau2_and_a_bookshop_is_not(tmp_path):
    airline = env_from(airline_spec(), tmp_path, "airline.json")
    bookshop = build_environment(
        inspect_file(FIXTURES / "bookshop.json", FIXTURES).as_row(),
        json.loads((FIXTURES / "bookshop.json").read_bytes()),
    )
    rows = overlap_rows([airline, bookshop], tau2_tools(), MiniLMEmbedder())
    assert benchmark_tags(rows) == {airline["env_id"]: ["tau2"]}
    matched = {(r["tool_name"], r["benchmark_tool"], r["suite"]) for r in rows}
    assert ("book_reservation", "book_reservation", "airline") in matched
    assert ("cancel_reservation", "cancel_reservation", "airline") in matched
