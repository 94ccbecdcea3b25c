"""Tool graph second phase: add-only edge refinement (programmatic and model-backed), user-providable
classification by a model, graph statistics and the sample-subgraph picture."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import dagster as dg
import orjson
import pytest

from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS
from envfactory_assets.defs.resources import (
    EnvFactoryHome,
    ModelBackend,
    VerificationGate,
)
from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.edge_refinement import (
    PROVENANCE_ID_LIST,
    PROVENANCE_MODEL,
    id_list_edges,
    parse_json_reply,
    refine_graph,
)
from envfactory_assets.graph.embeddings import HashingEmbedder
from envfactory_assets.graph.stage import graph_rows
from envfactory_assets.graph.stats import (
    PROVENANCE_COLOURS,
    graph_statistics,
    sample_subgraph,
    subgraph_markdown,
    subgraph_svg,
)
from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.runner.materialize import materialize_pipeline
from envfactory_assets.sources.scan import SourceResource, inspect_file
from envfactory_assets.store.db import Store
from envfactory_assets_tests.fixture_environments import FIXTURES

EMBEDDER = HashingEmbedder()


def _environment(name: str) -> dict:
    resource = inspect_file(FIXTURES / name, FIXTURES)
    assert isinstance(resource, SourceResource), resource
    return build_environment(resource.as_row(), orjson.loads((FIXTURES / name).read_bytes()))


@pytest.fixture(scope="module")
def graph():
    envs = [_environment("bookshop.json"), _environment("helpdesk.json")]
    return build_tool_graph(tools_from_environments(envs), EMBEDDER)


def _backend(server: FakeChatServer) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(server.base_url, "fake-refiner", backoff_s=0.01, timeout_s=10)


def _edges(graph) -> set[tuple]:
    return {(e["src"], e["src_param"], e["dst"], e["dst_param"]) for e in graph.edges}


def test_model_edges_are_added_only_when_valid_within_one_environment(graph):
    existing = next(e for e in graph.edges if e["src"].startswith("bookshop_example."))
    missing = ("bookshop_example.create_author", "author_id", "bookshop_example.list_authors", "limit")
    assert missing not in _edges(graph)
    proposals = {
        "edges": [
            {"src": "create_author", "src_param": "author_id", "dst": "list_authors", "dst_param": "limit"},  # valid
            {"src": "create_author", "src_param": "author_id", "dst": "create_author", "dst_param": "name"},  # loop
            {
                "src": "create_author",
                "src_param": "author_id",
                "dst": "get_ticket",
                "dst_param": "ticket_id",
            },  # other env
            {"src": "create_author", "src_param": "no_such_output", "dst": "get_book", "dst_param": "book_id"},
            {"src": "create_author", "src_param": "author_id", "dst": "get_book", "dst_param": "no_such_input"},
            {
                "src": existing["src"].split(".", 1)[1],
                "src_param": existing["src_param"],
                "dst": existing["dst"].split(".", 1)[1],
                "dst_param": existing["dst_param"],
            },  # exists
            "not an edge",
        ]
    }

    def reply(body):
        user = body["messages"][1]["content"]
        return f"```json\n{json.dumps(proposals)}\n```" if '"bookshop_example"' in user else '{"edges": []}'

    with FakeChatServer(responder=reply) as server:
        refined, report = refine_graph(graph, EMBEDDER, edge_backend=_backend(server))
        assert len(server.requests) == 2 + report.cross_env_requests  # one request per environment
        assert all(r["messages"][0]["content"].startswith("You link the tools") for r in server.requests[:2])
    added = _edges(refined) - _edges(graph)
    assert added == {missing}
    assert _edges(graph) <= _edges(refined)  # add-only
    new = next(e for e in refined.edges if (e["src"], e["src_param"], e["dst"], e["dst_param"]) == missing)
    assert new["provenance"] == PROVENANCE_MODEL and -1.0 <= new["similarity"] <= 1.0
    reasons = " | ".join(report.rejected)
    for expected in (
        "self-loop",
        "unknown tool",
        "no output 'no_such_output'",
        "no input 'no_such_input'",
        "exists already",
        "malformed edge",
    ):
        assert expected in reasons, reasons
    rows = graph_rows(refined, {"bookshop_example": "ver_a", "helpdesk": "ver_b"})
    assert {r["provenance"] for r in rows["tool_graph_edges"]} >= {PROVENANCE_MODEL}


def test_model_flags_user_providable_inputs_and_bad_answers_keep_the_rule(graph):
    before = {(p["node_id"], p["name"]): p["user_providable"] for p in graph.parameters if p["direction"] == "in"}
    assert before[("helpdesk.get_ticket", "ticket_id")] is False  # the rule: identifiers are not providable
    flags = {"get_ticket.ticket_id": True, "create_ticket.title": "yes", "get_ticket.nope": False}
    with FakeChatServer(
        responder=lambda body: (
            json.dumps({"flags": flags}) if '"get_ticket"' in body["messages"][1]["content"] else "no JSON here"
        )
    ) as server:
        refined, report = refine_graph(graph, EMBEDDER, providable_backend=_backend(server))
    after = {(p["node_id"], p["name"]): p for p in refined.parameters if p["direction"] == "in"}
    assert after[("helpdesk.get_ticket", "ticket_id")]["user_providable"] is True
    assert after[("helpdesk.get_ticket", "ticket_id")]["user_providable_source"] == PROVENANCE_MODEL
    assert "user_providable_source" not in after[("helpdesk.create_ticket", "title")]
    assert report.flags_from_model == 1 and report.flags_changed == 1
    reasons = " | ".join(report.rejected)
    assert "not a boolean" in reasons and "unknown input 'get_ticket.nope'" in reasons
    assert "bookshop_example: reply is not a JSON object" in reasons
    stored = graph_rows(refined, {"bookshop_example": "v1", "helpdesk": "v2"})["tool_graph_parameters"]
    assert {p["user_providable_source"] for p in stored} == {"rule", "model"}


def test_programmatic_refinement_links_an_identifier_to_a_list_of_identifiers():
    tools = [
        {
            "env_id": "shop",
            "name": "create_tag",
            "kind": "create",
            "table": "tags",
            "input_schema": {"type": "object", "properties": {"label": {"type": "string"}}},
            "output_schema": {"type": "object", "properties": {"tag_id": {"type": "string"}}},
        },
        {
            "env_id": "shop",
            "name": "tag_products",
            "kind": "update",
            "table": "products",
            "input_schema": {
                "type": "object",
                "properties": {"tag_ids": {"type": "array", "items": {"type": "string"}}},
            },
            "output_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        },
        {
            "env_id": "other",
            "name": "make_tag",
            "kind": "create",
            "table": "tags",
            "input_schema": {"type": "object", "properties": {}},
            "output_schema": {"type": "object", "properties": {"tag_id": {"type": "string"}}},
        },
    ]
    graph = build_tool_graph(tools, EMBEDDER)
    assert ("shop.create_tag", "tag_id", "shop.tag_products", "tag_ids") not in _edges(graph)
    assert id_list_edges(graph) == [
        {"src": "shop.create_tag", "dst": "shop.tag_products", "src_param": "tag_id", "dst_param": "tag_ids"}
    ]  # not across environments
    refined, report = refine_graph(graph, EMBEDDER)
    assert [e["provenance"] for e in refined.edges if e["dst_param"] == "tag_ids"] == [PROVENANCE_ID_LIST]
    assert refined.producers("shop.tag_products", "tag_ids") == ("shop.create_tag",)
    assert refine_graph(refined, EMBEDDER)[1].added_edges == []  # nothing twice


def test_json_reply_parsing_errors_name_the_problem():
    assert parse_json_reply('Sure! {"edges": []} done', "edges") == []
    with pytest.raises(ValueError, match="no 'flags' key"):
        parse_json_reply('{"edges": []}', "flags")
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_json_reply("no", "edges")


def test_statistics_and_picture_describe_the_graph(graph):
    stats = graph_statistics(graph)
    assert stats["nodes"] == len(graph.nodes) == 13 and stats["edge_rows"] == len(graph.edges)
    assert stats["tool_pairs"] == graph.graph.number_of_edges()
    assert sum(stats["edges_by_provenance"].values()) == len(graph.edges)
    assert 1 <= stats["components"] <= stats["nodes"] and stats["largest_component"] >= 2
    assert stats["cross_environment_pair_share"] == 0.0  # bookshop and helpdesk share no real-world value
    assert stats["cross_environment_edges_by_kind"] == {}
    assert sum(stats["edges_by_kind"].values()) == len(graph.edges) and stats["edges_by_kind"]["identifier"] > 0
    sub = sample_subgraph(graph, max_nodes=6)
    assert sub.number_of_nodes() == 6 and all(n in graph.graph for n in sub)
    svg = ET.fromstring(subgraph_svg(sub))
    ns = "{http://www.w3.org/2000/svg}"
    assert len(svg.findall(f"{ns}circle")) == 6
    assert len(svg.findall(f"{ns}line")) == sub.number_of_edges() + len(PROVENANCE_COLOURS)  # edges + legend
    assert "![tool graph sample](data:image/svg+xml;base64," in subgraph_markdown(graph, 6)


def test_tool_graph_asset_uses_the_model_roles_and_records_them(tmp_path):
    upstream = ["source_resources", "environments", "verified_environments"]
    config = {
        "ops": {
            "source_resources": {"config": {"corpus_dir": str(FIXTURES), "include_mcp": False}},
            "tool_graph": {
                "config": {"embedder": "hashing", "edge_refiner": "model", "providable_classifier": "model"}
            },
        }
    }

    def materialize(selection, backend):
        resources = {
            "envfactory": EnvFactoryHome(home=str(tmp_path)),
            "model_backend": backend,
            "verification_gate": VerificationGate(),
        }
        with dg.instance_for_test() as instance:  # as `envfactory run --select` does (partitions set first)
            results = materialize_pipeline(
                [*ALL_ASSETS, *ALL_CHECKS], instance, resources, config, selection, raise_on_error=False
            )
        return results[-1]

    assert materialize(upstream, ModelBackend()).success  # environments written by the programmatic builder

    def reply(body):
        return '{"edges": []}' if "dependency graph" in body["messages"][0]["content"] else '{"flags": {}}'

    with FakeChatServer(responder=reply) as server:
        result = materialize(
            ["tool_graph"],
            ModelBackend(backend="openai", base_url=server.base_url, model="fake-refiner", api_key_env="NO_KEY"),
        )
        n_requests = len(server.requests)
    assert result.success
    meta = next(
        e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "tool_graph"
    )
    refinement = meta["refinement"].value
    # 2 roles x 3 environments, and one request per environment that doubtful cross-environment pairs enter
    assert refinement["edge_refiner"] == "model" and n_requests == 2 * 3 + refinement["cross_env_requests"]
    assert meta["graph_statistics"].value["nodes"] == len(
        Store(tmp_path / "envfactory.duckdb").read("tool_graph_nodes")
    )
    assert "data:image/svg+xml" in meta["sample_subgraph"].value
    assert meta["model_usage"].value

    def failure_of(result) -> str:
        assert not result.success
        return str(next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)

    # a model role without a model is refused, naming the setting; an endpoint that refuses fails the step
    assert "model_backend.backend is 'programmatic'" in failure_of(materialize(["tool_graph"], ModelBackend()))
    with FakeChatServer([400]) as server:  # another model name: the reply cache must not answer
        refused = materialize(
            ["tool_graph"],
            ModelBackend(backend="openai", base_url=server.base_url, model="other-refiner", api_key_env="NO_KEY"),
        )
    assert "tool_graph refinement: the model backend failed" in failure_of(refused)
    assert (
        len(Store(tmp_path / "envfactory.duckdb").read("tool_graph_nodes")) == meta["graph_statistics"].value["nodes"]
    )


def _toolsets():
    from envfactory_assets_tests import graph_toolsets

    return graph_toolsets


def test_the_model_judges_doubtful_cross_environment_pairs_and_the_default_keeps_none():
    """Pairs between environments that pass free text or "other" values (a ticket subject into an e-mail
    subject, an invoice status into a ticket status) are candidates, not edges: the programmatic refiner
    keeps none; the model keeps the ones it names with a shared kind, and nothing else."""
    ts = _toolsets()
    graph = build_tool_graph(ts.all_tools(), EMBEDDER, threshold=0.6, cross_env_name_match="all")
    assert graph.candidates and all(c["value_kind"] not in ("identifier",) for c in graph.candidates)
    programmatic, report = refine_graph(graph, EMBEDDER)
    env = {n["node_id"]: n["env_id"] for n in graph.nodes}
    crossing = {
        (e["src"], e["src_param"], e["dst"], e["dst_param"])
        for e in programmatic.edges
        if env[e["src"]] != env[e["dst"]]
    }
    assert crossing == {
        (e["src"], e["src_param"], e["dst"], e["dst_param"]) for e in graph.edges if env[e["src"]] != env[e["dst"]]
    }
    assert report.cross_env_requests == 0 and len(programmatic.candidates) == len(graph.candidates)

    def reply(body):
        if "dependency graph" in body["messages"][0]["content"]:
            return '{"edges": []}'
        pairs = json.loads(body["messages"][1]["content"].split("```json\n")[1].split("\n```")[0])["pairs"]
        keep = [{"n": 0, "kind": "person_name"}, {"n": 0, "kind": "person_name"}, {"n": len(pairs), "kind": "email"}]
        if len(pairs) > 1:
            keep.append({"n": 1, "kind": "identifier"})
        return json.dumps({"keep": keep})

    with FakeChatServer(responder=reply) as server:
        refined, report = refine_graph(graph, EMBEDDER, edge_backend=_backend(server))
        judge_prompts = [r for r in server.requests if "real-world values" in r["messages"][0]["content"]]
    dst_envs = {env[c["dst"]] for c in graph.candidates}
    assert report.cross_env_requests == len(judge_prompts) == len(dst_envs)
    kept = [e for e in refined.edges if e["provenance"] == "model_cross"]
    assert len(kept) == report.cross_env_kept == len(dst_envs)  # pair 0 of each request, once
    assert all(e["value_kind"] == "person_name" and env[e["src"]] != env[e["dst"]] for e in kept)
    assert all(refined.passes_shared_value(e["src"], e["dst"], e["dst_param"]) for e in kept)
    reasons = " | ".join(report.rejected)
    assert "kept twice" in reasons and "unknown pair" in reasons and "'identifier' is not a shared" in reasons
    assert refined.meta["n_cross_env_kept_by_model"] == len(kept)
    rows = graph_rows(refined, {e: f"ver_{e}" for e in dst_envs | set(env.values())})["tool_graph_edges"]
    assert {r["value_kind"] for r in rows if r["provenance"] == "model_cross"} == {"person_name"}
