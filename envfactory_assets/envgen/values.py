"""Seeded, realistic field values that honour JSON Schema types, formats, enums and bounds.

Values come from Faker (seeded per call site) chosen by the field's format and name, so an
``email`` field gets an e-mail address and a ``currency`` field an ISO currency code.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from faker import Faker

from envfactory_assets.envgen.entity_data import entity_value

BASE_DATE = dt.date(2025, 1, 1)
DEFAULT_NOW = "2025-06-30T12:00:00Z"
_PERSON_TABLES = ("user", "contact", "customer", "employee", "member", "person", "people", "candidate",
                  "patient", "account_holder", "author", "recipient", "attendee", "lead")


class ValueFactory:
    """Deterministic value generator: the same ``seed`` gives the same sequence of values."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.faker = Faker()
        self.faker.seed_instance(seed)
        #: provenance of the packaged entity datasets values were drawn from (see :mod:`.entity_data`)
        self.data_sources: set[str] = set()

    def value(self, field_name: str, schema: dict[str, Any], table: str = "") -> Any:
        """A value for ``field_name`` valid under ``schema`` (type, format, enum, min/max, maxLength)."""
        typ = schema.get("type")
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        if typ == "boolean":
            return self.rng.random() < 0.5
        if typ == "integer":
            lo = int(schema.get("minimum", min(1 if "count" not in field_name else 0, schema.get("maximum", 1))))
            hi = int(schema.get("maximum", lo + 500))
            return self.rng.randint(lo, hi)
        if typ == "number":
            lo = float(schema.get("minimum", min(1.0, schema.get("maximum", 1.0))))
            hi = float(schema.get("maximum", lo + 1000.0))
            return min(max(round(self.rng.uniform(lo, hi), 2), lo), hi)
        entity = entity_value(field_name, schema, self.rng)
        if entity is not None:
            self.data_sources.add(entity[1])
            return entity[0]
        text = self._string(field_name, schema.get("format"), table)
        limit = schema.get("maxLength")
        return text[:limit] if isinstance(limit, int) else text

    def _string(self, name: str, fmt: str | None, table: str) -> str:
        f, n = self.faker, name.lower()
        if fmt == "date-time":
            return self.datetime_str()
        if fmt == "date":
            return (BASE_DATE + dt.timedelta(days=self.rng.randint(0, 540))).isoformat()
        if fmt == "email" or "email" in n:
            return f.email()
        if fmt == "uri" or any(k in n for k in ("url", "website", "link", "href", "uri")):
            return f.url()
        if fmt == "uuid":
            return str(f.uuid4())
        if "phone" in n or "mobile" in n or n in ("to", "from"):
            return f.numerify("+1##########")
        if n in ("first_name", "given_name", "firstname"):
            return f.first_name()
        if n in ("last_name", "surname", "family_name", "lastname"):
            return f.last_name()
        if "currency" in n:
            return f.currency_code()
        if "country" in n:
            return f.country_code()
        if "city" in n:
            return f.city()
        if "address" in n or "street" in n:
            return f.street_address()
        if "zip" in n or "postal" in n or "postcode" in n:
            return f.postcode()
        if "language" in n or "locale" in n:
            return f.language_code()
        if "color" in n or "colour" in n:
            return f.color_name()
        if n.endswith("_id") or n == "id":
            return f"{n[:-3] or 'ref'}_{self.rng.randint(1, 99999):05d}"
        if "name" in n or n in ("username", "login", "handle"):
            if any(t in table for t in _PERSON_TABLES) or "user" in n:
                return f.name() if "user" not in n else f.user_name()
            return f.company() if self.rng.random() < 0.5 else f.catch_phrase()
        if n in ("title", "subject", "summary", "headline", "label"):
            return f.catch_phrase()
        if any(k in n for k in ("description", "note", "body", "text", "message", "content", "comment")):
            return f.sentence(nb_words=10)
        if "time" in n or "date" in n or n.endswith("_at"):
            return self.datetime_str()
        return f.word() + "-" + f.word()

    def datetime_str(self) -> str:
        moment = dt.datetime(2025, 1, 1, 8, 0) + dt.timedelta(minutes=self.rng.randint(0, 540 * 24 * 60))
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


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
