"""Programmatic query writer and assistant replies (the offline default of the paper's query writer).

The writer sees the executed calls (and so the hidden state), as in the paper's QueryGen. Two registers:

- the raw query (:func:`describe_call` without ``rng``) states every argument literally in one fixed plan per
  tool kind ("create a new book with title 'Dune'"); a value that only a call of the same turn will assign
  is named by what assigns it ("the new book"), never quoted;
- the refined query (:mod:`envfactory_assets.synth.refinement.operators`) uses :func:`describe_call` with a seeded
``rng``:
  one of several sentence plans per tool kind, the operation's own summary from the spec where it reads as a
  request, field labels from the fields' descriptions, dates written as dates, booleans as yes/no, table
  names as a person says them (no "webhooks 2"), and a persona's register (:func:`persona_style`).

The programmatic solver (:mod:`envfactory_assets.synth.refinement.solver.programmatic`) reads every plan back through
the same spec
words (:func:`spoken_thing`, :func:`field_labels`, :func:`parse_spoken_value`), as an agent reading the tool
descriptions would; the plans keep each value right after its field's label so one reading serves all.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from envfactory_assets.envgen.tools import KEYED_KINDS
from envfactory_assets.sources.names import (
    indefinite_article,
    inflected_plural,
    plural,
    reads_singular,
    singular,
    snake_case,
    spoken_thing,
    spoken_things,
    spoken_words,
)

# re-exported: the query writer, the solver and the replies name fields and tables as the builder does
from envfactory_assets.sources.spoken import spoken_field as spoken_field
from envfactory_assets.sources.spoken import spoken_name as spoken_name
from envfactory_assets.sources.spoken import spoken_table as spoken_table
from envfactory_assets.sources.spoken import spoken_tables as spoken_tables
from envfactory_assets.sources.spoken import words as words

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DATE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):00Z$")
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_MONTH = "|".join(_MONTHS)
#: A date as :func:`spoken_value` writes it: day first or month first (``"26 May 2026"``, ``"May 26, 2026"``),
#: a time of day on the 24-hour or the 12-hour clock (``" at 10:55 UTC"``, ``" at 10:55 PM UTC"``).
_SPOKEN_DATE_RE = re.compile(
    rf"(?:(?P<d1>\d{{1,2}}) (?P<m1>{_MONTH}) (?P<y1>\d{{4}})|(?P<m2>{_MONTH}) (?P<d2>\d{{1,2}}), "
    rf"(?P<y2>\d{{4}}))(?: at (?P<h>\d{{1,2}}):(?P<mi>\d{{2}})(?: (?P<ap>AM|PM))? UTC)?"
)
SPOKEN_DATE = (
    rf"(?:\d{{1,2}} (?:{_MONTH}) \d{{4}}|(?:{_MONTH}) \d{{1,2}}, \d{{4}})"
    r"(?: at \d{1,2}:\d{2}(?: (?:AM|PM))? UTC)?"
)


_FLAG_PREFIX = re.compile(r"^is (?=[a-z]{3})")


def _flag_words(name: str) -> str | None:
    """What a boolean flag says of its row (``is_active`` -> ``"active"``, ``has_children`` -> ``"children"``),
    or None when its name has no ``is``/``has`` prefix."""
    m = re.match(r"^(is|has)[_ ]?(?=[a-z]{3})", snake_case(name))
    return spoken_field(snake_case(name)[m.end() :]) if m else None


#: First words of a flag that asks for something to be done (``send_email``: "whether to send email").
_FLAG_VERBS = frozenset(
    "send notify include allow enable disable require force use skip show hide return overwrite archive publish "
    "sync validate confirm apply keep remove delete create email auto ignore replace reset retry verify".split()
)


def spoken_question_label(name: str, schema: dict[str, Any] | None = None) -> str:
    """How a clarification question names a field (``"title"``, ``"org unit"``; a boolean flag by what it asks:
    ``is_active`` -> ``"whether it is active"``, ``has_children`` -> ``"whether it has children"``,
    ``in_stock`` -> ``"whether it is in stock"``, ``send_email`` -> ``"whether to send email"``)."""
    if (schema or {}).get("type") == "boolean":
        flag = _flag_words(name)
        if flag:
            verb = "has" if snake_case(name).startswith("has") else "is"
            return f"whether it {verb} {flag}"
        said = spoken_field(name)
        if said.split(" ", 1)[0].lower() in _FLAG_VERBS:
            return f"whether to {said}"
        return f"whether it is {said}"
    return spoken_field(name)


#: Verbs a flag's name may start with, beyond :data:`_FLAG_VERBS` ("accept_partial_authorization"); "auto"
#: and "email" are left out, they start names as nouns ("auto_start", "email_allowed").
_PREDICATE_VERBS = (_FLAG_VERBS - {"auto", "email"}) | frozenset(
    "accept resume normalize encode split save block need collect capture track lock share store print export "
    "charge reuse mark".split()
)
#: Single words a flag is named by that say what its row is ("is a bot"), as against what it has.
_ROLE_NOUNS = frozenset("bot admin administrator test guest owner member moderator sandbox template draft".split())
#: Adjectives a flag is named by that no suffix rule of :func:`_adjective_like` finds.
_ADJECTIVES = frozenset(
    "active inactive public private open closed hidden visible default ready online offline live free paid valid "
    "invalid locked empty full primary secondary new unread current final internal external global local "
    "mandatory optional secure available featured favorite unique static dynamic overridden only".split()
)
_PREPOSITIONS = frozenset("on in at for to with by from under over of into without".split())


def _adjective_like(word: str) -> bool:
    w = word.lower()
    return w in _ADJECTIVES or (
        len(w) > 4 and w.endswith(("ed", "able", "ible", "ive", "al", "ous", "ent", "ant", "ful", "less", "ing"))
    )


def flag_predicate(name: str, value: bool) -> str:
    """What a boolean field says of its row, as a verb phrase whose subject is the row ("it ..."), true or false
    as ``value`` is: ``is_active`` -> ``"is active"`` / ``"is not active"``, ``blocked`` -> ``"is blocked"``,
    ``bot`` -> ``"is a bot"`` / ``"is not a bot"``, ``has_duration`` -> ``"has a duration"`` / ``"has no
    duration"``, ``can_invoice`` -> ``"can invoice"`` / ``"cannot invoice"``, ``require_approval`` ->
    ``"requires approval"`` / ``"does not require approval"``, ``charges_enabled`` -> ``"has charges enabled"`` /
    ``"does not have charges enabled"``. A name none of these forms fits keeps its words and the value as the
    project writes booleans (:func:`spoken_value`): ``"has mail set to yes"``.

    Raises:
        TypeError: ``value`` is not a bool.
    """
    if not isinstance(value, bool):
        raise TypeError(f"flag_predicate: value of {name!r} must be a bool, got {type(value).__name__}")
    toks = spoken_field(snake_case(name)).split()
    low = [t.lower() for t in toks]
    said = " ".join(toks)
    if len(toks) > 1 and low[0] == "is":
        rest = toks[1:]
        head = []
        for t in rest:
            if t.lower() in _PREPOSITIONS:
                break
            head.append(t)
        # "is admin" says what the row is ("an admin"), "is active" how it is; a plural takes no article
        noun = bool(head) and not _adjective_like(head[-1]) and rest[0].lower() not in ("all", "any", "no")
        noun = noun and singular(head[-1].lower()) == head[-1].lower()
        what = " ".join(rest)
        what = f"{indefinite_article(rest[0])} {what}" if noun else what
        return f"is {what}" if value else f"is not {what}"
    if len(toks) > 1 and low[0] == "has":
        what = " ".join(toks[1:])
        if not value:
            return f"has no {what}"
        plural_already = singular(low[-1]) != low[-1]
        return f"has {what}" if plural_already else f"has {indefinite_article(toks[1])} {what}"
    if len(toks) > 1 and low[0] == "can":
        what = " ".join(toks[1:])
        return f"can {what}" if value else f"cannot {what}"
    if len(toks) > 1 and low[-1].endswith("ed") and not low[0].endswith(("ed", "ly")) and low[0] not in _PREPOSITIONS:
        # a part named before its state: "charges enabled" is what the row has
        return f"has {said}" if value else f"does not have {said}"
    if low[0] in _PREDICATE_VERBS or (singular(low[0]) in _PREDICATE_VERBS and singular(low[0]) != low[0]):
        base = singular(low[0]) if singular(low[0]) in _PREDICATE_VERBS else low[0]
        rest = " ".join(toks[1:])
        verb = base if not value else inflected_plural(base)  # "apply" -> "applies"
        return " ".join(w for w in ("" if value else "does not", verb, rest) if w)
    if (
        (len(toks) == 1 and _adjective_like(low[0]))
        or (len(toks) > 1 and (low[0] in _PREPOSITIONS or low[0].endswith("ly") or low[-1] == "only"))
        or (len(toks) > 1 and low[0].endswith("ed") and low[1] in _PREPOSITIONS)
    ):
        return f"is {said}" if value else f"is not {said}"
    if len(toks) == 1 and low[0] in _ROLE_NOUNS:
        what = f"{indefinite_article(low[0])} {said}"
        return f"is {what}" if value else f"is not {what}"
    return f"has {said} set to {spoken_value(value)}"


#: nouns any field's description may end its first phrase with: they say what kind of thing a field holds, not
#: which field it is
_GENERIC_HEADS = frozenset(
    {"value", "values", "setting", "settings", "option", "options", "field", "fields", "flag", "flags", "property"}
    | {"properties", "parameter", "parameters", "data", "information", "info", "thing", "item"}
)


def field_labels(name: str, schema: dict[str, Any] | None = None) -> list[str]:
    """Labels a person may use for a field, most literal first: its name's words, then (when the spec's
    description starts with a short noun phrase of 1-3 words ending before "of"/"for"/"."/","), that
    phrase (``"Full name of the author."`` -> ``"full name"``). A boolean flag named ``is_...``
    is also labelled by what it says of the row (``is_active`` -> ``"active"``), so a request reads "where
    active is no", not "where is active is no"."""
    labels = [words(name).lower()]
    said = spoken_field(name).lower()
    if said != labels[0] and not name.endswith("_id"):
        labels.append(said)  # "qr number" for qr_no: the writer's label for a field named by short forms
    flag = _FLAG_PREFIX.match(labels[0])
    if flag and (schema or {}).get("type") == "boolean":
        labels.append(labels[0][flag.end() :])
    desc = ((schema or {}).get("description") or "").strip().lower()
    m = re.match(r"^(?:the |an? )?([a-z][a-z ]{1,40}?)(?: of | for | in |[.,;(]|$)", desc)
    if m:
        phrase = m.group(1).strip()
        name_words = set(labels[0].split())
        # a description phrase is a label only when it names the same thing more fully ("full name" for
        # "name"), not another word for it ("index" for "exam room") nor a cut of it ("template")
        if (
            1 <= len(phrase.split()) <= 3
            and phrase not in labels
            and set(phrase.split()) & name_words
            and phrase not in labels[0]
            and not re.search(
                r"\b(?:identifier|id|number|maximum|when|whether|list|the|a|an|is|are|to|this|that|one)\b", phrase
            )
            # a phrase ending in a word any field could take ("default value" for default_event_based_hold)
            # names no field unless the name says that word too
            and (phrase.split()[-1] not in _GENERIC_HEADS or phrase.split()[-1] in name_words)
        ):
            labels.append(phrase)
    return labels


