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
_PHONE = re.compile(
    r"(^|_)(phone|mobile|telephone|fax|cell|phone_number|msisdn)($|_)|^(from|to)(_number)?$|^(from|to)_phone"
)
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
    r"summary|details|remarks|instructions|information|info)$"
)
_AMOUNT = re.compile(
    r"(^|_)(amount|price|cost|total|subtotal|balance|fee|salary|budget|revenue|"
    r"unit_price|tax|discount)($|_)"
)
_COUNT = re.compile(r"(^|_)(count|quantity|qty|number_of|num|total_count|size|age|year|stock)($|_)")
# Numbers that are never negative: paging, limits, rates, distances and sizes, numbered things.
_MEASURE = re.compile(
    r"(^|_)(limit|offset|page|per_page|page_size|max_results|top|skip|rate|ratio|distance|weight|height|width|"
    r"length|depth|radius|number|max|min|minimum|maximum|capacity|seats)($|_)"
)
_UTC_OFFSET = re.compile(r"^(UTC|GMT)?[+-](0\d|1[0-4])(:?[0-5]\d)?$")
_PHONE_SHAPE = re.compile(r"^\+?[\d\s().-]+(\s*(x|ext\.?)\s*\d{1,6})?$")
_NAME_SHAPE = re.compile(r"^[^\W\d_][^\W\d_'.\- ]*(?:[ '.\-]+[^\W\d_][^\W\d_'.\-]*){0,4}\.?$")
_WORD_PAIR = re.compile(r"^[a-z]+-[a-z]+$")
_NOT_A_NUMBER = re.compile(r"\b(place|location|city|destination|travel|entity)\b")
_IP = re.compile(r"(^|_)(ip|ip_address|ipv4|ipv6|ip_addr|remote_ip|client_ip)$")
_HOST = re.compile(r"(^|_)(fqdn|hostname|host_name|domain|domain_name|host)$")
_ARN = re.compile(r"(^|_)arn$")
_SECRET = re.compile(
    r"(^|_)(token|access_token|secret|api_key|password|hash|checksum|signature|fingerprint|key|idempotency_key|"
    r"nonce)$"
)
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

    @property
    def defect(self) -> str:
        """What is wrong with a failing value: ``"placeholder"``, ``"random word"`` or ``"wrong kind"``;
        ``""`` when it did not fail."""
        if self.verdict != "fail":
            return ""
        if self.rule == "placeholder":
            return "placeholder"
        return "random word" if self.reason.startswith(RANDOM_WORD) else "wrong kind"


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
    name = re.sub(r"(?<=[a-z])(?=\d+$)", "_", name)  # ``extra_phone3`` is a phone
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


RANDOM_WORD = "random word"

