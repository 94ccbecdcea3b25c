"""Choosing training examples and held-out prompts for the CPU-sized checkpoint run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfactory_assets.tooluse.tool_selection import restrict_tools
from envfactory_assets.training.stage import (
    first_turns,
    held_out_prompts,
    training_examples,
)


def _tool(name: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }


def _turn(i: int, tool: str) -> list[dict]:
    return [
        {"role": "user", "content": f"request {i} " + "words " * 40},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": tool, "arguments": json.dumps({"x": str(i)})}}
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "name": tool, "content": json.dumps({"rows": ["r" * 50] * 5})},
        {"role": "assistant", "content": f"done {i}"},
    ]


ROW = {
    "id": "sft_1",
    "env_ids": ["e"],
    "tools": [_tool(f"t{i}") for i in range(12)],
    "messages": [{"role": "system", "content": "sys"}] + _turn(0, "t3") + _turn(1, "t7") + _turn(2, "t9"),
}


def test_first_turns_cuts_at_a_turn_boundary_and_keeps_at_least_one_turn():
    whole = first_turns(ROW, 100_000)
    assert whole["messages"] == ROW["messages"]
    one = first_turns(ROW, 10)
    assert one["messages"] == ROW["messages"][:5] and one["messages"][-1]["content"] == "done 0"
    two = first_turns(ROW, (len(json.dumps(ROW["messages"][:9])) + len(json.dumps(ROW["tools"]))) // 3 + 1)
    assert two["messages"][-1]["content"] == "done 1"


def test_restrict_tools_keeps_called_tools_and_stable_distractors():
    cut = restrict_tools(ROW, 5)
    names = [t["function"]["name"] for t in cut["tools"]]
    assert len(names) == 5 and {"t3", "t7", "t9"} <= set(names)
    assert restrict_tools(ROW, 5) == cut
    assert restrict_tools(ROW, 0) is ROW
    assert len(restrict_tools(ROW, 2)["tools"]) == 3  # never drops a tool the row calls


def test_training_examples_and_prompts_are_short_and_disjoint_by_environment():
    examples = training_examples([ROW], 10, max_tokens=10, max_tools=4)
    assert len(examples) == 1 and len(examples[0]["tools"]) == 4
    assert examples[0]["messages"][-1]["content"] == "done 0"
    rl = [
        {
            "id": "rl_1",
            "turn_index": 0,
            "env_ids": ["e"],
            "prompt": ROW["messages"][:2],
            "tools": ROW["tools"],
            "gold_calls": [{"name": "t3", "arguments": {"x": "0"}}],
        },
        {
            "id": "rl_2",
            "turn_index": 0,
            "env_ids": ["other"],
            "prompt": ROW["messages"][:2],
            "tools": ROW["tools"],
            "gold_calls": [{"name": "t7", "arguments": {"x": "0"}}],
        },
        {
            "id": "rl_3",
            "turn_index": 1,
            "env_ids": ["other"],
            "prompt": ROW["messages"][:6],
            "tools": ROW["tools"],
            "gold_calls": [{"name": "t9", "arguments": {"x": "1"}}],
        },
    ]
    (prompt,) = held_out_prompts(rl, 1, exclude_env_ids={"e"}, max_tools=3)
    assert prompt["id"] == "rl_2" and "t7" in {t["function"]["name"] for t in prompt["tools"]}
    assert len(prompt["tools"]) == 3


def test_grpo_tasks_are_train_split_first_turns_fewest_gold_calls_first_with_gold_tools_kept():
    from envfactory_assets.tooluse.splits import dataset_split, row_split
    from envfactory_assets.training.stage import grpo_tasks

    assert row_split(["helpdesk"]) == "train" and row_split(["shop27"]) == "held_out"

    def rl(i, env, turn, gold, prompt_words=3, tools=ROW["tools"]):
        return {
            "id": f"rl_{i}",
            "turn_index": turn,
            "env_ids": [env],
            "tools": tools,
            "split": dataset_split([env]),
            "prompt": [{"role": "user", "content": "w " * prompt_words}],
            "gold_calls": [{"name": g, "arguments": {"x": "1"}} for g in gold],
        }

    rows = [
        rl(1, "helpdesk", 0, ["t3", "t7"]),
        rl(2, "helpdesk", 0, ["t9"], 30),
        rl(3, "helpdesk", 0, ["t1"], 5),
        rl(4, "shop27", 0, ["t2"]),
        rl(5, "helpdesk", 1, ["t4"]),
        rl(6, "helpdesk", 0, []),
        rl(7, "helpdesk", 0, ["t5"], tools=[_tool("reset"), _tool("t5")]),
    ]
    tasks = grpo_tasks(rows, 10, max_tools=3)
    # held-out, later turns and reserved names out; the no-call turn takes the 4th slot
    assert [t["id"] for t in tasks] == ["rl_3", "rl_2", "rl_1", "rl_6"]
    assert all(len(t["tools"]) == 3 for t in tasks)
    assert {"t3", "t7"} <= {t["function"]["name"] for t in tasks[2]["tools"]}
    assert [t["id"] for t in grpo_tasks(rows, 1, max_tools=3)] == ["rl_3"]


def test_grpo_checkpoint_refuses_a_screen_factor_or_prompt_count_below_one(tmp_path):
    from envfactory_assets.training.grpo import GRPOConfigSpec
    from envfactory_assets.training.stage import grpo_checkpoint

    sft_row = {"id": "ckpt_x", "path": str(tmp_path), "metrics": {}}
    for n_prompts, factor in ((6, 0), (6, -2), (0, 3)):
        with pytest.raises(ValueError, match="grpo_screen_factor"):
            grpo_checkpoint(sft_row, [], {}, tmp_path, GRPOConfigSpec(), n_prompts, "v", screen_factor=factor)


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"grpo_temperature": -1.0}, "temperature"),
        ({"grpo_beta": float("nan")}, "beta"),
        ({"grpo_learning_rate": float("inf")}, "learning_rate"),
        ({"grpo_n_prompts": 0}, "grpo_n_prompts"),
        ({"grpo_screen_factor": -1}, "grpo_screen_factor"),
        ({"max_train_rows": -1}, "max_train_rows"),
        ({"n_eval_prompts": -2}, "n_eval_prompts"),
        ({"max_steps": 0}, "max_steps"),
        ({"learning_rate": float("inf")}, "learning_rate"),
        ({"grpo_max_tools": -3}, "grpo_max_tools"),
        ({"train_mix": "longest"}, "train_mix"),
        ({"min_no_call_share": 1.5}, "min_no_call_share"),
    ],
)
def test_checkpoints_refuses_bad_settings_before_reading_the_store_or_training(tmp_path, settings, named):
    """A bad ``grpo_*`` value used to surface only after the whole SFT run (the GRPO spec was built after
    training), and ``max_train_rows: -1`` silently trained on all rows but one. The home here has no store:
    the failure must be about the setting, not about the missing store."""
    from envfactory_assets.defs.training.assets import checkpoints
    from envfactory_assets_tests.config_failures import step_failure

    success, message = step_failure(checkpoints, settings, tmp_path)
    assert not success and "checkpoint setting" in message and named in message
    assert "does not exist" not in message


def test_checkpoint_config_without_grpo_does_not_validate_a_grpo_spec():
    from envfactory_assets.defs.training.assets import CheckpointConfig

    sft, grpo = CheckpointConfig(grpo_max_steps=0).validate()
    assert sft.max_steps == CheckpointConfig().max_steps and grpo is None
    assert CheckpointConfig().validate()[1].num_generations == CheckpointConfig().grpo_num_generations


def _required_tool(name: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "required": ["item_id"],
                "properties": {"item_id": {"type": "string"}, "limit": {"type": "integer"}},
            },
        },
    }


def test_grpo_and_held_out_mixes_prefer_turns_whose_query_gives_the_arguments_that_matter():
    """The cheapest-first pick was every time an argument-free read ("Show me the keys." -> ``get_keys()``),
    where a call with ``{}`` is right: GRPO learned to call everything with empty arguments."""
    from envfactory_assets.training.stage import grpo_tasks, task_kind

    tools = [_required_tool("get_item"), _required_tool("delete_item"), _tool("list_items")]

    def rl(i, query, gold, turn=0):
        return {
            "id": f"rl_{i:02d}",
            "turn_index": turn,
            "env_ids": ["helpdesk"],
            "tools": tools,
            "split": "train",
            "prompt": [{"role": "user", "content": query}],
            "masked_arguments": ["limit"],
            "gold_calls": [{"name": n, "arguments": a} for n, a in gold],
        }

    free = [rl(i, "Show me the items.", [("list_items", {"limit": 5})]) for i in range(6)]
    grounded = [
        rl(10 + i, f"Delete item 'it_{i:03d}' please, it is old.", [("delete_item", {"item_id": f"it_{i:03d}"})])
        for i in range(4)
    ]
    chained = rl(20, "Delete the newest item.", [("delete_item", {"item_id": "it_999"})])
    nothing = rl(21, "What is the weather like today?", [])
    rows = free + grounded + [chained, nothing]
    assert [task_kind(r) for r in (free[0], grounded[0], chained, nothing)] == [
        "argument_free",
        "grounded",
        "needs_results",
        "no_call",
    ]
    tasks = grpo_tasks(rows, 8)
    assert [task_kind(t) for t in tasks] == [
        "grounded",
        "grounded",
        "grounded",
        "no_call",
        "grounded",
        "needs_results",
        "argument_free",
        "argument_free",
    ]
    prompts = held_out_prompts(rows, 4)
    assert [p["id"] for p in prompts] == ["rl_10", "rl_11", "rl_12", "rl_21"]
    assert prompts[0]["gold_calls"] == grounded[0]["gold_calls"] and prompts[0]["masked_arguments"] == ["limit"]
    # a gold answer too long for the completion budget comes after those that fit, even with fewer calls
    long = rl(30, "Delete item '" + "x" * 300 + "'.", [("delete_item", {"item_id": "x" * 300})])
    two = rl(
        31, "Get item 'a1' and delete item 'a2'.", [("get_item", {"item_id": "a1"}), ("delete_item", {"item_id": "a2"})]
    )
    assert [t["id"] for t in grpo_tasks([long, two], 2)] == ["rl_30", "rl_31"]
    assert [t["id"] for t in grpo_tasks([long, two], 2, max_completion_tokens=64)] == ["rl_31", "rl_30"]


def _example(i: int, kind: str, words: int) -> dict:
    """An SFT row whose one turn is a no-call reply, one call (with or without arguments) or two calls in one
    message (of two tools, or of one tool twice); ``words`` sets its length."""
    call = {"id": f"c{i}", "type": "function", "function": {"name": "t3", "arguments": json.dumps({"x": str(i)})}}
    empty = {"id": f"c{i}", "type": "function", "function": {"name": "t3", "arguments": "{}"}}
    user = {"role": "user", "content": f"request {i} " + "w " * words}
    if kind == "no_call":
        turn = [user, {"role": "assistant", "content": "No tool here does that."}]
    else:
        other = {**call, "id": f"d{i}", "function": {**call["function"], "name": "t2"}}
        calls = {
            "calls": [call],
            "empty": [empty],
            "parallel": [call, other],
            "same_tool_parallel": [call, {**call, "id": f"d{i}"}],
        }[kind]
        turn = [
            user,
            {"role": "assistant", "content": "", "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c["id"], "name": "t3", "content": "{}"} for c in calls),
            {"role": "assistant", "content": "done"},
        ]
    return {
        "id": f"sft_{kind}_{i:03d}",
        "env_ids": ["e"],
        "tools": ROW["tools"][:4],
        "messages": [{"role": "system", "content": "sys"}, *turn],
    }


def test_the_stratified_mix_keeps_the_data_s_shares_where_the_shortest_pick_is_mostly_no_call_turns():
    """On the default store the 256 shortest examples were 48% no-call turns (12% of the data) and
    argument-free creates; the stratified mix keeps the kinds' shares and prefers calls with arguments."""
    from envfactory_assets.training.stage import example_kind

    rows = (
        [_example(i, "no_call", 1) for i in range(20)]
        + [_example(i, "empty", 2) for i in range(20)]
        + [_example(i, "calls", 30) for i in range(50)]
        + [_example(i, "parallel", 40) for i in range(10)]
    )
    assert {example_kind(r) for r in rows} == {"no_call", "calls", "parallel"}
    assert example_kind(_example(0, "same_tool_parallel", 1)) == "same_tool_parallel"
    shortest = training_examples(rows, 40, max_tokens=4000)
    assert sum(example_kind(e) == "no_call" for e in shortest) == 20  # every no-call turn: they are shortest
    mixed = training_examples(rows, 40, max_tokens=4000, mix="stratified")
    kinds = [example_kind(e) for e in mixed]
    assert (kinds.count("no_call"), kinds.count("calls"), kinds.count("parallel")) == (8, 28, 4)  # 20/70/10%
    # within the calls, the ones with arguments come before the argument-free ones, however short those are
    assert not any(e["id"].startswith("sft_empty") for e in mixed)
    assert mixed == sorted(mixed, key=lambda e: (len(json.dumps(e["messages"])) + len(json.dumps(e["tools"])), e["id"]))
    raised = [example_kind(e) for e in training_examples(rows, 40, 4000, mix="stratified", min_no_call_share=0.5)]
    assert raised.count("no_call") == 20 and raised.count("calls") + raised.count("parallel") == 20
    # more rows asked than a kind has: the rest come from the other kinds, never a row twice
    every = training_examples(rows, 1000, 4000, mix="stratified", min_no_call_share=0.9)
    assert sorted(e["id"] for e in every) == sorted(r["id"] for r in rows)
    with pytest.raises(ValueError, match="training mix 'longest'"):
        training_examples(rows, 4, mix="longest")
    with pytest.raises(ValueError, match="min_no_call_share"):
        training_examples(rows, 4, mix="stratified", min_no_call_share=-0.1)


