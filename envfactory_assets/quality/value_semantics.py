"""A field-semantic check of generated values: does a value look like what its field holds?

``check_value(field_name, schema, value, description)`` classifies one value as ``"pass"``, ``"fail"`` or
``"unknown"`` (no rule applies, e.g. a free ``reference`` string). It is deliberately independent of the
value generator (:mod:`envfactory_assets.envgen.values` is never imported): it judges with validators of
its own sources:

- the schema itself: JSON type, ``enum``, ``pattern``, ``minimum``/``maximum``, ``maxLength``;
- formats: ``datetime.fromisoformat`` for ``date``/``date-time``, :mod:`uuid`, the ``validators`` package
  for e-mail addresses and URLs;
- what the field is, from its name and description: IANA time zones (:mod:`zoneinfo`), ISO 4217
  currencies, ISO 3166 countries and ISO 639 languages (``pycountry``), phone numbers (ITU E.164 shape:
  7 to 15 digits), dates, statuses (a vocabulary of lifecycle words written here, not the generator's),
  people's names, free text, amounts, counts.

:func:`share_passing` turns many verdicts into the figures reported for an environment asset: the share
of judged values (pass + fail) that pass, and how many were unknown.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Verdict = str  # "pass" | "fail" | "unknown"

# Words real APIs use as status/state values (lifecycle, workflow, availability, payment, delivery...).
# Multi-word statuses (``in_progress``, ``on hold``) are judged token by token against this set.
STATUS_WORDS = frozenset(
    """
