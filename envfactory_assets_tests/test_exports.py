"""Exports: verl parquet, ShareGPT JSON, HF dataset; split by environment; licences and the allow-list."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

from envfactory_assets.exports.licences import environment_licences
from envfactory_assets.exports.stage import build_exports
from envfactory_assets.tooluse.splits import dataset_split, is_held_out_environment

TRAIN_ENV = next(f"env_{i}" for i in range(100) if not is_held_out_environment(f"env_{i}"))
HELD_ENV = next(f"env_{i}" for i in range(100) if is_held_out_environment(f"env_{i}"))
OTHER_ENV = next(f"env_{i}" for i in range(100) if not is_held_out_environment(f"env_{i}") and f"env_{i}" != TRAIN_ENV)
LICENCES = environment_licences(
    [
        {"env_id": TRAIN_ENV, "source_resource_id": "src_a"},
        {"env_id": HELD_ENV, "source_resource_id": "src_b"},
        {"env_id": OTHER_ENV, "source_resource_id": "src_c"},
    ],
    [
        {"id": "src_a", "license_name": "MIT", "license_url": "https://mit"},
        {"id": "src_b", "license_name": "Apache 2.0", "license_url": "https://apache"},
        {"id": "src_c", "license_name": " ", "license_url": None},
    ],
)


def _messages(arg):
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "do it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "act", "arguments": json.dumps(arg)}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "act", "content": '{"ok": true}'},
        {"role": "assistant", "content": "Done."},
    ]


def _sft(i, env):
    return {
        "id": f"sft_{i}",
        "env_ids": [env],
        "split": dataset_split([env]),
        "messages": _messages({f"k{i}": i}),
        "tools": [
            {"type": "function", "function": {"name": "act", "parameters": {"type": "object", "properties": {}}}}
        ],
    }


def _rl(i, env):
    # a second-turn prompt: the first turn's call and result come before the new request
    return {
        "id": f"rl_{i}",
        "env_ids": [env],
        "split": dataset_split([env]),
        "domains": ["d"],
        "turn_index": 1,
        "prompt": [*_messages({"q": f"é{i}", "n": [i]})[:5], {"role": "user", "content": "and again"}],
        "tools": _sft(i, env)["tools"],
        "gold_calls": [{"name": "act", "arguments": {f"k{i}": i}}],
        "masked_arguments": ["limit"],
        "initial_state": {env: {"n": 0}},
        "final_state": {env: {"n": i}},
        "final_state_hash": f"h{i}",
    }


@pytest.fixture()
def rows():
    envs = [TRAIN_ENV, HELD_ENV, OTHER_ENV]
    return [_sft(i, envs[i % 3]) for i in range(6)], [_rl(i, envs[i % 3]) for i in range(9)]


def test_exports_split_by_environment_with_licences(rows, tmp_path):
    sft, rl = rows
    said: list[tuple[int, int]] = []
    m = build_exports(sft, rl, LICENCES, tmp_path, progress=lambda done, total: said.append((done, total)))
    # every row written is counted once: 9 verl rows, 6 ShareGPT and 6 HF records, ending at the total
    assert said == [(n, 21) for n in range(1, 22)], said
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
    assert train[0]["prompt"][2]["tool_calls"][0]["function"] == {"name": "act", "arguments": '{"q": "é0", "n": [0]}'}
    assert train[0]["split"] == "train" and val[0]["split"] == "validation"
    share = json.loads((out / "sharegpt_train.json").read_text())
    assert [c["from"] for c in share[0]["conversations"]] == ["human", "function_call", "observation", "gpt"]
    assert json.loads(share[0]["conversations"][1]["value"]) == [{"name": "act", "arguments": {"k0": 0}}]
    from datasets import load_from_disk

    hf = load_from_disk(str(out / "hf_sft"))
    assert (len(hf["train"]), len(hf["validation"])) == (4, 2)
    # arguments of different rows are not merged into one struct (no invented null keys)
    assert hf["train"][0]["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"k0": 0}
    assert hf["train"][1]["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"k2": 2}  # sft_1 is held out
    assert hf["train"][0]["tools"] == sft[0]["tools"] and hf["train"][0]["licences"][0]["name"] == "MIT"
    card = (out / "README.md").read_text()
    assert "| MIT | https://mit | 2 | 3 |" in card and "unspecified" in card and "| Apache-2.0 |" in card
    assert m["files"]["verl_train.parquet"]["rows"]["train"] == 6
    again: list[tuple[int, int]] = []
    assert build_exports(sft, rl, LICENCES, tmp_path, progress=lambda *a: again.append(a)) == m  # idempotent
    assert again == []  # a version already written is not written, nor counted, again


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


@pytest.mark.parametrize("name", ["get book", "get.book", "récupérer", "x" * 65, "", "get_book\n", None])
def test_a_tool_name_no_model_api_accepts_is_refused_by_name_and_nothing_is_written(rows, tmp_path, name):
    sft, rl = rows
    bad = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}]
    for kind, row in (("rl", rl[0]), ("sft", sft[0])):
        named = [{**r, "tools": bad} if r is row else r for r in (rl if kind == "rl" else sft)]
        with pytest.raises(ValueError, match=rf"{kind} row {row['id']}: tool name {re.escape(repr(name))} is not"):
            build_exports(named if kind == "sft" else sft, named if kind == "rl" else rl, LICENCES, tmp_path)
        assert list(tmp_path.iterdir()) == []
    # names the rule allows, dashes and digits included, are written as they are
    fine = [{"type": "function", "function": {"name": "get-book_2", "parameters": {"type": "object"}}}]
    build_exports([{**sft[0], "tools": fine}], [], LICENCES, tmp_path / "fine")


def test_an_environment_tool_name_no_model_api_accepts_is_refused_in_the_verl_tool_config(bookshop):
    from envfactory_assets.exports.verl_tool_config import verl_tool_config

    env_id = bookshop["env_id"]
    assert verl_tool_config({env_id: bookshop}, [env_id])[1]["tools"] == len(bookshop["tools"])
    renamed = {**bookshop, "tools": [{**bookshop["tools"][0], "name": "books/list"}, *bookshop["tools"][1:]]}
    with pytest.raises(ValueError, match=rf"environment {env_id}: tool name 'books/list' is not a function name"):
        verl_tool_config({env_id: renamed}, [env_id])


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


def test_a_stored_split_that_disagrees_with_the_environments_is_refused(rows, tmp_path):
    sft, rl = rows
    held = next(r for r in rl if r["env_ids"] == [HELD_ENV])
    held["split"] = "train"  # what stores written before the split was stored hold
    with pytest.raises(ValueError, match="stored split 'train'.*'validation'"):
        build_exports(sft, rl, LICENCES, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_licence_names_become_spdx_ids_where_they_match_one():
    from envfactory_assets.exports.licences import allowed, licence_name, spdx_id

    for stated in (
        "Apache 2.0 License",
        "Apache 2.0",
        "Apache-2.0",
        "Apache v2 License",
        "Apache License 2.0",
        "Licensed by Apache 2.0",
        "apache-2.0",
        "Apache License, Version 2.0",
    ):
        assert licence_name(stated) == "Apache-2.0", stated
    assert [
        licence_name(n)
        for n in ("The MIT License (MIT)", "MIT License", "BSD3", "CC-BY-SA 2.0", "Creative Commons Attribution 3.0")
    ] == ["MIT", "MIT", "BSD-3-Clause", "CC-BY-SA-2.0", "CC-BY-3.0"]
    # vague or ambiguous names stay as stated; nothing becomes an empty name
    assert [licence_name(n) for n in ("Creative Commons", "AGPLv3", "Commercial", " ", None)] == [
        "Creative Commons",
        "AGPLv3",
        "Commercial",
        "unspecified",
        "unspecified",
    ]
    assert spdx_id("MIT OR Apache-2.0") == "MIT OR Apache-2.0" and spdx_id("See license") is None
    assert allowed([{"name": "Apache-2.0"}], ["Apache 2.0"])  # an allow-list entry matches by its SPDX id


def test_hf_rows_render_like_the_store_rows_and_trl_reads_them_as_chat_data(rows, tmp_path):
    from datasets import load_from_disk
    from trl.data_utils import is_conversational

    from envfactory_assets.tooluse.chat_template import render_chat

    sft, rl = rows
    m = build_exports(sft, rl, LICENCES, tmp_path)
    hf = load_from_disk(str(tmp_path / m["version"] / "hf_sft"))
    by_id = {r["id"]: r for r in sft}
    for split in hf.values():
        for row in split:
            assert is_conversational(row)
            store_row = by_id[row["id"]]
            assert render_chat(row["messages"], row["tools"]) == render_chat(store_row["messages"], store_row["tools"])
            assert all(None not in m.values() for m in row["messages"])  # no keys merged in from other rows


def test_verl_rows_render_with_a_template_that_loops_over_tool_calls(rows, tmp_path):
    """verl applies the tokenizer's chat template to ``prompt``: rendered as it is (no decoding of fields),
    a row must give exactly what the store row gives."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from envfactory_assets.tooluse.chat_template import TOOL_CHAT_TEMPLATE, render_chat

    sft, rl = rows
    m = build_exports(sft, rl, LICENCES, tmp_path)
    by_id = {r["id"]: r for r in rl}
    verl_rows = [
        r
        for s in ("train", "validation")
        for r in pq.read_table(tmp_path / m["version"] / f"verl_{s}.parquet").to_pylist()
    ]
    assert len(verl_rows) == len(rl)
    for row in verl_rows:
        tools = json.loads(row["tool_config"])["tools"]
        rendered, _ = render_jinja_template(
            conversations=[row["prompt"]], tools=tools, chat_template=TOOL_CHAT_TEMPLATE, add_generation_prompt=True
        )
        assert rendered[0] == render_chat(by_id[row["id"]]["prompt"], tools, add_generation_prompt=True)
        assert '<tool_call>{"name": "act", "arguments": {"q": ' in rendered[0]


