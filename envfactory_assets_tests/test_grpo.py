"""GRPO: the per-rollout environment object, tool execution from model text, the reward function, and a tiny
real GRPO run on SmolLM2 (the last one is marked slow)."""

from __future__ import annotations

import copy
import inspect
import json
import math

import pytest

from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.tooluse.task_environment import (
    OMITTED,
    environment_class,
    public_methods,
    rollout_reward,
    tool_signature,
)
from envfactory_assets.tooluse.task_episode import TaskRunner
from envfactory_assets.training.grpo import (
    TASK_ID_KEY,
    GRPOConfigSpec,
    build_grpo_dataset,
    execute_tool_text,
    hybrid_reward_func,
)
from envfactory_assets.training.training_reward import training_reward
from envfactory_assets_tests.taught_policy import delete_book_task


@pytest.fixture(scope="module")
def runner(bookshop):
    with TaskRunner({bookshop["env_id"]: bookshop}) as r:
        yield r


@pytest.fixture(scope="module")
def task(bookshop, runner) -> dict:
    """An RL row: delete the first book; its gold final state comes from executing the gold call."""
    return delete_book_task(bookshop, runner, "rl_grpo_test")


def _call_text(name: str, arguments: dict) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_environment_object_exposes_exactly_the_task_tools_with_schema_signatures(task, runner):
    cls = environment_class(task["tools"])
    env = cls(runner)
    tool_names = sorted(t["function"]["name"] for t in task["tools"])
    assert sorted(public_methods(env)) == sorted(tool_names + ["reset"])
    assert environment_class(copy.deepcopy(task["tools"])) is cls  # one class per tool set
    for tool in task["tools"]:
        fn = tool["function"]
        method = getattr(cls, fn["name"])
        sig = inspect.signature(method)
        params = list(sig.parameters.values())[1:]
        props, required = fn["parameters"].get("properties", {}), set(fn["parameters"].get("required", []))
        assert {p.name for p in params} == set(props)
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
        assert {p.name for p in params if p.default is inspect.Parameter.empty} == required
        assert all(p.default is OMITTED for p in params if p.name not in required)
        assert method.__doc__.startswith((fn.get("description") or fn["name"]).strip())
    delete = inspect.signature(cls.delete_book).parameters["book_id"]
    assert delete.annotation is str and delete.default is inspect.Parameter.empty
    with pytest.raises(ValueError, match="reserved"):
        environment_class([{"type": "function", "function": {"name": "reset", "parameters": {}}}])
    with pytest.raises(ValueError, match="identifier"):
        tool_signature({"function": {"name": "f", "parameters": {"properties": {"not-a-name": {}}}}})


def test_reset_gives_each_row_a_fresh_state_and_objects_do_not_share_state(task, runner):
    cls = environment_class(task["tools"])
    first, second = cls(runner), cls(runner)
    first.reset(**task)
    second.reset(**task)
    assert json.loads(first.delete_book(book_id=task["book_id"])) is not None
    assert rollout_reward(first).state == 1.0
    assert rollout_reward(second).state == 0.0  # the other rollout's state is untouched
    first.reset(**task)  # reused for the next batch: state rebuilt from the row
    assert rollout_reward(first).state == 0.0 and rollout_reward(first).n_extra == 0
    with pytest.raises(TypeError):
        first.delete_book(book=task["book_id"])  # a wrong argument name fails like a plain method
    with pytest.raises(ValueError, match="not the tools"):
        first.reset(**{**task, "tools": task["tools"][:1]})
    first._close()
    second._close()


def test_rollout_text_executes_in_its_own_episode_and_the_reward_function_returns_its_reward(task, runner):
    cls = environment_class(task["tools"])
    good, noisy, hostile = cls(runner), cls(runner), cls(runner)
    for env in (good, noisy, hostile):
        env.reset(**task)
    results, bad = execute_tool_text(good, _call_text("delete_book", {"book_id": task["book_id"]}) + "Done.")
    assert bad == 0 and [n for n, _ in results] == ["delete_book"]
    noisy_text = (
        _call_text("books_list", {"limit": 2})
        + "<tool_call>{not json</tool_call>"
        + _call_text("delete_book", {"book_id": task["book_id"]})
    )
    results, bad = execute_tool_text(noisy, noisy_text)
    assert bad == 1 and len(results) == 2
    hostile_text = (
        _call_text("__import__", {"name": "os"})
        + _call_text("os.system", {"command": "touch /tmp/x"})
        + _call_text("_reward", {})
        + _call_text("reset", {})
    )
    results, bad = execute_tool_text(hostile, hostile_text)
    assert bad == 0 and all("unknown_tool" in text for _, text in results)
    rewards = hybrid_reward_func(
        prompts=[task["prompt"]] * 3, completions=[[]] * 3, task_environments=[good, noisy, hostile]
    )
    assert rewards == [training_reward(e).reward for e in (good, noisy, hostile)]
    assert rewards[0] == 1.0
    assert rewards[1] == pytest.approx(1.0 - 0.05 - 0.05)  # one extra call, one malformed block
    hostile_breakdown = rollout_reward(hostile)
    assert (hostile_breakdown.n_malformed, hostile_breakdown.state, rewards[2]) == (4, 0.0, 0.0)
    assert state_hash(hostile._episode.final_states()) == state_hash(task["initial_state"])
    for env in (good, noisy, hostile):
        env._close()


