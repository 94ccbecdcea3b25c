"""The programmatic solver (offline default of the paper's solvability calibration).

:class:`ProgrammaticSolver` reads the query and the tool descriptions, resolves references against earlier
tool results, and samples among tied candidates with its own seed per attempt; in conversational mode it
asks a :func:`clarification_question` for values the query leaves out.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envfactory_assets.runtime.errors import ErrorType
from envfactory_assets.sources.actions import VERBS as ACTION_VERBS
from envfactory_assets.sources.names import name_nouns, singular, speakable
from envfactory_assets.synth.refinement.phrasing import (
    COMMA_JOINTS,
    LAST_JOINTS,
    SENTENCE_JOINTS,
    SPOKEN_DATE,
    field_labels,
    flag_predicate,
    parse_spoken_value,
    spoken_field,
    spoken_question_label,
)
from envfactory_assets.synth.refinement.solver.base import Attempt, SolverView, ToolCaller

MAX_TOOL_TRIES = 3  # tools the programmatic solver tries for one request when a call answers with an error


# ----------------------------------------------------------------------------- reading tool specs
_VERBS: dict[str, tuple[str, ...]] = {
    "list": ("list", "show", "search", "find", "browse", "query", "all"),
    "get": ("get", "look", "retrieve", "fetch", "read", "detail", "details", "describe", "view"),
    "create": ("create", "add", "new", "make", "register", "insert", "post"),
    "update": ("update", "change", "set", "edit", "modify", "patch", "rename"),
    "delete": ("delete", "remove", "cancel", "drop", "erase", "close"),
    "count": ("count", "many", "tally"),
}
_VERB_OF = {w: action for action, ws in _VERBS.items() for w in ws}
# a state transition's verb ("archive", "enable") is its own action; "cancel" and "close" keep reading as a
# delete's words, and the verb's presence in a tool's own name tells cancel_order from delete_order
_VERB_OF.update({verb: verb for verb in ACTION_VERBS if verb not in _VERB_OF})
#: actions whose tool names one row by its identifier
_KEYED_ACTIONS = frozenset({"get", "update", "delete", *ACTION_VERBS})
#: parameters that take a search text, which a request gives after "for", "matching" or "mentioning"
_QUERY_PARAMS = ("query", "q", "search", "keyword", "keywords", "text", "term")
_STOP = frozenset(
    "a an the of in on to by for and or with me its it that this then is are be optionally "
    "filtered tell you i my your at most up".split()
)
_WORD_RE = re.compile(r"[a-z0-9]+")
_LITERAL = r"'(?:.*?)'(?=[\s,.:)!?]|$)|" + SPOKEN_DATE + r"|-?\d+(?:\.\d+)?(?![\d:])|true|false|\byes\b|\bno\b"
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


@functools.lru_cache(maxsize=32768)
def _pattern(source: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile(source, flags)``, kept for the process: the solver builds its patterns from parameter
    labels and row nouns, more distinct ones than ``re``'s own cache holds, so they were recompiled on
    nearly every attempt."""
    return re.compile(source, flags)


def _glued(stem: str) -> str:
    r"""A regex for ``stem`` also written as two words (``"rateplan"`` -> ``rat\s?e\s?p\s?lan``): the writer
    splits a glued table name where the spec writes its parts apart ("rate plans"), parts of 3+ letters."""
    return "".join(re.escape(c) + (r"\s?" if 3 <= i + 1 <= len(stem) - 3 else "") for i, c in enumerate(stem))


def _word_re(word: str) -> str:
    """A regex for one row word, singular or plural, glued or split (:func:`_glued`)."""
    stem = singular(word)
    return _glued(stem)[:-1] + "(?:y|ies)" if stem.endswith("y") else _glued(stem) + "(?:e?s)?"


@functools.lru_cache(maxsize=32768)
def _thing_re(key_or_table: str) -> str:
    r"""A regex for a row noun as people write it, from an identifier or table name: ``"webhooks_2_id"`` ->
    ``webhooks?(?:\s+2)?``; numbers and vowel-less abbreviations are optional, plurals allowed, a glued word
    may be written as two ("rate plan" for ``rateplan_id``)."""
    name = key_or_table[:-3] if key_or_table.endswith("_id") else key_or_table
    toks = [t for t in re.split(r"[_\s]+", name.lower()) if t]
    parts = []
    for t in toks:
        if t.isdigit() or (len(t) <= 3 and not re.search(r"[aeiouy]", t)):
            parts.append(rf"(?:\s+{re.escape(t)})?")
        else:
            parts.append((r"\s+" if parts and not parts[-1].startswith("(?:\\s+") else "") + _word_re(t))
    text = "".join(parts).lstrip()
    return text if text.replace("(?:", "").strip() else re.escape(_words(name))


def _tokens(text: str) -> list[str]:
    return [singular(w) for w in _WORD_RE.findall(text.lower().replace("_", " "))]


def _words(name: str) -> str:
    return name.replace("_", " ").strip().lower()


@dataclass(frozen=True)
class _ToolInfo:
    name: str
    action: str | None
    nouns: frozenset[str]
    params: dict[str, dict[str, Any]]
    required: frozenset[str]
    #: the nouns of the tool's own name (``appointment``, ``template`` for ``appointment_templates_list``)
    name_nouns: frozenset[str] = frozenset()
    #: the action words of the tool's own name (``cancel`` for ``cancel_order``)
    name_verbs: frozenset[str] = frozenset()
    description: str = ""

    @functools.cached_property
    def key(self) -> str | None:
        """The identifier parameter naming the tool's own row (``book_id`` for a book tool), if any; for a row
        read, changed or removed by an identifier no word of the tool names (``b_id`` of
        ``storage_buckets_get``), its first required such identifier."""
        ids = [
            p
            for p in self.params
            if p.endswith("_id") and all(t in self.nouns for t in _tokens(p[:-3]) if not t.isdigit())
        ]
        if not ids and self.action in _KEYED_ACTIONS:
            ids = [p for p in self.params if p.endswith("_id") and p in self.required and not speakable(p[:-3])][:1]
        return min(ids, key=lambda p: (p not in self.required, len(p))) if ids else None

    @functools.cached_property
    def transfer_amount(self) -> str | None:
        """The parameter of the amount a transfer tool moves, as its description says ("How much balance to
        move ..."), or None for a tool that moves no amount."""
        return next(
            (
                p
                for p, sch in self.params.items()
                if sch.get("type") in ("integer", "number") and _MOVES_AMOUNT.match(str(sch.get("description") or ""))
            ),
            None,
        )

    @functools.cached_property
    def transfer_destination(self) -> str | None:
        """The parameter naming the row a transfer tool moves its amount to, as its description says
        ("Identifier of the bin the amount moves to."), or None."""
        return next((p for p, sch in self.params.items() if _MOVES_TO.search(str(sch.get("description") or ""))), None)


