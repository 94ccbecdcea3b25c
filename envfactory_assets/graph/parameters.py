"""Tool parameters: extraction from JSON Schemas, embedding text, and the user-providable rule.

A *tool* here is one ToolSpec of an environment (``docs/design.md``) with its environment attached::

    {"env_id": "apideck_com__crm", "domain": "productivity", "name": "get_company",
     "description": "...", "kind": "get", "table": "companies", "read_only": True,
     "input_schema": {JSON Schema object}, "output_schema": {JSON Schema object}}

Parameters (the units the tool graph connects):

- **inputs**: every top-level property of ``input_schema`` (``required`` from the schema's ``required``).
- **outputs**: every top-level *scalar* property of ``output_schema`` (path ``"company_id"``); for an
  array-of-object property, each scalar property of the item object (path ``"items[].company_id"``, name
  ``"company_id"``); for an object property, each scalar property of it (path ``"company.company_id"``; an
  extension for get tools that wrap the row in an object). Arrays of scalars and deeper nesting are not
  outputs.

Embedding text follows the paper (arXiv 2605.18703, tool graph): ``"name (type): description"``.

User-providable (paper: an LLM flags each parameter, "when in doubt, not"; here a deterministic rule with
the same bias, see :func:`is_user_providable`): identifiers are not user-providable (a user does not know
``company_id`` values; some tool must produce them), free text, enums, numbers, dates and booleans are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Parameter",
    "SCALAR_TYPES",
    "tool_node_id",
    "schema_type",
    "extract_input_parameters",
    "extract_output_parameters",
    "extract_parameters",
    "is_identifier_name",
    "is_user_providable",
    "normalize_name",
    "name_tokens",
    "value_kind",
    "edge_value_kind",
    "VALUE_KINDS",
    "SHARED_KINDS",
    "IDENTIFIER",
    "RECORD_TIME",
    "FAMILY_KINDS",
    "value_family",
    "MIXED",
]

#: JSON Schema types treated as scalars.
SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})

Direction = Literal["in", "out"]

_TOOL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")


@dataclass(frozen=True)
class Parameter:
    """One input or output parameter of one tool.

    Attributes:
        node_id: ``"{env_id}.{tool_name}"`` of the owning tool.
        env_id: environment of the owning tool.
        direction: ``"in"`` (argument) or ``"out"`` (result field).
        name: property name (last path segment), e.g. ``"company_id"``.
        path: location in the schema: ``"company_id"``, ``"items[].company_id"``, ``"company.company_id"``.
        type: JSON Schema type with ``null`` removed (``"string"``, ``"integer"``, ``"number"``, ``"boolean"``,
            ``"array"``, ``"object"``, or ``"any"`` when the schema does not say).
        required: listed in the enclosing object's ``required``.
        description: the schema's ``description`` (or ``title``), stripped; may be empty.
        format: JSON Schema ``format`` (``"uuid"``, ``"date"``, ``"email"``...) or None.
        enum: allowed values as a tuple, or None.
        item_type: for arrays, the item type (``"string"``, ``"object"``...), else None.
        table: the owning tool's ``table`` (used to scope bare ``id`` name matches), or None.
    """

    node_id: str
    env_id: str
    direction: Direction
    name: str
    path: str
    type: str
    required: bool
    description: str = ""
    format: str | None = None
    enum: tuple[Any, ...] | None = None
    item_type: str | None = None
    table: str | None = None

    @property
    def text(self) -> str:
        """Embedding text ``"name (type): description"`` (paper); ``"name (type)"`` without description."""
        head = f"{self.name} ({self.type})"
        return f"{head}: {self.description}" if self.description else head


def tool_node_id(tool: Mapping[str, Any]) -> str:
    """Node id ``"{env_id}.{name}"`` of a tool dict; raises ``ValueError`` on a missing/invalid field."""
    env_id = tool.get("env_id")
    name = tool.get("name")
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"tool {name!r} has no env_id")
    if not isinstance(name, str) or not _TOOL_NAME_RE.match(name):
        raise ValueError(f"tool in {env_id!r} has an invalid name {name!r}")
    return f"{env_id}.{name}"


def schema_type(schema: Mapping[str, Any] | None) -> str:
    """The JSON Schema type of ``schema`` as one string, ``null`` removed.

    ``{"type": ["string", "null"]}`` -> ``"string"``; no ``type`` -> inferred from ``enum`` / ``properties`` /
    ``items`` / the first non-null ``anyOf``/``oneOf`` branch; otherwise ``"any"``.
    """
    if not isinstance(schema, Mapping):
        return "any"
    t = schema.get("type")
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        t = non_null[0] if non_null else "null"
    if isinstance(t, str):
        return t
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            for b in branches:
                bt = schema_type(b)
                if bt not in ("null", "any"):
                    return bt
    if "enum" in schema:
        values = schema["enum"]
        if values and all(isinstance(v, bool) for v in values):
            return "boolean"
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return "number"
        return "string"
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "any"


def _enum(schema: Mapping[str, Any]) -> tuple[Any, ...] | None:
    values = schema.get("enum")
    if values is None and "const" in schema:
        values = [schema["const"]]
    return tuple(values) if isinstance(values, list | tuple) else None


def _description(schema: Mapping[str, Any]) -> str:
    d = schema.get("description") or schema.get("title") or ""
    return " ".join(str(d).split())


def _properties(schema: Any) -> tuple[Mapping[str, Any], frozenset[str]]:
    if not isinstance(schema, Mapping):
        return {}, frozenset()
    props = schema.get("properties") or {}
    if not isinstance(props, Mapping):
        raise ValueError("JSON Schema 'properties' must be an object")
    req = schema.get("required") or []
    return props, frozenset(r for r in req if isinstance(r, str))


def _param(
    tool: Mapping[str, Any], direction: Direction, name: str, path: str, schema: Any, required: bool
) -> Parameter:
    schema = schema if isinstance(schema, Mapping) else {}
    t = schema_type(schema)
    items = schema.get("items") if t == "array" else None
    return Parameter(
        node_id=tool_node_id(tool),
        env_id=str(tool["env_id"]),
        direction=direction,
        name=name,
        path=path,
        type=t,
        required=required,
        description=_description(schema),
        format=schema.get("format") if isinstance(schema.get("format"), str) else None,
        enum=_enum(schema),
        item_type=schema_type(items) if isinstance(items, Mapping) else None,
        table=tool.get("table") if isinstance(tool.get("table"), str) else None,
    )


def extract_input_parameters(tool: Mapping[str, Any]) -> list[Parameter]:
    """Top-level properties of ``tool["input_schema"]`` in schema order, with their required flag."""
    props, req = _properties(tool.get("input_schema"))
    return [_param(tool, "in", name, name, s, name in req) for name, s in props.items()]


def extract_output_parameters(tool: Mapping[str, Any]) -> list[Parameter]:
    """Scalar result fields of ``tool["output_schema"]`` in schema order (see module docstring for paths).

    A top-level array-of-object property ``items`` contributes ``items[].<field>`` for each scalar field of
    the item object; a top-level object property ``company`` contributes ``company.<field>``. The
    ``required`` flag of a nested field is the item/object schema's own ``required``.
    """
    props, req = _properties(tool.get("output_schema"))
    out: list[Parameter] = []
    for name, s in props.items():
        t = schema_type(s)
        if t in SCALAR_TYPES:
            out.append(_param(tool, "out", name, name, s, name in req))
        elif t == "array" and isinstance(s, Mapping) and schema_type(s.get("items")) == "object":
            sub_props, sub_req = _properties(s.get("items"))
            for sub, ss in sub_props.items():
                if schema_type(ss) in SCALAR_TYPES:
                    out.append(_param(tool, "out", sub, f"{name}[].{sub}", ss, sub in sub_req))
        elif t == "object":
            sub_props, sub_req = _properties(s)
            for sub, ss in sub_props.items():
                if schema_type(ss) in SCALAR_TYPES:
                    out.append(_param(tool, "out", sub, f"{name}.{sub}", ss, sub in sub_req))
    return out


def extract_parameters(tool: Mapping[str, Any]) -> list[Parameter]:
    """Inputs then outputs of one tool."""
    return extract_input_parameters(tool) + extract_output_parameters(tool)


# Identifier-like names: `id`, `*_id`, `*_ids`, camelCase `*Id`/`*Ids`/`*ID`, uuid/guid/uid.
_ID_NAME_RE = re.compile(r"(^(id|ids|uuid|guid|uid)$)|(_(id|ids|uuid|guid|uid)$)|([a-z0-9](Id|Ids|ID|IDs)$)")
# Opaque server-issued handles that a user cannot know either (pagination cursors, etags, tokens).
_OPAQUE_NAMES = frozenset(
    {
        "cursor",
        "next_cursor",
        "page_token",
        "next_page_token",
        "pagetoken",
        "nextpagetoken",
        "continuation_token",
        "etag",
        "token",
        "ref",
        "handle",
    }
)
_OPAQUE_FORMATS = frozenset({"uuid", "guid", "objectid"})


def normalize_name(name: str) -> str:
    """Case- and separator-insensitive form used for exact name matches: ``companyId`` == ``company_id``."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def is_identifier_name(name: str) -> bool:
    """True for identifier names: ``id``, ``*_id``, ``*_ids``, ``*Id``, ``*Ids``, ``uuid``..."""
    return bool(_ID_NAME_RE.search(name))


