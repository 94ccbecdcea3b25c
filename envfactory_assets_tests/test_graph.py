"""Tool graph: parameter extraction, user-providable rule, embeddings, edges (MiniLM loaded once per module)."""

from __future__ import annotations

import copy
import random
import time

import networkx as nx
import numpy as np
import pytest

from envfactory_assets.graph import (
    EmbedderUnavailableError,
    HashingEmbedder,
    MiniLMEmbedder,
    Parameter,
    ToolGraph,
    build_tool_graph,
    extract_input_parameters,
    extract_output_parameters,
    is_user_providable,
    tools_from_environments,
)
from envfactory_assets.graph.parameters import (
    SHARED_KINDS,
    edge_value_kind,
    extract_parameters,
    normalize_name,
    value_family,
)
from envfactory_assets_tests import graph_toolsets as ts

CRM, MAIL, BILLING, CALENDAR, SUPPORT = ts.CRM, ts.MAIL, ts.BILLING, ts.CALENDAR, ts.SUPPORT


def nid(env: str, name: str) -> str:
    return f"{env}.{name}"


@pytest.fixture(scope="module")
def minilm():
    emb = MiniLMEmbedder()
    try:
        emb.embed(["warm up"])
    except EmbedderUnavailableError as exc:  # pragma: no cover - the package is a declared dependency
        pytest.skip(str(exc))
    return emb


@pytest.fixture(scope="module")
def graph(minilm) -> ToolGraph:
    return build_tool_graph(ts.all_tools(), minilm)


def edge_rows(g: ToolGraph, src: str, dst: str) -> list[dict]:
    return [e for e in g.edges if e["src"] == src and e["dst"] == dst]


def tool(name: str, env: str = CRM) -> dict:
    return next(t for t in ts.all_tools() if t["env_id"] == env and t["name"] == name)


# --------------------------------------------------------------------------- parameters
def test_input_parameters_with_required_flags():
    params = extract_input_parameters(tool("create_contact"))
    assert [(p.name, p.path, p.type, p.required) for p in params] == [
        ("company_id", "company_id", "string", True),
        ("name", "name", "string", True),
        ("email", "email", "string", True),
    ]
    assert all(p.direction == "in" and p.node_id == nid(CRM, "create_contact") for p in params)
    optional = {p.name: p.required for p in extract_input_parameters(tool("list_contacts"))}
    assert optional == {"company_id": False}


def test_output_parameters_flatten_list_items():
    params = extract_output_parameters(tool("list_companies"))
    paths = {p.path: p for p in params}
    assert set(paths) == {"items[].company_id", "items[].name", "items[].industry", "items[].employee_count", "total"}
    assert paths["items[].company_id"].name == "company_id"
    assert paths["items[].company_id"].required is True  # the item schema's `required`
    assert paths["items[].industry"].required is False
    assert paths["total"].type == "integer"


def test_output_parameters_nested_object_nullable_and_non_scalars():
    t = {
        "env_id": "x",
        "name": "get_thing",
        "input_schema": {"type": "object", "properties": {}},
        "output_schema": {
            "type": "object",
            "properties": {
                "thing": {
                    "type": "object",
                    "properties": {"thing_id": {"type": "string"}, "meta": {"type": "object", "properties": {}}},
                },
                "tags": {"type": "array", "items": {"type": "string"}},
                "note": {"type": ["string", "null"], "description": "  a   note "},
                "kind": {"enum": ["a", "b"]},
            },
        },
    }
    params = {p.path: p for p in extract_output_parameters(t)}
    assert set(params) == {"thing.thing_id", "note", "kind"}
    assert params["note"].type == "string" and params["note"].description == "a note"
    assert params["kind"].type == "string" and params["kind"].enum == ("a", "b")


def test_parameter_text_is_name_type_description():
    p = extract_input_parameters(tool("get_company"))[0]
    assert p.text == "company_id (string): Unique identifier of the company"
    bare = Parameter(node_id="x.y", env_id="x", direction="in", name="q", path="q", type="string", required=False)
    assert bare.text == "q (string)"


