"""Topology-aware chain sampler and random-walk baseline on real small tool graphs."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from envfactory_assets.graph import (
    EmbedderUnavailableError,
    HashingEmbedder,
    MiniLMEmbedder,
    build_tool_graph,
)
from envfactory_assets.synth.sampling.sampler import (
    USER,
    Chain,
    ChainSamplingError,
    SamplerConfig,
    chain_seed,
    dependency_stats,
    flow_stats,
    random_walk_chain,
    sample_chain,
    sample_chains,
    service_name,
    validate_chain,
)
from envfactory_assets_tests import graph_toolsets as ts

CRM, MAIL, BILLING, CALENDAR, SUPPORT = ts.CRM, ts.MAIL, ts.BILLING, ts.CALENDAR, ts.SUPPORT
SEEDS = range(300)


@pytest.fixture(scope="module")
def graph():
    emb = MiniLMEmbedder()  # the model is cached per process: loaded once for the whole session
    try:
        return build_tool_graph(ts.all_tools(), emb)
    except EmbedderUnavailableError as exc:  # pragma: no cover - the package is a declared dependency
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def chains(graph):
    return [sample_chain(graph, s) for s in SEEDS]


def n(env: str, name: str) -> str:
    return f"{env}.{name}"


def _chain(graph, tools, producers=None) -> Chain:
    servers = []
    for t in tools:
        if graph.env_of(t) not in servers:
            servers.append(graph.env_of(t))
    return Chain(tools=tuple(tools), servers=tuple(servers), seed=0, sampler="manual", producers=producers or {})


# --------------------------------------------------------------------------- seeds and determinism
def test_chain_seed_is_sha256_of_the_key():
    assert chain_seed("tool_chains/0") == int.from_bytes(hashlib.sha256(b"tool_chains/0").digest()[:8], "big")
    assert chain_seed("a") != chain_seed("b")
    assert 0 <= chain_seed("x") < 2**64


def test_same_seed_same_chain(graph):
    for s in (0, 7, 12345):
        assert sample_chain(graph, s) == sample_chain(graph, s)
        assert random_walk_chain(graph, s) == random_walk_chain(graph, s)
    assert len({sample_chain(graph, s).tools for s in range(20)}) > 10


def test_sampler_uses_no_global_random_state(graph):
    state = random.getstate()
    random.seed(1)
    a = sample_chain(graph, 5)
    random.seed(2)
    b = sample_chain(graph, 5)
    assert a == b
    random.setstate(state)
    before = random.getstate()
    sample_chain(graph, 6)
    random_walk_chain(graph, 6)
    assert random.getstate() == before


def test_same_result_on_a_rebuilt_graph(graph):
    again = type(graph).from_rows(list(reversed(graph.nodes)), graph.parameters, list(reversed(graph.edges)))
    assert [sample_chain(again, s) for s in range(10)] == [sample_chain(graph, s) for s in range(10)]


# --------------------------------------------------------------------------- the topology sampler
def test_every_sampled_chain_validates(graph, chains):
    cfg = SamplerConfig()
    for c in chains:
        assert validate_chain(graph, c, cfg) == [], (c.seed, c.tools)
        assert c.sampler == "topology" and 2 <= len(c) <= 15 and len(c.servers) <= 3


def test_producers_are_placed_before_consumers(graph, chains):
    checked = 0
    for c in chains:
        pos = {t: k for k, t in enumerate(c.tools)}
        for t in c.tools:
            bindings = c.producers[t]
            for inp in graph.inputs(t):
                if inp["required"]:
                    assert inp["name"] in bindings, (t, inp["name"])
                    if not inp["user_providable"]:
                        assert bindings[inp["name"]] != USER
            for name, src in bindings.items():
                if src != USER:
                    assert pos[src] < pos[t]
                    assert src in graph.producers(t, name)
                    checked += 1
    assert checked > 100


def test_chains_that_need_ids_get_their_producer(graph, chains):
    # get_company needs company_id; whenever it is in a chain, some company_id producer comes first
    seen = 0
    for c in chains:
        if n(CRM, "get_company") in c.tools:
            seen += 1
            src = c.producers[n(CRM, "get_company")]["company_id"]
            assert c.tools.index(src) < c.tools.index(n(CRM, "get_company"))
    assert seen > 20


def test_limits_are_honoured(graph, chains):
    assert max(len(c.servers) for c in chains) == 3  # 5 environments: the default limit binds
    assert max(len(c) for c in chains) == 15
    small = SamplerConfig(max_tools=4, max_servers=1)
    for s in SEEDS:
        c = sample_chain(graph, s, small)
        assert 2 <= len(c) <= 4 and len(c.servers) == 1
        assert {graph.env_of(t) for t in c.tools} == set(c.servers)
        assert validate_chain(graph, c, small) == []
        w = random_walk_chain(graph, s, small)
        assert len(w) <= 4 and len(w.servers) == 1


def test_optional_inputs_are_skipped_or_kept(graph):
    def optional_bound(cfg):
        count = 0
        for s in range(100):
            c = sample_chain(graph, s, cfg)
            for t in c.tools:
                count += sum(1 for i in graph.inputs(t) if not i["required"] and i["name"] in c.producers[t])
        return count

    assert optional_bound(SamplerConfig(p_skip_optional=1.0)) == 0
    assert optional_bound(SamplerConfig(p_skip_optional=0.0)) > optional_bound(SamplerConfig()) > 0


def test_explicit_producers_for_fillable_inputs(graph):
    """p_explicit_producer = 1: user-providable inputs with a producer get that producer, not the user."""

    def user_bound(cfg):
        return sum(
            v == USER for s in range(100) for b in sample_chain(graph, s, cfg).producers.values() for v in b.values()
        )

    assert user_bound(SamplerConfig(p_explicit_producer=1.0)) < user_bound(SamplerConfig(p_explicit_producer=0.0))
    for s in range(50):
        assert validate_chain(graph, sample_chain(graph, s, SamplerConfig(p_explicit_producer=1.0))) == []


def test_config_validation():
    with pytest.raises(ValueError):
        SamplerConfig(p_skip_optional=1.5)
    with pytest.raises(ValueError):
        SamplerConfig(min_tools=0)
    with pytest.raises(ValueError):
        SamplerConfig(max_tools=3, min_tools=4)


# --------------------------------------------------------------------------- recursion depth (hand-made graph)
STEPS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]


def pipeline_tools() -> list[dict]:
    """golf needs foxtrot's output, which needs echo's, ... alpha needs nothing: a 6-deep producer chain.
    plus an orphan whose required id nothing produces."""

    def key(word):
        return {f"{word}_key_id": {"type": "string", "description": f"Handle issued for stage {word}"}}

    tools = []
    for k, word in enumerate(STEPS):
        inp = key(STEPS[k - 1]) if k else {}
        tools.append(
            {
                "env_id": "pipeline",
                "domain": "d",
                "name": f"run_{word}",
                "kind": "create",
                "table": word,
                "input_schema": {"type": "object", "properties": inp, "required": list(inp)},
                "output_schema": {"type": "object", "properties": key(word)},
            }
        )
    tools.append(
        {
            "env_id": "pipeline",
            "domain": "d",
            "name": "orphan",
            "kind": "get",
            "table": "x",
            "input_schema": {"type": "object", "properties": key("zulu"), "required": ["zulu_key_id"]},
            "output_schema": {"type": "object", "properties": {}},
        }
    )
    return tools


@pytest.fixture(scope="module")
def pipeline():
    g = build_tool_graph(pipeline_tools(), HashingEmbedder(), threshold=0.999)
    expected = {(f"pipeline.run_{a}", f"pipeline.run_{b}") for a, b in zip(STEPS, STEPS[1:], strict=False)}
    assert set(g.graph.edges) == expected
    return g


def _seed_starting_at(graph, node):
    return next(s for s in range(10_000) if random.Random(s).choice(graph.node_ids) == node)


def test_producers_resolve_recursively_up_to_max_depth(pipeline):
    seed = _seed_starting_at(pipeline, "pipeline.run_golf")
    one_start = dict(max_start_attempts=1, min_tools=1)
    c = sample_chain(pipeline, seed, SamplerConfig(max_depth=6, **one_start))
    assert c.tools == tuple(f"pipeline.run_{w}" for w in STEPS)
    assert validate_chain(pipeline, c) == []
    with pytest.raises(ChainSamplingError):  # alpha would sit at depth 6 > 5
        sample_chain(pipeline, seed, SamplerConfig(max_depth=5, **one_start))
    with pytest.raises(ChainSamplingError):  # or needs a 7th tool
        sample_chain(pipeline, seed, SamplerConfig(max_depth=6, max_tools=6, **one_start))


def test_tool_with_unfillable_required_input_is_never_added(pipeline):
    assert all("pipeline.orphan" not in sample_chain(pipeline, s).tools for s in range(100))
    assert validate_chain(pipeline, _chain(pipeline, ["pipeline.orphan"]))


def test_edgeless_graph_raises():
    g = build_tool_graph(pipeline_tools()[-1:] + pipeline_tools()[:1], HashingEmbedder(), threshold=0.999)
    with pytest.raises(ChainSamplingError):
        sample_chain(g, 0)
    assert sample_chains(g, 3, "k") == []
    empty = build_tool_graph([], HashingEmbedder())
    assert sample_chains(empty, 3, "k") == []
    with pytest.raises(ValueError):
        sample_chain(empty, 0)


# --------------------------------------------------------------------------- validation
def test_validate_chain_finds_problems(graph):
    lc, gc = n(CRM, "list_companies"), n(CRM, "get_company")
    assert validate_chain(graph, _chain(graph, [lc, gc])) == []
    assert any("company_id" in p for p in validate_chain(graph, _chain(graph, [gc])))
    assert any("company_id" in p for p in validate_chain(graph, _chain(graph, [gc, lc])))  # wrong order
    bad_record = _chain(graph, [lc, gc], {gc: {"company_id": n(MAIL, "send_email")}})
    assert any("not earlier" in p for p in validate_chain(graph, bad_record))
    wrong_servers = Chain(tools=(lc, gc), servers=(MAIL,), seed=0, sampler="manual")
    assert any("servers" in p for p in validate_chain(graph, wrong_servers))
    assert validate_chain(graph, _chain(graph, [lc, lc]))
    assert validate_chain(graph, _chain(graph, [])) == ["chain is empty"]
    assert validate_chain(graph, Chain(tools=("nope.x",), servers=("nope",), seed=0, sampler="m"))
    assert validate_chain(graph, _chain(graph, [lc, gc]), SamplerConfig(max_tools=1, min_tools=1))


# --------------------------------------------------------------------------- baseline vs topology
def test_baseline_satisfies_fewer_dependencies(graph, chains):
    walks = [random_walk_chain(graph, s) for s in SEEDS]
    assert all(w.sampler == "random_walk" for w in walks)
    topo, base = dependency_stats(graph, chains), dependency_stats(graph, walks)
    assert topo["chain_valid_rate"] == 1.0 and topo["input_satisfaction_rate"] == 1.0
    assert base["chain_valid_rate"] < 0.8
    assert base["input_satisfaction_rate"] < 0.95
    # the walk still follows edges: consecutive tools are graph neighbours
    for w in walks:
        assert all(graph.graph.has_edge(a, b) for a, b in zip(w.tools, w.tools[1:], strict=False))


# --------------------------------------------------------------------------- many chains
def test_sample_chains_distinct_valid_deterministic(graph):
    a = sample_chains(graph, 40, "tool_chains/v1")
    assert a == sample_chains(graph, 40, "tool_chains/v1")
    assert len(a) == 40 and len({c.tools for c in a}) == 40
    assert all(validate_chain(graph, c, SamplerConfig()) == [] for c in a)
    assert all(c.seed == chain_seed(c.key) and c.key.startswith("tool_chains/v1/") for c in a)
    assert [c.tools for c in sample_chains(graph, 40, "tool_chains/v2")] != [c.tools for c in a]
    # a chain's seed depends on its own key only: asking for fewer keeps the same prefix
    assert sample_chains(graph, 10, "tool_chains/v1") == a[:10]


def test_sample_chains_baseline_and_errors(graph):
    walks = sample_chains(graph, 30, "b", sampler="random_walk", require_valid=False)
    assert len(walks) == 30 and any(validate_chain(graph, w) for w in walks)
    assert all(not validate_chain(graph, w) for w in sample_chains(graph, 10, "b", sampler="random_walk"))
    with pytest.raises(ValueError):
        sample_chains(graph, 3, "k", sampler="nope")
    with pytest.raises(ValueError):
        sample_chains(graph, -1, "k")


def test_chain_round_trips_through_json(graph):
    c = sample_chains(graph, 1, "json")[0]
    assert Chain.from_dict(json.loads(json.dumps(c.to_dict()))) == c


# --------------------------------------------------------------------------- tool-name clashes
def _two_env_tools(shared_name: str) -> list[dict]:
    """``maker`` records the e-mail address of a widget's owner, which ``user`` takes; each also has a tool
    named ``shared_name`` (or distinct names when ``shared_name`` is empty)."""

    def tool(env, name, kind, inp, out):
        return {
            "env_id": env,
            "domain": "d",
            "name": name,
            "kind": kind,
            "table": "widgets",
            "input_schema": {"type": "object", "properties": inp, "required": list(inp)},
            "output_schema": {"type": "object", "properties": out},
        }

    wid = {"owner_email": {"type": "string", "format": "email", "description": "E-mail address of the owner"}}
    return [
        tool("maker", "make_widget", "create", {}, wid),
        tool("maker", shared_name or "maker_status", "get", {}, {}),
        tool("user", "find_widget", "get", {}, wid),
        tool("user", "use_widget", "update", wid, wid),
        tool("user", "inspect_widget", "get", wid, {}),
        tool("user", shared_name or "user_status", "get", {}, {}),
    ]


@pytest.mark.parametrize("sampler", ["topology", "random_walk"])
def test_environments_sharing_a_tool_name_are_never_combined(sampler):
    from envfactory_assets.synth.sampling.sampler import clashing_environments

    cfg = SamplerConfig(min_tools=2)
    distinct = build_tool_graph(_two_env_tools(""), HashingEmbedder(), threshold=0.999)
    both = [c for c in sample_chains(distinct, 40, "x", cfg, sampler, require_valid=False) if len(c.servers) == 2]
    assert both, "without a clash the samplers do combine the two environments"
    clashing = build_tool_graph(_two_env_tools("status"), HashingEmbedder(), threshold=0.999)
    assert clashing_environments(clashing) == {"maker": frozenset({"user"}), "user": frozenset({"maker"})}
    chains = sample_chains(clashing, 40, "x", cfg, sampler, require_valid=False)
    assert chains and all(len(c.servers) == 1 for c in chains)


def test_dagster_config_defaults_are_the_spec_defaults():
    """One source per default: the asset configs of the synth stages read theirs from the plain specs, and
    the default run's values (min_tools 3, k 4) are the specs' own."""
    from envfactory_assets.defs.synth.assets import (
        ChainsConfig,
        RefineConfig,
        TrajectoryConfig,
    )
    from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
    from envfactory_assets.synth.trajectories.execution import SynthConfig

    assert ChainsConfig().check_settings()[1] == SamplerConfig()
    assert SamplerConfig().min_tools == 3
    assert RefineConfig().check_settings() == CalibrationConfig()
    assert CalibrationConfig().k == 4
    assert TrajectoryConfig().check_settings()[1] == SynthConfig()


# --------------------------------------------------------------------------- value kinds across environments
def test_no_identifier_crosses_environments_in_sampled_chains(graph, chains):
    """CRM, billing and support all carry a company identifier; a chain may still join them only through
    values that mean the same thing everywhere (an e-mail address, a date)."""
    crossings = 0
    for c in chains:
        for t, bindings in c.producers.items():
            for name, src in bindings.items():
                if src != USER and graph.env_of(src) != graph.env_of(t):
                    crossings += 1
                    kinds = graph.flow_kinds(src, t, name)
                    assert kinds and "identifier" not in kinds and graph.passes_shared_value(src, t, name), (
                        c.seed,
                        src,
                        t,
                        name,
                        kinds,
                    )
    stats = flow_stats(graph, chains)
    assert stats["identifier_crossings"] == 0 and stats["cross_env_flows"] == crossings > 50
    assert set(stats["cross_env_flows_by_kind"]) <= {
        "email",
        "datetime",
        "money",
        "code",
        "person_name",
        "place",
        "organization",
        "url",
        "phone",
    }


def test_multi_environment_chains_each_carry_a_shared_value(graph, chains):
    """At least 60% of chains span several environments, and every one of them has a flow of a shared
    real-world value between its environments (removing cross-environment chains would not pass)."""
    stats = flow_stats(graph, chains)
    assert stats["multi_env_share"] >= 0.6, stats
    assert stats["multi_env_with_shared_flow"] == stats["multi_env_chains"]
    for c in chains:
        if len(c.servers) > 1:
            assert c.plan and c.plan["linked_by"], c.seed
            assert {link["kind"] for link in c.plan["linked_by"]} <= {"email", "datetime", "money", "code"}


def test_a_chain_joining_environments_without_a_shared_value_is_invalid(graph):
    # two environments side by side: each tool's inputs are filled, but nothing passes from one to the other
    lc, gc, se = n(CRM, "list_companies"), n(CRM, "get_company"), n(MAIL, "send_email")
    side_by_side = _chain(
        graph, [lc, gc, se], {gc: {"company_id": lc}, se: {"to": USER, "subject": USER, "body": USER}}
    )
    assert any("not joined by a flow of a shared value" in p for p in validate_chain(graph, side_by_side))
    gt = n(CRM, "get_contact")
    linked = _chain(graph, [gt, se], {gt: {"contact_id": USER}, se: {"to": gt, "subject": USER, "body": USER}})
    assert graph.passes_shared_value(gt, se, "to")
    assert not [p for p in validate_chain(graph, linked) if "shared" in p]


def test_an_identifier_edge_between_environments_is_refused_and_an_unkinded_one_never_links(graph):
    from envfactory_assets.graph import ToolGraph

    lc, ci = n(CRM, "list_companies"), n(BILLING, "create_invoice")
    bad = {
        "src": lc,
        "dst": ci,
        "src_param": "items[].company_id",
        "dst_param": "company_id",
        "similarity": 1.0,
        "provenance": "name_type",
        "value_kind": "identifier",
    }
    with pytest.raises(ValueError, match="passes an identifier"):
        ToolGraph.from_rows(graph.nodes, graph.parameters, graph.edges + [bad])
    # rows stored before value kinds existed: the edge exists but a chain may not cross through it
    old = ToolGraph.from_rows(graph.nodes, graph.parameters, graph.edges + [{**bad, "value_kind": None}])
    chain = _chain(old, [lc, ci], {ci: {"company_id": lc, "amount_cents": USER, "currency": USER}})
    problems = validate_chain(old, chain)
    assert any("only shared real-world values cross" in p for p in problems)
    assert any("not joined" in p for p in problems)


def test_episode_plans_name_the_user_and_the_goal(graph, chains):
    multi = [c for c in chains if len(c.servers) > 1]
    assert multi and all(c.plan is None for c in chains if len(c.servers) == 1)
    for c in multi:
        plan = c.plan
        assert set(plan) == {"persona", "goal", "services", "domains", "linked_by"}
        assert plan["goal"].startswith(f"As {plan['persona']}, the user wants to ")
        assert plan["services"] == [service_name(e) for e in c.servers]
        for link in plan["linked_by"]:
            assert service_name(link["from"]) in plan["goal"] or service_name(link["to"]) in plan["goal"]
        assert Chain.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert service_name(CRM) == "Apideck crm" and service_name("linode_com") == "Linode"
    assert len({c.plan["goal"] for c in multi}) > 5


def _station_tools() -> list[dict]:
    """An environment whose parameters share no real-world value with any other (an identifier and a
    measurement): its chains can only stay in it."""
    env, row = (
        "weather_example__stations",
        {
            "station_id": ts._s("Unique identifier of the station"),
            "elevation_m": {"type": "integer", "description": "Elevation in metres"},
        },
    )
    listing = ts._obj({"items": {"type": "array", "items": ts._obj(row, ["station_id"])}})
    return [
        ts._tool(
            env,
            "travel_transport",
            "list_stations",
            "List stations",
            "list",
            "stations",
            ts._obj({"limit": {"type": "integer", "description": "Maximum number of results"}}),
            listing,
        ),
        ts._tool(
            env,
            "travel_transport",
            "get_station",
            "Get one station",
            "get",
            "stations",
            ts._obj({"station_id": row["station_id"]}, ["station_id"]),
            ts._obj(row),
        ),
        ts._tool(
            env,
            "travel_transport",
            "create_station",
            "Create a station",
            "create",
            "stations",
            ts._obj({"elevation_m": row["elevation_m"]}, ["elevation_m"]),
            ts._obj(row),
        ),
        ts._tool(
            env,
            "travel_transport",
            "delete_station",
            "Delete a station",
            "delete",
            "stations",
            ts._obj({"station_id": row["station_id"]}, ["station_id"]),
            ts._obj({}),
        ),
    ]


def test_start_tools_drawn_from_linked_environments_raise_the_multi_environment_share():
    try:
        graph = build_tool_graph(ts.all_tools() + _station_tools(), MiniLMEmbedder())
    except EmbedderUnavailableError as exc:  # pragma: no cover - the package is a declared dependency
        pytest.skip(str(exc))
    stations = {n for n in graph.node_ids if graph.env_of(n) == "weather_example__stations"}
    assert stations and not stations & set(graph.linked_node_ids)
    assert {graph.env_of(n) for n in graph.linked_node_ids} >= {CRM, MAIL, BILLING}

    def sampled(p: float) -> list[Chain]:
        return [sample_chain(graph, s, SamplerConfig(p_linked_start=p)) for s in range(120)]

    uniform, linked = sampled(0.0), sampled(1.0)
    assert any(set(c.tools) <= stations for c in uniform)  # a uniform start lands in the isolated environment
    assert not any(set(c.tools) <= stations for c in linked)
    assert flow_stats(graph, linked)["multi_env_share"] > flow_stats(graph, uniform)["multi_env_share"]
    with pytest.raises(ValueError, match="p_linked_start"):
        SamplerConfig(p_linked_start=1.5)


def test_held_out_environments_share_chains_only_with_each_other(graph):
    mixed = sample_chains(graph, 120, "apart")
    assert any(CRM in c.servers and len(c.servers) > 1 for c in mixed)  # CRM joins others when nothing says no
    kept = sample_chains(graph, 120, "apart", apart={CRM})
    assert kept and all(c.servers == (CRM,) or CRM not in c.servers for c in kept)
    assert any(len(c.servers) > 1 for c in kept)  # the training environments still combine
    walks = sample_chains(graph, 60, "apart", sampler="random_walk", require_valid=False, apart={CRM, MAIL})
    assert all(set(c.servers) <= {CRM, MAIL} or not set(c.servers) & {CRM, MAIL} for c in walks)