# Values that stand in for a real one (written here from what API examples and generators leave behind).
PLACEHOLDERS = frozenset(
    """
string str text example sample value foo bar baz qux test testing dummy placeholder null none nil undefined
tbd todo xxx xyz abc n/a na lorem ipsum changeme your_value my_value some_value value1 value2
""".split()
)
# The first words of "lorem ipsum" filler text.
_LOREM = frozenset(
    """
lorem ipsum dolor sit amet consectetur adipiscing adipisci elit sed eiusmod tempor incididunt labore dolore
magna aliqua ut perspiciatis unde omnis iste natus error voluptatem accusantium doloremque laudantium totam
rem aperiam eaque ipsa quae ab illo inventore veritatis et quasi architecto beatae vitae dicta sunt explicabo
nemo enim ipsam quia voluptas aspernatur aut odit fugit consequuntur magni dolores eos qui ratione sequi
nesciunt neque porro quisquam est dolorem numquam eius modi tempora incidunt magnam aliquam quaerat minima
veniam quis nostrum exercitationem ullam corporis suscipit laboriosam nisi aliquid ex ea commodi consequatur
autem vel eum iure reprehenderit in voluptate velit esse quam nihil molestiae illum fugiat quo nulla pariatur
at vero accusamus iusto odio dignissimos ducimus blanditiis praesentium deleniti atque corrupti quos quas
molestias excepturi sint occaecati cupiditate non provident similique mollitia animi id laborum dolorum fuga
harum quidem rerum facilis expedita distinctio nam libero tempore cum soluta nobis eligendi optio cumque
impedit minus quod maxime placeat facere possimus assumenda repellendus temporibus quibusdam officiis
debitis necessitatibus saepe eveniet voluptates repudiandae recusandae itaque earum hic tenetur sapiente
delectus reiciendis voluptatibus maiores alias perferendis doloribus asperiores repellat
""".split()
)
# Units of measure as APIs write them: SI and common symbols, their names, unit systems, counting units.
UNIT_WORDS = frozenset(
    """
mm cm dm m km in inch inches ft foot feet yd yard yards mi mile miles nm um µm
mg g kg t lb lbs oz pound pounds ounce ounces gram grams kilogram kilograms tonne tonnes ton tons
ml cl dl l lt liter liters litre litres gal gallon gallons qt pt cup cups floz fl_oz m3 cm3 cc
s sec secs second seconds ms millisecond milliseconds min mins minute minutes h hr hrs hour hours
d day days wk week weeks mo month months yr year years
c f k °c °f celsius fahrenheit kelvin degc degf
metric imperial si us uk standard scientific
pcs pc piece pieces each ea unit units item items box boxes pack packs pair pairs dozen set sets roll case
kwh mwh wh kw mw w v mv a ma hz khz mhz ghz
b kb mb gb tb pb kib mib gib tib byte bytes bit bits bps kbps mbps gbps
% percent px pt em rem dpi ppi pa kpa hpa mbar bar psi atm mmhg
mph kph kmh km/h m/s kn knot knots sqft sq_ft sqm m2 m² ft2 ac acre acres ha hectare hectares
cal kcal kj j
usd eur gbp
""".split()
)
# Names of data and coordinate formats (file types, encodings, notations), for ``*_format`` fields.
FORMAT_WORDS = frozenset(
    """
json jsonl ndjson xml csv tsv yaml yml html htm pdf png jpg jpeg gif svg webp bmp tiff ico txt text plain
markdown md rtf doc docx xls xlsx ppt pptx odt ods zip gzip gz tar tgz bz2 7z parquet avro orc protobuf
geojson topojson kml kmz gpx wkt wkb shp mvt rss atom ics ical vcard vcf mp3 mp4 wav ogg webm mov avi flac
iso iso8601 rfc3339 rfc2822 unix epoch timestamp decimal dd dms ddm utm mgrs hex rgb rgba hsl cmyk
base64 base32 utf8 utf-8 ascii binary raw full compact summary minimal detailed brief verbose short long
simple extended basic pretty table list grid tree e164 international national e.164 latlng latlon lnglat
12h 24h 12-hour 24-hour degrees radians
""".split()
)
# Colour names of CSS Color Module Level 4's basic and common extended keywords.
COLOUR_WORDS = frozenset(
    """
black silver gray grey white maroon red purple fuchsia green lime olive yellow navy blue teal aqua orange
pink brown cyan magenta gold beige coral crimson indigo ivory khaki lavender salmon tan turquoise violet
plum orchid chocolate tomato wheat linen azure mint skyblue lightblue darkblue darkgreen lightgreen
darkred lightgray lightgrey darkgray darkgrey navyblue royalblue steelblue slategray transparent
""".split()
)

