"""Source licences of dataset rows: environment -> source resource -> ``license_name`` / ``license_url``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

UNSPECIFIED = "unspecified"


def licence_name(name: Any) -> str:
    """A licence name as stored (stripped); empty or missing becomes :data:`UNSPECIFIED`."""
    text = str(name or "").strip()
    return text or UNSPECIFIED


def environment_licences(environments: Iterable[Mapping[str, Any]],
                         sources: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
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
            out[env["env_id"]] = {"name": licence_name(source.get("license_name")),
                                  "url": str(source.get("license_url") or "").strip(),
                                  "source_resource_id": source["id"]}
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
    """Whether every licence of a row is in the allow-list (case-insensitive names); an empty list allows all."""
    if not allow:
        return True
    names = {a.strip().lower() for a in allow}
    return all(entry["name"].lower() in names for entry in row_licence_list)
