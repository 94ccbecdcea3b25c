"""Real entity data shipped by packages, for seeding initial states where a field asks for it.

- ``pycountry`` (ISO 3166 countries, ISO 4217 currencies, ISO 639 languages) for country, currency and
  language fields;
- ``airportsdata`` (IATA airports with their city and country) for airport and city fields.

Each lookup returns the value and a provenance string (package, version, dataset) so the environment
records where its seed data came from. Loading is lazy and cached per process.
"""

from __future__ import annotations

import functools
import importlib.metadata
import random
import re
from typing import Any

_WIDE_LANGUAGES = ("en", "es", "fr", "de", "pt", "it", "nl", "ja", "zh", "ko", "ru", "ar", "hi", "tr", "pl", "sv")
# "origin"/"destination" name an airport only bare or with an airport suffix (an ``event_destination_name`` is not one)
_AIRPORT_FIELD = re.compile(r"(^|_)(airport|iata)(_|$)|^(origin|destination|departure|arrival)(_airport|_code|_iata)?$")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@functools.lru_cache(maxsize=1)
def _countries() -> list[tuple[str, str, str]]:
    import pycountry

    return sorted((c.alpha_2, c.alpha_3, c.name) for c in pycountry.countries)


# Which form of ISO 3166-1 a country field asks for, from its name or its description.
_ALPHA3 = re.compile(r"alpha_?3|(^|_)iso_?3($|_)|cca3|three_letter")
_ALPHA2 = re.compile(r"alpha_?2|(^|_)iso_?2($|_)|cca2|two_letter")


def country_form(field_name: str, description: str = "") -> str:
    """``"alpha_3"``, ``"alpha_2"`` or ``"name"``: the form of country a field holds. A field whose name or
    description says alpha-3 gets the three-letter code, one that says alpha-2, ISO or code gets the
    two-letter code, any other a country's name."""
    name, desc = field_name.lower(), description.lower()
    if _ALPHA3.search(name) or "alpha-3" in desc or "alpha3" in desc or "three-letter" in desc:
        return "alpha_3"
    if (
        _ALPHA2.search(name)
        or "code" in name
        or "iso" in name
        or "alpha-2" in desc
        or "alpha2" in desc
        or "two-letter" in desc
        or "iso 3166" in desc
    ):
        return "alpha_2"
    return "name"


@functools.lru_cache(maxsize=1)
def _currencies() -> list[str]:
    import pycountry

    # X-codes are funds, precious metals and the testing code XTS: no price is quoted in them.
    return sorted(c.alpha_3 for c in pycountry.currencies if not c.alpha_3.startswith("X"))


@functools.lru_cache(maxsize=1)
def _languages() -> list[str]:
    import pycountry

    return sorted(lang.alpha_2 for lang in pycountry.languages if hasattr(lang, "alpha_2"))


@functools.lru_cache(maxsize=1)
def _airports() -> list[dict[str, Any]]:
    import airportsdata

    airports = airportsdata.load("IATA")
    # Airports with a city, sorted by code, so a seeded draw is the same on every machine.
    return [airports[code] for code in sorted(airports) if airports[code].get("city")]


@functools.lru_cache(maxsize=1)
def _cities() -> list[str]:
    return sorted({a["city"] for a in _airports()})


def real_city(rng: random.Random) -> str:
    """A real city name (one with an IATA airport, from ``airportsdata``), drawn by ``rng``."""
    return rng.choice(_cities())


def real_place(rng: random.Random) -> dict[str, Any]:
    """A real place: an airport's ``city``, ``country`` (ISO 3166-1 alpha-2), ``lat`` and ``lon`` (decimal
    degrees), from ``airportsdata``, drawn by ``rng``."""
    return rng.choice(_airports())


def country_name(alpha_2: str) -> str:
    """The ISO 3166-1 name of the country with code ``alpha_2`` (the code itself when pycountry lacks it)."""
    import pycountry

    country = pycountry.countries.get(alpha_2=alpha_2)
    return getattr(country, "common_name", None) or getattr(country, "name", alpha_2)


def entity_value(
    field_name: str, schema: dict[str, Any], rng: random.Random, description: str = ""
) -> tuple[Any, str] | None:
    """A real entity value for a string field, or None when no dataset fits the field.

    Returns ``(value, provenance)``; the value honours ``maxLength`` (a full country name is used only
    when it fits, otherwise the ISO code) and the form of country code the field's name or ``description``
    asks for (:func:`country_form`).
    """
    if schema.get("type") != "string" or "enum" in schema or schema.get("format"):
        return None
    name = field_name.lower()
    limit = schema.get("maxLength", 10**6)
    if "currency" in name and limit >= 3:
        return rng.choice(_currencies()), f"pycountry {_version('pycountry')} ISO 4217 currencies"
    if "country" in name and limit >= 2:
        code, code3, full = rng.choice(_countries())
        form = country_form(name, description)
        value = code3 if form == "alpha_3" and limit >= 3 else full if form == "name" and len(full) <= limit else code
        return value, f"pycountry {_version('pycountry')} ISO 3166 countries"
    if name in ("language", "language_code", "lang", "locale") and limit >= 2:
        # Most records are in a widely used language; the rest spread over all of ISO 639-1.
        pool = _WIDE_LANGUAGES if rng.random() < 0.8 else _languages()
        return rng.choice(pool), f"pycountry {_version('pycountry')} ISO 639 languages"
    if (
        _AIRPORT_FIELD.search(name)
        and limit >= 3
        and not name.endswith(("url", "uri", "link", "_id", "_ids", "address", "arn"))
    ):
        airport = rng.choice(_airports())
        value = airport["iata"] if name.endswith(("code", "iata")) or limit < len(airport["name"]) else airport["name"]
        return value, f"airportsdata {_version('airportsdata')} IATA airports"
    return None
