"""The OpenEnv action, observation and state of an RL task episode (subclasses of ``openenv-core``'s models).

An episode: ``reset`` opens a task (``task_id``, or one drawn with ``seed``, optionally within a ``split``)
and observes its ``prompt`` (the conversation up to the user's request, OpenAI chat messages) and ``tools``
(OpenAI function tools); each ``step`` is one :class:`ToolCallAction`: a tool call, a call the client could not
parse, or the final answer. The final answer (or the step limit) ends the episode: its observation has
``done``, the ``reward`` the server computed, the reward's terms and the state diff.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

ACTION_KINDS = ("tool_name", "unparsed_call", "final_answer")


class ToolCallAction(Action):
    """One step of an episode: exactly one of ``tool_name`` (with ``arguments``), ``unparsed_call`` or
    ``final_answer``."""

    tool_name: str | None = Field(default=None, min_length=1, max_length=256, description="the tool to call")
    arguments: Any = Field(
        default_factory=dict,
        description="the call's arguments, a JSON object; anything else is a malformed call, not run",
    )
    unparsed_call: str | None = Field(
        default=None,
        description="text of a tool-call block the client's parser could not read: counted as a malformed call "
        "(the format penalty), nothing runs",
    )
    final_answer: str | None = Field(
        default=None, description="the assistant's final answer: ends the episode and scores it"
    )
    episode_id: str | None = Field(
        default=None,
        max_length=255,
        description="the episode to act in: over HTTP the episode_id the reset named; over a WebSocket the "
        "connection's own episode by default",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> ToolCallAction:
        given = [name for name in ACTION_KINDS if getattr(self, name) is not None]
        if len(given) != 1:
            # a PydanticCustomError, not a ValueError: OpenEnv sends the validation errors back as JSON, and an
            # exception object in them cannot be serialized (its WebSocket would close instead of answering)
            raise PydanticCustomError(
                "action_kind",
                "an action is exactly one of {kinds}; got {given}",
                {"kinds": ", ".join(ACTION_KINDS), "given": ", ".join(given) if given else "none of them"},
            )
        return self


class EpisodeObservation(Observation):
    """What the client sees after a reset or a step (``done`` and ``reward`` are OpenEnv's own fields; the
    reward is set only on the step that ends the episode)."""

    episode_id: str | None = Field(default=None, description="the episode's id")
    task_id: str | None = Field(default=None, description="the rl_dataset row of the episode")
    env_ids: list[str] = Field(default_factory=list, description="the environments the task runs in")
    prompt: list[dict[str, Any]] | None = Field(
        default=None, description="on reset: the conversation up to the user's request (OpenAI chat messages)"
    )
    tools: list[dict[str, Any]] | None = Field(default=None, description="on reset: the task's OpenAI function tools")
    tool_name: str | None = Field(default=None, description="the tool the step called")
    result: str | None = Field(default=None, description="the call's result text, as the policy sees it in training")
    error: dict[str, Any] | None = Field(
        default=None, description="{type, message} when the step was refused or failed"
    )
    step_count: int = Field(default=0, ge=0, description="tool calls and malformed calls so far")
    end_reason: str | None = Field(
        default=None, description="why the episode ended: final_answer, step_limit or episode_lost"
    )
    reward_breakdown: dict[str, Any] | None = Field(default=None, description="the reward's terms, at the end")
    state_diff: dict[str, Any] | None = Field(
        default=None, description="rows added, removed and changed in each environment, at the end"
    )


class EpisodeState(State):
    """The episode's bookkeeping (never its gold calls or gold state)."""

    task_id: str | None = Field(default=None, description="the rl_dataset row of the episode")
    env_ids: list[str] = Field(default_factory=list, description="the environments the task runs in")
    done: bool = Field(default=False, description="the episode has ended")
    n_calls: int = Field(default=0, ge=0, description="well-formed calls executed")
    n_malformed: int = Field(default=0, ge=0, description="malformed calls counted")
