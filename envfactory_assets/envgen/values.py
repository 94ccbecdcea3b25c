"""Seeded, realistic field values that honour JSON Schema types, formats, enums and bounds.

A value comes first from the spec (``enum``; ``examples``, which the source reader keeps from the spec's
``example``/``examples``/``default``; ``format``; ``minimum``/``maximum``/``maxLength``), then from what the
field is, read from its name, its description and its table: IANA time zones (:mod:`zoneinfo`), ISO
currencies, countries and languages (``pycountry``, via :mod:`.entity_data`), real cities and airports
(``airportsdata``), statuses from lifecycle vocabularies matched to the table, and Faker (seeded per call
site) for people's and companies' names, addresses, phone numbers, e-mail, URLs, hosts and IPs. Free text
(descriptions, notes, titles, messages) is composed from sentence templates written for this module.

A string field none of these rules knows gets, in this order: one of the spec's usable examples or a value its
description quotes (``e.g. "Stop K"``); a value of the shape the rest of its name implies (digits for
``metageneration``, ``true``/``false`` for ``allow_markup``, a command line, JSON, a PEM block, a DOI...); else an
opaque code (``QX-4821``) that claims no meaning, where a real word would claim a wrong one.

Every date and date-time is at or before the clock (``now``, default :data:`DEFAULT_NOW`, the seeded
states' ``meta.now``) unless the caller asks for a future value (``future=True``: a due date a user sets).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import random
import re
from typing import Any

from faker import Faker

from envfactory_assets.envgen.entity_data import country_name, entity_value, real_city, real_place
from envfactory_assets.sources.names import spoken_thing

BASE_DATE = dt.date(2025, 1, 1)
DEFAULT_NOW = "2025-06-30T12:00:00Z"
#: how far back seeded timestamps reach from the clock (days)
HISTORY_DAYS = 540
#: how far ahead a future value (``future=True``) reaches from the clock (days)
FUTURE_DAYS = 90
_PERSON_TABLES = (
    "user",
    "contact",
    "customer",
    "employee",
    "member",
    "person",
    "people",
    "candidate",
    "patient",
    "account_holder",
    "author",
    "recipient",
    "attendee",
    "lead",
    "student",
    "driver",
    "owner",
    "subscriber",
    "staff",
    "agent",
    "profile",
)


#: Words that end in digits and are one word (``ipv4``, ``base64``, ``pkcs7``), not a word and a counter.
_DIGIT_WORDS = frozenset(
    "ipv4 ipv6 base64 base32 sha1 sha256 sha512 md5 pkcs7 pkcs8 pkcs12 utf8 utf16 iso8601 e164 x509 oauth2 s3 ec2 "
    "mp3 mp4 h264 isbn10 isbn13 line1 line2 address1 address2".split()
)


def _snake(name: str) -> str:
    """``name`` in snake case, with a trailing counter split off (``extra_phone3``: the third phone) unless the
    digits belong to the word (``ipv4``, ``base64``), and without the trailing ``_`` that escapes a Python keyword
    (``from_``)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().rstrip("_") or name.lower()
    last = snake.rsplit("_", 1)[-1]
    if last in _DIGIT_WORDS:
        return snake
    return re.sub(r"(?<=[a-z])(?=\d+$)", "_", snake)


def _has(name: str, *parts: str) -> bool:
    """True when one of ``parts`` is a whole ``_``-separated word sequence of ``name``."""
    padded = f"_{name}_"
    return any(f"_{p}_" in padded for p in parts)


# Status vocabularies (lowercase, as most APIs spell them), chosen by words of the table or field name.
_STATUSES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (
        ("order", "purchase", "shipment", "delivery", "fulfillment", "cart"),
        ("pending", "processing", "shipped", "delivered", "cancelled"),
    ),
    (
        ("payment", "invoice", "charge", "bill", "transaction", "payout", "refund", "transfer"),
        ("pending", "paid", "failed", "refunded", "overdue"),
    ),
    (
        ("ticket", "issue", "incident", "case", "bug", "request", "alert", "report"),
        ("open", "in_progress", "resolved", "closed"),
    ),
    (("task", "todo", "job", "step", "milestone", "project", "work"), ("todo", "in_progress", "done", "blocked")),
    (
        ("run", "build", "deployment", "deploy", "pipeline", "execution", "export", "import", "backup", "sync"),
        ("queued", "running", "succeeded", "failed"),
    ),
    (
        ("device", "server", "instance", "node", "host", "machine", "sensor", "agent", "cluster"),
        ("online", "offline", "maintenance"),
    ),
    (
        ("booking", "reservation", "appointment", "event", "meeting", "session"),
        ("confirmed", "pending", "cancelled", "completed"),
    ),
    (("subscription", "plan", "license", "membership", "contract"), ("active", "trialing", "past_due", "cancelled")),
    (
        ("post", "article", "page", "document", "content", "template", "message", "campaign", "version"),
        ("draft", "published", "archived"),
    ),
    (
        ("application", "candidate", "review", "approval", "verification"),
        ("submitted", "under review", "approved", "rejected"),
    ),
)
_DEFAULT_STATUSES = ("active", "inactive", "pending", "archived")

_PRIORITIES = ("low", "medium", "high", "urgent")
_ROLES = ("admin", "member", "viewer", "editor", "owner")
_TIERS = ("free", "basic", "pro", "enterprise")
_CHANNELS = ("email", "sms", "web", "phone", "chat")
_TYPES = ("standard", "premium", "internal", "external", "custom")
_UNITS = ("pcs", "kg", "g", "l", "m", "hours", "box")
_GENDERS = ("female", "male", "non-binary")
_MIME = ("application/json", "application/pdf", "image/png", "image/jpeg", "text/csv", "text/plain")
_LOCALES = (
    "en-US",
    "en-GB",
    "fr-FR",
    "de-DE",
    "es-ES",
    "it-IT",
    "pt-BR",
    "nl-NL",
    "ja-JP",
    "zh-CN",
    "ko-KR",
    "sv-SE",
    "pl-PL",
    "tr-TR",
    "es-MX",
    "en-AU",
    "en-CA",
    "fr-CA",
    "hi-IN",
    "ar-EG",
)
_COMMON_CURRENCIES = (
    "USD",
    "EUR",
    "GBP",
    "JPY",
    "CAD",
    "AUD",
    "CHF",
    "CNY",
    "INR",
    "BRL",
    "MXN",
    "SEK",
    "NOK",
    "DKK",
    "PLN",
    "ZAR",
    "SGD",
    "NZD",
    "KRW",
    "HKD",
)
_AWS_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-southeast-1",
    "ap-northeast-1",
    "ap-south-1",
    "sa-east-1",
    "ca-central-1",
)
_REGIONS = ("North America", "EMEA", "APAC", "LATAM", "Europe", "Middle East")
_TEAMS = (
    "Marketing",
    "Billing",
    "Support",
    "Sales",
    "Engineering",
    "Operations",
    "Finance",
    "Research",
    "Design",
    "Analytics",
    "Onboarding",
    "Logistics",
    "Security",
    "Production",
    "Staging",
    "Partner",
    "Customer Success",
    "Platform",
    "Mobile",
    "Data",
)
_PRODUCT_ADJ = (
    "Ergonomic",
    "Compact",
    "Wireless",
    "Organic",
    "Premium",
    "Portable",
    "Classic",
    "Smart",
    "Stainless",
    "Recycled",
    "Lightweight",
    "Waterproof",
)
_PRODUCT_NOUN = (
    "Desk Lamp",
    "Backpack",
    "Coffee Maker",
    "Headphones",
    "Notebook",
    "Water Bottle",
    "Keyboard",
    "Running Shoes",
    "Office Chair",
    "Monitor Stand",
    "Travel Mug",
    "Yoga Mat",
    "Blender",
    "Phone Case",
    "Rain Jacket",
)
_TASK_VERB = (
    "Update",
    "Review",
    "Fix",
    "Prepare",
    "Schedule",
    "Plan",
    "Draft",
    "Migrate",
    "Publish",
    "Audit",
    "Test",
    "Archive",
)
_TASK_OBJECT = (
    "the quarterly report",
    "the billing page",
    "the onboarding guide",
    "release notes for 2.4",
    "the team offsite",
    "the customer survey",
    "the API documentation",
    "the invoice template",
    "the nightly data backup",
    "the pricing page",
    "the Q3 roadmap",
    "the support macros",
    "the vendor contract",
    "the login timeout on mobile",
)
_NOTES = (
    "Customer asked to move the delivery to {day}.",
    "Called {first}; will follow up on {day}.",
    "Waiting for approval from the {team} team.",
    "Duplicate of an earlier request, keep for reference.",
    "Paid by bank transfer, receipt sent to {email}.",
    "Priority raised after the {day} review.",
    "{first} confirmed the new address by phone.",
    "Needs a second review before it goes live.",
    "Escalated to {team}; expected response by {day}.",
    "Imported from the old system in {month}.",
    "Please double-check the totals against the {month} statement.",
    "Discussed with {first} {last}; no further action needed.",
)
_DESCRIPTIONS = (
    "{phrase} for the {team} team.",
    "{Team} {singular} used to {bs}.",
    "Shared {singular} that lets {company} {bs}.",
    "{phrase}, maintained by {first} {last}.",
    "Main {singular} for {city} operations.",
    "Helps the {team} team {bs}.",
)
_MESSAGES = (
    "Hi {first}, your order has shipped and should arrive by {day}.",
    "Reminder: the {team} sync moves to {day} at 10:00.",
    "Thanks {first}, I've attached the {month} invoice.",
    "Can we review the {singular} before {day}?",
    "Your appointment is confirmed for {day}.",
    "The {team} team has approved your request.",
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "next week", "the 15th", "end of month")


