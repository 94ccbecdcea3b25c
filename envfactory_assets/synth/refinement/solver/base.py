"""What every solver sees and returns (EnvFactory paper, QueryGen solvability calibration).

Every solver sees exactly what a real agent would: a :class:`SolverView` (the conversation so far, ending
with the user's query, and the OpenAI tool specs) and a tool caller bound to its own forked episode.
The gold calls, the sampled target tools and the hidden state are not in the view, so no solver can use
them. Two solvers share the :class:`Solver` protocol: the programmatic solver (offline default,
:mod:`.programmatic`) and the model solver (:mod:`.model`); :mod:`.attempts` runs ``k`` attempts of one
on forks of a turn's starting state and :mod:`.judge` accepts or rejects each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from envfactory_assets.synth.trajectories.execution import to_messages

#: ``call_tool(name, arguments) -> {"ok": True, "output": ...} | {"ok": False, "error": {...}}``.
ToolCaller = Callable[[str, dict[str, Any]], dict[str, Any]]

DEFAULT_K = 4  # paper: four solve attempts per turn


@dataclass(frozen=True)
class SolverView:
    """Everything a solver may see for one turn.

    Attributes:
        messages: OpenAI chat messages of the conversation so far (system, earlier user queries, assistant
            tool calls, tool results, assistant replies), ending with the current user query.
        tools: OpenAI function specs (``{"type": "function", "function": {name, description, parameters}}``).
    """

    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]

    @classmethod
    def for_turn(
        cls, earlier_turns: Sequence[Mapping[str, Any]], query: str, tools: Sequence[Mapping[str, Any]]
    ) -> SolverView:
        """The view of a turn: the earlier turns rendered as chat (their queries, calls, results and replies)
        followed by ``query``; nothing of the turn itself (its gold calls, results, states) is included."""
        messages = to_messages(list(earlier_turns)) + [{"role": "user", "content": query}]
        return cls(tuple(messages), tuple(tools))

    @property
    def query(self) -> str:
        """The last user message (the turn's query)."""
        return next((m["content"] for m in reversed(self.messages) if m.get("role") == "user"), "")


@dataclass
class Attempt:
    """One solve attempt: ``calls`` (``{"name", "arguments", "ok", "output"|"error"}`` in order), the
    assistant's closing ``answer``, and the attempt episode's ``final_state_hash`` (sha256 hex).

    Conversational mode (:mod:`envfactory_assets.synth.trajectories.conversation`): ``question`` is a clarification the
    solver asks instead of calling tools (set only when ``calls`` is empty); ``dialogue`` holds the
    clarification messages exchanged before the calls (assistant question, user answer, ...).
    """

    calls: list[dict[str, Any]] = field(default_factory=list)
    answer: str = ""
    final_state_hash: str = ""
    question: str = ""
    dialogue: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {"calls": self.calls, "answer": self.answer, "final_state_hash": self.final_state_hash}
        if self.dialogue or self.question:
            out.update(dialogue=self.dialogue, question=self.question)
        return out


class Solver(Protocol):
    """A solver role: plays one attempt of a turn through ``call_tool``; ``seed`` makes attempts differ."""

    name: str

    def attempt(self, view: SolverView, call_tool: ToolCaller, seed: int) -> Attempt: ...
