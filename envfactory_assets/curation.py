"""User curation: resources, environments and tools a user has excluded, with reasons.

The list lives in ``$ENVFACTORY_HOME/curation.yaml`` (edit it by hand or with ``envfactory exclude`` /
``envfactory include``; ``envfactory curation`` prints it)::

    exclusions:
      - {kind: resource, id: bookshop_example, reason: "licence unclear"}
      - {kind: environment, id: helpdesk, reason: "duplicates a benchmark API"}
      - {kind: tool, id: calendar_tasks.delete_calendar, reason: "destructive, not wanted in data"}

Ids: a resource is its ``resource_key`` (``source_resources.resource_key``), an environment its ``env_id``,
a tool its tool-graph node id ``"{env_id}.{tool_name}"``. The file is read at every materialization, so an
exclusion holds through every re-synthesis: resources are dropped where ``environments`` selects them,
environments and tools where ``tool_graph`` takes verified environments in (so nothing downstream can
sample them). Each of those assets lists what it dropped, with the reason, in its metadata (``curation``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from envfactory_assets.sources.safe_yaml import load_untrusted_yaml

KINDS = ("resource", "environment", "tool")
FILE_NAME = "curation.yaml"
MAX_FILE_BYTES = 5_000_000
"""Largest curation file read (a hand-edited exclusion list is kilobytes)."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "exclusions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["kind", "id", "reason"],
                "properties": {
                    "kind": {"enum": list(KINDS)},
                    "id": {"type": "string", "minLength": 1},
                    "reason": {"type": "string", "minLength": 1},
                },
            },
        }
    },
}