def _bookshop_export(bookshop, tmp_path):
    """An export of one gold RL row on the bookshop (set a book's price to 12.5), with its environment:
    ``(export folder, manifest, the verl row, the book id)``."""
    import copy

    from envfactory_assets.envgen.tools import openai_tool
    from envfactory_assets.tooluse.task_episode import TaskRunner

    env_id = bookshop["env_id"]
    initial = {env_id: copy.deepcopy(bookshop["initial_states"][0]["state"])}
    book_id = initial[env_id]["tables"]["books"][0]["book_id"]
    gold = [{"name": "update_book", "arguments": {"book_id": book_id, "price": 12.5}}]
    row = {
        "id": "rl_gold",
        "env_ids": [env_id],
        "split": dataset_split([env_id]),
        "domains": ["shop"],
        "turn_index": 0,
        "tools": [openai_tool(t) for t in bookshop["tools"]],
        "gold_calls": gold,
        "masked_arguments": [],
        "initial_state": initial,
        "prompt": [{"role": "user", "content": f"Set the price of book {book_id} to 12.5."}],
    }
    with TaskRunner({env_id: bookshop}) as runner:  # the gold final state, as the datasets stage replays it
        episode = runner.episode(row)
        episode.call(gold[0]["name"], gold[0]["arguments"])
        row["final_state"] = episode.final_states()
        episode.close()
    row["final_state_hash"] = "unused"
    licences = environment_licences(
        [{"env_id": env_id, "source_resource_id": "src"}], [{"id": "src", "license_name": "MIT", "license_url": ""}]
    )
    m = build_exports([], [row], licences, tmp_path, environments={env_id: bookshop})
    out = tmp_path / m["version"]
    (verl_row,) = pq.read_table(out / f"verl_{row['split']}.parquet").to_pylist()
    return out, m, verl_row, book_id


