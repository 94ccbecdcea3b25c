"""The paper's QueryGen played by a model: the query writer (role ``"query_writer"``) and the refiner (role
``"refiner"``), each backed by any :class:`~envfactory_assets.llm.ChatBackend`.

The programmatic writer (:mod:`envfactory_assets.synth.refinement.phrasing`) and refiner
(:mod:`envfactory_assets.synth.refinement.operators`) stay the offline default and always run first: a model role
rewrites
their text, and every reply is validated before it replaces it (:func:`check_query`):

- the reply is one JSON object, ``{"query": ...}`` for the writer, ``{"operator": ..., "query": ...}`` for
  the refiner (``operator`` one of :data:`REFINER_OPERATORS`), the query a non-empty string;
- the query names no tool (a tool's function name written out: the user does not know the API);
- the query states no identifier the user could not know: a value of an identifier field in a result of this
  turn's calls or a later turn's (a row created later, a row the hidden state holds) that is neither in the
  query the model was given nor in the earlier turns' messages.

A refused reply is answered with the reason and asked again, up to ``attempts`` requests per turn (each retry
is a new request, so a cached reply is not simply replayed); then the programmatic text is kept. Every turn
a model role saw records the outcome and the refusals (:func:`role_outcomes` counts them for the assets).
Backend errors (:class:`~envfactory_assets.llm.LLMError`: budget, unreachable endpoint) are not refusals
and propagate, as the model solver's do: a run that configured a model should not silently run without it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envfactory_assets.synth.refinement.phrasing import stated_row_fields

#: Who writes a role's text: the programmatic templates (offline default) or the ``model_backend`` model.
QUERYGEN_CHOICES = ("programmatic", "model")
#: Requests per turn and role before the programmatic text is kept (the first try and two retries).
DEFAULT_ATTEMPTS = 3
#: The paper's refinement operators a model reply may name (operators a-d).
REFINER_OPERATORS = (
    "implicit_reference",
    "parameter_omission",
    "action_compression",
    "ambiguity",
    "implicit_constraint",
    "goal_merging",
    "goal_expansion",
)
#: Longest query a reply may give (characters): a longer one is a model rambling, not a request.
MAX_QUERY_CHARS = 2000
#: A refused reply is kept in the turn's record up to this many characters.
_REPLY_KEPT = 500
#: Identifier values shorter than this are not checked: "7" or "ab" occur in ordinary words and numbers.
_MIN_VALUE_CHARS = 3


class ReplyRefused(ValueError):
    """A model reply failed validation; the message says why (shown to the model on the retry)."""


@dataclass(frozen=True)
class TurnKnowledge:
    """What a request of one turn may and may not state.

    Attributes:
        known: texts the user may draw on (the query the model was given, earlier turns' queries, replies,
            call arguments and results as JSON).
        hidden: identifier values (as text) of results of this turn's and later turns' calls.
        tools: the function names of every tool of the trajectory's environments.
        required: values (as text) the request must state: a real MCP signature's field of a named row that no
            earlier result showed (:func:`required_values`); the agent has no other way to learn them.
    """

    known: tuple[str, ...]
    hidden: frozenset[str]
    tools: frozenset[str]
    required: tuple[str, ...] = ()


def required_values(calls: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The values (as text) of ``calls`` that a request must state besides their arguments
    (:func:`~envfactory_assets.synth.refinement.phrasing.stated_row_fields`: ``get_issue``'s ``owner`` and
    ``repo`` where the user named the issue by its id alone)."""
    return tuple(dict.fromkeys(str(v) for c in calls for _, v in stated_row_fields(dict(c))))