_ISBN_FIELD = re.compile(r"(^|_)isbn(_?1[03])?($|_)")
_ETAG_FIELD = re.compile(r"(^|_)(etag|e_tag|if_match|if_none_match|entity_tag)$")
_ALPHA3 = re.compile(r"(alpha_?3|iso_?3($|_)|iso3166_?1_?alpha_?3|_a3$|cca3|three_letter)")
_ALPHA2 = re.compile(r"(alpha_?2|iso_?2($|_)|iso3166_?1_?alpha_?2|_a2$|cca2|two_letter)")
_COUNTRY_CODE = re.compile(r"(^|_)country(_iso)?(_code|_iso|_iso_code)($|_)|(^|_)(iso_country|country_iso)")
_COORDS_FIELD = re.compile(
    r"(^|_)(coordinates|coords|coordinate|latlng|lat_lng|latlon|lat_lon|lnglat|geo_point|geopoint)$"
)
_LAT_FIELD = re.compile(r"(^|_)(lat|latitude)$")
_LON_FIELD = re.compile(r"(^|_)(lon|lng|long|longitude)$")
_LOCATION_FIELD = re.compile(
    r"(^|_)(location|place|venue|destination|origin|where|near|neighbou?rhood|place_name|location_name|"
    r"birthplace|hometown|site)$"
)
_UNIT_FIELD = re.compile(r"(^|_)(unit|units|uom|unit_of_measure|unit_of_measurement|measurement_unit)$")
_FORMAT_FIELD = re.compile(r"(^|_)format$")
_COLOUR_FIELD = re.compile(r"(^|_)(colou?r|colou?r_code|hex_colou?r|background|foreground|bg_colou?r|fg_colou?r)$")
_MIME_FIELD = re.compile(r"(^|_)(mime|mime_type|mimetype|content_type|media_type|accept)$")
_UUID_FIELD = re.compile(r"(^|_)(uuid|guid)$")
_ID_FIELD = re.compile(r"(^|_)(id|ids|uid|identifier)$")
# A description that says the number identifies or indexes a record ("Doctor ID", "ID of this appointment's
# patient", "Index of the exam room"), not a count or an amount.
_NUMERIC_ID_DESC = re.compile(
    r"^\W*(the\s+)?(\w+\s+){0,3}(id|identifier)\b(?!\s+(of\s+)?(count|number))|^\W*index of\b"
)
_IMAGE_FIELD = re.compile(r"(^|_)(icon|picture|image|logo|avatar|photo|thumbnail|banner)(_url|_uri|_link)?$")
_ACTOR_FIELD = re.compile(
    r"(^|_)(created_by|updated_by|modified_by|deleted_by|owner|assignee|author|reviewer|approver|requester|"
    r"reporter)$"
)
_ORGANIZATION_FIELD = re.compile(
    r"(^|_)(manufacturer|company|company_name|organization|organisation|organization_name|employer|"
    r"publisher|supplier|carrier_name|merchant_name)$"
)
#: Characters numbers are written with between digit groups or before decimals (CLDR number symbols).
_SEPARATORS = frozenset({".", ",", " ", "\u00a0", "\u202f", "'", "\u2019", "\u066b", "\u066c"})
# One field of a cron expression: numbers, names (JAN, MON), ranges, lists, steps and the Quartz extras.
_CRON_FIELD = re.compile(
    r"^(\*|\?|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/\d+)?(,(\*|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/\d+)?)*[LW#\d]*$"
)
#: Allowed numbers per cron field: second, minute, hour, day of month, month, day of week (0 and 7: Sunday).
_CRON_RANGES = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_CRON_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@reboot"})
_COORD_PAIR = re.compile(r"^\s*(-?\d{1,3}(?:\.\d+)?)\s*[, ;]\s*(-?\d{1,3}(?:\.\d+)?)\s*$")
_HEX_COLOUR = re.compile(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$")
_FUNC_COLOUR = re.compile(r"^(rgb|rgba|hsl|hsla)\(\s*[\d.%\s,/]+\)$")
_MIME_SHAPE = re.compile(r"^[a-z]+/[a-z0-9][\w.+-]*(\s*;\s*[\w-]+=[\w.\-\"]+)*$|^\*/\*$")
_DATE_PATTERN = re.compile(r"^[YMDdHhmsSaAZzT%:/.\-, ]+$")
_STREET_SHAPE = re.compile(r"\d")


def _cron_ok(text: str) -> bool:
    """A cron expression: a macro (``@daily``), or 5 to 7 space-separated fields (Vixie cron, with seconds or
    years as Quartz and cloud schedulers write them), each of numbers, names, ``*``, ranges, lists and steps,
    at least one not a bare word (``every day at noon`` is no expression)."""
    fields = text.split()
    if len(fields) == 1 and fields[0].lower() in _CRON_MACROS:
        return True
    if not (5 <= len(fields) <= 7 and all(_CRON_FIELD.match(f) for f in fields)):
        return False
    if not any(any(c.isdigit() or c in "*?/" for c in f) for f in fields):
        return False
    # numbers within each field's range (seconds first when there are 6 or 7 fields; a year is not checked)
    ranges = _CRON_RANGES[1:] if len(fields) == 5 else _CRON_RANGES
    for field, (low, high) in zip(fields, ranges, strict=False):
        for number in re.findall(r"(?<![/#\d])\d+", field):
            if not low <= int(number) <= high:
                return False
    return True


def is_placeholder(text: str) -> bool:
    """True for a stand-in value: a placeholder word (``string``, ``foo``, ``TBD``) or lorem ipsum filler."""
    flat = text.strip().lower()
    if flat in PLACEHOLDERS or re.fullmatch(r"<[^<>]+>|\{\{[^{}]+\}\}|\$\{[^{}]+\}", flat):
        return True
    if re.search(
        r"(^|[\W_])(your|my)[\W_]?(domain|company|value|token|key|host|server|app|project|org)(?=$|[\W_])", flat
    ):
        return True  # ``your.domain.com``, ``<your_token>``
    words = re.findall(r"[a-z]+", flat)
    return len(words) >= 2 and sum(w in _LOREM for w in words) / len(words) >= 0.6


def is_random_word(text: str) -> bool:
    """True for a bare lowercase word (``just``, ``force``, ``character``): what a value made of a word list
    looks like; judged only where the field's kind has failed it, since some fields do hold one word."""
    return re.fullmatch(r"[a-z]{2,24}", text.strip()) is not None


def isbn_valid(text: str) -> bool:
    """True for an ISBN-10 or ISBN-13 whose check digit is right (hyphens and spaces ignored).

    ISBN-13: digits weighted 1,3,1,3... sum to a multiple of 10; ISBN-10: digits weighted 10..1 (``X`` = 10
    as the last) sum to a multiple of 11 (ISO 2108).
    """
    flat = re.sub(r"[\s-]", "", text.upper())
    if flat.startswith("ISBN"):
        flat = flat[4:].lstrip(":")
    if re.fullmatch(r"\d{13}", flat):
        return sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(flat)) % 10 == 0
    if re.fullmatch(r"\d{9}[\dX]", flat):
        return sum((10 - i) * (10 if c == "X" else int(c)) for i, c in enumerate(flat)) % 11 == 0
    return False


