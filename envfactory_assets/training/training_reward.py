"""The reward GRPO trains on, read off a rollout's environment object: the guarded hybrid reward
(:func:`~envfactory_assets.tooluse.reward.guarded_reward`), not the paper's plain formula, because the plain
one pays a call with empty arguments on the reads that dominate the cheapest RL rows (see that module)."""

from __future__ import annotations

from typing import Any

from envfactory_assets.tooluse.reward import RewardBreakdown, guarded_reward, valid_reward
from envfactory_assets.tooluse.task_environment import TaskEnvironment


def training_reward(environment: Any) -> RewardBreakdown:
    """The guarded reward of the rollout held by ``environment``.

    Args:
        environment: a :class:`TaskEnvironment` after ``reset(**row)`` and the rollout's calls, or an object
            standing in for a finished rollout (``screening.FinishedRollout``), whose stored breakdown is
            returned as is.

    Raises:
        RuntimeError: a :class:`TaskEnvironment` that was never reset.
        InvalidReward: the reward is not a finite number in ``[0, MAX_REWARD]`` (GRPO would train on it).
    """
    if not isinstance(environment, TaskEnvironment):
        stored = environment._reward()
        valid_reward(stored.reward, "GRPO's training reward of a screened rollout")
        return stored
    episode = environment._episode  # private to hide it from TRL's tool listing, not from the trainer
    if episode is None:
        raise RuntimeError("reset(**row) must be called before scoring")
    row = episode.row
    gold = episode.gold_state_hashes
    initial = episode.initial_state_hashes
    breakdown = guarded_reward(
        row["gold_calls"],
        episode.calls,
        episode.final_state_hashes(),
        gold,
        initial,
        row["tools"],
        masked_arguments=row.get("masked_arguments") or (),
        n_malformed=episode.n_malformed,
        executed_calls=row.get("executed_calls") or (),
        reply=episode.reply,
    )
    valid_reward(breakdown.reward, f"GRPO's training reward of rl row {row.get('id', '?')!r}")
    return breakdown
