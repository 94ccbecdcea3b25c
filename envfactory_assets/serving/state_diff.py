"""What an episode changed: the rows added, removed and changed in each environment's saved state.

Saved states are ``{"tables": {table: [row, ...]}, "meta": {...}}`` (docs/design.md). Rows are matched by the
table's key field when the environment names one (``tables[table]["key"]``, as the programmatic builder's
environments do), else by a field ending in ``_id`` that every row of both sides has, else by their whole
content (a changed row then shows as removed and added).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envfactory_assets.runtime.canonical import canonical_json

MAX_ROWS_SHOWN = 50
"""Most rows listed per table and kind of change; the counts are always whole."""


def _key_field(table: str, before: list[Any], after: list[Any], environment: Mapping[str, Any] | None) -> str | None:
    meta = ((environment or {}).get("tables") or {}).get(table)
    if isinstance(meta, Mapping) and isinstance(meta.get("key"), str):
        return meta["key"]
    rows = [r for r in before + after if isinstance(r, Mapping)]
    if not rows or len(rows) != len(before) + len(after):
        return None
    common = set(rows[0]).intersection(*rows[1:])
    for name in sorted(common):
        if name == "id" or name.endswith("_id"):
            keys = [canonical_json(r[name]) for r in before]
            if len(set(keys)) == len(keys) and len({canonical_json(r[name]) for r in after}) == len(after):
                return name
    return None


def _table_diff(table: str, before: list[Any], after: list[Any], environment: Mapping[str, Any] | None) -> dict:
    key = _key_field(table, before, after, environment)
    if key is None:
        old = {canonical_json(r): r for r in before}
        new = {canonical_json(r): r for r in after}
        added = [new[k] for k in new if k not in old]
        removed = [old[k] for k in old if k not in new]
        changed: list[dict[str, Any]] = []
    else:
        old = {canonical_json(r.get(key)): r for r in before}
        new = {canonical_json(r.get(key)): r for r in after}
        added = [new[k] for k in new if k not in old]
        removed = [{key: old[k].get(key)} for k in old if k not in new]
        changed = []
        for k in old.keys() & new.keys():
            a, b = old[k], new[k]
            if canonical_json(a) != canonical_json(b):
                fields = sorted(set(a) | set(b), key=str)
                diff = [f for f in fields if canonical_json(a.get(f)) != canonical_json(b.get(f))]
                changed.append(
                    {"key": a.get(key), "before": {f: a.get(f) for f in diff}, "after": {f: b.get(f) for f in diff}}
                )
        changed.sort(key=lambda c: canonical_json(c["key"]))
    out: dict[str, Any] = {}
    for name, items in (("added", added), ("removed", removed), ("changed", changed)):
        if items:
            out[name] = items[:MAX_ROWS_SHOWN]
            out[f"n_{name}"] = len(items)
    return out


def state_diff(
    before: Mapping[str, Any], after: Mapping[str, Any], environments: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The changes from ``before`` to ``after`` (each ``{env_id: saved state}``).

    Returns:
        ``{env_id: {"tables": {table: {"added": [row], "removed": [{key: value}], "changed": [{"key", "before",
        "after"}], "n_added", "n_removed", "n_changed"}}, "meta": {field: {"before", "after"}}}}`` holding only
        what changed (at most :data:`MAX_ROWS_SHOWN` rows per list; the ``n_`` counts are complete); an
        environment in only one side shows as ``{"missing": "before"|"after"}``.
    """
    out: dict[str, Any] = {}
    for env_id in sorted(set(before) | set(after)):
        if env_id not in after or env_id not in before:
            out[env_id] = {"missing": "after" if env_id not in after else "before"}
            continue
        a, b = before[env_id] or {}, after[env_id] or {}
        tables_a, tables_b = a.get("tables") or {}, b.get("tables") or {}
        tables = {}
        for table in sorted(set(tables_a) | set(tables_b), key=str):
            rows_a, rows_b = list(tables_a.get(table) or []), list(tables_b.get(table) or [])
            diff = _table_diff(str(table), rows_a, rows_b, (environments or {}).get(env_id))
            if diff:
                tables[table] = diff
        meta_a, meta_b = a.get("meta") or {}, b.get("meta") or {}
        meta = {
            f: {"before": meta_a.get(f), "after": meta_b.get(f)}
            for f in sorted(set(meta_a) | set(meta_b), key=str)
            if canonical_json(meta_a.get(f)) != canonical_json(meta_b.get(f))
        }
        entry = {**({"tables": tables} if tables else {}), **({"meta": meta} if meta else {})}
        if entry:
            out[env_id] = entry
    return out