def identifier_values(outputs: Iterable[Any], id_fields: frozenset[str]) -> set[str]:
    """Text of every identifier in ``outputs`` (tool results): a string or whole-number leaf under a field in
    ``id_fields``, named ``id`` or ending in ``_id``, at least :data:`_MIN_VALUE_CHARS` long."""
    found: set[str] = set()

    def walk(value: Any, field: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            for v in value:
                walk(v, field)
        elif (
            isinstance(value, (str, int))
            and not isinstance(value, bool)
            and (field in id_fields or field == "id" or field.endswith("_id"))
            and len(str(value)) >= _MIN_VALUE_CHARS
        ):
            found.add(str(value))

    for output in outputs:
        walk(output, "")
    return found


def _written(needle: str, text: str) -> bool:
    """True when ``needle`` occurs in ``text`` as a whole token (not inside a longer identifier or word)."""
    return re.search(rf"(?<![\w]){re.escape(needle)}(?![\w])", text) is not None


def _checked_tool_names(names: Iterable[str]) -> frozenset[str]:
    """The tool names a query must not contain: names written like code (an underscore, a digit, a dot, a
    dash or an inner capital). A one-word lowercase name ("search") is an ordinary word of a request too."""
    return frozenset(n for n in names if not re.fullmatch(r"[a-z]+", n))


def check_query(query: Any, knowledge: TurnKnowledge) -> str:
    """``query`` stripped, when a user could send it; else raise :class:`ReplyRefused` saying why.

    Raises:
        ReplyRefused: not a non-empty string, longer than :data:`MAX_QUERY_CHARS`, names a tool of
            ``knowledge.tools``, states a ``knowledge.hidden`` value that no ``knowledge.known`` text holds, or
            leaves out a ``knowledge.required`` value.
    """
    if not isinstance(query, str) or not query.strip():
        raise ReplyRefused("the query is empty or not a string")
    query = query.strip()
    if len(query) > MAX_QUERY_CHARS:
        raise ReplyRefused(f"the query is longer than {MAX_QUERY_CHARS} characters")
    named = sorted(n for n in knowledge.tools if _written(n, query))
    if named:
        raise ReplyRefused(f"the query names a tool ({', '.join(named)}); a user does not know the tools' names")
    leaked = sorted(v for v in knowledge.hidden if _written(v, query) and not any(v in k for k in knowledge.known))
    if leaked:
        raise ReplyRefused(
            f"the query states {', '.join(leaked)}, which the user cannot know yet (only a tool "
            f"result shows it); describe the row instead"
        )
    missing = [v for v in knowledge.required if not _written(v, query)]
    if missing:
        raise ReplyRefused(
            f"the query leaves out {', '.join(missing)}, which the assistant needs and cannot look up; state it as "
            f"the given text does"
        )
    return query


def parse_reply(text: str, operators: Sequence[str] | None) -> tuple[str | None, Any]:
    """``(operator, query)`` of a reply holding one JSON object (a Markdown code fence around it is allowed).

    ``operators``: the operator names the reply must choose from, or None when the role names no operator
    (the writer; ``operator`` is then None).

    Raises:
        ReplyRefused: no JSON object, no ``query`` field, or (with ``operators``) an unknown operator.
    """
    body = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", text or "")
    try:
        reply = json.loads(body)
    except json.JSONDecodeError:
        start, end = body.find("{"), body.rfind("}")
        try:
            reply = json.loads(body[start : end + 1]) if 0 <= start < end else None
        except json.JSONDecodeError:
            reply = None
    if not isinstance(reply, dict):
        raise ReplyRefused("the reply is not one JSON object")
    if "query" not in reply:
        raise ReplyRefused('the JSON object has no "query" field')
    if operators is None:
        return None, reply["query"]
    if reply.get("operator") not in operators:
        raise ReplyRefused(f"operator {reply.get('operator')!r} is not one of {', '.join(operators)}")
    return reply["operator"], reply["query"]


def ask_until_valid(
    backend: Any,
    messages: list[dict[str, Any]],
    role: str,
    attempts: int,
    accept: Callable[[str], Any],
    max_tokens: int = 256,
) -> tuple[Any, list[dict[str, str]]]:
    """Ask ``backend`` (role ``role``) until ``accept(reply text)`` returns without :class:`ReplyRefused`, at
    most ``attempts`` requests; each retry adds the refused reply and the reason to the conversation.

    Returns ``(accepted value or None, refusals)``: each refusal is ``{"reason", "reply"}`` (the reply cut to
    500 characters). Backend errors (:class:`~envfactory_assets.llm.LLMError`) propagate.
    """
    refusals: list[dict[str, str]] = []
    chat = list(messages)
    for _ in range(attempts):
        text = backend.complete(chat, role=role, max_tokens=max_tokens, temperature=0.0).text or ""
        try:
            return accept(text), refusals
        except ReplyRefused as exc:
            refusals.append({"reason": str(exc), "reply": text[:_REPLY_KEPT]})
            chat += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"Refused: {exc}. Reply again with the JSON object only."},
            ]
    return None, refusals


