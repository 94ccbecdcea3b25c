"""Scanning several resource folders at once: the OpenAPI corpus plus a user folder of documents."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.store.ids import content_id


def scan_roots(roots: Iterable[Path], domains: Iterable[str] | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
               path_contains: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`scan_rows` over each of ``roots`` in order; a folder that does not exist is skipped, except
    the first (the corpus), which raises FileNotFoundError.

    A resource key already accepted from an earlier root makes the later document a ``duplicate_key``
    rejection, so one key always names one document.
    """
    accepted: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, root in enumerate(roots):
        if i > 0 and not Path(root).is_dir():
            continue
        ok, bad = scan_rows(Path(root), domains, max_bytes, path_contains)
        rejected += bad
        for row in ok:
            if row["resource_key"] in seen:
                rej = {"path": row["path"], "corpus_root": row["corpus_root"], "sha256": row["sha256"],
                       "reason": "duplicate_key",
                       "detail": f"resource key {row['resource_key']} already taken by a document of an earlier folder"}
                rej["id"] = content_id("rej", rej)
                rejected.append(rej)
            else:
                seen.add(row["resource_key"])
                accepted.append(row)
    return accepted, rejected
