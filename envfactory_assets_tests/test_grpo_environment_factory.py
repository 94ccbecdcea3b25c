"""GRPO through TRL's ``environment_factory``: routing by tool set, the row's own schemas in the prompt, the
settling of what TRL's tool loop leaves out of an episode, and two real GRPO steps each way on a one-layer
model taught to call the task's tool."""

from __future__ import annotations

import copy
import json
import math

import pytest

from envfactory_assets.tooluse.chat_template import TOOL_CHAT_TEMPLATE, render_chat
from envfactory_assets.tooluse.task_environment import environment_class, execute_tool_text, public_methods
from envfactory_assets.tooluse.task_episode import TaskRunner
from envfactory_assets.training.environment_factory import (
    TOOL_SCHEMAS_KEY,
    TRAINING_CHAT_TEMPLATE,
    environment_factories,
    routed_prompt,
    settle_rollout,
    tool_set_name,
    trl_environment_class,
)
from envfactory_assets.training.grpo import (
    TASK_ID_KEY,
    GRPOConfigSpec,
    build_routed_dataset,
    grpo_prompt,
    hybrid_reward_func,
)
from envfactory_assets.training.training_reward import training_reward
from envfactory_assets_tests.taught_policy import delete_book_task, taught_to_call


@pytest.fixture(scope="module")
def runner(bookshop):
    with TaskRunner({bookshop["env_id"]: bookshop}) as r:
        yield r


@pytest.fixture(scope="module")
def task(bookshop, runner) -> dict:
    """An RL row: delete the first book; its gold final state comes from executing the gold call."""
    return delete_book_task(bookshop, runner)


def _call(name: str, arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _fresh(task, runner, created):
    [factory] = environment_factories([task], runner, TASK_ID_KEY, created).values()
    env = factory()
    env.reset(prompt=grpo_prompt(task), environment=tool_set_name(task["tools"]))
    return env


def test_one_factory_per_tool_set_routes_each_row_and_its_reset_finds_the_row(task, runner):
    smaller = {**task, "id": "rl_fewer_tools", "tools": task["tools"][:2]}
    created: list = []
    factories = environment_factories([task, {**task, "id": "rl_same_tools"}, smaller], runner, TASK_ID_KEY, created)
    assert set(factories) == {tool_set_name(task["tools"]), tool_set_name(smaller["tools"])}
    dataset = build_routed_dataset([task, smaller])
    assert [r["environment"] for r in dataset] == [tool_set_name(task["tools"]), tool_set_name(smaller["tools"])]
    env = factories[dataset[1]["environment"]]()
    assert sorted(public_methods(env)) == sorted([t["function"]["name"] for t in smaller["tools"]] + ["reset"])
    env.reset(**dataset[1])  # TRL passes the dataset row less its `environment` column; extra columns are ignored
    assert env._row["id"] == "rl_fewer_tools" and env._row["final_state"] == task["final_state"]
    with pytest.raises(KeyError, match=TASK_ID_KEY):
        env.reset(prompt=[{"role": "user", "content": "no id"}])
    with pytest.raises(ValueError, match="not the tools"):
        env.reset(prompt=grpo_prompt(task))  # a row of another tool set never lands in this class
    for made in created:
        made._close()


def test_the_routed_prompt_renders_to_the_rollout_func_prompt_tokens(task, runner, one_layer_model_dir):
    """TRL renders with ``apply_chat_template(tools=<the environment's bound methods>)``; with the training
    template the row's own schemas take their place, so both rollouts see the same prompt tokens."""
    from transformers import AutoTokenizer

    from envfactory_assets.training.base_model import prepare_tokenizer

    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(one_layer_model_dir))
    created: list = []
    env = _fresh(task, runner, created)
    methods = [getattr(env, n) for n in public_methods(env) if n != "reset"]
    routed = routed_prompt(task, grpo_prompt(task))["prompt"]
    assert routed[0][TOOL_SCHEMAS_KEY] == task["tools"]
    expected = tokenizer(
        render_chat(grpo_prompt(task), task["tools"], add_generation_prompt=True), add_special_tokens=False
    )
    as_trl = tokenizer.apply_chat_template(
        [routed], tools=methods, chat_template=TRAINING_CHAT_TEMPLATE, add_generation_prompt=True, tokenize=True
    )
    assert as_trl["input_ids"][0] == expected["input_ids"]
    from_signatures = tokenizer.apply_chat_template(
        [grpo_prompt(task)], tools=methods, chat_template=TOOL_CHAT_TEMPLATE, add_generation_prompt=True, tokenize=True
    )
    assert from_signatures["input_ids"][0] != expected["input_ids"]  # what TRL alone would have shown the model
    env._close()


