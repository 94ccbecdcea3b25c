"""A check that an assistant reply states only what its turn's tool results say.

``reply_problems(reply, calls)`` reads the reply as a person would and holds every fact it can pin down
against the results of the turn's calls (``call["output"]``); an empty list means the reply passes. It is
deliberately independent of the reply writer (:mod:`envfactory_assets.synth.refinement.replies` is never
imported), so it judges any reply, programmatic or a model's:

- a quoted value (``'Dune'``) must be a text of the results (a field's value or part of an error message);
- a date, written as a date (``26 May 2026``, ``May 26, 2026 at 10:55 PM UTC``) or in ISO form, must be a
  date of the results;
- an identifier-like token (a word with a digit, an underscore or an ``@``: ``bp_12``, ``o-7f3a``) must be
  a value of the results;
- a number followed by a noun is a count of rows (``3 bike points``): it must be the number of rows a read
  returned (``len(items)``), a ``count`` result, or a numeric field whose name holds that noun
  (``12 bikes``: ``nb_bikes``); a number said as a total (``of 6``, ``out of 6``, ``6 in all``) must be a
  ``total`` or ``count`` the result states; any other number must be a value of the results;
- a refused call (a result ``{"error": ..., "message": ...}``) is reported with its reason: the message
  (less its closing stop) is in the reply.

A turn without calls (an abstention) has no results, so its reply may state no number or identifier.

:func:`reply_figures` applies the check to stored trajectories for an asset check and the report.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_RE = "|".join(m.capitalize() for m in _MONTHS)
#: A date as people write it, day or month first, with an optional time of day on either clock.
_WRITTEN_DATE = re.compile(
    rf"\b(?:(?P<d1>\d{{1,2}}) (?P<m1>{_MONTH_RE}) (?P<y1>\d{{4}})|(?P<m2>{_MONTH_RE}) (?P<d2>\d{{1,2}}),? "
    rf"(?P<y2>\d{{4}}))(?: at (?P<h>\d{{1,2}}):(?P<mi>\d{{2}})(?: ?(?P<ap>AM|PM|am|pm))?(?: UTC)?)?"
)
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b")
#: A token that reads as an identifier or a code: letters with digits, underscores or an @.
_TOKEN = re.compile(r"[A-Za-z0-9][\w.@+:/-]*[A-Za-z0-9]|[A-Za-z0-9]")
_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
}
#: Words after a number that make it no count of rows ("5 of them", "3 is", "12 and").
_NOT_A_NOUN = frozenset(
    "a an the of out in at on to for from by with and or but nor so is are was were be been has have had now "
    "it its this that these those which who than then as if per more less left remain remaining match "
    "matching matched came come returned in all total overall altogether am pm utc".split()
)
_TOTAL_BEFORE = re.compile(r"(?:\bof|\bout of|\btotal of|\bfrom)\s*(?:the\s+)?(?:about\s+)?$", re.IGNORECASE)
#: "the replies of one thread": a bare "of" before one row of another table scopes a read to its parent, it
#: counts nothing ("2 of 6", "out of 6" and "a total of 6" stay totals).
_SCOPE_BEFORE = re.compile(r"(?<!\bout)(?<!\btotal)\s+of\s*$", re.IGNORECASE)
_TOTAL_AFTER = re.compile(
    r"^\s*(?:total\b|(?:[a-z-]+\s+){0,3}?(?:in all|in total|all told|altogether|overall|match(?:es|ing)? in all))",
    re.IGNORECASE,
)


def _leaves(value: Any, key: str = "") -> Iterable[tuple[str, Any]]:
    """``(field name, scalar)`` of every leaf of a JSON value."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v, key)
    elif value is not None:
        yield key, value


