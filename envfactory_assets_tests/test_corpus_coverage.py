"""The corpus-scale coverage run: ``environments`` without the cap of resources, partitions built and verified
in batches that resume where they stopped, and coverage counted only from tools whose semantic check passed."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from envfactory_assets.cli import UsageError, run_lock, wait_for_run_lock
from envfactory_assets.cli import main as cli_main
from envfactory_assets.defs.pipeline_runs import adjacent_blocks, latest_partition_metadata
from envfactory_assets.envgen.builder import MAX_RESOURCES, build_environment
from envfactory_assets.envgen.run_settings import EnvironmentRunSpec
from envfactory_assets.envgen.stage import environment_row, verification_row
from envfactory_assets.reporting.corpus_coverage import (
    MIN_VERIFIED_TOOLS,
    coverage_figures,
    coverage_markdown,
    verified_tools,
)
from envfactory_assets.runner.coverage_batches import (
    MAX_FAILED_IN_A_ROW,
    MAX_PARTITION_ARG_CHARS,
    batch_command,
    built_with,
    plan_batches,
    run_batches,
    verified_keys,
)
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
    # an environment built and verified with another max_resources is not done for this config: built again
    capped = tmp_path / "capped.yaml"
    ops = yaml.safe_load(config.read_text())["ops"]
    capped.write_text(yaml.safe_dump({"ops": {**ops, "environments": {"config": {"max_resources": 1}}}}))
    run_one = ["run", "--select", "environments,verified_environments", "--partition", keys[0]]
    assert cli_main([*run_one, "--config", str(capped)]) == 0
    with dg.DagsterInstance.get() as instance:
        latest = latest_partition_metadata(instance, "environments", "max_resources")
    assert latest == {keys[0]: 1, keys[1]: 0, keys[2]: 0}
    assert done() == set(keys)  # every partition has a current verification row ...
    assert built_with(latest, 0, MAX_RESOURCES) & done() == {keys[1], keys[2]}  # ... but one is capped
    assert built_with({"old": None, "new": 0}, MAX_RESOURCES, MAX_RESOURCES) == {"old"}  # made before the setting
    capsys.readouterr()
    assert cli_main(["coverage", "--report-only", "--config", str(config), "--output", str(out)]) == 0
    assert "1 of the environments counted were built with another max_resources than this config's (0)" in (
        out.read_text()
    )
    # a second scan appends its new key after the first scan's: a range run of two keys next to each other in
    # that order (not in sorted order) writes those two partitions and none of the keys sorted between them
    doc = json.loads((corpus / "helpdesk.json").read_text())
    doc["info"]["title"] = "Aardvark Desk"
    (corpus / "aardvark.json").write_text(json.dumps(doc))
    assert cli_main(["run", "--select", "source_resources", "--config", str(config)]) == 0
    with dg.DagsterInstance.get() as instance:
        order = list(instance.get_dynamic_partitions("environment"))
        new = order[-1]
        assert order == [*keys, new] and new < keys[0]
        before = instance.fetch_materializations(dg.AssetKey("environments"), limit=1).records[0].storage_id
        assert (
            cli_main(["run", "--select", "environments", "--partition", f"{new},{keys[2]}", "--config", str(config)])
            == 0
        )
        [run] = instance.get_runs(limit=1)
        assert run.tags["dagster/asset_partition_range_start"] == keys[2]
        assert run.tags["dagster/asset_partition_range_end"] == new
        written = instance.fetch_materializations(dg.AssetKey("environments"), limit=100).records
        assert sorted(r.partition_key for r in written if r.storage_id > before) == sorted([new, keys[2]])


def test_batches_follow_the_partitions_order_so_each_is_one_range_run():
    """Partitions added by two scans are not in sorted order (each scan appends its new keys): a batch taken in
    sorted order would need a run per key, a batch in the partitions' order is one partition-range run."""
    order = ["b", "d", "f", "a", "c", "e"]  # a first scan added b, d, f; a second a, c, e
    batches = plan_batches(order, {"d"}, 3)
    assert batches == [["b", "f", "a"], ["c", "e"]]
    assert [adjacent_blocks(order, b) for b in batches] == [[["b"], ["f", "a"]], [["c", "e"]]]
    assert [len(adjacent_blocks(order, b)) for b in plan_batches(order, set(), 3)] == [1, 1]


def test_a_large_batch_is_split_so_its_command_line_can_start():
    """A --batch larger than the corpus would put every key in one argument, over what Linux lets a process
    start with (E2BIG): the batches keep their argument under MAX_PARTITION_ARG_CHARS, and each command starts."""
    keys = [f"some_api_provider_com__service_{i:05d}" for i in range(6000)]  # about 230 KB joined
    batches = plan_batches(keys, set(), 100_000)
    assert len(batches) > 1 and [k for b in batches for k in b] == keys
    assert all(len(",".join(b)) <= MAX_PARTITION_ARG_CHARS for b in batches)
    widest = batch_command(max(batches, key=len), None)
    widest[:1] = ["true"]  # the command line itself, started by the kernel, with a program that does nothing
    assert subprocess.call(widest) == 0
    with pytest.raises(OSError):  # what one batch of them all would meet
        subprocess.call(["true", ",".join(keys)])