@pytest.mark.parametrize(
    "name,schema,expected",
    [
        ("company_id", {"type": "string"}, False),
        ("id", {"type": "integer"}, False),
        ("companyId", {"type": "string"}, False),
        ("contact_ids", {"type": "array", "items": {"type": "string"}}, False),
        ("owner", {"type": "string", "format": "uuid"}, False),
        ("page_token", {"type": "string"}, False),
        ("cursor", {"type": "string"}, False),
        ("filters", {"type": "object", "properties": {}}, False),
        ("payload", {}, False),
        ("name", {"type": "string"}, True),
        ("email", {"type": "string", "format": "email"}, True),
        ("priority", {"type": "string", "enum": ["low", "high"]}, True),
        ("amount_cents", {"type": "integer"}, True),
        ("ratio", {"type": "number"}, True),
        ("due_date", {"type": "string", "format": "date"}, True),
        ("archived", {"type": "boolean"}, True),
        ("tags", {"type": "array", "items": {"type": "string"}}, True),
        ("paid", {"type": "boolean"}, True),  # ends in "id" but is not an identifier
        ("valid", {"type": "boolean"}, True),
    ],
)
def test_user_providable_rule(name, schema, expected):
    t = {
        "env_id": "e",
        "name": "t",
        "input_schema": {"type": "object", "properties": {name: schema}},
        "output_schema": {"type": "object", "properties": {}},
    }
    (p,) = extract_input_parameters(t)
    assert is_user_providable(p) is expected


def test_normalize_name_matches_camel_and_snake():
    assert normalize_name("companyId") == normalize_name("company_id") == "companyid"