@functools.lru_cache(maxsize=1)
def _time_zones() -> tuple[str, ...]:
    import zoneinfo

    # Area/Location zones as users pick them; legacy aliases (US/Pacific, Etc/GMT+3) left out.
    areas = ("Africa/", "America/", "Asia/", "Atlantic/", "Australia/", "Europe/", "Indian/", "Pacific/")
    return tuple(sorted(z for z in zoneinfo.available_timezones() if z.startswith(areas))) + ("UTC",)


def parse_clock(now: str) -> dt.datetime:
    """The clock string ``now`` (RFC 3339, ``Z`` allowed) as an aware datetime; ValueError names it."""
    try:
        moment = dt.datetime.fromisoformat(now.replace("Z", "+00:00"))
    except (AttributeError, ValueError) as exc:
        raise ValueError(f"clock {now!r} is not an RFC 3339 date-time") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _future_field(name: str) -> bool:
    return _has(
        name,
        "due",
        "deadline",
        "expires",
        "expiry",
        "expiration",
        "scheduled",
        "start",
        "end",
        "until",
        "next",
        "starts",
        "ends",
        "valid_until",
        "renewal",
        "appointment",
    )


class ValueFactory:
    """Deterministic value generator: the same ``seed`` (and ``now``) gives the same sequence of values.

    ``now`` is the environment's clock (RFC 3339); past-facing values are drawn from the
    :data:`HISTORY_DAYS` days before it.
    """

    def __init__(self, seed: int, now: str = DEFAULT_NOW) -> None:
        self.rng = random.Random(seed)
        self.faker = Faker()
        self.faker.seed_instance(seed)
        self.now = parse_clock(now)
        #: provenance of the packaged entity datasets values were drawn from (see :mod:`.entity_data`)
        self.data_sources: set[str] = set()

    def value(
        self, field_name: str, schema: dict[str, Any], table: str = "", description: str = "", future: bool = False
    ) -> Any:
        """A value for ``field_name`` valid under ``schema`` (type, format, enum, min/max, maxLength).

        ``description`` (default: the schema's own ``description``) and ``table`` say what the field is;
        ``future=True`` lets date fields whose name looks ahead (``due_date``, ``expires_at``) lie up to
        :data:`FUTURE_DAYS` after the clock (a value a user sets); otherwise dates are at or before it.
        """
        typ = schema.get("type")
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        name = _snake(field_name)
        raw_desc = description or str(schema.get("description") or "")
        desc = raw_desc.lower()
        examples = [e for e in schema.get("examples") or () if _usable_example(e, schema, name)]
        if examples and not _is_date_field(name, schema) and self.rng.random() < 0.6:
            return realistic_number(self.rng.choice(examples), schema)
        if typ == "boolean":
            return self.rng.random() < 0.5
        if typ == "integer":
            return self._integer(name, schema, future)
        if typ == "number":
            return self._number(name, schema)
        entity = entity_value(field_name, schema, self.rng, desc)
        if entity is not None:
            self.data_sources.add(entity[1])
            return entity[0]
        limit = schema.get("maxLength")
        # what the spec says a value looks like, for a field whose name and description name no kind
        hints = examples + [q for q in _quoted_examples(raw_desc) if _usable_example(q, schema, name)]
        text = ""
        for _ in range(5):
            text = self._string(name, schema.get("format"), table.lower(), desc, future, hints, limit)
            if not isinstance(limit, int) or len(text) <= limit:
                return text
        return text[:limit]

    # -- numbers -------------------------------------------------------------------------------------
    def _bounded(self, schema: dict[str, Any], lo: float, hi: float, integer: bool) -> float:
        """A draw from ``[lo, hi]`` intersected with the schema's bounds (the schema's range if disjoint)."""
        s_lo, s_hi = schema.get("minimum"), schema.get("maximum")
        a = max(lo, s_lo) if s_lo is not None else lo
        b = min(hi, s_hi) if s_hi is not None else hi
        if a > b:  # the field's usual range is outside the schema's: honour the schema
            a = s_lo if s_lo is not None else (s_hi - 500 if s_hi is not None else lo)
            b = s_hi if s_hi is not None else a + 500
        if integer:
            return self.rng.randint(int(a), int(b))
        return min(max(round(self.rng.uniform(a, b), 2), a), b)

    def _integer(self, name: str, schema: dict[str, Any], future: bool) -> int:
        if _has(name, "year"):
            return int(self._bounded(schema, 1990, self.now.year, True))
        if _is_date_field(name, schema) or _has(name, "timestamp", "epoch"):
            moment = self._moment(name, future)
            return int(self._bounded(schema, int(moment.timestamp()), int(moment.timestamp()), True))
        if _has(name, "age"):
            return int(self._bounded(schema, 18, 80, True))
        if _has(name, "port"):
            return int(self._bounded(schema, 1024, 65535, True))
        if _has(name, "percent", "percentage", "pct", "progress"):
            return int(self._bounded(schema, 0, 100, True))
        if _has(name, "rating", "stars", "score", "priority", "level"):
            return int(self._bounded(schema, 1, 5, True))
        if _has(name, "ttl", "timeout", "duration", "interval", "seconds", "delay"):
            return int(self._bounded(schema, 30, 86400, True))
        if _has(name, "minutes"):
            return int(self._bounded(schema, 5, 240, True))
        if _has(name, "days"):
            return int(self._bounded(schema, 1, 90, True))
        if _has(name, "page_size", "per_page", "limit", "page", "max_results", "batch_size"):
            return int(self._bounded(schema, 1 if name == "page" else 10, 10 if name == "page" else 100, True))
        if _has(name, "size", "bytes", "length"):
            return int(self._bounded(schema, 1024, 10_000_000, True))
        if _has(name, "amount", "price", "cost", "total", "balance", "fee", "salary", "budget"):
            return int(self._bounded(schema, 5, 2000, True))
        if _has(name, "count", "quantity", "qty", "stock", "seats", "capacity", "number_of", "num", "retries"):
            return int(self._bounded(schema, 0, 50, True))
        return int(self._bounded(schema, 1, 500, True))

    def _number(self, name: str, schema: dict[str, Any]) -> float:
        if _is_date_field(name, schema) or _has(name, "timestamp", "epoch"):
            stamp = float(int(self._moment(name, False).timestamp()))
            return float(self._bounded(schema, stamp, stamp, False))
        if _has(name, "latitude", "lat"):
            return float(self._bounded(schema, -60, 70, False))
        if _has(name, "longitude", "lon", "lng", "long"):
            return float(self._bounded(schema, -170, 170, False))
        if _has(name, "rating", "score", "stars"):
            return float(self._bounded(schema, 1, 5, False))
        if _has(name, "percent", "percentage", "pct"):
            return float(self._bounded(schema, 0, 100, False))
        if _has(name, "rate", "ratio", "probability", "share"):
            return float(self._bounded(schema, 0, 1, False))
        if _has(name, "weight", "kg"):
            return float(self._bounded(schema, 0.1, 40, False))
        if _has(
            name,
            "amount",
            "price",
            "cost",
            "total",
            "subtotal",
            "balance",
            "fee",
            "salary",
            "budget",
            "revenue",
            "tax",
            "discount",
            "value",
        ):
            # prices cluster at small amounts: a log-uniform draw between 1 and 2,000
            return (
                float(self._bounded(schema, 1, 2000, False))
                if "maximum" in schema or "minimum" in schema
                else round(10 ** self.rng.uniform(0, 3.3), 2)
            )
        if name.endswith(("_id", "_ids")) or name in ("id", "uid", "identifier"):
            # an identifier typed ``number`` is still a whole number (JSON has no integer in some specs)
            return float(self._bounded(schema, 1, 100_000, True))
        return float(self._bounded(schema, 1.0, 1000.0, False))

    # -- dates ---------------------------------------------------------------------------------------
    def _moment(self, name: str, future: bool) -> dt.datetime:
        if future and _future_field(name):
            return self.now + dt.timedelta(minutes=self.rng.randint(60, FUTURE_DAYS * 24 * 60))
        moment = self.now - dt.timedelta(minutes=self.rng.randint(0, HISTORY_DAYS * 24 * 60))
        return moment.replace(second=0, microsecond=0)

    def datetime_str(self, field_name: str = "created_at", future: bool = False) -> str:
        """An RFC 3339 UTC date-time (``2025-03-04T09:15:00Z``) at or before the clock (see ``future``)."""
        moment = self._moment(_snake(field_name), future)
        return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def date_str(self, field_name: str = "date", future: bool = False) -> str:
        """An ISO date at or before the clock's date (see ``future``)."""
        return self._moment(_snake(field_name), future).date().isoformat()

    # -- strings -------------------------------------------------------------------------------------
    def _arn(self, n: str, table: str) -> str:
        """An AWS ARN (``arn:partition:service:region:account:resource``) of the kind the name says."""
        f, rng = self.faker, self.rng
        account = rng.randint(10**11, 10**12 - 1)
        if _has(n, "role"):
            return f"arn:aws:iam::{account}:role/{rng.choice(_TEAMS).replace(' ', '')}Role"
        if _has(n, "kms", "key"):
            return f"arn:aws:kms:{rng.choice(_AWS_REGIONS)}:{account}:key/{f.uuid4()}"
        service = re.sub(r"[^a-z0-9-]", "", table.split("_")[0]) or "service"
        return f"arn:aws:{service}:{rng.choice(_AWS_REGIONS)}:{account}:{table.rstrip('s') or 'resource'}/{f.slug()}"

    def _fill(self, template: str, table: str) -> str:
        f = self.faker
        singular = spoken_thing(table) or "record"
        team = self.rng.choice(_TEAMS)
        return template.format(
            phrase=f.catch_phrase(),
            team=team,
            Team=team,
            singular=singular,
            bs=f.bs(),
            company=f.company(),
            first=f.first_name(),
            last=f.last_name(),
            city=real_city(self.rng),
            day=self.rng.choice(_DAYS),
            month=self.now.strftime("%B"),
            email=f.email(),
        )

    def _status(self, name: str, table: str, desc: str) -> str:
        context = f"_{name}_{table}_" + "_".join(desc.split()[:12])
        for words, statuses in _STATUSES:
            if any(f"_{w}" in context for w in words):
                return self.rng.choice(statuses)
        return self.rng.choice(_DEFAULT_STATUSES)

    def _kind_string(self, n: str, fmt: str | None, table: str, desc: str) -> str | None:
        """A value of the kind of thing a field's name or description names (an ISBN, an ETag, a UUID,
        coordinates, a place, a format name), or None when it names none of these."""
        f, rng = self.faker, self.rng
        listed = _listed(desc)
        if listed:
            return rng.choice(listed)
        if "md5" in desc or _has(n, "md5"):
            return f.md5()
        if re.search(r"sha-?256", desc) or _has(n, "sha256"):
            return f.sha256()
        if ("base64" in desc or "base 64" in desc) and not _has(n, "url", "uri"):
            import base64

            return base64.b64encode(f.sentence().encode()).decode()
        if ("e.164" in desc or "phone number" in desc) and not n.endswith(("_type", "_id", "_country", "_format")):
            return f"+1{rng.randint(201, 989)}{rng.randint(200, 999)}{rng.randint(0, 9999):04d}"
        if n in ("from_number", "to_number", "from_phone", "to_phone"):
            return f"+1{rng.randint(201, 989)}{rng.randint(200, 999)}{rng.randint(0, 9999):04d}"
        if n == "sid" or n.endswith("_sid"):
            return (n[:2].upper() if n != "sid" else "SI")[:2] + f.md5()
        if _has(n, "color", "colour"):
            return f.hex_color() if rng.random() < 0.5 else f.safe_color_name()
        if n.endswith(("_ids", "_identifier")) or n in ("identifier", "ids"):
            return f"{n.rsplit('_', 1)[0] if '_' in n else 'ref'}_{rng.randint(1, 99999):05d}"
        if n.endswith(("_information", "_info")) or n in ("information", "info"):
            return self._fill(rng.choice(_NOTES), table)
        if _has(n, "percentage", "percent", "pct"):
            return f"{rng.uniform(0, 30):.2f}"
        if _has(n, "runtime"):
            return rng.choice(("python3.12", "python3.11", "nodejs20.x", "java17", "go1.x", "ruby3.3", "dotnet8"))
        if _has(n, "vm_size", "instance_type", "machine_type"):
            return rng.choice(("Standard_D2s_v3", "Standard_B2ms", "t3.medium", "m5.large", "e2-standard-4"))
        if n.endswith("size") and not _has(n, "page_size", "batch_size"):
            return rng.choice(("S", "M", "L", "XL", "small", "medium", "large"))
        if _has(n, "protocol"):
            return rng.choice(("https", "http", "mqtt", "ocpp1.6", "ocpp2.0.1", "sftp", "tcp"))
        if n.endswith("prefix"):
            return (table[:3] or n[:3]).upper() + "-"
        if (
            n.endswith("code")
            and "isbn" not in desc
            and not _has(n, "currency", "language", "country", "postal", "post", "zip", "locale")
        ):
            return f"{(n.split('_')[0][:3] or 'C').upper()}{rng.randint(10, 999)}"
        if n in ("contact", "point_of_contact", "contact_info") or n.endswith("_contact"):
            return f.name()
        if _has(n, "isbn", "isbn10", "isbn_10", "isbn13", "isbn_13") or "isbn" in desc:
            return f.isbn10() if _has(n, "isbn10", "isbn_10") or "isbn-10" in desc else f.isbn13()
        if _has(n, "etag", "e_tag", "if_match", "if_none_match", "entity_tag") or "etag" in desc:
            return f'"{f.sha1()[:24]}"'
        if fmt == "uuid" or _has(n, "uuid", "guid"):
            return str(f.uuid4())
        if _has(n, "coordinates", "coords", "coordinate", "latlng", "lat_lng", "latlon", "lat_lon", "geo_point"):
            if not n.endswith(("_format", "_type", "_system")):
                place = real_place(rng)
                return f"{place['lat']:.4f},{place['lon']:.4f}"
        if n.endswith(("_lat", "_latitude")) or n in ("lat", "latitude"):
            return f"{real_place(rng)['lat']:.4f}"
        if n.endswith(("_lon", "_lng", "_longitude")) or n in ("lon", "lng", "longitude"):
            return f"{real_place(rng)['lon']:.4f}"
        if (n.endswith("_format") or n == "format") and not n.endswith(
            ("date_format", "time_format", "datetime_format")
        ):
            return rng.choice(_format_names(f"{n} {desc} {table}"))
        if _has(n, "location", "place", "venue", "destination", "origin", "where", "near", "birthplace", "hometown"):
            if not n.endswith(("_id", "_ids", "_url", "_type", "_count", "_format")):
                place = real_place(rng)
                return f"{place['city']}, {country_name(place['country'])}" if rng.random() < 0.5 else place["city"]
        return None

    def _string(
        self,
        n: str,
        fmt: str | None,
        table: str,
        desc: str,
        future: bool,
        hints: list[Any] | tuple[Any, ...] = (),
        limit: int | None = None,
    ) -> str:
        f, rng = self.faker, self.rng
        if fmt == "date-time":
            return self.datetime_str(n, future)
        if fmt == "date":
            return self.date_str(n, future)
        if _is_date_field(n, {}) and not n.endswith(("year", "month")):
            return self.datetime_str(n, future)
        if _has(n, "year"):
            return str(self.rng.randint(2020, self.now.year + (4 if future or _future_field(n) else 0)))
        if "cron" in desc or _has(n, "cron", "cron_expression", "cron_schedule"):
            return rng.choice(_CRON_SCHEDULES)
        if _FLAG_NAME.search(n) and not hints:
            # a flag the spec types as a string (GitLab v3's builds_enabled): it holds a truth value, not a code
            return rng.choice(("true", "false"))
        # a format the spec declares is its own word on the value's kind: a `primary_contact` with format
        # email holds an address, not a person's name
        kind = None if fmt in _DECLARED_FORMATS else self._kind_string(n, fmt, table, desc)
        if kind is not None:
            return kind
        if fmt == "email" or "email" in n:
            return f.email()
        if fmt == "uuid":
            return str(f.uuid4())
        if fmt == "uri" or _has(n, "url", "uri", "website", "homepage", "link", "href", "callback", "webhook"):
            if _has(n, "image", "avatar", "photo", "picture", "logo", "icon", "thumbnail"):
                return f"https://{f.domain_name()}/images/{f.slug()}.png"
            return f.url() + (f.uri_path() if rng.random() < 0.5 else "")
        if _has(n, "base64"):
            import base64

            return base64.b64encode(self._fill(rng.choice(_MESSAGES), table).encode()).decode()
        if _has(n, "birthday", "birth_date", "dob", "date_of_birth", "birthdate"):
            return (self.now.date() - dt.timedelta(days=rng.randint(18 * 365, 80 * 365))).isoformat()
        if n.endswith(("_ms", "_millis", "_milliseconds")):
            return str(rng.randint(1, 90) * 86_400_000)
        if n.endswith(("_seconds", "_secs")):
            return str(rng.randint(1, 48) * 1800)
        # The last word of a name says what it holds: a ``plan_description`` is text, not a plan.
        if n.endswith(("_description", "_desc", "_details", "_summary")) or n in ("description", "desc"):
            return self._fill(rng.choice(_DESCRIPTIONS), table)
        if n.endswith(("_message", "_body", "_text", "_content")):
            return self._fill(rng.choice(_MESSAGES), table)
        if n.endswith(("_comment", "_comments", "_note", "_notes", "_reason", "_remarks")):
            return self._fill(rng.choice(_NOTES), table)
        if _has(n, "month"):
            return f"{rng.randint(1, 12):02d}"
        if _has(n, "arn"):
            return self._arn(n, table)
        if _has(n, "cidr", "cidr_block", "ip_cidr_range", "subnet", "ip_range"):
            return f.ipv4(network=True, private=True)
        if _has(n, "ip", "ip_address", "ipv4", "remote_ip", "client_ip", "ip_addr"):
            return f.ipv4_public()
        if _has(n, "logo", "avatar", "image", "icon", "photo", "picture", "thumbnail") and not _has(n, "id", "name"):
            return f"https://{f.domain_name()}/images/{f.slug()}.png"
        if n.endswith("date_format") or n == "date_format":
            return rng.choice(("YYYY-MM-DD", "DD/MM/YYYY", "MM/DD/YYYY", "DD.MM.YYYY"))
        if n.endswith(("decimal_separator", "thousands_separator")):
            return rng.choice((".", ",")) if "decimal" in n else rng.choice((",", ".", " "))
        if n.endswith(("_type", "_kind", "_mode")) and not _has(n, "content_type", "media_type", "mime_type"):
            return rng.choice(_TYPES)
        if n.endswith("_state") and _has(n, "address", "shipping", "billing", "mailing", "home", "us"):
            return f.state_abbr()
        if n.endswith(("_status", "_state")) or n in ("status", "state_value", "status_value"):
            return self._status(n, table, desc)
        if _has(n, "timezone", "time_zone", "tz", "tz_name") or n.endswith(("timezone", "time_zone")):
            return rng.choice(_time_zones())
        if _has(n, "locale"):
            return rng.choice(_LOCALES)
        if n.endswith("_id") or n == "id":
            # an identifier of something outside the environment (the state's own keys come from the state)
            return f"{n[:-3] or 'ref'}_{rng.randint(1, 99999):05d}"
        if _has(n, "phone", "mobile", "telephone", "fax", "cell", "msisdn") or (
            n in ("to", "from") and not re.search(r"\b(place|location|city|destination|travel|entity)\b", desc)
        ):
            return f"+1{rng.randint(201, 989)}{rng.randint(200, 999)}{rng.randint(0, 9999):04d}"
        if n in ("first_name", "given_name", "firstname"):
            return f.first_name()
        if n in ("last_name", "surname", "family_name", "lastname"):
            return f.last_name()
        if _has(n, "currency"):
            return rng.choice(_COMMON_CURRENCIES)
        if _has(n, "city", "town", "locality"):
            return real_city(rng)
        if _has(n, "zip", "postal", "postcode", "zipcode", "postal_code"):
            return f.postcode()
        if (
            _has(n, "province", "county")
            or n == "state"
            and _has(table, "address", "addresses", "location", "locations")
        ):
            return f.state()
        if _has(n, "address", "street", "line1", "address_line1", "address1"):
            return f.street_address()
        if _has(n, "region") and not _has(n, "name"):
            return rng.choice(_AWS_REGIONS if "aws" in n or "aws" in desc or "amazon" in desc else _REGIONS)
        if _has(n, "language", "lang"):
            return f.language_code()
        if _has(n, "ip", "ip_address", "ipv4", "remote_ip", "client_ip", "ip_addr"):
            return f.ipv4_public()
        if _has(n, "ipv6"):
            return f.ipv6()
        if _has(n, "fqdn", "hostname", "host", "domain", "domain_name", "host_name"):
            return f.hostname() if _has(n, "host", "hostname", "fqdn", "host_name") else f.domain_name()
        if _has(n, "password"):
            return f.password(length=14)
        if _has(n, "token", "secret", "api_key", "key", "hash", "checksum", "signature", "fingerprint", "nonce"):
            return f.sha1()[:32] if not _has(n, "signature", "hash", "checksum", "fingerprint") else f.sha256()
        if n == "sid" or n.endswith("_sid"):
            return (n[:2].upper() if n != "sid" else "SID")[:2] + f.md5()
        if _has(n, "version", "revision", "release"):
            return f"{rng.randint(1, 5)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
        if _has(n, "ttl", "duration", "timeout", "interval", "period"):
            return rng.choice(("PT30M", "PT1H", "PT15M", "P1D", "P7D", "PT2H", "3600", "86400"))
        if _has(n, "status", "state", "stage", "phase", "lifecycle_state"):
            return self._status(n, table, desc)
        if _has(n, "priority", "severity", "urgency"):
            return rng.choice(_PRIORITIES)
        if _has(n, "role"):
            return rng.choice(_ROLES)
        if _has(n, "plan", "tier", "edition"):
            return rng.choice(_TIERS)
        if _has(n, "channel") and not _has(n, "id", "name"):
            if any(w in f"{table} {desc}" for w in ("slack", "chat", "discord", "teams")):
                return "#" + rng.choice(_TEAMS).lower().replace(" ", "-")
            return rng.choice(_CHANNELS)
        if _has(n, "gender", "sex"):
            return rng.choice(_GENDERS)
        if _has(n, "org_unit", "business_unit", "organizational_unit", "organisational_unit"):
            return rng.choice(_TEAMS)
        if n == "units" or n.endswith("_units") and ("metric" in desc or "imperial" in desc):
            return rng.choice(("metric", "imperial"))
        if _has(n, "unit", "uom"):
            return rng.choice(_UNITS)
        if _has(n, "mime", "content_type", "media_type", "mimetype"):
            return rng.choice(_MIME)
        if _has(n, "color", "colour"):
            return f.hex_color() if rng.random() < 0.5 else f.safe_color_name()
        if _has(n, "iban"):
            return f.iban()
        if _has(n, "bic", "swift", "swift_code"):
            return f.swift()
        if _has(n, "account_number", "routing_number", "nsc", "sort_code"):
            return f.numerify("#" * (10 if "account" in n else 6 if _has(n, "nsc", "sort_code") else 9))
        if _has(n, "amount", "price", "cost", "total", "subtotal", "balance", "fee", "salary", "budget", "revenue"):
            return f"{round(10 ** rng.uniform(0, 3.3), 2):.2f}"
        if _has(n, "sku"):
            return f"SKU-{rng.randint(10000, 99999)}"
        if _has(n, "serial", "serial_number"):
            return f.bothify("SN-####-????").upper()
        if _has(n, "invoice_number", "order_number", "reference", "ref", "my_ref", "number", "code", "confirmation"):
            prefix = {"invoice": "INV", "order": "ORD"}.get(n.split("_")[0], "REF")
            return f"{prefix}-{self.now.year}-{rng.randint(1, 9999):04d}"
        if _has(n, "model"):
            return f"{f.bothify('??').upper()}-{rng.randint(100, 9900)}"
        if _has(
            n,
            "vendor",
            "manufacturer",
            "brand",
            "company",
            "organization",
            "organisation",
            "employer",
            "org",
            "publisher",
            "provider",
            "carrier",
            "supplier",
        ):
            return f.company()
        if _has(n, "job", "job_title", "occupation", "position"):
            return f.job()
        if _has(n, "file", "filename", "file_name", "attachment"):
            return f.file_name()
        if _has(n, "path"):
            return f.file_path(depth=2)
        if _has(n, "tag", "tags", "slug", "keyword", "label_key", "category") and not _has(n, "name"):
            return f.slug() if _has(n, "slug") else rng.choice(_TEAMS).lower().replace(" ", "-")
        if _has(n, "type", "kind", "class", "mode"):
            return rng.choice(_TYPES)
        if n.endswith("_id") or n == "id":
            return f"{n[:-3] or 'ref'}_{rng.randint(1, 99999):05d}"
        if _has(n, "username", "login", "handle", "user_name", "screen_name", "nickname", "user"):
            return f.user_name()
        if _has(
            n,
            "display_name",
            "full_name",
            "contact_name",
            "owner",
            "assignee",
            "author",
            "created_by",
            "updated_by",
            "reviewer",
            "manager",
            "holder",
            "recipient",
            "sender",
            "customer_name",
            "account_holder_name",
            "holder_name",
            "owner_name",
            "person",
            "author_name",
        ):
            return f.name()
        if "name" in n:
            if any(t in table for t in _PERSON_TABLES):
                return f.name()
            if any(t in table for t in ("product", "item", "catalog", "sku", "good", "article")):
                return f"{rng.choice(_PRODUCT_ADJ)} {rng.choice(_PRODUCT_NOUN)}"
            if any(
                t in table
                for t in ("compan", "organi", "vendor", "supplier", "merchant", "tenant", "partner", "client", "brand")
            ):
                return f.company()
            singular = spoken_thing(table) or "record"
            return f"{rng.choice(_TEAMS)} {singular.title() if len(singular) > 3 else singular.upper()}"
        if _has(n, "title", "subject", "headline", "label", "summary", "caption"):
            if any(t in table for t in ("book", "article", "post", "page", "document", "story")):
                return f.catch_phrase().title()
            return f"{rng.choice(_TASK_VERB)} {rng.choice(_TASK_OBJECT)}"
        if _has(n, "message", "body", "text", "content", "sms", "chat"):
            return self._fill(rng.choice(_MESSAGES), table)
        if _has(n, "note", "notes", "comment", "comments", "remarks", "memo", "reason", "instructions"):
            return self._fill(rng.choice(_NOTES), table)
        if _has(n, "description", "bio", "about", "details", "overview", "desc"):
            return self._fill(rng.choice(_DESCRIPTIONS), table)
        if _is_date_field(n, {}) or _has(n, "time", "datetime", "timestamp", "created", "updated", "modified"):
            return self.datetime_str(n, future)
        # whole words: "updated" holds "date", "unlinked" "link"
        if re.search(r"\b(?:date|timestamp)\b", desc):
            return self.datetime_str(n, future)
        if re.search(r"\b(?:url|link)\b", desc):
            return f.url()
        if "e-mail" in desc or "email" in desc:
            return f.email()
        # No kind word in the name or description: what the spec says a value looks like, else the shape the
        # name's last word implies, else a code that claims no meaning (a real word would claim a wrong one).
        if hints:
            return rng.choice(list(hints))
        shaped = self._shaped_string(n, table, desc)
        if shaped is not None and (not isinstance(limit, int) or len(shaped) <= limit):
            return shaped  # a shape cut to fit would no longer be one: then the code below, which fits
        return self._opaque_code(limit)

    def _shaped_string(self, n: str, table: str, desc: str) -> str | None:
        """A value of the shape a field's name (``n``, snake case) or description implies where no kind rule of
        :meth:`_string` applied, or None when it implies none.

        Shapes: a number written as text (``metageneration``, ``port``, ``vlan``, "6 digits"), a ``true``/``false``
        flag (``allow_markup``, "When true, ..."), an identifier whose name glues ``id`` on (``accountid``), JSON,
        XML, HTML, CSS and SQL text, a command line, an expression, a query, a regular expression or glob, a text
        encoding, a file extension, a PEM block, a MAC address, a DOI, an endpoint URL, a DKIM selector, a
        subdomain, a salt, a computer's name, a bucket, a repository, a stock ticker and exchange, a weekday, a
        frequency, a card statement descriptor, an address complement, a CNPJ/CPF, a CPU platform, a snippet of a
        message, a note, a file name, a person who did something (``approved_by``), a user name, a signed change
        and a percentage, access permissions, a place or a bounding box.
        """
        f, rng = self.faker, self.rng
        last = n.rsplit("_", 1)[-1]
        digits = re.search(r"\b(\d{1,2})[- ]digits?\b", desc)
        if digits and 0 < int(digits.group(1)) <= 30:
            return f.numerify("#" * int(digits.group(1)))
        if last == "level" and _has(n, "log", "logging"):
            return rng.choice(("debug", "info", "warning", "error"))
        if last in _NUMBER_WORDS and not re.search(r"\bname\b", desc):  # an index's name is no number
            return str(rng.randint(*_NUMBER_WORDS[last]))
        if re.match(r"(is|has|allow|allows|enable|enabled|can|should|disable|require|requires)_", n) or (
            re.match(r"\W*((when|if) (set to )?true\b|true (if|when)\b|whether\b)", desc)
        ):
            return rng.choice(("true", "false"))
        glued = re.fullmatch(r"([a-z]{2,}?)(id|uid|guid)", n)
        if glued and n not in _WORDS_ENDING_ID:
            return f"{glued.group(1)}_{rng.randint(1, 99999):05d}"
        if (
            _has(n, "json")
            or last in ("attributes", "metadata")
            or n.endswith("meta_data")
            or (re.search(r"\bjson\b", desc) and not _has(n, "format", "type"))
        ):
            return self._json_text()
        if _has(n, "xml") or re.search(r"\bxml\b", desc):
            team = rng.choice(_TEAMS).lower().replace(" ", "-")
            return (
                f'<?xml version="1.0" encoding="UTF-8"?><settings><team>{team}</team>'
                f"<timeout>{rng.randint(1, 12) * 5}</timeout></settings>"
            )
        if _has(n, "html"):
            import html

            return f"<p>{html.escape(self._fill(rng.choice(_MESSAGES), table))}</p>"
        if _has(n, "css", "stylesheet"):
            return rng.choice(_CSS)
        if _has(n, "sql") or re.search(r"\bsql\b", desc):
            return rng.choice(_SQL)
        if _has(n, "command", "command_line", "commandline", "cmd", "entrypoint", "entry_point", "script", "shell"):
            return rng.choice(_COMMANDS)
        if _has(n, "expression", "expr", "formula", "condition", "predicate"):
            return rng.choice(_EXPRESSIONS)
        if _has(n, "query", "q", "filter", "filters", "search", "search_query", "search_term"):
            return rng.choice(_QUERIES).format(date=(self.now.date() - dt.timedelta(days=rng.randint(1, 90))))
        if _has(n, "glob"):
            return rng.choice(("*.log", "reports/*.csv", "src/**/*.py", "images/*.png"))
        if _has(n, "pattern", "regex", "regexp"):
            return rng.choice(_PATTERNS)
        if _has(n, "encoding", "charset"):
            if _has(n, "content_encoding", "transfer_encoding", "compression"):
                return rng.choice(("gzip", "br", "deflate", "identity"))
            return rng.choice(("UTF-8", "ISO-8859-1", "UTF-16", "US-ASCII"))
        if _has(n, "extension", "file_extension", "ext"):
            if "phone" in desc or "phone" in table:
                return str(rng.randint(100, 9999))
            return f.file_extension()
        if _has(n, "pem", "pkcs7", "pkcs12", "certificate", "cert", "csr", "certificate_chain"):
            return self._pem(_has(n, "pkcs7"))
        if _has(n, "mac", "mac_address", "macaddress", "bssid"):
            return f.mac_address()
        if _has(n, "doi") or "digital object identifier" in desc:
            return f"10.{rng.randint(1000, 99999)}/{rng.randint(100000, 9999999)}"
        if _has(n, "endpoint", "end_point"):
            return f"https://{f.hostname()}/api/v{rng.randint(1, 3)}"
        if _has(n, "selector"):
            return f"s{rng.randint(1, 99)}"
        if _has(n, "subdomain"):
            return f"{rng.choice(('mail', 'em', 'links', 'news', 'app'))}{rng.randint(1, 999)}"
        if _has(n, "salt", "hardware_id", "machine_id", "nonce"):
            return f.sha1()[:24]
        if _has(n, "computer", "computer_name", "machine_name", "workstation"):
            return f.hostname(0).upper()
        if _has(n, "bucket", "bucket_name"):
            return f"{f.domain_word()}-{rng.choice(('assets', 'backups', 'logs', 'uploads', 'exports', 'media'))}"
        if _has(n, "repository", "repo", "repository_name"):
            if "svn" in desc or "url" in desc:
                return f"https://svn.{f.domain_name()}/repos/{f.domain_word()}"
            return f"{f.user_name()}/{f.domain_word()}-{rng.choice(('api', 'web', 'service', 'tools', 'sdk'))}"
        if _has(n, "ticker", "ticker_symbol", "stock_symbol"):
            return rng.choice(_TICKERS)
        if _has(n, "exchange", "listing_exchange", "primary_exchange"):
            return rng.choice(_EXCHANGES)
        if _has(n, "day_of_week", "weekday", "dow", "day_name"):
            return f.day_of_week()
        if _has(n, "frequency", "recurrence", "cadence"):
            return rng.choice(("daily", "weekly", "monthly", "hourly", "quarterly"))
        if _has(n, "descriptor", "statement_descriptor", "soft_descriptor"):
            # what a card or bank statement shows: capitals, at most 22 characters
            return re.sub(r"[^A-Z0-9]+", " ", f.company().upper())[:22].strip()
        if _has(n, "complement", "line2", "address2", "apartment", "suite"):
            return f.secondary_address()
        if _has(n, "cnpj"):
            return f.numerify("##.###.###/0001-##")
        if _has(n, "cpf"):
            return f.numerify("###.###.###-##")
        if _has(n, "cpu", "cpu_platform", "processor"):
            return rng.choice(_CPU_PLATFORMS)
        if last in ("snippet", "excerpt", "preview", "teaser"):
            return self._fill(rng.choice(_MESSAGES), table)
        if last in ("addendum", "postscript", "remark"):
            return self._fill(rng.choice(_NOTES), table)
        if last in ("document", "documents", "glossary", "glossaries", "styleguide", "styleguides", "attachments"):
            stem = _DOCUMENT_KINDS.get(last) or rng.choice(_DOCUMENT_STEMS)
            return f"{stem}_{rng.randint(1, 12):02d}.{rng.choice(('pdf', 'docx', 'xlsx', 'csv'))}"
        if last in ("separator", "delimiter"):
            return rng.choice((",", ";", "|", "\t"))
        if n.endswith("tags") or last == "labels":
            return ", ".join(t.lower().replace(" ", "-") for t in rng.sample(_TEAMS, 2))
        if n == "value" and any(w in table for w in ("secret", "credential", "token", "password")):
            return f.sha1()[:32]
        if n == "self" or re.match(r"\W*(the )?path to\b", desc):
            return f"/v1/{table or 'items'}/{rng.randint(1, 99999):05d}"
        if last in ("phrase", "term", "word", "words", "keyword", "keywords"):
            return " ".join(f.words(rng.randint(1, 2)))
        if n.endswith("_by") or last in ("creator", "approver", "requester", "reporter"):
            return f.name()
        if last in ("identity", "acct") or "username" in desc:
            handle = f.user_name()
            return f"{handle}@{f.domain_name()}" if "domain" in desc and rng.random() < 0.5 else handle
        if last in ("cash", "equity", "margin"):
            return f"{round(10 ** rng.uniform(2, 5), 2):.2f}"
        if last in ("change", "delta", "diff", "pnl") or n.endswith(("percent", "pct")):
            spread = 5 if n.endswith(("percent", "pct")) else 250  # a day's change: a few percent, some currency
            return f"{rng.uniform(-spread, spread):.2f}"
        if last in ("permissions", "permission", "scopes", "scope"):
            return rng.choice(("read", "read,write", "admin", "read:orders write:orders", "read_only"))
        if _has(n, "bounds", "bbox", "bounding_box", "envelope", "extent"):
            place, d = real_place(rng), rng.choice((0.05, 0.1, 0.2))
            lat, lon = place["lat"], place["lon"]
            return f"{lon - d:.6f},{lat - d:.6f},{lon + d:.6f},{lat + d:.6f}"
        if (
            n in ("from", "to")
            and re.search(r"\b(place|location|city|destination|travel)\b", desc)
            or re.search(r"\bco-?ordinates?\b", desc)
        ):
            place = real_place(rng)
            return place["city"] if n in ("from", "to") else f"{place['lat']:.4f},{place['lon']:.4f}"
        named = re.match(r"\W*(?:the )?name of (?:the|a|an|this) ([a-z]+)", desc)
        if named:  # "The name of the entity where the relation starts": a name of that kind of thing
            return f"{rng.choice(_TEAMS)} {named.group(1).title()}"
        return None

    def _json_text(self) -> str:
        """A small JSON object as text (two of a handful of keys a system keeps about a record)."""
        import json

        rng = self.rng
        values = {
            "team": lambda: rng.choice(_TEAMS).lower(),
            "source": lambda: rng.choice(_CHANNELS),
            "region": lambda: rng.choice(_AWS_REGIONS),
            "tier": lambda: rng.choice(_TIERS),
            "priority": lambda: rng.randint(1, 5),
            "reference": lambda: f"REF-{self.now.year}-{rng.randint(1, 9999):04d}",
        }
        keys = rng.sample(sorted(values), 2)
        return json.dumps({k: values[k]() for k in keys})

    def _pem(self, pkcs7: bool) -> str:
        """A PEM block (RFC 7468): a label line, base64 of random bytes in 64-character lines, an end line."""
        import base64

        label = "PKCS7" if pkcs7 else "CERTIFICATE"
        body = base64.b64encode(bytes(self.rng.getrandbits(8) for _ in range(96))).decode()
        lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
        return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----"

    def _opaque_code(self, limit: int | None = None) -> str:
        """A code that claims no meaning, for a field of which nothing is known: two capitals, a hyphen and four
        digits (``QX-4821``), cut to ``limit`` characters (digits first kept below 3). It has a digit, so it is
        never a word."""
        rng = self.rng
        letters = "".join(rng.choice(_CODE_LETTERS) for _ in range(2))
        digits = f"{rng.randint(0, 9999):04d}"
        code = f"{letters}-{digits}"
        if isinstance(limit, int) and len(code) > limit:
            code = (letters + digits)[:limit] if limit >= 3 else digits[: max(limit, 1)]
        return code