class _Facts:
    """What the results of one turn's calls state."""

    def __init__(self, calls: Sequence[Mapping[str, Any]]) -> None:
        self.returned: set[int] = set()
        self.counts: set[int] = set()
        self.totals: set[float] = set()
        self.numbers: set[float] = set()
        self.named_numbers: list[tuple[str, float]] = []
        self.texts: list[str] = []
        self.refusals: list[str] = []
        self.field_names: set[str] = set()
        for call in calls:
            out = call.get("output")
            if isinstance(out, Mapping):
                if isinstance(out.get("items"), list):
                    self.returned.add(len(out["items"]))
                if _is_number(out.get("total")):
                    self.totals.add(float(out["total"]))
                if _is_number(out.get("count")):
                    self.counts.add(int(out["count"]))
                    self.totals.add(float(out["count"]))
                if set(out) == {"error", "message"} and isinstance(out["message"], str):
                    self.refusals.append(out["message"])
            elif isinstance(out, list):
                self.returned.add(len(out))
            for key, _leaf in _leaves(out):
                # a field's name said as words ("phone2", "project 6 id"): a label, not a value
                spoken = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", key).replace("_", " ").strip().lower()
                if re.search(r"\d", spoken):
                    self.field_names.add(spoken)
            for key, leaf in _leaves(out):
                if _is_number(leaf):
                    if key != "total":
                        self.numbers.add(float(leaf))
                        self.named_numbers.append((key.lower(), float(leaf)))
                elif isinstance(leaf, str):
                    self.texts.append(leaf)
        self.texts.sort(key=len, reverse=True)
        self.lower_texts = [t.lower() for t in self.texts]

    def holds_text(self, text: str) -> bool:
        """``text`` is a whole result text or a whole-word part of one (case-insensitive)."""
        needle = text.lower()
        return any(needle == t or _has_token(t, needle) for t in self.lower_texts)

    def holds_date(self, iso: str) -> bool:
        return any(t.startswith(iso) or t.replace(" ", "T").startswith(iso) for t in self.lower_texts)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _has_token(haystack: str, needle: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(needle)}(?![\w])", haystack) is not None


def _written_date_iso(m: re.Match[str]) -> str | None:
    """The ISO text of a written date (date, and ``THH:MM`` when a time is given), or None if impossible."""
    day, month = int(m["d1"] or m["d2"]), _MONTHS.index((m["m1"] or m["m2"]).lower()) + 1
    year = int(m["y1"] or m["y2"])
    if not 1 <= day <= 31:
        return None
    iso = f"{year:04d}-{month:02d}-{day:02d}"
    if m["h"] is None:
        return iso
    hour = int(m["h"])
    if m["ap"]:
        hour = hour % 12 + (12 if m["ap"].lower() == "pm" else 0)
    return f"{iso}T{hour:02d}:{m['mi']}"


