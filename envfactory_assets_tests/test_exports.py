"""Exports: verl parquet, ShareGPT JSON, HF dataset; split by environment; licences and the allow-list."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from envfactory_assets.exports.licences import environment_licences
from envfactory_assets.exports.stage import build_exports
from envfactory_assets.tooluse.splits import is_held_out_environment

TRAIN_ENV = next(f"env_{i}" for i in range(100) if not is_held_out_environment(f"env_{i}"))
HELD_ENV = next(f"env_{i}" for i in range(100) if is_held_out_environment(f"env_{i}"))
OTHER_ENV = next(f"env_{i}" for i in range(100) if not is_held_out_environment(f"env_{i}") and f"env_{i}" != TRAIN_ENV)
LICENCES = environment_licences(
    [{"env_id": TRAIN_ENV, "source_resource_id": "src_a"}, {"env_id": HELD_ENV, "source_resource_id": "src_b"},
     {"env_id": OTHER_ENV, "source_resource_id": "src_c"}],
    [{"id": "src_a", "license_name": "MIT", "license_url": "https://mit"},
     {"id": "src_b", "license_name": "Apache 2.0", "license_url": "https://apache"},
     {"id": "src_c", "license_name": " ", "license_url": None}])


def _messages(arg):
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "act", "arguments": json.dumps(arg)}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "act", "content": "{\"ok\": true}"},
            {"role": "assistant", "content": "Done."}]


def _sft(i, env):
    return {"id": f"sft_{i}", "env_ids": [env], "messages": _messages({f"k{i}": i}), "tools": [
        {"type": "function", "function": {"name": "act", "parameters": {"type": "object", "properties": {}}}}]}


def _rl(i, env):
    return {"id": f"rl_{i}", "env_ids": [env], "domains": ["d"], "turn_index": 0,
            "prompt": _messages({})[:2], "tools": _sft(i, env)["tools"],
            "gold_calls": [{"name": "act", "arguments": {f"k{i}": i}}], "masked_arguments": ["limit"],
            "initial_state": {env: {"n": 0}}, "final_state": {env: {"n": i}}, "final_state_hash": f"h{i}"}


@pytest.fixture()
def rows():
    envs = [TRAIN_ENV, HELD_ENV, OTHER_ENV]
    return [_sft(i, envs[i % 3]) for i in range(6)], [_rl(i, envs[i % 3]) for i in range(9)]


def test_exports_split_by_environment_with_licences(rows, tmp_path):
    sft, rl = rows
    m = build_exports(sft, rl, LICENCES, tmp_path)
    out = tmp_path / m["version"]
    train = pq.read_table(out / "verl_train.parquet").to_pylist()
    val = pq.read_table(out / "verl_validation.parquet").to_pylist()
    assert len(train) == 6 and len(val) == 3
    assert all(HELD_ENV not in r["extra_info"]["env_ids"] for r in train)
    assert all(r["extra_info"]["env_ids"] == [HELD_ENV] for r in val)
    gt = json.loads(train[0]["reward_model"]["ground_truth"])
    assert gt["gold_calls"] and gt["masked_arguments"] == ["limit"] and set(gt["final_state_hashes"]) == {TRAIN_ENV}
    assert json.loads(train[0]["initial_state"]) == {TRAIN_ENV: {"n": 0}}
    assert train[0]["licences"][0]["name"] == "MIT" and train[0]["prompt"][1]["content"] == "do it"
    share = json.loads((out / "sharegpt_train.json").read_text())
    assert [c["from"] for c in share[0]["conversations"]] == ["human", "function_call", "observation", "gpt"]
    assert json.loads(share[0]["conversations"][1]["value"]) == [{"name": "act", "arguments": {"k0": 0}}]
    from datasets import load_from_disk

    hf = load_from_disk(str(out / "hf_sft"))
    assert (len(hf["train"]), len(hf["validation"])) == (4, 2)
    # arguments of different rows are not merged into one struct (no invented null keys)
    assert json.loads(hf["train"][0]["messages"])[2]["tool_calls"][0]["function"]["arguments"] == {"k0": 0}
    card = (out / "README.md").read_text()
    assert "| MIT | https://mit | 2 | 3 |" in card and "unspecified" in card and "Apache 2.0" in card
    assert m["files"]["verl_train.parquet"]["rows"]["train"] == 6
    assert build_exports(sft, rl, LICENCES, tmp_path) == m  # idempotent


def test_licence_allow_list_filters_rows(rows, tmp_path):
    sft, rl = rows
    m = build_exports(sft, rl, LICENCES, tmp_path, allow=["mit"])
    out = tmp_path / m["version"]
    assert m["dropped"] == {"sft": 4, "rl": 6}
    kept = pq.read_table(out / "verl_train.parquet").to_pylist()
    assert len(kept) == 3 and {lic["name"] for r in kept for lic in r["licences"]} == {"MIT"}
    assert [entry["name"] for entry in m["licences"]] == ["MIT"]
    from datasets import load_from_disk

    from envfactory_assets.defs.exports.assets import EXPORT_KEYS
    from envfactory_assets.exports.verify import verify_export

    assert list(load_from_disk(str(out / "hf_sft"))) == ["train"]  # the empty validation split is left out
    assert all(verify_export(out, m, files) == [] for files in EXPORT_KEYS.values())


def test_row_without_known_licence_is_an_error_and_writes_nothing(rows, tmp_path):
    sft, rl = rows
    rl.append(_rl(99, "env_unknown"))
    with pytest.raises(KeyError, match="env_unknown"):
        build_exports(sft, rl, LICENCES, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_verify_export_finds_missing_files_wrong_counts_and_leaks(rows, tmp_path):
    import pyarrow as pa

    from envfactory_assets.defs.exports.assets import EXPORT_KEYS
    from envfactory_assets.exports.verify import verify_export

    sft, rl = rows
    m = build_exports(sft, rl, LICENCES, tmp_path)
    out = tmp_path / m["version"]
    for files in EXPORT_KEYS.values():
        assert verify_export(out, m, files) == []
    # a validation row copied into train: wrong count and a held-out environment in train
    train = pq.read_table(out / "verl_train.parquet").to_pylist()
    leaked = pq.read_table(out / "verl_validation.parquet").to_pylist()[0]
    pq.write_table(pa.Table.from_pylist([*train, {**leaked, "split": "train"}]), out / "verl_train.parquet")
    problems = verify_export(out, m, EXPORT_KEYS["verl_export"])
    assert any("7 rows, manifest says 6" in p for p in problems)
    assert any("held out" in p for p in problems)
    # a row stripped of its licences, and a missing file
    share = json.loads((out / "sharegpt_train.json").read_text())
    share[0]["licences"] = []
    (out / "sharegpt_train.json").write_text(json.dumps(share))
    (out / "dataset_info.json").unlink()
    problems = verify_export(out, m, EXPORT_KEYS["sharegpt_export"])
    assert any("lacks a licence" in p for p in problems) and "dataset_info.json: missing" in problems