@functools.lru_cache(maxsize=4096)
def _country_code(value: str, form: str) -> bool:
    """``value`` is an ISO 3166-1 code of ``form`` (``"alpha_2"``, ``"alpha_3"`` or ``"code"``: either), in
    capitals or small letters, never a country's name."""
    import pycountry

    if not re.fullmatch(r"[A-Za-z]{2,3}", value):
        return False
    forms = ("alpha_2", "alpha_3") if form == "code" else (form,)
    return any(
        len(value) == (2 if f == "alpha_2" else 3) and pycountry.countries.get(**{f: value.upper()}) is not None
        for f in forms
    )


@functools.lru_cache(maxsize=1)
def _place_names() -> frozenset[str]:
    """Cities (``airportsdata``), countries and ISO 3166-2 regions (``pycountry``), in small letters."""
    import pycountry

    names = {c.lower() for c in _cities()} | {s.lower() for s in _subdivisions()}
    for c in pycountry.countries:
        names |= {c.name.lower(), getattr(c, "common_name", c.name).lower()}
    return frozenset(names)


# Small words inside place names (``Valle del Fuerte``, ``Isle of Man``, ``Rio de Janeiro``).
_PARTICLES = frozenset(
    "of the de del della di da do dos das la le les los van von der den du y e and & at on upon am im".split()
)


