"""The corpus-scale coverage run: ``environments`` without the cap of resources, partitions built and verified
in batches that resume where they stopped, and coverage counted only from tools whose semantic check passed."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from envfactory_assets.cli import main as cli_main
from envfactory_assets.defs.pipeline_runs import adjacent_blocks
from envfactory_assets.envgen.builder import MAX_RESOURCES, build_environment
from envfactory_assets.envgen.run_settings import EnvironmentRunSpec
from envfactory_assets.envgen.stage import environment_row, verification_row
from envfactory_assets.reporting.corpus_coverage import (
    MIN_VERIFIED_TOOLS,
    coverage_figures,
    coverage_markdown,
    verified_tools,
)
from envfactory_assets.runner.coverage_batches import batch_command, plan_batches, run_batches, verified_keys
from envfactory_assets.settings import store_path
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.store.db import Store

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"

COLLECTIONS = ("authors", "books", "shelves", "loans", "members", "branches")


def _six_collections() -> dict:
    """bookshop.json's info with six collections of one shape: more than the default cap of 4 tables."""
    doc = json.loads((FIXTURES / "bookshop.json").read_text())
    paths, schemas = {}, {}
    for name in COLLECTIONS:
        thing = name[:-1].title()
        ref = {"$ref": f"#/components/schemas/{thing}"}
        schemas[thing] = {
            "type": "object",
            "required": ["name"],
            "properties": {
                "id": {"type": "string", "readOnly": True},
                "name": {"type": "string", "maxLength": 80, "description": f"Name of the {thing.lower()}."},
                "email": {"type": "string", "format": "email"},
            },
        }
        ok = {"200": {"description": "ok", "content": {"application/json": {"schema": ref}}}}
        listed = {"type": "array", "items": ref}
        paths[f"/{name}"] = {
            "get": {
                "operationId": f"list{thing}s",
                "summary": f"List {name}",
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": listed}}}},
            },
            "post": {
                "operationId": f"create{thing}",
                "summary": f"Create a {thing.lower()}",
                "requestBody": {"content": {"application/json": {"schema": ref}}},
                "responses": {"201": {"description": "created"}},
            },
        }
        paths[f"/{name}/{{{thing.lower()}Id}}"] = {
            "get": {"operationId": f"get{thing}", "summary": f"Get a {thing.lower()}", "responses": ok},
            "delete": {
                "operationId": f"delete{thing}",
                "summary": f"Delete a {thing.lower()}",
                "responses": {"204": {"description": "gone"}},
            },
        }
    doc["paths"], doc["components"] = paths, {"schemas": schemas}
    return doc


@pytest.fixture(scope="module")
def six_collection_corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    (root / "library.json").write_text(json.dumps(_six_collections()))
    return root


def test_max_resources_0_keeps_every_resource_and_the_default_keeps_four(six_collection_corpus):
    accepted, _ = scan_rows(six_collection_corpus)
    [row] = accepted
    spec = json.loads((six_collection_corpus / "library.json").read_text())
    capped = build_environment(row, copy.deepcopy(spec))
    uncapped = build_environment(row, copy.deepcopy(spec), EnvironmentRunSpec(max_resources=0).resource_cap)
    assert len(capped["tables"]) == MAX_RESOURCES == EnvironmentRunSpec().max_resources
    assert len(uncapped["tables"]) == len(COLLECTIONS)
    assert len(uncapped["tools"]) > len(capped["tools"])
    # the default is the builder's own cap: rows built without the setting are the rows built with its default
    assert environment_row(row)["id"] == environment_row(row, resource_cap=EnvironmentRunSpec().resource_cap)["id"]


def test_a_tool_counts_only_when_its_semantic_check_passed_in_a_passed_environment(six_collection_corpus):
    accepted, rejected = scan_rows(six_collection_corpus)
    env = environment_row(accepted[0], resource_cap=None)
    ver = verification_row(env)
    assert ver["status"] == "passed"
    tools = verified_tools(env, ver)
    assert {t["name"] for t in tools} == {t["name"] for t in env["tools"]}
    # one failed check of a tool takes that tool out; a failed environment-wide check takes them all
    named = next(t["name"] for t in tools)
    one_failed = {**ver, "checks": [*ver["checks"], {"check": "output_schema", "tool": named, "passed": False}]}
    assert named not in {t["name"] for t in verified_tools(env, one_failed)}
    assert len(verified_tools(env, one_failed)) == len(tools) - 1
    assert verified_tools(env, {**ver, "checks": [*ver["checks"], {"check": "replay", "passed": False}]}) == []
    assert verified_tools(env, {**ver, "status": "failed"}) == []
    # a tool whose kind's semantic assertion did not run does not count, though nothing of it failed
    without = {**ver, "checks": [c for c in ver["checks"] if not (c["check"] == "semantics" and c["tool"] == named)]}
    assert named not in {t["name"] for t in verified_tools(env, without)}
    figures = coverage_figures(accepted, rejected, [env], [ver])
    assert figures["documents"] == 1 and figures["documents_covered"] == 1 and figures["pending"] == []
    assert figures["tools_verified"] == len(env["tools"]) >= MIN_VERIFIED_TOOLS
    assert figures["tools_verified_share"] == round(len(env["tools"]) / figures["operations"], 4)
    # a verification of another version of the environment leaves the document pending
    stale = coverage_figures(accepted, rejected, [env], [{**ver, "environment_id": "env_other"}])
    assert stale["pending"] == [env["env_id"]] and stale["tools_verified"] == 0
    assert "| documents with a passed environment of at least 3 verified tools | 1 | 100.0% | 80% |" in (
        coverage_markdown(figures)
    )


