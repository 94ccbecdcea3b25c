"""The simulated user of the conversational mode (EnvFactory paper, QueryGen: "a simulated user who sees the
hidden state and only gives values that are user-providable").

The user knows the turn's goal (its gold calls, drawn from the hidden state) and the hidden state itself, but
answers a clarification question only with values of parameters the tool graph flags ``user_providable``
(``tool_graph_parameters.user_providable``); a question about anything else (an identifier, a value only the
system knows) gets :data:`REFUSAL`. Two implementations share :class:`SimulatedUser`:
:class:`ProgrammaticUser` (offline default) and :class:`ModelUser` (any :class:`~envfactory_assets.llm.
ChatBackend`, role ``"user"``), whose reply is checked so it never carries a value the user may not give.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from envfactory_assets.synth.refinement.phrasing import literal, spoken_field, spoken_question_label, words

REFUSAL = "I don't know that; please look it up with the tools."

#: ``{tool_name: frozenset of input parameter names flagged user_providable}``.
ProvidableFlags = Mapping[str, frozenset[str]]


def providable_flags(graph: Any) -> dict[str, frozenset[str]]:
    """User-providable input parameters per tool name, from a :class:`~envfactory_assets.graph.build.ToolGraph`
    (the graph's parameter flags; node ids are ``"{env_id}.{tool_name}"``, tool names are unique per chain)."""
    out: dict[str, set[str]] = {}
    for node in graph.node_ids:
        name = graph.graph.nodes[node]["tool_name"]
        out.setdefault(name, set()).update(p["name"] for p in graph.inputs(node) if p["user_providable"])
    return {k: frozenset(v) for k, v in out.items()}


@dataclass(frozen=True)
class UserContext:
    """What the simulated user sees for one turn.

    Attributes:
        goal_calls: the turn's gold calls (``{"name", "arguments", ...}``): what the user wants done.
        state: the hidden state at the start of the turn (``{env_id: saved_state}``).
        providable: :data:`ProvidableFlags` of the tool graph.
    """

    goal_calls: tuple[Mapping[str, Any], ...]
    state: Mapping[str, Any] = field(default_factory=dict)
    providable: ProvidableFlags = field(default_factory=dict)

    def providable_values(self) -> dict[str, Any]:
        """``{parameter: value}`` of the goal's arguments the user may give (first call that sets each)."""
        out: dict[str, Any] = {}
        for call in self.goal_calls:
            allowed = self.providable.get(call["name"], frozenset())
            for name, value in call["arguments"].items():
                if name in allowed and name not in out:
                    out[name] = value
        return out

    def withheld_values(self) -> list[Any]:
        """Scalar values of the goal's arguments the user may not give (not flagged user-providable)."""
        given = set(map(_text, self.providable_values().values()))
        return [
            v
            for c in self.goal_calls
            for n, v in c["arguments"].items()
            if n not in self.providable.get(c["name"], frozenset())
            and _text(v) not in given
            and not isinstance(v, (dict, list, bool))
        ]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def answer_sentence(parameter: str, value: Any) -> str:
    """How a user states one value, naming the field as the question did
    (:func:`~envfactory_assets.synth.refinement.phrasing.spoken_question_label`, same literal style as the
    queries): ``"The title is 'Dune'."``, ``"The QR number is 'Q1'."``; a flag answers its yes/no question:
    ``"Yes, it should be active."``, ``"No, it should not have children."``, ``"Yes, please notify."``."""
    label = spoken_question_label(parameter, _schema_of(value))
    if label.startswith("whether it is ") or label.startswith("whether it has "):
        verb = "be" if label.startswith("whether it is ") else "have"
        what = label.split(" ", 3)[3]
        return f"Yes, it should {verb} {what}." if value else f"No, it should not {verb} {what}."
    if label.startswith("whether to "):
        what = label[len("whether to ") :]
        return f"Yes, please {what}." if value else f"No, do not {what}."
    return f"The {label} is {literal(value)}."


def _schema_of(value: Any) -> dict[str, Any]:
    return {"type": "boolean"} if isinstance(value, bool) else {}


def asked_labels(parameter: str, value: Any) -> list[str]:
    """The ways a clarification question may name ``parameter`` (lowercase, most specific first): the question
    label of :func:`~envfactory_assets.synth.refinement.phrasing.spoken_question_label` as the programmatic
    solver asks it (a flag: ``"should it be active"``), its spoken form and its name's own words."""
    label = spoken_question_label(parameter, _schema_of(value)).lower()
    forms = []
    if label.startswith("whether it is "):
        forms.append("should it be " + label[len("whether it is ") :])
    elif label.startswith("whether it has "):
        forms.append("should it have " + label[len("whether it has ") :])
    elif label.startswith("whether to "):
        forms.append("should i " + label[len("whether to ") :])
    forms += [label, spoken_field(parameter).lower(), words(parameter).lower()]
    return list(dict.fromkeys(forms))


def reveals_withheld(reply: str, context: UserContext) -> bool:
    """True when ``reply`` contains the text of a value the user may not give (values of 3+ characters)."""
    return any(len(_text(v)) >= 3 and _text(v) in reply for v in context.withheld_values())


class SimulatedUser(Protocol):
    """A simulated user role: answers one clarification question of the assistant."""

    name: str

    def reply(self, question: str, context: UserContext) -> str: ...


class ProgrammaticUser:
    """Answers with :func:`answer_sentence` for each user-providable goal parameter the question names
    (:func:`asked_labels`, as a whole phrase; longest first, a mention counted once, in the question's order);
    :data:`REFUSAL` when it names none."""

    name = "programmatic"

    def reply(self, question: str, context: UserContext) -> str:
        text = " " + re.sub(r"[^a-z0-9 ]+", " ", question.lower()) + " "
        found: list[tuple[int, str]] = []
        candidates = [
            (label, name, value)
            for name, value in context.providable_values().items()
            for label in asked_labels(name, value)
        ]
        answered: set[str] = set()
        for label, name, value in sorted(candidates, key=lambda c: -len(c[0])):
            said = " " + re.sub(r"[^a-z0-9 ]+", " ", label) + " "
            at = text.find(said)
            if name in answered or at < 0:
                continue
            answered.add(name)
            found.append((at, answer_sentence(name, value)))
            text = text[:at] + " " * len(said) + text[at + len(said) :]
        return " ".join(sentence for _, sentence in sorted(found)) if found else REFUSAL


class ModelUser:
    """A simulated user played by a chat model (role ``"user"``).

    The model is shown only the user-providable values of the goal (never the identifiers or other hidden
    values), and its reply is checked with :func:`reveals_withheld` anyway: a reply that carries a withheld
    value becomes :data:`REFUSAL`.
    """

    name = "model"

    def __init__(self, backend: Any, *, max_tokens: int = 128, temperature: float = 0.0) -> None:
        self.backend, self.max_tokens, self.temperature = backend, max_tokens, temperature

    def reply(self, question: str, context: UserContext) -> str:
        values = {k: v for k, v in context.providable_values().items()}
        system = (
            "You are a user talking to an assistant that works for you. Values you know and may share "
            f"(JSON): {json.dumps(values, ensure_ascii=False)}. Answer the assistant's question in one short "
            f"sentence using only these values, written in single quotes. If it asks for anything else, "
            f"reply exactly: {REFUSAL}"
        )
        reply = self.backend.complete(
            [{"role": "system", "content": system}, {"role": "user", "content": question}],
            role="user",
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )
        text = (reply.text or "").strip()
        return REFUSAL if not text or reveals_withheld(text, context) else text