#: what a transfer tool's parameters say of themselves (:func:`~envfactory_assets.envgen.tools.transfer_tool`)
_MOVES_AMOUNT = re.compile(r"^How much\b.*\bto move\b")
_MOVES_TO = re.compile(r"\bthe amount moves to\.?$")
#: an amount as a request to move it states it: right before the row it leaves or reaches ("move 33 from",
#: "deposit 20 into")
_AMOUNT_MOVED = re.compile(r"(?<![\w'.:-])(\d+(?:\.\d+)?)\s+(?:from|into|to|out\s+of)\b", re.IGNORECASE)


#: The parts of a derived tool description that list its parameters ("Requires its org ID, name and model.",
#: ", optionally filtered by name, model"): they say what the tool takes, not what it acts on, so their words
#: are no nouns of the tool (the parameters a request names are scored as parameters).
_PARAMETER_LISTING = re.compile(r"\bRequires its [^.]*\.?|,?\s*optionally filtered by [^.]*")


def _tool_info(spec: Mapping[str, Any]) -> _ToolInfo:
    fn = spec.get("function", spec)
    description = str(fn.get("description") or "")
    name_tokens, desc_tokens = _tokens(fn["name"]), _tokens(_PARAMETER_LISTING.sub(" ", description))
    action = next((_VERB_OF[t] for t in name_tokens if t in _VERB_OF), None) or next(
        (_VERB_OF[t] for t in desc_tokens if t in _VERB_OF), None
    )
    words = [t for t in name_tokens + desc_tokens if t not in _STOP and not t.isdigit()]
    # "web_hook" and "webhooks", "data_sources" and "datasources": adjacent words joined count as nouns too
    joined = [singular(a + b) for a, b in zip(name_tokens, name_tokens[1:], strict=False)]
    nouns = frozenset(t for t in words + joined if t not in _VERB_OF)
    params = fn.get("parameters") or {}
    required = frozenset(params.get("required") or [])
    props = dict(params.get("properties") or {})
    if (
        action == "get"
        and not required
        and (
            any(p in props for p in ("limit", "page", "page_size", "offset"))
            or re.search(r"[a-z]s$", fn["name"].lower())
        )
    ):
        action = "list"  # "get_documents(limit=...)" and "get_mailboxes()" list rows
    name_nouns = frozenset(t for t in name_tokens if t not in _STOP and t not in _VERB_OF and not t.isdigit())
    name_verbs = frozenset(t for t in name_tokens if t in _VERB_OF)
    return _ToolInfo(
        fn["name"], action, nouns, props, required, name_nouns, name_verbs, str(fn.get("description") or "")
    )


def _row_words(infos: dict[str, _ToolInfo]) -> dict[str, frozenset[str]]:
    """For each identifier a person cannot say (``b_id``, ``v4_7_id``), the words (singular) a request may name
    its row by: the words of the name and summary of the tools it is the key of (``storage_buckets_get``,
    "Returns metadata for the specified bucket": "bucket"), without the words every tool's name has (the API's
    ``storage``), as :func:`~envfactory_assets.synth.refinement.phrasing.spoken_tables` names such a table."""
    named = [{singular(w) for w in name_nouns(i.name)} for i in infos.values()]
    everywhere = set.intersection(*named) if len(named) > 1 else set()
    found: dict[str, set[str]] = {}
    for info in infos.values():
        key = info.key
        if key is None or speakable(key[:-3]):
            continue
        keep = frozenset(t for t in key[:-3].split("_") if t.isalpha() and len(t) > 1)
        said = {singular(w) for text in (info.name, info.description) for w in name_nouns(text, keep)}
        found.setdefault(key, set()).update(said - everywhere or said)
    return {key: frozenset(ws) for key, ws in found.items() if ws}


@functools.lru_cache(maxsize=4096)
def _row_words_re(words: frozenset[str]) -> str:
    """A regex for one or more of ``words`` in a row ("bucket", "sms token"), each singular or plural."""
    word = "(?:" + "|".join(_word_re(w) for w in sorted(words, key=lambda w: (-len(w), w))) + ")"
    return rf"(?:{word}\s+)*{word}"


def _row_re(key: str, rows: Mapping[str, frozenset[str]] | None) -> str:
    """:func:`_thing_re` of ``key``; where ``rows`` has words for it (a key a person cannot say), those words or
    the key's own ("bucket" or "b" for ``b_id``), never nothing: "the bucket whose name is 'X'" must be read to
    its end, not stop at "the"."""
    said = (rows or {}).get(key)
    return f"(?:{_row_words_re(said)}|{re.escape(_words(key[:-3]))})" if said else _thing_re(key)


class _ToolSet:
    """A tool list read once: its :class:`_ToolInfo` per name and, per request clause, the tools' scores.

    Every attempt of a turn, both queries (raw and refined) and every turn of a trajectory see the same
    tool list, and reading it (tokens, label regexes over every parameter) was most of the solver's own
    time. Scores are deterministic; the seeded tie-break stays per attempt in :func:`_rank_tools`, which
    draws from the attempt's random stream exactly as an uncached ranking does.
    """

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self.infos = {i.name: i for i in (_tool_info(t) for t in tools)}
        #: the words naming rows of identifiers a person cannot say (:func:`_row_words`)
        self.rows = _row_words(self.infos)
        self._scores: dict[str, list[tuple[float, _ToolInfo]]] = {}

    def scores(self, clause: str) -> list[tuple[float, _ToolInfo]]:
        """``[(score, tool)]`` of the tools scoring above 0 for ``clause``, in tool-list order."""
        cached = self._scores.get(clause)
        if cached is None:
            cached = self._scores[clause] = _score_tools(clause, self.infos, self.rows)
        return cached


@functools.lru_cache(maxsize=64)
def _toolset_of(blob: bytes) -> _ToolSet:
    """The :class:`_ToolSet` of the specs serialized as ``blob``, read from its own copy of them."""
    import orjson

    return _ToolSet(orjson.loads(blob))