def test_adjacent_blocks_and_batches():
    order = ["a", "b", "c", "d", "e"]
    assert adjacent_blocks(order, ["d", "a", "b", "e", "zz"]) == [["a", "b"], ["d", "e"]]
    assert adjacent_blocks(order, []) == []
    assert plan_batches(order, {"b"}, 2) == [["a", "c"], ["d", "e"]]
    assert plan_batches(order, set(order), 2) == []
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="batch size"):
            plan_batches(order, set(), bad)
    command = batch_command(["a", "b"], "configs/corpus_coverage.yaml")
    assert command[3:] == [
        "run",
        "--select",
        "environments,verified_environments",
        "--partition",
        "a,b",
        "--config",
        "configs/corpus_coverage.yaml",
    ]


def test_the_batched_run_resumes_where_it_stopped_and_counts_what_it_verified(tmp_path, monkeypatch, capsys):
    """Three fixture documents (bookshop, helpdesk, calendar) in batches of one: a run stopped after its first
    batch leaves two pending; the next run builds only those; the figures count every verified tool."""
    home = tmp_path / "home"
    corpus = tmp_path / "corpus"
    shutil.copytree(FIXTURES, corpus)
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    config = tmp_path / "coverage.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "ops": {
                    "source_resources": {
                        "config": {"corpus_dir": str(corpus), "per_domain": 1000, "include_mcp": False}
                    },
                    "environments": {"config": {"max_resources": 0}},
                }
            }
        )
    )
    assert cli_main(["run", "--select", "source_resources", "--config", str(config)]) == 0
    store = Store(store_path(home))
    keys = sorted(r["resource_key"] for r in store.read("source_resources"))
    assert len(keys) == 3

    def done() -> set[str]:
        return verified_keys(store.read("environments"), store.read("verified_environments"))

    commands = []

    def in_process(command: list[str]) -> int:
        commands.append(command)
        assert command[1:3] == ["-m", "envfactory_assets.cli"]
        return cli_main(command[3:])

    first = run_batches(
        plan_batches(keys, done(), 1)[:1], str(config), lambda ks: len(done() & set(ks)), run=in_process
    )
    assert first.stopped == "done" and [o.verified for o in first.outcomes] == [1]
    assert done() == {keys[0]}
    rest = plan_batches(keys, done(), 1)
    assert rest == [[keys[1]], [keys[2]]]
    second = run_batches(rest, str(config), lambda ks: len(done() & set(ks)), run=in_process)
    assert second.stopped == "done" and [o.verified for o in second.outcomes] == [1, 1]
    assert done() == set(keys) and plan_batches(keys, done(), 1) == []
    assert [c[c.index("--partition") + 1] for c in commands] == keys
    # the environments were built with every resource and the figures count their verified tools
    envs = store.read("environments")
    assert {r["env_id"] for r in envs} == set(keys)
    figures = coverage_figures(
        store.read("source_resources"), store.read("rejected_resources"), envs, store.read("verified_environments")
    )
    assert figures["documents_yielding_environment"] == 3 and figures["pending"] == []
    assert 0 < figures["tools_verified"] <= figures["tools_built"] == sum(r["n_tools"] for r in envs)
    # stopping on time: no batch starts once the budget is spent
    assert run_batches([["x"]], None, lambda ks: 0, max_seconds=0, run=in_process).stopped == "time_budget"
    capsys.readouterr()
    # the command prints and writes the same figures without running anything with --report-only
    out = tmp_path / "coverage.md"
    assert cli_main(["coverage", "--report-only", "--output", str(out)]) == 0
    assert out.read_text() in capsys.readouterr().out
    assert "| verified tools |" in out.read_text() and "| environments |" in out.read_text()