def test_grpo_dataset_carries_the_task_id_outside_the_rendered_prompt(task):
    from envfactory_assets.tooluse.chat_template import render_chat

    dataset = build_grpo_dataset([task])
    prompt = dataset[0]["prompt"]
    assert prompt[0][TASK_ID_KEY] == task["id"] and prompt[-1]["role"] == "user"
    assert task["id"] not in render_chat(prompt, task["tools"], add_generation_prompt=True)
    with pytest.raises(ValueError, match="unique"):
        build_grpo_dataset([task, task])
    with pytest.raises(ValueError, match="num_generations"):
        GRPOConfigSpec(num_generations=1)


@pytest.mark.slow
def test_tiny_grpo_run_on_smollm2(task, bookshop, base_model_dir, tmp_path):
    from envfactory_assets.training.grpo import train_grpo

    base = base_model_dir
    spec = GRPOConfigSpec(
        max_steps=1,
        num_generations=2,
        prompts_per_step=1,
        max_completion_length=24,
        max_tool_calling_iterations=1,
        replay_screened=True,
    )
    candidates = [task, {**task, "id": "rl_grpo_test_2", "prompt": [{"role": "user", "content": "Remove that book."}]}]
    steps: list[tuple[int, int]] = []
    metrics = train_grpo(
        candidates,
        {bookshop["env_id"]: bookshop},
        base,
        tmp_path / "grpo",
        spec,
        n_prompts=1,
        progress=lambda done, total: steps.append((done, total)),
    )
    assert metrics["steps"] == 1 and len(metrics["reward_mean_per_step"]) == 1
    assert steps == [(1, 1)]  # after the step, not after screening
    assert len(metrics["loss_per_step"]) == 1 and math.isfinite(metrics["loss_per_step"][0])  # drawn in the UI
    assert 0.0 <= metrics["reward_mean_first"] <= 1.0
    screening = metrics["screening"]  # both candidates got a group of 2 rollouts from the starting model
    assert screening["candidates"] == 2 and all(len(g["rewards"]) == 2 for g in screening["groups"].values())
    chosen = [row_id for row_id, g in screening["groups"].items() if g["chosen"]]
    assert metrics["prompt_ids"] == chosen and len(chosen) == 1
    if screening["with_signal"]:  # the screened group with a spread is what the one step trained on
        assert len(set(screening["groups"][chosen[0]]["rewards"])) > 1
        assert metrics["replayed_groups"] == 1 and metrics["steps_with_signal"] == 1
    else:
        assert metrics["replayed_groups"] == 0
    saved = json.loads((tmp_path / "grpo" / "grpo_config.json").read_text())
    assert saved["row_ids"] == chosen and saved["spec"]["num_generations"] == 2
    assert (tmp_path / "grpo" / "model.safetensors").is_file()


class _ScriptedRollout:
    """Rollouts whose text comes from a script per row id (rollout k of a row gets ``script[id][k % len]``),
    executed in real per-rollout environment objects and scored by the real reward."""

    def __init__(self, runner, script: dict[str, list[str]]) -> None:
        self.runner, self.script, self.seen = runner, script, {}

    def rollouts(self, model, rows):
        environments = []
        for row in rows:
            env = environment_class(row["tools"])(self.runner)
            env.reset(**row)
            k = self.seen.get(row["id"], 0)
            self.seen[row["id"]] = k + 1
            execute_tool_text(env, self.script[row["id"]][k % len(self.script[row["id"]])])
            environments.append(env)
        return {"task_environments": environments}