def test_settling_records_what_trls_loop_left_out_and_scores_like_the_rollout_func(task, runner):
    created: list = []
    gold = {"book_id": task["book_id"]}
    # TRL executed round one (a read), answered it, and stopped before executing round two's delete
    stopped = _fresh(task, runner, created)
    stopped.books_list(limit=2)
    completion = [
        {"role": "assistant", "content": "Looking.", "tool_calls": [_call("books_list", {"limit": 2})]},
        {"role": "tool", "name": "books_list", "content": "[...]"},
        {"role": "assistant", "content": "Deleting.", "tool_calls": [_call("delete_book", gold)]},
    ]
    assert settle_rollout(stopped, completion) == (2, 0)
    assert [c["name"] for c in stopped._episode.calls] == ["books_list", "delete_book"]
    assert stopped._episode.replies == ["Looking.", "Deleting."]
    assert training_reward(stopped).state == 1.0
    # one bad block made TRL keep the whole turn as text: scored as the rollout_func path scores that text
    delete = json.dumps({"name": "delete_book", "arguments": gold})
    text = f"<tool_call>{{not json</tool_call><tool_call>{delete}</tool_call>"
    unparsed = _fresh(task, runner, created)
    assert settle_rollout(unparsed, [{"role": "assistant", "content": text}]) == (1, 1)
    reference = environment_class(task["tools"])(runner)
    reference.reset(**task)
    execute_tool_text(reference, text)
    assert training_reward(unparsed) == training_reward(reference)
    # names TRL answered itself and arguments that are no object reach the episode as malformed calls
    refused = _fresh(task, runner, created)
    completion = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("__import__", {"name": "os"}), _call("delete_book", "x")],
        },
        {"role": "tool", "name": "__import__", "content": "{'error': 'Tool __import__ not found.'}"},
        {"role": "tool", "name": "delete_book", "content": "{'error': 'argument after ** must be a mapping'}"},
        {"role": "assistant", "content": "Done."},
    ]
    assert settle_rollout(refused, completion) == (0, 2)
    assert training_reward(refused).reward == 0.0
    # a wrong argument name reaches the environment (its validation error answers it) instead of a TypeError
    wrong = _fresh(task, runner, created)
    answer = json.loads(wrong.delete_book(book=task["book_id"]))
    assert "error" in answer and wrong._episode.calls == [
        {"name": "delete_book", "arguments": {"book": task["book_id"]}}
    ]
    # a last round TRL ran but rolled back (its results did not fit) is not executed twice
    rolled_back = _fresh(task, runner, created)
    rolled_back.delete_book(**gold)
    assert settle_rollout(
        rolled_back, [{"role": "assistant", "content": "", "tool_calls": [_call("delete_book", gold)]}]
    ) == (1, 0)
    rewards = hybrid_reward_func([], [], task_environments=[stopped, unparsed, refused])
    assert rewards == [training_reward(e).reward for e in (stopped, unparsed, refused)]
    for env in [*created, reference]:
        env._close()


def test_the_trl_class_keeps_the_tool_signatures_and_takes_any_arguments(task):
    cls = trl_environment_class(task["tools"])
    base = environment_class(task["tools"])
    assert trl_environment_class(copy.deepcopy(task["tools"])) is cls
    import inspect

    for name in base._tool_names:
        assert inspect.signature(getattr(cls, name)) == inspect.signature(getattr(base, name))
        assert getattr(cls, name).__doc__ == getattr(base, name).__doc__


def test_replaying_screened_groups_needs_the_rollout_func():
    from envfactory_assets.config_checks import SettingError

    assert GRPOConfigSpec().rollout == "rollout_func"
    with pytest.raises(SettingError, match="rollout"):
        GRPOConfigSpec(rollout="environments")
    with pytest.raises(SettingError, match="replay_screened"):
        GRPOConfigSpec(rollout="environment_factory", replay_screened=True)


def test_two_grpo_steps_each_way_on_a_one_layer_model(task, bookshop, one_layer_model_dir, tmp_path):
    start = taught_to_call(one_layer_model_dir, task, tmp_path / "start")
    from envfactory_assets.training.grpo import train_grpo

    results = {}
    for rollout in ("rollout_func", "environment_factory"):
        spec = GRPOConfigSpec(
            max_steps=2,
            num_generations=2,
            max_completion_length=48,
            max_tool_calling_iterations=1,
            save_steps=0,
            device="cpu",
            rollout=rollout,
        )
        results[rollout] = train_grpo([task], {bookshop["env_id"]: bookshop}, start, tmp_path / rollout, spec)
    for rollout, metrics in results.items():
        assert metrics["steps"] == 2, rollout
        assert len(metrics["loss_per_step"]) == 2 and all(math.isfinite(x) for x in metrics["loss_per_step"]), rollout
        assert (tmp_path / rollout / "model.safetensors").is_file()
    factory = results["environment_factory"]
    # the taught call ran in the sandbox (the book's deletion is the only way to state credit) and was scored
    # by the project's reward, the run's only reward function
    assert factory["tool_calls"] >= 4 and max(factory["reward_mean_per_step"]) > 0.5
    assert all(f > 0 for f in factory["trl_tool_call_frequency"])  # TRL's own loop ran calls, not only the settling
    assert results["rollout_func"]["trl_tool_call_frequency"] == [] and results["rollout_func"]["tool_calls"] >= 4
    saved = tmp_path / "environment_factory"
    assert (saved / "chat_template.jinja").read_text() == TOOL_CHAT_TEMPLATE  # the training template stays behind
    assert "response_template" not in json.loads((saved / "tokenizer_config.json").read_text())


def test_a_tool_trl_cannot_render_is_refused_before_training_naming_its_row():
    """TRL renders every prompt's tools with transformers' ``get_json_schema``, which reads the method's
    docstring: a description with its own ``Args:`` section hides the real parameters from it."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "description": "Does f.\n\nArgs:\n    other: not a parameter",
                "parameters": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            },
        }
    ]
    with pytest.raises(ValueError, match=r"rl row r1: tool 'f' cannot be rendered by TRL"):
        environment_factories([{"id": "r1", "tools": tools}], None, TASK_ID_KEY, [])
