"""Choose GRPO prompts that carry a learning signal: DAPO's dynamic sampling, done once before training.

GRPO's advantage is a rollout's reward minus its group's mean, so a prompt whose rollouts all earn the same
reward contributes no gradient. DAPO (Yu et al. 2025, arXiv 2503.14476, "Dynamic Sampling") drops such groups
and samples more prompts until the batch is full. With the few GRPO steps a CPU affords this decides whether
the policy moves at all: in the recorded default run (6 steps, one prompt each, no screening) four of the six
groups had a reward spread of zero and the GRPO checkpoint sampled the same answers as its SFT parent.

Here every candidate prompt gets one group of rollouts from the starting policy before training (the same
rollout code, environments and reward as training); prompts whose rewards differ come first, in candidate
order, then the others, and the first ``n`` are trained on.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envfactory_assets.training.task_environment import rollout_reward

ROLLOUTS_PER_BATCH = 8
"""Rollouts generated together while screening (several prompts' groups in one batch)."""


@dataclass(frozen=True)
class ScreenedPrompt:
    """One candidate's group: ``row_id`` and the ``rewards`` of its rollouts (each in [0, 1])."""

    row_id: str
    rewards: tuple[float, ...]

    @property
    def has_signal(self) -> bool:
        """True when the rewards are not all equal (a nonzero GRPO advantage for some rollout)."""
        return len(set(self.rewards)) > 1


def screen_prompts(rollout: Any, model: Any, rows: Sequence[Mapping[str, Any]],
                   num_generations: int) -> list[ScreenedPrompt]:
    """Sample one group of ``num_generations`` rollouts per row and score them.

    Args:
        rollout: a :class:`~envfactory_assets.training.grpo.ToolRollout` holding every row.
        model: the starting policy (a causal LM on the rollout's device).
        rows: candidate ``rl_dataset`` rows, in preference order.
        num_generations: rollouts per row (the GRPO group size).

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
        out = rollout.rollouts(model, [row for row in chunk for _ in range(num_generations)])
        rewards = [rollout_reward(env).reward for env in out["task_environments"]]
        for i, row in enumerate(chunk):
            screened.append(ScreenedPrompt(row["id"], tuple(rewards[i * num_generations : (i + 1) * num_generations])))
    return screened


def choose_prompts(rows: Sequence[Mapping[str, Any]], screened: Sequence[ScreenedPrompt],
                   n: int) -> list[Mapping[str, Any]]:
    """The first ``n`` rows with a reward spread (candidate order), then rows without one to fill up.

    Raises:
        ValueError: ``n`` < 1, or ``screened`` does not cover ``rows``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    by_id = {s.row_id: s for s in screened}
    missing = [r["id"] for r in rows if r["id"] not in by_id]
    if missing:
        raise ValueError(f"rows {missing[:3]} were not screened")
    informative = [r for r in rows if by_id[r["id"]].has_signal]
    flat = [r for r in rows if not by_id[r["id"]].has_signal]
    return (informative + flat)[:n]


def screening_report(screened: Sequence[ScreenedPrompt], chosen: Sequence[Mapping[str, Any]],
                     seconds: float) -> dict[str, Any]:
    """JSON-ready summary for checkpoint metrics: counts, time and every candidate's group rewards."""
    chosen_ids = {r["id"] for r in chosen}
    return {
        "candidates": len(screened),
        "with_signal": sum(s.has_signal for s in screened),
        "chosen_with_signal": sum(s.has_signal for s in screened if s.row_id in chosen_ids),
        "seconds": round(seconds, 3),
        "groups": {s.row_id: {"rewards": list(s.rewards), "mean": statistics.fmean(s.rewards),
                              "chosen": s.row_id in chosen_ids} for s in screened},
    }


def timed_screen(rollout: Any, model: Any, rows: Sequence[Mapping[str, Any]], num_generations: int,
                 n: int) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
    """:func:`screen_prompts` then :func:`choose_prompts`; returns ``(chosen rows, screening_report)``."""
    started = time.perf_counter()
    screened = screen_prompts(rollout, model, rows, num_generations)
    chosen = choose_prompts(rows, screened, n)
    return chosen, screening_report(screened, chosen, time.perf_counter() - started)