#: Letters of :meth:`ValueFactory._opaque_code` (consonants: no syllable to read a word into).
_CODE_LETTERS = "BCDFGHJKLMNPQRSTVWXZ"

#: Number words a name may end in, with the range of the number it holds as text.
_NUMBER_WORDS: dict[str, tuple[int, int]] = {
    "generation": (1_000_000, 9_999_999),
    "metageneration": (1, 20),
    "count": (0, 500),
    "employees": (1, 5000),
    "headcount": (1, 5000),
    "no": (1, 99999),
    "num": (1, 99999),
    "nr": (1, 99999),
    "seq": (1, 9999),
    "sequence": (1, 9999),
    "index": (0, 99),
    "idx": (0, 99),
    "level": (1, 10),
    "rank": (1, 100),
    "port": (1024, 65535),
    "vlan": (1, 4094),
}

#: English words that end in ``id``: not an identifier's name with ``id`` glued on.
_WORDS_ENDING_ID = frozenset(
    "valid invalid paid prepaid unpaid postpaid android hybrid rapid fluid liquid solid grid humid rigid vivid lucid "
    "avid squid pyramid orchid steroid asteroid tabloid afraid braid plaid mermaid forbid morbid stupid timid candid "
    "acid arachnid void avoid said laid maid raid skid druid cuboid ovoid".split()
)

