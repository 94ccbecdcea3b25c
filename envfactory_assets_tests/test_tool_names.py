"""Tool names a person can read: at most 40 characters, no counters (``list_webhooks_2``) or empty words
(``case__id``), a clash told apart by what the tools differ in, valid as a function name in every export format.

The fixture ``openapi_names/hooks.json`` has two collections ending in ``/webhooks`` (``/webhooks`` and
``/apps/{app_id}/webhooks``) without operationIds, Springfox-style operationIds with a counter
(``getAppUsingGET_1``) and Google-style ones longer than 40 characters
(``analyticshub.projects.locations.dataExchanges.list``).
"""

from __future__ import annotations

import keyword
from pathlib import Path

import orjson
import pytest

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.tool_names import ToolNameError, own_name, readability_figures, tool_names
from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.sources.names import MAX_TOOL_NAME_CHARS, TOOL_NAME_RE, name_artefact
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets.tooluse.task_environment import environment_class

FIXTURES = Path(__file__).parent / "fixtures" / "openapi_names"


@pytest.fixture(scope="module")
def hooks_env() -> dict:
    resource = inspect_file(FIXTURES / "hooks.json", FIXTURES)
    return build_environment(resource.as_row(), orjson.loads((FIXTURES / "hooks.json").read_bytes()))


def _names(env: dict) -> dict[tuple[str, str], str]:
    return {(t["operation"]["method"], t["operation"]["path"]): t["name"] for t in env["tools"]}


def test_a_twin_collection_is_told_apart_by_its_path_not_by_a_counter(hooks_env):
    names = _names(hooks_env)
    # today: list_webhooks / list_webhooks_2, get_webhooks_2, create_webhooks_2
    assert names["GET", "/webhooks"] == "list_webhooks"
    assert names["POST", "/webhooks"] == "create_webhook"
    assert names["GET", "/webhooks/{webhook_id}"] == "get_webhook"
    assert names["GET", "/apps/{app_id}/webhooks"] == "list_app_webhooks"
    assert names["POST", "/apps/{app_id}/webhooks"] == "create_app_webhook"
    assert not [n for n in names.values() if name_artefact(n)]


def test_a_generator_counter_in_an_operation_id_is_dropped(hooks_env):
    names = _names(hooks_env)
    # today: list_apps_using_get_1, get_app_using_get_1
    assert names["GET", "/apps"] == "list_apps"
    assert names["GET", "/apps/{app_id}"] == "get_app"
    assert names["POST", "/apps"] == "create_app"  # an own name that reads well is kept


def test_a_long_operation_id_becomes_its_verb_and_table(hooks_env):
    names = _names(hooks_env)
    path = "/projects/{project_id}/locations/{location_id}/dataExchanges"
    # today: analyticshub_projects_locations_data_exchanges_list (51 characters)
    assert names["GET", path] == "list_data_exchanges"
    assert names["POST", path] == "create_data_exchange"
    assert max(len(n) for n in names.values()) <= MAX_TOOL_NAME_CHARS


def test_names_are_valid_function_names_in_every_export_format(hooks_env):
    names = [t["name"] for t in hooks_env["tools"]]
    assert len(set(names)) == len(names)
    for name in names:
        assert TOOL_NAME_RE.match(name) and name.isidentifier() and not keyword.iskeyword(name), name
    # OpenAI tools (and so verl, LlamaFactory's ShareGPT tools), TRL's environment_factory class
    assert [openai_tool(t)["function"]["name"] for t in hooks_env["tools"]] == names
    assert set(names) <= set(dir(environment_class(hooks_env["tools"])))
    # the generated module defines a function of each name, and every one runs
    report = verify_environment(hooks_env)
    assert report.status == "passed", report.reasons[:5]


def _tool(kind, table, method, path, operation_id=None, verb=None):
    tool = {"kind": kind, "table": table, "operation": {"method": method, "path": path, "operation_id": operation_id}}
    if verb:
        tool["action"] = {"verb": verb}
    return tool


def test_a_clash_is_resolved_by_the_part_the_tools_differ_in():
    tools = [
        _tool("list", "tracks", "GET", "/tracks"),
        _tool("list", "tracks_2", "GET", "/me/tracks"),
        _tool("list", "tracks_3", "GET", "/me/likes/tracks"),
        _tool("list", "tracks_4", "GET", "/playlists/{playlist_id}/tracks"),
    ]
    assert tool_names(tools) == ["list_tracks", "list_me_tracks", "list_like_tracks", "list_playlist_tracks"]
    # the same tools in another order get the same names: nothing depends on who came first
    assert tool_names(tools[::-1]) == ["list_playlist_tracks", "list_like_tracks", "list_me_tracks", "list_tracks"]
    # two operations named alike by the API (duplicate operationIds) are named by their tables
    dup = [_tool("create", "orders", "POST", "/orders", "create"), _tool("create", "users", "POST", "/users", "create")]
    assert tool_names(dup) == ["create_order", "create_user"]
    # /product and /products differ only in the number of the word
    pair = [_tool("get", "product", "GET", "/product/{id}"), _tool("get", "products", "GET", "/products/{id}")]
    assert tool_names(pair) == ["get_product", "get_products"]
    # one MCP tool that reads two tables keeps its name, with each table (today: read_graph, read_graph_2)
    graph = [_tool("list", t, "mcp", "read_graph", "read_graph") for t in ("entities", "relations")]
    assert tool_names(graph) == ["read_graph_entities", "read_graph_relations"]
    # an action keeps its verb
    assert tool_names([_tool("action", "orders", "POST", "/orders/{id}/cancel", verb="cancel")]) == ["cancel_order"]


def test_tools_nothing_tells_apart_are_refused_with_their_operations():
    twins = [_tool("list", "items", "GET", "/items"), _tool("list", "items_2", "GET", "/items")]
    with pytest.raises(ToolNameError, match=r"list_items \(GET items, table items\)"):
        tool_names(twins)


def test_own_names_lose_counters_and_generator_suffixes():
    assert own_name("getUserUsingGET_1") == "get_user"
    assert own_name("list_items_2") == "list_items"
    assert own_name("storage.buckets.list") == "storage_buckets_list"
    assert own_name("analyticshub.projects.locations.dataExchanges.list") is None  # 51 characters
    assert own_name("filter") is None and own_name("reset") is None and own_name("2") is None


def test_the_figures_count_long_artefact_and_duplicate_names():
    envs = [
        {"env_id": "a", "tools": [{"name": "list_webhooks"}, {"name": "list_webhooks_2"}, {"name": "get_case__id"}]},
        {"env_id": "b", "tools": [{"name": "analyticshub_projects_locations_data_exchanges_list"}]},
        {"env_id": "c", "tools": [{"name": "list_v2_items"}, {"name": "list_v2_items"}]},
    ]
    figures = readability_figures(envs)
    assert (figures["environments"], figures["tools"]) == (3, 6)
    assert (figures["long"], figures["environments_long"]) == (1, 1)
    assert figures["artefact"] == 2 and figures["artefact_examples"] == ["a: list_webhooks_2", "a: get_case__id"]
    assert figures["duplicate"] == 1 and figures["duplicate_examples"] == ["c: list_v2_items"]