def read_tools(tools: Sequence[Mapping[str, Any]], reuse: bool = True) -> _ToolSet:
    """The :class:`_ToolSet` of ``tools``; with ``reuse``, shared by every call with equal specs (a small
    cache keyed by the specs' JSON, keys in order, so two environments' equally named tools never share one,
    nor two lists whose parameters differ only in order).
    ``reuse=False`` reads them afresh (the reference path the tests compare against). A cached tool set is
    read from its own copy of the specs, so a caller changing its specs afterwards changes no cached one;
    specs that are not JSON (a set, a non-text key) are read afresh, uncached."""
    if not reuse:
        return _ToolSet(tools)
    import orjson

    try:
        blob = orjson.dumps(list(tools))  # keys in their order: the parameters' order steers argument parsing
    except TypeError:
        return _ToolSet(tools)
    return _toolset_of(blob)


def _coerce(text: str, schema: Mapping[str, Any]) -> Any:
    """A literal as written in a query (``'x'``, ``12.5``, ``true``) -> the JSON value the schema expects."""
    spoken_date = parse_spoken_value(text)
    if spoken_date is not None:  # "26 May 2026 at 10:55 UTC": the ISO value the spec's format expects
        return spoken_date
    if text.startswith("'"):
        value: Any = text[1:-1]
    elif text in ("true", "false", "yes", "no"):
        value = text in ("true", "yes")
    else:
        value = float(text) if "." in text else int(text)
    typ = schema.get("type")
    if typ == "string" and not isinstance(value, str):
        value = text
    elif typ == "integer" and isinstance(value, float) and value.is_integer():
        value = int(value)
    elif typ == "number" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value) if schema.get("format") in ("float", "double") else value
    return value


# ----------------------------------------------------------------------------- observations
@dataclass
class _Observation:
    """One tool result the agent has seen: the tool's inferred action and its output."""

    action: str | None
    output: Any


def _rows_with(output: Any, key: str) -> list[dict[str, Any]]:
    """Objects in ``output`` (the object itself or items of its list fields) that carry ``key``."""
    if not isinstance(output, dict):
        return []
    if key in output:
        return [output]
    return [i for v in output.values() if isinstance(v, list) for i in v if isinstance(i, dict) and key in i]


def _observations_from(messages: Sequence[Mapping[str, Any]], infos: dict[str, _ToolInfo]) -> list[_Observation]:
    """Tool results of the conversation, in order, each with the action of the tool that produced it."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            names[call.get("id", "")] = call["function"]["name"]
        if m.get("role") == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id", ""), "")
            try:
                output = json.loads(m.get("content") or "null")
            except ValueError:
                output = m.get("content")
            out.append(_Observation(infos[name].action if name in infos else None, output))
    return out


class ProgrammaticSolver:
    """Offline solver: one call per request in the query, tools chosen from the query text and the tool
    descriptions, arguments from the query's literals and from earlier tool results.

    Per request (clauses joined by "then"): the tool is the one whose name/description shares the request's
    action verb and most of its words and parameter names (ties sampled with the attempt's seed; when a call
    answers with an error, up to :data:`MAX_TOOL_TRIES` tools of that action are tried in rank order); a row reference
    ("that book",
    "the new book", "the book whose title is 'X'", "the second book in that list", "my most recent book")
    is resolved against the tool results seen so far, sampling among rows that fit equally well; literals
    written after a parameter's name fill that parameter. It never sees gold calls or the hidden state:
    when the query does not determine a value it guesses among the values it has seen.
    """

    name = "programmatic"

    def __init__(self, ask: bool = False, reuse_tool_reading: bool = True) -> None:
        #: conversational mode: ask :func:`clarification_question` when a request lacks a required value
        self.ask = ask
        #: read each tool list once for all attempts and turns (:func:`read_tools`); False re-reads it on
        #: every attempt, the reference the cached path must match row for row
        self.reuse_tool_reading = reuse_tool_reading

    def attempt(self, view: SolverView, call_tool: ToolCaller, seed: int) -> Attempt:
        rng = random.Random(seed)
        toolset = read_tools(view.tools, self.reuse_tool_reading)
        infos = toolset.infos
        seen = _observations_from(view.messages, infos)
        attempt = Attempt()
        clauses = _clauses(view.query)
        if self.ask:
            query, answers = split_clarifications(view.messages)
            clauses, missing = _complete_clauses(_clauses(query), answers, toolset, random.Random(seed))
            if missing:
                attempt.question = clarification_question(list(missing), missing)
                return attempt
        for clause in clauses:
            ranked = _rank_tools(clause, toolset, rng)
            # a tool that answers with an error (say, the row lives in another environment's table) makes
            # the agent try the next-best tool of the same action, as a person reading the error would
            for tool in [t for t in ranked if t.action == ranked[0].action][:MAX_TOOL_TRIES]:
                wants: list[str] = []
                args = _arguments(clause, tool, seen, rng, guess=False, wants=wants, rows=toolset.rows)
                if args is None or wants or "most recent" in clause.lower():
                    # the row is not in the conversation (or "most recent" needs the whole table): list first
                    needed = [tool.key] if args is None or "most recent" in clause.lower() else []
                    for name in dict.fromkeys(needed + [p for p in wants if p != tool.key]):
                        # like a person, try the likeliest list until one shows rows of that kind; a list
                        # of one parent's rows ("in space id 'spa_1'") after the lists of every row
                        listers = [(lister, {}) for lister in _listers(name, infos, rng, toolset.rows)]
                        for lister, scope in listers + _scoped_listers(name, infos, clause, toolset.rows):
                            if self._call(
                                lister, {**_list_everything(lister), **scope}, call_tool, seen, attempt
                            ) and _rows_with(seen[-1].output, name):
                                break
                    args = _arguments(clause, tool, seen, rng, guess=True, rows=toolset.rows)
                if args is not None and self._call(tool, args, call_tool, seen, attempt):
                    break
                if (
                    attempt.calls
                    and (attempt.calls[-1].get("error") or {}).get("type") == ErrorType.PRECONDITION_FAILED.value
                ):
                    break  # the row is not in a state the request applies to: another tool would not help
        attempt.answer = "; ".join(
            json.dumps(c.get("output", c.get("error")), ensure_ascii=False)[:200] for c in attempt.calls
        )
        return attempt

    @staticmethod
    def _call(
        tool: _ToolInfo, args: dict[str, Any], call_tool: ToolCaller, seen: list[_Observation], attempt: Attempt
    ) -> bool:
        res = call_tool(tool.name, args)
        record = {"name": tool.name, "arguments": args, "ok": bool(res.get("ok"))}
        if res.get("ok"):
            record["output"] = res["output"]
            seen.append(_Observation(tool.action, res["output"]))
        else:
            record["error"] = res.get("error")
        attempt.calls.append(record)
        return record["ok"]


#: The programmatic solver's clarification questions (:func:`clarification_question`); :func:`split_clarifications`
#: recognises them.
_QUESTION_RE = re.compile(r"^(?:Which .+ should I use|Should (?:it|I) .+)\?$")


def clarification_question(missing: Sequence[str], params: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The assistant's question for the values of ``missing`` parameters, each named once as a person names it
    (:func:`~envfactory_assets.synth.refinement.phrasing.spoken_question_label`; ``params``: the tool's parameter
    schemas by name, for their types): ``"Which title and QR number should I use?"``, a flag by what it asks:
    ``"Should it be active?"``, both: ``"Which title should I use, and should it be active?"``.

    Raises:
        ValueError: ``missing`` is empty.
    """
    if not missing:
        raise ValueError("clarification_question: no missing parameter to ask for")
    labels: list[str] = []
    flags: list[str] = []
    for name in dict.fromkeys(missing):
        label = spoken_question_label(name, (params or {}).get(name))
        if label.startswith("whether "):
            flag = _flag_question(label)
            if flag not in flags:
                flags.append(flag)
        elif label not in labels:
            labels.append(label)
    asks = [f"which {_listed(labels)} should I use"] if labels else []
    asks += [f"should {f}" for f in flags]
    text = ", and ".join(asks)
    return text[0].upper() + text[1:] + "?"