_COMMANDS = (
    "python3 run.py --input data.csv",
    "/bin/bash -c 'echo started && sleep 30'",
    "cmd /c echo %AZ_BATCH_TASK_ID%",
    "node server.js --port 8080",
    "java -jar app.jar --spring.profiles.active=prod",
    "ffmpeg -i input.mp4 -vf scale=1280:720 output.mp4",
    "make test",
    "npm run build",
)
_EXPRESSIONS = (
    "speed > 80",
    "amount * 0.2",
    "max(0, quantity - 5)",
    "status == 'active' && total > 100",
    "ignition ? 1 : 0",
    "price * (1 - discount / 100)",
    "count >= 3",
    "$TargetDedicatedNodes = min(10, $PendingTasks.GetSample(1))",
)
_QUERIES = (
    "status:active",
    "created_at>={date}",
    "status eq 'invoiced'",
    "priority:high AND status:open",
    "updated_at >= '{date}'",
    "type:order -status:cancelled",
)
#: names of a string field that holds a truth value: ``builds_enabled``, ``is_public``, ``has_wiki``
#: a name that states a yes/no condition of the row (``builds_enabled``, GitLab v3's ``archived``), whatever type
#: the spec gives it
_FLAG_NAME = re.compile(
    r"(?:^|_)(?:enabled|disabled|archived|blocked|locked|verified|pinned|muted|suspended|approved|hidden)$"
    r"|^(?:is|has|can)_"
)
_PATTERNS = (r"^[A-Z]{3}-\d{4}$", r"^\d{5}(-\d{4})?$", r"^[a-z0-9._-]+$", r"\.(jpg|png)$", r"^ORD-\d+$")
_CSS = (
    "color: #1a73e8; font-size: 14px;",
    "font-family: Arial, sans-serif; margin: 0 auto;",
    "background-color: #f5f5f5; padding: 8px 12px;",
    "border: 1px solid #ddd; border-radius: 4px;",
)
_SQL = (
    "SELECT id, status FROM orders WHERE created_at >= '2025-01-01'",
    "SELECT COUNT(*) FROM users WHERE active = true",
    "SELECT customer_id, SUM(total) FROM invoices GROUP BY customer_id",
    "UPDATE tasks SET status = 'done' WHERE id = 42",
)
# Large listed companies' tickers and the exchanges and routing destinations brokers name.
_TICKERS = ("AAPL", "MSFT", "AMZN", "GOOGL", "TSLA", "NVDA", "JPM", "V", "KO", "IBM", "SAP", "ASML", "BMW", "VOD")
_EXCHANGES = ("NASDAQ", "NYSE", "ARCA", "SMART", "LSE", "XETRA", "TSE", "HKEX", "EURONEXT", "BATS")
_DOCUMENT_KINDS = {
    "glossary": "glossary",
    "glossaries": "glossary",
    "styleguide": "style_guide",
    "styleguides": "style_guide",
}
_DOCUMENT_STEMS = ("contract", "brief", "manual", "report", "proposal", "specification", "presentation", "terms")
_CPU_PLATFORMS = (
    "Intel Cascade Lake",
    "Intel Ice Lake",
    "Intel Sapphire Rapids",
    "AMD Rome",
    "AMD Milan",
    "AMD Genoa",
    "Ampere Altra",
)

