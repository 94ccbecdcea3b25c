"""Choose GRPO prompts that carry a learning signal: DAPO's dynamic sampling, done once before training.

GRPO's advantage is a rollout's reward minus its group's mean, so a prompt whose rollouts all earn the same
reward contributes no gradient. DAPO (Yu et al. 2025, arXiv 2503.14476, "Dynamic Sampling") drops such groups
and samples more prompts until the batch is full. With the few GRPO steps a CPU affords this decides whether
the policy moves at all: in the recorded default run (6 steps, one prompt each, no screening) four of the six
groups had a reward spread of zero and the GRPO checkpoint sampled the same answers as its SFT parent.

Here every candidate prompt gets one group of rollouts from the starting policy before training (the same
rollout code, environments and reward as training); prompts whose rewards differ come first (largest
reward spread first, then candidate order), then the others, and the first ``n`` are trained on.

A fresh group of 4 from the same policy often has no spread again (in a measured run 2 of 6 steps did).
With ``GRPOConfigSpec.replay_screened`` the screened group of a chosen prompt is what GRPO trains on at that
prompt's first step (:class:`~envfactory_assets.training.grpo.ToolRollout` replays it), so every step has a
spread; but the replayed rollouts come from the starting policy (``t`` optimizer steps stale at step ``t``),
and in the measured runs the logged KL to the reference then grew to 5e2-5e4 within 6 steps, against below
0.01 without replay. Replay is therefore off by default.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envfactory_assets.tooluse.reward import RewardBreakdown
from envfactory_assets.training.training_reward import training_reward

ROLLOUTS_PER_BATCH = 8
"""Rollouts generated together while screening (several prompts' groups in one batch)."""


@dataclass(frozen=True)
class FinishedRollout:
    """A rollout that was already executed and scored: stands in for its environment object in the reward
    function (:func:`~envfactory_assets.training.training_reward.training_reward` calls ``_reward``)."""

    breakdown: RewardBreakdown

    def _reward(self) -> RewardBreakdown:
        return self.breakdown


@dataclass(frozen=True)
class ScreenedPrompt:
    """One candidate's group: ``row_id``, the ``rewards`` of its rollouts (each in [0, 1]) and, for replay,
    the group's token ids in TRL's rollout format (``prompt_ids``, ``completion_ids``, ``env_mask``: one list
    per rollout) with each rollout's reward breakdown (``finished``)."""

    row_id: str
    rewards: tuple[float, ...]
    prompt_ids: tuple[list[int], ...] = ()
    completion_ids: tuple[list[int], ...] = ()
    env_mask: tuple[list[int], ...] = ()
    finished: tuple[FinishedRollout, ...] = ()

    @property
    def has_signal(self) -> bool:
        """True when the rewards are not all equal (a nonzero GRPO advantage for some rollout)."""
        return len(set(self.rewards)) > 1


def screen_prompts(
    rollout: Any,
    model: Any,
    rows: Sequence[Mapping[str, Any]],
    num_generations: int,
    before_batch: Callable[[], Any] | None = None,
) -> list[ScreenedPrompt]:
    """Sample one group of ``num_generations`` rollouts per row and score them.

    Args:
        rollout: a :class:`~envfactory_assets.training.grpo.ToolRollout` holding every row.
        model: the starting policy (a causal LM on the rollout's device).
        rows: candidate ``rl_dataset`` rows, in preference order.
        num_generations: rollouts per row (the GRPO group size).
        before_batch: called before each generation batch (training passes its
            :meth:`~envfactory_assets.training.threads.ThreadGovernor.adjust`, so that a screening of many
            minutes does not keep the thread count chosen at its start).

    Returns:
        One :class:`ScreenedPrompt` per row, in row order.

    Raises:
        ValueError: ``num_generations`` < 2 (a group of one has no spread).
    """
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2 to screen for a reward spread, got {num_generations}")
    per_batch = max(1, ROLLOUTS_PER_BATCH // num_generations)
    screened = []
    for start in range(0, len(rows), per_batch):
        chunk = list(rows[start : start + per_batch])
        if before_batch is not None:
            before_batch()
        out = rollout.rollouts(model, [row for row in chunk for _ in range(num_generations)])
        breakdowns = [training_reward(env) for env in out["task_environments"]]
        for i, row in enumerate(chunk):
            part = slice(i * num_generations, (i + 1) * num_generations)
            screened.append(
                ScreenedPrompt(
                    row["id"],
                    tuple(b.reward for b in breakdowns[part]),
                    tuple(out.get("prompt_ids", [])[part]),
                    tuple(out.get("completion_ids", [])[part]),
                    tuple(out.get("env_mask", [])[part]),
                    tuple(FinishedRollout(b) for b in breakdowns[part]),
                )
            )
    return screened


def choose_prompts(
    rows: Sequence[Mapping[str, Any]], screened: Sequence[ScreenedPrompt], n: int
) -> list[Mapping[str, Any]]:
    """The first ``n`` rows with a reward spread (largest standard deviation first, ties in candidate order:
    a group whose rewards are most mixed is the likeliest to carry signal again), then rows without one.

    Raises:
        ValueError: ``n`` < 1, or ``screened`` does not cover ``rows``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    by_id = {s.row_id: s for s in screened}
    missing = [r["id"] for r in rows if r["id"] not in by_id]
    if missing:
        raise ValueError(f"rows {missing[:3]} were not screened")
    informative = sorted(
        (r for r in rows if by_id[r["id"]].has_signal), key=lambda r: -statistics.pstdev(by_id[r["id"]].rewards)
    )
    flat = [r for r in rows if not by_id[r["id"]].has_signal]
    return (informative + flat)[:n]


def screening_report(
    screened: Sequence[ScreenedPrompt], chosen: Sequence[Mapping[str, Any]], seconds: float
) -> dict[str, Any]:
    """JSON-ready summary for checkpoint metrics: counts, time and every candidate's group rewards."""
    chosen_ids = {r["id"] for r in chosen}
    return {
        "candidates": len(screened),
        "with_signal": sum(s.has_signal for s in screened),
        "chosen_with_signal": sum(s.has_signal for s in screened if s.row_id in chosen_ids),
        "seconds": round(seconds, 3),
        "groups": {
            s.row_id: {
                "rewards": list(s.rewards),
                "mean": statistics.fmean(s.rewards),
                "chosen": s.row_id in chosen_ids,
            }
            for s in screened
        },
    }


def timed_screen(
    rollout: Any,
    model: Any,
    rows: Sequence[Mapping[str, Any]],
    num_generations: int,
    n: int,
    before_batch: Callable[[], Any] | None = None,
) -> tuple[list[Mapping[str, Any]], dict[str, Any], dict[str, ScreenedPrompt]]:
    """:func:`screen_prompts` (``before_batch`` passed on) then :func:`choose_prompts`.

    Returns:
        ``(chosen rows, screening_report, {row id: group})`` where the groups are those of the chosen rows
        that have a reward spread (the ones worth replaying at their first training step). The report also
        holds the screening rollouts' ``tool_calls`` and ``malformed_calls``, which are taken off the
        rollout's counters, so that those count training's sampled rollouts only (replayed groups' calls
        are in the screening counts).
    """
    started = time.perf_counter()
    calls_before, malformed_before = rollout.tool_calls, rollout.malformed
    screened = screen_prompts(rollout, model, rows, num_generations, before_batch)
    chosen = choose_prompts(rows, screened, n)
    chosen_ids = {r["id"] for r in chosen}
    replay = {s.row_id: s for s in screened if s.row_id in chosen_ids and s.has_signal}
    report = screening_report(screened, chosen, time.perf_counter() - started)
    report["tool_calls"] = rollout.tool_calls - calls_before
    report["malformed_calls"] = rollout.malformed - malformed_before
    rollout.tool_calls, rollout.malformed = calls_before, malformed_before
    return chosen, report, replay