def _listed(items: Sequence[str]) -> str:
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def _flag_question(label: str) -> str:
    """``"whether it is active"`` -> ``"it be active"``; ``"whether it has X"`` -> ``"it have X"``;
    ``"whether to notify"`` -> ``"I notify"``."""
    rest = label[len("whether ") :]
    if rest.startswith("it is "):
        return "it be " + rest[len("it is ") :]
    if rest.startswith("it has "):
        return "it have " + rest[len("it has ") :]
    return "I " + rest[len("to ") :]


def split_clarifications(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """``(query, answers)``: the turn's query and the user's answers to the clarification questions asked
    after it (trailing pairs of a :func:`clarification_question` and a user message)."""
    msgs = list(messages)
    answers: list[str] = []
    while (
        len(msgs) >= 3
        and msgs[-1].get("role") == "user"
        and msgs[-2].get("role") == "assistant"
        and not msgs[-2].get("tool_calls")
        and _QUESTION_RE.match(msgs[-2].get("content") or "")
    ):
        answers.insert(0, msgs[-1].get("content") or "")
        msgs = msgs[:-2]
    return next((m["content"] for m in reversed(msgs) if m.get("role") == "user"), ""), answers


def answered_value(name: str, schema: Mapping[str, Any] | None, answers: Sequence[str]) -> str | None:
    """The value the user's ``answers`` give parameter ``name``, as query text (``"'Dune'"``, ``"true"``), or
    None: a sentence of :func:`~envfactory_assets.synth.trajectories.simulated_user.answer_sentence` naming the
    field by its spoken label or any of its :func:`field_labels` ("The QR number is 'Q1'."), or for a flag the
    yes/no sentence answering its question ("Yes, it should be active.")."""
    text = " ".join(answers)
    label = spoken_question_label(name, dict(schema or {}))
    if label.startswith("whether "):
        ask = _flag_question(label)
        said = re.escape(ask.split(" ", 2)[-1] if ask.startswith("it ") else ask[len("I ") :])
        m = _pattern(
            rf"\b(yes|no)\b,? (?:it should (?:(not) )?(?:be|have) {said}|please {said}|(do not) {said})",
            re.IGNORECASE,
        ).search(text)
        if m:
            return "false" if m.group(1).lower() == "no" or m.group(2) or m.group(3) else "true"
    labels = {label.lower(), _words(name), *field_labels(name, dict(schema or {}))}
    for lab in sorted(labels, key=len, reverse=True):
        m = _pattern(rf"\b(?:the\s+)?{re.escape(lab)} is ({_LITERAL})", re.IGNORECASE).search(text)
        if m:
            return m.group(1)
    return None


#: How far below the best tool's score (:func:`_score_tools`) another tool still counts as a likely reading
#: of a request when deciding whether to ask: less than the action verb's 3 points, more than one named
#: word or parameter.
CLOSE_FIT = 1.5


def _complete_clauses(
    clauses: list[str], answers: list[str], toolset: _ToolSet, rng: random.Random
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Clauses with the user's answered values appended (", title 'Dune'") and the required non-identifier
    parameters whose value the request does not state (``{name: schema}``, each once, in clause order).

    A value is stated when the solver's own reading of the request (:func:`_arguments`, every label,
    connector, spoken value and search form a request may use) fills the parameter, so the question is asked
    only for what a reader of the request cannot find in it. Where tools fit about equally well (within
    :data:`CLOSE_FIT` of the best score: "pull up a list of the priorities" fits a list and a search tool),
    the reading that needs nothing more is taken before one that would ask: a person asks only when no
    likely reading of the request is complete."""
    out: list[str] = []
    missing: dict[str, dict[str, Any]] = {}
    for clause in clauses:
        ranked = _rank_tools(clause, toolset, rng)
        if ranked:
            score = {info.name: value for value, info in toolset.scores(clause)}
            close = [t for t in ranked if score[t.name] >= score[ranked[0].name] - CLOSE_FIT]
            readings = [(t, *_reading(clause, t, answers)) for t in close]
            tool, lacking, answered = min(readings, key=lambda r: len(r[1]))  # the best-ranked of the fewest
            for name in lacking:
                missing.setdefault(name, dict(tool.params.get(name) or {}))
            for name, value in answered.items():
                clause += f", {_words(name)} {value}"
        out.append(clause)
    return out, missing


def _reading(clause: str, tool: _ToolInfo, answers: list[str]) -> tuple[list[str], dict[str, Any]]:
    """How ``tool`` reads a request: the required non-identifier parameters that neither ``clause`` nor the
    user's ``answers`` state (in name order), and the values the answers give for those the clause does not."""
    stated = _arguments(clause, tool, [], random.Random(0), guess=False, complete=False) or {}
    unstated: list[str] = []
    answered: dict[str, Any] = {}
    for name in sorted(tool.required):
        # an identifier names a row the results show, by a literal or a reference read against them (a
        # transfer's destination too: "to the account you created earlier"); it is no value to ask for
        if name.endswith("_id") or name == tool.transfer_destination or name in stated:
            continue
        value = answered_value(name, tool.params.get(name), answers)
        if value is None:
            unstated.append(name)
        else:
            answered[name] = value
    return unstated, answered


def _row_noun(key: str) -> str:
    """The noun an identifier names its row by: the last word that is not a number (``configs_2_id`` ->
    ``config``)."""
    words = [t for t in key[:-3].split("_") if t and not t.isdigit()]
    return singular(words[-1]) if words else key


def _listers(
    key: str | None, infos: dict[str, _ToolInfo], rng: random.Random, rows: Mapping[str, frozenset[str]] | None = None
) -> list[_ToolInfo]:
    """List tools that may hold the rows an identifier parameter (``appointment_template_id``) names, best
    first: most of the identifier's words (or, for one a person cannot say, of its :func:`_row_words`) among
    the tool's nouns, then fewest other nouns (ties sampled)."""
    if key is None:
        return []
    words, fits = _row_fit(key, rows)
    cands = [i for i in infos.values() if i.action == "list" and fits(i) and not (i.required - {"limit"})]
    ranked = sorted(cands, key=lambda i: (-len(words & i.nouns), len(i.nouns - words), rng.random()))
    return ranked[:MAX_TOOL_TRIES]


def _row_fit(key: str, rows: Mapping[str, frozenset[str]] | None) -> tuple[set[str], Callable[[_ToolInfo], bool]]:
    """The words of identifier ``key`` a lister's nouns are ranked by, and whether a tool may list its rows
    (its row noun, or for a key a person cannot say one of its :func:`_row_words`, among the tool's nouns)."""
    said = (rows or {}).get(key)
    if said:
        return set(said), lambda i: bool(said & i.nouns)
    thing = _row_noun(key)
    return {singular(t) for t in key[:-3].split("_") if t and not t.isdigit()}, lambda i: thing in i.nouns


def _scoped_listers(
    key: str | None, infos: dict[str, _ToolInfo], clause: str, rows: Mapping[str, frozenset[str]] | None = None
) -> list[tuple[_ToolInfo, dict[str, Any]]]:
    """List tools that may hold the rows ``key`` names and need parent identifiers, each with those
    identifiers as the request states them ("the group whose name is 'RH' in space id 'spa_1'":
    ``list_groups``, ``{"space_id": "spa_1"}``); only tools whose every required identifier the request
    states, most of the key's words first, then by name (no draw: the seeded stream stays as without them)."""
    if key is None:
        return []
    words, fits = _row_fit(key, rows)
    found = []
    for info in infos.values():
        scope = info.required - {"limit"}
        if info.action != "list" or not fits(info) or not scope or not all(p.endswith("_id") for p in scope):
            continue
        args = {}
        for name in sorted(scope):
            labels = {_words(name), *field_labels(name, info.params.get(name) or {})}
            # the parent named by its field ("space id 'spa_1'") or as a person names its row ("bucket 'b_1'")
            sources = [re.escape(lab) for lab in sorted(labels, key=lambda x: (-len(x), x))] + [_row_re(name, rows)]
            for source in sources:
                m = _pattern(rf"\b{source}\s+(?:is\s+)?('(?:.*?)'(?=[\s,.:)!?]|$))", re.IGNORECASE).search(clause)
                if m:
                    args[name] = _coerce(m.group(1), info.params.get(name) or {})
                    break
        if len(args) == len(scope):
            found.append((-len(words & info.nouns), info.name, info, args))
    return [(info, args) for _, _, info, args in sorted(found, key=lambda f: f[:2])][:MAX_TOOL_TRIES]


def _list_everything(tool: _ToolInfo) -> dict[str, Any]:
    """Arguments of a list call that returns as many rows as the schema allows."""
    for name in ("limit", "page_size", "per_page", "max_results"):
        if name in tool.params and isinstance(tool.params[name].get("maximum"), int):
            return {name: tool.params[name]["maximum"]}
    return {}


def _head(text: str) -> str:
    """The request's own words: ``text`` before its first quoted literal. An apostrophe inside a word
    ("I'd like", "user's") opens no literal, and a value quoted as an adjective ("the 'ANG' credit notes")
    is skipped."""
    return _LITERAL_OPEN.split(_ADJECTIVE.sub(r"\1 ", text), maxsplit=1)[0]


_LITERAL_OPEN = re.compile(r"(?<![A-Za-z])'")
# a quoted value used as an adjective ("list the 'ANG' credit notes"): the request's object follows it
_ADJECTIVE = re.compile(r"\b(the|all) '[^']*' (?=[a-z])")


def _has_action(sentence: str) -> bool:
    return any(t in _VERB_OF for t in _tokens(_head(sentence)))


def _joint_alternatives(joints: Sequence[str]) -> str:
    return "|".join(re.escape(j).replace(r"\ ", r"\s+") for j in sorted(joints, key=len, reverse=True))


# where one request of a query ends and the next begins: phrasing's connectives (``", and afterwards "``,
# ``". Following that, "``), and the older ", and after that" / ". And then" forms
_JOINT_SPLIT = re.compile(
    r",\s*(?:"
    + _joint_alternatives([*COMMA_JOINTS, "after that", "once that is done,", *(j for j in LAST_JOINTS if j.islower())])
    + r")\s+"
    r"|[.?]\s+(?:"
    + _joint_alternatives([*SENTENCE_JOINTS, "And", *(j for j in LAST_JOINTS if not j.islower())])
    + r")\s+(?:then\s+)?"
)


#: a quoted value as the solver reads one (:data:`_LITERAL`): opened where no letter precedes the quote
_QUOTED = re.compile(r"(?<![A-Za-z])'.*?'(?=[\s,.:)!?]|$)")


def _masked(text: str) -> tuple[str, list[str]]:
    """``text`` with each quoted value replaced by a numbered stand-in (``'\x00' 0 '\x00'``-like) and the
    values in order: splitting and rewriting a request must not reach inside a value ("title 'Salt, then
    pepper'", "'A list of the best'")."""
    found: list[str] = []

    def stand_in(m: re.Match[str]) -> str:
        found.append(m.group())
        return f"'\x00{len(found) - 1}\x00'"

    return _QUOTED.sub(stand_in, text), found


def _unmasked(text: str, found: list[str]) -> str:
    return re.sub(r"'\x00(\d+)\x00'", lambda m: found[int(m.group(1))], text)


def _clauses(query: str) -> list[str]:
    """The requests of a query: sentences without an action word (a greeting, who asks, thanks) are
    dropped; the rest split at "then" / "after that" / "once that is done" / ". Also" / ". Next," /
    ". Finally," (never inside a quoted value)."""
    masked, found = _masked(query.strip())
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z])", masked)
    kept = [x for x in sentences if _has_action(x) or re.search(r"'[^']*'(?=[\s,.:)!?]|$)|\d", x)] or sentences
    text = " ".join(kept).strip().rstrip(".!")
    return [_unmasked(c.strip(), found) for c in _JOINT_SPLIT.split(text) if c.strip()]


