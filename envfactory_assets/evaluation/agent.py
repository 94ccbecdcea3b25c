"""The evaluation agent loop: generate, parse tool calls, execute them in the task's episode, repeat.

All tasks of one (model, seed) advance in lock step, so every generation step is one batch over the
conversations still running (batched generation is what makes a CPU evaluation affordable). Tool calls
are parsed with :func:`envfactory_assets.tooluse.tool_calls.parse_tool_calls` (JSON only, never ``eval``)
and executed only through the episode's ``call`` method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from envfactory_assets.tooluse.tool_calls import parse_tool_calls

TRACE_CHARS = 600  # each message of a stored trace is cut to this many characters


class Episode(Protocol):
    """What the loop needs from a task's environment (synthetic :class:`TaskEpisode` or BFCL)."""

    def call(self, name: str, arguments: Any) -> str: ...

    def add_malformed(self, n: int = 1) -> None: ...

    def end_turn(self, turn_index: int) -> None: ...

    def score(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass
class AgentTask:
    """One evaluation task.

    Attributes:
        task_id: stable id (an ``rl_dataset`` id or a BFCL entry id).
        messages: the conversation up to and including the first user message (OpenAI format).
        tools: OpenAI function tools offered to the model.
        later_user_turns: user messages of later turns, sent after the model ends each turn (BFCL).
        tags: anything the caller wants kept with the result (e.g. ``benchmark_overlap``).
    """

    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    later_user_turns: list[str] = field(default_factory=list)
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Running:
    task: AgentTask
    episode: Episode
    messages: list[dict[str, Any]]
    turn: int = 0
    rounds: int = 0
    n_calls: int = 0
    done: bool = False


def _short(message: dict[str, Any]) -> dict[str, Any]:
    out = dict(message)
    if isinstance(out.get("content"), str) and len(out["content"]) > TRACE_CHARS:
        out["content"] = out["content"][:TRACE_CHARS] + "...(cut)"
    return out


def run_agent(
    generate: Callable[[list[tuple[list[dict[str, Any]], list[dict[str, Any]]]], int], list[str]],
    tasks: list[AgentTask],
    open_episode: Callable[[AgentTask], Episode],
    seed: int,
    max_tool_rounds: int = 3,
) -> list[dict[str, Any]]:
    """Run every task to its end with one policy and one sampling seed.

    A turn ends when the model answers without a tool call or after ``max_tool_rounds`` assistant
    messages that held calls; then the episode's ``end_turn`` runs and the next user message (if any) is
    appended. Tool-call blocks that do not parse count as malformed calls (``add_malformed``).

    Args:
        generate: ``(conversations, seed) -> texts``, e.g. :meth:`Policy.generate`.
        tasks: the tasks.
        open_episode: gives each task a fresh episode (own state; closed here when the task ends).
        seed: sampling seed; generation step ``k`` uses ``seed * 1000 + k``.
        max_tool_rounds: assistant messages with tool calls allowed per turn (>= 1).

    Returns:
        One dict per task, in task order: ``{"task_id", "seed", "score": episode.score(), "n_calls",
        "turns": int, "trace": [messages after the prompt, each cut to 600 characters], "tags"}``.

    Raises:
        ValueError: ``max_tool_rounds`` < 1.
    """
    if max_tool_rounds < 1:
        raise ValueError(f"max_tool_rounds must be >= 1, got {max_tool_rounds}")
    running = []
    try:
        for task in tasks:
            running.append(_Running(task, open_episode(task), [dict(m) for m in task.messages]))
        step = 0
        while active := [r for r in running if not r.done]:
            texts = generate([(r.messages, r.task.tools) for r in active], seed * 1000 + step)
            step += 1
            for r, text in zip(active, texts, strict=True):
                _advance(r, text, max_tool_rounds)
        return [
            {
                "task_id": r.task.task_id,
                "seed": seed,
                "score": r.episode.score(),
                "n_calls": r.n_calls,
                "turns": r.turn,
                "tags": r.task.tags,
                "trace": [_short(m) for m in r.messages[len(r.task.messages) :]],
            }
            for r in running
        ]
    finally:
        for r in running:
            r.episode.close()


def _advance(r: _Running, text: str, max_tool_rounds: int) -> None:
    parsed = parse_tool_calls(text)
    if parsed.format_errors:
        r.episode.add_malformed(parsed.format_errors)
    if parsed.calls:
        ids = [f"call_{r.n_calls + i + 1}" for i in range(len(parsed.calls))]
        r.messages.append(
            {
                "role": "assistant",
                "content": parsed.content,
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for i, c in zip(ids, parsed.calls, strict=True)
                ],
            }
        )
        for call_id, call in zip(ids, parsed.calls, strict=True):
            result = r.episode.call(call["name"], call["arguments"])
            r.messages.append({"role": "tool", "tool_call_id": call_id, "name": call["name"], "content": result})
        r.n_calls += len(parsed.calls)
        r.rounds += 1
        if r.rounds < max_tool_rounds:
            return
    else:
        r.messages.append({"role": "assistant", "content": parsed.content or text.strip()})
    r.episode.end_turn(r.turn)
    r.turn += 1
    r.rounds = 0
    if r.turn <= len(r.task.later_user_turns):
        r.messages.append({"role": "user", "content": r.task.later_user_turns[r.turn - 1]})
    else:
        r.done = True
