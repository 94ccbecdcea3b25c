"""How a person names an API's tables and fields: the words of a snake_case or camelCase name, short forms
written out, initialisms in capitals, and the name an environment's table is said by. Shared by the
environment builder (tool and parameter descriptions), the query writer and the programmatic solver, so they
read as one another writes; it imports only :mod:`.names`."""

from __future__ import annotations

import re
from typing import Any

from envfactory_assets.sources.names import (
    name_nouns,
    singular,
    snake_case,
    speakable,
    split_glued,
    spoken_thing,
    spoken_words,
)

__all__ = ["spoken_field", "spoken_name", "spoken_table", "spoken_tables", "words"]


def words(name: str) -> str:
    """``"send_bulk"`` -> ``"send bulk"``."""
    return name.replace("_", " ").strip()


def _shared_nouns(texts: list[str], drop: set[str], keep: frozenset[str] = frozenset()) -> list[str]:
    """The :func:`name_nouns` of ``texts[0]`` that every text has (compared by singular) and ``drop`` lacks, in
    ``texts[0]``'s order, each once."""
    if not texts:
        return []
    sets = [{singular(w) for w in name_nouns(x, keep)} for x in texts]
    out: dict[str, str] = {}
    for w in name_nouns(texts[0], keep):
        if all(singular(w) in s for s in sets) and singular(w) not in drop:
            out.setdefault(singular(w), w)
    return list(out.values())


def spoken_tables(tools: list[dict[str, Any]]) -> dict[str, str]:
    """The name a person says for each table of one environment's ``tools`` (ToolSpecs), as snake_case words
    that :func:`spoken_thing` and :func:`spoken_things` read; only the spec's own text is used:

    - a name a person cannot say (``"b"`` of ``/b/{bucket}``, ``"v4_7"`` of ``/shipments/v4``) becomes the
      words every operation of the table names (``storage_buckets_list``, ``storage_buckets_get``:
      ``"buckets"``), else the words every summary has ("Gets a shipment details": ``"shipments"``); words
      every tool of the environment names (the API's ``storage``) are no name;
    - a word glued from two the spec writes apart elsewhere splits (``"rateplans"`` -> ``"rate_plans"``);
    - tables that would still sound the same ("webhooks" of ``/companies/{id}`` and of ``/merchants/{id}``)
      get the words only their own operations' names have (``"company_webhooks"``, ``"merchant_webhooks"``).

    The programmatic solver reads the same words back from the tool names and summaries
    (:mod:`envfactory_assets.synth.refinement.solver.programmatic`).
    """
    by_table: dict[str, list[dict[str, Any]]] = {}
    for tool in tools:
        by_table.setdefault(tool["table"], []).append(tool)
    bigrams = {
        pair
        for tool in tools
        for text in (tool["name"], tool.get("description") or "")
        for toks in [snake_case(text).split("_")]
        for pair in zip(toks, toks[1:], strict=False)
    }
    every = (
        set.intersection(*({singular(w) for w in name_nouns(t["name"])} for t in tools)) if len(by_table) > 1 else set()
    )
    names: dict[str, list[str]] = {}
    for table, own in by_table.items():
        found = spoken_words(table)
        if not speakable(table):
            keep = frozenset(t for t in table.split("_") if t.isalpha() and len(t) > 1)
            found = (
                _shared_nouns([t["name"] for t in own], every, keep)
                or _shared_nouns([t.get("description") or "" for t in own], every, keep)
                or found
            )
        names[table] = [part for w in found for part in split_glued(w, bigrams)]
    heard: dict[str, list[str]] = {}
    for table, found in names.items():
        heard.setdefault(spoken_thing("_".join(found)), []).append(table)
    for same in (tables for tables in heard.values() if len(tables) > 1):
        own_words = {table: _shared_nouns([t["name"] for t in by_table[table]], every) for table in same}
        for table in same:
            others = {singular(w) for o in same if o != table for w in own_words[o]}
            said = {singular(w) for w in names[table]} | {singular("".join(names[table]))}
            qualifier = [singular(w) for w in own_words[table] if singular(w) not in others | said]
            names[table] = [part for w in qualifier for part in split_glued(w, bigrams)] + names[table]
    return {table: "_".join(found) for table, found in names.items()}


def spoken_table(tool: dict[str, Any]) -> str:
    """The table name :func:`spoken_thing` reads for ``tool``: the one :func:`spoken_tables` gave it where its
    index recorded it (``spoken_table``), else the table's own name."""
    return tool.get("spoken_table") or tool["table"]