def test_screening_keeps_prompts_whose_rollouts_earn_different_rewards_first(task, runner):
    from envfactory_assets.training.screening import (
        choose_prompts,
        screen_prompts,
        screening_report,
    )

    right = _call_text("delete_book", {"book_id": task["book_id"]})
    wrong = _call_text("delete_book", {"book_id": "no-such-book"})
    rows = [{**task, "id": name} for name in ("always_right", "mixed", "always_wrong", "mixed_too")]
    script = {
        "always_right": [right],
        "mixed": [right, wrong, "<tool_call>{not json</tool_call>"],
        "always_wrong": [wrong],
        "mixed_too": [wrong, right],
    }
    screened = screen_prompts(_ScriptedRollout(runner, script), None, rows, num_generations=3)
    groups = {s.row_id: s.rewards for s in screened}
    assert [s.row_id for s in screened] == [r["id"] for r in rows]  # groups stay with their prompt across batches
    assert groups["always_right"] == (1.0, 1.0, 1.0)
    assert len(set(groups["always_wrong"])) == 1 and groups["always_wrong"][0] < 1.0
    assert groups["mixed"] == (1.0, groups["always_wrong"][0], 0.0)  # right, wrong, malformed
    assert [r["id"] for r in choose_prompts(rows, screened, 2)] == ["mixed", "mixed_too"]
    assert [r["id"] for r in choose_prompts(rows, screened, 3)] == ["mixed", "mixed_too", "always_right"]
    report = screening_report(screened, choose_prompts(rows, screened, 3), 1.5)
    assert report["candidates"] == 4 and report["with_signal"] == 2 and report["chosen_with_signal"] == 2
    assert report["groups"]["always_wrong"]["chosen"] is False
    with pytest.raises(ValueError, match="not screened"):
        choose_prompts(rows + [{"id": "unseen"}], screened, 2)
    with pytest.raises(ValueError, match="n must be >= 1"):
        choose_prompts(rows, screened, 0)
    with pytest.raises(ValueError, match="num_generations"):
        screen_prompts(_ScriptedRollout(runner, script), None, rows, num_generations=1)


def test_a_screened_group_is_replayed_once_at_its_prompts_first_step(task, runner, base_model_dir):
    from transformers import AutoTokenizer

    from envfactory_assets.training.base_model import prepare_tokenizer
    from envfactory_assets.training.grpo import ToolRollout, grpo_prompt
    from envfactory_assets.training.screening import screen_prompts

    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    prepare_tokenizer(tokenizer)
    right = _call_text("delete_book", {"book_id": task["book_id"]})
    wrong = _call_text("delete_book", {"book_id": "no-such-book"})
    texts = iter([right, wrong])

    class Scripted(ToolRollout):  # the policy's text is scripted; environments, parsing and rewards are real
        def _sample(self, model, sequences, budgets):
            return [tokenizer(next(texts) + "<|im_end|>", add_special_tokens=False)["input_ids"] for _ in sequences]

    rollout = Scripted({task["id"]: task}, runner, tokenizer, GRPOConfigSpec(max_tool_calling_iterations=0))
    [group] = screen_prompts(rollout, None, [task], num_generations=2)
    assert group.rewards == (1.0, 0.0) and len(group.completion_ids) == 2
    rollout.replay = {task["id"]: group}
    out = rollout([grpo_prompt(task)] * 2, trainer=None)  # no trainer needed: nothing is sampled
    assert out["completion_ids"] == list(group.completion_ids) and out["env_mask"] == list(group.env_mask)
    assert hybrid_reward_func(prompts=[], completions=[], task_environments=out["task_environments"]) == [1.0, 0.0]
    assert rollout.replayed_groups == 1 and rollout.replay == {}
    rollout.close()


def test_screening_tool_calls_are_reported_apart_from_training_ones(task, runner, base_model_dir, monkeypatch):
    """With screening on, the GRPO metrics' ``tool_calls`` / ``malformed_calls`` silently included every
    screening rollout (18 candidates x 4 by default against 6 x 4 training rollouts); and screening (minutes
    on a CPU) never re-chose the thread count."""
    from transformers import AutoTokenizer

    from envfactory_assets.training.base_model import prepare_tokenizer
    from envfactory_assets.training.grpo import ToolRollout
    from envfactory_assets.training.screening import timed_screen

    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    prepare_tokenizer(tokenizer)
    texts = iter([_call_text("delete_book", {"book_id": task["book_id"]}), "<tool_call>{not json</tool_call>"] * 2)

    class Scripted(ToolRollout):  # scripted policy text; environments, parsing and rewards are real
        def _sample(self, model, sequences, budgets):
            return [tokenizer(next(texts) + "<|im_end|>", add_special_tokens=False)["input_ids"] for _ in sequences]

    other = {**task, "id": "rl_grpo_test_2"}
    rollout = Scripted(
        {task["id"]: task, other["id"]: other}, runner, tokenizer, GRPOConfigSpec(max_tool_calling_iterations=0)
    )
    batches = []
    monkeypatch.setattr("envfactory_assets.training.screening.ROLLOUTS_PER_BATCH", 2)  # one group per batch
    chosen, report, replay = timed_screen(
        rollout, None, [task, other], num_generations=2, n=1, before_batch=lambda: batches.append(len(batches))
    )
    assert batches == [0, 1]  # training's thread governor is consulted before each screening batch
    assert len(chosen) == 1 and set(replay) == {chosen[0]["id"]}
    assert report["tool_calls"] == 2 and report["malformed_calls"] == 2
    assert rollout.tool_calls == 0 and rollout.malformed == 0  # left for training's own rollouts
    rollout.close()