_OPAQUE_NORMALIZED = frozenset(normalize_name(n) for n in _OPAQUE_NAMES)


def is_user_providable(param: Parameter) -> bool:
    """Can a user plausibly state this value in a request (no tool call needed to obtain it)?

    Rule (paper: "when in doubt, not"):

    1. identifiers (:func:`is_identifier_name`), opaque handles (cursor, page_token, etag, token...) and
       ``format: uuid`` -> **False**;
    2. ``enum``/``const`` values, ``boolean``, ``integer``, ``number`` -> **True**;
    3. ``string`` (free text, names, emails, dates, ``date-time``...) -> **True**;
    4. ``array`` of scalars (tags, labels) -> **True**;
    5. anything else (objects, arrays of objects, untyped) -> **False**.
    """
    name = param.name
    if is_identifier_name(name) or normalize_name(name) in _OPAQUE_NORMALIZED:
        return False
    if (param.format or "").lower() in _OPAQUE_FORMATS:
        return False
    if param.enum:
        return True
    if param.type in SCALAR_TYPES:
        return True
    if param.type == "array" and param.item_type in SCALAR_TYPES:
        return True
    return False


def iter_tool_parameters(tools: Iterable[Mapping[str, Any]]) -> Iterable[Parameter]:
    """All parameters of all tools, tool by tool (inputs first)."""
    for tool in tools:
        yield from extract_parameters(tool)