# --------------------------------------------------------------------------- embeddings
def test_minilm_embeddings_are_normalized_and_deterministic(minilm):
    texts = ["company_id (string): Unique identifier of the company", "email (string): Email address"]
    a, b = minilm.embed(texts), minilm.embed(list(reversed(texts)))
    assert a.shape == (2, 384) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(a[0], b[1], atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_reports_missing_model(tmp_path):
    with pytest.raises(EmbedderUnavailableError):
        MiniLMEmbedder(model_path=tmp_path).embed(["x"])


def test_hashing_embedder_is_stable_and_normalized():
    e = HashingEmbedder(64)
    v = e.embed(["companyId (string): id", "company_id (string): id", ""])
    assert v.shape == (3, 64)
    np.testing.assert_allclose(v[0], v[1])  # camelCase split == snake_case
    np.testing.assert_allclose(np.linalg.norm(v[:2], axis=1), 1.0, atol=1e-6)
    assert not v[2].any()


# --------------------------------------------------------------------------- graph shape
def test_rows_have_the_documented_columns(graph):
    assert set(graph.nodes[0]) == {"node_id", "env_id", "domain", "tool_name", "kind", "n_inputs", "n_outputs"}
    assert set(graph.parameters[0]) == {
        "node_id",
        "direction",
        "name",
        "path",
        "type",
        "required",
        "user_providable",
        "text",
        "value_kind",
    }
    assert set(graph.edges[0]) == {"src", "dst", "src_param", "dst_param", "similarity", "provenance", "value_kind"}
    assert len(graph.nodes) == 26 and graph.graph.number_of_nodes() == 26
    row = next(n for n in graph.nodes if n["node_id"] == nid(CRM, "list_companies"))
    assert row == {
        "node_id": nid(CRM, "list_companies"),
        "env_id": CRM,
        "domain": "productivity",
        "tool_name": "list_companies",
        "kind": "list",
        "n_inputs": 2,
        "n_outputs": 5,
    }


def test_user_providable_flags_in_rows(graph):
    flags = {(p["node_id"], p["name"]): p["user_providable"] for p in graph.parameters if p["direction"] == "in"}
    assert flags[(nid(CRM, "create_contact"), "company_id")] is False
    assert flags[(nid(CRM, "create_contact"), "name")] is True
    assert flags[(nid(CRM, "create_contact"), "email")] is True
    assert flags[(nid(SUPPORT, "create_ticket"), "org_id")] is False
    assert flags[(nid(SUPPORT, "create_ticket"), "priority")] is True
    assert flags[(nid(BILLING, "create_invoice"), "due_date")] is True


def test_producer_to_consumer_edges_by_name(graph):
    (e,) = [
        e
        for e in edge_rows(graph, nid(CRM, "list_companies"), nid(CRM, "get_company"))
        if e["dst_param"] == "company_id"
    ]
    assert e["src_param"] == "items[].company_id" and e["provenance"] == "name_type"
    assert e["similarity"] == pytest.approx(1.0, abs=1e-3)
    for src, dst, param in [
        (nid(CRM, "list_companies"), nid(CRM, "create_contact"), "company_id"),
        (nid(CRM, "create_company"), nid(CRM, "update_company"), "company_id"),
        (nid(CRM, "list_contacts"), nid(CRM, "get_contact"), "contact_id"),
        (nid(MAIL, "list_messages"), nid(MAIL, "reply_to_message"), "message_id"),
        (nid(BILLING, "create_invoice"), nid(BILLING, "void_invoice"), "invoice_id"),
    ]:
        assert any(r["dst_param"] == param and r["provenance"] == "name_type" for r in edge_rows(graph, src, dst)), (
            src,
            dst,
            param,
        )


def test_no_identifier_crosses_environments(graph):
    """CRM's company_id and billing's company_id share a name, and support's org_id embeds like them
    (cosine > 0.85), but an identifier means something only in the API that issued it: none of them is an
    edge, nor a candidate for the refiner."""
    env = {n["node_id"]: n["env_id"] for n in graph.nodes}
    crossing = [e for e in graph.edges if env[e["src"]] != env[e["dst"]]]
    assert crossing and all(e["value_kind"] not in ("identifier", "free_text", "other", "mixed") for e in crossing)
    assert not edge_rows(graph, nid(CRM, "list_companies"), nid(BILLING, "create_invoice"))
    assert not [e for e in graph.edges if e["dst_param"] == "org_id" and env[e["src"]] != SUPPORT]
    assert not [e for e in graph.edges if e["dst_param"] == "company_id" and env[e["src"]] == SUPPORT]
    assert all(c["value_kind"] != "identifier" for c in graph.candidates)
    assert graph.meta["cross_env_not_made_by_kind"]["identifier"] >= 4
    # within one environment identifiers still link producers and consumers
    assert edge_rows(graph, nid(CRM, "list_companies"), nid(CRM, "get_company"))[0]["value_kind"] == "identifier"


def test_shared_values_link_environments_under_any_names(graph):
    """A contact's e-mail address (CRM ``email``) is the address an invoice goes to (billing ``billing_email``)
    and a ticket's requester (support ``requester_email``); an invoice's due date can end an event."""
    for src, dst, out, inp, kind in [
        (nid(CRM, "get_contact"), nid(BILLING, "create_invoice"), "email", "billing_email", "email"),
        (nid(CRM, "list_contacts"), nid(SUPPORT, "create_ticket"), "items[].email", "requester_email", "email"),
        (nid(BILLING, "get_invoice"), nid(CALENDAR, "create_event"), "due_date", "end_time", "datetime"),
    ]:
        rows = [e for e in edge_rows(graph, src, dst) if e["src_param"] == out and e["dst_param"] == inp]
        assert len(rows) == 1 and rows[0]["value_kind"] == kind, (src, dst, rows)
        assert rows[0]["provenance"] in ("embedding", "value_kind")
    assert graph.passes_shared_value(nid(CRM, "get_contact"), nid(BILLING, "create_invoice"), "billing_email")
    assert not graph.passes_shared_value(nid(CRM, "get_company"), nid(CRM, "update_company"), "company_id")


def test_no_edges_between_unrelated_parameters(graph):
    def pairs(src_name, dst_name):
        return [e for e in graph.edges if e["src_param"].split(".")[-1] == src_name and e["dst_param"] == dst_name]

    for a, b in [
        ("company_id", "contact_id"),
        ("contact_id", "company_id"),
        ("company_id", "message_id"),
        ("company_id", "invoice_id"),
        ("invoice_id", "event_id"),
        ("message_id", "ticket_id"),
        ("email", "company_id"),
        ("total", "company_id"),
        ("deleted", "company_id"),
        ("subject", "to"),
        ("event_id", "org_id"),
    ]:
        assert pairs(a, b) == [], (a, b)
    # no tool produces a calendar event id except the calendar's own tools
    producers = {e["src"].split(".")[0] for e in graph.edges if e["dst_param"] == "event_id"}
    assert producers == {CALENDAR}
    # generic names do not join across environments by name alone (invoice status vs ticket status)
    assert not [
        e
        for e in graph.edges
        if e["src"].startswith(BILLING) and e["dst"].startswith(SUPPORT) and e["dst_param"] == "status"
    ]


def test_no_self_loops_and_rows_point_at_real_parameters(graph):
    outs = {(p["node_id"], p["path"]) for p in graph.parameters if p["direction"] == "out"}
    ins = {(p["node_id"], p["name"]) for p in graph.parameters if p["direction"] == "in"}
    for e in graph.edges:
        assert e["src"] != e["dst"]
        assert (e["src"], e["src_param"]) in outs and (e["dst"], e["dst_param"]) in ins
        assert isinstance(e["similarity"], float) and e["provenance"] in ("name_type", "embedding", "value_kind")
        if e["provenance"] == "embedding":
            assert e["similarity"] > 0.85
    assert nx.number_of_selfloops(graph.graph) == 0


def test_digraph_aggregates_parameter_pairs(graph):
    data = graph.graph.edges[nid(CRM, "get_contact"), nid(CRM, "create_contact")]
    assert {(p["src_param"], p["dst_param"]) for p in data["params"]} == {
        ("company_id", "company_id"),
        ("name", "name"),
        ("email", "email"),
    }
    assert data["similarity"] == max(p["similarity"] for p in data["params"])
    assert sum(len(d["params"]) for _, _, d in graph.graph.edges(data=True)) == len(graph.edges)


def test_lookups_for_the_sampler(graph):
    producers = graph.producers(nid(CRM, "get_contact"), "contact_id")
    assert producers == tuple(
        sorted(
            {e["src"] for e in graph.edges if e["dst"] == nid(CRM, "get_contact") and e["dst_param"] == "contact_id"}
        )
    )
    assert {nid(CRM, "list_contacts"), nid(CRM, "create_contact")} <= set(producers)
    assert graph.producers(nid(CRM, "get_contact"), "no_such_input") == ()
    assert [i["name"] for i in graph.inputs(nid(CRM, "create_contact"))] == ["company_id", "name", "email"]
    assert graph.env_of(nid(MAIL, "send_email")) == MAIL


def test_threshold_only_affects_embedding_edges(minilm, graph):
    strict = build_tool_graph(ts.all_tools(), minilm, threshold=0.99)
    assert all(e["provenance"] in ("name_type", "value_kind") for e in strict.edges)
    assert strict.meta["n_edges_name_type"] == graph.meta["n_edges_name_type"]
    loose = build_tool_graph(ts.all_tools(), minilm, threshold=0.7)
    assert strict.meta["n_edges_embedding"] == 0 < loose.meta["n_edges_embedding"]
    assert loose.meta["n_edges_name_type"] == graph.meta["n_edges_name_type"]


def test_cross_env_name_match_all_restores_plain_rule():
    scoped = build_tool_graph(ts.all_tools(), HashingEmbedder(), threshold=0.999)
    plain = build_tool_graph(ts.all_tools(), HashingEmbedder(), threshold=0.999, cross_env_name_match="all")
    # the plain rule matches invoice status to ticket status by name; across environments such a pair of
    # "other" values is only a candidate for the refiner, never an edge
    status = [
        e
        for e in plain.candidates
        if e["src"].startswith(BILLING) and e["dst"].startswith(SUPPORT) and e["dst_param"] == "status"
    ]
    assert status and all(e["provenance"] == "name_type" for e in status)
    assert not [e for e in scoped.candidates if e["dst_param"] == "status" and e["provenance"] == "name_type"]
    assert len(plain.candidates) > len(scoped.candidates) and plain.edges == scoped.edges


def test_bare_id_matches_only_within_the_same_table():
    def t(env, name, table, inp, out):
        return {
            "env_id": env,
            "name": name,
            "table": table,
            "input_schema": {"type": "object", "properties": inp, "required": list(inp)},
            "output_schema": {"type": "object", "properties": out},
        }

    def idp(description):
        return {"id": {"type": "string", "description": description}}

    tools = [
        t("a", "create_user", "users", {}, idp("User id")),
        t("a", "get_user", "users", idp("Id"), {}),
        t("a", "get_order", "orders", idp("Order id"), {}),
        t("b", "get_user", "users", idp("Member id"), {}),
    ]
    g = build_tool_graph(tools, HashingEmbedder(), threshold=0.999)  # texts differ: only the name rule joins
    assert {(e["src"], e["dst"], e["provenance"]) for e in g.edges} == {("a.create_user", "a.get_user", "name_type")}


def test_an_identifier_never_becomes_a_name_by_embedding_alone(minilm):
    def t(name, inp, out):
        return {
            "env_id": "sagemaker",
            "name": name,
            "table": "monitoring_schedules",
            "input_schema": {"type": "object", "properties": inp, "required": list(inp)},
            "output_schema": {"type": "object", "properties": out},
        }

    sid = {"monitoring_schedule_id": {"type": "string", "description": "The identifier of the monitoring schedule."}}
    sname = {"monitoring_schedule_name": {"type": "string", "description": "The name of the monitoring schedule."}}
    tools = [
        t("create_monitoring_schedule", sname, {**sid, **sname}),
        t("update_monitoring_schedule", {**sid, **sname}, sid),
        t("stop_monitoring_schedule", sid, sid),
    ]
    g = build_tool_graph(tools, minilm)
    pairs = {(e["src_param"], e["dst_param"]) for e in g.edges}
    # the two texts embed above the paper's threshold, so only the rule keeps them apart
    text = {(p["direction"], p["name"]): p["text"] for p in g.parameters}
    a, b = minilm.embed([text[("out", "monitoring_schedule_id")], text[("in", "monitoring_schedule_name")]])
    assert float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b)) > 0.85
    assert pairs == {
        ("monitoring_schedule_id", "monitoring_schedule_id"),
        ("monitoring_schedule_name", "monitoring_schedule_name"),
    }
    assert g.meta["n_not_made_handle_text"] > 0