# Examples a description gives in quotes, or after "Example:" (``e.g. "Stop K"``, ``for example `EUR` ``).
_QUOTED_EXAMPLE = re.compile(
    r"\b(?:e\.\s?g\.|eg\.|for example|for instance|such as|examples?:)\s*[:,]?\s*"
    r"(?:\"([^\"]{1,120})\"|'([^']{1,120})'|`([^`]{1,120})`|(?<=: )([\w@.:/+-]{1,120}?)(?=[.,;]?(?:\s|$)))",
    re.I,
)


def _quoted_examples(description: str) -> list[str]:
    """The values a description gives as examples: quoted after ``e.g.``, ``for example``, ``such as``, or
    after ``Example:`` (also unquoted there); the first of each mention."""
    found = [next(g for g in m.groups() if g) for m in _QUOTED_EXAMPLE.finditer(description)]
    # ``'"a", "b"'`` shows a notation with letters that stand for values: no value itself
    return [q for q in found if re.search(r"[^\W_]{2}", q)]


#: JSON Schema string formats whose values :meth:`ValueFactory._string` writes as such, before any kind the field's
#: name suggests.
_DECLARED_FORMATS = frozenset({"email", "uuid", "uri"})

#: Schedules as people write them in cron (minute hour day-of-month month day-of-week).
_CRON_SCHEDULES = (
    "0 9 * * 1-5",
    "*/15 * * * *",
    "0 0 * * *",
    "30 2 * * 0",
    "0 */6 * * *",
    "0 8 1 * *",
    "45 17 * * 5",
    "0 12 * * *",
)