def test_the_verl_reward_function_scores_a_gold_answer_one_and_a_wrong_one_less(bookshop, tmp_path):
    import importlib.util

    out, m, verl_row, book_id = _bookshop_export(bookshop, tmp_path)
    assert m["verl_reward"]["custom_reward_function"] == {"path": "envfactory_reward.py", "name": "compute_score"}
    spec = importlib.util.spec_from_file_location("envfactory_reward_copy", out / "envfactory_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the shipped copy, as verl loads it by path
    truth = verl_row["reward_model"]["ground_truth"]
    answer = f'<tool_call>{{"name": "update_book", "arguments": {{"book_id": "{book_id}", "price": 12.5}}}}</tool_call>'
    try:
        right = module.compute_score(verl_row["data_source"], answer, truth, verl_row["extra_info"])
        wrong = module.compute_score(verl_row["data_source"], answer.replace("12.5", "13"), truth)
        garbled = module.compute_score(verl_row["data_source"], "<tool_call>{not json</tool_call>", truth)
    finally:
        for runner in module._runners.values():
            runner.close()
    assert (right["score"], right["trace"], right["state"]) == (1.0, 1.0, 1.0)
    assert wrong["trace"] == 0.0 and wrong["state"] == 0.0 and wrong["score"] == 0.0
    assert garbled["n_malformed"] == 1 and garbled["score"] == 0.0


def test_the_verl_tool_config_lists_every_tool_with_valid_parameters(bookshop, tmp_path):
    import yaml
    from jsonschema import Draft202012Validator

    out, m, verl_row, _ = _bookshop_export(bookshop, tmp_path)
    assert m["verl_tools"]["tool_config_path"] == "envfactory_tools.yaml" and (out / "envfactory_tools.py").is_file()
    config = yaml.safe_load((out / "envfactory_tools.yaml").read_text(encoding="utf-8"))
    entries = {e["tool_schema"]["function"]["name"]: e for e in config["tools"]}
    assert len(entries) == len(config["tools"]) == m["verl_tools"]["tools"]  # verl keys its tools by name
    assert set(entries) == {t["name"] for t in bookshop["tools"]}  # every tool of the rows' environments
    for entry in entries.values():
        assert entry["class_name"] == "envfactory_tools.EnvFactoryTool" and entry["config"]["type"] == "native"
        assert entry["tool_schema"]["type"] == "function" and entry["tool_schema"]["function"]["description"]
        Draft202012Validator.check_schema(entry["tool_schema"]["function"]["parameters"])
    assert m["verl_tools"]["left_out"] == {} and m["verl_tools"]["shared_names"] == {}
    assert set(verl_row["extra_info"]["tool_selection"]) == set(entries)
    assert verl_row["extra_info"]["tools_kwargs"]["update_book"] == {"create_kwargs": {"task_id": "rl_gold"}}


def test_verl_schema_problem_names_what_verl_cannot_read():
    from envfactory_assets.exports.verl_tool_config import verl_schema_problem

    assert verl_schema_problem({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}) is None
    assert "'a'" in verl_schema_problem({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}})
    assert "properties" in verl_schema_problem({"type": "object"})