def test_build_is_order_independent_and_deterministic():
    tools = ts.all_tools()
    shuffled = copy.deepcopy(tools)
    random.Random(3).shuffle(shuffled)
    a, b = build_tool_graph(tools, HashingEmbedder()), build_tool_graph(shuffled, HashingEmbedder())
    assert a.nodes == b.nodes and a.parameters == b.parameters and a.edges == b.edges


def test_vectorized_edges_equal_brute_force():
    emb = HashingEmbedder()
    g = build_tool_graph(ts.all_tools(), emb, threshold=0.6)
    outs = [p for p in g.parameters if p["direction"] == "out"]
    ins = [p for p in g.parameters if p["direction"] == "in"]
    vec = dict(zip([p["text"] for p in outs + ins], emb.embed([p["text"] for p in outs + ins]), strict=False))
    env = {n["node_id"]: n["env_id"] for n in g.nodes}
    objs = {
        (f"{t['env_id']}.{t['name']}", p.direction, p.path): p for t in ts.all_tools() for p in extract_parameters(t)
    }
    expected = set()
    for o in outs:
        for i in ins:
            if o["node_id"] == i["node_id"]:
                continue
            cross = env[o["node_id"]] != env[i["node_id"]]
            kind = edge_value_kind(o["value_kind"], i["value_kind"])
            sim = float(vec[o["text"]] @ vec[i["text"]])
            same_name = normalize_name(o["name"]) == normalize_name(i["name"]) and o["type"] == i["type"]
            if same_name and cross and not (o["value_kind"] == i["value_kind"] and kind in SHARED_KINDS):
                same_name = False
            fam = value_family(objs[(o["node_id"], "out", o["path"])])
            same_family = (
                cross
                and fam is not None
                and fam == value_family(objs[(i["node_id"], "in", i["name"])])
                and o["type"] == i["type"]
            )
            handle_text = {o["value_kind"], i["value_kind"]} & {"identifier"} and {
                o["value_kind"],
                i["value_kind"],
            } & {"free_text", "person_name", "organization"}
            if sim > 0.6 and handle_text and not cross and not same_name and not same_family:
                continue
            if (sim > 0.6 or same_name or same_family) and (not cross or kind in SHARED_KINDS):
                expected.add((o["node_id"], i["node_id"], o["path"], i["name"]))
    assert {(e["src"], e["dst"], e["src_param"], e["dst_param"]) for e in g.edges} == expected