# Format names by what the format is of (a coordinate, an image, a report...), the first matching context wins.
_FORMATS = (
    (("coordinate", "coord", "geo", "latlng", "position"), ("decimal", "dms", "ddm", "utm")),
    (("image", "photo", "picture", "thumbnail", "avatar", "logo"), ("png", "jpeg", "webp")),
    (("audio", "voice", "sound", "recording"), ("mp3", "wav", "ogg")),
    (("video", "movie", "clip"), ("mp4", "webm")),
    (("phone", "number"), ("e164", "international", "national")),
    (("time", "clock", "hour"), ("12h", "24h")),
    (("color", "colour"), ("hex", "rgb", "hsl")),
    (("export", "report", "download", "file", "document", "output", "response", "data"), ("json", "csv", "pdf", "xml")),
)


def _format_names(context: str) -> tuple[str, ...]:
    """Names of formats a ``*_format`` field may hold, by words of its name, description and table."""
    for words, names in _FORMATS:
        if any(w in context for w in words):
            return names
    return ("json", "csv", "xml")


def _is_date_field(name: str, schema: dict[str, Any]) -> bool:
    """True for a field that holds a moment: a date format, or a name such as ``created_at``,
    ``creation_time``, ``due_date``, ``expires``, ``last_modified``."""
    if schema.get("format") in ("date", "date-time"):
        return True
    return bool(
        re.search(
            r"(_at|_on|_date|_time|_timestamp|_datetime)$|(^|_)(date|datetime|timestamp|created|updated|"
            r"modified|expires|expiry|expiration|deadline)$|(^|_)date(_|$)",
            name,
        )
    ) and not name.endswith(("_zone", "_format", "_type", "_by", "_in", "_days", "_seconds"))