def test_the_shipped_verl_tool_class_runs_calls_on_one_episode_per_rollout(bookshop, tmp_path, monkeypatch):
    """As verl's tool agent loop uses it: a tool instance created and released around every call, the
    rollout's ``agent_data`` passed to ``execute`` (verl 0.9); the class loaded from the export folder."""
    import asyncio
    import importlib
    import sys

    from envfactory_assets.exports import verl_reward

    out, _, verl_row, book_id = _bookshop_export(bookshop, tmp_path)
    monkeypatch.syspath_prepend(str(out))
    module = importlib.import_module("envfactory_tools")
    assert module.__file__ == str(out / "envfactory_tools.py")
    entries = {
        e["tool_schema"]["function"]["name"]: e
        for e in __import__("yaml").safe_load((out / "envfactory_tools.yaml").read_text(encoding="utf-8"))["tools"]
    }
    tools = {
        name: module.EnvFactoryTool(config=entries[name]["config"], tool_schema=entries[name]["tool_schema"])
        for name in ("update_book", "get_book")
    }
    kwargs = verl_row["extra_info"]["tools_kwargs"]

    async def call(name, arguments, agent_data):
        instance_id, _ = await tools[name].create(create_kwargs=kwargs[name]["create_kwargs"])
        try:
            response, step_reward, _ = await tools[name].execute(instance_id, arguments, agent_data=agent_data)
        finally:
            await tools[name].release(instance_id)
        assert step_reward == 0.0
        return json.loads(response.text)

    class Rollout:  # stands for verl's AgentData: one object per rollout
        pass

    async def rollouts():
        first, second = Rollout(), Rollout()
        await call("update_book", {"book_id": book_id, "price": 12.5}, first)
        seen = await call("get_book", {"book_id": book_id}, first)
        other = await call("get_book", {"book_id": book_id}, second)
        await call("update_book", {"book_id": book_id, "price": 20.0}, None)  # older verl: no agent_data
        alone = await call("get_book", {"book_id": book_id}, None)
        with pytest.raises(KeyError, match="no task 'rl_missing'"):
            await tools["get_book"].create(create_kwargs={"task_id": "rl_missing"})
        return seen, other, alone

    try:
        seen, other, alone = asyncio.run(rollouts())
    finally:
        sys.modules.pop("envfactory_tools", None)
        for path in [p for p in verl_reward._runners if p.parent == out]:
            verl_reward._runners.pop(path).close()
    original = bookshop["initial_states"][0]["state"]["tables"]["books"][0]["price"]
    assert seen["price"] == 12.5  # the rollout's later call sees its earlier one
    assert other["price"] == original  # another rollout has its own copy of the initial state
    assert alone["price"] == original  # without agent_data each call starts from the initial state