def _is_place(text: str) -> bool:
    """A place a person names: a known city, region or country (also ``City, Country``), a street address
    (a number and words), coordinates, or a capitalised name (``Conference Room B``, ``Main Office``)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if parts and all(p.lower() in _place_names() or _country_code(p, "code") for p in parts[:3]):
        return True
    if _COORD_PAIR.match(text):
        return True
    words = text.split()
    if _STREET_SHAPE.search(text) and len(words) >= 2 and any(w.isalpha() for w in words):
        return True
    words = [w.lstrip("(\"'") for w in words]
    return 1 <= len(words) <= 8 and all(w[:1].isupper() or w[:1].isdigit() or w in _PARTICLES for w in words)


def _base64_ok(text: str) -> bool:
    import base64
    import binascii

    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(text) % 4 == 0 and len(text) >= 4


def _coordinates_ok(text: str) -> bool:
    m = _COORD_PAIR.match(text)
    return bool(m) and abs(float(m.group(1))) <= 90 and abs(float(m.group(2))) <= 180


def _number_text(text: str, lo: float, hi: float) -> bool:
    try:
        number = float(text)
    except ValueError:
        return False
    return math.isfinite(number) and lo <= number <= hi


PRIORITY_WORDS = frozenset(
    "lowest low normal medium moderate high higher highest urgent critical blocker major minor trivial "
    "immediate routine asap emergency none".split()
)
CHANNEL_WORDS = frozenset(
    "email e-mail sms mms push web chat phone voice call whatsapp slack teams in_app in-app inapp mobile app "
    "api social facebook twitter instagram linkedin telegram messenger fax mail post letter webhook rss "
    "store online offline retail pos marketplace print tv radio".split()
)
SIZE_WORDS = frozenset("xxs xs s m l xl xxl xxxl small medium large x-large xx-large tiny huge micro nano".split())
PROTOCOL_WORDS = frozenset(
    "http https ftp ftps sftp ssh tcp udp icmp tls ssl mqtt mqtts amqp smtp smtps imap pop3 ws wss grpc "
    "rtmp rtmps rtsp srt hls dash sip xmpp ldap ldaps snmp nfs smb dns ocpp websocket rest soap graphql".split()
)
_LISTED = re.compile(r"(?:one of|possible values|allowed values|valid values|values are)\s*:\s*(.+)", re.S)
_EITHER = re.compile(r"\beither\s+`?([A-Za-z0-9_]+)`?\s+or\s+`?([A-Za-z0-9_]+)`?\s*[.,;]?\s*$")


def _listed_values(desc: str) -> frozenset[str] | None:
    """Values a description lists as the only ones a field takes (``One of: a b c``, ``- a - b``,
    ``must be set to either A or B``), in small letters; None when it lists none."""
    bullets = re.findall(r"(?:^|\s)- `?([a-z][a-z0-9_]*)`?(?=\s+-\s|\s*$)", desc.strip())
    if len(bullets) >= 2:
        return frozenset(bullets)
    either = _EITHER.search(desc.strip())
    if either:
        return frozenset(w.lower() for w in either.groups())
    m = _LISTED.search(desc)
    if not m:
        return None
    words = re.findall(r"[a-z0-9_][\w.-]*", m.group(1).split(".")[0].replace(" or ", " "))
    words = [w.strip(".") for w in words if w not in ("and", "the", "a", "an", "to", "be", "set", "must")]
    return frozenset(words) if len(words) >= 2 else None


def _iban_ok(text: str) -> bool:
    """ISO 13616 IBAN: country letters, check digits, and the whole moved and read as a number is 1 mod 97."""
    flat = text.replace(" ", "").upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{10,30}", flat):
        return False
    moved = flat[4:] + flat[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _kind_verdict(name: str, text: str, desc: str) -> Judgement | None:
    """Kinds of thing a field's name or description implies, each narrower than free text; None when none
    applies."""

    def judged(ok: bool, rule: str, what: str) -> Judgement:
        return Judgement("pass" if ok else "fail", rule, "" if ok else f"{text!r} is no {what}")

    if _ISBN_FIELD.search(name) or "isbn" in desc:
        return judged(isbn_valid(text), "isbn", "ISBN with a valid check digit")
    if _ETAG_FIELD.search(name) or "etag" in desc or "entity tag" in desc:
        ok = re.fullmatch(r'(W/)?"?[\x21\x23-\x7e]{4,}"?', text) is not None and any(c.isdigit() for c in text)
        return judged(ok, "etag", "entity tag")
    if "country" in name or ("country" in desc and name.endswith("_code")):
        if _ALPHA3.search(name) or "alpha-3" in desc or "alpha3" in desc:
            return judged(_country_code(text, "alpha_3"), "country_alpha3", "ISO 3166-1 alpha-3 code")
        if _ALPHA2.search(name) or "alpha-2" in desc or "alpha2" in desc:
            return judged(_country_code(text, "alpha_2"), "country_alpha2", "ISO 3166-1 alpha-2 code")
        if _COUNTRY_CODE.search(name):
            return judged(_country_code(text, "code"), "country_code", "ISO 3166-1 code")
    if _COORDS_FIELD.search(name):
        return judged(_coordinates_ok(text), "coordinates", "latitude,longitude pair")
    if _LAT_FIELD.search(name):
        return judged(_number_text(text, -90, 90), "latitude", "latitude")
    if _LON_FIELD.search(name):
        return judged(_number_text(text, -180, 180), "longitude", "longitude")
    if _UUID_FIELD.search(name):
        try:
            uuid.UUID(text)
            return Judgement("pass", "uuid")
        except ValueError:
            return judged(False, "uuid", "UUID")
    if _UNIT_FIELD.search(name) and not re.search(r"(^|_)(org|business|organi[sz]ational|admin)_unit", name):
        return judged(text.lower().replace(" ", "_") in UNIT_WORDS, "unit", "unit of measure")
    if _FORMAT_FIELD.search(name) and not name.endswith(("date_format", "time_format", "datetime_format")):
        ok = text.lower() in FORMAT_WORDS or bool(_MIME_SHAPE.match(text)) or text.lower().lstrip(".") in FORMAT_WORDS
        return judged(ok, "format_name", "format name")
    if name.endswith(("date_format", "time_format", "datetime_format")):
        ok = bool(_DATE_PATTERN.match(text)) and any(c in text for c in "YyMDdHhm%")
        return judged(ok, "date_pattern", "date pattern")
    if _COLOUR_FIELD.search(name):
        ok = bool(_HEX_COLOUR.match(text) or _FUNC_COLOUR.match(text.lower())) or text.lower() in COLOUR_WORDS
        return judged(ok, "colour", "colour")
    if _MIME_FIELD.search(name):
        return judged(bool(_MIME_SHAPE.match(text)), "mime_type", "media type")
    if _LOCATION_FIELD.search(name) and not name.endswith(("_id", "_url", "_type")):
        ok = _is_place(text) or bool(re.match(r"^[a-z][a-z0-9+.-]*://", text))
        return judged(ok, "location", "place")
    if re.search(r"(^|_)iban$", name):
        return judged(_iban_ok(text), "iban", "IBAN with valid check digits")
    if re.search(r"(^|_)(swift|bic|swift_code|bic_code|swift_bic)$", name):
        return judged(re.fullmatch(r"[A-Z]{6}[A-Z0-9]{2}([A-Z0-9]{3})?", text) is not None, "bic", "BIC")
    if "md5" in desc or re.search(r"(^|_)md5", name):
        return judged(re.fullmatch(r"[0-9a-fA-F]{32}", text) is not None, "md5", "MD5 hex digest")
    if re.search(r"sha-?256", desc) or re.search(r"(^|_)sha_?256", name):
        return judged(re.fullmatch(r"[0-9a-fA-F]{64}", text) is not None, "sha256", "SHA-256 hex digest")
    if "base64" in desc or "base 64" in desc:
        return judged(_base64_ok(text), "base64", "base64 text")
    listed = _listed_values(desc)
    if listed:
        return judged(text.lower() in listed, "listed", "value the description lists")
    if ("e.164" in desc or "phone number" in desc) and not name.endswith(("_type", "_id", "_country", "_format")):
        digits = sum(c.isdigit() for c in text)
        return judged(bool(_PHONE_SHAPE.match(text)) and 7 <= digits <= 15, "phone", "phone number")
    if re.search(r"(^|_)(contact|contact_info|point_of_contact)$", name):
        # a person to reach, or how to reach them
        ok = (
            "@" in text
            or bool(_PHONE_SHAPE.match(text))
            and sum(c.isdigit() for c in text) >= 7
            or bool(_NAME_SHAPE.match(text))
            and all(w[:1].isupper() for w in text.split())
        )
        return judged(ok, "contact", "person, phone number or e-mail")
    if name == "sid" or name.endswith("_sid"):
        return judged(re.fullmatch(r"[A-Z]{2}[0-9a-fA-F]{16,32}", text) is not None, "sid", "Twilio-style SID")
    if re.search(r"(^|_)(username|user_name|login|handle|screen_name)$", name):
        return judged(re.fullmatch(r"@?[A-Za-z0-9][\w.\-]{1,38}", text) is not None, "username", "user handle")
    if re.search(r"(^|_)(priority|severity|urgency)$", name):
        ok = text.lower() in PRIORITY_WORDS or re.fullmatch(r"(p|priority_?)?[0-9]", text.lower()) is not None
        return judged(ok, "priority", "priority")
    if re.search(r"(^|_)channel$", name):
        ok = text.lower() in CHANNEL_WORDS or text.startswith("#")
        return judged(ok, "channel", "channel")
    if re.search(r"(^|_)protocol$", name):
        ok = text.lower() in PROTOCOL_WORDS or re.fullmatch(r"[A-Za-z]+[-/]?v?\d+(\.\d+)*[a-z]?", text) is not None
        return judged(ok, "protocol", "protocol")
    if re.search(r"(^|_)(runtime|engine_version|python_version|node_version)$", name):
        return judged(any(c.isdigit() for c in text) and " " not in text, "runtime", "runtime with its version")
    if re.search(r"(^|_)(vm_size|instance_type|machine_type|size)$", name):
        ok = any(c.isdigit() for c in text) or text.lower() in SIZE_WORDS
        return judged(ok, "size", "size")
    if re.search(r"(^|_)(county|province|region_name|subdivision)$", name):
        return judged(_is_place(text), "region", "region")
    if re.search(r"(^|_)prefix$", name):
        return judged(re.fullmatch(r"[A-Z0-9][A-Z0-9_\-/.#]{0,11}", text) is not None, "prefix", "code prefix")
    if (re.search(r"(code|_number|_no|_num)$", name) or name == "number") and not (
        _PHONE.search(name)
        or re.search(r"currency|language|lang_|locale|country|postal|post_?code|zip|colou?r|airport|iata|zone", name)
    ):
        # a code or number as a system writes one: digits, or capitals with digits or separators
        ok = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_\-./#:]{0,39}", text) is not None and (
            any(c.isdigit() for c in text) or text.isupper()
        )
        return judged(ok, "code", "code or number")
    if _IMAGE_FIELD.search(name) and re.match(r"^[a-z][a-z0-9+.-]*://", text):
        import validators

        # an image field may also hold an icon's name; only a value written as a link is judged, as a link
        return judged(validators.url(text) is True, "image_url", "image URL")
    if re.search(r"(^|_)(decimal|thousands?|group|digit_group)_separator$", name):
        return judged(text in _SEPARATORS, "separator", "number separator")
    if "cron" in desc or re.search(r"(^|_)cron(_expression|_schedule)?$", name):
        return judged(_cron_ok(text), "cron", "cron expression")
    if _ACTOR_FIELD.search(name):
        # who did it, as a system records it: a person's name, an e-mail address, or an account identifier
        ok = (
            bool(_NAME_SHAPE.match(text))
            and all(w[:1].isupper() for w in text.split())
            or "@" in text.strip("@")
            or re.fullmatch(r"[A-Za-z0-9][\w.\-:]{1,63}", text) is not None
            and any(c.isdigit() for c in text)
        )
        return judged(ok, "actor", "person, e-mail address or account")
    if _ORGANIZATION_FIELD.search(name) and not re.search(r"\b(id|identifier)\b", desc):
        # a company's name as it is written: capitalised words (``Beck-Williams``, ``Lopez, Carson and Hicks``)
        words = re.findall(r"[^\W\d_][\w'&.\-]*", text)
        ok = bool(words) and words[0][:1].isupper() and len(words) <= 8
        return judged(ok, "organization", "organisation name")
    if _ID_FIELD.search(name):
        # an identifier of something outside the environment: a code with digits or separators, a UUID, a slug
        ok = any(c.isdigit() for c in text) or bool(re.search(r"[-_:./@]", text.strip("-_:./@")))
        ok = ok and " " not in text.strip()
        return judged(ok, "identifier", "identifier")
    return None


def _semantic_verdict(name: str, value: Any, desc: str) -> Judgement:
    judgement = _semantic_verdict_of(name, value, desc)
    # a word of the wrong list (``inactive`` where only DRAFT or SCHEDULED are allowed) is no random word
    if judgement.verdict == "fail" and judgement.rule != "listed" and isinstance(value, str) and is_random_word(value):
        return Judgement("fail", judgement.rule, f"{RANDOM_WORD}: {value!r} is no {judgement.rule}")
    return judgement


def _semantic_verdict_of(name: str, value: Any, desc: str) -> Judgement:
    if isinstance(value, bool):
        return Judgement("pass", "boolean")
    if isinstance(value, (int, float)):
        return _number_verdict(name, value, desc)
    text = value.strip()
    if is_placeholder(text):
        return Judgement("fail", "placeholder", f"{text!r} is a placeholder")
    kind = _kind_verdict(name, text, desc)
    if kind is not None:
        return kind
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

        parts = [p.strip() for p in text.split(",")] if name.endswith("s") else [text]
        ok = all(validators.email(p) is True for p in parts)
        return Judgement("pass" if ok else "fail", "email")
    if _URL.search(name):
        import validators

        ok = validators.url(text) is True
        return Judgement("pass" if ok else "fail", "url")
    # a bare ``from``/``to`` is a phone number unless its description says it is a place or a named entity
    # (``The destination of the travel``, ``The name of the entity where the relation ends``)
    if _PHONE.search(name) and not (name in ("from", "to") and _NOT_A_NUMBER.search(desc)):
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
        if text in _cities():
            return Judgement("pass", "city")
        if _WORD_PAIR.match(text) or not _NAME_SHAPE.match(text):
            return Judgement("fail", "city")
        return Judgement("unknown", "city")
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
    if _AMOUNT.search(name) or _COUNT.search(name) or _MEASURE.search(name):
        return Judgement("pass" if value >= 0 else "fail", "non_negative")
    if _ID_FIELD.search(name) or _NUMERIC_ID_DESC.search(desc) and float(value).is_integer():
        # a fraction under a description such as "index of refraction" is a measure, not judged here
        ok = float(value).is_integer() and value >= 0
        return Judgement("pass" if ok else "fail", "identifier", "" if ok else f"{value!r} is no numeric identifier")
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


def _flatten(field: str, schema: dict[str, Any], value: Any) -> Iterable[tuple[str, dict[str, Any], Any]]:
    """Scalar leaves of an argument value, each with its own schema: list items under ``items``, object
    members under ``properties`` (a member's own name)."""
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        for item in value:
            yield from _flatten(field, items, item)
    elif isinstance(value, dict):
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for key, member in value.items():
            yield from _flatten(str(key), props.get(key) or {}, member)
    else:
        yield field, schema, value


def generated_arguments(
    trajectories: Iterable[dict[str, Any]], environments: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every generated argument value of the tool calls of ``trajectories`` (rows with ``id`` and ``turns``,
    raw or refined), one dict per scalar value: ``trajectory_id``, ``turn``, ``call``, ``env_id``, ``tool``,
    ``field``, ``schema`` (the input schema's property, or the nested member's), ``description`` and
    ``value``.

    A value is generated when its call's provenance says the user gave it (``{"source": "user"}``):
    identifiers read from the hidden state or an earlier result are only meaningful by existing and are left
    out. ``environments`` maps ``env_id`` to an Environment dict (its ``tools``); a call whose tool is not
    there keeps an empty schema. A tool with a real MCP signature (``mcp_binding``) is read in its canonical
    input schema, the names a trajectory's calls plan in.
    """
    tools = {(env_id, tool["name"]): tool for env_id, env in environments.items() for tool in env.get("tools") or []}
    out: list[dict[str, Any]] = []
    for row in trajectories:
        for t, turn in enumerate(row.get("turns") or []):
            for c, call in enumerate(turn.get("calls") or []):
                prov = call.get("provenance") or {}
                tool = tools.get((call.get("env_id"), call.get("name"))) or {}
                # a trajectory's call of a tool with a real MCP signature is in the builder's (canonical) names
                props = (tool.get("mcp_binding") or {}).get("canonical_input") or tool.get("input_schema") or {}
                props = props.get("properties") or {}
                for name, value in (call.get("arguments") or {}).items():
                    if (prov.get(name) or {}).get("source") != "user":
                        continue
                    schema = props.get(name) or {}
                    for field, leaf_schema, leaf in _flatten(name, schema, value):
                        out.append(
                            {
                                "trajectory_id": row.get("id"),
                                "turn": t,
                                "call": c,
                                "env_id": call.get("env_id"),
                                "tool": call.get("name"),
                                "field": field,
                                "schema": leaf_schema,
                                "description": str(leaf_schema.get("description") or ""),
                                "value": leaf,
                            }
                        )
    return out


def coverage_figures(items: Iterable[tuple[str, dict[str, Any], Any, str]]) -> dict[str, Any]:
    """How much of a set of generated values the check covers, and what it finds there.

    ``items`` are ``(field_name, schema, value, description)``. A value is covered when a rule judges it
    (pass or fail): every rule checks a kind narrower than free text (a zone, a code, a place, a sentence);
    the rest are ``unknown``. Returns ``values``, ``covered``, ``unknown``, ``unknown_share`` (of values),
    ``passed``, ``failed``, ``share_passing`` (of covered), ``random_words``, ``placeholders`` and
    ``wrong_kind`` (failing values by :attr:`Judgement.defect`), ``random_word_share`` (random words of
    covered values), ``by_rule`` (covered values per rule), ``top_failures`` (``"field (rule)": count``) and
    ``top_unknown_fields`` (the fields left unknown most often).
    """
    from collections import Counter

    tally, defects, rules, failures, unknown_fields = Tally(), Counter(), Counter(), Counter(), Counter()
    for name, schema, value, desc in items:
        judgement = check_value(name, schema, value, desc)
        tally.add(judgement.verdict)
        if judgement.verdict == "unknown":
            unknown_fields[name] += 1
            continue
        rules[judgement.rule] += 1
        if judgement.verdict == "fail":
            defects[judgement.defect] += 1
            failures[f"{name} ({judgement.rule})"] += 1
    values = tally.judged + tally.unknown
    share = tally.share
    return {
        "values": values,
        "covered": tally.judged,
        "unknown": tally.unknown,
        "unknown_share": round(tally.unknown / values, 4) if values else None,
        "passed": tally.passed,
        "failed": tally.failed,
        "share_passing": round(share, 4) if share is not None else None,
        "random_words": defects["random word"],
        "placeholders": defects["placeholder"],
        "wrong_kind": defects["wrong kind"],
        "random_word_share": round(defects["random word"] / tally.judged, 4) if tally.judged else None,
        "by_rule": dict(rules.most_common()),
        "top_failures": dict(failures.most_common(10)),
        "top_unknown_fields": dict(unknown_fields.most_common(10)),
    }


def argument_figures(trajectories: Iterable[dict[str, Any]], environments: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """:func:`coverage_figures` of every generated argument value (:func:`generated_arguments`) of the tool
    calls of ``trajectories``, with ``trajectories`` counted."""
    rows = list(trajectories)
    items = [(a["field"], a["schema"], a["value"], a["description"]) for a in generated_arguments(rows, environments)]
    return {"trajectories": len(rows), **coverage_figures(items)}