def literal(value: Any) -> str:
    """How a value is written in a raw user query: strings quoted, others as JSON-like text."""
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _spoken_date(m: re.Match[str], month_first: bool, twelve_hour: bool) -> str:
    year, month, day = m.group(1), _MONTHS[int(m.group(2)) - 1], int(m.group(3))
    text = f"{month} {day}, {year}" if month_first else f"{day} {month} {year}"
    if m.re is _DATE_TIME:
        hour, minute = int(m.group(4)), m.group(5)
        if twelve_hour:
            text += f" at {(hour - 1) % 12 + 1}:{minute} {'AM' if hour < 12 else 'PM'} UTC"
        else:
            text += f" at {hour:02d}:{minute} UTC"
    return text


def _calendar_date(value: str) -> re.Match[str] | None:
    """The match of ``value`` as a date or a date-time on the minute that the calendar has, else None: text
    shaped like one but not one ("2025-02-31", "T25:61") said as a date could not be read back
    (:func:`parse_spoken_value`), so it is stated as written."""
    m = _DATE_TIME.match(value) or _DATE.match(value)
    if not m:
        return None
    try:
        datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), *(int(g) for g in m.groups()[3:]))
    except ValueError:
        return None
    return m


def spoken_value(value: Any, schema: dict[str, Any] | None = None, rng: random.Random | None = None) -> str:
    """How a person writes a value: a date as a date (``"26 May 2026"``), a date-time on the minute as
    ``"26 May 2026 at 10:55 UTC"``, a boolean as ``yes``/``no``, anything else as :func:`literal` (quoted
    text keeps its exact spelling, which the call needs). With ``rng`` a date may also be written month first
    and a time on the 12-hour clock (``"May 26, 2026 at 10:55 PM UTC"``), as people do; every form is one of
    :func:`spoken_forms` and :func:`parse_spoken_value` reads it back."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        m = _calendar_date(value)
        if m:
            draw = rng.random() if rng is not None else 1.0
            return _spoken_date(m, month_first=draw < 0.35, twelve_hour=draw < 0.15 or 0.35 <= draw < 0.5)
    return literal(value)


def spoken_forms(value: Any) -> set[str]:
    """Every way :func:`spoken_value` may write ``value`` (a date has four, anything else one)."""
    if isinstance(value, str):
        m = _calendar_date(value)
        if m:
            return {_spoken_date(m, a, b) for a in (False, True) for b in (False, True)}
    return {spoken_value(value)}


def parse_spoken_value(text: str) -> str | None:
    """The ISO value of a date written by :func:`spoken_value` (``"26 May 2026 at 10:55 UTC"`` ->
    ``"2026-05-26T10:55:00Z"``), or None when ``text`` is not such a date."""
    m = _SPOKEN_DATE_RE.fullmatch(text.strip())
    if not m:
        return None
    day, month, year = (int(m["d1"] or m["d2"]), _MONTHS.index(m["m1"] or m["m2"]) + 1, int(m["y1"] or m["y2"]))
    try:
        datetime(year, month, day)
    except ValueError:
        return None
    iso = f"{year:04d}-{month:02d}-{day:02d}"
    if not m["h"]:
        return iso
    hour = int(m["h"])
    if m["ap"]:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if m["ap"] == "PM" else 0)
    return iso + f"T{hour:02d}:{m['mi']}:00Z" if hour < 24 and int(m["mi"]) < 60 else None


_REFERENCE_START = ("the ", "that ", "this ", "it", "my ", "our ")

# Sentence plans per tool kind. {subject}: the row ("book 'boo_1'", "the new book"); {thing}/{things}: the
# table as a person names it; {fields}: "label value, label value"; {where}: list filters. Each plan starts
# with (or holds before any value) the request's action verb and keeps values right after their labels.
_PLANS: dict[str, tuple[str, ...]] = {
    "list": (
        "show me the {things}{where}",
        "list the {things}{where}",
        "can you find the {things}{where}",
        "I'd like a list of the {things}{where}",
        "please pull up a list of the {things}{where}",
        "could you list all {things}{where}",
        "show me all {things}{where}",
        "find me the {things}{where}",
        "I need you to list the {things}{where}",
        "browse the {things}{where}",
        "could you show the {things}{where}",
        "give me a list of the {things}{where}",
        "can you show me the {things}{where}",
        "please list the {things}{where}",
        "let me have a list of the {things}{where}",
    ),
    "get": (
        "look up {subject} and tell me its details",
        "get me the details of {subject}",
        "can you get {subject} for me",
        "I need the details of {subject}, please look them up",
        "fetch {subject} and tell me what it says",
        "please retrieve {subject}",
        "describe {subject} for me",
        "what are the details of {subject}",
        "could you fetch {subject}",
        "I'd like to view {subject}",
        "please read me {subject}",
        "pull up the details of {subject}",
        "I'd like the details of {subject}",
        "could you look up {subject} for me",
        "can you get me the details of {subject}",
        "retrieve {subject} for me, please",
    ),
    "create": (
        "create a new {thing}{with}",
        "add a {thing}{with}",
        "please register a new {thing}{with}",
        "I want to add a {thing}{with}",
        "make a new {thing}{with}",
        "could you create a {thing}{with}",
        "please add a new {thing}{with}",
        "I need a new {thing}{with}",
        "go ahead and create a {thing}{with}",
        "register a {thing}{with}",
        "I'd like to create a {thing}{with}",
        "could you add a {thing}{with}",
        "please make a {thing}{with}",
        "can you register a {thing}{with}",
        "create one more {thing}{with}",
    ),
    "update": (
        "change {subject}: set {changes}",
        "update {subject} so that {changes_is}",
        "please edit {subject} and set {changes}",
        "modify {subject}: {changes}",
        "could you update {subject}: {changes}",
        "please change {subject} so that {changes_is}",
        "edit {subject}, setting {changes}",
        "update {subject}, changing {changes}",
        "I'd like you to change {subject}: {changes}",
        "please modify {subject} so that {changes_is}",
        "could you edit {subject} so that {changes_is}",
        "change {subject} as follows: {changes}",
    ),
    # a text search says its text after "for"/"matching"/"containing" and starts with "search", so that a
    # reader tells it from a list of the same rows
    "search": (
        "search the {things} for {query}{where}",
        "search for {things} matching {query}{where}",
        "could you search the {things} for {query}{where}",
        "please search {things} containing {query}{where}",
        "search {things}{where} for {query}",
    ),
    "count": (
        "count the {things}{where}",
        "could you count the {things}{where}",
        "how many {things} are there{where}? Count them",
        "please count how many {things} there are{where}",
    ),
    # a state transition ("cancel", "archive") is asked for by its own verb
    "action": (
        "{verb} {subject}",
        "please {verb} {subject}",
        "could you {verb} {subject}",
        "I need you to {verb} {subject}",
        "go ahead and {verb} {subject}",
        "can you {verb} {subject}",
        "I'd like you to {verb} {subject}",
        "please go ahead and {verb} {subject}",
    ),
    # a side effect ("send", "sync") on one row, with its other arguments (a transfer with its ``transfer`` spec
    # is asked for as a person moves an amount: :func:`_transfer_request`)
    "verb_with": (
        "{verb} {subject}{with}",
        "please {verb} {subject}{with}",
        "could you {verb} {subject}{with}",
        "I need you to {verb} {subject}{with}",
        "go ahead and {verb} {subject}{with}",
    ),
    # figures derived from the rows of a collection (``GET /orders/total``)
    "totals": (
        "give me the totals of the {things}{where}",
        "how many {things} are there{where}, and what do they add up to?",
        "could you sum up the {things}{where}",
        "please total the {things}{where}",
    ),
    # a figure derived from one row (``GET /accounts/{id}/balance``), named by the operation's own word
    "figure": (
        "look up the {figure} of {subject}",
        "tell me the {figure} of {subject}",
        "check the {figure} of {subject}",
        "find out the {figure} of {subject}",
        "get me the {figure} of {subject}",
    ),
    # the one row of a singleton ("the settings"): no identifier to name
    "get_one": (
        "look up {subject}",
        "get me {subject}",
        "please retrieve {subject}",
        "fetch {subject} and tell me what they say",
        "could you get {subject} for me",
    ),
    "delete": (
        "delete {subject}",
        "remove {subject}",
        "please delete {subject}",
        "please remove {subject}, it is not needed any more",
        "go ahead and delete {subject}",
        "could you delete {subject}",
        "erase {subject}",
        "please drop {subject}, we no longer use it",
        "I'd like you to remove {subject}",
        "can you remove {subject}",
        "please erase {subject}",
        "delete {subject}, it is no longer needed",
        "I need you to delete {subject}",
    ),
}


#: A quote mark in a spec summary: a double, typographic opening or back quote; an apostrophe that opens a word (after
#: no letter: ``by 'from'``, ``by-'from'``, ``,'from'``); a word quoted right after another (``by'from' ``); or
#: an apostrophe that closes a word which is no plural (``by from' and to' date``): a possessive's apostrophe
#: follows a word's ``s``, an elision's has letters on both sides.
_QUOTE_MARK = re.compile(
    r"[\"`\u2018\u201c\u00ab]"  # a typographic right quote (\u2019) is also an apostrophe: "customer\u2019s"
    r"|(?:^|[^\w])'|\w'\w+'(?!\w)|(?<=[A-Za-z])(?<![sS])'(?!\w)"
)


def figure_word(tool: Mapping[str, Any]) -> str:
    """The word a person says for the figure a computed read of one row gives (``"balance"`` of
    ``GET /accounts/{id}/balance``): the spec's ``computed.word`` in lower-case words (``"currentBalance"`` ->
    ``"current balance"``) when it is one to three words of letters, else the one field it reports, else
    ``"figures"`` (an empty word, a digit, a quote, a brace or a long run of letters is no word a person asks by).

    Raises:
        ValueError: ``tool`` is a computed read whose ``computed`` is no mapping (:func:`computed_scope`).
    """
    computed_scope(tool)
    computed = tool["computed"]
    fields = computed.get("fields") if isinstance(computed.get("fields"), list) else []
    for raw in (computed.get("word"), fields[0] if len(fields) == 1 else None):
        plain = isinstance(raw, str) and re.fullmatch(r"[A-Za-z][A-Za-z _-]*", raw)
        said = words(snake_case(raw)) if plain else ""
        if len(said) <= 30 and re.fullmatch(r"[a-z]+(?: [a-z]+){0,2}", said):
            return said
    return "figures"


def computed_scope(tool: Mapping[str, Any]) -> str:
    """``"item"`` or ``"collection"``: what the computed read ``tool`` reads (its ``computed.scope``).

    Raises:
        ValueError: naming the tool when ``computed`` is missing, no mapping, or its scope is neither.
    """
    computed = tool.get("computed")
    scope = computed.get("scope") if isinstance(computed, Mapping) else None
    if scope not in ("item", "collection"):
        raise ValueError(
            f"tool {tool.get('name')!r}: a computed read needs computed.scope 'item' or 'collection', "
            f"got computed {computed!r}"
        )
    return scope


def quotes_a_word(text: str) -> bool:
    """Whether ``text`` quotes a word (``"Search refunds by 'from' and 'to' date"``, ``by-'from'``, ``by'from'``,
    ``by from' and to'``, typographic or back quotes): a spec summary that quotes its parameters' names reads,
    in a request or a reply, as quoting values no row holds. An apostrophe of a possessive or an elision
    (``"customer's"``, ``"customers' orders"``, ``"o'clock"``, ``"rock'n'roll"``) quotes none."""
    return _QUOTE_MARK.search(text) is not None


def _summary_plan(tool: dict[str, Any], kind: str) -> str | None:
    """The spec's own summary as a plan when it reads as a short request about this tool's rows
    (``"Create an author"`` -> ``"create an author{with}"``), else None."""
    summary = (tool.get("description") or "").strip().rstrip(".")
    toks = summary.lower().split()
    verbs = {
        "list": ("list", "search", "find", "browse"),
        "create": ("create", "add", "register"),
        "delete": ("delete", "remove"),
    }
    if toks and toks[0].endswith("s") and toks[0][:-1] in verbs.get(kind, ()):
        summary, toks = summary[: len(toks[0]) - 1] + summary[len(toks[0]) :], [toks[0][:-1], *toks[1:]]
    if (
        not toks
        or len(toks) > 8
        or kind not in verbs
        or toks[0] not in verbs[kind]
        or not re.fullmatch(r"[A-Za-z ,'-]+", summary)
        or quotes_a_word(summary)
    ):
        return None
    said = spoken_words(tool["table"]) + spoken_words(spoken_table(tool))
    nouns = set(said) | {singular(t) for t in said}
    if not any(singular(t) in nouns or t in nouns for t in toks[1:]):
        return None
    rest = summary.split()[1:]
    if sum(1 for w in rest if re.fullmatch(r"[A-Z][a-z]+", w)) >= 2:  # "Add a Content Submission Type": title case
        summary = " ".join([summary.split()[0], *(w.lower() if re.fullmatch(r"[A-Z][a-z]+", w) else w for w in rest)])
    text = summary[0].lower() + summary[1:]
    if kind == "list":
        last = text.split()[-1]
        if last.lower() in nouns and reads_singular(last):
            # "List all bank account": a request for rows names them in the plural
            text = text[: -len(last)] + inflected_plural(last)
        return text + "{where}"
    if kind == "create":
        return text + "{with}"
    return None


#: How a list request states its filters: the lead and each filter's form (the solver reads each).
_FILTER_FORMS = (
    (" where ", "{label} is {value}"),
    (" where ", "{label} is {value}"),
    (" with ", "{label} {value}"),
    (" that have ", "{label} {value}"),
    (" where ", "{label} is set to {value}"),
)

#: The filter form of a list request with a flag named by a verb ("with uses task dependencies set to false").
_VERB_FLAG_FORM = (" with ", "{label} set to {value}")


def _verb_led(name: str) -> bool:
    """Whether the field ``name``'s words open with a verb (``uses_task_dependencies``, ``can_activate``,
    ``allow_comments``), so that "<words> is no" does not read as a sentence."""
    low = spoken_field(snake_case(name)).lower().split()
    if len(low) < 2:
        return False
    return (
        low[0] in ("can", "does", "should", "will")
        or low[0] in _PREDICATE_VERBS
        or singular(low[0]) in _PREDICATE_VERBS
    )


def describe_call(
    tool: dict[str, Any],
    key: str,
    args: dict[str, Any],
    refs: dict[str, str] | None = None,
    rng: random.Random | None = None,
    stated: list[tuple[str, Any]] | None = None,
) -> str:
    """One imperative request asking for ``tool`` with ``args``.

    ``refs`` maps argument names to reference phrases ("the company you just created") that replace
    the literal; an argument mapped to ``""`` is omitted from the sentence. Without ``rng`` the raw plan is
    used (names as in the spec, values literal); with ``rng`` one of several plans per kind (or the spec's
    summary) is drawn, with spoken table names (:func:`spoken_table`), field labels and values.

    ``stated``: ``[(field, value)]`` of the named row that the request states after the row
    ("pull request 'pul_00009' (owner 'Susan Fry', repo 'harper-service')"), for a real MCP signature that
    takes them besides the row's identifier (:func:`stated_row_fields`); no argument of ``args``.
    """
    refs = refs or {}
    props = tool.get("input_schema", {}).get("properties", {})
    natural = rng is not None
    thing = spoken_thing(spoken_table(tool)) if natural else words(singular(tool["table"]))
    things = spoken_things(spoken_table(tool)) if natural else words(tool["table"])

    # a description's phrase that labels two fields ("date and time" for date_created and date_updated)
    # names neither: only each field's own words are used then
    seen_labels: dict[str, int] = {}
    own_words = {words(n).lower() for n in props}  # a label that is another field's own name names that field
    for n in props if natural else ():
        for lab in field_labels(n, props[n]):
            seen_labels[lab] = seen_labels.get(lab, 0) + 1

    def label(name: str) -> str:
        said = spoken_field(name)
        if not natural:
            # the raw register states each field by its name, written out where it has short forms ("QR
            # number" for qr_no) unless another field's own name reads so
            plain = said.lower() != words(name).lower() and not name.endswith("_id") and said.lower() not in own_words
            return said if plain else spoken_name(name)
        options = field_labels(name, props.get(name))
        options = options[:1] + [lab for lab in options[1:] if seen_labels.get(lab, 0) < 2 and lab not in own_words]
        if said.lower() != options[0] and said.lower() in options:
            # a name of short forms ("qr no") is written out as a person would ("QR number")
            options = [said] + [lab for lab in options[1:] if lab != said.lower()]
        else:
            options[0] = spoken_name(name)  # its initialisms in capitals: "color RGB", "VM ID"
        if len(options) > 1 and _FLAG_PREFIX.match(options[0]) and props.get(name, {}).get("type") == "boolean":
            return options[1]  # the flag by what it says: "active is no"
        return options[rng.randrange(len(options))] if natural and len(options) > 1 else options[0]

    def val(name: str) -> str | None:
        if name in refs:
            return refs[name] or None
        return spoken_value(args[name], props.get(name), rng) if natural else literal(args[name])

    kind = tool["kind"]
    if kind in _RELATION_PLANS:
        return _relation_request(tool, val, args, refs, rng)
    subject = ""
    if tool.get("singleton"):
        subject = f"the {things if tool['table'].endswith('s') else thing}"
    elif kind in KEYED_KINDS or (kind == "computed_read" and computed_scope(tool) == "item"):
        target = val(key)
        subject = (
            target
            if target and target.startswith(_REFERENCE_START)
            else (f"{thing} {target}" if target else f"that {thing}")
        )
        subject += row_fields_phrase(stated or [], rng)
    fields = [(n, val(n)) for n in args if n not in (key, "limit", "offset", "query")]
    fields = [(n, v) for n, v in fields if v]
    # a foreign key named by a reference reads "for the author whose name is 'X'", not "author id the author"
    owners = " ".join(f"for {v}" for _, v in fields if v.startswith(_REFERENCE_START))

    def listing(items: list[str]) -> str:
        # a person ends a list with "and" about as often as not
        if natural and len(items) > 1 and rng.random() < 0.5:
            return ", ".join(items[:-1]) + " and " + items[-1]
        return ", ".join(items)

    def stated(name: str, value: str) -> str:
        # "status 'active'", "status set to 'active'" or "an amount of 651": people vary how they pair a
        # field with its value (the solver reads each, solve._arguments)
        draw = rng.random() if natural else 1.0
        if draw < 0.25:
            return f"{label(name)} set to {value}"
        if draw < 0.45 and isinstance(args.get(name), (int, float)) and not isinstance(args.get(name), bool):
            return f"{label(name)} of {value}"
        return f"{label(name)} {value}"

    if kind == "transfer" and tool.get("transfer"):
        return _transfer_request(tool, thing, subject, fields, stated, listing, rng)
    setting = listing([stated(n, v) for n, v in fields if not v.startswith(_REFERENCE_START)])
    where = ""
    if kind in ("list", "search", "count", "computed_read"):
        named = [v for _, v in fields if v.startswith(_REFERENCE_START)]
        plain = [(n, v) for n, v in fields if not v.startswith(_REFERENCE_START)]
        where = "".join(f" of {v}" for v in named)
        if plain:
            # "where genre is 'fiction'", "with genre 'fiction'" or "that have genre 'fiction'"
            # (a flag reads "where active is no", never "that have active no")
            forms = [
                f for f in _FILTER_FORMS if " is " in f[1] or not any(isinstance(args.get(n), bool) for n, _ in plain)
            ]
            form = rng.choice(forms) if natural else _FILTER_FORMS[0]
            if any(isinstance(args.get(n), bool) and _verb_led(n) for n, _ in plain):
                # "where uses task dependencies is no" reads as broken: a flag named by a verb is set, not is
                form = _VERB_FLAG_FORM
                plain = [(n, literal(args[n]) if isinstance(args.get(n), bool) else v) for n, v in plain]
            where += form[0] + " and ".join(form[1].format(label=label(n), value=v) for n, v in plain)
        if args.get("offset") and "offset" not in refs:
            where += f", skipping the first {args['offset']}"
        where += _limit_words(args, refs, rng)
    plan_vars = {
        "thing": thing,
        "things": things,
        "subject": subject,
        "where": where,
        "with": (f" {owners}" if owners else "") + (f" with {setting}" if setting else ""),
        "changes": listing([f"{label(n)} to {v}" for n, v in fields]),
        "changes_is": listing([_change_is(n, v, args, refs, label) for n, v in fields]),
        "query": val("query") if "query" in args else "",
        "verb": (tool.get("action") or tool.get(kind) or {}).get("verb", kind),
        # the operation's own word for its figure ("balance"), as a person says it
        "figure": figure_word(tool) if kind == "computed_read" else "",
    }
    plan_kind = "get_one" if kind == "get" and tool.get("singleton") else kind
    if kind in ("transfer", "side_effect"):
        plan_kind = "verb_with"  # a verb on one row, with its other arguments stated
    elif kind == "computed_read":
        plan_kind = "figure" if computed_scope(tool) == "item" else "totals"
    if not natural:
        plans = {
            "list": "show me the {things}{where}",
            "get": "look up {subject} and tell me its details",
            "create": "create a new {thing}{with}",
            "update": "change {subject}: set {changes}",
            "delete": "delete {subject}",
            "search": "search the {things} for {query}{where}",
            "count": "count the {things}{where}",
            "action": "{verb} {subject}",
            "verb_with": "{verb} {subject}{with}",
            "totals": "give me the totals of the {things}{where}",
            "figure": "look up the {figure} of {subject}",
            "get_one": "look up {subject}",
        }
        plan = plans[plan_kind]
    else:
        options = list(_PLANS[plan_kind])
        summary = _summary_plan(tool, kind)
        if summary:
            options.append(summary)
        plan = options[rng.randrange(len(options))]
    if kind == "update" and not fields:
        return f"update {subject}"
    return an(plan.format(**plan_vars))


#: Leads of a transfer's request in the person's words (:func:`_transfer_request`); the raw plan has none.
_TRANSFER_LEADS = ("", "please ", "could you ", "I need you to ", "go ahead and ", "can you ")
#: How an amount moves, by the spec's transfer verb: the words a person asks with, and the preposition that
#: names the row the amount leaves or reaches.
_TRANSFER_WORDS = {
    "transfer": (("move", "transfer"), "from"),
    "withdraw": (("withdraw",), "from"),
    "deposit": (("deposit",), "into"),
}


def _transfer_request(
    tool: dict[str, Any],
    thing: str,
    subject: str,
    fields: list[tuple[str, str]],
    stated: Callable[[str, str], str],
    listing: Callable[[list[str]], str],
    rng: random.Random | None,
) -> str:
    """:func:`describe_call`'s request for a transfer tool, from its ``transfer`` spec (``verb``, ``amount``,
    ``destination``, ``thing``), as a person asks to move an amount: ``"move 33 from bin 'bin_1' to bin
    'bin_2'"``, ``"withdraw 50 from account 'acc_1'"``, ``"deposit 20 into account 'acc_1'"``; a row named by a
    reference keeps it (``"from the bin you created earlier to bin 'bin_2'"``) and any other argument follows
    (``" with memo 'x'"``; a row it points at by a reference: ``" for the order ..."``).

    ``thing``: a row of the table as :func:`describe_call` says it; ``subject``: the source row as it names it;
    ``fields``: ``[(argument, value as written)]`` besides the key; ``stated`` and ``listing``:
    :func:`describe_call`'s own writers. Without ``rng`` the raw plan: no lead, and for a transfer the verb the
    tool's own name or summary uses ("transfer" where it says so, else "move")."""
    tr = tool["transfer"]
    verbs, preposition = _TRANSFER_WORDS.get(tr["verb"], ((tr["verb"],), "from"))
    if rng is None:
        said = set(re.findall(r"[a-z]+", f"{tool['name']} {tool.get('description') or ''}".lower().replace("_", " ")))
        verb = verbs[-1] if tr["verb"] == "transfer" and verbs[-1] in said else verbs[0]
        lead = ""
    else:
        verb, lead = rng.choice(verbs), rng.choice(_TRANSFER_LEADS)
    given = dict(fields)
    # an amount left out (no plan leaves it out today) is still named by what moves
    amount = given.get(tr["amount"]) or f"the {spoken_field(tr['field'])}"
    text = f"{verb} {amount} {preposition} {subject}"
    destination = tr.get("destination")
    if destination:
        target = given.get(destination)
        if not target:
            text += f" to another {thing}"
        elif target.startswith(_REFERENCE_START):
            text += f" to {target}"
        else:
            text += f" to {thing} {target}"  # a row of the source's table, named by the same noun
    rest = [(n, v) for n, v in fields if n not in (tr["amount"], destination)]
    owners = " ".join(f"for {v}" for _, v in rest if v.startswith(_REFERENCE_START))
    setting = listing([stated(n, v) for n, v in rest if not v.startswith(_REFERENCE_START)])
    text += (f" {owners}" if owners else "") + (f" with {setting}" if setting else "")
    return an(lead + text)