def test_an_abstention_ending_a_row_too_long_to_keep_is_trained_as_its_turn_alone():
    """A long row whose last turn has no call: the cut keeps its first turns (calls) and the stratified mix adds
    the system message with the abstention turn; the shortest mix does not."""
    from envfactory_assets.training.stage import example_kind, last_turn_alone, source_row_id

    calls, abstain = _example(1, "calls", 600), _example(2, "no_call", 1)
    row = {**calls, "id": "sft_long", "messages": calls["messages"] + abstain["messages"][1:]}
    assert example_kind(row) == "no_call"
    alone = last_turn_alone(row)
    assert alone["id"] == "sft_long#last_turn" and alone["tools"] == row["tools"]
    assert source_row_id(alone["id"]) == source_row_id("sft_long") == "sft_long"  # lineage names the row
    assert alone["messages"] == [row["messages"][0], *abstain["messages"][1:]]
    mixed = {e["id"]: e for e in training_examples([row], 10, max_tokens=500, mix="stratified")}
    assert {i: example_kind(e) for i, e in mixed.items()} == {"sft_long": "calls", "sft_long#last_turn": "no_call"}
    assert [e["id"] for e in training_examples([row], 10, max_tokens=500)] == ["sft_long"]
    # a row that fits keeps its abstention in context and gets no second copy
    assert [e["id"] for e in training_examples([row], 10, max_tokens=4000, mix="stratified")] == ["sft_long"]