active inactive enabled disabled pending approved rejected declined denied open closed reopened resolved
new draft published unpublished archived deleted removed hidden visible public private live paused stopped
running started starting stopping queued scheduled waiting processing processed complete completed done
finished succeeded success successful failed failure error errored cancelled canceled expired revoked
suspended blocked locked unlocked banned verified unverified confirmed unconfirmed invited accepted
available unavailable reserved booked sold out of stock in progress on hold review reviewing ready
shipped delivered returned refunded partially paid unpaid overdue due void voided issued sent received
read unread online offline idle busy away maintenance degraded healthy unhealthy up down provisioning
deprovisioning creating created updating updated deploying deployed building built pass passed
valid invalid trial trialing past canceling incomplete backordered fulfilled unfulfilled picked packed
transit awaiting payment approval todo to do planned backlog blocked escalated assigned unassigned
triaged acknowledged muted snoozed spam junk flagged starred pinned current superseded deprecated
retired beta alpha stable preview production staging dismissed settled authorized captured
disputed chargeback terminated hired applied interviewing offer onboarding offboarding submitted
not started ok warning critical unknown none low medium high urgent normal
""".split()
)

# Name fragments that mark a field's meaning. Order matters: the first matching rule judges.
_TZ = re.compile(r"(^|_)(time_?zone|timezone|tz|tz_name|zone_?info|olson)($|_)")
_CURRENCY = re.compile(r"(^|_)(currency|currency_code|iso_currency)($|_)")
_COUNTRY = re.compile(r"(^|_)(country|country_code|nationality)($|_)")
_LANGUAGE = re.compile(r"(^|_)(language|lang|language_code|locale)($|_)")
_EMAIL = re.compile(r"(^|_)e_?mail(s)?(_address)?($|_)|(^|_)mail(_address)?$|^email")
_URL = re.compile(r"(^|_)(url|uri|website|homepage|href|link|web_?site|avatar_url|image_url|callback)($|_)")
_PHONE = re.compile(r"(^|_)(phone|mobile|telephone|fax|cell|phone_number|msisdn)($|_)")
_DATE = re.compile(
    r"(_at|_on|_date|_time|_timestamp)$|(^|_)(date|datetime|timestamp|birthday|dob|created|"
    r"updated|modified|deadline|expires|expiry|expiration)($|_)"
)
_STATUS = re.compile(r"(^|_)(status|state|lifecycle_state|stage|phase)$")
_PERSON = re.compile(
    r"^(first_?name|last_?name|given_?name|family_?name|surname|full_?name|"
    r"contact_?name|customer_?name|author_?name|owner_?name)$"
)
_FREE_TEXT = re.compile(
    r"(^|_)(description|notes?|comments?|body|message|text|content|bio|about|"
    r"summary|details|remarks|instructions)$"
)
_AMOUNT = re.compile(
    r"(^|_)(amount|price|cost|total|subtotal|balance|fee|salary|budget|revenue|"
    r"unit_price|tax|discount)($|_)"
)
_COUNT = re.compile(r"(^|_)(count|quantity|qty|number_of|num|total_count|size|age|year|stock)($|_)")
_UTC_OFFSET = re.compile(r"^(UTC|GMT)?[+-](0\d|1[0-4])(:?[0-5]\d)?$")
_PHONE_SHAPE = re.compile(r"^\+?[\d\s().-]+(\s*(x|ext\.?)\s*\d{1,6})?$")
_NAME_SHAPE = re.compile(r"^[^\W\d_][^\W\d_'.\- ]*(?:[ '.\-]+[^\W\d_][^\W\d_'.\-]*){0,4}\.?$")
_WORD_PAIR = re.compile(r"^[a-z]+-[a-z]+$")
_IP = re.compile(r"(^|_)(ip|ip_address|ipv4|ipv6|ip_addr|remote_ip|client_ip)$")
_HOST = re.compile(r"(^|_)(fqdn|hostname|host_name|domain|domain_name|host)$")
_ARN = re.compile(r"(^|_)arn$")
_SECRET = re.compile(r"(^|_)(token|access_token|secret|api_key|password|hash|checksum|signature|fingerprint)$")
_DURATION = re.compile(r"(^|_)(ttl|duration|timeout|interval|period)$")
_VERSION = re.compile(r"(^|_)(version|revision|release)$")
_LABEL = re.compile(r"(^|_)(name|title|subject|headline|label|nickname)$")
_ADDRESS = re.compile(r"(^|_)(address|street|street_address|address_line_?1|formatted_address|line1)$")
_CITY = re.compile(r"(^|_)(city|town|locality)$")
_ISO_DURATION = re.compile(r"^P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$")
_UNIT_DURATION = re.compile(r"^\d+(\.\d+)?\s*(ms|s|sec|seconds?|m|min|minutes?|h|hours?|d|days?)?$")
_TOKEN_SHAPE = re.compile(r"^[A-Za-z0-9_\-.=+/:]{12,}$")
_VERSION_SHAPE = re.compile(r"^v?\d+(\.\d+){0,3}([-+][\w.]+)?$")
_LOCALE = re.compile(r"^([a-zA-Z]{2,3})([-_]([A-Za-z]{2}|\d{3}|[A-Za-z]{4}))?$")


@dataclass(frozen=True)
class Judgement:
    """One verdict and the rule that gave it (``"timezone"``, ``"enum"``, ``"type"`` ...)."""

    verdict: Verdict
    rule: str
    reason: str = ""


@functools.lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    import zoneinfo

    return frozenset(zoneinfo.available_timezones()) | {"UTC", "GMT"}


@functools.lru_cache(maxsize=4096)
def _currency(code: str) -> bool:
    import pycountry

    return pycountry.currencies.get(alpha_3=code.upper()) is not None if len(code) == 3 else False


@functools.lru_cache(maxsize=4096)
def _country(value: str) -> bool:
    import pycountry

    if len(value) == 2:
        return pycountry.countries.get(alpha_2=value.upper()) is not None
    if len(value) == 3 and value.isupper():
        return pycountry.countries.get(alpha_3=value) is not None
    try:
        return bool(pycountry.countries.lookup(value))
    except LookupError:
        return False


@functools.lru_cache(maxsize=4096)
def _language(value: str) -> bool:
    import pycountry

    m = _LOCALE.match(value)
    if not m:
        try:
            return bool(pycountry.languages.lookup(value))
        except LookupError:
            return False
    code = m.group(1).lower()
    lang = pycountry.languages.get(alpha_2=code) if len(code) == 2 else pycountry.languages.get(alpha_3=code)
    return lang is not None


@functools.lru_cache(maxsize=1)
def _cities() -> frozenset[str]:
    import airportsdata

    return frozenset(a["city"] for a in airportsdata.load("IATA").values() if a.get("city"))


@functools.lru_cache(maxsize=1)
def _subdivisions() -> frozenset[str]:
    """ISO 3166-2 regions by name and by the code after the country (``CA``, ``California``, ``BY``)."""
    import pycountry

    subs = list(pycountry.subdivisions)
    return frozenset([s.name for s in subs] + [s.code.split("-", 1)[1] for s in subs])


def _parse_datetime(value: str) -> dt.datetime | dt.date | None:
    text = value.strip()
    if not text or len(text) < 8:
        return None
    try:
        if len(text) == 10:
            return dt.date.fromisoformat(text)
        return dt.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None


def _type_ok(value: Any, typ: Any) -> bool:
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if typ == "boolean":
        return isinstance(value, bool)
    return True


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s_\-/]+", text.lower()) if w]


def check_value(field_name: str, schema: dict[str, Any], value: Any, description: str = "") -> Judgement:
    """Judge one generated ``value`` of field ``field_name`` under its JSON ``schema`` fragment.

    ``description`` is the field's description from the spec (it can name a meaning the name does not).
    Returns a :class:`Judgement`; ``unknown`` when no rule knows what the field should hold (the value is
    then type-valid and within the schema's own bounds).

    Raises:
        TypeError: ``schema`` is not a dict.
    """
    if not isinstance(schema, dict):
        raise TypeError(f"schema of {field_name!r} must be a dict, got {type(schema).__name__}")
    if value is None:
        return Judgement("unknown", "null", "no value")
    typ = schema.get("type")
    if typ and not _type_ok(value, typ):
        return Judgement("fail", "type", f"{value!r} is not a JSON {typ}")
    if "enum" in schema:
        ok = value in schema["enum"]
        return Judgement("pass" if ok else "fail", "enum", "" if ok else f"{value!r} not in {schema['enum']}")
    if isinstance(value, str):
        limit = schema.get("maxLength")
        if isinstance(limit, int) and len(value) > limit:
            return Judgement("fail", "maxLength", f"{len(value)} > {limit} characters")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                ok = re.search(pattern, value) is not None
            except re.error:
                ok = None
            if ok is not None:
                return Judgement("pass" if ok else "fail", "pattern", "" if ok else f"{value!r} !~ {pattern}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return Judgement("fail", "minimum", f"{value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            return Judgement("fail", "maximum", f"{value} > {schema['maximum']}")
    fmt = schema.get("format")
    if isinstance(value, str) and fmt:
        verdict = _format_verdict(fmt, value)
        if verdict is not None:
            return verdict
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", field_name).lower()
    return _semantic_verdict(name, value, description.lower())


def _format_verdict(fmt: str, value: str) -> Judgement | None:
    if fmt in ("date", "date-time"):
        parsed = _parse_datetime(value)
        ok = parsed is not None and (fmt == "date") == (not isinstance(parsed, dt.datetime))
        if fmt == "date-time" and isinstance(parsed, dt.datetime) and parsed.tzinfo is None:
            ok = False  # RFC 3339 date-times carry an offset
        return Judgement("pass" if ok else "fail", f"format:{fmt}")
    if fmt == "uuid":
        try:
            uuid.UUID(value)
            return Judgement("pass", "format:uuid")
        except ValueError:
            return Judgement("fail", "format:uuid")
    if fmt in ("email", "uri"):
        import validators

        ok = validators.email(value) if fmt == "email" else validators.url(value)
        return Judgement("pass" if ok is True else "fail", f"format:{fmt}")
    return None


def _semantic_verdict(name: str, value: Any, desc: str) -> Judgement:
    if isinstance(value, bool):
        return Judgement("pass", "boolean")
    if isinstance(value, (int, float)):
        return _number_verdict(name, value, desc)
    text = value.strip()
    if _TZ.search(name):
        ok = text in _zones() or bool(_UTC_OFFSET.match(text))
        return Judgement("pass" if ok else "fail", "timezone", "" if ok else f"{text!r} is no IANA zone")
    if _CURRENCY.search(name) and not name.endswith(("_amount", "_symbol", "_name")):
        ok = _currency(text)
        return Judgement("pass" if ok else "fail", "currency")
    if _COUNTRY.search(name) and not name.endswith("_name") or name == "country_name":
        ok = _country(text)
        return Judgement("pass" if ok else "fail", "country")
    if _LANGUAGE.search(name):
        ok = _language(text)
        return Judgement("pass" if ok else "fail", "language")
    if _EMAIL.search(name):
        import validators

        ok = validators.email(text) is True
        return Judgement("pass" if ok else "fail", "email")
    if _URL.search(name):
        import validators

        ok = validators.url(text) is True
        return Judgement("pass" if ok else "fail", "url")
    if _PHONE.search(name):
        digits = sum(c.isdigit() for c in text)
        ok = bool(_PHONE_SHAPE.match(text)) and 7 <= digits <= 15 and not re.match(r"^\d{4}-\d{2}-\d{2}", text)
        return Judgement("pass" if ok else "fail", "phone")
    if _DURATION.search(name):
        ok = bool(_ISO_DURATION.match(text) or _UNIT_DURATION.match(text))
        return Judgement("pass" if ok else "fail", "duration")
    if name.endswith(("_year", "_month")) or name in ("year", "month"):
        ok = text.isdigit() and (1900 <= int(text) <= 2100 if name.endswith("year") else 1 <= int(text) <= 12)
        return Judgement("pass" if ok else "fail", "year" if name.endswith("year") else "month")
    if name.endswith(("_ms", "_millis", "_milliseconds", "_seconds", "_secs")):
        ok = text.isdigit()
        return Judgement("pass" if ok else "fail", "duration")
    if name.endswith("_state") and re.search(r"(^|_)(address|shipping|billing|mailing|home)(_|$)", name):
        ok = text in _subdivisions()
        return Judgement("pass" if ok else "fail", "subdivision", "" if ok else f"{text!r} is no ISO 3166-2 region")
    if (
        _DATE.search(name)
        and not name.endswith(("_by", "_format", "_type", "_zone", "_in", "_id"))
        and not name.endswith(("_time_zone", "_timezone"))
    ):
        ok = _parse_datetime(text) is not None
        return Judgement("pass" if ok else "fail", "date")
    if _STATUS.search(name):
        words = _words(text)
        ok = bool(words) and all(w in STATUS_WORDS for w in words)
        return Judgement("pass" if ok else "fail", "status", "" if ok else f"{text!r} is no status word")
    if "base64" in name:
        import base64
        import binascii

        try:
            base64.b64decode(text, validate=True)
            return Judgement("pass" if len(text) % 4 == 0 else "fail", "base64")
        except (binascii.Error, ValueError):
            return Judgement("fail", "base64")
    if _PERSON.match(name):
        # each part a word of letters, at least one capitalised (``van der Berg``, ``Jean-Luc``)
        ok = bool(_NAME_SHAPE.match(text)) and any(w[:1].isupper() for w in text.split())
        return Judgement("pass" if ok else "fail", "person_name")
    if _FREE_TEXT.search(name):
        ok = len(text.split()) >= 3 and any(c.isalpha() for c in text) and not _WORD_PAIR.match(text)
        return Judgement("pass" if ok else "fail", "free_text", "" if ok else "not a sentence")
    if _IP.search(name):
        import ipaddress

        try:
            ipaddress.ip_address(text)
            return Judgement("pass", "ip_address")
        except ValueError:
            return Judgement("fail", "ip_address")
    if _HOST.search(name):
        import validators

        # an FQDN or domain has a dot; a bare host name may be a single label (``localhost``)
        ok = (
            validators.domain(text) is True
            or name.endswith(("hostname", "host", "host_name"))
            and validators.hostname(text) is True
        )
        return Judgement("pass" if ok else "fail", "hostname")
    if _ARN.search(name):
        ok = re.match(r"^arn:aws[\w-]*:[\w-]+:[\w-]*:\d{0,12}:.+", text) is not None
        return Judgement("pass" if ok else "fail", "arn")
    if name.endswith("password"):
        ok = len(text) >= 8 and " " not in text and not _WORD_PAIR.match(text)
        return Judgement("pass" if ok else "fail", "password")
    if _SECRET.search(name):
        ok = bool(_TOKEN_SHAPE.match(text)) and any(c.isdigit() for c in text)
        return Judgement("pass" if ok else "fail", "token")
    if _DURATION.search(name):
        ok = bool(_ISO_DURATION.match(text) or _UNIT_DURATION.match(text))
        return Judgement("pass" if ok else "fail", "duration")
    if _VERSION.search(name):
        ok = bool(_VERSION_SHAPE.match(text))
        return Judgement("pass" if ok else "fail", "version")
    if _ADDRESS.search(name):
        ok = any(c.isdigit() for c in text) and len(text.split()) >= 2
        return Judgement("pass" if ok else "fail", "street_address")
    if _CITY.search(name):
        if _WORD_PAIR.match(text) or not _NAME_SHAPE.match(text):
            return Judgement("fail", "city")
        return Judgement("pass" if text in _cities() else "unknown", "city")
    if _LABEL.search(name):
        ok = (
            (
                any(c.isalpha() for c in text)
                or ("version" in name or "release" in name)
                and bool(_VERSION_SHAPE.match(text))
            )
            and not _WORD_PAIR.match(text)
            and len(text.split()) <= 12
        )
        return Judgement("pass" if ok else "fail", "label")
    if _AMOUNT.search(name) and not name.endswith(("_code", "_number", "_id", "_type", "_name")):
        try:
            ok = float(text.replace(",", "")) >= 0
        except ValueError:
            ok = False
        return Judgement("pass" if ok else "fail", "amount")
    return Judgement("unknown", "none")


def _number_verdict(name: str, value: float, desc: str) -> Judgement:
    if _DATE.search(name) and not name.endswith(("_count", "_days", "_hours", "_minutes", "_seconds", "_in", "_id")):
        # epoch seconds (or milliseconds) between 2000 and 2100
        ok = 946_684_800 <= value <= 4_102_444_800 or 946_684_800_000 <= value <= 4_102_444_800_000
        return Judgement("pass" if ok else "fail", "epoch")
    if "latitude" in name or name in ("lat",):
        return Judgement("pass" if -90 <= value <= 90 else "fail", "latitude")
    if "longitude" in name or name in ("lon", "lng", "long"):
        return Judgement("pass" if -180 <= value <= 180 else "fail", "longitude")
    if name.endswith("year") or name == "year":
        return Judgement("pass" if 1900 <= value <= 2100 else "fail", "year")
    if _DURATION.search(name) or name.endswith(("_seconds", "_minutes", "_ms", "_days")):
        return Judgement("pass" if value >= 0 else "fail", "duration")
    if "percent" in name or name.endswith("_pct"):
        return Judgement("pass" if 0 <= value <= 100 else "fail", "percent")
    if _AMOUNT.search(name) or _COUNT.search(name):
        return Judgement("pass" if value >= 0 else "fail", "non_negative")
    return Judgement("unknown", "none")


@dataclass
class Tally:
    """Counts of verdicts, overall and per rule; ``share`` is pass / (pass + fail), or None when nothing
    was judged."""

    passed: int = 0
    failed: int = 0
    unknown: int = 0

    @property
    def judged(self) -> int:
        return self.passed + self.failed

    @property
    def share(self) -> float | None:
        return self.passed / self.judged if self.judged else None

    def add(self, verdict: Verdict) -> None:
        if verdict == "pass":
            self.passed += 1
        elif verdict == "fail":
            self.failed += 1
        else:
            self.unknown += 1

    def as_dict(self) -> dict[str, Any]:
        share = self.share
        return {
            "passed": self.passed,
            "failed": self.failed,
            "unknown": self.unknown,
            "share_passing": round(share, 4) if share is not None else None,
        }


def share_passing(items: Iterable[tuple[str, dict[str, Any], Any, str]]) -> tuple[Tally, list[tuple]]:
    """Judge ``(field_name, schema, value, description)`` items; returns the :class:`Tally` and the
    failing items as ``(field_name, value, rule, reason)``."""
    tally, failures = Tally(), []
    for name, schema, value, desc in items:
        judgement = check_value(name, schema, value, desc)
        tally.add(judgement.verdict)
        if judgement.verdict == "fail":
            failures.append((name, value, judgement.rule, judgement.reason))
    return tally, failures


def environment_values(env: dict[str, Any]) -> list[tuple[str, dict[str, Any], Any, str]]:
    """The seeded values of an environment's ``valid`` initial state as ``(field, schema, value,
    description)`` items, the description taken from the tools' row schemas."""
    desc: dict[tuple[str, str], str] = {}
    for tool in env.get("tools", []):
        out = tool.get("output_schema") or {}
        row = (out.get("properties", {}).get("items", {}).get("items") if tool.get("kind") == "list" else out) or {}
        for field, prop in (row.get("properties") or {}).items():
            if isinstance(prop, dict) and prop.get("description"):
                desc[(tool["table"], field)] = prop["description"]
    state = next((s["state"] for s in env["initial_states"] if s["name"] == "valid"), None)
    items = []
    if state is None:
        return items
    for table, rows in state["tables"].items():
        meta = env["tables"][table]
        for row in rows:
            for field, value in row.items():
                if field == meta["key"] or field in meta["foreign_keys"]:
                    continue  # identifiers: their only meaning is existing in this environment
                schema = meta["fields"].get(
                    field, {"type": "string", "format": "date-time"} if field == "created_at" else {}
                )
                items.append((field, schema, value, desc.get((table, field), "")))
    return items