class CurationError(ValueError):
    """The curation file cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Curation:
    """Exclusions by kind: ``{kind: {id: reason}}`` for kinds in :data:`KINDS`."""

    excluded: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})

    def reason(self, kind: str, item_id: str) -> str | None:
        """The reason ``item_id`` of ``kind`` is excluded, or None if it is not."""
        return self.excluded.get(kind, {}).get(item_id)

    def as_yaml_data(self) -> dict[str, Any]:
        return {
            "exclusions": [
                {"kind": k, "id": i, "reason": r} for k in KINDS for i, r in sorted(self.excluded.get(k, {}).items())
            ]
        }

    def __len__(self) -> int:
        return sum(len(v) for v in self.excluded.values())


def curation_path(home: Path) -> Path:
    """``curation.yaml`` under ``home`` (the ``ENVFACTORY_HOME`` folder)."""
    return Path(home) / FILE_NAME


def load_curation(path: Path) -> Curation:
    """Read and validate a curation file; a missing file means no exclusions.

    Raises:
        CurationError: the file cannot be read (a folder, not UTF-8, over :data:`MAX_FILE_BYTES`), is not
            YAML (tags such as ``!!python/object``, an alias expansion bomb, a repeated key), does not
            match :data:`SCHEMA`, or lists an id twice within one kind.
    """
    path = Path(path)
    if not path.exists():
        return Curation()
    if path.is_dir():
        raise CurationError(f"{path}: is a folder, not a YAML file")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise CurationError(f"{path}: {size} bytes, more than a curation file may have ({MAX_FILE_BYTES})")
        data = load_untrusted_yaml(path.read_bytes()) or {}
    except OSError as exc:
        raise CurationError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise CurationError(f"{path}: not valid YAML ({str(exc).splitlines()[0][:300]})") from None
    try:
        jsonschema.validate(data, SCHEMA)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        # the message quotes the offending value: keep it short
        message = exc.message if len(exc.message) <= 300 else exc.message[:300] + "..."
        raise CurationError(f"{path}: at {where}: {message}") from None
    excluded: dict[str, dict[str, str]] = {k: {} for k in KINDS}
    for entry in data.get("exclusions", []):
        if entry["id"] in excluded[entry["kind"]]:
            raise CurationError(f"{path}: {entry['kind']} {entry['id']!r} is listed twice")
        excluded[entry["kind"]][entry["id"]] = entry["reason"]
    return Curation(excluded)


def save_curation(path: Path, curation: Curation) -> None:
    """Write ``curation`` to ``path`` atomically (a temporary file renamed over it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".curation.", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as out:
            out.write("# envfactory curation: excluded resources, environments and tools (see envfactory curation)\n")
            yaml.safe_dump(curation.as_yaml_data(), out, sort_keys=False, allow_unicode=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def set_exclusion(path: Path, kind: str, item_id: str, reason: str | None) -> Curation:
    """Add (``reason`` given) or remove (``reason`` None) one exclusion in the file at ``path``.

    Raises:
        CurationError: unknown ``kind``, empty id or reason, or the existing file is invalid.
    """
    if kind not in KINDS:
        raise CurationError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if not item_id.strip():
        raise CurationError("the id to exclude is empty")
    if reason is not None and not reason.strip():
        raise CurationError("an exclusion needs a reason (--reason)")
    current = load_curation(path)
    excluded = {k: dict(v) for k, v in current.excluded.items()}
    if reason is None:
        if excluded[kind].pop(item_id, None) is None:
            close = nearest(item_id, excluded[kind])
            raise CurationError(
                f"{kind} {item_id!r} is not excluded in {path}"
                + (f"; nearest excluded: {', '.join(close)}" if close else "")
            )
    else:
        excluded[kind][item_id] = reason.strip()
    updated = Curation(excluded)
    save_curation(path, updated)
    return updated


def filter_resources(rows: Iterable[dict[str, Any]], curation: Curation) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Drop ``source_resources`` rows excluded by resource key (or by the environment id built from them).

    Returns ``(kept rows, {resource_key: reason})``.
    """
    kept, dropped = [], {}
    for row in rows:
        key = row["resource_key"]
        reason = curation.reason("resource", key) or curation.reason("environment", key)
        if reason is None:
            kept.append(row)
        else:
            dropped[key] = reason
    return kept, dropped


def filter_environments(
    environments: dict[str, dict[str, Any]], curation: Curation
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Drop excluded environments and excluded tools from ``{env_id: environment dict}``.

    An environment left with no tool is dropped too. The input dicts are not changed.
    Returns ``(kept environments, {env_id or "env_id.tool": reason})``.
    """
    kept: dict[str, dict[str, Any]] = {}
    dropped: dict[str, str] = {}
    for env_id, env in environments.items():
        reason = curation.reason("environment", env_id)
        if reason is not None:
            dropped[env_id] = reason
            continue
        tools = []
        for tool in env["tools"]:
            node = f"{env_id}.{tool['name']}"
            tool_reason = curation.reason("tool", node)
            if tool_reason is None:
                tools.append(tool)
            else:
                dropped[node] = tool_reason
        if not tools:
            dropped.setdefault(env_id, "every tool excluded")
            continue
        kept[env_id] = env if len(tools) == len(env["tools"]) else {**env, "tools": tools}
    return kept, dropped


def nearest(item_id: str, known: Iterable[str], n: int = 5) -> list[str]:
    """Up to ``n`` ids of ``known`` closest to ``item_id`` (``difflib.get_close_matches``, cutoff 0.5)."""
    import difflib

    return difflib.get_close_matches(item_id, sorted(set(known)), n=n, cutoff=0.5)


def unknown_id_message(kind: str, item_id: str, known: Iterable[str], listing: str) -> str:
    """One line naming an unknown id, its nearest known ids (if any), and the command that lists them all."""
    known = sorted(set(known))
    close = nearest(item_id, known)
    hint = f"nearest: {', '.join(close)}" if close else f"none of the {len(known)} known ids is close"
    return f"unknown {kind} {item_id!r}; {hint} ({listing} lists them)"


def known_ids(store: Any, kind: str) -> list[str]:
    """The ids of ``kind`` the store knows, sorted: resource keys of ``source_resources``, env ids of
    ``environments`` (built or not: a user may exclude a failed one), or tool node ids ``env_id.tool_name``
    of the environments' tools.

    Raises:
        CurationError: unknown ``kind``. ``FileNotFoundError``: the store does not exist.
    """
    if kind == "resource":
        return sorted({r["resource_key"] for r in store.read("source_resources")})
    if kind == "environment":
        return sorted({r["env_id"] for r in store.read("environments")})
    if kind == "tool":
        return sorted({f"{r['env_id']}.{t['name']}" for r in store.read("environments") for t in (r["tools"] or [])})
    raise CurationError(f"kind {kind!r} is not one of {', '.join(KINDS)}")


LISTING = {
    "resource": "envfactory status / the source_resources table",
    "environment": "envfactory environments",
    "tool": "envfactory environments --tools",
}


def check_known_id(store: Any, kind: str, item_id: str) -> None:
    """Refuse an exclusion of an id the store does not know.

    Raises:
        CurationError: ``item_id`` is not among :func:`known_ids` of ``kind``; the message names the nearest
            known ids. ``FileNotFoundError``: the store does not exist (the caller decides what that means).
    """
    known = known_ids(store, kind)
    if item_id not in known:
        raise CurationError(unknown_id_message(kind, item_id, known, LISTING[kind]))