def row_fields_phrase(stated: list[tuple[str, Any]], rng: random.Random | None = None) -> str:
    """How a request states ``[(field, value)]`` of the row it names, right after the row: ``" (owner 'Susan
    Fry', repo 'harper-service')"``; with ``rng`` also ``" (the one with owner ... and repo ...)"`` and spoken
    values. ``""`` for no fields."""
    if not stated:
        return ""
    said = [f"{spoken_field(f)} {spoken_value(v, None, rng) if rng else literal(v)}" for f, v in stated]
    if rng is not None and rng.random() < 0.5:
        return f" (the one with {' and '.join(said)})"
    return f" ({', '.join(said)})"


def stated_row_fields(call: dict[str, Any]) -> list[tuple[str, Any]]:
    """``[(field, value)]`` a request for ``call`` states besides its arguments: the fields of the named row a
    real MCP signature takes (``get_issue``'s ``owner`` and ``repo``) that no earlier tool result showed the
    agent (``row_arguments`` of provenance ``user``, recorded at execution by
    :func:`~envfactory_assets.synth.trajectories.real_calls.known_row_arguments`); each field once."""
    out: dict[str, Any] = {}
    for item in (call.get("row_arguments") or {}).values():
        if item["provenance"].get("source") == "user":
            out.setdefault(item["field"], item["value"])
    return list(out.items())


