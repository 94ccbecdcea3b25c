"""The committed MCP tool lists (no server installed): each parses and names its package, version and licence;
each server with state becomes an environment whose tools keep the server's own parameters, types and
descriptions, pass the verification gate, and act on the parameters that filter or limit a read; a broken
implementation of one is rejected by the gate."""

from __future__ import annotations

import copy
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from envfactory_assets.envgen.stage import programmatic_environment
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.sources.mcp_tools import COMMITTED_DIR, KNOWN_SERVERS, MCP_KIND, load_tool_list
from envfactory_assets.sources.names import is_sentence
from envfactory_assets.sources.resource_kinds import mcp_rows
from envfactory_assets_tests.fixture_environments import failed_checks, mutate

COMMITTED = sorted(COMMITTED_DIR.glob("*.json"))
#: the committed servers that only compute (fetch a URL, run SQL, think): no state to model
STATELESS = {"brave-search.json", "fetch.json", "postgres.json", "sequential-thinking.json"}


@cache
def environments() -> dict[str, dict[str, Any]]:
    accepted, _ = mcp_rows()
    return {r["resource_key"]: programmatic_environment(r, Path(r["corpus_root"]) / r["path"]) for r in accepted}


def committed_tool(file: str, name: str) -> dict[str, Any]:
    document, _ = load_tool_list(COMMITTED_DIR / file)
    return next(t for t in document["tools"] if t["name"] == name)


def call(env: dict[str, Any], tool: str, args: dict[str, Any], state: dict[str, Any] | None = None) -> dict:
    """One call of ``tool`` on ``env``'s valid initial state (or ``state``), in the sandbox."""
    with SandboxWorker() as worker:
        worker.load_environment(env["env_id"], env["source"])
        episode = worker.open_episode({env["env_id"]: copy.deepcopy(state or env["initial_states"][0]["state"])})
        return worker.call(episode, tool, args)


def test_every_committed_list_parses_and_names_a_pinned_package_with_its_licence():
    pinned = {s.package: s.version for s in KNOWN_SERVERS}
    assert len(COMMITTED) >= 10 and {p.stem for p in COMMITTED} == {s.name for s in KNOWN_SERVERS}
    for path in COMMITTED:
        document, digest = load_tool_list(path)
        package = document["package"]
        assert pinned[package["name"]] == package["version"], path.name
        assert package["license"] and package["ecosystem"] in ("pypi", "npm"), path.name
        assert len(digest) == 64 and document["tools"]


def test_source_resources_read_the_committed_lists_without_any_server():
    accepted, rejected = mcp_rows()
    assert len(accepted) + len(rejected) == len(COMMITTED)
    assert {r["path"] for r in rejected} == STATELESS
    assert {r["reason"] for r in rejected} == {"no_stateful_resource"}
    assert {r["kind"] for r in accepted} == {MCP_KIND} and len(accepted) >= 9
    git = next(r for r in accepted if r["resource_key"] == "mcp__git")
    assert (git["provider"], git["version"], git["license_name"]) == ("mcp-server-git", "2026.10.19", "MIT")
    assert git["corpus_root"] == str(COMMITTED_DIR)


@pytest.mark.parametrize("key", sorted(environments()))
def test_each_committed_server_becomes_an_environment_that_passes_verification(key):
    env = environments()[key]
    report = verify_environment(env)
    assert report.status == "passed", report.reasons[:5]
    bound = [t for t in env["tools"] if t.get("mcp_binding")]
    assert bound and len(bound) == len(env["tools"])
    # the gate sent every tool arguments of a type its real schema refuses, and an unknown argument
    invalid = {c.tool for c in report.checks if c.check == "tool_invalid"}
    assert invalid == {t["name"] for t in env["tools"]}


def test_git_log_keeps_the_servers_parameters_types_and_descriptions():
    tool = next(t for t in environments()["mcp__git"]["tools"] if t["name"] == "git_log")
    real = committed_tool("git.json", "git_log")["input_schema"]
    props = tool["input_schema"]["properties"]
    assert set(props) == set(real["properties"]) == {"repo_path", "max_count", "start_timestamp", "end_timestamp"}
    assert tool["input_schema"]["required"] == real["required"] == ["repo_path"]
    assert props["max_count"]["type"] == "integer" and props["max_count"]["default"] == 10
    # a sentence the server wrote is kept as written
    assert props["start_timestamp"]["description"] == real["properties"]["start_timestamp"]["description"]
    assert props["start_timestamp"]["anyOf"] == real["properties"]["start_timestamp"]["anyOf"]
    # a parameter the server describes only by its title ("Max Count") gets a sentence that says it
    assert "description" not in real["properties"]["max_count"]
    assert is_sentence(props["max_count"]["description"]) and "max count" in props["max_count"]["description"]
    roles = {name: p["role"] for name, p in tool["mcp_binding"]["params"].items()}
    assert roles == {"repo_path": "field", "max_count": "limit", "start_timestamp": "after", "end_timestamp": "before"}


