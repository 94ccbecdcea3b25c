"""The collapse measures of a checkpoint (calls with empty arguments where they matter, calls where none is
wanted) on hand-built generations, and the blocking ``checkpoints`` check on stored rows."""

from __future__ import annotations

import json

import pytest

from envfactory_assets.training.evaluate import (
    argument_shares,
    collapse_problems,
    collapse_report,
    too_few_to_compare,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate_roi",
            "parameters": {
                "type": "object",
                "required": ["gain", "cost"],
                "properties": {"gain": {"type": "number"}, "cost": {"type": "number"}, "limit": {"type": "integer"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_reports",
            "parameters": {"type": "object", "properties": {"limit": {"type": "integer"}}},
        },
    },
]
ROI = {
    "tools": TOOLS,
    "gold_calls": [{"name": "calculate_roi", "arguments": {"gain": 120, "cost": 100}}],
    "masked_arguments": ["limit"],
}
LIST = {
    "tools": TOOLS,
    "gold_calls": [{"name": "list_reports", "arguments": {"limit": 5}}],
    "masked_arguments": ["limit"],
}
NONE = {"tools": TOOLS, "gold_calls": [], "masked_arguments": []}


def call(name: str, arguments: dict) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_shares_count_empty_calls_only_where_the_arguments_matter_and_calls_where_none_is_wanted():
    prompts = [ROI, ROI, ROI, LIST, NONE, NONE]
    texts = [
        call("calculate_roi", {}),  # the collapse seen on BFCL
        call("calculate_roi", {"gain": 120, "cost": 100}) + call("list_reports", {}),
        call("calculate_roi", {"limit": 3}),  # only a masked argument: empty
        call("list_reports", {}),  # right: no argument of list_reports matters
        "I cannot help with that.",
        "<tool_call>{oops</tool_call>",
    ]
    shares = argument_shares(prompts, texts)
    # calculate_roi x3 count; list_reports on an ROI turn does not (it needs no argument)
    assert (shares["argument_calls"], shares["empty_argument_calls"]) == (3, 2)
    assert shares["empty_argument_share"] == pytest.approx(2 / 3)
    assert (shares["no_call_turns"], shares["unwanted_call_turns"], shares["unwanted_call_share"]) == (2, 1, 0.5)
    nothing = argument_shares([ROI, LIST], ["no call", call("list_reports", {})])
    assert nothing["empty_argument_share"] is None and nothing["unwanted_call_share"] is None
    assert argument_shares([{"tools": TOOLS}], ["x"])["argument_calls"] == 0  # a prompt without gold: skipped
    with pytest.raises(ValueError, match="2 prompts but 1"):
        argument_shares([ROI, ROI], ["x"])


COUNTS = {"argument_calls": 8, "no_call_turns": 8}


def test_a_rise_of_more_than_ten_points_in_either_share_is_a_collapse():
    sft = {"empty_argument_share": 0.1, "unwanted_call_share": 0.25}
    assert collapse_problems(sft, {"empty_argument_share": 0.2, "unwanted_call_share": 0.3, **COUNTS}) == []
    (problem,) = collapse_problems(sft, {"empty_argument_share": 1.0, "unwanted_call_share": 0.25, **COUNTS})
    assert "empty or default arguments" in problem and "90 points" in problem
    (problem,) = collapse_problems(sft, {"empty_argument_share": 0.0, "unwanted_call_share": 0.5, **COUNTS})
    assert "none is wanted" in problem
    # an SFT model that made no argument call counts as 0: a GRPO model calling with {} is a full rise
    assert (
        len(
            collapse_problems(
                {"empty_argument_share": None, "unwanted_call_share": None},
                {"empty_argument_share": 0.5, "unwanted_call_share": None, **COUNTS},
            )
        )
        == 1
    )


def test_a_share_measured_on_too_few_turns_is_reported_not_compared():
    """The default run's held-out prompts held 2 no-call turns: one answer that changed from no call to a call
    was a 50-point rise, and the blocking check stopped the run before its evaluation."""
    sft = {"empty_argument_share": 1.0, "unwanted_call_share": 0.0, "argument_calls": 2, "no_call_turns": 2}
    grpo = {"empty_argument_share": None, "unwanted_call_share": 1.0, "argument_calls": 0, "no_call_turns": 2}
    assert collapse_problems(sft, grpo) == []
    assert too_few_to_compare(grpo) == [
        "calls with empty or default arguments where the gold call has arguments that matter: 0 measured "
        "(fewer than 5)",
        "turns with a call where none is wanted: 2 measured (fewer than 5)",
    ]
    report = collapse_report(_rows(sft, grpo))
    assert report["passed"] and report["problems"] == []
    assert report["not_measured"] == [f"ckpt_grpo: {note}" for note in too_few_to_compare(grpo)]
    # the same rise on enough turns is a collapse
    assert len(collapse_problems(sft, {**grpo, "no_call_turns": 5})) == 1
    with pytest.raises(ValueError, match="re-materialize"):
        collapse_problems(sft, {"share": 0.5})


def _rows(sft_shares: dict, grpo_shares: dict, prompt_ids=("rl_1",)) -> list[dict]:
    base = {
        "sft_dataset_version": "v_1",
        "sft_dataset_ids": ["sft_1"],
        "base_model": "smollm2-135m-instruct",
        "base_model_hash": "h",
        "config": {},
        "path": "/nowhere",
        "rl_dataset_ids": None,
        "rl_dataset_version": None,
    }
    sft = {
        **base,
        "id": "ckpt_sft",
        "stage": "sft",
        "parent_checkpoint_id": None,
        "metrics": {"held_out_prompt_ids": list(prompt_ids), "valid_tool_calls_after": {"share": 1.0, **sft_shares}},
    }
    grpo = {
        **base,
        "id": "ckpt_grpo",
        "stage": "grpo",
        "parent_checkpoint_id": "ckpt_sft",
        "rl_dataset_ids": ["rl_9"],
        "rl_dataset_version": "v_2",
        "metrics": {"held_out_prompt_ids": list(prompt_ids), "valid_tool_calls_after": {"share": 1.0, **grpo_shares}},
    }
    return [sft, grpo]


FILLED = {"empty_argument_share": 0.0, "unwanted_call_share": 0.0, "argument_calls": 6, "no_call_turns": 5}
COLLAPSED = {"empty_argument_share": 1.0, "unwanted_call_share": 1.0, "argument_calls": 6, "no_call_turns": 5}


def test_collapse_report_pairs_each_grpo_row_with_its_parent():
    assert collapse_report(_rows(FILLED, FILLED))["passed"]
    failed = collapse_report(_rows(FILLED, COLLAPSED))
    assert not failed["passed"] and len(failed["problems"]) == 2
    assert failed["shares"]["ckpt_grpo"]["grpo"]["empty_argument_share"] == 1.0
    unmeasured = collapse_report(_rows({}, {}, prompt_ids=()))
    assert unmeasured["passed"] and unmeasured["not_measured"] == ["ckpt_grpo"]
    orphan = collapse_report(_rows(FILLED, FILLED)[1:])
    assert not orphan["passed"] and "parent" in orphan["problems"][0]
    assert collapse_report(_rows(FILLED, FILLED)[:1])["passed"]  # no GRPO row (grpo_max_steps: 0)


@pytest.mark.parametrize("grpo_shares, passed", [(FILLED, True), (COLLAPSED, False)])
def test_the_blocking_check_reads_the_stored_checkpoint_rows(tmp_path, grpo_shares, passed):
    from envfactory_assets.defs.resources import EnvFactoryHome
    from envfactory_assets.defs.training.assets import grpo_did_not_collapse
    from envfactory_assets.store.db import Store

    Store(tmp_path / "envfactory.duckdb").replace_current("checkpoints", _rows(FILLED, grpo_shares))
    result = grpo_did_not_collapse(envfactory=EnvFactoryHome(home=str(tmp_path)))
    assert result.passed is passed
    assert bool(result.metadata["problems"].value) is not passed


class _CharTokenizer:
    """One token per character: the profile's arithmetic does not depend on the tokenizer."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(text)}


def test_sft_token_profile_splits_tool_block_loss_turn_and_padding():
    from envfactory_assets.tooluse.chat_template import render_chat
    from envfactory_assets.training.profiling import sft_token_profile

    def example(words: int) -> dict:
        return {
            "tools": TOOLS,
            "messages": [{"role": "user", "content": "w" * words}, {"role": "assistant", "content": "ok"}],
        }

    examples = [example(10), example(10), example(500), example(500)]
    profile = sft_token_profile(examples, _CharTokenizer(), batch_size=2)
    lengths = [len(render_chat(e["messages"], e["tools"])) for e in examples]
    assert profile["tokens_max"] == max(lengths) and profile["examples"] == 4
    assert profile["tool_block_share"] == pytest.approx(4 * len(render_chat([], TOOLS)) / sum(lengths), abs=1e-3)
    assert profile["padding_share_sorted"] == 0.0  # equal lengths pair up
    assert profile["padding_share_random"] > 0.1  # a short and a long conversation often share a batch
    assert profile["last_turn_share"] < 0.05  # only "ok<|im_end|>" and its header carry loss
    with pytest.raises(ValueError):
        sft_token_profile([], _CharTokenizer())