def _change_is(name: str, value: str, args: dict[str, Any], refs: dict[str, str], label: Callable[[str], str]) -> str:
    """One change of an update asked as what the row is to be (``"its status is 'open'"``); a boolean flag that
    says how its row is (:func:`flag_predicate`: ``disabled`` -> ``"it is disabled"`` / ``"it is not
    disabled"``) as that, since "its disabled is yes" names no field a person would say."""
    if name not in refs and isinstance(args.get(name), bool):
        predicate = flag_predicate(name, args[name])
        if predicate.startswith("is "):
            return f"it {predicate}"
    return f"its {label(name)} is {value}"


def _limit_words(args: dict[str, Any], refs: dict[str, str], rng: random.Random | None) -> str:
    """How a list request states its ``limit`` (``" (at most 5)"``; with ``rng`` one of several forms), or
    ``""`` without one."""
    if "limit" not in args or "limit" in refs:
        return ""
    if rng is None:
        return f" (at most {args['limit']})"
    return rng.choice(
        (
            f" (at most {args['limit']})",
            f", just the first {args['limit']}",
            f", up to {args['limit']} of them",
        )
    )


#: Sentence plans of a relation's tools. {member}, {parent}: the two rows ("user 'use_1'", "the new group");
#: {role}/{roles}: the sub-collection's word for a member ("member", "watchers"); {where}: a list's limit. The
#: raw plan comes first; like the others, each starts with its verb.
_RELATION_PLANS: dict[str, tuple[str, ...]] = {
    "relation_add": (
        "add {member} to {parent}",
        "please add {member} to {parent}",
        "could you add {member} to {parent} as a {role}",
        "add {member} as a {role} of {parent}",
        "go ahead and add {member} to {parent}",
        "can you add {member} to the {roles} of {parent}",
    ),
    "relation_remove": (
        "remove {member} from {parent}",
        "please remove {member} from {parent}",
        "could you remove {member} from the {roles} of {parent}",
        "remove {member} as a {role} of {parent}",
        "go ahead and remove {member} from {parent}",
        "drop {member} from the {roles} of {parent}",
    ),
    "relation_list": (
        "show me the {roles} of {parent}{where}",
        "list the {roles} of {parent}{where}",
        "could you list the {roles} of {parent}{where}",
        "please show me all {roles} of {parent}{where}",
        "can you list who the {roles} of {parent} are{where}",
        "I'd like a list of the {roles} of {parent}{where}",
    ),
}