_PLACEHOLDERS = {
    "string",
    "str",
    "text",
    "example",
    "value",
    "null",
    "none",
    "test",
    "foo",
    "bar",
    "0",
    "",
    "astringvalue",
    "stringvalue",
    "sample",
    "lorem",
    "loremipsum",
    "todo",
    "tbd",
    "xxx",
}


# Frequent words of lorem ipsum filler (Cicero, de finibus 1.10.32), to keep such spec examples out.
_LATIN = frozenset(
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore "
    "magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea commodo "
    "consequat duis aute irure reprehenderit voluptate velit esse cillum eu fugiat nulla pariatur excepteur "
    "sint occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim id est laborum quia "
    "architecto molestias laboriosam voluptas voluptatem quae ab illo inventore veritatis quasi beatae vitae "
    "dicta explicabo nemo ipsam aut odit fugit neque porro quisquam numquam eius modi tempora dolorem "
    "dolores eos ratione sequi nesciunt accusamus iusto odio dignissimos ducimus blanditiis praesentium "
    "voluptatum deleniti atque corrupti quos quas excepturi occaecati cupiditate similique mollitia animi "
    "harum quidem rerum facilis expedita distinctio nam libero cum soluta nobis eligendi optio cumque nihil "
    "impedit quo minus quod maxime placeat facere possimus omnis assumenda repellendus".split()
)


