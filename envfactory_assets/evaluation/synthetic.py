"""Held-out synthetic tasks: ``rl_dataset`` rows whose environments were never trained on.

A row is held out when its stored split is ``validation``
(:func:`envfactory_assets.tooluse.splits.stored_split`, the same decision training reads to keep those rows out), so no
held-out environment was
seen in SFT or GRPO. Each task runs in a fresh sandbox episode on the row's initial state
(:class:`~envfactory_assets.tooluse.task_episode.TaskRunner`) and is scored with task success
(:mod:`~envfactory_assets.evaluation.scoring`, the headline: doing nothing cannot earn it) and the paper's
hybrid reward (secondary: what GRPO optimizes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envfactory_assets.evaluation.agent import AgentTask
from envfactory_assets.evaluation.scoring import task_success
from envfactory_assets.evaluation.task_draw import draw_block
from envfactory_assets.tooluse.splits import stored_split
from envfactory_assets.tooluse.task_episode import TaskEpisode, TaskRunner
from envfactory_assets.tooluse.tool_selection import restrict_tools

BENCHMARK = "synthetic_held_out"
#: The score key the table and the intervals use for this benchmark (the hybrid ``reward`` is kept beside it).
HEADLINE = "success"


def held_out_rows(
    rl_rows: list[dict[str, Any]], n: int | None, first_turns_only: bool = False, draw: int = 0
) -> list[dict[str, Any]]:
    """The held-out RL rows, ``n`` of them (all when ``n`` is None) in order of sha256 of their id: the
    ``draw``-th block of ``n`` (:func:`~envfactory_assets.evaluation.task_draw.draw_block`, whose errors it raises).

    A hash order is a fixed sample that does not favour short or easy rows. ``first_turns_only`` keeps
    rows with ``turn_index == 0``: their prompts hold no earlier turns, so they are 2-8x shorter
    (measured: about 600-1,400 tokens against 2,000-5,000 for later turns), and CPU generation time is
    set by prompt length.
    """
    held = [
        r for r in rl_rows if stored_split(r) == "held_out" and (not first_turns_only or r.get("turn_index", 0) == 0)
    ]
    return draw_block(held, lambda r: r["id"], n, draw, "held-out synthetic tasks")


def as_agent_task(row: Mapping[str, Any], max_tools: int) -> tuple[AgentTask, dict[str, Any]]:
    """The agent task of an RL row and the row with the same restricted tool list.

    ``max_tools`` keeps the gold calls' tools plus distractors up to that many, as in training
    (:func:`~envfactory_assets.tooluse.tool_selection.restrict_tools`); 0 keeps every tool.
    """
    gold_names = {c["name"] for c in row["gold_calls"]}
    restricted = restrict_tools(
        {"id": row["id"], "messages": row["prompt"], "tools": row["tools"]}, max_tools, gold_names
    )
    task = AgentTask(
        task_id=row["id"],
        messages=list(row["prompt"]),
        tools=restricted["tools"],
        tags={"benchmark_overlap": list(row.get("benchmark_overlap") or []), "env_ids": list(row["env_ids"])},
    )
    return task, {**row, "tools": restricted["tools"]}


class SyntheticEpisode:
    """A :class:`TaskEpisode` seen through the agent loop's episode interface (one turn; task success and the
    hybrid reward)."""

    def __init__(self, episode: TaskEpisode) -> None:
        self._episode = episode

    def call(self, name: str, arguments: Any) -> str:
        return self._episode.call(name, arguments)

    def add_malformed(self, n: int = 1) -> None:
        self._episode.add_malformed(n)

    def end_turn(self, turn_index: int) -> None:
        """Nothing to do: an RL row is one turn, scored once at the end."""

    def score(self) -> dict[str, Any]:
        """Task success (``success``, ``calls_covered``, ``state_match``, ``read_only``) and the hybrid reward
        breakdown (``reward``, ``trace``, ``state``, ``n_malformed``...) in one dict."""
        row = self._episode.row
        final = self._episode.final_state_hashes()
        success = task_success(
            row["gold_calls"],
            self._episode.calls,
            final,
            self._episode.gold_state_hashes,
            self._episode.initial_state_hashes,
            masked_arguments=row.get("masked_arguments") or (),
        ).as_dict()
        success.pop("n_calls")  # the agent loop counts calls itself
        return {**self._episode.reward().as_dict(), **success}

    def close(self) -> None:
        self._episode.close()


def episode_factory(runner: TaskRunner, rows_by_task: Mapping[str, Mapping[str, Any]]) -> Any:
    """``open_episode`` for :func:`~envfactory_assets.evaluation.agent.run_agent` over synthetic tasks."""
    return lambda task: SyntheticEpisode(runner.episode(rows_by_task[task.task_id]))