def _relation_request(
    tool: dict[str, Any],
    val: Callable[[str], str | None],
    args: dict[str, Any],
    refs: dict[str, str],
    rng: random.Random | None,
) -> str:
    """:func:`describe_call`'s request for a relation's tool: its two rows named like a keyed tool's subject
    (a reference phrase as it is, else the row's noun and value), the raw plan without ``rng``."""
    rel = tool["relation"]

    def named(field: str, table: str, noun: str) -> str:
        target = val(field)
        if target and target.startswith(_REFERENCE_START):
            return target
        word = spoken_thing(table) if rng is not None else noun
        return f"{word} {target}" if target else f"that {word}"

    member = named(rel["member_field"], rel["member"], rel["member_thing"]) if rel["member_field"] in args else ""
    plan_vars = {
        "member": member,
        "parent": named(rel["parent_field"], rel["parent"], rel["parent_thing"]),
        "role": rel["role"],
        "roles": words(plural(rel["role"])),
        "where": _limit_words(args, refs, rng),
    }
    plans = _RELATION_PLANS[tool["kind"]]
    plan = plans[0] if rng is None else plans[rng.randrange(len(plans))]
    return an(plan.format(**plan_vars))


def minting_call(
    history: list[dict[str, Any]], turn_start: int, upto: int, value: Any, key_of: Callable[[str], str]
) -> int | None:
    """Position of the ``create`` call among ``history[turn_start:upto + 1]`` that assigned ``value`` as its
    new row's identifier (``key_of(tool name)`` names that field; a result that only carries the value, as a
    lookup of the new row or a row referring to it, did not assign it), or None."""
    for pos in range(turn_start, min(upto + 1, len(history))):
        call = history[pos]
        if (
            call["kind"] == "create"
            and isinstance(call.get("output"), dict)
            and call["output"].get(key_of(call["name"])) == value
        ):
            return pos
    return None


