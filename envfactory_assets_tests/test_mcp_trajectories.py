"""Trajectories over environments built from committed MCP tool lists (no server installed): the tool graph
plans in the builder's names, but every recorded tool call, every tool list a model is shown and every call
the environment executes is in the real server's names and schema; the RL rows replay and the turn's own calls
win the reward."""

from __future__ import annotations

import copy
import json
import random
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envfactory_assets.envgen.mcp_signatures import canonical_tool
from envfactory_assets.envgen.stage import programmatic_environment
from envfactory_assets.envgen.tools import READ_KINDS
from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import HashingEmbedder
from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.sources.resource_kinds import mcp_rows
from envfactory_assets.synth.datasets.rows import complete_answer_problem, replay_check, rl_rows
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.refinement.model_querygen import ModelQueryWriter
from envfactory_assets.synth.refinement.phrasing import stated_row_fields
from envfactory_assets.synth.refinement.report import unstated_gold_arguments
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.stage import dataset_rows, refined_trajectory_rows
from envfactory_assets.synth.trajectories.execution import SynthConfig, refusal_output, synthesize_trajectory
from envfactory_assets.synth.trajectories.real_calls import (
    planning_environments,
    planning_worker,
    real_trajectory,
    window_arguments,
)
from envfactory_assets.synth.trajectories.same_tool_parallel import same_tool_parallel_turn

#: two servers with state whose tools name rows by the server's own parameters (``issue_number``, ``path``)
SERVERS = ("mcp__github", "mcp__secure_filesystem")


@cache
def mcp_environments() -> dict[str, dict[str, Any]]:
    accepted, _ = mcp_rows()
    rows = [r for r in accepted if r["resource_key"] in SERVERS]
    envs = [programmatic_environment(r, Path(r["corpus_root"]) / r["path"]) for r in rows]
    return {env["env_id"]: env for env in envs}


def real_tools() -> dict[str, dict[str, Any]]:
    return {t["name"]: t for env in mcp_environments().values() for t in env["tools"]}


@pytest.fixture(scope="module")
def worker():
    with SandboxWorker() as w:
        for env_id, env in mcp_environments().items():
            w.load_environment(env_id, env["source"])
        yield w


@pytest.fixture(scope="module")
def raw_trajectories(worker):
    envs = mcp_environments()
    graph = build_tool_graph(tools_from_environments(envs.values()), HashingEmbedder())
    out = []
    for i, chain in enumerate(sample_chains(graph, 8, "mcp-trajectories", SamplerConfig(min_tools=3))):
        traj = synthesize_trajectory(chain, graph, envs, worker, SynthConfig(min_turns=2))
        if traj["status"] == "passed":
            domains = sorted({envs[e]["domain"] for e in traj["env_ids"]})
            out.append({**traj, "id": f"raw_{i}", "tool_chain_id": f"chain_{i}", "domains": domains})
    assert len(out) >= 3
    return out


@pytest.fixture(scope="module")
def refined(raw_trajectories):
    rows = refined_trajectory_rows(
        raw_trajectories, mcp_environments(), config=CalibrationConfig(k=2, conversational_share=0.0, workers=1)
    )
    passed = [r for r in rows if r["status"] == "passed"]
    assert passed
    return passed


@pytest.fixture(scope="module")
def datasets(refined):
    sft, rl, rejected = dataset_rows(refined, mcp_environments(), sft_share=0.5)
    assert rejected == [] and sft and rl
    return sft, rl