def _mask(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _norm_reason(message: str) -> str:
    return " ".join(message.split()).rstrip(".").lower()


def reply_problems(reply: str, calls: Sequence[Mapping[str, Any]]) -> list[str]:
    """What ``reply`` states that the results of ``calls`` do not say; ``[]`` when every fact checks out.

    Args:
        reply: the assistant's closing reply of a turn.
        calls: the turn's calls, each with ``output`` (the tool result the agent read: a dict, a list or a
            scalar; a refused call's result is ``{"error", "message"}``).

    Returns:
        One sentence per problem (``"count 6 before 'bike points' is not the 1 row(s) returned"``).

    Raises:
        TypeError: ``reply`` is not a string.
    """
    if not isinstance(reply, str):
        raise TypeError(f"reply_problems: the reply must be a string, got {type(reply).__name__}")
    facts = _Facts(calls)
    problems: list[str] = []
    lowered = " ".join(reply.split()).lower()
    for message in facts.refusals:
        if _norm_reason(message) not in lowered:
            problems.append(f"the refusal's reason {message!r} is not reported")
    text = reply
    # 1. result texts the reply repeats (quoted, or bare when long enough to mean something), longest first
    low = text.lower()
    for known in facts.texts:
        if known.lower() not in low:
            continue
        bare = len(known) >= 4 and re.search(r"[A-Za-z]", known) is not None
        pattern = rf"'{re.escape(known)}'|\"{re.escape(known)}\"" + (
            # a bare text next to a day number is part of a written date ("April 29, 2025"), checked as one
            rf"|(?<![\w])(?<!\d ){re.escape(known)}(?![\w])(?! \d{{1,2}}\b)" if bare else ""
        )
        for m in list(re.finditer(pattern, text, re.IGNORECASE)):
            text = _mask(text, m.start(), m.end())
        low = text.lower()
    for m in re.finditer(r"(?<!\w)'([^'\n]{1,200})'(?!\w)|\"([^\"\n]{1,200})\"", text):
        inner = m[1] if m[1] is not None else m[2]
        if inner.strip() and not facts.holds_text(inner):
            problems.append(f"quotes {inner!r}, which no result holds")
        text = _mask(text, m.start(), m.end())
    for name in sorted(facts.field_names, key=len, reverse=True):
        for m in list(re.finditer(rf"(?<![\w]){re.escape(name)}(?![\w])", text, re.IGNORECASE)):
            text = _mask(text, m.start(), m.end())
    # 2. dates
    for m in list(_WRITTEN_DATE.finditer(text)):
        iso = _written_date_iso(m)
        if iso is None or not facts.holds_date(iso.lower()):
            problems.append(f"the date {m[0]!r} is in no result")
        text = _mask(text, m.start(), m.end())
    for m in list(_ISO_DATE.finditer(text)):
        if not facts.holds_date(m[0].lower()[:16]):
            problems.append(f"the date {m[0]!r} is in no result")
        text = _mask(text, m.start(), m.end())
    # 3. identifiers and codes
    for m in list(_TOKEN.finditer(text)):
        token = m[0].rstrip(".:/-")
        is_number = _NUMBER.fullmatch(token) is not None
        if is_number or not re.search(r"\d|_|@", token):
            continue
        if not facts.holds_text(token) and not (
            re.fullmatch(r"-?\d+(?:\.\d+)?", token) and float(token) in facts.numbers
        ):
            problems.append(f"the identifier {token!r} is in no result")
        text = _mask(text, m.start(), m.start() + len(token))
    # 4. numbers: counts of rows, totals, values
    for m in _NUMBER.finditer(text):
        problems += _number_problems(m[0], text[: m.start()], text[m.end() :], facts)
    for m in re.finditer(rf"\b({'|'.join(_NUMBER_WORDS)})\s+([a-z][a-z-]*)", text, re.IGNORECASE):
        noun = m[2].lower()
        if noun in _NOT_A_NOUN or text[: m.start()].rstrip().lower().endswith(("the", "which", "this", "that")):
            continue
        problems += _number_problems(str(_NUMBER_WORDS[m[1].lower()]), text[: m.start()], text[m.end(1) :], facts)
    return problems


def _number_problems(said: str, before: str, after: str, facts: _Facts) -> list[str]:
    value = float(said.replace(",", ""))
    noun = re.match(r"\s+([A-Za-z][A-Za-z-]*)", after)
    if value == 1 and noun and noun[1].lower() not in _NOT_A_NOUN and _SCOPE_BEFORE.search(before):
        return []
    if _TOTAL_BEFORE.search(before) or _TOTAL_AFTER.match(after):
        if value in facts.totals:
            return []
        if not facts.totals:
            return [f"says {said} in all, but no result states a total"]
        return [f"says {said} in all, but the results state a total of {_join(facts.totals)}"]
    if noun and noun[1].lower() not in _NOT_A_NOUN:
        word = noun[1].lower()
        stem = word[:-1] if word.endswith("s") else word
        if value in facts.returned or value in facts.counts:
            return []
        if any(value == v and stem[:4] in k for k, v in facts.named_numbers if len(stem) >= 3):
            return []
        got = sorted(facts.returned | facts.counts)
        return [f"counts {said} {word}, but the results returned {_join(got) if got else 'no rows to count'}"]
    if value in facts.numbers or value in facts.returned or value in facts.counts or facts.holds_text(said):
        return []
    return [f"the number {said} is in no result"]


def _join(values: Iterable[float]) -> str:
    return " or ".join(str(int(v)) if float(v).is_integer() else str(v) for v in sorted(values))


def reply_figures(
    rows: Iterable[Mapping[str, Any]], field: str = "assistant_summary", examples: int = 5
) -> dict[str, Any]:
    """The check over every turn of trajectory ``rows`` (``turns``, each with ``calls`` and the reply in
    ``field``; rows whose ``status`` is not ``passed`` are left out).

    Returns ``{"replies", "passing", "pass_share", "failures"}``: ``pass_share`` is ``passing / replies``
    (1.0 when there is no reply), ``failures`` up to ``examples`` ``(row id, turn index, reply, problems)``.
    """
    replies = passing = 0
    failures: list[tuple[Any, Any, str, list[str]]] = []
    for row in rows:
        if row.get("status", "passed") != "passed":
            continue
        for i, turn in enumerate(row.get("turns") or []):
            reply = turn.get(field) or ""
            replies += 1
            problems = reply_problems(reply, turn.get("calls") or [])
            if problems:
                if len(failures) < examples:
                    failures.append((row.get("id"), turn.get("turn_index", i), reply, problems))
            else:
                passing += 1
    return {
        "replies": replies,
        "passing": passing,
        "pass_share": round(passing / replies, 4) if replies else 1.0,
        "failures": failures,
    }