def new_value_refs(
    call: dict[str, Any],
    history: list[dict[str, Any]],
    turn_start: int,
    tools: dict[str, dict[str, Any]],
    key_of: Callable[[str], str],
) -> dict[str, str]:
    """References for the arguments of ``call`` that a ``create`` call of the same turn assigns (positions
    ``>= turn_start`` of ``history``; ``key_of`` names a tool's row identifier): the user cannot know such a
    value yet, so the request names it by what creates it (``{"book_id": "the new book"}``), never quotes it,
    even when the value reaches the call through another result (a lookup of the new book, a row that
    carries its id)."""
    refs = {}
    for arg, prov in call["provenance"].items():
        if prov.get("source") == "output" and prov.get("call", -1) >= turn_start:
            minted = minting_call(history, turn_start, prov["call"], call["arguments"].get(arg), key_of)
            if minted is not None:
                refs[arg] = f"the new {words(singular(tools[history[minted]['name']]['table']))}"
    return refs


#: How a request may pair a field with its value in a list of them ("status set to 'active'",
#: :func:`describe_call`); ``""``: the value right after the field.
VALUE_CONNECTORS = ("", "set to ", "of ")

#: Connectives between two requests of one message (:func:`join_sentences`; the solver splits a query at each,
#: ``solve._clauses``, and the conversational mode tidies around them): inside a sentence after a comma
#: (``", and afterwards "``) or opening the next sentence (``". Afterwards, "``).
COMMA_JOINTS = (
    "then",
    "and then",
    "and after that",
    "and once that is done,",
    "and afterwards",
    "and when that is done,",
    "and after this",
    "and following that,",
)
SENTENCE_JOINTS = (
    "Then",
    "Also",
    "And then",
    "Next,",
    "After that,",
    "Afterwards,",
    "Following that,",
    "Once that is done,",
    "After this,",
    "When that is done,",
    "On top of that,",
)
#: ... and those that only introduce a message's last request.
LAST_JOINTS = ("Finally,", "Lastly,", "To finish,", "and finally")


