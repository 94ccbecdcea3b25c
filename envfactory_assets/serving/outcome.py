"""The end of a served episode: its reward, computed here from what the server itself recorded, and its
state diff.

The reward is :func:`~envfactory_assets.tooluse.reward.guarded_reward`, the reward GRPO trains on (as
``training/training_reward.py`` computes it for the project's own trainer), over:

- the calls the server executed for the client, as the server parsed them (never text a tool returned), and
  the client's final answer (the reply: on an abstention row, the whole answer; an empty episode earns 0);
- the final state of each environment, saved by the sandbox and hashed here in the server process (never a
  digest or verdict reported by the environment's code);
- the task's gold calls and gold final state from the store.

Nothing a tool returns is read back as a reward, a ``done`` or a state: a tool's output is only text shown to
the model. A reward that is not a finite number in ``[0, MAX_REWARD]`` is refused with an
``invalid_reward`` error and never passed on (:func:`~envfactory_assets.tooluse.reward.valid_reward`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.serving.state_diff import state_diff
from envfactory_assets.tooluse.reward import InvalidReward, RewardBreakdown, guarded_reward, valid_reward
from envfactory_assets.tooluse.task_episode import TaskEpisode


def training_reward_of(
    row: Mapping[str, Any],
    calls: Sequence[Mapping[str, Any]],
    n_malformed: int,
    final_state_hashes: Mapping[str, str],
    gold_state_hashes: Mapping[str, str],
    initial_state_hashes: Mapping[str, str],
    reply: str,
) -> RewardBreakdown:
    """The guarded reward (the one GRPO trains on) of a rollout of ``row`` that made ``calls`` (well-formed,
    in order) and ``n_malformed`` malformed calls, answered ``reply`` (text outside tool-call blocks) and ended
    in ``final_state_hashes``."""
    return guarded_reward(
        row["gold_calls"],
        calls,
        final_state_hashes,
        gold_state_hashes,
        initial_state_hashes,
        row["tools"],
        masked_arguments=row.get("masked_arguments") or (),
        n_malformed=n_malformed,
        executed_calls=row.get("executed_calls") or (),
        reply=reply,
    )


RewardFunction = Callable[
    [
        Mapping[str, Any],
        Sequence[Mapping[str, Any]],
        int,
        Mapping[str, str],
        Mapping[str, str],
        Mapping[str, str],
        str,
    ],
    RewardBreakdown,
]
"""The signature of :func:`training_reward_of`."""


@dataclass(frozen=True)
class Outcome:
    """How an episode ended: ``reward`` (None when refused or lost), ``breakdown`` (the reward's terms),
    ``state_diff`` (:func:`~.state_diff.state_diff` of the initial and final states) and ``error``
    (``{"type", "message"}`` when no reward can be given)."""

    reward: float | None
    breakdown: dict[str, Any] | None = None
    state_diff: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def episode_outcome(
    episode: TaskEpisode,
    hashes: tuple[Mapping[str, str], Mapping[str, str]],
    environments: Mapping[str, Mapping[str, Any]],
    reward_fn: RewardFunction = training_reward_of,
) -> Outcome:
    """Score a finished episode.

    Args:
        episode: the episode, still open in its worker.
        hashes: ``(gold final, initial)`` state hashes of its task (``TaskSet.state_hashes``).
        environments: ``{env_id: Environment dict}`` (their table keys name rows in the diff).
        reward_fn: the reward (default :func:`training_reward_of`).

    Returns:
        An :class:`Outcome`; ``error`` is ``episode_lost`` when the final state cannot be read (the worker died),
        ``invalid_reward`` when ``reward_fn`` gave something that is not a finite number in range.
    """
    final = episode.final_states()
    if final is None:
        return Outcome(
            None, error={"type": "episode_lost", "message": "the environment's worker was lost; no final state"}
        )
    final_hashes = {env_id: state_hash(state) for env_id, state in final.items()}
    gold, initial = hashes
    breakdown = reward_fn(
        episode.row, list(episode.calls), episode.n_malformed, final_hashes, gold, initial, episode.reply
    )
    try:
        reward = valid_reward(
            getattr(breakdown, "reward", breakdown), f"serve-openenv: the reward of task {episode.row.get('id')!r}"
        )
    except InvalidReward as exc:
        return Outcome(None, error={"type": "invalid_reward", "message": f"refused: {exc}"})
    diff = state_diff(episode.row["initial_state"], final, environments)
    return Outcome(reward, breakdown.as_dict(), diff)