@functools.lru_cache(maxsize=65536)
def _label_patterns(name: str, description: str) -> tuple[re.Pattern[str], ...]:
    """Word-bounded patterns of :func:`field_labels` for a field, compiled once: ranking asks for them per
    tool, per clause and per attempt, and more distinct patterns than ``re``'s own cache holds made it
    recompile them on every call."""
    return tuple(re.compile(rf"\b{re.escape(label)}\b") for label in field_labels(name, {"description": description}))


def _field_named(lowered: str, name: str, schema: dict[str, Any] | None) -> bool:
    description = (schema or {}).get("description")
    if description is None or isinstance(description, str):
        return any(p.search(lowered) for p in _label_patterns(name, description or ""))
    return any(re.search(rf"\b{re.escape(lab)}\b", lowered) for lab in field_labels(name, schema))


@functools.lru_cache(maxsize=16384)
def _key_quoted_pattern(key: str, said: frozenset[str] | None = None) -> re.Pattern[str]:
    return re.compile(rf"\b{_row_re(key, {key: said} if said else None)} '")


#: "is set" / "are set": a state a filter or a row's description names, not a request to set it
_STATE_SET = re.compile(r"\b(?:is|are)\s+set\b", re.IGNORECASE)


def _rank_tools(clause: str, toolset: _ToolSet, rng: random.Random) -> list[_ToolInfo]:
    """Tools that fit a request, best first (score ties in a seeded random order: one draw from ``rng``
    per scoring tool, in tool-list order); empty if none fits. Scores: :func:`_score_tools`."""
    scored = [(score, rng.random(), info) for score, info in toolset.scores(clause)]
    return [info for _, _, info in sorted(scored, key=lambda x: (-x[0], x[1]))]