def join_sentences(parts: list[str], rng: random.Random | None = None) -> str:
    """Join per-call requests into one user message: ``"A, then B, and then C."``; with ``rng`` the
    connectives vary (:data:`COMMA_JOINTS`, :data:`SENTENCE_JOINTS`, and :data:`LAST_JOINTS` before the last)."""
    if not parts:
        return ""
    text = parts[0][0].upper() + parts[0][1:]
    for i, part in enumerate(parts[1:], 1):
        last = i == len(parts) - 1
        if rng is None:
            text += (", then " if not last else ", and then ") + part
            continue
        options = [
            *(f", {j} " for j in COMMA_JOINTS),
            *(f". {j} " for j in SENTENCE_JOINTS),
            *((f". {j} " if j[0].isupper() else f", {j} " for j in LAST_JOINTS) if last else ()),
        ]
        joint = rng.choice(options)
        if joint.startswith(". "):
            text = text.rstrip("?") + joint + part
        else:
            text += joint + part
    return text if text.endswith(("?", ".")) else text + "."


# ----------------------------------------------------------------------------- persona register
_OPENERS = {
    "formal": (
        "Hello, I am {persona}. ",
        "Good morning. As {persona}, I need some help. ",
        "Hello. I work as {persona}. ",
        "Good afternoon, this is {persona}. ",
        "As {persona}, I have a few requests. ",
        "Good day. I am {persona} and need a few things done. ",
        "Hello, {persona} here. ",
        "Dear assistant, I am {persona}. ",
        "Good morning, I'm {persona} and would like your help. ",
    ),
    "casual": (
        "Hi! I'm {persona}. ",
        "Hey there, {persona} here. ",
        "Hi, quick one from {persona}. ",
        "Hey, I'm {persona} and could use a hand. ",
        "Hi there, {persona} here with a few things. ",
        "Hey! {persona} here. ",
        "Hi, I'm {persona}. ",
        "Hello! I'm {persona} and need a hand. ",
        "Hey, {persona} here, hoping you can help. ",
    ),
}
_FOLLOW = {
    "formal": (
        "",
        "Next, ",
        "In addition, ",
        "Now, ",
        "Also, ",
        "Further, ",
        "Additionally, ",
        "Moving on, ",
        "Besides that, ",
    ),
    "casual": (
        "",
        "Ok, ",
        "Next up: ",
        "Now ",
        "Alright, ",
        "One more thing: ",
        "Right, ",
        "Okay, ",
        "Another thing: ",
        "While you're at it, ",
        "Oh, and ",
    ),
}
_CLOSERS = {
    "formal": (
        "",
        " Thank you.",
        " Many thanks.",
        " I appreciate your help.",
        " Thank you in advance.",
        " Thanks for your help.",
        " Much appreciated.",
    ),
    "casual": ("", " Thanks!", " Cheers.", " Appreciate it!", " Thanks a lot!", " Thanks so much.", " You're a star."),
}
_FORMAL = ("accountant", "analyst", "administrator", "agent", "manager", "librarian", "coordinator")