def test_an_sft_checkpoint_of_the_same_content_id_is_reused_only_while_its_weights_are_intact(
    tmp_path, one_layer_model_dir, monkeypatch
):
    """A GRPO or evaluation setting changed after a long SFT run reruns ``checkpoints``; the SFT row of the
    same id (same data, base weights, settings and rows) and its weights on disk stand for a new SFT run."""
    import envfactory_assets.training.stage as stage
    from envfactory_assets.training.sft import SFTConfigSpec

    rows = [{**_example(i, "calls", 3), "split": "train"} for i in range(4)]
    spec = SFTConfigSpec(max_steps=1, device="cpu")

    def train(stored=None):
        return stage.train_checkpoint(
            rows,
            [],
            str(one_layer_model_dir),
            tmp_path / "models",
            tmp_path / "ckpt",
            spec,
            4,
            0,
            "v1",
            log=lambda _: None,
            stored=stored,
        )

    first = train()
    assert "reused" not in first["metrics"] and first["metrics"]["weights_hash"]
    trained_again = []
    real_train_sft = stage.train_sft
    monkeypatch.setattr(stage, "train_sft", lambda *a, **k: trained_again.append(1) or real_train_sft(*a, **k))
    again = train(stored={first["id"]: first}.get)
    assert again["metrics"]["reused"] and again["id"] == first["id"] and not trained_again
    assert {k: v for k, v in again.items() if k != "metrics"} == {k: v for k, v in first.items() if k != "metrics"}
    # nothing stored under the id: trained
    assert train(stored=lambda _: None)["id"] == first["id"] and trained_again == [1]
    # weights changed on disk since the row was written: not reused
    weights = next(Path(first["path"]).glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    train(stored={first["id"]: first}.get)
    assert trained_again == [1, 1]
