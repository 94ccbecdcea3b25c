"""Conversational mode of calibration (EnvFactory paper, QueryGen): a query that leaves out a value the user
can give, a solver that may ask for it, and a simulated user who answers.

- :func:`omit_user_value` (operator ``user_clarification``): one required value of a ``create`` call that the
  tool graph flags user-providable and the query states literally ("with title 'Dune'") is dropped from the
  query; the turn keeps its gold calls and a ``fallback`` copy of itself without the omission.
- :class:`DialogueSolver` wraps any solver: when an attempt ends with a clarification ``question`` and no
  tool call, the simulated user (:mod:`envfactory_assets.synth.trajectories.simulated_user`) answers and the attempt
  restarts on the same fork with the question and answer appended to the conversation (at most
  ``max_questions`` rounds). The exchange is kept in the attempt's ``dialogue``.

Calibration (:func:`envfactory_assets.synth.refinement.calibrate.calibrate_trajectory`) solves such a turn with k
attempts like any refined query; when none passes, the omission is reverted with the reason. A kept turn
stores the exchange of its first passing attempt in ``clarification`` and
:func:`envfactory_assets.synth.trajectories.execution.to_messages` renders it after the turn's query.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Sequence
from typing import Any

from envfactory_assets.synth.refinement.phrasing import (
    COMMA_JOINTS,
    LAST_JOINTS,
    VALUE_CONNECTORS,
    field_labels,
    literal,
    spoken_forms,
)
from envfactory_assets.synth.refinement.solver.base import Attempt, Solver, SolverView, ToolCaller
from envfactory_assets.synth.trajectories.simulated_user import ProvidableFlags, SimulatedUser, UserContext

MAX_QUESTIONS = 2


def chosen_for_conversation(task_key: str, share: float) -> bool:
    """Whether a turn (by a stable key) is asked conversationally: a hash bucket below ``share`` (0..1)."""
    if share <= 0:
        return False
    return int(hashlib.sha256(f"conv/{task_key}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


#: The connectives that may follow a comma in a query (phrasing's), as a regex alternation.
_JOINTS = "|".join(re.escape(j) for j in (*COMMA_JOINTS, *(j for j in LAST_JOINTS if j.islower())))


def _without(query: str, segment: str) -> str | None:
    """``query`` with one ``segment`` (``"title 'Dune'"``) of a create request removed, its comma or "with"
    tidied; None when the segment is not there exactly once."""
    if query.count(segment) != 1:
        return None
    # "with title 'Dune', price 9" (or "... and price 9") -> "with price 9"; "with title 'Dune', then ..." ->
    # ", then ..."; "..., price 9" or "... and price 9" -> without it
    lead = re.search(re.escape(f" with {segment}") + rf"(, (?!(?:{_JOINTS}) )| and (?!(?:{_JOINTS}) ))?", query)
    if lead:
        return query[: lead.start()] + (" with " if lead.group(1) else "") + query[lead.end() :]
    for before in (f", {segment}", f" and {segment}"):
        if before in query:
            return query.replace(before, "", 1)
    return None


def omit_user_value(
    turn: dict[str, Any],
    tools: dict[str, dict[str, Any]],
    providable: ProvidableFlags,
    earlier: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The turn with one user-providable value left out of its refined ``query``, or None if none qualifies.

    A value qualifies when it is a required argument of a ``create`` call, came from the user (provenance
    ``user``), is flagged user-providable in the tool graph for that tool, is a string written literally
    once in the query, nothing else in the query repeats it, and no other call of the turn sets a parameter
    of that name (the user's answer names the parameter, not the call), and no ``earlier`` text of the
    conversation (the earlier turns' requests) states it in any case: a clarification asks only for what the
    conversation has not given. The returned turn (a copy) gets a
    ``user_clarification`` operator (argument, value, query before and after) and ``fallback`` = the turn as
    it was.

    Args:
        turn: a refined turn (``query``, ``calls`` with ``provenance``, ``operators``).
        tools: tool specs by name (``input_schema``, ``kind``).
        providable: :data:`~envfactory_assets.synth.trajectories.simulated_user.ProvidableFlags`.
    """
    for call in turn["calls"]:
        tool = tools.get(call["name"])
        if tool is None or tool["kind"] != "create":
            continue
        required = tool["input_schema"].get("required") or []
        for arg in required:
            value = call["arguments"].get(arg)
            if (
                not isinstance(value, str)
                or not value
                or arg not in providable.get(call["name"], ())
                or call["provenance"].get(arg, {}).get("source") != "user"
                or sum(1 for c in turn["calls"] if arg in c["arguments"]) > 1
            ):
                continue  # (a name several calls of the turn set would make the user's answer ambiguous)
            schema = tool["input_schema"]["properties"].get(arg, {})
            # the refined query may label the field by its description and write the value as spoken
            segments = [
                f"{lab} {c}{v}"
                for lab in field_labels(arg, schema)
                for c in VALUE_CONNECTORS
                for v in {literal(value), *spoken_forms(value)}
            ]
            query = next((q for q in (_without(turn["query"], seg) for seg in segments) if q is not None), None)
            if query is None or value.lower() in query.lower() or any(value.lower() in e.lower() for e in earlier):
                continue
            new = copy.deepcopy({k: v for k, v in turn.items() if k != "fallback"})
            new["fallback"] = turn
            new["query"] = query
            new["operators"] = new.get("operators", []) + [
                {
                    "operator": "user_clarification",
                    "turn": turn.get("turn_index"),
                    "call": None,
                    "argument": arg,
                    "value": value,
                    "reference": "asked of the simulated user",
                    "obtainable_from": "simulated user",
                    "query_before": turn["query"],
                    "query_after": query,
                }
            ]
            return new
    return None


class DialogueSolver:
    """A solver that lets ``solver`` ask the simulated ``user`` up to ``max_questions`` clarification
    questions per attempt (see the module docstring); ``name`` is the wrapped solver's."""

    def __init__(
        self, solver: Solver, user: SimulatedUser, context: UserContext, max_questions: int = MAX_QUESTIONS
    ) -> None:
        self.solver, self.user, self.context, self.max_questions = solver, user, context, max_questions
        self.name = solver.name

    def attempt(self, view: SolverView, call_tool: ToolCaller, seed: int) -> Attempt:
        dialogue: list[dict[str, str]] = []
        att = self.solver.attempt(view, call_tool, seed)
        for _ in range(self.max_questions):
            if not att.question or att.calls:
                break
            answer = self.user.reply(att.question, self.context)
            dialogue += [{"role": "assistant", "content": att.question}, {"role": "user", "content": answer}]
            view = SolverView(view.messages + tuple(dialogue[-2:]), view.tools)
            att = self.solver.attempt(view, call_tool, seed)
        att.dialogue = dialogue
        return att


def first_passing_dialogue(solve: dict[str, Any]) -> list[dict[str, str]]:
    """The clarification exchange of the first passing attempt of a solve record ([] if none asked)."""
    return next((list(a.get("dialogue") or []) for a in solve["attempts"] if a["passed"]), [])


def well_formed(messages: list[dict[str, Any]]) -> bool:
    """True when a clarification exchange alternates assistant question (text, no tool calls, ends with "?")
    and user answer, and is not empty."""
    if not messages or len(messages) % 2:
        return False
    return all(
        q.get("role") == "assistant"
        and not q.get("tool_calls")
        and re.search(r"\?\s*$", q["content"] or "")
        and a.get("role") == "user"
        and a.get("content")
        for q, a in zip(messages[::2], messages[1::2], strict=False)
    )