# ----------------------------------------------------------------------------- value kinds
#: What a parameter's value is. ``identifier``: minted by the API that issued it (primary and foreign keys,
#: ``*_id``/``*Id``/``*_sid``, ``format: uuid``, opaque handles); meaningful only in that API. The others are
#: real-world values that mean the same thing in any API, except ``free_text`` and ``other`` (labels,
#: statuses, types, flags, counts, secrets), whose meaning depends on the API that defines them.
IDENTIFIER = "identifier"
EMAIL = "email"
PERSON_NAME = "person_name"
ORGANIZATION = "organization"
DATETIME = "datetime"
PLACE = "place"
MONEY = "money"
CODE = "code"
URL = "url"
PHONE = "phone"
FREE_TEXT = "free_text"
OTHER = "other"
#: When a record was created, changed, deleted or archived: a date, but one the API keeps about its own
#: record; a person carries an event's date (a due date, a start time, a birthday) into another service,
#: never another record's bookkeeping time.
RECORD_TIME = "record_time"
#: An edge whose two parameters are of different kinds (e.g. a ``datetime`` output into an ``other`` input).
MIXED = "mixed"

VALUE_KINDS = (
    IDENTIFIER,
    EMAIL,
    PERSON_NAME,
    ORGANIZATION,
    DATETIME,
    RECORD_TIME,
    PLACE,
    MONEY,
    CODE,
    URL,
    PHONE,
    FREE_TEXT,
    OTHER,
)
#: Kinds that mean the same thing in every API: the only values that may flow from one environment into
#: another (a person copies an e-mail address, a name, a date, a place, an amount, an ISO code or a link
#: from one service into another; an identifier issued by one service means nothing to the other).
SHARED_KINDS = frozenset({EMAIL, PERSON_NAME, ORGANIZATION, DATETIME, PLACE, MONEY, CODE, URL, PHONE})