def _id_fields(environments: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(meta["key"] for env in environments.values() for meta in env["tables"].values())


def _tool_names(environments: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    return _checked_tool_names(t["name"] for env in environments.values() for t in env["tools"])


def _earlier_texts(turns: Sequence[Mapping[str, Any]]) -> list[str]:
    """Everything the conversation showed before a turn: queries, replies, call arguments and results."""
    texts = []
    for t in turns:
        texts += [t.get("query_raw") or "", t["query"], t.get("assistant_summary") or ""]
        texts += [json.dumps([c["arguments"], c["output"]], ensure_ascii=False) for c in t["calls"]]
    return texts


def _prompt(
    turn: Mapping[str, Any], earlier: Sequence[Mapping[str, Any]], given: str, persona: str | None, field: str
) -> str:
    """The user message: the request to rewrite, the turn's calls with results, the conversation so far
    (queries and replies only: the user never sees the hidden state)."""
    return json.dumps(
        {
            "persona": persona or "a user",
            field: given,
            "calls": [
                {
                    "tool": c["name"],
                    "arguments": c["arguments"],
                    **({"also_needs": dict(stated_row_fields(dict(c)))} if stated_row_fields(dict(c)) else {}),
                    "result": c["output"],
                }
                for c in turn["calls"]
            ],
            "conversation_so_far": [{"user": t["query"], "assistant": t.get("assistant_summary", "")} for t in earlier],
        },
        ensure_ascii=False,
    )


_RULES = (
    "In the message, state every value the calls need that the user knows (a call's also_needs too), written "
    "exactly as in the given text; never state an identifier that only a tool result shows; never name a tool "
    "or function, nor mention tools, APIs or JSON. "
)

WRITER_SYSTEM = (
    "You write the message a user sends to an assistant that works for them using tools. You are the user "
    "({persona}): write in their voice. You get a draft request, the calls the assistant will make with their "
    "results, and the conversation so far. Rewrite the draft as the user would say it. "
    + _RULES
    + 'Reply with one JSON object only: {{"query": "..."}}'
)

REFINER_SYSTEM = (
    "You refine the message a user ({persona}) sends to an assistant that works for them using tools, so that "
    "it reads like a real person's request. Apply exactly one operator: implicit_reference or "
    "parameter_omission (name a row by what the user knows of it or by the conversation, leave out what the "
    "API assumes anyway), action_compression (leave out a lookup the assistant can do by itself), ambiguity or "
    "implicit_constraint (say 'my most recent ...', state a filter as an adjective, grounded in what the calls "
    "show), goal_merging or goal_expansion (ask for the goals as one request). "
    + _RULES
    + 'Reply with one JSON object only: {{"operator": one of {operators}, "query": "..."}}'
)


class ModelQueryWriter:
    """The query writer played by a chat model (role ``"query_writer"``): the raw query of a turn in the
    persona's voice, from the turn's executed calls and results and the programmatic raw query as a draft.

    Args:
        backend: a :class:`~envfactory_assets.llm.ChatBackend`.
        attempts: requests per turn before the draft is kept (>= 1).
    """

    name = "model"

    def __init__(self, backend: Any, *, attempts: int = DEFAULT_ATTEMPTS, max_tokens: int = 256) -> None:
        self.backend, self.attempts, self.max_tokens = backend, attempts, max_tokens

    def write(
        self,
        turn: Mapping[str, Any],
        earlier: Sequence[Mapping[str, Any]],
        environments: Mapping[str, Mapping[str, Any]],
        persona: str | None,
    ) -> tuple[str, dict[str, Any]]:
        """The raw query of ``turn`` and its record.

        Args:
            turn: the turn as synthesized (``query``: the programmatic draft, ``calls`` with ``output``).
            earlier: the trajectory's earlier turns (their queries, replies, calls and results are known).
            environments: the trajectory's environments (tool names, table keys).
            persona: who asks (``"a shop owner"``), or None.

        Returns ``(query, record)``: the model's query, or the draft when every reply was refused; the record
        is ``{"outcome": "model" | "fallback", "draft", "refusals": [{"reason", "reply"}]}``. Calibration later
        sets ``outcome`` to ``"reverted"`` (with ``model_query`` and ``reason``) when no solve attempt passes
        the model's query and the draft passes
        (:func:`~envfactory_assets.synth.refinement.calibrate.calibrate_trajectory`).
        """
        draft = turn["query"]
        knowledge = TurnKnowledge(
            known=(draft, *_earlier_texts(earlier)),
            hidden=frozenset(identifier_values((c["output"] for c in turn["calls"]), _id_fields(environments))),
            tools=_tool_names(environments),
            required=required_values(turn["calls"]),
        )
        messages = [
            {"role": "system", "content": WRITER_SYSTEM.format(persona=persona or "a user")},
            {"role": "user", "content": _prompt(turn, earlier, draft, persona, "draft")},
        ]
        query, refusals = ask_until_valid(
            self.backend,
            messages,
            "query_writer",
            self.attempts,
            lambda text: check_query(parse_reply(text, None)[1], knowledge),
            self.max_tokens,
        )
        record = {"outcome": "fallback" if query is None else "model", "draft": draft, "refusals": refusals}
        return (draft if query is None else query), record


class ModelRefiner:
    """The refiner played by a chat model (role ``"refiner"``): each programmatically refined turn's query is
    rewritten by one of :data:`REFINER_OPERATORS`, which the reply names.

    Args:
        backend: a :class:`~envfactory_assets.llm.ChatBackend`.
        attempts: requests per turn before the programmatic refined query is kept (>= 1).
    """

    name = "model"

    def __init__(self, backend: Any, *, attempts: int = DEFAULT_ATTEMPTS, max_tokens: int = 256) -> None:
        self.backend, self.attempts, self.max_tokens = backend, attempts, max_tokens

    def refine(
        self, turns: list[dict[str, Any]], environments: Mapping[str, Mapping[str, Any]], persona: str | None
    ) -> list[dict[str, Any]]:
        """Rewrite every turn's ``query`` in place (and return ``turns``), in order.

        Args:
            turns: refined turns (:func:`~envfactory_assets.synth.refinement.operators.refine_turns`: ``query``,
                ``query_raw``, ``calls``, ``assistant_summary``, ``operators``).
            environments: the trajectory's environments (tool names, table keys).
            persona: who asks, or None.

        Each turn gets ``refiner``: ``{"outcome": "model" | "unchanged" | "fallback", "operator", "refusals":
        [{"reason", "reply"}]}``. A kept rewrite replaces ``query`` and appends an operator record (the
        operator the model named, ``obtainable_from: "model refiner"``, ``query_before``, ``query_after``,
        ``refusals``: their count) that calibration reverts like any other when the query proves unsolvable.
        The model sees the earlier turns as rewritten; identifiers of this and later turns' results are
        refused unless the given query or an earlier turn holds them.
        """
        id_fields, tools = _id_fields(environments), _tool_names(environments)
        for t, turn in enumerate(turns):
            given = turn["query"]
            later = (c["output"] for u in turns[t:] for c in u["calls"])
            knowledge = TurnKnowledge(
                known=(given, *_earlier_texts(turns[:t])),
                hidden=frozenset(identifier_values(later, id_fields)),
                tools=tools,
                required=required_values(turn["calls"]),
            )
            messages = [
                {
                    "role": "system",
                    "content": REFINER_SYSTEM.format(
                        persona=persona or "a user", operators=", ".join(REFINER_OPERATORS)
                    ),
                },
                {"role": "user", "content": _prompt(turn, turns[:t], given, persona, "request")},
            ]

            def accept(text: str, knowledge: Any = knowledge) -> tuple[str, str]:
                operator, query = parse_reply(text, REFINER_OPERATORS)
                return operator, check_query(query, knowledge)

            reply, refusals = ask_until_valid(self.backend, messages, "refiner", self.attempts, accept, self.max_tokens)
            if reply is None:
                turn["refiner"] = {"outcome": "fallback", "operator": None, "refusals": refusals}
                continue
            operator, query = reply
            if query == given:
                turn["refiner"] = {"outcome": "unchanged", "operator": operator, "refusals": refusals}
                continue
            turn["refiner"] = {"outcome": "model", "operator": operator, "refusals": refusals}
            turn["query"] = query
            turn["operators"] = turn["operators"] + [
                {
                    "operator": operator,
                    "turn": t,
                    "call": None,
                    "argument": "",
                    "value": None,
                    "reference": query,
                    "obtainable_from": "model refiner",
                    "query_before": given,
                    "query_after": query,
                    "refusals": len(refusals),
                }
            ]
        return turns


def role_outcomes(turns: Iterable[Mapping[str, Any]], role: str) -> dict[str, int]:
    """Counts for asset metadata of one role's records (``turn[role]``, role ``"refiner"`` or
    ``"query_writer"``): turns per outcome and ``refusals`` (replies refused in all); {} when none."""
    records = [t[role] for t in turns if isinstance(t.get(role), Mapping)]
    if not records:
        return {}
    counts = Counter(r["outcome"] for r in records)
    return {**dict(sorted(counts.items())), "refusals": sum(len(r["refusals"]) for r in records)}
