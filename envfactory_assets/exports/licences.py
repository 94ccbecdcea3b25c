"""Source licences of dataset rows: environment -> source resource -> ``license_name`` / ``license_url``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

UNSPECIFIED = "unspecified"


# Spellings of common licences seen in API descriptions (``info.license.name``) that are not SPDX ids, keyed by
# :func:`_spelling_key`. Only unambiguous ones: "AGPLv3" (only or or-later?) and "CC-BY-SA" (which version?)
# are left as stated.
_SPELLINGS = {
    "apache 2.0": "Apache-2.0",
    "apache 2": "Apache-2.0",
    "apache2": "Apache-2.0",
    "apache 2.0.0": "Apache-2.0",
    "mit": "MIT",
    "bsd3": "BSD-3-Clause",
    "bsd 3 clause": "BSD-3-Clause",
    "bsd 3": "BSD-3-Clause",
    "bsd 2 clause": "BSD-2-Clause",
    "creative commons attribution 3.0": "CC-BY-3.0",
    "creative commons attribution 4.0": "CC-BY-4.0",
    "creative commons attribution 4.0 international public": "CC-BY-4.0",
    "creative commons attribution 4.0 international": "CC-BY-4.0",
    "creative commons attribution 3.0 australia": "CC-BY-3.0-AU",
    "cc by 3.0": "CC-BY-3.0",
    "cc by 4.0": "CC-BY-4.0",
    "cc by sa 2.0": "CC-BY-SA-2.0",
    "cc by sa 3.0": "CC-BY-SA-3.0",
    "cc by sa 4.0": "CC-BY-SA-4.0",
    "cc0": "CC0-1.0",
    "cc0 1.0": "CC0-1.0",
    "gplv3": "GPL-3.0-only",
    "gpl 3.0": "GPL-3.0-only",
    "gplv2": "GPL-2.0-only",
}


def _spelling_key(text: str) -> str:
    """Lower case, ``licen[cs]e``/``the``/``version``/``licensed by`` and punctuation dropped, ``v2`` -> ``2``."""
    key = re.sub(r"[(),:;_\-]+", " ", text.lower())
    key = (
        re.sub(r"\b(the|licen[cs]e[sd]?|version|by|agreement)\b", " ", key)
        if not key.startswith("cc ")
        else re.sub(r"\b(the|licen[cs]e[sd]?|version|agreement)\b", " ", key)
    )
    key = re.sub(r"\bv(?=\d)", "", key)
    return " ".join(key.split()).replace("mit mit", "mit")


def spdx_id(name: Any) -> str | None:
    """The SPDX licence identifier a stated licence name means, or None when it matches none.

    An exact SPDX id or expression in any case (``apache-2.0``, ``MIT OR Apache-2.0``) is canonicalised with
    ``packaging.licenses`` (which ships the SPDX licence list); otherwise a few spellings seen in API
    descriptions ("Apache 2.0 License", "The MIT License (MIT)", "Creative Commons Attribution 3.0") are
    mapped (:data:`_SPELLINGS`). Vague names ("Creative Commons", "Commercial") stay unmatched.
    """
    from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

    text = " ".join(str(name or "").split())
    if not text:
        return None
    try:
        return canonicalize_license_expression(text)
    except InvalidLicenseExpression:
        pass
    key = _spelling_key(text)
    return _SPELLINGS.get(key) or _SPELLINGS.get(key.replace("licensed ", ""))


def licence_name(name: Any) -> str:
    """A licence name for the exports: its SPDX id when it matches one (:func:`spdx_id`), else the stated name
    stripped; empty or missing becomes :data:`UNSPECIFIED`."""
    text = " ".join(str(name or "").split())
    return spdx_id(text) or text or UNSPECIFIED


def environment_licences(
    environments: Iterable[Mapping[str, Any]], sources: Iterable[Mapping[str, Any]]
) -> dict[str, dict[str, str]]:
    """``{env_id: {"name", "url", "source_resource_id"}}`` for every environment whose source is known.

    Args:
        environments: ``environments`` rows (``env_id``, ``source_resource_id``).
        sources: ``source_resources`` rows (``id``, ``license_name``, ``license_url``).
    """
    by_id = {s["id"]: s for s in sources}
    out = {}
    for env in environments:
        source = by_id.get(env["source_resource_id"])
        if source is not None:
            out[env["env_id"]] = {
                "name": licence_name(source.get("license_name")),
                "stated_name": str(source.get("license_name") or "").strip(),
                "url": str(source.get("license_url") or "").strip(),
                "source_resource_id": source["id"],
            }
    return out


def row_licences(env_ids: Sequence[str], licences: Mapping[str, Mapping[str, str]]) -> list[dict[str, str]]:
    """The licences of a row's environments, one entry per environment, in ``env_ids`` order.

    Raises:
        KeyError: an environment of the row has no known source resource (its licence cannot be stated).
    """
    missing = [e for e in env_ids if e not in licences]
    if missing:
        raise KeyError(f"no source licence known for environment(s) {missing}")
    return [{"env_id": e, **licences[e]} for e in env_ids]


def allowed(row_licence_list: Sequence[Mapping[str, str]], allow: Sequence[str]) -> bool:
    """Whether every licence of a row is in the allow-list (case-insensitive names, an allow-list entry also
    matching by its SPDX id: "Apache 2.0" allows ``Apache-2.0``); an empty list allows all."""
    if not allow:
        return True
    names = {a.strip().lower() for a in allow} | {licence_name(a).lower() for a in allow}
    return all(entry["name"].lower() in names for entry in row_licence_list)