def test_the_stored_split_is_exported_when_the_fallback_environment_left_no_row(tmp_path):
    """With no environment under the hash share the dataset stage holds out the lowest-bucket one; when none
    of its rows survived (its RL rows all failed the replay check), re-choosing over the stored rows would
    hold out another environment whose rows are stored as train. The stored splits are exported as they are."""
    from envfactory_assets.exports.verify import verify_export
    from envfactory_assets.tooluse.splits import held_out_environments

    envs = [f"env_{i}" for i in range(100) if not is_held_out_environment(f"env_{i}")][:3]
    (fallback,) = held_out_environments(envs)
    kept = [e for e in envs if e != fallback]
    licences = environment_licences(
        [{"env_id": e, "source_resource_id": "src_a"} for e in envs],
        [{"id": "src_a", "license_name": "MIT", "license_url": "https://mit"}],
    )
    sft = [{**_sft(i, e), "split": dataset_split([e], {fallback})} for i, e in enumerate(kept)]
    rl = [{**_rl(i, e), "split": dataset_split([e], {fallback})} for i, e in enumerate(kept)]
    assert {r["split"] for r in sft + rl} == {"train"}
    manifest = build_exports(sft, rl, licences, tmp_path)
    assert manifest["held_out_env_ids"] == [] and manifest["files"]["verl_train.parquet"]["rows"]["train"] == 2
    assert verify_export(tmp_path / manifest["version"], manifest, ["verl_train.parquet", "sharegpt_train.json"]) == []
    # a validation row whose only environment is also trained on is refused, and nothing is written
    leaked = {**_rl(9, kept[0]), "id": "rl_leak", "split": "validation"}
    with pytest.raises(ValueError, match="rl_leak: stored split 'validation'"):
        build_exports(sft, [*rl, leaked], licences, tmp_path / "again")
    assert not (tmp_path / "again").exists()


def test_trls_sft_trainer_trains_on_the_hf_export_as_written(rows, tmp_path, one_layer_model_dir):
    """The exported DatasetDict goes to TRL's SFTTrainer unchanged (no column mapping, no JSON decoding): it
    renders each row with the model's chat template, tools included, and takes optimizer steps on it."""
    import math

    from datasets import load_from_disk
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    sft, rl = rows
    m = build_exports(sft, rl, LICENCES, tmp_path)
    train = load_from_disk(str(tmp_path / m["version"] / "hf_sft"))["train"]
    tokenizer = AutoTokenizer.from_pretrained(one_layer_model_dir)
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(one_layer_model_dir),
        train_dataset=train,
        processing_class=tokenizer,
        args=SFTConfig(
            output_dir=str(tmp_path / "trl"),
            max_steps=2,
            per_device_train_batch_size=1,
            max_length=4096,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
        ),
    )
    first = trainer.train_dataset[0]
    row = train[0]
    expected = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
    assert tokenizer.decode(first["input_ids"]) == expected  # the row as the template renders it, whole
    assert row["tools"][0]["function"]["name"] in expected and '"name"' in expected  # tools and calls rendered
    result = trainer.train()
    assert result.global_step == 2 and math.isfinite(result.training_loss)


def _response(calls):
    return "".join(
        f"<tool_call>{json.dumps({'name': c['name'], 'arguments': c['arguments']})}</tool_call>" for c in calls
    )


def _fixture_export(environments, graph, worker, tmp_path, sft_share=0.0):
    """The export of the datasets stage's rows of the fixture environments: ``(manifest, sft rows, rl rows)``."""
    from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
    from envfactory_assets.synth.stage import dataset_rows
    from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory

    chains = sample_chains(graph, 12, "verl", SamplerConfig(min_tools=3))
    trajs = [synthesize_trajectory(c, graph, environments, worker, SynthConfig(min_turns=2)) for c in chains]
    passed = [
        {
            **t,
            "id": f"traj_{i}",
            "domains": sorted({environments[e]["domain"] for e in t["env_ids"]}),
            "n_turns": len(t["turns"]),
        }
        for i, t in enumerate(trajs)
        if t["status"] == "passed"
    ]
    sft, rl, rejected = dataset_rows(passed, environments, sft_share=sft_share)
    assert rl and not rejected
    licences = environment_licences(
        [{"env_id": e, "source_resource_id": "src"} for e in environments],
        [{"id": "src", "license_name": "MIT", "license_url": ""}],
    )
    return build_exports(sft, rl, licences, tmp_path, environments=environments), sft, rl


