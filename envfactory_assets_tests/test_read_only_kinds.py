"""Read-only data the REST reading used to miss, on fixture documents written for it: lists in an envelope with paging
fields (an ``allOf`` of a paging object and ``{"items": [...]}``), collections under a ``{format}`` parameter, a GET
of a path ending in a parameter that lists the rows holding that value (``/{format}/Players/{team}``), an item path
with no collection path (``/venues/{venue_id}``), and an item path of a collection nested elsewhere
(``/webinars/{webinar_id}`` beside ``/users/{user_id}/webinars``): what extraction infers, what coverage counts,
and the verification gate passing the environment and rejecting broken implementations of its tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.sources.coverage import operation_coverage
from envfactory_assets.sources.openapi import is_format_segment, listed_rows, row_segments
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets_tests.fixture_environments import (
    document_spec,
    environment_fixture,
    failed_checks,
    failed_semantics,
    mutate,
)

FIXTURES = Path(__file__).parent / "fixtures" / "openapi_read_only"
LEAGUE = FIXTURES / "league.json"
MEETINGS = FIXTURES / "meetings.json"
LIBRARY = FIXTURES / "library.json"

league = environment_fixture(LEAGUE, "league")
meetings = environment_fixture(MEETINGS, "meetings")
library = environment_fixture(LIBRARY, "library")


def _resources(path: Path) -> dict:
    return {r.name: r for r in extract_resources(document_spec(path))}


def test_lists_are_read_through_envelopes_but_an_object_with_fields_of_its_own_is_one_row():
    spec = document_spec(LEAGUE)
    schemas = spec["components"]["schemas"]
    charts = spec["paths"]["/charts"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert listed_rows(spec, charts) == schemas["Chart"]  # allOf of a paging object and {"items": [...]}
    assert listed_rows(spec, {"type": "array", "items": {"$ref": "#/components/schemas/Team"}}) == schemas["Team"]
    nested = {"type": "object", "properties": {"_embedded": {"type": "object", "properties": {"events": charts}}}}
    assert listed_rows(spec, nested) == schemas["Chart"]
    # the caller's card holds a list of addresses among its own name and email: a row, not a list
    assert listed_rows(spec, schemas["Card"]) is None
    two_lists = {"type": "object", "properties": {"teams": {"type": "array", "items": schemas["Team"]}, "venues": {}}}
    two_lists["properties"]["venues"] = {"type": "array", "items": schemas["Venue"]}
    assert listed_rows(spec, two_lists) is None
    assert listed_rows(spec, {"type": "array", "items": {"type": "string"}}) is None


def test_format_parameters_are_not_rows():
    assert is_format_segment("{format}") and is_format_segment("{responseFormat}")
    assert not is_format_segment("format") and not is_format_segment("{team}")
    assert row_segments("/{format}/Players/{team}") == ["Players", "{team}"]


def test_read_only_shapes_become_read_only_resources():
    resources = _resources(LEAGUE)
    assert {name: (r.collection_path, sorted(r.operations), r.parent_key) for name, r in resources.items()} == {
        "teams": ("/{format}/Teams", ["list"], None),
        "players": ("/{format}/Players/{team}", ["list"], "team"),
        "venues": ("/venues", ["get"], None),
        "charts": ("/charts", ["list"], None),
    }
    assert all(r.read_only for r in resources.values())
    # rows are the listed objects' fields, not the envelope's paging fields
    assert [f.name for f in resources["charts"].fields] == ["title", "genre", "week"]
    # a list of the rows that hold the path's value: the value is a required field of each row
    players = resources["players"]
    assert players.fields[0].name == "team" and players.fields[0].required
    assert [f.name for f in resources["venues"].fields] == ["name", "capacity", "city"]


def test_coverage_counts_the_read_only_shapes_and_leaves_the_one_object_unmapped():
    coverage = {(c.method, c.path): c.kind or c.reason for c in operation_coverage(document_spec(LEAGUE))}
    assert coverage == {
        ("get", "/{format}/Teams"): "list",
        ("get", "/{format}/Players/{team}"): "list",
        ("get", "/venues/{venue_id}"): "get",
        ("get", "/charts"): "list",
        ("get", "/profile/card"): "no_stateful_collection",
    }


def test_an_item_path_joins_the_one_collection_nested_elsewhere_that_ends_in_its_word():
    (webinars,) = _resources(MEETINGS).values()
    assert {k: op.path for k, op in webinars.operations.items()} == {
        "create": "/users/{user_id}/webinars",
        "list": "/users/{user_id}/webinars",
        "get": "/webinars/{webinar_id}",
        "update": "/webinars/{webinar_id}",
        "delete": "/webinars/{webinar_id}",
    }
    assert webinars.parent_key == "user_id" and not webinars.read_only
    # two collections ending in the same word: the item path belongs to neither, and is not a table of its own
    spec = document_spec(MEETINGS)
    spec["paths"]["/groups/{group_id}/webinars"] = spec["paths"]["/users/{user_id}/webinars"]
    coverage = {(c.method, c.path): c.kind or c.reason for c in operation_coverage(spec)}
    assert coverage[("get", "/webinars/{webinar_id}")] == "no_stateful_collection"
    assert coverage[("get", "/groups/{group_id}/webinars")] == "list"


def test_dotted_operation_ids_join_an_item_path_to_its_collection_and_a_version_word_names_no_rows():
    (shelves,) = _resources(LIBRARY).values()
    assert {k: op.path for k, op in shelves.operations.items()} == {
        "create": "/v1/{parent}/shelves",
        "list": "/v1/{parent}/shelves",
        "get": "/v1/{name}",
        "update": "/v1/{name}",
    }
    coverage = {(c.method, c.path): c.kind or c.reason for c in operation_coverage(document_spec(LIBRARY))}
    # the path's DELETE is library.projects.books.delete: another resource's, which the document does not list
    assert coverage[("delete", "/v1/{name}")] == "not_modelled"
    # /api/{id} reads any object: "api" names no rows, so it is no table of its own
    assert coverage[("get", "/api/{id}")] == "no_stateful_collection"
    # nor does a lookup: /shelves/findByTheme/{theme} reads shelves by another key, not "find_by_themes" rows
    assert coverage[("get", "/shelves/findByTheme/{theme}")] == "no_stateful_collection"


def test_the_environments_pass_with_every_semantic_check_run(league, meetings, library):
    for env, tools in (
        (league, {"teams", "players_by_team", "get_venue", "list_charts"}),
        (meetings, {"list_webinars", "get_webinar", "create_webinar", "update_webinar", "delete_webinar"}),
        (library, {f"library_projects_shelves_{verb}" for verb in ("list", "get", "create", "patch")}),
    ):
        report = verify_environment(env)
        assert report.status == "passed", report.reasons
        assert {t["name"] for t in env["tools"]} == tools
        assert {c.tool for c in report.checks if c.check == "semantics" and c.passed} == tools
    assert all(t["read_only"] for t in league["tools"])
    scoped = next(t for t in league["tools"] if t["name"] == "players_by_team")
    assert scoped["input_schema"]["required"] == ["team"]


@pytest.mark.parametrize(
    ("pattern", "replacement", "tool_name"),
    [
        # a list by the path's value that lists every row
        (r"_list\(state, 'players', \{'team': team, ", "_list(state, 'players', {", "players_by_team"),
        # an item read that answers with another row than the one asked for
        (
            r"return _get\(state, 'venues', venue_id\)",
            "return dict(next(iter(state['tables']['venues'].values())))",
            "get_venue",
        ),
        # a read of an envelope list that writes to the state
        (
            r"return _list\(state, 'charts', \{\}, limit\)",
            "state['meta']['next_id'] += 1\n    return _list(state, 'charts', {}, limit)",
            "list_charts",
        ),
    ],
    ids=["list-ignores-the-path-value", "get-answers-another-row", "list-writes"],
)
def test_gate_rejects_a_broken_read_only_implementation(league, pattern, replacement, tool_name):
    broken = mutate(league, pattern, replacement)
    assert ("semantics", tool_name) in failed_checks(broken)
    assert tool_name in failed_semantics(broken)


def test_gate_rejects_a_flat_item_read_that_misses_the_nested_rows(meetings):
    broken = mutate(
        meetings,
        r"return _get\(state, 'webinars', webinar_id\)",
        "return dict(next(iter(state['tables']['webinars'].values())))",
    )
    assert ("semantics", "get_webinar") in failed_checks(broken)


def test_a_list_by_a_path_value_named_like_the_state_takes_it_under_another_name(tmp_path):
    """PeerTube's ``GET /jobs/{state}``: every tool function's first parameter is the environment ``state``, so
    the path's value is the rows' ``state_value`` (as the field of that name is), not a second ``state``."""
    import orjson

    from envfactory_assets.envgen.builder import build_environment
    from envfactory_assets.sources.scan import SourceResource, inspect_file

    states = {"type": "string", "enum": ["active", "completed", "failed"]}
    jobs = {
        "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}}}}
    }
    video = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Video"}}}}
    videos = {
        "content": {
            "application/json": {"schema": {"type": "array", "items": video["content"]["application/json"]["schema"]}}
        }
    }
    video_id = [{"name": "videoId", "in": "path", "required": True, "schema": {"type": "string"}}]
    spec = {
        "openapi": "3.0.0",
        "info": {"title": "Video jobs", "version": "1", "x-apisguru-categories": ["media"]},
        "paths": {
            "/jobs/{state}": {
                "get": {
                    "operationId": "getJobs",
                    "parameters": [{"name": "state", "in": "path", "required": True, "schema": states}],
                    "responses": {"200": jobs},
                }
            },
            "/videos": {
                "get": {"operationId": "listVideos", "responses": {"200": videos}},
                "post": {"operationId": "createVideo", "requestBody": video, "responses": {"201": video}},
            },
            "/videos/{videoId}": {
                "get": {"operationId": "getVideo", "parameters": video_id, "responses": {"200": video}}
            },
        },
        "components": {
            "schemas": {
                "Job": {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}, "state": states, "type": {"type": "string"}},
                },
                "Video": {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}}},
            }
        },
    }
    (tmp_path / "jobs.json").write_bytes(orjson.dumps(spec))
    resource = inspect_file(tmp_path / "jobs.json", tmp_path)
    assert isinstance(resource, SourceResource), resource
    env = build_environment(resource.as_row(), spec)
    tools = {t["name"]: t for t in env["tools"]}
    assert set(tools["get_jobs"]["input_schema"]["properties"]) == {"limit", "state_value"}, list(tools)
    report = verify_environment(env)
    assert report.status == "passed", report.reasons
