"""Argument values the user states in another form than the field takes (units, percentages, dates, amounts).

A raw query states every user-given value literally, in the field's own form (``published '2025-03-23'``,
``discount 0.15``), so a model trained on it never learns that "15%" in a request means ``0.15`` for a
field that holds a fraction, or that "March 23rd, 2025" means ``"2025-03-23"``. This module rewrites the
literal of one such argument in a turn's query into the form a person would write, and leaves the gold
call as it is: the query states the unconverted value and the call carries the converted one.

A value is rewritten only when the field's schema (format, bounds, name, description) says which form it
takes, and only into a surface form that determines the value exactly (no rounding, no ambiguous
day/month order). The conventions are the ordinary ones (ISO 8601 dates, 1k = 1,000, 1 h = 60 min,
1 kg = 1,000 g, 1 km = 1,000 m); relative dates ("tomorrow", "next Friday") come with the date they are
relative to ("Today is Monday, 2 March 2026."), prefixed to the query.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from envfactory_assets.synth.refinement.phrasing import literal

# names that mean a fraction on their own; "discount" or "tax" may be an amount, so they need the
# description or the bounds to say so
_FRACTION_NAME = re.compile(
    r"(^|_)(rate|ratio|fraction|share|probability|proportion|apr|apy|utilization|"
    r"occupancy)(_|$)"
)
_FRACTION_WORDS = ("fraction", "ratio", "between 0 and 1", "0 to 1", "0-1", "0..1", "decimal")
_PERCENT_UNIT = re.compile(r"(^|_)(percent|percentage|pct)(_|$)")
_AMOUNT_NAME = re.compile(
    r"(^|_)(amount|price|cost|budget|salary|fee|revenue|balance|income|spend|"
    r"payment)(_|$)"
)
# field-name unit suffix -> (factor to the larger unit, singular, plural); the value is in the small unit
# (no one-letter or "min"/"max"-like suffixes: "price_min" is a minimum, not minutes)
_UNITS = {
    "minutes": (60, "hour", "hours"),
    "mins": (60, "hour", "hours"),
    "seconds": (60, "minute", "minutes"),
    "secs": (60, "minute", "minutes"),
    "ms": (1000, "second", "seconds"),
    "milliseconds": (1000, "second", "seconds"),
    "hours": (24, "day", "days"),
    "days": (7, "week", "weeks"),
    "grams": (1000, "kg", "kg"),
    "meters": (1000, "km", "km"),
    "metres": (1000, "km", "km"),
    "cm": (100, "metre", "metres"),
    "mm": (10, "cm", "cm"),
}
_ORDINAL = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass(frozen=True)
class Conversion:
    """One rewritten argument: ``spoken`` replaces ``written`` (the literal) in the query; ``kind`` is one
    of ``"date"``, ``"datetime"``, ``"percent"``, ``"amount"``, ``"unit"``; ``anchor`` is a sentence put
    before the query (the reference date of a relative date) or ``""``."""

    argument: str
    value: Any
    written: str
    spoken: str
    kind: str
    anchor: str = ""


def _day(d: dt.date) -> str:
    return f"{d.day}{_ORDINAL.get(d.day, 'th')}"


def _number(x: float) -> str:
    """``1.5`` -> ``"1.5"``, ``2.0`` -> ``"2"``, never scientific notation."""
    text = f"{x:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _date_forms(d: dt.date, rng: Any) -> tuple[str, str]:
    """A spoken form of ``d`` and its anchor sentence (``""`` for an absolute date)."""
    choice = rng.random()
    if choice < 0.3:
        return f"{d.strftime('%B')} {_day(d)}, {d.year}", ""
    if choice < 0.55:
        return f"{d.day} {d.strftime('%B')} {d.year}", ""
    if choice < 0.7:
        return f"{d.strftime('%b')} {d.day}, {d.year}", ""
    delta = rng.choice([1, 2, 3, 4, 5, 6, 7, 10, 14])
    today = d - dt.timedelta(days=delta)
    anchor = f"Today is {_WEEKDAYS[today.weekday()]}, {today.day} {today.strftime('%B')} {today.year}."
    if delta == 1:
        return "tomorrow", anchor
    if delta == 7 and rng.random() < 0.5:
        return "a week from today", anchor
    if 2 <= delta <= 6 and rng.random() < 0.6:
        # "next <weekday>" within the coming six days is the upcoming one; that reading is unambiguous here
        return f"next {_WEEKDAYS[d.weekday()]}", anchor
    return f"in {delta} days", anchor


def _clock(t: dt.datetime) -> str:
    hour = t.hour % 12 or 12
    suffix = "am" if t.hour < 12 else "pm"
    return f"{hour}{'' if t.minute == 0 else f':{t.minute:02d}'} {suffix}"


def _fraction_field(name: str, schema: dict[str, Any]) -> bool:
    """The field holds a fraction in [0, 1] (so "15%" means 0.15): its bounds say so, or its name or
    description does and no bound above 1 contradicts it."""
    if schema.get("type") not in ("number",) or _PERCENT_UNIT.search(name):
        return False
    high = schema.get("maximum")
    if isinstance(high, (int, float)) and not isinstance(high, bool):
        return high <= 1 and schema.get("minimum", 0) >= 0
    description = str(schema.get("description") or "").lower()
    return bool(_FRACTION_NAME.search(name)) or any(w in description for w in _FRACTION_WORDS)


def _unit_suffix(name: str) -> str | None:
    parts = name.lower().split("_")
    return parts[-1] if len(parts) > 1 and parts[-1] in _UNITS else None


def conversion_for(name: str, schema: dict[str, Any], value: Any, rng: Any) -> Conversion | None:
    """The spoken form of ``value`` for the field ``name`` with JSON schema ``schema``, or None when the
    schema does not say which form the field takes or no exact spoken form exists.

    ``rng`` (a ``random.Random``) picks among equivalent spoken forms. ``written`` is the literal the
    programmatic query writer used for the value (:func:`envfactory_assets.synth.refinement.phrasing.literal`).
    """
    if isinstance(value, bool) or value is None:
        return None
    written = literal(value)
    fmt = schema.get("format")
    typ = schema.get("type")
    if isinstance(value, str) and typ in (None, "string"):
        if fmt == "date" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            try:
                d = dt.date.fromisoformat(value)
            except ValueError:
                return None
            spoken, anchor = _date_forms(d, rng)
            return Conversion(name, value, written, spoken, "date", anchor)
        if fmt == "date-time" and re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:00Z", value):
            t = dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
            spoken, anchor = _date_forms(t.date(), rng)
            return Conversion(name, value, written, f"{spoken} at {_clock(t)} UTC", "datetime", anchor)
        return None
    if not isinstance(value, (int, float)) or typ not in ("number", "integer"):
        return None
    if _fraction_field(name, schema) and 0 <= value <= 1:
        percent = round(value * 100, 4)
        if round(percent / 100, 10) == round(value, 10):  # the percentage gives the value back exactly
            return Conversion(name, value, written, f"{_number(percent)}%", "percent")
        return None
    suffix = _unit_suffix(name)
    if suffix is not None:
        factor, one, many = _UNITS[suffix]
        if value >= factor and (value * 2) % factor == 0:  # whole or half units only
            big = value / factor
            return Conversion(name, value, written, f"{_number(big)} {one if big == 1 else many}", "unit")
        return None
    if name.lower().endswith("_cents") and isinstance(value, int) and value >= 100:
        return Conversion(name, value, written, f"${value / 100:,.2f}", "amount")
    if _AMOUNT_NAME.search(name.lower()) and value >= 1000:
        for size, mark in ((1_000_000, "M"), (1000, "k")):
            if value >= size and (value * 10) % size == 0:
                return Conversion(name, value, written, f"{_number(value / size)}{mark}", "amount")
    return None


def _literal_pattern(written: str) -> re.Pattern[str]:
    """The literal as a whole token: a number not inside a longer number, a quoted string as is."""
    if written.startswith("'"):
        return re.compile(re.escape(written))
    return re.compile(r"(?<![\w.])" + re.escape(written) + r"(?!\w|\.\d)")


def convert_turn(turn: dict[str, Any], schemas: dict[str, dict[str, Any]], rng: Any) -> Conversion | None:
    """Rewrite one user-given argument of ``turn`` whose field takes a converted form; None when none can be.

    ``schemas`` maps tool name to its ``input_schema``. An argument qualifies when its provenance is
    ``user`` (the user stated it; a value from an earlier output is referred to, not stated), a
    :func:`conversion_for` form exists, and its literal occurs exactly once in the query (so the rewrite
    cannot touch another value). Mutates ``turn["query"]`` (the anchor, if any, goes first) and records
    the rewrite in ``turn["conversion"]``; the calls are left as they are.
    """
    query = turn["query"]
    candidates = []
    for call in turn["calls"]:
        props = (schemas.get(call["name"]) or {}).get("properties") or {}
        for name, value in call["arguments"].items():
            if (call.get("provenance") or {}).get(name, {}).get("source") != "user" or name not in props:
                continue
            conv = conversion_for(name, props[name], value, rng)
            if conv is not None and len(_literal_pattern(conv.written).findall(query)) == 1:
                candidates.append(conv)
    if not candidates:
        return None
    conv = candidates[rng.randrange(len(candidates))]
    rewritten = _literal_pattern(conv.written).sub(lambda _m: conv.spoken, query, count=1)
    turn["query"] = f"{conv.anchor} {rewritten}" if conv.anchor else rewritten
    turn["conversion"] = {"argument": conv.argument, "value": conv.value, "spoken": conv.spoken, "kind": conv.kind}
    return conv