def test_the_verl_reward_is_the_training_reward_on_every_exported_row(environments, graph, worker, tmp_path):
    """Rows of the fixture environments through the datasets stage and the export: on every verl row an empty
    response and empty-argument calls score 0 and the gold calls score the maximum."""
    import importlib.util

    from envfactory_assets.exports import verl_reward
    from envfactory_assets.tooluse.reward import MAX_REWARD, arguments_that_matter

    m, _sft, rl = _fixture_export(environments, graph, worker, tmp_path)
    out = tmp_path / m["version"]
    assert (out / "envfactory_reward.py").read_bytes() == open(verl_reward.__file__, "rb").read()
    spec = importlib.util.spec_from_file_location("envfactory_reward_rows", out / "envfactory_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    verl_rows = [
        r
        for s in ("train", "validation")
        if (out / f"verl_{s}.parquet").exists()
        for r in pq.read_table(out / f"verl_{s}.parquet").to_pylist()
    ]
    assert len(verl_rows) == len(rl)
    emptied = 0
    try:
        for row in verl_rows:
            truth = json.loads(row["reward_model"]["ground_truth"])

            def score(text, row=row):
                return module.compute_score(row["data_source"], text, row["reward_model"]["ground_truth"])

            assert score("")["score"] == 0.0 and score("  \n")["score"] == 0.0, row["id"]
            # a row whose gold is no call is answered in words (the abstention's reply)
            gold = _response(truth["gold_calls"]) or "None of my tools can do that."
            assert score(gold)["score"] == MAX_REWARD, row["id"]
            assert score(_response(truth["executed_calls"]) or gold)["score"] == MAX_REWARD, row["id"]
            if any(arguments_that_matter(c, truth["tools"], truth["masked_arguments"]) for c in truth["gold_calls"]):
                emptied += 1
                empty = [{"name": c["name"], "arguments": {}} for c in truth["gold_calls"]]
                assert score(_response(empty))["score"] == 0.0, row["id"]
    finally:
        for runner in module._runners.values():
            runner.close()
    assert emptied


def test_the_export_audit_measures_the_written_files_and_names_what_breaks(environments, graph, worker, tmp_path):
    """The audit the exports stage stores reads the written files: on the fixture export nothing is wrong and every
    row is counted; a verl row whose recorded final state no call can reach, and a ShareGPT row with two
    observations in a row, are each found and named."""
    import pyarrow as pa

    from envfactory_assets.exports.audit import audit_export

    m, sft, rl = _fixture_export(environments, graph, worker, tmp_path, sft_share=0.5)
    audit = audit_export(m)
    assert audit["problems"] == []
    assert audit["verl"]["rows"] == len(rl) and audit["sharegpt"]["rows"] == len(sft) > 0
    assert audit["verl"]["rows_needing_arguments"] > 0 and audit["verl"]["max_empty_score"] == 0.0
    out = tmp_path / m["version"]
    path = next(p for p in out.glob("verl_*.parquet") if pq.read_table(p).num_rows)
    rows = pq.read_table(path).to_pylist()
    truth = json.loads(rows[0]["reward_model"]["ground_truth"])
    truth["final_state_hashes"] = {e: "0" * 16 for e in truth["final_state_hashes"]}
    rows[0]["reward_model"]["ground_truth"] = json.dumps(truth)
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)
    share_path = next(p for p in out.glob("sharegpt_*.json") if json.loads(p.read_text()))
    records = json.loads(share_path.read_text())
    turns = records[0]["conversations"]
    at = next(i for i, t in enumerate(turns) if t["from"] == "observation")
    records[0]["conversations"] = [*turns[: at + 1], turns[at], *turns[at + 1 :]]
    share_path.write_text(json.dumps(records))
    audit = audit_export(m)
    assert audit["verl"]["gold_below_max"] == 1 and audit["verl"]["examples"]["gold_below_max"][0].startswith(
        rows[0]["id"]
    )
    assert audit["sharegpt"]["rows_breaking_rules"] == 1 and records[0]["id"] in audit["sharegpt"]["examples"][0]
    assert [p.split(":")[0] for p in audit["problems"]] == ["verl", "ShareGPT"]