def test_from_rows_round_trip(graph):
    again = ToolGraph.from_rows(graph.nodes, graph.parameters, graph.edges, graph.meta)
    assert set(again.graph.edges) == set(graph.graph.edges)
    assert again.edges == graph.edges
    with pytest.raises(ValueError):
        ToolGraph.from_rows(graph.nodes, graph.parameters, [{**graph.edges[0], "dst": graph.edges[0]["src"]}])


def test_tools_from_environments():
    env = {
        "env_id": CRM,
        "domain": "productivity",
        "tools": [{k: v for k, v in t.items() if k not in ("env_id", "domain")} for t in ts.crm_tools()],
    }
    assert tools_from_environments([env]) == ts.crm_tools()


@pytest.mark.parametrize(
    "mutate,err",
    [
        (lambda ts_: ts_ + [ts_[0]], "duplicate"),
        (lambda ts_: [{**ts_[0], "env_id": ""}], "env_id"),
        (lambda ts_: [{**ts_[0], "name": "bad name"}], "invalid name"),
    ],
)
def test_bad_tools_raise(mutate, err):
    with pytest.raises(ValueError, match=err):
        build_tool_graph(mutate(ts.all_tools()), HashingEmbedder())


def test_bad_threshold_and_embedder_shape():
    with pytest.raises(ValueError):
        build_tool_graph(ts.all_tools(), HashingEmbedder(), threshold=1.5)

    class Broken:
        def embed(self, texts):
            return np.zeros((1, 3))

    with pytest.raises(ValueError, match="shape"):
        build_tool_graph(ts.all_tools(), Broken())


