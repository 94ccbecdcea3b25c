"""OpenEnv's ``EnvClient`` for ``envfactory serve-openenv``: typed actions, observations and state.

Usage (OpenEnv's client is async; ``.sync()`` gives its synchronous wrapper)::

    from envfactory_assets.serving.openenv_client import RLTaskEnv, ToolCallAction

    with RLTaskEnv(base_url="http://127.0.0.1:8000").sync() as env:
        first = env.reset(seed=7, split="train")          # first.observation.prompt / .tools
        env.step(ToolCallAction(tool_name="get_book", arguments={"book_id": "boo_00007"}))
        end = env.step(ToolCallAction(final_answer="Done."))
        end.reward, end.observation.reward_breakdown, end.observation.state_diff

OpenEnv's ``GenericEnvClient`` works as well, with plain dicts.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from envfactory_assets.serving.openenv_models import EpisodeObservation, EpisodeState, ToolCallAction


class RLTaskEnv(EnvClient[ToolCallAction, EpisodeObservation, EpisodeState]):
    """An OpenEnv client of one episode at a time over one WebSocket connection (``base_url``: the server's
    ``http://`` or ``ws://`` address)."""

    def _step_payload(self, action: ToolCallAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"} if not action.metadata else set())

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[EpisodeObservation]:
        observation = EpisodeObservation(
            **payload.get("observation", {}), done=payload.get("done", False), reward=payload.get("reward")
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> EpisodeState:
        return EpisodeState(**payload)


__all__ = ["RLTaskEnv", "ToolCallAction", "EpisodeObservation", "EpisodeState"]