def test_the_export_audit_names_a_broken_input_instead_of_passing_or_crashing(environments, graph, worker, tmp_path):
    """A missing folder, a ShareGPT file that is no list of records, a verl ground truth that is no JSON object,
    and a folder emptied behind the manifest's back are each an error or a problem naming the input."""
    import pyarrow as pa

    from envfactory_assets.exports.audit import audit_export

    m, _sft, _rl = _fixture_export(environments, graph, worker, tmp_path, sft_share=0.5)
    with pytest.raises(FileNotFoundError, match="no folder"):
        audit_export({**m, "path": str(tmp_path / "gone")})
    with pytest.raises(ValueError, match="'version' and 'path'"):
        audit_export({"version": "v1"})
    out = tmp_path / m["version"]
    share = next(p for p in out.glob("sharegpt_*.json") if json.loads(p.read_text()))
    kept = share.read_text()
    share.write_text('{"a": 1}')
    with pytest.raises(ValueError, match=rf"{share.name}: expected a JSON list"):
        audit_export(m)
    share.write_text("[]")  # emptied: fewer rows than the manifest lists
    assert any(p.startswith("ShareGPT: read ") and "the manifest lists" in p for p in audit_export(m)["problems"])
    share.write_text(kept)
    path = next(p for p in out.glob("verl_*.parquet") if pq.read_table(p).num_rows)
    rows = pq.read_table(path).to_pylist()
    rows[0]["reward_model"]["ground_truth"] = "[]"
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)
    with pytest.raises(ValueError, match=rf"verl row {rows[0]['id']} of .*not a JSON object"):
        audit_export(m)


def test_a_reward_outside_its_range_is_an_error():
    from envfactory_assets.tooluse.reward import MAX_REWARD, valid_reward

    assert valid_reward(0.0, "a test") == 0.0 and valid_reward(MAX_REWARD, "a test") == MAX_REWARD
    for bad in (float("nan"), float("inf"), -0.1, MAX_REWARD + 0.01, "1", None, True):
        with pytest.raises(ValueError, match="compute_score"):
            valid_reward(bad, "verl compute_score")


def test_every_sharegpt_row_keeps_llamafactorys_role_rules_with_parallel_calls_as_one_turn(
    environments, graph, worker, tmp_path
):
    """SFT rows of the fixture environments (with the datasets stage's parallel calls) through the export:
    every ShareGPT row keeps LlamaFactory's documented rules, none is dropped, and parallel calls are one
    function_call turn with one observation turn holding their results in order."""
    from envfactory_assets.exports.formats import sharegpt_problems
    from envfactory_assets.synth.datasets.datagaps import DataGapsConfig
    from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
    from envfactory_assets.synth.stage import dataset_rows
    from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory

    chains = sample_chains(graph, 16, "sharegpt", SamplerConfig(min_tools=3))
    trajs = [synthesize_trajectory(c, graph, environments, worker, SynthConfig(min_turns=2)) for c in chains]
    passed = [
        {
            **t,
            "id": f"traj_{i}",
            "domains": sorted({environments[e]["domain"] for e in t["env_ids"]}),
            "n_turns": len(t["turns"]),
        }
        for i, t in enumerate(trajs)
        if t["status"] == "passed"
    ]
    sft, _rl, _rejected = dataset_rows(passed, environments, sft_share=1.0, gaps=DataGapsConfig(parallel_share=1.0))
    licences = environment_licences(
        [{"env_id": e, "source_resource_id": "src"} for e in environments],
        [{"id": "src", "license_name": "MIT", "license_url": ""}],
    )
    m = build_exports(sft, [], licences, tmp_path)
    out = tmp_path / m["version"]
    records = [r for s in ("train", "validation") for r in json.loads((out / f"sharegpt_{s}.json").read_text())]
    assert len(records) == len(sft)
    assert {r["id"]: sharegpt_problems(r) for r in records if sharegpt_problems(r)} == {}
    by_id = {r["id"]: r for r in sft}
    parallel = 0
    for record in records:
        tool_messages = [m for m in by_id[record["id"]]["messages"] if m["role"] == "tool"]
        calls = [c for t in record["conversations"] if t["from"] == "function_call" for c in json.loads(t["value"])]
        assert len(calls) == len(tool_messages)  # every call and every result kept
        for i, turn in enumerate(record["conversations"]):
            if turn["from"] == "function_call" and len(json.loads(turn["value"])) > 1:
                parallel += 1
                results = json.loads(record["conversations"][i + 1]["value"])
                assert isinstance(results, list) and len(results) == len(json.loads(turn["value"]))
    assert parallel
    # the layout LlamaFactory skips: two observations in a row
    broken = {
        "conversations": [
            {"from": "human", "value": "q"},
            {"from": "function_call", "value": '[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]'},
            {"from": "observation", "value": "{}"},
            {"from": "observation", "value": "{}"},
            {"from": "gpt", "value": "done"},
        ]
    }
    assert any("turn 4" in p for p in sharegpt_problems(broken))