def _score_tools(
    clause: str, infos: dict[str, _ToolInfo], rows: Mapping[str, frozenset[str]] | None = None
) -> list[tuple[float, _ToolInfo]]:
    """``[(score, tool)]`` for the tools scoring above 0, in ``infos`` order.

    Score: 3 for the request's action verb, 1 per request word among the tool's nouns, 1 per parameter named
    in the request, 2 when the tool's own row identifier is named with a literal ("document 'doc_1'"), 1 per
    other required identifier named so ("to project 'pro_1'"); then
    0.1 off per word of the tool's name the request does not say (at most 0.4, below every other step), so
    "list the appointments" picks ``appointments_list`` over ``appointment_templates_list``, as a reader
    would, instead of a coin toss.
    """
    head = _head(clause)
    head_toks = _tokens(head)
    # a glued name said as two words ("rate plans" for a tool over "rateplans") names the tool as the glued
    # word does: where the tool's own name has the glued word, or its nouns lack the two words
    pairs = [(a, b, singular(a + b)) for a, b in zip(head_toks, head_toks[1:], strict=False)]
    # the request's first action word ("Next, could you delete ...": delete); greetings carry none, nor does a
    # filter's "is set to" ("sum up the pockets where account ID is set to 'X'" changes no account)
    verb = next((t for t in _tokens(_STATE_SET.sub(" ", head)) if t in _VERB_OF), None)
    action = _VERB_OF.get(verb or "")
    lowered = clause.lower()
    all_toks = _tokens(clause)
    clause_toks = set(all_toks) | {
        singular(a + b) for a, b in zip(all_toks, all_toks[1:], strict=False)
    }  # "data source"
    # the request's object comes before what it is "of"/"for" ("list the events of the calendar whose ..."):
    # its words count once more, so the events tool wins over the calendars tool
    # ("a list of the events of ..." names its object after the first "of")
    object_head = re.sub(r"\b(?:a\s+)?(list|details)\s+of\b", r"\1", head, flags=re.IGNORECASE)
    object_toks = set(_tokens(re.split(r"\b(?:of|for|whose|where|with|from|by)\b", object_head, maxsplit=1)[0]))
    # a field named inside a row reference ("the role whose account sid is 'AC1'") describes that row: it
    # does not make a tool with that parameter (create_role) a better fit
    named = _WHOSE_LITERAL.sub(" ", lowered)
    scored = []
    for info in infos.values():
        score = 3.0 * (action is not None and info.action == action)
        score += 0.5 * (score > 0 and verb in info.name_verbs)  # "cancel order X": cancel_order, not delete_order
        score += sum(1.0 for t in set(head_toks) if t in info.nouns)
        score += sum(
            1.0
            for a, b, t in set(pairs)
            if t in info.name_nouns or (t in info.nouns and not (a in info.nouns and b in info.nouns))
        )
        score += sum(0.5 for t in object_toks if t in info.nouns and t not in _VERB_OF)
        score += sum(1.0 for p in info.params if _field_named(named, p, info.params[p]))
        # a transfer names its amount and destination by where they stand ("move 33 from ... to bin 'b_2'")
        score += info.transfer_amount is not None and _AMOUNT_MOVED.search(named) is not None
        score += (
            info.transfer_destination is not None
            and info.key is not None
            and _pattern(rf"\b(?:to|into)\s+(?:the\s+|that\s+|this\s+)?{_row_re(info.key, rows)}\b").search(named)
            is not None
        )
        if info.key and _key_quoted_pattern(info.key, (rows or {}).get(info.key)).search(lowered):
            score += 2.0
        # another row the tool needs, named with a literal ("add user 'u_1' to project 'p_1'": the project's id)
        score += sum(
            1.0
            for p in info.required
            if p != info.key and p.endswith("_id") and _key_quoted_pattern(p, (rows or {}).get(p)).search(lowered)
        )
        if score > 0:
            unsaid = sum(1 for t in info.name_nouns if t not in clause_toks)
            scored.append((score - 0.1 * min(unsaid, 4), info))
    return scored