def test_a_failed_batch_is_run_one_partition_at_a_time_and_a_shared_cause_stops_the_loop():
    """A batch process that fails (one document it cannot get through) verifies none of its partitions: each is
    then run alone, the bad one is reported and left pending, the others are verified, and the loop goes on. When
    every partition fails alone too, the loop stops after MAX_FAILED_IN_A_ROW of them."""
    verified: set[str] = set()

    def process(bad: set[str]):
        def run(command: list[str]) -> int:
            keys = command[command.index("--partition") + 1].split(",")
            if bad & set(keys):
                return 1  # the whole batch process fails, as a run killed for memory does
            verified.update(keys)
            return 0

        return run

    def count(keys: list[str]) -> int:
        return len(verified & set(keys))

    lines: list[str] = []
    result = run_batches([["a", "b", "c"], ["d", "e"]], None, count, run=process({"b"}), log=lines.append)
    assert result.stopped == "done" and result.failed == ["b"]
    assert verified == {"a", "c", "d", "e"}
    assert [o.keys for o in result.outcomes] == [["a", "b", "c"], ["a"], ["b"], ["c"], ["d", "e"]]
    assert "batch 1/2 verified none of its 3 partitions: running them one at a time" in lines
    verified.clear()
    keys = [f"k{i}" for i in range(10)]
    stuck = run_batches([keys], None, count, run=process(set(keys)), log=lines.append)
    assert stuck.stopped == "batch_failed" and len(stuck.failed) == MAX_FAILED_IN_A_ROW
    assert len(stuck.outcomes) == 1 + MAX_FAILED_IN_A_ROW and verified == set()
    # batches of one: a lone bad partition is passed over, a run of them stops the loop
    alone = run_batches([["a"], ["b"], ["c"]], None, count, run=process({"b"}), log=lines.append)
    assert alone.stopped == "done" and alone.failed == ["b"]


def test_a_bad_environments_setting_is_named_before_the_corpus_is_scanned(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    for value, shown in ((-1, "max_resources=-1"), ("x", "max_resources='x'"), (1.5, "1.5"), (True, "True")):
        config = tmp_path / "bad.yaml"
        config.write_text(yaml.safe_dump({"ops": {"environments": {"config": {"max_resources": value}}}}))
        assert cli_main(["coverage", "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert "ops.environments.config" in err and shown in err and "whole number >= 0" in err
    config.write_text(yaml.safe_dump({"ops": {"verified_environments": {"config": {"max_workers": 0}}}}))
    assert cli_main(["coverage", "--config", str(config)]) == 2
    assert "max_workers" in capsys.readouterr().err
    config.write_text(yaml.safe_dump({"ops": {"environments": {"config": {"max_resource": 0}}}}))
    assert cli_main(["coverage", "--config", str(config)]) == 2
    assert "max_resource" in capsys.readouterr().err
    # an --output that cannot be written is named before the batches run, not after them
    assert cli_main(["coverage", "--output", str(tmp_path)]) == 2
    assert "a folder" in capsys.readouterr().err
    assert not home.exists()  # nothing was scanned or built


def test_coverage_waits_for_a_held_run_lock_and_then_names_its_holder(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    wait_for_run_lock(home, 0)  # no lock file: nothing to wait for
    with run_lock(home):
        started = time.monotonic()
        with pytest.raises(UsageError, match=rf"holds .*run.lock \(pid {os.getpid()}\)"):
            wait_for_run_lock(home, 1.0)
        assert time.monotonic() - started >= 1.0
    wait_for_run_lock(home, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_batch_process_ends_with_a_killed_coverage_command(tmp_path):
    """kill -9 of ``envfactory coverage`` must not leave its batch writing the store (a re-run would find the
    run lock held): the batch process gets SIGTERM when its parent dies."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                from envfactory_assets.runner.coverage_batches import call_batch
                call_batch([{sys.executable!r}, "-c", {SLEEPER.format(pid_file=str(pid_file))!r}])
                """
            ),
        ]
    )
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _running(child)
    signals = _signal_lines(child) if alive else ""
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, f"the batch outlived its killed parent; its signal state: {signals}"


#: The batch stand-in: it takes SIGTERM's default action whatever signal state the test process hands down
#: (a disposition set to ignore, or a mask, is inherited across fork and exec), writes its pid, and sleeps
SLEEPER = (
    "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGTERM}}); "
    "open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"
)


def _signal_lines(pid: int) -> str:
    """The parent pid and the signal masks of ``pid`` as /proc shows them, for a failure's message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return str(exc)
    return "; ".join(line for line in lines if line.startswith(("PPid", "SigPnd", "ShdPnd", "SigBlk", "SigIgn")))


def _running(pid: int) -> bool:
    """True while ``pid`` is a live process (an ended one may linger as a zombie until init reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