def _turn(i, result):
    call = {"id": f"c{i}", "type": "function", "function": {"name": "act", "arguments": json.dumps({"k": i})}}
    return [
        {"role": "user", "content": f"step {i}, please"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "name": "act", "content": result},
        {"role": "assistant", "content": f"Step {i} is done."},
    ]


def test_hf_rows_fit_the_base_models_context_split_at_turns_or_dropped_and_counted(base_model_dir, tmp_path):
    """With SmolLM2's tokenizer and a context cut to 400 tokens: a short row is kept, a three-turn row over the
    context is split at turn boundaries into valid rows that fit, a row whose one turn is over it is dropped;
    the manifest, the card and the export check say so; the card shows the chat template and a real call."""
    import dataclasses

    from datasets import load_from_disk

    from envfactory_assets.exports.context import tokenizer_limit
    from envfactory_assets.exports.verify import verify_export
    from envfactory_assets.tooluse.chat_template import TOOL_CHAT_TEMPLATE, normalize_messages

    limit = tokenizer_limit(base_model_dir, "smollm2-135m-instruct")
    assert limit.max_tokens == 8192  # SmolLM2-135M's context, read from the model's config
    small = dataclasses.replace(limit, max_tokens=400)
    medium = '{"rows": [' + ", ".join(f'{{"id": "row_{n}", "name": "item number {n}"}}' for n in range(12)) + "]}"
    huge = '{"text": "' + "lorem ipsum dolor " * 200 + '"}'
    tools = _sft(0, TRAIN_ENV)["tools"]
    system = [{"role": "system", "content": "sys"}]
    sft = [
        _sft(0, TRAIN_ENV),
        {**_sft(1, TRAIN_ENV), "messages": system + _turn(1, medium) + _turn(2, medium) + _turn(3, medium)},
        {**_sft(2, TRAIN_ENV), "messages": system + _turn(4, '{"ok": true}') + _turn(5, huge)},
    ]
    assert small.count(sft[0]["messages"], tools) <= 400 < small.count(sft[1]["messages"], tools)
    m = build_exports(sft, [], LICENCES, tmp_path, context=small)
    out = tmp_path / m["version"]
    assert m["hf_context"] == {
        "model": "smollm2-135m-instruct",
        "max_tokens": 400,
        "kept": 1,
        "split": 1,
        "parts": m["hf_context"]["parts"],
        "dropped": 1,
    }
    assert m["hf_context"]["parts"] >= 2
    rows = list(load_from_disk(str(out / "hf_sft"))["train"])
    assert m["files"]["hf_sft"]["rows"]["train"] == len(rows) == 1 + m["hf_context"]["parts"]
    assert {r["source_id"] for r in rows} == {"sft_0", "sft_1"}
    parts = [r for r in rows if r["source_id"] == "sft_1"]
    for part in parts:
        assert part["messages"][0] == system[0] and part["messages"][1]["role"] == "user"
        assert part["messages"][-1]["role"] == "assistant" and part["messages"][-1]["content"].startswith("Step")
        assert part["n_tokens"] == small.count(part["messages"], part["tools"]) <= 400
    # the parts are the row's turns, in order, none lost
    assert [msg for p in parts for msg in p["messages"][1:]] == normalize_messages(sft[1]["messages"])[1:]
    assert verify_export(out, m, ["hf_sft"]) == []
    # the check fails an export whose row is over the recorded context
    tighter = {**m, "hf_context": {**m["hf_context"], "max_tokens": 100}}
    assert any("tokens, not within" in p for p in verify_export(out, tighter, ["hf_sft"]))
    card = (out / "README.md").read_text()
    assert (out / "chat_template.jinja").read_text() == TOOL_CHAT_TEMPLATE
    assert '<tool_call>{"name": "act", "arguments": {"k0": 0}}</tool_call>' in card  # a call from the export
    assert "<|im_start|>assistant\n<tool_call>" in card and "<tool_response>" in card  # rendered by the template
    assert "split at turn boundaries into" in card and "dropped (a single turn over the context): 1" in card