def _latin_filler(text: str) -> bool:
    words = re.findall(r"[a-z]+", text.lower())
    return len(words) >= 2 and sum(w in _LATIN for w in words) / len(words) >= 0.6


def _listed(desc: str) -> tuple[str, ...]:
    """The values a description says a field takes (``One of: a b c``, ``- a - b``, ``either A or B``)."""
    bullets = re.findall(r"(?:^|\s)- `?([A-Za-z][A-Za-z0-9_]*)`?(?=\s+-\s|\s*$)", desc.strip())
    if len(bullets) >= 2:
        return tuple(bullets)
    either = re.search(r"\beither\s+`?([A-Za-z0-9_]+)`?\s+or\s+`?([A-Za-z0-9_]+)`?\s*[.,;]?\s*$", desc.strip())
    if either:
        return either.groups()
    listed = re.search(r"(?:one of|possible values|allowed values|valid values|values are)\s*:\s*([^.]+)", desc)
    words = re.findall(r"[A-Za-z0-9_][\w-]*", listed.group(1).replace(" or ", " ")) if listed else []
    words = [w for w in words if w.lower() not in ("and", "the", "a", "an")]
    return tuple(words) if len(words) >= 2 else ()


def realistic_number(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` at the precision a person writes: a float rounded to the schema's ``multipleOf`` step when it
    gives one, else to 2 decimals (more for a magnitude below 0.1, so that two significant digits remain, at most
    6). Anything but a float (an int, a bool, a string) comes back unchanged, as does a result outside the
    schema's ``minimum``/``maximum``. Spec examples are often machine output (``0.9848439086783396``) that no
    one types."""
    if not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return value
    step = schema.get("multipleOf")
    if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
        decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
        rounded = round(round(value / step) * step, min(decimals + 1, 12))
    else:
        magnitude = math.floor(math.log10(abs(value)))
        rounded = round(value, min(max(2, 1 - magnitude), 6))
    low, high = schema.get("minimum"), schema.get("maximum")
    if (low is not None and rounded < low) or (high is not None and rounded > high):
        return value
    return rounded


def _usable_example(value: Any, schema: dict[str, Any], name: str = "") -> bool:
    """An example from the spec that is a real value of this field: within bounds, not a placeholder
    (``"string"``, or the field's own name: ``"Description"``, ``"A description"``, ``"myAccessToken"``)."""
    typ = schema.get("type")
    if typ == "string":
        if not isinstance(value, str) or "{" in value or len(value) > schema.get("maxLength", 200):
            return False
        flat, field = re.sub(r"[^a-z0-9]", "", value.lower()), re.sub(r"[^a-z0-9]", "", name.lower())
        # the field's own name, bare or with a word in front: "Description", "A description", "project description"
        echoes = bool(field) and flat.endswith(field) and len(flat) <= len(field) + 8
        stand_in = (
            bool(re.fullmatch(r"\s*<[^<>]+>\s*", value))
            or bool(re.search(r"\byour[\s._-]", value.lower()))
            # ``MyDomain\UserA``, ``my-project``: the author's stand-in for the reader's own
            or bool(
                re.search(
                    r"(^|[\W_])my[\W_]?(domain|company|value|token|key|host|server|app|project|org)", value.lower()
                )
            )
            # ``null only in the case of a non variant product``: a remark on when there is no value
            or bool(re.match(r"\s*(null|none|n/a|undefined)\b", value.lower()))
            # ``example code``, ``sample client_account``: a stand-in named as one
            or bool(re.fullmatch(r"\s*(example|sample|placeholder|dummy)\s+\S+\s*", value.lower()))
        )
        return flat not in _PLACEHOLDERS and not echoes and not stand_in and not _latin_filler(value)
    if typ in ("integer", "number"):
        ok = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and (typ == "number" or isinstance(value, int))
        )
        return ok and schema.get("minimum", value) <= value <= schema.get("maximum", value)
    return False


def boundary_value(field_name: str, schema: dict[str, Any]) -> Any:
    """An edge-of-range value: bounds for numbers, max length and non-ASCII text for strings."""
    typ = schema.get("type")
    if "enum" in schema:
        return schema["enum"][-1]
    if typ == "boolean":
        return False
    if typ == "integer":
        return int(schema.get("maximum", schema.get("minimum", 0)))
    if typ == "number":
        return float(schema.get("minimum", 0.0))
    fmt = schema.get("format")
    if fmt == "date-time":
        return "2025-12-31T23:59:59Z"
    if fmt == "date":
        return "2024-02-29"
    if fmt == "email":
        return "zoë.ørsted@example.org"
    if fmt == "uri":
        return "https://example.org/caf%C3%A9?q=%E2%9C%93"
    if fmt == "uuid":
        return "00000000-0000-4000-8000-000000000000"
    text = "Zoë Ørsted — café «naïve» 東京 " * 8
    limit = schema.get("maxLength")
    return text[: limit if isinstance(limit, int) else 120].strip() or "Z"
