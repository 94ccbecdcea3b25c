"""GRPO on RL tasks with TRL 1.16's ``GRPOTrainer``, its rollouts executing tool calls in the sandbox.

Two rollouts, chosen by :attr:`GRPOConfigSpec.rollout`:

- ``"rollout_func"`` (the default): this module's :class:`ToolRollout`, described below.
- ``"environment_factory"``: TRL's own tool loop over one environment object per rollout
  (:mod:`~envfactory_assets.training.environment_factory`, whose docstring says how it closes the three gaps
  between TRL's contract and our rows: tools fixed per factory, schema detail lost in rendering from Python
  signatures, and calls that escape the format penalty or never reach the environment).

Both give each rollout its own episode and score it with the same guarded reward; ``docs/training.md`` says
why ``rollout_func`` stays the default and gives the measured step time of each.

The ``rollout_func`` (:class:`ToolRollout`) renders the prompt with our template and the row's own tools,
samples with the policy, parses with :func:`~envfactory_assets.tooluse.tool_calls.parse_tool_calls`
(malformed blocks count against the format penalty), executes calls through a :class:`TaskEnvironment` per
rollout (one object per rollout slot, reused across batches, ``reset(**row)`` per rollout; its public methods
are exactly the task's tools, the same contract ``environment_factory`` uses), appends the tool results as
tokens without loss (``env_mask`` 0), and lets the model continue, up to ``max_tool_calling_iterations``
rounds (the last round's calls are executed too). The reward function returns each rollout's guarded hybrid
reward (the paper's shape, with the empty-argument loophole closed: ``tooluse/reward.py``,
:func:`~envfactory_assets.training.training_reward.training_reward`). The model sees only the prompt, the
tool list and tool results: never the reward or a verification tool.

Settings from the paper (``docs/design.md``, "Paper settings and measured facts"): 8 rollouts per prompt,
temperature 0.7, KL coefficient 0.001, starting from the SFT checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfactory_assets.config_checks import (
    SettingError,
    finite_number,
    number_types,
    one_of,
    setting,
    whole_number,
)
from envfactory_assets.tooluse.chat_template import (
    END_OF_TURN,
    install_chat_template,
    normalize_messages,
    render_chat,
)
from envfactory_assets.tooluse.reward import empty_argument_calls
from envfactory_assets.tooluse.task_environment import (
    TaskEnvironment,
    environment_class,
    execute_tool_text,
)
from envfactory_assets.tooluse.task_episode import TaskRunner
from envfactory_assets.training.base_model import (
    DEVICE_SETTINGS,
    DevicePlan,
    force_offline,
    model_hash,
    prepare_tokenizer,
    select_device,
)
from envfactory_assets.training.environment_factory import (
    RESPONSE_TEMPLATE,
    TRAINING_CHAT_TEMPLATE,
    environment_factories,
    routed_prompt,
    settle_rollout,
)
from envfactory_assets.training.resume import (
    checkpointing_kwargs,
    finish_run,
    last_complete_checkpoint,
    read_resume_state,
    result_settings,
    resume_callback,
    run_dir,
    run_key,
)
from envfactory_assets.training.screening import timed_screen
from envfactory_assets.training.step_callback import step_progress_callback
from envfactory_assets.training.threads import ThreadGovernor, governor_callback
from envfactory_assets.training.training_reward import training_reward

TASK_ID_KEY = "task_id"
"""Key carried by the first prompt message naming its ``rl_dataset`` row; the template never renders it."""
GRPO_CONFIG_FILE = "grpo_config.json"
ROLLOUTS = ("rollout_func", "environment_factory")
"""The values of :attr:`GRPOConfigSpec.rollout`."""
TRAIN_MICRO_BATCH = 2
"""Rollouts per forward/backward pass (gradient accumulation covers the rest of the step's rollouts)."""


@dataclass(frozen=True)
class GRPOConfigSpec:
    """What a caller chooses for one GRPO run (CPU-sized defaults); each field's default and help text are
    stated here alone (``metadata["help"]``; the checkpoints asset exposes them as ``grpo_<name>``).

    Raises:
        SettingError: (a ValueError) a setting of the wrong type or out of range, named in the message.
    """

    max_steps: int = setting(
        6, "GRPO optimizer steps (in the checkpoints asset, 0 skips GRPO and only the SFT row is written)."
    )
    learning_rate: float = setting(
        2e-5,
        "peak GRPO learning rate (linear decay); 2e-5 so a few CPU steps move "
        "a 135M model (1e-5 over 6 steps changed no sampled answer in a "
        "recorded default run).",
    )
    num_generations: int = setting(4, "rollouts per prompt, the group GRPO compares (at least 2); the paper uses 8.")
    prompts_per_step: int = setting(
        1, "prompts per GRPO optimizer step (a step trains on prompts_per_step x num_generations rollouts)."
    )
    temperature: float = setting(0.7, "sampling temperature of the rollouts (the paper's 0.7).")
    beta: float = setting(0.001, "KL coefficient against the starting model (the paper's 0.001).")
    max_completion_length: int = setting(
        64, "tokens per rollout after the prompt, model and tool-result tokens together."
    )
    max_tool_calling_iterations: int = setting(1, "rounds of tool execution and continued generation per rollout.")
    seed: int = setting(0, "trainer and sampling seed.")
    save_steps: int = setting(
        2,
        "optimizer steps between resumable GRPO checkpoints (model, optimizer, scheduler, RNG state, step "
        "and rollout counters, kept in '<checkpoint folder>.resume' until GRPO finishes); a run stopped and "
        "started again with the same inputs continues from the last one; 0 writes none.",
    )
    replay_screened: bool = setting(
        False,
        "train each screened prompt's first step on its screening group "
        "(which has a reward spread) instead of a fresh one; off because, "
        "measured, the logged KL to the reference then rose from ~0.003 to "
        "5e2-5e4 within 6 steps (the replayed tokens are stale).",
    )
    rollout: str = setting(
        "rollout_func",
        "how rollouts are generated: 'rollout_func' (the project's sampling loop) or 'environment_factory' "
        "(TRL's own tool loop over one environment object per rollout, routed by tool set; "
        "replay_screened needs 'rollout_func'); both execute calls in the sandbox and score them with the "
        "same reward (docs/training.md compares their step times).",
    )
    device: str = setting(
        "auto",
        "'auto' (CUDA when torch sees a device, else the CPU), 'cpu', 'cpu_bf16' (bf16 "
        "mixed precision on a CPU with native bf16 instructions, refused elsewhere) or 'cuda' "
        "(refused without a visible CUDA device).",
    )

    def __post_init__(self) -> None:
        number_types(self, "grpo")
        one_of("grpo", "device", self.device, DEVICE_SETTINGS)
        one_of("grpo", "rollout", self.rollout, ROLLOUTS)
        if self.replay_screened and self.rollout != "rollout_func":
            # TRL's loop samples every group itself: a screened group cannot be handed to it
            expected = f"false with rollout {self.rollout!r} (replaying needs 'rollout_func')"
            raise SettingError(
                f"grpo setting replay_screened=True: expected {expected}", "grpo", "replay_screened", True, expected
            )
        for name in ("max_steps", "prompts_per_step", "max_completion_length"):
            whole_number("grpo", name, getattr(self, name), low=1)
        # GRPO's advantage is a reward's distance from its group's mean: a group of one has none
        whole_number("grpo", "num_generations", self.num_generations, low=2)
        whole_number("grpo", "max_tool_calling_iterations", self.max_tool_calling_iterations, low=0)
        whole_number("grpo", "save_steps", self.save_steps, low=0)
        # NaN and infinity pass a plain comparison (and wreck the weights)
        finite_number("grpo", "learning_rate", self.learning_rate, low=0.0, low_open=True)
        finite_number("grpo", "temperature", self.temperature, low=0.0, low_open=True)
        finite_number("grpo", "beta", self.beta, low=0.0)


def grpo_prompt(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The row's prompt messages, normalized, with :data:`TASK_ID_KEY` on the first message.

    Raises:
        ValueError: the prompt is empty or does not end with a user message.
    """
    messages = normalize_messages(row["prompt"])
    if not messages or messages[-1].get("role") != "user":
        raise ValueError(f"rl row {row.get('id', '?')}: prompt must end with a user message")
    messages[0] = {**messages[0], TASK_ID_KEY: row["id"]}
    return messages


def build_grpo_dataset(rows: list[Mapping[str, Any]]) -> Any:
    """``datasets.Dataset`` with one ``prompt`` column (``Json()``, so argument dicts are never merged).

    Raises:
        ValueError: no rows, repeated ids, or a bad prompt (see :func:`grpo_prompt`).
    """
    from datasets import Dataset, Features, Json

    if not rows:
        raise ValueError("no RL rows for GRPO")
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError("RL rows for GRPO must have unique ids")
    return Dataset.from_list([{"prompt": grpo_prompt(r)} for r in rows], features=Features({"prompt": Json()}))


def build_routed_dataset(rows: list[Mapping[str, Any]]) -> Any:
    """``datasets.Dataset`` for the ``environment_factory`` rollout: ``prompt`` (``Json()``, the row's tool
    schemas on its first message) and ``environment`` (the row's tool-set name, which TRL routes by); see
    :func:`~envfactory_assets.training.environment_factory.routed_prompt`.

    Raises:
        ValueError: as :func:`build_grpo_dataset`.
    """
    from datasets import Dataset, Features, Json, Value

    build_grpo_dataset(rows)  # the same checks
    return Dataset.from_list(
        [routed_prompt(r, grpo_prompt(r)) for r in rows],
        features=Features({"prompt": Json(), "environment": Value("string")}),
    )


class ToolRollout:
    """TRL ``rollout_func``: sample, execute tool calls in each rollout's own environment object, continue.

    Args:
        rows: ``{row id: rl_dataset row}`` for every prompt in the dataset.
        runner: a :class:`TaskRunner` with (or able to load) every environment the rows use.
        tokenizer: the policy's tokenizer, with the tool template installed.
        spec: :class:`GRPOConfigSpec` (temperature, completion budget, tool rounds).

    Calling it returns TRL's rollout dict: ``prompt_ids``, ``completion_ids``, ``logprobs`` (None: TRL then
    recomputes them), ``env_mask`` (1 for model tokens, 0 for tool-result tokens) and ``task_environments``
    (the :class:`TaskEnvironment` of each rollout, forwarded to the reward function). A prompt with a group
    in ``replay`` (``{row id: ScreenedPrompt}``, set by screening) gets that group once instead of new
    samples, with :class:`~envfactory_assets.training.screening.FinishedRollout` objects carrying its rewards.
    """

    def __init__(
        self, rows: Mapping[str, Mapping[str, Any]], runner: TaskRunner, tokenizer: Any, spec: GRPOConfigSpec
    ) -> None:
        self._rows = rows
        self._runner = runner
        self._tokenizer = tokenizer
        self._spec = spec
        self._pool: dict[type[TaskEnvironment], list[TaskEnvironment]] = {}
        self.stop_ids = sorted({tokenizer.convert_tokens_to_ids(END_OF_TURN), tokenizer.eos_token_id} - {None})
        self.tool_calls = 0
        self.malformed = 0
        self.replay: dict[str, Any] = {}
        self.replayed_groups = 0
        self.replayed_ids: list[str] = []

    def _environments(self, rows: list[Mapping[str, Any]]) -> list[TaskEnvironment]:
        """One reusable object per rollout slot, reset on its row."""
        handed: dict[type[TaskEnvironment], int] = {}
        out = []
        for row in rows:
            cls = environment_class(row["tools"])
            pool = self._pool.setdefault(cls, [])
            index = handed.get(cls, 0)
            if index == len(pool):
                pool.append(cls(self._runner))
            handed[cls] = index + 1
            env = pool[index]
            env.reset(**row)
            out.append(env)
        return out

    def _prompt_ids(self, row: Mapping[str, Any]) -> list[int]:
        text = render_chat(row["prompt"], row["tools"], add_generation_prompt=True)
        return self._tokenizer(text, add_special_tokens=False)["input_ids"]

    def _tool_suffix_ids(self, results: list[tuple[str, str]]) -> list[int]:
        """Tokens after the model's end-of-turn: the tool-result turn and the next generation prompt."""
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        tool_messages = [{"role": "tool", "name": n, "content": c} for n, c in results]
        before = render_chat(base)
        after = render_chat(base + tool_messages, add_generation_prompt=True)
        head = before[: before.rindex(END_OF_TURN) + len(END_OF_TURN)]
        return self._tokenizer(after[len(head) :], add_special_tokens=False)["input_ids"]

    def _sample(self, model: Any, sequences: list[list[int]], budgets: list[int]) -> list[list[int]]:
        """Sampled continuations (left-padded batch), each cut after its first stop token and to its budget."""
        import torch

        pad = self._tokenizer.pad_token_id
        width = max(len(s) for s in sequences)
        input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], device=model.device)
        attention = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=model.device)
        with torch.inference_mode():
            output = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                do_sample=True,
                temperature=self._spec.temperature,
                top_p=1.0,
                top_k=0,
                max_new_tokens=max(budgets),
                eos_token_id=self.stop_ids,
                pad_token_id=pad,
            )
        result = []
        for row, budget in zip(output[:, width:].tolist(), budgets, strict=True):
            cut = next((i + 1 for i, t in enumerate(row) if t in self.stop_ids), len(row))
            result.append(row[: min(cut, budget)])
        return result

    def __call__(self, prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
        rows = []
        for prompt in prompts:
            task_id = prompt[0].get(TASK_ID_KEY) if prompt else None
            if task_id not in self._rows:
                raise KeyError(f"GRPO prompt without a known {TASK_ID_KEY!r}: {str(task_id)[:80]}")
            rows.append(self._rows[task_id])
        out: dict[str, list[Any]] = {
            k: [None] * len(rows) for k in ("prompt_ids", "completion_ids", "env_mask", "task_environments")
        }
        positions: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            positions.setdefault(row["id"], []).append(i)
        fresh = []
        for task_id, where in positions.items():
            group = self.replay.get(task_id)
            if group is None or len(group.completion_ids) != len(where):
                fresh += where
                continue
            del self.replay[task_id]  # a screened group is replayed once, at its prompt's first step
            self.replayed_groups += 1
            self.replayed_ids.append(task_id)
            for j, i in enumerate(where):
                out["prompt_ids"][i], out["completion_ids"][i] = group.prompt_ids[j], group.completion_ids[j]
                out["env_mask"][i], out["task_environments"][i] = group.env_mask[j], group.finished[j]
        if fresh:
            sampled = self.rollouts(trainer.accelerator.unwrap_model(trainer.model), [rows[i] for i in fresh])
            for key in out:
                for i, value in zip(fresh, sampled[key], strict=True):
                    out[key][i] = value
        return {**out, "logprobs": None}

    def rollouts(self, model: Any, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
        """One rollout per row (repeat a row for a group) with ``model``; the same dict as ``__call__``."""
        environments = self._environments(rows)
        budget = self._spec.max_completion_length
        prompt_ids = [self._prompt_ids(r) for r in rows]
        completion_ids: list[list[int]] = [[] for _ in rows]
        env_mask: list[list[int]] = [[] for _ in rows]
        active = list(range(len(rows)))
        for round_index in range(self._spec.max_tool_calling_iterations + 1):
            new = self._sample(
                model,
                [prompt_ids[i] + completion_ids[i] for i in active],
                [budget - len(completion_ids[i]) for i in active],
            )
            still = []
            for i, ids in zip(active, new, strict=True):
                completion_ids[i] += ids
                env_mask[i] += [1] * len(ids)
                results, malformed = execute_tool_text(
                    environments[i], self._tokenizer.decode(ids, skip_special_tokens=True)
                )
                self.malformed += malformed
                if not results:
                    continue
                self.tool_calls += len(results)
                finished = bool(ids) and ids[-1] in self.stop_ids
                if round_index == self._spec.max_tool_calling_iterations or not finished:
                    continue
                suffix = self._tool_suffix_ids(results)
                if len(completion_ids[i]) + len(suffix) >= budget:
                    continue  # no room to show the results and continue; the calls still count
                completion_ids[i] += suffix
                env_mask[i] += [0] * len(suffix)
                still.append(i)
            active = still
            if not active:
                break
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "env_mask": env_mask,
            "task_environments": environments,
        }

    def counters(self) -> dict[str, Any]:
        """What a resumed run needs to go on counting: calls, malformed calls and the replayed groups."""
        return {
            "tool_calls": self.tool_calls,
            "malformed": self.malformed,
            "replayed_groups": self.replayed_groups,
            "replayed_ids": list(self.replayed_ids),
        }

    def restore(self, counters: Mapping[str, Any]) -> None:
        """Take up the :meth:`counters` of a stopped run; its replayed groups are not replayed again."""
        self.tool_calls = int(counters["tool_calls"])
        self.malformed = int(counters["malformed"])
        self.replayed_groups = int(counters["replayed_groups"])
        self.replayed_ids = list(counters["replayed_ids"])
        for task_id in self.replayed_ids:
            self.replay.pop(task_id, None)

    def close(self) -> None:
        """Close every open episode (the runner itself belongs to the caller)."""
        for pool in self._pool.values():
            for env in pool:
                env._close()


def hybrid_reward_func(
    prompts: list[Any],
    completions: list[Any],
    task_environments: list[TaskEnvironment],
    log_metric: Any = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: each rollout's guarded hybrid reward from its own episode
    (:func:`~envfactory_assets.training.training_reward.training_reward`: the paper's shape, with calls of
    empty arguments, free state credit on reads and calls where none is wanted paid nothing).

    ``task_environments`` comes from :class:`ToolRollout`; ``log_metric`` (TRL) records the trace and
    state terms, the format penalty and the share of rollouts zeroed for an empty-argument call per step.

    Raises:
        InvalidReward: a rollout's reward is not a finite number in ``[0, MAX_REWARD]`` (from
            :func:`~envfactory_assets.training.training_reward.training_reward`; never handed to TRL).
    """
    breakdowns = [training_reward(env) for env in task_environments]
    if log_metric is not None and breakdowns:
        n = len(breakdowns)
        log_metric("reward_trace", sum(b.trace for b in breakdowns) / n)
        log_metric("reward_state", sum(b.state for b in breakdowns) / n)
        log_metric("malformed_calls", sum(b.n_malformed for b in breakdowns) / n)
        log_metric("empty_argument_rollouts", sum(_has_empty_call(env) for env in task_environments) / n)
    return [b.reward for b in breakdowns]


def settled_reward_func(counters: ToolRollout) -> Callable[..., list[float]]:
    """TRL reward function of the ``environment_factory`` rollout: settles each rollout's episode
    (:func:`~envfactory_assets.training.environment_factory.settle_rollout`: replies, refused calls and an
    unexecuted last round recorded, unparsed blocks counted), adds its calls and malformed calls to
    ``counters`` (the run's :class:`ToolRollout`, whose counters the metrics and resumable checkpoints read),
    then returns :func:`hybrid_reward_func` of the episodes.

    Raises:
        InvalidReward: as :func:`hybrid_reward_func`.
    """

    def hybrid_reward_func_settled(
        prompts: list[Any],
        completions: list[Any],
        environments: list[TaskEnvironment],
        log_metric: Any = None,
        **kwargs: Any,
    ) -> list[float]:
        for environment, completion in zip(environments, completions, strict=True):
            calls, malformed = settle_rollout(environment, completion)
            counters.tool_calls += calls
            counters.malformed += malformed
        return hybrid_reward_func(prompts, completions, task_environments=environments, log_metric=log_metric)

    return hybrid_reward_func_settled


def _has_empty_call(environment: Any) -> bool:
    episode = getattr(environment, "_episode", None)
    if episode is None:
        return False
    row = episode.row
    return empty_argument_calls(row["gold_calls"], episode.calls, row["tools"], row.get("masked_arguments") or ()) > 0


def trl_config_kwargs(out_dir: Path, spec: GRPOConfigSpec, plan: DevicePlan | None = None) -> dict[str, Any]:
    """Keyword arguments of TRL's ``GRPOConfig`` for ``spec`` on ``plan`` (None:
    :func:`select_device` of ``spec.device``; a plain dict: constructing the
    config for a CUDA plan initialises the device); ``out_dir`` is the trainer's own folder, where its
    resumable checkpoints go every ``spec.save_steps`` steps."""
    rollouts = spec.num_generations * spec.prompts_per_step
    micro = TRAIN_MICRO_BATCH if rollouts % TRAIN_MICRO_BATCH == 0 else 1
    plan = plan or select_device(spec.device)
    return dict(  # noqa: C408 - the keyword form of the config call it feeds
        **checkpointing_kwargs(spec.save_steps, out_dir),
        max_steps=spec.max_steps,
        learning_rate=spec.learning_rate,
        # One generation batch (all rollouts of the step) per optimizer step, split into micro-batches of
        # TRAIN_MICRO_BATCH for the forward/backward passes: full-vocabulary logits of 8 rollouts at once took
        # the process past 11 GB on the 2-core machine (killed); micro-batches of 2 keep it to a few GB.
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=rollouts // micro,
        num_generations=spec.num_generations,
        temperature=spec.temperature,
        beta=spec.beta,
        max_completion_length=spec.max_completion_length,
        max_tool_calling_iterations=spec.max_tool_calling_iterations,
        seed=spec.seed,
        data_seed=spec.seed,
        use_cpu=plan.use_cpu,
        bf16=plan.bf16,  # mixed precision over float32 master weights (base_model.py, "Device and precision", says why)
        fp16=plan.fp16,
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        log_completions=False,
        activation_checkpointing=False,  # TRL defaults to True; for a 135M model on CPU it only costs time
    )


def _trl_config(out_dir: Path, spec: GRPOConfigSpec, plan: DevicePlan | None = None) -> Any:
    """TRL's ``GRPOConfig`` of :func:`trl_config_kwargs`."""
    from trl import GRPOConfig

    return GRPOConfig(**trl_config_kwargs(out_dir, spec, plan))


def _silence_experimental_warning() -> None:
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def train_grpo(
    rows: list[Mapping[str, Any]],
    environments: Mapping[str, Mapping[str, Any]],
    start_model_dir: Path,
    out_dir: Path,
    spec: GRPOConfigSpec | None = None,
    *,
    num_threads: int | None = None,
    n_prompts: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Train the model in ``start_model_dir`` (the SFT checkpoint) with GRPO on ``rows``; save to ``out_dir``.

    Args:
        rows: ``rl_dataset`` rows (``id``, ``prompt``, ``tools``, ``env_ids``, ``gold_calls``,
            ``masked_arguments``, ``initial_state``, ``final_state``); only train-split rows belong here.
            With ``n_prompts`` smaller than ``len(rows)`` they are candidates: each gets one group of rollouts
            from the starting policy and the first ``n_prompts`` whose rewards differ are trained on
            (:mod:`~envfactory_assets.training.screening`, DAPO's dynamic sampling).
        environments: ``{env_id: environment dict with "source"}`` for every env id the rows use.
        start_model_dir: local HF model directory to start from.
        out_dir: receives the trained model, tokenizer and :data:`GRPO_CONFIG_FILE`.
        spec: :class:`GRPOConfigSpec` (defaults if None).
        num_threads: torch threads while training; None = free cores (``threads.py``).
        progress: called as ``progress(optimizer steps done, spec.max_steps)`` after every training step
            (screening comes before the first).

    Every ``spec.save_steps`` optimizer steps a resumable checkpoint (transformers' ``Trainer`` checkpoint plus
    the rollout counters) is written to ``<out_dir>.resume/grpo-<key>``, the key a hash of the candidate rows,
    their environments, the settings that change the result, the starting weights, ``n_prompts`` and the
    library versions (:mod:`~envfactory_assets.training.resume`). A call that finds a complete checkpoint
    there screens again (from the same starting weights and seed), continues from it when screening chose
    the same prompts, and ends with the weights and metrics of a run never stopped (timings and thread counts
    aside); the folder is removed when training finishes.

    Returns:
        ``{"steps", "seconds" (training; screening has its own), "seconds_per_step", "cpu_seconds" (process CPU time,
        all threads: the figure
        that survives a shared machine), "step_seconds": [wall s per step], "reward_mean_per_step": [float],
        "reward_std_per_step":
        [float], "loss_per_step": [float, TRL's logged GRPO loss], "reward_mean_first", "reward_mean_last",
        "train_loss", "tool_calls", "malformed_calls" (of
        training's sampled rollouts; screening's are in its report), "trl_tool_call_frequency" (per step, the
        calls per rollout TRL's own tool loop executed: ``environment_factory`` only, else empty), "prompts",
        "prompt_ids", "threads",
        "steps_with_signal" (steps whose reward spread was above zero),
        "replayed_groups" (steps that trained on their prompt's screened group),
        "screening" (None, or :func:`~envfactory_assets.training.screening.screening_report`)}``; rewards are in
        [0, 1].

    Raises:
        ValueError: no rows or bad prompts (see :func:`build_grpo_dataset`), or a task whose tools cannot be
            methods (see :func:`environment_class`) or, with ``rollout: environment_factory``, cannot be
            rendered by TRL (see
            :func:`~envfactory_assets.training.environment_factory.environment_factories`).
        KeyError: a row uses an environment missing from ``environments``.
        ValueError: ``device: cuda`` without a visible CUDA device.
    """
    spec = spec or GRPOConfigSpec()
    plan = select_device(spec.device)  # before anything is loaded: a refused 'cuda' fails fast
    out_dir, start_model_dir = Path(out_dir), Path(start_model_dir)
    build_grpo_dataset(list(rows))  # validates every candidate before any model is loaded
    if n_prompts is not None and n_prompts < 1:
        raise ValueError(f"n_prompts must be >= 1, got {n_prompts}")
    for row in rows:
        environment_class(row["tools"])
        missing = [e for e in row["env_ids"] if e not in environments]
        if missing:
            raise KeyError(f"rl row {row['id']}: environment(s) {missing} not available")
    if spec.rollout == "environment_factory":
        environment_factories(list(rows), None, TASK_ID_KEY, [])  # every tool TRL will render, checked up front

    force_offline()
    _silence_experimental_warning()
    import torch
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    start_hash = model_hash(start_model_dir)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}
    used = sorted({e for r in rows for e in r["env_ids"]})
    key = run_key(
        {
            "rows": list(rows),
            "environments": {e: environments[e] for e in used},
            "spec": result_settings(spec),
            "start": start_hash,
            "n_prompts": n_prompts,
            **versions,
        }
    )
    trainer_dir = run_dir(out_dir, "grpo", key)
    resume_from = last_complete_checkpoint(trainer_dir)

    transformers.set_seed(spec.seed)
    tokenizer = AutoTokenizer.from_pretrained(start_model_dir)
    model = AutoModelForCausalLM.from_pretrained(start_model_dir, dtype=torch.float32)
    prepare_tokenizer(tokenizer, model)
    tokenizer.padding_side = "left"
    model.to(plan.device)  # screening samples before the trainer would move it

    screening = None
    governor = ThreadGovernor(num_threads)
    with TaskRunner(environments) as runner, governor:
        rollout = ToolRollout({r["id"]: r for r in rows}, runner, tokenizer, spec)
        if n_prompts is not None and n_prompts < len(rows):
            torch.manual_seed(spec.seed)
            rows, screening, replay = timed_screen(
                rollout, model, rows, spec.num_generations, n_prompts, governor.adjust
            )
            rollout.replay = replay if spec.replay_screened else {}
            transformers.set_seed(spec.seed)
        prompt_ids = [r["id"] for r in rows]
        if resume_from is not None:
            state = read_resume_state(resume_from)
            if state.get("prompt_ids") == prompt_ids:
                rollout.restore(state)
            else:  # screening chose other prompts this time: the stopped run trained on another dataset
                shutil.rmtree(resume_from, ignore_errors=True)
                resume_from = None
        trl_environments: list[TaskEnvironment] = []
        if spec.rollout == "environment_factory":
            tokenizer.chat_template = TRAINING_CHAT_TEMPLATE
            tokenizer.response_template = RESPONSE_TEMPLATE
            generation = {
                "reward_funcs": [settled_reward_func(rollout)],
                "train_dataset": build_routed_dataset(list(rows)),
                "environment_factory": environment_factories(list(rows), runner, TASK_ID_KEY, trl_environments),
            }
        else:
            generation = {
                "reward_funcs": [hybrid_reward_func],
                "train_dataset": build_grpo_dataset(list(rows)),
                "rollout_func": rollout,
            }
        trainer = GRPOTrainer(
            model=model,
            args=_trl_config(trainer_dir, spec, plan),
            processing_class=tokenizer,
            **generation,
            callbacks=[
                governor_callback(governor),
                resume_callback(lambda: {**rollout.counters(), "prompt_ids": prompt_ids}),
            ]
            + ([step_progress_callback(progress)] if progress is not None else []),
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        finally:
            rollout.close()
            for env in trl_environments:
                env._close()
            # the saved checkpoint keeps the project template alone, whichever rollout trained it
            install_chat_template(tokenizer)
            tokenizer.response_template = None
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    logs = [e for e in trainer.state.log_history if "reward" in e]
    # the log history comes back with a checkpoint; the trainer's own training_loss covers this call's steps only
    step_losses = [float(e["loss"]) for e in trainer.state.log_history if e.get("loss") is not None]
    train_loss = sum(step_losses) / len(step_losses) if step_losses else float(output.training_loss)
    means = [float(e["reward"]) for e in logs]
    stds = [float(e.get("reward_std", 0.0)) for e in logs]
    trainer.save_model(str(out_dir))
    tokenizer.save_pretrained(out_dir)
    finish_run(trainer_dir)
    metrics = {
        "steps": int(output.global_step),
        "seconds": round(seconds, 3),
        "seconds_per_step": round(seconds / max(1, output.global_step), 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "step_seconds": [float(e["step_time"]) for e in logs if "step_time" in e],
        "train_loss": float(train_loss),
        "reward_mean_per_step": means,
        "reward_std_per_step": stds,
        "loss_per_step": [float(e["loss"]) for e in logs if e.get("loss") is not None],
        "reward_mean_first": means[0] if means else None,
        "reward_mean_last": means[-1] if means else None,
        "tool_calls": rollout.tool_calls,
        "malformed_calls": rollout.malformed,
        "trl_tool_call_frequency": [float(e["tools/call_frequency"]) for e in logs if "tools/call_frequency" in e],
        "prompts": len(rows),
        "prompt_ids": [r["id"] for r in rows],
        "threads": governor.history[0],
        **governor.summary(),
        **plan.as_dict(),
        "steps_with_signal": sum(1 for x in stds if x > 0),
        "replayed_groups": rollout.replayed_groups,
        "screening": screening,
    }
    record = {
        "spec": dataclasses.asdict(spec),
        "start_model_dir": str(start_model_dir),
        "start_model_sha256": start_hash,
        "row_ids": [r["id"] for r in rows],
        "metrics": metrics,
        "versions": versions,
    }
    (out_dir / GRPO_CONFIG_FILE).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    return metrics