def synthetic_tools(n_envs: int = 100, per_env: int = 10) -> list[dict]:
    """~n_envs x per_env CRUD tools over varied entities (for the scale check)."""
    words = (
        "account order product invoice ticket project task user team repo issue commit build release "
        "server volume bucket file folder document page note comment message channel event booking "
        "flight hotel room payment refund subscription plan customer vendor shipment package item "
        "review playlist song album video course lesson student patient doctor appointment claim "
        "policy listing lead deal campaign survey form workflow job candidate employee expense asset "
        "device sensor alert incident metric report"
    ).split()
    rng = random.Random(0)
    tools = []
    for e in range(n_envs):
        ents = rng.sample(words, 3)
        for k in range(per_env):
            ent, other = ents[k % 3], ents[(k + 1) % 3]
            row = {
                f"{ent}_id": {"type": "string", "description": f"Unique identifier of the {ent}"},
                "name": {"type": "string", "description": f"Name of the {ent}"},
                f"{other}_id": {"type": "string", "description": f"Identifier of the related {other}"},
                "status": {"type": "string", "enum": ["a", "b"], "description": f"Status of the {ent}"},
                "notes": {"type": "string", "description": f"Notes about the {ent} in service {e}"},
            }
            kind = ("list", "get", "create", "update", "delete")[k % 5]
            inp = {
                "list": {"limit": {"type": "integer"}},
                "get": {f"{ent}_id": row[f"{ent}_id"]},
                "create": {"name": row["name"], f"{other}_id": row[f"{other}_id"]},
                "update": {f"{ent}_id": row[f"{ent}_id"], "status": row["status"]},
                "delete": {f"{ent}_id": row[f"{ent}_id"]},
            }[kind]
            out = (
                {"items": {"type": "array", "items": {"type": "object", "properties": row}}} if kind == "list" else row
            )
            tools.append(
                {
                    "env_id": f"svc{e}_com__api",
                    "domain": "d",
                    "name": f"{kind}_{ent}_{k}",
                    "kind": kind,
                    "table": ent,
                    "input_schema": {"type": "object", "properties": inp},
                    "output_schema": {"type": "object", "properties": out},
                }
            )
    return tools


def test_scales_to_a_thousand_tools():
    tools = synthetic_tools()
    t0 = time.perf_counter()
    g = build_tool_graph(tools, HashingEmbedder())
    elapsed = time.perf_counter() - t0
    assert g.meta["n_nodes"] == 1000 and g.meta["n_parameters"] > 5000
    assert g.meta["n_edge_rows"] > 0
    assert elapsed < 60, elapsed  # ~1-2 s on a 2-core laptop; generous for loaded CI machines


def test_toolsets_are_well_formed():
    tools = ts.all_tools()
    ids = [f"{t['env_id']}.{t['name']}" for t in tools]
    assert len(ids) == len(set(ids)) == 26
    assert {t["env_id"] for t in tools} == {CRM, MAIL, BILLING, CALENDAR, SUPPORT}


def test_embedding_reports_progress_per_chunk_and_gives_the_graph_of_one_call(monkeypatch):
    from envfactory_assets.graph import build as build_module

    tools = synthetic_tools(n_envs=100)
    seen: list[tuple[int, int]] = []
    g = build_tool_graph(tools, HashingEmbedder(), progress=lambda done, total: seen.append((done, total)))
    texts = g.meta["n_distinct_texts"]
    assert texts > 2 * build_module.EMBED_CHUNK
    assert seen == [(0, texts)] + [
        (min(k * build_module.EMBED_CHUNK, texts), texts)  # (0, n) starts the clock
        for k in range(1, -(-texts // build_module.EMBED_CHUNK) + 1)
    ]
    monkeypatch.setattr(build_module, "EMBED_CHUNK", texts)  # every text in one embedder call
    whole = build_tool_graph(tools, HashingEmbedder())
    assert whole.edges == g.edges and whole.parameters == g.parameters