def _resolve_reference(phrase: str, key: str, seen: list[_Observation], rng: random.Random) -> Any | None:
    """The ``key`` value of the row a reference phrase names, from the observations; None if none fits."""
    phrase = phrase.lower()
    # "whose name is 'x'", or two such facts joined by "and"
    wanted = [(f, v.strip("'")) for f, v in re.findall(rf"whose (.+?) is ({_LITERAL})", phrase)]
    if wanted:

        def said(row: Mapping[str, Any], label: str) -> str:
            # the field a person named ("qr number" is qr_no): its own words or its spoken form
            field = next((f for f in row if _words(f) == label or spoken_field(f).lower() == label), None)
            return str(row.get(field, "")).lower()

        def fits(text: str, value: str) -> bool:
            # an ETag ('"7f94"') may be named without its double quotes
            return value in (text, text[1:-1] if len(text) > 2 and text[0] == text[-1] == '"' else text)

        for obs in reversed(seen):
            rows = [r for r in _rows_with(obs.output, key) if all(fits(said(r, f), v) for f, v in wanted)]
            if rows:
                return rng.choice(rows)[key]
        return None
    ordinal = next((i for i, w in enumerate(_ORDINALS) if re.search(rf"\b{w}\b", phrase)), None)
    if ordinal is not None and "list" in phrase:
        for obs in reversed(seen):
            rows = _rows_with(obs.output, key)
            if len(rows) > 1 or (obs.action == "list" and rows):
                return rows[ordinal][key] if ordinal < len(rows) else None
        return None
    if "most recent" in phrase or "newest" in phrase or "latest" in phrase:
        rows = [r for obs in seen for r in _rows_with(obs.output, key)]
        return max((r[key] for r in rows), default=None, key=lambda v: (len(str(v)), str(v)))
    if "new" in phrase or "created" in phrase:
        for obs in reversed(seen):
            if obs.action == "create" and _rows_with(obs.output, key):
                return _rows_with(obs.output, key)[0][key]
    for obs in reversed(seen):  # "that book", "it": the latest rows carrying the key; several fit equally
        rows = _rows_with(obs.output, key)
        if rows:
            return rng.choice(rows)[key]
    return None


_WHOSE_LITERAL = re.compile(r"\bwhose\b.+?\bis\s+'[^']*'")
#: a row described by one or two facts ("whose name is 'X'", "... and whose city is 'Rome'")
_WHOSE = rf"(?: whose .+? is (?:{_LITERAL})(?: and whose .+? is (?:{_LITERAL}))?)"
_REF_TAIL = r"(?: you (?:just )?created(?: earlier| a moment ago)?| in that list)?"


def _first_unquoted(pattern: re.Pattern[str], text: str, quoted: list[tuple[int, int]]) -> re.Match[str] | None:
    """The first match of ``pattern`` in ``text`` that does not start inside one of the ``quoted`` spans (a
    label or a preposition inside a value, "name 'Country of 5'", is none); None when there is none."""
    return next((m for m in pattern.finditer(text) if not any(a < m.start() < b for a, b in quoted)), None)


def _blanked(text: str, match: re.Match[str]) -> str:
    """``text`` with ``match``'s span replaced by spaces (positions kept): a value read once is not read again."""
    return text[: match.start()] + " " * (match.end() - match.start()) + text[match.end() :]


_LIST_OF = re.compile(r"\b(?:a\s+)?list\s+of\s+(?=the\b|all\b)", re.IGNORECASE)


def _transfer_arguments(
    text: str,
    tool: _ToolInfo,
    key: str,
    args: dict[str, Any],
    seen: list[_Observation],
    rng: random.Random,
    wants: list[str] | None,
    rows: Mapping[str, frozenset[str]] | None,
) -> str:
    """Read a transfer request's rows and amount into ``args``: ``"move 33 from bin 'b_1' to bin 'b_2'"``,
    ``"deposit 20 into the account you created earlier"``; the destination after "to", the source row (the
    tool's ``key``) after "from"/"into"/"out of", each of the source's table and named by a literal or a
    reference, and the amount right before that preposition. Returns ``text`` with what was read blanked: a
    row named here is not read again as another parameter."""
    inside = [q.span() for q in _QUOTED.finditer(text)]
    thing = _row_re(key, rows)

    def row_after(prepositions: str) -> re.Match[str] | None:
        return _first_unquoted(
            _pattern(
                rf"\b(?:{prepositions})\s+(?:{thing}\s+({_LITERAL})|((?:the|that|this|my)\b.*?\b{thing}\b"
                rf"{_WHOSE}?{_REF_TAIL}))",
                re.IGNORECASE,
            ),
            text,
            inside,
        )

    amount = tool.transfer_amount
    if amount and amount not in args:
        m = _first_unquoted(_AMOUNT_MOVED, text, inside)
        if m:
            args[amount] = _coerce(m.group(1), tool.params[amount])
            # only the figure: the preposition after it still leads to its row
            text = text[: m.start(1)] + " " * len(m.group(1)) + text[m.end(1) :]
    # the destination first: "from the bin you created earlier to bin 'b_2'" names the source by reference
    for name, prepositions in ((tool.transfer_destination, r"to"), (key, r"from|into|out\s+of")):
        if not name or name in args:
            continue
        m = row_after(prepositions)
        if m is None:
            continue
        if m.group(1):
            args[name] = _coerce(m.group(1), tool.params[name])
        else:
            value = _resolve_reference(m.group(2), key, seen, rng)
            if value is not None:
                args[name] = value
            elif wants is not None and " whose " in m.group(2):
                wants.append(key)
        text = _blanked(text, m)
    return text