def recorded_calls(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Every assistant tool call of an SFT row's messages or an RL row's prompt, and an RL row's gold calls,
    as ``{"name", "arguments"}``."""
    messages = row.get("messages") or row["prompt"]
    calls = [
        {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
        for m in messages
        for c in m.get("tool_calls") or []
    ]
    return calls + [{"name": g["name"], "arguments": g["arguments"]} for g in row.get("gold_calls") or []]


def test_the_tool_graph_holds_every_real_signature_tool_in_its_canonical_view():
    tools = tools_from_environments(mcp_environments().values())
    assert {t["name"] for t in tools} == set(real_tools())
    get_issue = next(t for t in tools if t["name"] == "get_issue")
    # the sampler fills a row's identifier from an earlier result: the builder's name, not the server's number
    assert get_issue["input_schema"] == real_tools()["get_issue"]["mcp_binding"]["canonical_input"]
    assert "issue_number" in get_issue["real_input_schema"]["properties"]


def test_synthesis_plans_in_canonical_names_and_executes_in_the_sandbox(raw_trajectories):
    tools = real_tools()
    for traj in raw_trajectories:
        for turn in traj["turns"]:
            for call in turn["calls"]:
                canonical = canonical_tool(tools[call["name"]])["input_schema"]
                assert set(call["arguments"]) <= set(canonical["properties"]), call
                assert set(canonical.get("required") or []) <= set(call["arguments"]), call


def test_every_recorded_call_is_in_the_real_servers_names_and_validates_against_its_schema(datasets):
    sft, rl = datasets
    tools = real_tools()
    renamed = []
    for row in sft + rl:
        shown = {t["function"]["name"]: t["function"]["parameters"] for t in row["tools"]}
        # the tool list a model is shown is the real server's
        assert {n: tools[n]["input_schema"] for n in shown} == shown
        for call in recorded_calls(row):
            schema = tools[call["name"]]["input_schema"]
            jsonschema.validate(call["arguments"], schema)
            canonical = set(canonical_tool(tools[call["name"]])["input_schema"]["properties"])
            renamed += [a for a in call["arguments"] if a not in canonical]
    # a row's id becomes the server's own key parameter (get_issue's issue_number, get_pull_request's pull_number)
    assert {"issue_number", "pull_number"} & set(renamed), renamed


def unknowable_arguments(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    """The arguments of a real trajectory's recorded calls that the agent cannot know: neither the turn's user
    messages state them nor (for a value the user did not give) an earlier message or tool result of the
    conversation holds them (:func:`unstated_gold_arguments` over every call of every turn). A window
    parameter and a schema placeholder do not count (the RL rows mask them), nor a value the refined request
    names by a reference to its row."""
    found = []
    for i, turn in enumerate(trajectory["turns"]):
        masked = {
            a
            for c in turn["calls"]
            for a, p in (c.get("provenance") or {}).items()
            if p.get("source") == "schema" or a in window_arguments(real_tools()[c["name"]])
        }
        for problem in unstated_gold_arguments(trajectory["turns"], i, turn["calls"], sorted(masked)):
            if problem["referred_by"] is None:
                found.append({**problem, "query": turn["query"]})
    return found


def row_field_parameters(name: str) -> set[str]:
    """The real parameters of tool ``name`` read off the row its call names: a scope, a key by a field."""
    params = (real_tools()[name].get("mcp_binding") or {}).get("params") or {}
    return {n for n, p in params.items() if p["role"] == "scope" or (p["role"] in ("key", "keys") and p.get("field"))}


def test_every_real_argument_is_stated_by_the_user_or_held_by_an_earlier_result(raw_trajectories, refined, worker):
    sources = set()
    for traj in raw_trajectories + refined:
        real = real_trajectory(traj, mcp_environments(), worker)
        assert unknowable_arguments(real) == [], traj["id"]
        for turn in real["turns"]:
            for call in turn["calls"]:
                for name in row_field_parameters(call["name"]) & set(call["arguments"]):
                    sources.add(call["provenance"][name]["source"])
    # get_issue's owner and repo, read_file's path: stated in the request where the row came from the hidden
    # state, taken from the earlier result that showed the row otherwise
    assert sources == {"user", "output"}, sources


def test_a_same_tool_parallel_turn_states_each_rows_scope(raw_trajectories, worker):
    traj = next(t for t in raw_trajectories if t["env_ids"] == ["mcp__github"])
    envs = planning_environments({"mcp__github": mcp_environments()["mcp__github"]})
    inner = planning_worker(worker, mcp_environments())
    scoped = None
    for seed in range(40):
        turn = same_tool_parallel_turn(traj, envs, len(traj["turns"]), random.Random(seed), inner)
        if turn is not None and row_field_parameters(turn["same_tool_parallel"]["tool"]):
            scoped = turn
            break
    assert scoped is not None
    extended = {**traj, "turns": traj["turns"] + [scoped]}
    real = real_trajectory(extended, mcp_environments(), worker)
    assert unknowable_arguments(real) == [], scoped["query"]
    for call in real["turns"][-1]["calls"]:
        # each target's owner and repo: stated for that target, since nothing the agent saw holds them
        for name in row_field_parameters(call["name"]):
            assert call["provenance"][name]["source"] in ("user", "output")


def test_a_model_written_query_that_drops_a_stated_scope_is_refused(raw_trajectories):
    at = next(
        (t, i)
        for t in raw_trajectories
        for i, turn in enumerate(t["turns"])
        if any(stated_row_fields(c) for c in turn["calls"])
    )
    traj, i = at
    turn = traj["turns"][i]
    scope = [str(v) for c in turn["calls"] for _, v in stated_row_fields(c)]
    envs = planning_environments({e: mcp_environments()[e] for e in traj["env_ids"]})
    dropped = turn["query"]
    for value in scope:
        dropped = dropped.replace(value, "it")
    replies = {"dropped": json.dumps({"query": dropped}), "kept": json.dumps({"query": turn["query"]})}
    for name, reply in replies.items():
        with FakeChatServer(responder=lambda body, reply=reply: reply) as server:
            writer = ModelQueryWriter(OpenAICompatibleBackend(server.base_url, "m", max_retries=0), attempts=1)
            query, record = writer.write(turn, traj["turns"][:i], envs, None)
        if name == "dropped":
            # the agent could not learn the row's owner and repo: the draft, which states them, is kept
            assert record["outcome"] == "fallback" and "leaves out" in record["refusals"][0]["reason"]
        else:
            assert record["outcome"] == "model"
        assert query == turn["query"]


def test_rl_rows_replay_and_the_turns_own_calls_earn_the_maximum_reward(datasets, worker):
    _, rl = datasets
    writers = {t["name"] for t in real_tools().values() if t["kind"] not in READ_KINDS}
    for row in rl:
        # the stored row no longer says whether the turn writes (dataset_rows checked that before storing it)
        assert replay_check({**row, "changes_state": False}, worker) is None
        assert complete_answer_problem(row, worker, writers) is None
        windows = {
            a for g in row["executed_calls"] for a in g["arguments"] if a in window_arguments(real_tools()[g["name"]])
        }
        assert windows <= set(row["masked_arguments"])


def canonical_names(call: dict[str, Any]) -> dict[str, Any]:
    """A real call's arguments under the builder's names: a key parameter as the row identifier, a window or
    text parameter as ``limit``/``offset``/``query``, a field parameter as its field."""
    binding = real_tools()[call["name"]]["mcp_binding"]
    out = {}
    for name, value in call["arguments"].items():
        param = binding["params"].get(name) or {}
        role = param.get("role")
        if role == "key":
            name = binding["row_key"]
        elif role in ("limit", "offset", "query"):
            name = role
        elif role == "field":
            name = param["field"]
        out[name] = value
    return out


def test_a_gold_call_in_the_builders_names_does_not_replay(datasets, worker):
    _, rl = datasets
    row = next(r for r in rl if any(canonical_names(g) != g["arguments"] for g in r["gold_calls"]))
    tampered = {**copy.deepcopy(row), "changes_state": False}
    for gold in tampered["gold_calls"]:
        gold["arguments"] = canonical_names(gold)
    assert "failed on replay" in (replay_check(tampered, worker) or "")
    assert "bad_arguments" in replay_check(tampered, worker)


def test_real_trajectory_refuses_a_turn_that_does_not_replay_as_recorded(raw_trajectories, worker):
    traj = next(
        t for t in raw_trajectories if any(c["kind"] not in READ_KINDS for turn in t["turns"] for c in turn["calls"])
    )
    real = real_trajectory(traj, mcp_environments(), worker)
    call = real["turns"][0]["calls"][0]
    assert call["canonical_arguments"] == traj["turns"][0]["calls"][0]["arguments"]
    jsonschema.validate(call["arguments"], real_tools()[call["name"]]["input_schema"])
    broken = copy.deepcopy(traj)
    for turn in broken["turns"]:
        turn["state_after_hash"] = "0" * 64
    with pytest.raises(ValueError, match="does not reach its state_after"):
        real_trajectory(broken, mcp_environments(), worker)


@cache
def memory_environment() -> dict[str, Any]:
    accepted, _ = mcp_rows()
    row = next(r for r in accepted if r["resource_key"] == "mcp__memory")
    return programmatic_environment(row, Path(row["corpus_root"]) / row["path"])


def test_a_refused_call_keeps_its_error_in_the_real_names_and_its_rl_row_replays():
    env = memory_environment()
    envs = {env["env_id"]: env}
    state = {env["env_id"]: copy.deepcopy(env["initial_states"][0]["state"])}
    entity = state[env["env_id"]]["tables"]["entities"][0]
    with SandboxWorker() as inner:
        inner.load_environment(env["env_id"], env["source"])
        worker = planning_worker(inner, envs)
        episode = worker.open_episode(copy.deepcopy(state))
        # the environment takes only the real signature; the planning worker translates the builder's names
        assert inner.call(episode, "open_nodes", {"entity_id": entity["entity_id"]})["error"]["type"] == "bad_arguments"
        opened = worker.call(episode, "open_nodes", {"entity_id": entity["entity_id"]})
        assert opened["ok"] and opened["output"] == entity  # the batch answer of one row, read as that row
        twice = {"name": entity["name"], "entity_type": entity["entity_type"]}
        refused = worker.call(episode, "create_entities", twice)
        assert not refused["ok"] and refused["error"]["type"] == "precondition_failed"
        worker.close_episode(episode)
        digest = state_hash(state)
        calls = [
            {"name": "open_nodes", "arguments": {"entity_id": entity["entity_id"]}, "output": opened["output"]},
            {
                "name": "create_entities",
                "arguments": twice,
                "output": refusal_output(refused["error"]),
                "error": "precondition_failed",
            },
        ]
        turn = {
            "turn_index": 0,
            "query": "Open that entity, and create it again.",
            "calls": [
                {**c, "env_id": env["env_id"], "kind": "get" if i == 0 else "create", "provenance": {}}
                for i, c in enumerate(calls)
            ],
            "assistant_summary": "Here it is; it exists already, so it was not created again.",
            "state_before": state,
            "state_after": state,
            "state_before_hash": digest,
            "state_after_hash": digest,
        }
        real = real_trajectory({"env_ids": [env["env_id"]], "turns": [turn]}, envs, inner)
        opened_call, refused_call = real["turns"][0]["calls"]
        assert opened_call["arguments"] == {"names": [entity["name"]]}
        assert opened_call["output"]["items"] == [entity]
        assert refused_call["arguments"]["entities"][0]["name"] == entity["name"]
        assert (
            refused_call["error"] == "precondition_failed" and refused_call["output"]["error"] == "precondition_failed"
        )
        (row,) = rl_rows(real, envs)
        assert row["gold_calls"][1]["expect_error"] == "precondition_failed"
        assert replay_check(row, inner) is None
