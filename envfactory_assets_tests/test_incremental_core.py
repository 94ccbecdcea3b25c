"""The plain-Python parts of incremental re-synthesis: code versions, partition keys, the resource watch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envfactory_assets.incremental.chains import merge_chains, unaffected
from envfactory_assets.incremental.code_versions import code_version, tree_hash
from envfactory_assets.incremental.partitions import env_scope, partition_key
from envfactory_assets.incremental.watch import decode_cursor, encode_cursor, plan, run_key, snapshot
from envfactory_assets_tests.fixture_environments import FIXTURES


def test_code_version_changes_with_the_code_it_covers_and_nothing_else(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(
        Path(__file__).parents[1] / "envfactory_assets" / "incremental",
        pkg,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    v1 = tree_hash([pkg])
    assert tree_hash([pkg]) == v1 and len(v1) == 12
    other.write_text("x = 2\n")
    assert tree_hash([pkg]) == v1  # a file outside the covered code
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "watch.cpython-311.pyc").write_bytes(b"\0")
    assert tree_hash([pkg]) == v1
    (pkg / "watch.py").write_text((pkg / "watch.py").read_text() + "\n# changed\n")
    assert tree_hash([pkg]) != v1
    assert tree_hash([pkg, other]) != tree_hash([pkg])
    assert code_version("envfactory_assets.incremental") != code_version("envfactory_assets.sources")
    with pytest.raises(FileNotFoundError):
        tree_hash([tmp_path / "missing"])
    with pytest.raises(ModuleNotFoundError):
        code_version("envfactory_assets.no_such_module")


def test_partition_keys_are_resource_keys_and_safe_in_sql():
    assert partition_key("apideck_com__crm") == "apideck_com__crm"
    for bad in ["", "Has-Upper", "a,b", "x'; DROP TABLE t; --", "a" * 129]:
        with pytest.raises(ValueError, match="partition key"):
            partition_key(bad)
    assert env_scope(["b", "a", "a"]) == "env_id IN ('a', 'b')"
    assert env_scope([]) == "FALSE"


def test_watch_plans_runs_for_changed_partitions_and_new_user_documents(tmp_path):
    corpus, user = tmp_path / "corpus", tmp_path / "user"
    shutil.copytree(FIXTURES, corpus)
    user.mkdir()
    files, left = snapshot([corpus, user], None)
    assert left == 0 and len(files) == len(list(FIXTURES.glob("*.json")))
    keys = sorted(v[3] for v in files.values() if v[3])
    assert len(keys) == 3  # the three accepted fixtures; rejected documents are recorded with key None
    assert decode_cursor(encode_cursor(files, True)) == (files, True)
    assert plan(None, files, keys).runs == []  # first look: a baseline
    assert plan(files, files, keys).runs == []

    again, _ = snapshot([corpus, user], files, max_parses=0)
    assert again == files  # unchanged files are not read again
    (corpus / "helpdesk.json").write_text((corpus / "helpdesk.json").read_text().replace("Close a ticket", "Close"))
    partial, left = snapshot([corpus, user], files, max_parses=0)
    assert left == 1 and partial == files  # over budget: left for the next tick
    changed, _ = snapshot([corpus, user], files)
    todo = plan(files, changed, keys)
    helpdesk = next(v for k, v in changed.items() if k.endswith("helpdesk.json"))
    assert todo.runs == [(helpdesk[3], run_key(helpdesk[3], helpdesk[2]))] and todo.new_partitions == []
    assert plan(files, changed, keys).runs == todo.runs  # deterministic

    (corpus / "helpdesk.json").unlink()
    gone, _ = snapshot([corpus, user], changed)
    assert plan(changed, gone, keys).runs == [(helpdesk[3], f"{helpdesk[3]}@removed")]
    with pytest.raises(ValueError, match="cursor"):
        decode_cursor('{"other": 1}')


def test_merge_keeps_unaffected_chains_and_fills_with_fresh_ones():
    def chain(key, envs, vers, tools):
        return {
            "id": f"chain_{key}_{'_'.join(vers)}",
            "chain_key": key,
            "sampler": "topology",
            "env_ids": envs,
            "verified_environment_ids": vers,
            "tools": {"tools": tools},
            "superseded": False,
            "written_at": None,
        }

    previous = [chain("k/0", ["a"], ["va1"], ["a.x", "a.y"]), chain("k/1", ["a", "b"], ["va1", "vb1"], ["a.x", "b.z"])]
    verified = {"a": "va1", "b": "vb2"}  # b changed
    assert unaffected(previous[0], verified) and not unaffected(previous[1], verified)
    fresh = [
        chain("k/0", ["a"], ["va1"], ["a.y", "a.x"]),
        chain("k/1", ["b"], ["vb2"], ["b.z"]),
        chain("k/2", ["a"], ["va1"], ["a.x", "a.y"]),
    ]
    rows, reused = merge_chains(previous, fresh, verified, {"topology": 2})
    assert [r["id"] for r in rows] == [previous[0]["id"], fresh[1]["id"]]
    assert [r["id"] for r in reused] == [previous[0]["id"]] and "superseded" not in rows[0]


def test_a_refined_trajectory_whose_clarification_call_or_reply_changed_gets_a_new_id():
    # the store keeps a stored id's row as it is: a re-run whose code asks, calls or replies differently for
    # the same requests must write a new row, not leave the old one current
    from envfactory_assets.synth.stage import refined_trajectory_id

    turn = {
        "query": "Create an org with name 'Design ORG'.",
        "clarification": [],
        "calls": [{"name": "create_org", "arguments": {"name": "Design ORG"}}],
        "assistant_summary": "I made a new org, 'Design ORG'.",
    }
    same = refined_trajectory_id("raw_1", [dict(turn)], "passed", "programmatic")
    assert same == refined_trajectory_id("raw_1", [turn], "passed", "programmatic")
    assert same.startswith("ref_") and len(same) == 20
    changed = [
        {**turn, "clarification": [{"role": "assistant", "content": "Which model should I use?"}]},
        {**turn, "calls": [{"name": "create_org", "arguments": {"name": "Design ORG", "created_time": 1.0}}]},
        {**turn, "assistant_summary": "Done."},
        {**turn, "query": "Add an org named 'Design ORG'."},
    ]
    ids = {refined_trajectory_id("raw_1", [t], "passed", "programmatic") for t in changed}
    assert len(ids) == len(changed) and same not in ids
    assert refined_trajectory_id("raw_1", [turn], "failed", "programmatic") != same
    assert refined_trajectory_id("raw_2", [turn], "passed", "programmatic") != same


def test_a_source_row_whose_reading_changed_gets_a_new_id_wherever_the_corpus_lies():
    # the store keeps a stored id's row as it is: a re-run whose rules read the same document differently
    # (more operations mapped) must write a new row; the corpus's folder on this machine is no part of it
    from envfactory_assets.sources.row_ids import source_row_id

    row = {
        "resource_key": "adyen_com__account_service",
        "sha256": "ab" * 32,
        "corpus_root": "/work/store-d/npm",
        "n_mapped_operations": 12,
        "operations_by_kind": {"create": 4, "get": 8},
    }
    same = source_row_id(row)
    assert same.startswith("src_") and same == source_row_id({**row, "corpus_root": "/elsewhere"})
    assert source_row_id({**row, "operations_by_kind": {"create": 4, "get": 8, "action": 2}}) != same
    assert source_row_id({**row, "n_mapped_operations": 14}) != same