def _arguments(
    clause: str,
    tool: _ToolInfo,
    seen: list[_Observation],
    rng: random.Random,
    guess: bool = True,
    wants: list[str] | None = None,
    rows: Mapping[str, frozenset[str]] | None = None,
    complete: bool = True,
) -> dict[str, Any] | None:
    """Arguments of ``tool`` for one request, or None when a required one cannot be determined (with
    ``guess``, a required identifier the query leaves open is drawn among the identifiers seen so far; with
    ``complete=False``, the arguments the request states, whether or not every required one is among them).
    ``wants`` collects identifier parameters named by a description ("the author whose name is 'X'") that no
    result seen so far holds: the caller lists that table and tries again. ``rows`` (:func:`_row_words`) names
    the rows of identifiers a person cannot say ("bucket 'b_1'" for ``b_id``)."""
    # "a list of the roles of the user ...": the first "of" introduces the request's object, not its row
    masked, found = _masked(clause)  # (not inside a quoted value: "title 'A list of the best'")
    text = _unmasked(_LIST_OF.sub("list ", masked), found)
    args: dict[str, Any] = {}
    key = tool.key
    if key is not None and (tool.transfer_amount or tool.transfer_destination):
        text = _transfer_arguments(text, tool, key, args, seen, rng, wants, rows)
    if key is not None and key not in args and tool.action in _KEYED_ACTIONS:
        thing = _row_re(key, rows)
        lit = _pattern(rf"\b{thing} ({_LITERAL})", re.IGNORECASE).search(text)
        if lit and not _pattern(rf"\b{thing} (?:id|whose)\b", re.IGNORECASE).search(text[: lit.start(1)]):
            args[key] = _coerce(lit.group(1), tool.params[key])
            text = text[: lit.start()] + text[lit.end() :]
        else:
            ref = _pattern(
                rf"((?:the|that|this|my)\b.*?\b{thing}\b{_WHOSE}?"
                rf"{_REF_TAIL})",
                re.IGNORECASE,
            ).search(text)
            if ref:
                value = _resolve_reference(ref.group(1), key, seen, rng)
                if value is not None:
                    args[key] = value
                elif wants is not None and " whose " in ref.group(1):
                    wants.append(key)
                text = text[: ref.start()] + text[ref.end() :]
    # longest labels first, each match blanked out: "account sid 'x'" must not also fill "sid"
    own_names = {_words(n) for n in tool.params}
    for name in sorted(tool.params, key=lambda n: -len(_words(n))):
        schema = tool.params[name]
        if name in args:
            continue
        m = None
        # a label that is another parameter's own name belongs to that parameter ("active" of is_active)
        labels = [lab for lab in field_labels(name, schema) if lab == _words(name) or lab not in own_names]
        for lab in sorted(labels, key=len, reverse=True):
            # not inside a row reference: in "for the service whose account sid is 'AC1'" the value names
            # the service, it is not this call's account sid
            # (a label inside another value, "name 'Country of 5'", is no label)
            inside = [q.span() for q in _QUOTED.finditer(text)]
            m = _first_unquoted(
                _pattern(
                    rf"(?<!whose )\b{re.escape(lab)}\s+"
                    rf"(?:is\s+(?:set\s+to\s+)?|to\s+|set\s+to\s+|of\s+)?({_LITERAL})",
                    re.IGNORECASE,
                ),
                text,
                inside,
            )
            if m:
                break
        if not m and schema.get("type") == "boolean" and flag_predicate(name, True).startswith("is "):
            # a flag asked as how the row is to be: "so that it is disabled", "... it is not active"
            said = re.escape(flag_predicate(name, True)[3:])
            flag = _pattern(rf"\bit is (not )?{said}\b", re.IGNORECASE).search(text)
            if flag:
                args[name], text = flag.group(1) is None, _blanked(text, flag)
                continue
        if not m and name in _QUERY_PARAMS:
            m = _pattern(rf"\b(?:for|matching|mentioning|containing)\s+({_LITERAL})", re.IGNORECASE).search(text)
        if m:
            args[name] = _coerce(m.group(1), schema)
            text = _blanked(text, m)
            continue
        if name.endswith("_id"):
            # "calendar id same as the course whose name is 'X'": the value the row the user points at holds
            same = None
            for lab in sorted(labels, key=len, reverse=True):
                same = _pattern(
                    rf"\b{re.escape(lab)}\s+(?:is\s+|to\s+)?same as ((?:the|that|this)\b[^,]*?"
                    rf"(?:{_WHOSE}| in that list))",
                    re.IGNORECASE,
                ).search(text)
                if same:
                    break
            # "author id the author you created earlier" or "for the author whose name is 'X'"
            ref = _pattern(
                rf"(?:\b{re.escape(_words(name))}\s+(?:to\s+|is\s+)?|\b(?:for|of)\s+)((?:the|that|this|my)\b[^,]*?\b"
                rf"{_row_re(name, rows)}\b{_WHOSE}?{_REF_TAIL})",
                re.IGNORECASE,
            ).search(text)
            found = next(
                (
                    (m, v)
                    for m in (same, ref)
                    if m
                    for v in [_resolve_reference(m.group(1), name, seen, rng)]
                    if v is not None
                ),
                None,
            )
            if found:
                args[name], text = found[1], _blanked(text, found[0])
                continue
            if ref and wants is not None and " whose " in ref.group(1):
                wants.append(name)
            if name in tool.required:
                # a second row named as the key's is ("add user 'u_1' to group 'g_1'": the group's id)
                lit = _pattern(rf"\b{_row_re(name, rows)} ({_LITERAL})", re.IGNORECASE).search(text)
                if lit:
                    args[name], text = _coerce(lit.group(1), schema), _blanked(text, lit)
                    continue
    for lit in re.findall(r"'(.*?)'(?=[\s,.:)]|$)", text):  # a bare value: the parameter whose enum has it
        owners = [n for n, sch in tool.params.items() if n not in args and lit in (sch.get("enum") or ())]
        if owners:
            args[rng.choice(sorted(owners))] = lit
    limit = re.search(r"\(at most (\d+)\)|\b(?:just|only) the first (\d+)\b|\bup to (\d+) of them\b", text)
    if limit:
        for name in ("limit", "page_size", "per_page", "max_results"):
            if name in tool.params:
                args[name] = int(next(g for g in limit.groups() if g))
                break
    if not complete:
        return args
    if tool.key in tool.required and tool.key not in args and not guess:
        return None
    for name in sorted(tool.required - set(args)):
        if not name.endswith("_id") or not guess:
            return None
        values = sorted({json.dumps(r[name]) for obs in seen for r in _rows_with(obs.output, name)})
        if not values:
            return None
        args[name] = json.loads(rng.choice(values))  # a guess among identifiers seen so far
    return args