_ID_SUFFIX_RE = re.compile(r"(^sid$)|(_sid$)|([a-z0-9]Sid$)")
_DATETIME_FORMATS = frozenset({"date", "date-time", "datetime", "time", "timestamp", "unix-time"})
_URL_FORMATS = frozenset({"uri", "url", "uri-reference", "iri", "iri-reference", "uri-template"})
_SECRET_TOKENS = frozenset({"password", "secret", "token", "fingerprint", "signature", "hash", "salt", "otp"})
_PHONE_TOKENS = frozenset({"phone", "telephone", "mobile", "fax", "msisdn", "cellphone"})
_URL_TOKENS = frozenset({"url", "uri", "href", "link", "website", "homepage", "permalink", "self"})
_DATETIME_TOKENS = frozenset(
    {
        "date",
        "time",
        "timestamp",
        "datetime",
        "deadline",
        "dob",
        "birthday",
        "birthdate",
        "created",
        "updated",
        "modified",
        "expires",
        "expiry",
        "expiration",
        "due",
        "since",
        "until",
        "scheduled",
    }
)
_RECORD_TIME_TOKENS = frozenset(
    {
        # Google's createTime / updateTime name the verb, not its participle
        "create",
        "update",
        "created",
        "updated",
        "modified",
        "deleted",
        "archived",
        "creation",
        "modification",
        "deletion",
        "edited",
        "changed",
        "synced",
        "indexed",
        "last",
    }
)
_DATETIME_LAST = frozenset({"at", "on", "before", "after"})
_MONEY_TOKENS = frozenset(
    {
        "amount",
        "price",
        "cost",
        "fee",
        "fees",
        "balance",
        "salary",
        "budget",
        "revenue",
        "subtotal",
        "tax",
        "discount",
        "cents",
        "payment",
        "charge",
        "refund",
        "wage",
        "tip",
        "premium",
        "income",
        "spend",
        "spent",
        "payout",
    }
)
_CODE_TOKENS = frozenset(
    {"currency", "country", "language", "lang", "locale", "timezone", "tz", "iata", "icao", "airport", "iso"}
)
_PLACE_TOKENS = frozenset(
    {
        "address",
        "street",
        "city",
        "town",
        "postcode",
        "zip",
        "zipcode",
        "postal",
        "latitude",
        "longitude",
        "lat",
        "lng",
        "lon",
        "location",
        "venue",
        "place",
        "province",
        "county",
        "destination",
        "origin",
        "line1",
        "line2",
        "line3",
    }
)
_PERSON_NAME_TOKENS = frozenset(
    {"firstname", "lastname", "fullname", "surname", "givenname", "familyname", "middlename"}
)
_PERSON_NAME_PARTS = frozenset(
    {
        "first",
        "last",
        "full",
        "given",
        "family",
        "middle",
        "holder",
        "passenger",
        "guest",
        "attendee",
        "traveller",
        "traveler",
        "patient",
        "customer",
        "contact",
    }
)
#: a label its owner chose for a thing ("User-provided name for a job", "seller-defined name"): not a person
_SELF_NAMED = re.compile(
    r"(user|seller|customer|client|caller)[- ](provided|supplied|defined|friendly|assigned|"
    r"specified|readable|chosen)|human[- ]readable|friendly name|resource name",
    re.I,
)
_API_LOCATOR = re.compile(r"\bapi\b|this resource|the resource\b|resource url|canonical url", re.I)
_URL_DESCRIPTION = re.compile(r"^\W*(a |an |the )?(absolute |public |full )?(url|uri)\b", re.I)
_NOT_PLACE_WORDS = re.compile(r"\b(url|uri|path|file|directory|bucket|folder|memory|disk|storage)\b", re.I)
_PERSON_WORDS = re.compile(
    r"\b(person|people|contact|customer|user|author|employee|patient|doctor|member|"
    r"recipient|sender|owner|assignee|reporter|attendee|guest|passenger|traveller|"
    r"traveler|driver|student|teacher|first name|last name|full name|given name|"
    r"family name|surname)\b",
    re.I,
)
_ORG_TOKENS = frozenset(
    {
        "company",
        "organization",
        "organisation",
        "employer",
        "business",
        "merchant",
        "vendor",
        "supplier",
        "brand",
        "publisher",
        "manufacturer",
        "airline",
        "carrier",
    }
)
_ORG_WORDS = re.compile(
    r"\b(company|organi[sz]ation|employer|business|merchant|vendor|supplier|brand|"
    r"publisher|manufacturer|airline|legal entity)\b",
    re.I,
)
_GEO_WORDS = re.compile(r"\b(country|state or province|province|geograph|city|postal|address)\b", re.I)
_COUNT_WORDS = re.compile(r"\b(number of|count of|how many|maximum|minimum|limit|index|offset|page)\b", re.I)
_MONEY_WORDS = re.compile(r"\b(amount|price|cost|currency|cents|monetary|money|paid|payment|balance)\b", re.I)
_FREE_TEXT_TOKENS = frozenset(
    {
        "title",
        "subject",
        "description",
        "body",
        "message",
        "text",
        "content",
        "comment",
        "comments",
        "note",
        "notes",
        "summary",
        "bio",
        "caption",
        "label",
        "name",
        "query",
        "q",
        "search",
        "reason",
        "instructions",
        "headline",
        "markdown",
        "html",
        "details",
        "remarks",
    }
)