def strip_register(text: str) -> str:
    """``text`` without a closing thanks added by :func:`shape_for_persona` (so joined requests thank once)."""
    for closer in sorted({c for cs in _CLOSERS.values() for c in cs if c}, key=len, reverse=True):
        if text.endswith(closer):
            return text[: -len(closer)]
    return text


def strip_lead(text: str) -> str:
    """``text`` without a leading connective added by :func:`shape_for_persona` ("Next, "), for a request
    joined after another; the first letter stays as a sentence's inner word would be ("I" stays "I")."""
    for lead in sorted({x for xs in _FOLLOW.values() for x in xs if x}, key=len, reverse=True):
        if text.startswith(lead):
            text = text[len(lead) :]
            break
    return text if re.match(r"I\b|I'", text) else text[:1].lower() + text[1:]


_ARTICLE = re.compile(r"\b([Aa])(n?) ([A-Za-z][\w-]*)")
#: Words after which a lone "a" is a letter ("option a or b"), not an article.
_NOT_A_NOUN = frozenset({"and", "or", "is", "if", "of", "on", "in", "at", "to", "as"})


def an(text: str) -> str:
    """Every indefinite article in ``text`` agreeing with the sound of the word after it (``"a appointment"``
    -> ``"an appointment"``, ``"an user"`` -> ``"a user"``; :func:`~envfactory_assets.sources.names.
    indefinite_article`)."""

    def agree(m: re.Match[str]) -> str:
        if m[3].lower() in _NOT_A_NOUN:
            return m[0]
        article = indefinite_article(m[3])
        return (m[1] + article[1:]) + " " + m[3]

    return _ARTICLE.sub(agree, text)


def persona_style(persona: str | None) -> str:
    """The register of a stored persona: ``"formal"`` for professional roles (accountant, administrator...),
    ``"casual"`` otherwise; ``"plain"`` when there is no persona."""
    if not persona:
        return "plain"
    return "formal" if any(w in persona for w in _FORMAL) else "casual"


def shape_for_persona(text: str, persona: str | None, first_turn: bool, rng: random.Random) -> str:
    """``text`` in the persona's register: the first turn opens with who asks ("Hi! I'm a shop owner."),
    later turns may open with a connective ("Next, "); either may close with thanks. Plain without persona."""
    style = persona_style(persona)
    if style == "plain" or not text:
        return text
    body = text
    if first_turn:
        # a persona opening a sentence ("Hey! {persona} here.") starts with a capital: "A DevOps engineer"
        opener = re.sub(
            r"(^|[.!?] )([a-z])", lambda m: m[1] + m[2].upper(), rng.choice(_OPENERS[style]).format(persona=persona)
        )
        body = opener + body[0].upper() + body[1:]
    else:
        lead = rng.choice(_FOLLOW[style])
        if lead:
            body = lead + (body if re.match(r"I\b|I'", body) else body[0].lower() + body[1:])
    return body + rng.choice(_CLOSERS[style])
