"""Watching resource folders for the sensor: which files changed since the last look, and what to run.

The sensor's cursor holds everything seen: ``{path: [mtime_ns, size, sha256 prefix, resource key or null]}``
for every document under the watched folders. A file whose size and mtime are unchanged is not read again;
a changed file is hashed and parsed for its resource key. Parsing is budgeted per tick (``max_parses``):
files beyond the budget are left out of the cursor and parsed on a later tick. Sensors watch files, never
the store (one DuckDB writer at a time, docs/design.md, "Paper settings and measured facts").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from envfactory_assets.incremental.partitions import PARTITION_KEY_RE
from envfactory_assets.sources.scan import (
    ENTRY_REASONS,
    Rejection,
    SourceResource,
    corpus_files,
    inspect_file,
    safe_name,
)

SHA_CHARS = 16


def decode_cursor(cursor: str | None) -> tuple[dict[str, list[Any]], bool] | None:
    """``(files map, complete)`` of a cursor string; None for no cursor (the first tick). ``complete`` is
    True once one snapshot has covered every document (until then changes are not yet diffable).

    Raises:
        ValueError: if ``cursor`` is not a cursor this module wrote.
    """
    if not cursor:
        return None
    try:
        data = orjson.loads(cursor)
        files, complete = data["files"], bool(data["complete"])
        if not isinstance(files, dict) or not all(isinstance(v, list) and len(v) == 4 for v in files.values()):
            raise TypeError("files must map paths to [mtime_ns, size, sha256, key]")
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"sensor cursor is not a resource-watch cursor: {exc}") from None
    return files, complete


def encode_cursor(files: dict[str, list[Any]], complete: bool) -> str:
    """The cursor string of a files map (sorted keys, so equal maps give equal cursors)."""
    return orjson.dumps({"files": files, "complete": complete}, option=orjson.OPT_SORT_KEYS).decode()


def snapshot(
    roots: Iterable[Path], previous: dict[str, list[Any]] | None, max_parses: int = 500
) -> tuple[dict[str, list[Any]], int]:
    """``(files map of every document under roots, number of documents left unparsed this tick)``.

    A document whose ``[mtime_ns, size]`` match ``previous`` keeps its entry unread. Rejected documents
    are recorded with key ``None``. Folders that do not exist contribute nothing.
    """
    previous = previous or {}
    files: dict[str, list[Any]] = {}
    parses = left = 0
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for path in corpus_files(root):
            name = safe_name(str(path))  # the cursor is JSON: a raw non-UTF-8 name cannot be encoded
            st = path.stat()
            old = previous.get(name)
            if old is not None and old[0] == st.st_mtime_ns and old[1] == st.st_size:
                files[name] = old
                continue
            if parses >= max_parses:
                left += 1
                if old is not None:
                    files[name] = old  # still the last state seen; re-examined next tick
                continue
            parses += 1
            result = inspect_file(path, root)
            if isinstance(result, Rejection) and result.reason in ENTRY_REASONS:
                sha = ""  # refused unread (a link out of the folder, say): not read for a hash either
            else:
                sha = result.sha256 if result.sha256 else hashlib.sha256(path.read_bytes()).hexdigest()
            key = result.resource_key if isinstance(result, SourceResource) else None
            files[name] = [st.st_mtime_ns, st.st_size, sha[:SHA_CHARS], key]
    return files, left


@dataclass
class WatchPlan:
    """What one sensor tick asks for: partitions to add and ``(partition key, run key)`` runs to request."""

    new_partitions: list[str] = field(default_factory=list)
    runs: list[tuple[str, str]] = field(default_factory=list)


def run_key(key: str, sha: str | None) -> str:
    """Deterministic run key of a resource version: the same content never runs twice."""
    return f"{key}@{sha[:SHA_CHARS]}" if sha else f"{key}@removed"


def plan(
    previous: dict[str, list[Any]] | None,
    current: dict[str, list[Any]],
    partitions: Iterable[str],
    user_roots: Iterable[Path] = (),
) -> WatchPlan:
    """Runs for the partitions whose document changed, appeared or disappeared since ``previous``, and new
    partitions for accepted documents in ``user_roots`` whose key is not a partition yet.

    Documents of the main corpus that are not partitions are not added: which corpus documents become
    environments is the selection policy of ``source_resources`` (per domain). With no ``previous``
    (first tick) the current state is the baseline: only user documents without a partition run.
    """
    known = set(partitions)
    user_prefixes = tuple(str(Path(r)) + "/" for r in user_roots)
    out = WatchPlan()
    by_key_now: dict[str, str] = {}
    for name, (_, _, sha, key) in sorted(current.items()):
        if key and PARTITION_KEY_RE.match(key) and key not in by_key_now:
            by_key_now[key] = sha
            if key not in known and name.startswith(user_prefixes):
                out.new_partitions.append(key)
                known.add(key)
    if previous is None:
        out.runs = [(k, run_key(k, by_key_now[k])) for k in out.new_partitions]
        return out
    by_key_before = {v[3]: v[2] for _, v in sorted(previous.items(), reverse=True) if v[3]}
    for key in sorted(known):
        now, before = by_key_now.get(key), by_key_before.get(key)
        if key in out.new_partitions or (now != before and (now or before)):
            out.runs.append((key, run_key(key, now)))
    return out
