"""The assistant's closing reply of a turn, written from the turn's tool results alone (the offline writer).

One sentence per call, chosen among several sentence plans per situation (rows read, none read, a count, a
row looked up, created, updated, deleted, moved to a state, a refused call), joined with varied connectors and
framed by an optional opener and closer. Every fact a sentence states comes from the call's result:

- after a read, the number of rows the result returned (now and then in words), and a total ("of 6") only
  where the result states one (``total``); up to three of the rows named by a readable field (a name, title,
  subject...) or else by their identifier, the first ones with a short field or two of their own
  ("'Alpha' (status 'active', priority 3)");
- after a get, up to three short fields of the returned row; after a create, the values the returned row holds
  for the fields the call set; after an update, the changed fields as the returned row holds them; after a
  write, the row as the result shows it (its label or identifier);
- the request's subject where the call's arguments name it and the result shows it ("for customer cus_1"
  where the rows hold that value under the argument's field, "matching 'street'" where a returned text holds
  the searched word);
- after a transfer, the amount moved, both rows and what they hold now ("I moved 80.48 from account acc_1 to
  account acc_2; account acc_1 now holds 208.29"); after a withdrawal or deposit (whose result is the row
  alone) what the row holds now; after a side effect, the thing done for its row ("I sent webhook web_3 a test
  ping", "I queued a sync of repository r_1"), with the arguments its record holds; after a computed read, its
  figures ("there are 12 orders, totalling 1,204.50"), amounts written with grouped thousands;
- a refused call is reported with the reason its result gives, never as done (a refused transfer as nothing
  moved);
- a boolean field is said as what it says of the row ("it is not a bot and not blocked", "'Alpha' (not
  blocked)"; :func:`~envfactory_assets.synth.refinement.phrasing.flag_predicate`), not as "bot no".

Secrets and machine values (passwords, tokens, hashes) and a row's bookkeeping times are left out or said
last. A reply of many calls states fewer row facts, so it stays near 60 words.

Plans are phrased from the operation's own summary where it reads as an action ("Gets all bike point
locations" -> "I got all bike point locations", "Create a single Project" -> "I created the project"), else
from the tool's kind (:func:`summary_action`). The plan and connectors are drawn
from ``random.Random(seed)``, the seed derived from the trajectory and turn, so a run reproduces exactly.
:mod:`envfactory_assets.quality.reply_facts` checks the written replies independently.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envfactory_assets.graph.parameters import RECORD_TIME, Parameter, names_a_time, value_kind
from envfactory_assets.sources.names import (
    indefinite_article,
    inflected_plural,
    plural,
    reads_plural,
    reads_singular,
    spoken_thing,
    spoken_things,
)
from envfactory_assets.synth.refinement.phrasing import (
    an,
    figure_word,
    flag_predicate,
    quotes_a_word,
    spoken_table,
    spoken_value,
    words,
)

#: Field names (lower-cased, underscores and case folded away) that label a row for a person, best first.
_LABEL_FIELDS = (
    "name",
    "displayname",
    "fullname",
    "commonname",
    "companyname",
    "title",
    "subject",
    "label",
    "username",
    "email",
    "summary",
)
#: Verbs a summary may start with, and how the reply says them done.
_PAST = {
    "get": "got",
    "gets": "got",
    "find": "found",
    "finds": "found",
    "list": "listed",
    "lists": "listed",
    "search": "searched",
    "searches": "searched",
    "retrieve": "retrieved",
    "retrieves": "retrieved",
    "fetch": "fetched",
    "fetches": "fetched",
    "return": "pulled up",
    "returns": "pulled up",
    "show": "pulled up",
    "shows": "pulled up",
    "look": "looked",
    "looks": "looked",
    "read": "read",
    "reads": "read",
    "count": "counted",
    "counts": "counted",
    "create": "created",
    "creates": "created",
    "add": "added",
    "adds": "added",
    "register": "registered",
    "registers": "registered",
    "update": "updated",
    "updates": "updated",
    "modify": "modified",
    "modifies": "modified",
    "edit": "edited",
    "edits": "edited",
    "delete": "deleted",
    "deletes": "deleted",
    "remove": "removed",
    "removes": "removed",
    "enable": "enabled",
    "enables": "enabled",
    "disable": "disabled",
    "disables": "disabled",
    "cancel": "cancelled",
    "cancels": "cancelled",
    "publish": "published",
    "publishes": "published",
    "archive": "archived",
    "archives": "archived",
    "hide": "hid",
    "hides": "hid",
    "generate": "generated",
    "generates": "generated",
    "upload": "uploaded",
    "uploads": "uploaded",
    "place": "placed",
    "places": "placed",
    "start": "started",
    "starts": "started",
    "stop": "stopped",
    "stops": "stopped",
    "approve": "approved",
    "approves": "approved",
    "close": "closed",
    "closes": "closed",
    "open": "opened",
    "opens": "opened",
    "send": "sent",
    "sends": "sent",
    "assign": "assigned",
    "assigns": "assigned",
    "activate": "activated",
    "activates": "activated",
    "deactivate": "deactivated",
    "deactivates": "deactivated",
    "complete": "completed",
    "completes": "completed",
}
#: How many times a plan phrased from the operation's summary counts among the plans of a situation: those
#: say what the call did in its API's own words, so they are drawn more often than the generic plans.
_DONE_WEIGHT = 3
#: Tails of a generated default summary that say how, not what ("List books, optionally filtered.").
_SUMMARY_TAILS = re.compile(r"\s*(?:,.*|\bby (?:its |their )?(?:identifier|id|text)\b.*|\boptionally\b.*)$", re.I)


#: Fields (folded as in :data:`_LABEL_FIELDS`) that make a row a person's: its ``title`` is then a job title
#: or an honorific ("CEO", "Mr."), which names no one.
_PERSON_FIELDS = frozenset({"firstname", "lastname", "givenname", "familyname", "surname", "middlename", "jobtitle"})


def row_label(row: Any) -> str | None:
    """A row's readable label: the value of its first field among :data:`_LABEL_FIELDS` (compared without case
    or underscores, ``commonName`` = ``common_name``) that is short non-empty text; None when it has none.

    Passed over: a person's ``title`` (the row has a first or last name: a job title such as "CEO") and a value
    that holds its own field's name ("Subject of the call" as a subject), an example left in the spec rather
    than a name anyone gives a row."""
    if not isinstance(row, Mapping):
        return None
    folded = {re.sub(r"[_\W]", "", str(k)).lower(): (k, v) for k, v in row.items()}
    person = bool(_PERSON_FIELDS & folded.keys())
    for field in _LABEL_FIELDS:
        key, value = folded.get(field, (None, None))
        if not isinstance(value, str) or not 0 < len(value.strip()) <= 80 or "\n" in value:
            continue
        if (field == "title" and person) or re.search(rf"\b{re.escape(_field_words(key))}\b", value.lower()):
            continue
        return value.strip()
    return None


def _quoted(text: str) -> str:
    return f"'{text}'"


#: Kinds of tool whose call touches one row: the reply names that row after the summary's words.
_ONE_ROW_KINDS = ("get", "create", "update", "delete", "action")
#: Words that end the noun phrase a summary's verb takes ("all products *visible* in POS").
_PHRASE_ENDS = frozenset(
    "of for in on at by from to with under within into over across that which who whose where when or and "
    "visible associated managed available based matching belonging owned".split()
)


def _object_head(rest: Sequence[str]) -> int | None:
    """The index in ``rest`` (a summary's words after its verb) of the last word of the noun phrase the verb
    takes, its head ("the user and account *records*", "all *products* visible in POS"); None when the phrase
    is empty. Words that end a phrase end it only after its first word ("all available markets")."""
    end = len(rest)
    for i, w in enumerate(rest):
        if i and w.lower() in _PHRASE_ENDS and not (w.lower() == "and" and i + 1 < len(rest)):
            end = i
            break
    if end and rest[end - 1].lower() in ("a", "an", "the", "all", "one"):
        return None
    return end - 1 if end else None


def summary_action(tool: Mapping[str, Any]) -> str | None:
    """The operation's summary said as done (``"Gets all bike point locations."`` -> ``"got all bike point
    locations"``), or None when it does not start with a known verb, is long, holds more than words, names its
    object after a preposition (``"GET for case"``, ``"List of all the groups"``), or names several rows where
    the call touches one (``"Creates a user and account records"``: the reply goes on to name the one row).

    The phrase reads as English where the summary does not: the row a get, create, update, delete or action
    touched is "the" row (``"Create a single Project"`` -> ``"created the project"``), an article agrees with
    the word after it (``"Archive a environment"`` -> ``"archived an environment"``), and what a list or a
    search returns "all" of is plural (``"List all product"`` -> ``"listed all products"``)."""
    summary = (tool.get("description") or "").strip().split(". ")[0].strip().rstrip(".")
    tail = _SUMMARY_TAILS.search(summary)
    if tail and re.match(r",\s*[\w-]+(?:\s+[\w-]+)?\s*(?:,|\band\b|\bor\b)", tail.group().strip()):
        return None  # "Gets all web, mobile, and API apps": the comma is inside a list, not before a tail
    summary = _SUMMARY_TAILS.sub("", summary).strip()
    toks = summary.split()
    if not toks or len(toks) > 9 or not re.fullmatch(r"[A-Za-z' -]+", summary) or quotes_a_word(summary):
        return None
    kind = tool.get("kind")
    if any(w.lower() in ("one", "two", "three", "single", "all") for w in toks[1:]) and kind in _ONE_ROW_KINDS:
        said: list[str] = []
        for w in toks:
            if w.lower() in ("one", "single"):
                if said and said[-1].lower() in ("a", "an", "the"):
                    said[-1] = "the"  # "a single project" is the one row: "the project", said once
                    continue
                w = "the"
            said.append(w)
        toks = said
    if any(w.lower() == "or" for w in toks[1:3]):
        return None  # "Retrieve or search ...": two actions, not one done
    past = _PAST.get(toks[0].lower())
    if past is None or len(toks) < 2 or toks[1].lower() in _PHRASE_ENDS:
        return None
    rest = [w.lower() if re.fullmatch(r"[A-Z][a-z]+", w) else w for w in toks[1:]]
    # "the specified job", "a given schedule": the reply is about the row the call touched
    rest = [
        w for i, w in enumerate(rest) if not (w in ("specified", "given") and i and rest[i - 1] in ("the", "a", "an"))
    ]
    if rest[0].lower() in ("a", "an", "one") and kind in _ONE_ROW_KINDS:
        rest[0] = "the"  # the reply is about the one row the call touched
    head = _object_head(rest)
    if head is not None and kind in ("create", "update", "delete", "action") and reads_plural(rest[head]):
        return None
    if head is not None and kind in ("list", "search") and "all" in (w.lower() for w in rest[:head]):
        if re.fullmatch(r"[A-Za-z][A-Za-z-]*", rest[head]) and reads_singular(rest[head]):
            rest[head] = inflected_plural(rest[head])
    return an(" ".join([past, *rest]))


class _Call:
    """What one call's sentence needs: its words and its result, read once."""

    def __init__(
        self, call: Mapping[str, Any], tool: Mapping[str, Any], key: str, room: int = 2, name_rows: bool = False
    ) -> None:
        self.tool, self.key, self.args, self.room = tool, key, call.get("arguments") or {}, room
        self.out = call.get("output")
        self.kind = tool.get("kind") or call.get("kind") or ""
        table = spoken_table(dict(tool)) if tool.get("table") else words(str(tool.get("name", "item")))
        self.thing, self.things = spoken_thing(table), spoken_things(table)
        relation = tool.get("relation") or {}
        if relation.get("role"):  # a relation's rows are its members: "members", not "group members"
            self.thing, self.things = words(relation["role"]), spoken_things(plural(relation["role"]))
        # the summary's "got the book" does not say which book: a reply to several calls of one tool names
        # each call's target instead
        self.done = None if name_rows else summary_action(tool)
        if self.done and self.kind in ("list", "search") and set(self.args) - _PAGING_ARGS:
            # "listed all bank accounts" of a call filtered by currency says it did not filter
            self.done = re.sub(r"\ball (?:the )?", "the ", self.done)
        self.name_rows = name_rows
        out = self.out if isinstance(self.out, Mapping) else {}
        self.refusal = (
            str(out["message"]).strip().rstrip(".")
            if set(out) == {"error", "message"} and str(out.get("message") or "").strip()
            else None
        )
        label = row_label(out)
        ident = _ident_of(out, key)
        if ident is None and name_rows:
            # a row that does not hold its key under the argument's name: the target is the one asked for
            ident = _ident_of(self.args, key)
        self.label, self.ident = label, ident
        if tool.get("singleton"):
            self.who = f"the {self.thing}"
        elif label and ident is not None and name_rows and str(ident) != label:
            self.who = f"{self.thing} {ident} ({_quoted(label)})"
        elif label:
            self.who = f"{self.thing} {_quoted(label)}"
        elif ident is not None:
            self.who = f"{self.thing} {ident}"
        else:
            self.who = f"the {self.thing}"

    def noun(self, n: int) -> str:
        return self.thing if n == 1 else self.things


def _ident_of(row: Any, key: str) -> str | int | None:
    value = row.get(key) if isinstance(row, Mapping) else None
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _name_of(row: Any, key: str) -> str | None:
    """A row as a person names it: its label quoted, else its identifier; None when it has neither."""
    label = row_label(row)
    if label:
        return _quoted(label)
    ident = _ident_of(row, key)
    return None if ident is None else str(ident)


def _listing(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(name))


def _field_words(name: str) -> str:
    return words(_snake(name)).lower()


#: Arguments of a list or search that page through its rows rather than filter them.
_PAGING_ARGS = frozenset({"limit", "offset", "page", "page_size", "per_page", "cursor", "max_results", "page_token"})
#: Field words that say what state a row is in: beside the state an action has just set, another of them
#: ("cancelled", "status 'PREPARING'") would say a second state, often the opposite one.
_STATE_WORDS = re.compile(r"\b(?:status|state|phase|stage)\b")
#: A field's name that marks when a row was written, not what it holds.
_BOOKKEEPING = re.compile(r"\b(?:created|updated|modified|inserted|changed)\b|\bdate (?:created|updated|modified)\b")
#: Words of a field's name that mark a secret or a machine value no reply repeats.
_UNSAID_FIELD_WORDS = frozenset({"password", "secret", "token", "hash", "signature", "key", "salt", "checksum"})
#: Last words of a field's name that would make the number after it read as a total ("from 5") or a count.
_FIELD_TAILS_TO_SKIP = frozenset({"of", "from", "total", "in", "out", "count", "all"})


def _sayable(key: str, value: Any, limit: int = 40) -> bool:
    """``value`` of field ``key`` is a short scalar a sentence may state as "field value"."""
    if isinstance(value, float) and ("e" in repr(value) or not value == value):
        return False
    if not isinstance(value, (int, float, str)) or isinstance(value, str) and not value.strip():
        return False
    text = str(value)
    said = _field_words(key).split()
    return (
        len(text) <= limit
        and "'" not in text
        and "\n" not in text
        and bool(said)
        and said[-1] not in _FIELD_TAILS_TO_SKIP
        and not _UNSAID_FIELD_WORDS & set(said)
        and not re.fullmatch(r"[0-9a-fA-F]{16,}|\S{24,}", text)
    )


def _fact_fields(row: Any, key: str, only: Sequence[str] | None = None) -> list[str]:
    """Fields of ``row`` a reply may state (short scalars; the key, labels and identifier fields left out),
    among ``only`` when given, in the row's order."""
    if not isinstance(row, Mapping):
        return []
    skip = {key, *(k for k in row if re.sub(r"[_\W]", "", str(k)).lower() in _LABEL_FIELDS)}
    return [
        k
        for k, v in row.items()
        if k not in skip and not str(k).lower().endswith("id") and (only is None or k in only) and _sayable(k, v)
    ]


def _row_facts(
    row: Any,
    key: str,
    rng: random.Random,
    most: int,
    only: Sequence[str] | None = None,
    keep_order: bool = False,
    joiner: str = " ",
) -> tuple[list[str], list[str]]:
    """Up to ``most`` fields of ``row`` (see :func:`_fact_fields`), drawn with ``rng``, as ``(values, flags)``:
    a value as "field value" (``"status 'open'"``), a boolean as what it says of the row
    (:func:`~envfactory_assets.synth.refinement.phrasing.flag_predicate`: ``"is not blocked"``), which
    :func:`_flag_clause` or :func:`_bare` phrase; a row's bookkeeping times ("created at") only where too few
    other fields are there, since they say least."""
    fields = _fact_fields(row, key, only)
    if len(fields) > most:
        telling = [k for k in fields if not _BOOKKEEPING.search(_field_words(k))]
        chosen = rng.sample(telling, min(most, len(telling)))
        chosen += rng.sample([k for k in fields if k not in telling], most - len(chosen))
        fields = sorted(chosen, key=fields.index) if keep_order else chosen
    values = [f"{_field_words(k)}{joiner}{spoken_value(row[k], rng=rng)}" for k in fields if not _is_flag(row[k])]
    return values, [flag_predicate(str(k), row[k]) for k in fields if _is_flag(row[k])]


def _is_flag(value: Any) -> bool:
    return isinstance(value, bool)


def _flag_clause(flags: Sequence[str], now: bool = False) -> str:
    """Flags said of the row the sentence is about, as one clause: ``["is not a bot", "is not blocked"]`` ->
    ``"it is not a bot and not blocked"``; ``now``: the flags a call has just set (``"... blocked now"``)."""
    said = [f[3:] if i and f.startswith("is ") and flags[i - 1].startswith("is ") else f for i, f in enumerate(flags)]
    return "it " + _and_list(said) + (" now" if now else "")


def _bare(flag: str) -> str:
    """A flag as a row's descriptor, in brackets beside its name: ``"is not blocked"`` -> ``"not blocked"``,
    ``"has no duration"`` stays."""
    return flag[3:] if flag.startswith("is ") else flag


def _and_list(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


#: Arguments that hold the text a search looks for.
_QUERY_ARGS = frozenset({"q", "query", "search", "keyword", "keywords", "term", "text", "filter"})


def _holds_word(texts: Sequence[str], needle: str) -> bool:
    low = needle.lower()
    pattern = re.compile(rf"(?<![\w]){re.escape(low)}(?![\w])")
    return any(t.lower() == low or pattern.search(t.lower()) for t in texts)


def _subject(c: _Call, rows: Sequence[Any]) -> str | None:
    """The request's subject as the call's arguments name it and its result shows it: a parent row
    ("for customer cus_00001", where the returned rows hold that value under the argument's field) or the
    searched text ("matching 'street'", where a returned text holds it as a word); None when there is none."""
    mappings = [r for r in rows if isinstance(r, Mapping)]
    if c.name_rows and c.kind != "get":
        # the filter the calls differ in, as the request stated it ("with genre 'fiction'")
        for arg, value in c.args.items():
            if arg != c.key and isinstance(value, (str, int, float)) and not isinstance(value, bool):
                return f"with {_field_words(arg)} {_quoted(value) if isinstance(value, str) else value}"
    for arg, value in c.args.items():
        if not isinstance(value, str) or not value.strip() or "'" in value or len(value) > 40 or arg == c.key:
            continue
        name = _field_words(arg)
        if name.endswith(" id") and mappings and all(r.get(arg) == value for r in mappings):
            parent = name[: -len(" id")].strip()
            if len(parent) < 3 or re.search(r"\d", parent):
                continue
            said = value if re.search(r"\d|_|@", value) else _quoted(value)
            return f"for {parent} {said}"
        if str(arg).lower() in _QUERY_ARGS and mappings:
            texts = [v for r in mappings for v in r.values() if isinstance(v, str)]
            if _holds_word(texts, value):
                return f"matching {_quoted(value)}"
    return None


_NUMBER_NAMES = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _amount(n: int, rng: random.Random) -> str:
    """A count of rows as a person writes it: a small one now and then in words (``3`` or ``three``)."""
    return _NUMBER_NAMES[n] if 1 <= n < len(_NUMBER_NAMES) and rng.random() < 0.5 else str(n)


def _pick(rng: random.Random, options: Sequence[str]) -> str:
    return options[rng.randrange(len(options))]


def _named_rows(c: _Call, items: Sequence[Any], rng: random.Random) -> list[str]:
    """Up to three rows named (label, else identifier); the first one or two with a fact or two in brackets
    ("'Alpha' (status 'active', priority 3)"), fewer when the turn has many calls (``c.room``)."""
    named: list[str] = []
    for i, row in enumerate(items[:3]):
        name = _name_of(row, c.key)
        if name is None:
            continue
        most = 0
        if i == 0:
            most = min(2, c.room)
        elif c.room >= 2:
            most = 1
        values, flags = _row_facts(row, c.key, rng, most) if most else ([], [])
        facts = values + [_bare(f) for f in flags]
        named.append(f"{name} ({', '.join(facts)})" if facts else name)
    return named


def _read_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    items = out.get("items") if isinstance(out.get("items"), list) else (c.out if isinstance(c.out, list) else [])
    n = len(items)
    total = out.get("total") if isinstance(out.get("total"), int) and not isinstance(out.get("total"), bool) else None
    empty_for = _subject(c, []) if n == 0 and c.name_rows else None
    if empty_for:
        # one of several reads of one tool: which filter found nothing
        return _pick(
            rng,
            (
                f"I found no {c.things} {empty_for}",
                f"no {c.things} {empty_for} came back",
                f"there are no {c.things} {empty_for}",
                f"no {c.thing} {empty_for} turned up",
            ),
        )
    if n == 0:
        if total:
            plans = (
                f"no {c.things} came back on this page, though the result counts {total} in all",
                f"this page held no {c.things} (the result gives a total of {total})",
                f"nothing came back this time; the result says there are {total} {c.noun(total)} in all",
                f"the page was empty, even though {total} {c.noun(total)} exist in total",
            )
        else:
            plans = (
                f"I found no {c.things}",
                f"no {c.things} came back",
                f"there are no {c.things} to show",
                f"the result holds no {c.things}",
                f"I came up empty: not a single {c.thing} was returned",
                f"no {c.thing} matched",
                f"I looked, but there were no {c.things}",
            )
        if c.done and total is None:
            plans += (f"I {c.done}, but none came back", f"I {c.done} and came up empty") * _DONE_WEIGHT
        return _pick(rng, plans)
    noun = c.noun(n)
    n_said = _amount(n, rng)
    subject = _subject(c, items)
    about = f" {subject}" if subject else ""
    of_total = ""
    if total is not None and total > n:
        of_total = _pick(
            rng,
            (
                f" of {total}",
                f" out of {total}",
                f" ({total} in all)",
                f" (of {total} in total)",
                f" of the {total} on record",
                f", from {total} altogether",
            ),
        )
    elif total is not None and total == n and n > 1:
        of_total = _pick(
            rng, ("", " (that is all of them)", ", all there are", ", which is every one", ", the whole lot")
        )
    names = _named_rows(c, items, rng)
    named = ""
    if names:
        if len(names) == n:
            lead = (
                ": ",
                ", namely ",
                " — ",
                "; they are " if n > 1 else "; it is ",
                ", which " + ("are " if n > 1 else "is "),
            )
        else:
            lead = (
                ", including ",
                "; the first are " if len(names) > 1 else "; the first is ",
                ", among them ",
                ", such as ",
                "; to name " + ("a few, " if len(names) > 1 else "one, "),
            )
        named = _pick(rng, lead) + _listing(names)
    be = "is" if n == 1 else "are"
    plans = [
        f"I found {n_said} {noun}{about}{of_total}{named}",
        f"{n_said} {noun}{about} came back{of_total}{named}",
        f"the result has {n_said} {noun}{about}{of_total}{named}",
        f"here {be} {n_said} {noun}{about}{of_total}{named}",
        f"there {be} {n_said} {noun}{about}{of_total}{named}",
        f"I pulled up {n_said} {noun}{about}{of_total}{named}",
        f"I see {n_said} {noun}{about}{of_total}{named}",
        f"{n_said} {noun}{about} turned up{of_total}{named}",
        f"the list shows {n_said} {noun}{about}{of_total}{named}",
        f"I got back {n_said} {noun}{about}{of_total}{named}",
    ]
    if c.kind == "search":
        plans += [
            f"the search returned {n_said} {noun}{about}{of_total}{named}",
            f"searching turned up {n_said} {noun}{about}{of_total}{named}",
        ]
    if c.done:
        plans += [
            f"I {c.done} and found {n_said} {noun}{about}{of_total}{named}",
            f"I {c.done}: {n_said} {noun}{about}{of_total}{named}",
            f"I {c.done}, which gave {n_said} {noun}{about}{of_total}{named}",
        ] * _DONE_WEIGHT
    return _pick(rng, plans)


def _count_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    n = out.get("count")
    if not isinstance(n, int) or isinstance(n, bool):
        subject = _subject(c, []) if c.name_rows else None
        if subject:
            return _pick(rng, (f"I counted the {c.things} {subject}", f"I ran the count of {c.things} {subject}"))
        return _pick(
            rng, (f"I counted the {c.things}", f"the count of {c.things} is done", f"I ran the count of {c.things}")
        )
    noun = c.noun(n)
    n_said = _amount(n, rng)
    be = "is" if n == 1 else "are"
    subject = _subject(c, []) if c.name_rows else None
    if subject:
        # one of several counts of one tool: each says which filter it counted
        return _pick(
            rng,
            (
                f"there {be} {n_said} {noun} {subject}",
                f"I counted {n_said} {noun} {subject}",
                f"{n_said} {noun} {subject} in all",
                f"the number of {c.things} {subject} is {n}",
                f"{subject[:1].upper()}{subject[1:]}: {n_said} {noun}",
            ),
        )
    plans = [
        f"there {be} {n_said} {noun}",
        f"I counted {n_said} {noun}",
        f"the count comes to {n_said} {noun}",
        f"{n_said} {noun} in all",
        f"the tally is {n_said} {noun}",
        f"I count {n_said} {noun} in total",
        f"you have {n_said} {noun}",
        f"the number of {c.things} is {n}",
    ]
    if n == 0:
        plans += [f"there are no {c.things} at all", f"not a single {c.thing} is on record"]
    if c.done:
        plans += [f"I {c.done}: {n_said} {noun}", f"I {c.done} and got {n}"] * _DONE_WEIGHT
    return _pick(rng, plans)


def _get_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    subject = _subject(c, [out])
    who = f"{c.who} {subject}" if subject else c.who
    # (lead, around the facts, whether the facts may stand as clauses, the sentence's end without facts, what
    # joins the lead to the flags' clause when no other fact is said): after "has", "with" or "showing" a fact
    # must be a noun phrase ("end date September 19"); after a colon or in brackets it may also be a clause
    # ("end date is September 19"); a flag is said as a clause of its own ("it is not blocked")
    plans: list[tuple[str, tuple[str, str], bool, str, str]] = [
        (f"here is {who}", (": ", ""), True, "", ": "),
        (f"I looked up {who}", ("; it has ", ""), False, "", "; "),
        (f"{who} shows", (" ", ""), False, " no further details", " that "),
        (f"I pulled up {who}", (" (", ")"), True, "", "; "),
        (f"I checked {who}", (": ", ""), True, ", and it is there", ": "),
        (f"{who} is on record", (", with ", ""), False, "", ", and "),
        (f"I found {who}", ("; it lists ", ""), False, "", "; "),
        (f"I fetched {who}", (", which has ", ""), False, "", "; "),
        (f"{who} is there", (", listed with ", ""), False, ", as expected", ", and "),
        (f"I have {who} here", (", showing ", ""), False, "", "; "),
    ]
    if c.done:
        plans += [(f"I {c.done}", (": ", ""), True, f", {who}", ": ")] * _DONE_WEIGHT
    lead, (before, after), clauses, without, to_flags = plans[rng.randrange(len(plans))]
    joiner = _pick(rng, (" ", " ", " is ")) if clauses else " "
    values, flags = _row_facts(out, c.key, rng, min(c.room + 1, 3), joiner=joiner)
    if not values:
        return lead + to_flags + _flag_clause(flags) if flags else lead + without
    return lead + before + _and_list(values) + after + (_flags_after(flags, rng) if flags else "")


def _flags_after(flags: Sequence[str], rng: random.Random) -> str:
    """The flags' clause after a sentence that already states the row's other facts."""
    return _pick(rng, ("; ", ", and ")) + _flag_clause(flags)


def _create_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    new = _quoted(c.label) if c.label else (str(c.ident) if c.ident is not None else f"the {c.thing}")
    with_id = f" ({c.ident})" if c.label and c.ident is not None and rng.random() < 0.5 else ""
    subject = _subject(c, [out])
    set_facts, flags = _row_facts(out, c.key, rng, min(c.room + (c.room > 1), 3), only=list(c.args))
    about = f" {subject}" if subject else ""
    setting = ""
    if set_facts:
        first = set_facts[0].split(" ", 1)[0]
        # "set to to 'easy'" (a field named "to"), "it has has ...": the frame's last word is not said twice
        frames = (" with {}", ", set to {}", " ({})", "; it has {}", ", holding {}")
        frames = tuple(f for f in frames if f.split()[-2:-1] != [first])
        setting = _pick(rng, frames).format(_and_list(set_facts))
    if flags:
        setting += _flags_after(flags, rng)
    plans = [
        f"I created {c.who}{with_id}{about}{setting}",
        f"{c.who}{with_id} has been added{about}{setting}",
        f"the new {c.thing} is {new}{with_id}{about}{setting}",
        f"done, {c.who}{with_id} now exists{about}{setting}",
        f"I added {c.who}{with_id}{about}{setting}",
        f"I set up {c.who}{with_id}{about}{setting}",
        f"{c.who}{with_id} is in place{about}{setting}",
        f"I made a new {c.thing}, {new}{with_id}{about}{setting}",
        f"{c.who}{with_id} is created{about}{setting}",
        f"I registered {c.who}{with_id}{about}{setting}",
        f"you now have {c.who}{with_id}{about}{setting}",
    ]
    if c.done and c.tool.get("kind") == "create":
        if c.label:
            done = [f"I {c.done}: {new}{with_id}{about}{setting}", f"I {c.done}, {new}{with_id}{about}{setting}"]
        else:
            # a bare identifier after the summary ("I created the matter with the name and description,
            # mat_00025") reads as a list item: it is said as the row's id instead
            ident = f" (id {c.ident})" if c.ident is not None else ""
            done = [f"I {c.done}{ident}{about}{setting}", f"I {c.done}{ident}{about}{setting}"]
        plans += done * _DONE_WEIGHT
    return _pick(rng, plans)


def _update_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    fields = [k for k in c.args if k != c.key and k in out and _sayable(k, out[k], 60) and out[k] != c.label]
    fields = fields[: max(c.room, 1)]
    pairs = [(_field_words(k), spoken_value(out[k], rng=rng)) for k in fields if not _is_flag(out[k])]
    flags = [flag_predicate(str(k), out[k]) for k in fields if _is_flag(out[k])]
    if (pairs or flags) and rng.random() < 0.5:
        now = _and_list([f"{f} is now {v}" for f, v in pairs] + ([_flag_clause(flags, now=True)] if flags else []))
        plans = [
            f"I updated {c.who}: {now}",
            f"{c.who} is updated, so {now}",
            f"I changed {c.who}; {now}",
            f"I saved the changes to {c.who}, and {now}",
            f"{c.who} has been edited: {now}",
            f"the change to {c.who} went through: {now}",
        ]
        if c.done and c.tool.get("kind") == "update":
            plans += [f"I {c.done}; {now}"] * _DONE_WEIGHT
        return _pick(rng, plans)
    detail = _and_list([f"{f} {v}" for f, v in pairs]) if pairs else ""
    plans = [
        f"I updated {c.who}" + (f" to {detail}" if detail else ""),
        f"{c.who} is updated" + (f", with {detail}" if detail else ""),
        f"I changed {c.who}" + (f", setting {detail}" if detail else ""),
        f"done, {c.who} " + (f"now has {detail}" if detail else "is updated"),
        f"{c.who} now reads " + (detail if detail else "as you asked"),
        f"I saved the changes to {c.who}" + (f" ({detail})" if detail else ""),
        f"I edited {c.who}" + (f", so it has {detail}" if detail else ""),
        f"{c.who} has been changed" + (f" to {detail}" if detail else ""),
    ]
    if c.done and c.tool.get("kind") == "update":
        plans += [f"I {c.done}" + (f", which now has {detail}" if detail else f" ({c.who})")] * _DONE_WEIGHT
    sentence = _pick(rng, plans)
    if flags:
        sentence += _pick(rng, ("; ", ", and ")) + _flag_clause(flags, now=True)
    return sentence


def _delete_sentence(c: _Call, rng: random.Random) -> str:
    out = c.out if isinstance(c.out, Mapping) else {}
    ident = out.get(c.key)
    gone = f"{c.thing} {ident}" if isinstance(ident, (str, int)) and not isinstance(ident, bool) else f"the {c.thing}"
    plans = [
        f"I deleted {gone}",
        f"{gone} has been removed",
        f"{gone} is deleted",
        f"I removed {gone}",
        f"{gone} is gone now",
        f"I took {gone} out",
        f"{gone} no longer exists",
        f"{gone} was deleted as asked",
        f"{gone} has been taken off the records",
        f"I got rid of {gone}",
    ]
    return _pick(rng, plans)


def _action_sentence(c: _Call, rng: random.Random) -> str:
    action = c.tool.get("action") or {}
    state, verb = action.get("state"), action.get("verb")
    if not state:
        return _pick(
            rng, (f"I ran that on {c.who}", f"done for {c.who}", f"{c.who} is handled", f"I took care of {c.who}")
        )
    plans = [
        f"{c.who} is now {state}",
        f"done, {c.who} is {state}",
        f"{c.who} has been marked {state}",
        f"I marked {c.who} as {state}",
        f"{c.who} shows as {state} now",
        f"{c.who} is {state} from now on",
        f"I set {c.who} to {state}",
        f"{c.who} went to {state}",
    ]
    if verb:
        plans.append(f"as asked, {c.who} is now {state}")
    if c.done and c.tool.get("kind") == "action":
        plans += [f"I {c.done}, so {c.who} is now {state}", f"I {c.done}: {c.who} is {state}"] * _DONE_WEIGHT
    sentence = _pick(rng, plans)
    field = action.get("field")
    # the row's other flags and state fields are left out: "marked running, and it is cancelled" says two
    # states of one row; so are its record times ("went to active and it keeps created at 30 June 2025"),
    # bookkeeping of the row rather than a fact the action left as it was
    others = [
        k
        for k, v in (c.out or {}).items()
        if k != field
        and not _is_flag(v)
        and not _STATE_WORDS.search(_field_words(k).lower())
        and not _is_record_time(k)
    ]
    facts, flags = _row_facts(c.out, c.key, rng, min(c.room, 2), only=others) if c.room else ([], [])
    if facts:
        # "and it keeps": "I set X to running and keeps ..." has no subject for its second verb
        sentence += _pick(rng, ("; it still has {}", " and it keeps {}", " (with {})", "; its record shows {}")).format(
            _and_list(facts)
        )
    if flags:
        sentence += _flags_after(flags, rng)
    return sentence


def _is_record_time(name: str) -> bool:
    """Whether result field ``name`` holds when its row was created, updated or otherwise kept
    (``created_at``, ``updateTime``): :data:`~envfactory_assets.graph.parameters.RECORD_TIME` by its name."""
    return value_kind(Parameter("", "", "out", name, name, "string", False)) == RECORD_TIME


def _relation_sentence(c: _Call, rng: random.Random) -> str:
    """An add or remove of one pair, said with both rows' identifiers as the result states them."""
    rel = c.tool.get("relation") or {}
    out = c.out if isinstance(c.out, Mapping) else {}
    member_id, parent_id = out.get(rel.get("member_field")), out.get(rel.get("parent_field"))
    if member_id is None or parent_id is None:
        return _pick(rng, ("done", "that went through", "it is done"))
    member = f"{spoken_thing(rel['member'])} {member_id}"
    parent = f"{spoken_thing(rel['parent'])} {parent_id}"
    role, roles = c.thing, c.things
    if c.kind == "relation_add":
        plans = [
            f"{member} is now {indefinite_article(role)} {role} of {parent}",
            f"I added {member} to {parent}",
            f"{member} was added to the {roles} of {parent}",
            f"done, {member} is {indefinite_article(role)} {role} of {parent}",
            f"{parent} now has {member} among its {roles}",
        ]
    else:
        plans = [
            f"{member} is no longer {indefinite_article(role)} {role} of {parent}",
            f"I removed {member} from {parent}",
            f"{member} was taken off the {roles} of {parent}",
            f"done, {member} has left the {roles} of {parent}",
        ]
    return _pick(rng, plans)


def _figure(value: Any) -> str:
    """A number as a person writes an amount: thousands grouped, a float with two decimals where that is exact
    (``1204.5`` -> ``"1,204.50"``, ``11`` -> ``"11"``); the figure reads back as the same number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value != value or abs(value) >= 1e15:
        return repr(value)
    if round(value, 2) == value:
        return f"{value:,.2f}"
    return format(value, ",.9f").rstrip("0").rstrip(".")


def _row_named(c: _Call, row: Any) -> str:
    """A row of the call's table as "thing name" (``"account acc_00013"``, ``"bin 'Fix the roadmap'"``)."""
    name = _name_of(row, c.key)
    return f"{c.thing} {name}" if name else f"the {c.thing}"


def _transfer_sentence(c: _Call, rng: random.Random) -> str:
    """A transfer that went through: the amount moved, both rows and what the source holds now, as the result
    states them; a withdrawal or deposit (whose result is the row alone) by what the row holds now."""
    spec = c.tool.get("transfer") or {}
    field, verb = spec.get("field"), spec.get("verb")
    out = c.out if isinstance(c.out, Mapping) else {}
    if verb == "transfer" and isinstance(out.get("source"), Mapping) and isinstance(out.get("destination"), Mapping):
        src, dst = _row_named(c, out["source"]), _row_named(c, out["destination"])
        left, got = out["source"].get(field), out["destination"].get(field)
        amount = _figure(out.get("amount"))
        if not (_is_number(left) and _is_number(got)):
            return _pick(rng, (f"I moved {amount} from {src} to {dst}", f"done, {dst} received {amount} from {src}"))
        left, got = _figure(left), _figure(got)
        return _pick(
            rng,
            (
                f"I moved {amount} from {src} to {dst}; {src} now holds {left}",
                f"moved {amount} from {src} to {dst}, so {src} now holds {left} and {dst} {got}",
                f"I sent {amount} from {src} to {dst}: {src} is down to {left} and {dst} is up to {got}",
                f"the transfer went through: I moved {amount} from {src} to {dst}, which now holds {got}",
                f"I transferred {amount} from {src} to {dst}; {src} is left with {left}",
                f"done, {dst} received {amount} from {src} and now holds {got}",
            ),
        )
    who = _row_named(c, out)
    held = out.get(field)
    if not _is_number(held):
        return _pick(rng, (f"the {'withdrawal from' if verb == 'withdraw' else 'deposit to'} {who} went through",))
    now = _figure(held)
    if verb == "withdraw":
        plans = (
            f"I withdrew from {who}; it now holds {now}",
            f"the withdrawal from {who} went through, leaving {now}",
            f"after the withdrawal, {who} is down to {now}",
            f"done, {who} now holds {now}",
        )
    else:
        plans = (
            f"I deposited into {who}; it now holds {now}",
            f"the deposit to {who} went through, so it holds {now} now",
            f"after the deposit, {who} is up to {now}",
            f"done, {who} now holds {now}",
        )
    return _pick(rng, plans)


#: How a side-effect verb is said done, ``{who}`` the row it was done for.
_SIDE_EFFECT_DONE: dict[str, tuple[str, ...]] = {
    "send": ("I sent {who}", "{who} is sent", "{who} went out"),
    "resend": ("I sent {who} again", "{who} was resent"),
    "notify": ("I sent the notification for {who}", "the notification about {who} is on its way"),
    "remind": ("I sent a reminder for {who}", "a reminder about {who} went out"),
    "validate": ("I queued a validation of {who}", "{who} is queued for validation"),
    "test": ("I sent {who} a test event", "a test went out to {who}"),
    "ping": ("I sent {who} a test ping", "{who} got a ping", "I pinged {who}"),
    "sync": ("I queued a sync of {who}", "a sync of {who} is queued"),
    "refresh": ("I queued a refresh of {who}", "a refresh of {who} is queued"),
    "restart": ("I asked for a restart of {who}", "a restart of {who} is queued"),
    "reboot": ("I asked for a reboot of {who}", "a reboot of {who} is queued"),
    "retry": ("I queued a retry of {who}", "{who} will be retried"),
    "rerun": ("I queued a rerun of {who}", "{who} will run again"),
    "redeliver": ("I redelivered {who}", "{who} is queued for redelivery"),
    "redeploy": ("I queued a redeploy of {who}", "a redeploy of {who} is queued"),
    "trigger": ("I triggered {who}", "{who} is triggered"),
    "reindex": ("I queued a reindex of {who}", "a reindex of {who} is queued"),
    "rebuild": ("I queued a rebuild of {who}", "a rebuild of {who} is queued"),
    "rerequest": ("I requested {who} again", "{who} is requested again"),
    "run": ("I started a run of {who}", "a run of {who} is queued"),
    "dispatch": ("I dispatched {who}", "{who} is dispatched"),
    "deploy": ("I queued a deploy of {who}", "a deploy of {who} is queued"),
    "export": ("I queued an export of {who}", "an export of {who} is on its way"),
    "backup": ("I queued a backup of {who}", "a backup of {who} is queued"),
}


def _side_effect_sentence(c: _Call, rng: random.Random) -> str:
    """A side effect said as the thing done for its row ("I sent webhook web_3 a test ping"), with the call's
    other arguments where its record holds them ("(channel 'push')"); the row is named by the record's target."""
    spec = c.tool.get("side_effect") or {}
    out = c.out if isinstance(c.out, Mapping) else {}
    verb = str(out.get("verb") or spec.get("verb") or "")
    target = out.get("target_id")
    # the spoken name ("instance"), not the spec's table words ("instances 4")
    who = f"{c.thing} {target}" if isinstance(target, str) and target else f"the {c.thing}"
    plans = _SIDE_EFFECT_DONE.get(verb) or (f"I ran {verb} on {who}" if verb else f"done for {who}",)
    sentence = _pick(rng, plans).format(who=who)
    recorded = str(out.get("arguments") or "")
    said = [
        f"{_field_words(k)} {_quoted(v) if isinstance(v, str) else v}"
        for k, v in c.args.items()
        if k != c.key
        and (isinstance(v, str) and v.strip() and "'" not in v and len(v) <= 40 or type(v) is int)
        and _holds_word([recorded], str(v))
    ][: max(c.room, 1)]
    if said:
        sentence += _pick(rng, (" ({})", ", with {}", " using {}")).format(_and_list(said))
    record = out.get("outbox_id")
    if isinstance(record, str) and c.room >= 2 and rng.random() < 0.3:
        sentence += f"; it is logged as {record}"
    return sentence


def _computed_sentence(c: _Call, rng: random.Random) -> str:
    """A computed read's figures: over a collection the number of rows and each sum ("there are 12 orders,
    totalling 1,204.50"), of one row its figures ("account acc_1 holds 208.29")."""
    spec = c.tool.get("computed") or {}
    out = c.out if isinstance(c.out, Mapping) else {}
    if spec.get("scope") == "item":
        who = _row_named(c, out)
        figures = [(k, v) for k, v in out.items() if k != c.key and _is_number(v)]
        if not figures:
            word = figure_word(c.tool)
            return _pick(rng, (f"{who} has no {word} on record yet", f"there is no {word} for {who} yet"))
        if len(figures) == 1 and figures[0][0] in (spec.get("word"), "balance"):
            value = _figure(figures[0][1])
            return _pick(
                rng,
                (
                    f"{who} holds {value}",
                    f"the {_field_words(figures[0][0])} of {who} is {value}",
                    f"{who} stands at {value}",
                    f"{who} has {_field_words(figures[0][0])} {value}",
                ),
            )
        # a timestamp is said as the row holds it ("created time 1707918360.0"), an amount grouped
        said = _and_list([f"{_field_words(k)} {v if names_a_time(k) else _figure(v)}" for k, v in figures[:3]])
        return _pick(rng, (f"{who} has {said}", f"right now {who} shows {said}"))
    count = out.get("count")
    if not _is_number(count):
        return _get_sentence(c, rng)
    n = int(count)
    sums = [(_field_words(k[len("total_") :]), v) for k, v in out.items() if k.startswith("total_") and _is_number(v)]
    if n == 0:
        return _pick(rng, (f"there are no {c.things} yet", f"no {c.things} are on record", f"I counted no {c.things}"))
    head = _pick(rng, ("there {} {} {}", "I counted {1} {2}", "you have {1} {2}")).format(
        "is" if n == 1 else "are", _amount(n, rng), c.noun(n)
    )
    if not sums:
        return head
    if len(sums) == 1 and rng.random() < 0.5:
        return head + f", totalling {_figure(sums[0][1])}"
    parts = [f"their {f} adds up to {_figure(v)}" for f, v in sums[:3]]
    return head + "; " + _and_list(parts)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _recovery_sentence(c: _Call, field: str, rng: random.Random) -> str:
    """The read an agent made after a refused transfer, said as what the source holds ("I checked: account
    acc_1 holds 12.00"); ``field`` is the balance field the transfer was refused on."""
    out = c.out if isinstance(c.out, Mapping) else {}
    who = _row_named(c, out)
    held = out.get(field)
    said = _field_words(field) if field else "balance"
    if not _is_number(held):
        return _pick(rng, (f"I checked, and {who} holds no {said} yet", f"{who} has no {said} on record yet"))
    value = _figure(held)
    return _pick(
        rng,
        (
            f"I checked: {who} holds {value}",
            f"right now {who} holds {value}",
            f"for reference, {who} has {said} {value}",
            f"I looked it up, and {who} holds only {value}",
        ),
    )


def _refusal_sentence(c: _Call, rng: random.Random) -> str:
    reason = c.refusal or ""
    lowered = reason[:1].lower() + reason[1:]
    if c.kind == "transfer":
        # a refused transfer moved nothing: said as the money or stock that stayed where it was
        verb = (c.tool.get("transfer") or {}).get("verb")
        move = {"withdraw": "withdrawal", "deposit": "deposit"}.get(str(verb), "transfer")
        return _pick(
            rng,
            (
                f"the {move} was refused: {lowered}. Nothing moved",
                f"I couldn't make the {move}, because {lowered}; nothing moved",
                f"the {move} did not go through ({lowered}), so every {c.thing} holds what it held",
                f"no {move} happened: {lowered}",
            ),
        )
    plans = [
        f"{reason}, so nothing changed",
        f"nothing changed: {reason}",
        f"I could not do that for {c.who}: {reason}",
        f"the call was refused ({reason}), so {c.who} is unchanged",
        f"the request was turned down because {lowered}; nothing was changed",
        f"I wasn't able to go ahead, since {lowered}",
        f"the call didn't go through: {reason}",
    ]
    return _pick(rng, plans)


_SENTENCE: dict[str, Callable[[_Call, random.Random], str]] = {
    "list": _read_sentence,
    "search": _read_sentence,
    "count": _count_sentence,
    "get": _get_sentence,
    "create": _create_sentence,
    "update": _update_sentence,
    "delete": _delete_sentence,
    "action": _action_sentence,
    "relation_list": _read_sentence,
    "relation_add": _relation_sentence,
    "relation_remove": _relation_sentence,
    "transfer": _transfer_sentence,
    "side_effect": _side_effect_sentence,
    "computed_read": _computed_sentence,
}
#: How the sentences of one reply follow each other: (between sentences, before the last one).
_JOINTS = (
    ("; ", "; "),
    (". ", ". "),
    (". Then ", ". Finally, "),
    (". Also, ", ". Last, "),
    ("; after that ", "; and "),
    (". Next, ", ". Lastly, "),
    ("; then ", "; and finally "),
    (". After that, ", ". To finish, "),
    (". On top of that, ", ". And "),
    (". Besides that, ", ". In the end, "),
    ("; next, ", "; last, "),
    (". Right after, ", ". Once that was done, "),
    (". Beyond that, ", ". And lastly, "),
    ("; besides, ", "; finally, "),
    (". As well, ", ". Last of all, "),
)
#: Words of a reply's sentences beyond which they state fewer facts of rows.
_MOST_WORDS = 54
#: Words of a whole reply beyond which it gets no opener or closer.
_MOST_REPLY_WORDS = 60
#: Openers of a reply; ``{things}`` is said as the first call's rows.
_OPENERS = (
    "",
    "Done. ",
    "All set. ",
    "Okay. ",
    "Sure. ",
    "All done. ",
    "Alright. ",
    "Got it. ",
    "All set with the {things}. ",
    "Here's where the {things} stand. ",
    "Here's the update on the {things}. ",
    "I've handled the {things}. ",
)
#: Openers of a reply whose calls only read.
_READ_OPENERS = (
    "",
    "Here's what I found. ",
    "Okay. ",
    "Here you go. ",
    "Sure. ",
    "I checked. ",
    "Here is what came back. ",
    "Alright. ",
    "Here's what I found on the {things}. ",
    "I checked the {things}. ",
    "About the {things}: ",
    "Here's the rundown on the {things}. ",
    "Looking at the {things}: ",
)
#: Closing offers; ``{things}`` is said as the last call's rows, ``{who}`` as the one row it touched (used only
#: after a call about one row).
_CLOSERS = (
    "",
    " Anything else?",
    " Let me know if you need more.",
    " Tell me if you want to go further.",
    " Is there anything else I can do?",
    " Just say if you want changes.",
    " Want me to do anything else?",
    " Anything else about the {things}?",
    " Tell me if you want to go further with the {things}.",
    " Happy to dig deeper into the {things}.",
    " Is there anything else I can do with the {things}?",
    " Want me to do more with {who}?",
    " Just say if {who} needs anything else.",
    " Should I change anything else on {who}?",
    " Need anything more on the {things}?",
    " Should I look at any other {things}?",
    " Say the word if {who} needs more changes.",
    " I can also look at other {things} if you like.",
)


def call_sentence(
    call: Mapping[str, Any],
    tool: Mapping[str, Any],
    key: str,
    rng: random.Random,
    room: int = 2,
    name_rows: bool = False,
) -> str:
    """One sentence (no capital, no closing stop) reporting ``call``'s result; ``tool`` is its ToolSpec (with
    ``spoken_table`` where known), ``key`` its table's key field; ``room`` (1 or 2) how many facts of a row
    the sentence may state (a reply of many calls states fewer, to stay short); ``name_rows``: the sentence
    names what the call was for (the row's identifier beside its label, a list's filter value), as a reply to
    several calls of one tool must."""
    c = _Call(call, tool, key, room, name_rows)
    recovery = call.get("recovery")
    if isinstance(recovery, Mapping) and c.refusal is None and isinstance(c.out, Mapping) and "error" not in c.out:
        return _recovery_sentence(c, str(recovery.get("field") or ""), rng)
    if c.refusal is not None:
        return _refusal_sentence(c, rng)
    if isinstance(c.out, Mapping) and "error" in c.out:
        return _pick(rng, (f"the call failed: {c.out.get('message') or c.out['error']}",))
    return _SENTENCE.get(c.kind, _get_sentence)(c, rng)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def write_reply(
    calls: Sequence[Mapping[str, Any]],
    tools: Mapping[str, Mapping[str, Any]],
    key_of: Callable[[Mapping[str, Any]], str],
    seed: str,
    name_rows: bool = False,
) -> str:
    """The closing reply of a turn that made ``calls`` (each with ``name``, ``arguments``, ``output``).

    Args:
        calls: the turn's calls in order; a refused call's ``output`` is ``{"error", "message"}``.
        tools: ToolSpecs by name (every call's tool).
        key_of: the key field of a tool's table.
        seed: the plan's seed (derive it from the trajectory and turn, e.g. ``f"{trajectory_id}/{turn}/reply"``).
        name_rows: every sentence names what its call was for (:func:`call_sentence`); for calls of one tool
            over several targets.

    Returns the reply (sentences capitalised and ended), or ``""`` when there are no calls.

    Raises:
        KeyError: a call names a tool ``tools`` lacks.
    """
    if not calls:
        return ""
    rooms = ((3, 2, 1, 0), (2, 1, 0))[min(len(calls), 2) - 1] if len(calls) <= 2 else (1, 0)
    for room in rooms:
        rng = random.Random(seed if room == rooms[0] else f"{seed}/{room}")
        sentences = [call_sentence(c, tools[c["name"]], key_of(tools[c["name"]]), rng, room, name_rows) for c in calls]
        if sum(len(x.split()) for x in sentences) <= _MOST_WORDS:
            break
    refused = any(isinstance(c.get("output"), Mapping) and "error" in c["output"] for c in calls)
    between, last = _pick(rng, _JOINTS)
    text = sentences[0]
    for i, s in enumerate(sentences[1:], start=1):
        joint = last if i == len(sentences) - 1 else between
        # "done, X now exists" opens a reply; after a joint ("finally, done, ...", "Once that was done, done,")
        # it says done twice
        s = s.removeprefix("done, ")
        text += joint + (_capital(s) if joint.endswith(". ") else s)
    if text.startswith("done, ") and re.search(r"\bdone\b", text[6:]):
        text = text[6:]  # "Done, X now exists. Once that was done, ...": the joint says it
    reads_only = all(
        tools[c["name"]].get("kind") in ("list", "search", "count", "get", "relation_list", "computed_read")
        for c in calls
    )
    head = _Call(calls[0], tools[calls[0]["name"]], key_of(tools[calls[0]["name"]]))
    opener = "" if refused else _pick(rng, _READ_OPENERS if reads_only else _OPENERS).format(things=head.things)
    # "All done. Done, the template now exists": one opener says it is done
    if re.search(r"\bdone\b", opener.lower()) and re.search(r"\bdone\b", text.lower()):
        opener = ""
    if len((opener + text).split()) > _MOST_REPLY_WORDS:
        opener = ""
    text = (opener + (text if opener.endswith(": ") else _capital(text))).rstrip(".") + "."
    end = calls[-1]
    tail = _Call(end, tools[end["name"]], key_of(tools[end["name"]]))
    one_row = (
        tail.kind in ("get", "create", "update", "action") and tail.refusal is None and tail.who != f"the {tail.thing}"
    )
    closers = [c for c in _CLOSERS if one_row or "{who}" not in c]
    closer = _pick(rng, closers).format(things=tail.things, who=tail.who)
    return text + (closer if len((text + closer).split()) <= _MOST_REPLY_WORDS else "")


#: The closers as patterns that find them at a reply's end, longest first.
_CLOSER_PATTERNS = [
    re.compile(re.escape(c).replace(re.escape("{things}"), ".+?").replace(re.escape("{who}"), ".+?") + "$")
    for c in sorted((c for c in _CLOSERS if c), key=len, reverse=True)
]

#: The openers as patterns that find them at a reply's start, longest first.
_OPENER_PATTERNS = [
    re.compile(re.escape(o).replace(re.escape("{things}"), ".+?"))
    for o in sorted({o for o in (*_OPENERS, *_READ_OPENERS) if o}, key=len, reverse=True)
]


def join_replies(first: str, second: str) -> str:
    """Two replies as one (a merged turn's, or a reply with one more call's report): the first without its
    closing question, the second without its opening word, so the joined reply opens and closes once."""
    for closer in _CLOSER_PATTERNS:
        m = closer.search(first)
        if m:
            first = first[: m.start()]
            break
    for opener in _OPENER_PATTERNS:
        m = opener.match(second)
        if m:
            second = _capital(second[m.end() :])
            break
    return " ".join(x for x in (first.strip(), second.strip()) if x)