def names_a_time(name: str) -> bool:
    """Whether a field's name says it holds a date or time (``created_time``, ``session_expiry``, ``due_on``,
    ``updatedAt``): the date/time words :func:`value_kind` reads names by, whatever the value's type. A number
    in such a field is a timestamp, not an amount."""
    tokens = name_tokens(name)
    return bool(set(tokens) & _DATETIME_TOKENS) or (len(tokens) > 1 and tokens[-1] in _DATETIME_LAST)


def name_tokens(name: str) -> tuple[str, ...]:
    """Lower-case words of a parameter name: ``startTime`` / ``start_time`` -> ``("start", "time")``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return tuple(t for t in re.split(r"[^a-z0-9]+", spaced.lower()) if t)


def _url_or_locator(tokens: tuple[str, ...], description: str) -> str:
    """``url``, except a resource's own address in the API (``self``, ``href``, "API URL of this resource"),
    which the API issues like an identifier."""
    if set(tokens) & {"self", "href"} or _API_LOCATOR.search(description):
        return IDENTIFIER
    return URL


def value_kind(param: Parameter) -> str:
    """What kind of value ``param`` holds (one of :data:`VALUE_KINDS`), from its name, type, ``format``,
    ``enum`` and description, in this order of trust:

    1. identifiers: :func:`is_identifier_name`, ``*_sid``, opaque handles (cursor, page_token, etag...) and
       ``format: uuid`` -> ``identifier`` (the API mints them);
    2. ``format`` (JSON Schema / OpenAPI): ``email``, ``date``/``date-time``/``time``, ``uri``/``url``,
       ``phone`` (a date-time named for a record's own bookkeeping, ``created_at``, ``date_updated``... ->
       ``record_time``);
    3. booleans, objects and arrays of objects -> ``other``;
    4. name words: secrets (password, token...) -> ``other``; e-mail, phone, URL, ISO-style codes (currency,
       country, language, locale, time zone, airport), date/time words (``*_at``, ``*_date``, ``created``...),
       money words on numbers (``amount``, ``price``, ``balance``... unless the description counts things),
       places (address, city, postal code, latitude...), people's names (first/last/full name, or ``name``
       whose description is about a person), organisations (company, merchant... or ``name`` described as one);
    5. titles, subjects, descriptions, bodies, messages, notes, generic ``name``/``label``, search queries ->
       ``free_text``; everything else (statuses, types, enums, counts) -> ``other``.

    Arrays of scalars are classified by their name (``emails`` -> ``email``). The rule is deterministic; the
    tool graph's model-backed refiner may still judge cross-environment edges between doubtful kinds.
    """
    name = param.name
    norm = normalize_name(name)
    fmt = (param.format or "").lower()
    if is_identifier_name(name) or _ID_SUFFIX_RE.search(name) or norm in _OPAQUE_NORMALIZED or fmt in _OPAQUE_FORMATS:
        return IDENTIFIER
    if fmt in ("email", "idn-email"):
        return EMAIL
    tokens = name_tokens(name)
    if fmt in _DATETIME_FORMATS:
        return RECORD_TIME if set(tokens) & _RECORD_TIME_TOKENS else DATETIME
    if fmt in _URL_FORMATS:
        return _url_or_locator(tokens, param.description or "")
    if fmt in ("phone", "phone-number", "tel"):
        return PHONE
    if (
        param.type == "boolean"
        or param.type == "object"
        or (param.type == "array" and param.item_type not in SCALAR_TYPES)
    ):
        return OTHER
    words = set(tokens)
    # plural array names (emails, phones, urls): singular words
    words |= {t[:-1] for t in tokens if t.endswith("s") and len(t) > 3}
    desc = param.description or ""
    if words & _SECRET_TOKENS:
        return OTHER
    if "email" in words or ("mail" in words and ("e" in words or "address" in words)):
        return EMAIL
    if words & _PHONE_TOKENS:
        return PHONE
    if words & _URL_TOKENS or (param.type == "string" and _URL_DESCRIPTION.search(desc)):
        return _url_or_locator(tokens, desc)
    numeric = param.type in ("integer", "number")
    if (words & _CODE_TOKENS or ({"time", "zone"} <= words)) and not numeric:
        return CODE
    if words & _DATETIME_TOKENS or (tokens and tokens[-1] in _DATETIME_LAST and len(tokens) > 1):
        if param.type in ("string", "integer", "number", "any", "array"):
            return RECORD_TIME if words & _RECORD_TIME_TOKENS else DATETIME
    last = tokens[-1] if tokens else ""
    if last in _MONEY_TOKENS or (last in ("total", "value") and _MONEY_WORDS.search(desc)):
        if (numeric or param.type == "string") and not _COUNT_WORDS.search(desc):
            return MONEY
    if (words & _PLACE_TOKENS and not words & {"ip", "mac", "email", "wallet", "memory"}) or (
        words & {"state", "region"} and _GEO_WORDS.search(desc)
    ):
        if (
            (not numeric or words & {"latitude", "longitude", "lat", "lng", "lon"})
            and not _NOT_PLACE_WORDS.search(desc)
            and last not in ("type", "kind", "id", "count")
        ):
            return PLACE
    self_named = bool(_SELF_NAMED.search(desc))
    if words & _PERSON_NAME_TOKENS or ("name" in words and words & _PERSON_NAME_PARTS):
        return PERSON_NAME
    if not numeric and (last in _ORG_TOKENS or (last == "name" and words & _ORG_TOKENS)):
        return ORGANIZATION
    if last == "name" and not numeric and not self_named:
        if _PERSON_WORDS.search(desc) and not _ORG_WORDS.search(desc):
            return PERSON_NAME
        if _ORG_WORDS.search(desc):
            return ORGANIZATION
    if param.type in ("string", "array", "any") and not param.enum and words & _FREE_TEXT_TOKENS:
        return FREE_TEXT
    return OTHER


def edge_value_kind(src_kind: str, dst_kind: str) -> str:
    """The kind of value an edge passes from an output of kind ``src_kind`` to an input of kind ``dst_kind``:
    ``identifier`` when either side is one (the value is an issued handle even if the other side's name hides
    it), the common kind when both agree, else :data:`MIXED`."""
    if IDENTIFIER in (src_kind, dst_kind):
        return IDENTIFIER
    return src_kind if src_kind == dst_kind else MIXED


_FAMILY_WORDS: dict[str, tuple[tuple[str, frozenset[str]], ...]] = {
    PERSON_NAME: (
        ("first", frozenset({"first", "given", "firstname", "givenname"})),
        ("last", frozenset({"last", "family", "surname", "lastname", "familyname"})),
    ),
    CODE: (
        ("currency", frozenset({"currency"})),
        ("country", frozenset({"country"})),
        ("language", frozenset({"language", "lang", "locale"})),
        ("timezone", frozenset({"timezone", "tz", "zone"})),
        ("airport", frozenset({"airport", "iata", "icao"})),
    ),
    # dates by their role: when something starts, when it ends or is due, a birth date; a date of no
    # stated role (``date``, ``timestamp``) has no family
    DATETIME: (
        ("birth", frozenset({"birth", "dob", "birthday", "birthdate"})),
        ("start", frozenset({"start", "starts", "begin", "from", "since", "after", "departure", "checkin"})),
        (
            "end",
            frozenset(
                {
                    "end",
                    "ends",
                    "until",
                    "before",
                    "due",
                    "deadline",
                    "expires",
                    "expiry",
                    "expiration",
                    "arrival",
                    "checkout",
                }
            ),
        ),
    ),
    PLACE: (
        ("city", frozenset({"city", "town"})),
        ("postal", frozenset({"postal", "zip", "zipcode", "postcode"})),
        ("latitude", frozenset({"lat", "latitude"})),
        ("longitude", frozenset({"lng", "lon", "longitude"})),
        ("region", frozenset({"state", "province", "region", "county"})),
        ("street", frozenset({"street", "line1", "line2", "line3", "address"})),
    ),
}
#: Shared kinds whose values are interchangeable across APIs whatever the parameters are called: an e-mail
#: address is an e-mail address, and an event's date can be the day another thing is planned for (a due
#: date becomes a meeting's start, a listing filter's "after"). Links are not (a webhook URL is no image).
FAMILY_KINDS = frozenset({EMAIL, PHONE, PERSON_NAME, ORGANIZATION, PLACE, MONEY, CODE, DATETIME})


def value_family(param: Parameter, kind: str | None = None) -> str | None:
    """The family of a shared value that another API's parameter of the same family can take, or None:
    ``email``, ``phone``, ``organization``, ``money``; event dates by role (``datetime:start``,
    ``datetime:end``, ``datetime:birth``; record times and dates of no stated role None); person names by part
    (``person_name:first``,
    ``person_name:last``, ``person_name:full``); codes by standard (``code:currency``, ``code:country``,
    ``code:language``, ``code:timezone``, ``code:airport``; other codes None); places by part
    (``place:city``, ``place:postal``, ``place:street``...; other places None). Kinds outside
    :data:`FAMILY_KINDS` have no family."""
    kind = kind or value_kind(param)
    if kind not in FAMILY_KINDS:
        return None
    if kind not in _FAMILY_WORDS:
        return kind
    words = set(name_tokens(param.name))
    for family, hits in _FAMILY_WORDS[kind]:
        if words & hits:
            return f"{kind}:{family}"
    return f"{kind}:full" if kind == PERSON_NAME else None