def test_git_logs_max_count_repo_path_and_timestamps_act_on_the_commits():
    env = environments()["mcp__git"]
    rows = env["initial_states"][0]["state"]["tables"]["commits"]
    repo = rows[0]["repo_path"]
    mine = [r for r in rows if r["repo_path"] == repo]
    result = call(env, "git_log", {"repo_path": repo})
    assert result["ok"] and result["output"]["items"] == mine and result["output"]["total"] == len(mine)
    state = copy.deepcopy(env["initial_states"][0]["state"])
    for row in state["tables"]["commits"]:
        row["repo_path"] = repo  # every commit in one repository: max_count and the timestamps have rows to cut
    every = sorted(state["tables"]["commits"], key=lambda r: r["created_at"])
    limited = call(env, "git_log", {"repo_path": repo, "max_count": 2}, state)["output"]
    assert len(limited["items"]) == 2 and limited["total"] == len(every)
    middle = every[len(every) // 2]["created_at"]
    after = call(env, "git_log", {"repo_path": repo, "start_timestamp": middle}, state)["output"]
    assert after["items"] and all(r["created_at"] >= middle for r in after["items"])
    assert after["total"] == sum(1 for r in every if r["created_at"] >= middle) < len(every)
    before = call(env, "git_log", {"repo_path": repo, "end_timestamp": middle}, state)["output"]
    assert before["total"] == sum(1 for r in every if r["created_at"] <= middle) < len(every)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"repo_path": 7}, "repo_path must be string"),
        ({"repo_path": "r", "max_count": "ten"}, "max_count must be integer"),
        ({"repo_path": "r", "max_count": 2.5}, "max_count must be integer"),
        ({"repo_path": "r", "start_timestamp": 3}, "start_timestamp"),
        ({"repo_path": "r", "limit": 3}, "unknown argument 'limit'"),
        ({"max_count": 3}, "missing required argument 'repo_path'"),
    ],
)
def test_git_log_refuses_arguments_its_real_schema_refuses(args, says):
    result = call(environments()["mcp__git"], "git_log", args)
    assert not result["ok"] and result["error"]["type"] == "bad_arguments" and says in result["error"]["message"]


def test_memory_keeps_its_batch_arguments_and_names_entities_by_name():
    env = environments()["mcp__memory"]
    tools = {t["name"]: t for t in env["tools"]}
    item = tools["create_entities"]["input_schema"]["properties"]["entities"]["items"]
    assert item == committed_tool("memory.json", "create_entities")["input_schema"]["properties"]["entities"]["items"]
    entities = env["initial_states"][0]["state"]["tables"]["entities"]
    names = [entities[0]["name"], entities[1]["name"]]
    opened = call(env, "open_nodes", {"names": names})
    assert opened["ok"] and [r["name"] for r in opened["output"]["items"]] == names
    new = [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]
    created = call(env, "create_entities", {"entities": new})
    assert created["ok"] and created["output"]["items"][0]["name"] == "Ada"
    twice = call(env, "create_entities", {"entities": new + new})  # names one entity each: a repeat is refused
    assert not twice["ok"] and twice["error"]["type"] == "precondition_failed"
    # the message reads as the assistant repeats it: the table, then the value that is taken
    assert twice["error"]["message"] == "entities already has a row with name 'Ada'", twice["error"]
    missing = call(env, "delete_entities", {"entityNames": ["nobody-by-this-name"]})
    assert not missing["ok"] and missing["error"]["type"] == "not_found"


def test_every_tool_and_parameter_of_the_mcp_environments_has_a_sentence():
    for env in environments().values():
        for tool in env["tools"]:
            assert is_sentence(tool["description"], (tool["name"],)), (env["env_id"], tool["name"])
            stack = [tool["input_schema"]]
            while stack:
                node = stack.pop()
                for name, prop in (node.get("properties") or {}).items():
                    assert is_sentence(prop.get("description"), (name,)), (env["env_id"], tool["name"], name)
                    stack.append(prop)
                stack += [node["items"]] if isinstance(node.get("items"), dict) else []


def test_git_log_returns_the_servers_default_of_ten_commits():
    env = environments()["mcp__git"]
    state = copy.deepcopy(env["initial_states"][0]["state"])
    rows = state["tables"]["commits"]
    for n in range(12):
        rows.append({**rows[0], "commit_id": f"com_9{n:04d}"})
    result = call(env, "git_log", {"repo_path": rows[0]["repo_path"]}, state)["output"]
    assert len(result["items"]) == 10 and result["total"] > 10


def test_the_gate_rejects_a_git_log_that_ignores_max_count():
    env = copy.deepcopy(environments()["mcp__git"])
    state = env["initial_states"][0]["state"]
    repo = state["tables"]["commits"][0]["repo_path"]
    for row in state["tables"]["commits"]:
        row["repo_path"] = repo  # rows enough for the paged check to cut
    broken = mutate(env, r"size = min\(_whole\(value, arg, 1\), 100\)", "size = None")
    assert ("semantics", "git_log") in failed_checks(broken)


def test_setup_mcp_installs_exactly_the_pinned_servers():
    script = (Path(__file__).resolve().parents[1] / "scripts" / "setup_mcp.sh").read_text()
    installed = set(re.findall(r'"(@?[\w/.-]+?)(?:==|@)(\d[\w.]*)"', script))
    assert installed == {(s.package, s.version) for s in KNOWN_SERVERS}