def timestamps_after_clock(env: dict[str, Any]) -> tuple[int, int]:
    """``(late, total)``: seeded date/date-time values of each initial state (``valid``, ``boundary``)
    later than that state's ``meta.now`` clock, and how many such values there are."""
    late = total = 0
    for entry in env["initial_states"]:
        if entry["expect"] != "load":
            continue
        state = entry["state"]
        now = _parse_datetime(state["meta"]["now"])
        for table, rows in state["tables"].items():
            fields = env["tables"][table]["fields"]
            for row in rows:
                for field, value in row.items():
                    fmt = "date-time" if field == "created_at" else fields.get(field, {}).get("format")
                    if fmt not in ("date", "date-time") or not isinstance(value, str):
                        continue
                    moment = _parse_datetime(value)
                    if moment is None:
                        continue
                    total += 1
                    if isinstance(moment, dt.datetime):
                        late += moment > now
                    else:
                        late += moment > now.date()
    return late, total


def summarise(environments: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The value figures of built environments (Environment dicts), for an asset's metadata:
    ``passed``/``failed``/``unknown`` seeded values, ``share_passing`` (pass / judged), the fields that
    failed most (``top_failures``, ``"field (rule)": count``), and ``timestamps_after_clock`` /
    ``timestamps`` (seeded dates later than their state's clock, of all seeded dates)."""
    from collections import Counter

    tally, failures, late, total = Tally(), Counter(), 0, 0
    for env in environments:
        env_tally, env_failures = share_passing(environment_values(env))
        tally.passed += env_tally.passed
        tally.failed += env_tally.failed
        tally.unknown += env_tally.unknown
        failures.update(f"{name} ({rule})" for name, _v, rule, _r in env_failures)
        env_late, env_total = timestamps_after_clock(env)
        late, total = late + env_late, total + env_total
    return {
        **tally.as_dict(),
        "top_failures": dict(failures.most_common(10)),
        "timestamps_after_clock": late,
        "timestamps": total,
    }