#: Short forms API field names use for a word a person writes out (``qr_no``: "QR number").
_ABBREVIATIONS = {
    "no": "number",
    "num": "number",
    "nr": "number",
    "qty": "quantity",
    "amt": "amount",
    "desc": "description",
    "addr": "address",
    "tel": "telephone",
    "msg": "message",
    "ref": "reference",
    "cnt": "count",
    "pct": "percent",
    "img": "image",
    "acct": "account",
    "dob": "date of birth",
    "src": "source",
    "dst": "destination",
    "dest": "destination",
    "max": "maximum",
    "min": "minimum",
    "tz": "time zone",
    "dt": "date",
    "ts": "timestamp",
    "lang": "language",
    "cat": "category",
    "doc": "document",
    "pwd": "password",
    "usr": "user",
    "lat": "latitude",
    "lng": "longitude",
    "lon": "longitude",
    "temp": "temperature",
}
#: Initialisms a person writes in capitals (``isbn`` -> "ISBN").
_INITIALISMS = frozenset(
    "qr url uri iso api sku vat ip uuid isbn sms pdf utc gps eta json html ssn iban bic vin ean upc mac dns "
    "ssl tls cpu gpu ram os sdk http https ftp csv xml sql pin otp cvv sid guid mime".split()
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
#: a word with a number glued on ("phone1", "line2", "alpha3"): a person writes "phone 1"; short stems stay as
#: they are, since those are names of their own ("mp4", "sha256", "v2")
_NUMBERED = re.compile(r"^(?=[a-z]*[aeiouy])([a-z]{4,})(\d{1,2})$")


def _initialism(token: str) -> bool:
    """A word of a field name a person writes in capitals: a known initialism, ``id``, 2-4 letters without
    a vowel ("rgb", "kvk", "vm"), or a few such letters with a number ("mp4", "s3", "h264")."""
    return (
        token in _INITIALISMS
        or token == "id"
        or (2 <= len(token) <= 4 and token.isalpha() and not re.search(r"[aeiouy]", token))
        or (re.fullmatch(r"[a-z]{1,3}\d{1,3}", token) is not None and not re.search(r"[aeiouy]", token))
    )


def spoken_name(name: str) -> str:
    """A field's own words as a person writes them, nothing dropped or written out: initialisms in capitals
    (``color_rgb`` -> ``"color RGB"``, ``vm_id`` -> ``"VM ID"``, ``need_qr`` -> ``"need QR"``); in lowercase it
    reads as :func:`words` of the name, so a reader of the spec's words finds the field. A name with a lone
    letter (``o_id``) is left as the spec writes it: capitals would not make "o" a word a person says."""
    toks = words(name).split()
    if any(len(t) == 1 and t.isalpha() for t in toks):
        return words(name)
    return " ".join(t.upper() if _initialism(t.lower()) else t for t in toks)


def spoken_field(name: str) -> str:
    """A field name as the words a person writes for it: parts of a snake_case or camelCase name, a trailing
    ``id`` dropped when other words remain (``org_unit_id`` -> ``"org unit"``), short forms written out and
    initialisms in capitals (``qr_no`` -> ``"QR number"``, ``isbnCode`` -> ``"ISBN code"``), a number glued to a
    word set apart (``address_line1`` -> ``"address line 1"``), a trailing ``s`` said as the unit it is
    (``refresh_interval_s`` -> ``"refresh interval in seconds"``). A field that is
    only ``id`` reads ``"ID"``. The writer labels fields so, the programmatic solver reads the label back
    (:func:`field_labels` holds it) and the clarification question names the field so."""
    toks = [t for t in re.split(r"[_\s.\-]+", _CAMEL.sub("_", name.strip())) if t]
    toks = [w for t in toks for w in _NUMBERED.sub(r"\1 \2", t.lower()).split()]
    if len(toks) > 1 and toks[-1] in ("id", "ids"):
        toks = toks[:-1]
    out: list[str] = []
    for i, t in enumerate(toks):
        if t in _ABBREVIATIONS:
            out.append(_ABBREVIATIONS[t])
        elif t == "s" and 0 < i == len(toks) - 1:
            out.append("in seconds")  # a unit after the name: refresh_interval_s
        elif _initialism(t):
            out.append(t.upper())  # an initialism: "RGB", "XML", "KVK"
        elif len(t) == 1 and t.isalpha() and i + 1 < len(toks):
            toks[i + 1] = f"{t}-{toks[i + 1]}"  # "e invoice" is written "e-invoice"
        else:
            out.append(t)
    return " ".join(out) if out else name
