"""Store rows of the ``source_resources`` stage (plain Python; the asset in defs/ calls this)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from envfactory_assets.sources.row_ids import source_row_id
from envfactory_assets.sources.scan import (
    DEFAULT_MAX_BYTES,
    DOCUMENT_SUFFIXES,
    Rejection,
    SourceResource,
    corpus_files,
    scan_corpus,
)
from envfactory_assets.store.ids import content_id


def scan_rows(
    corpus_root: Path,
    domains: Iterable[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    path_contains: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Scan ``corpus_root`` into ``(source_resources rows, rejected_resources rows)``.

    ``domains`` keeps only resources of those domains (the others are rejected with reason
    ``domain_not_selected``); ``path_contains`` limits the scan to files whose relative path contains it.
    ``progress(files scanned, files to scan)`` is called once with 0 before the first file, then after
    each file.

    Raises:
        FileNotFoundError: if ``corpus_root`` does not exist.
    """
    wanted = set(domains) if domains else None
    files = corpus_files(corpus_root)
    if path_contains:
        files = [f for f in files if path_contains in f.relative_to(corpus_root).as_posix()]
    accepted: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    root_str = str(corpus_root)
    if progress is not None:
        progress(0, len(files))
    for done, result in enumerate(scan_corpus(corpus_root, files, max_bytes), start=1):
        if isinstance(result, SourceResource) and wanted is not None and result.domain not in wanted:
            result = Rejection(
                result.path, result.sha256, "domain_not_selected", f"domain {result.domain}", result.n_operations
            )
        if isinstance(result, SourceResource):
            row = result.as_row()
            row["corpus_root"] = root_str
            row["id"] = source_row_id(row)
            accepted.append(row)
        else:
            row = result.as_row()
            row["corpus_root"] = root_str
            row["id"] = content_id("rej", row)
            rejected.append(row)
        if progress is not None:
            progress(done, len(files))
    return accepted, rejected


def all_resource_rows(
    corpus_root: Path,
    home: Path,
    domains: Iterable[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    path_contains: str | None = None,
    include_mcp: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both resource kinds: the OpenAPI corpus (:func:`scan_rows`, which reports ``progress``), then every
    installed MCP server's tool list and the files of ``home/user_resources``
    (:mod:`envfactory_assets.sources.resource_kinds`).

    A resource key already taken by the corpus makes a later file a ``duplicate_key`` rejection.
    """
    from envfactory_assets.sources.resource_kinds import extra_resource_rows

    accepted, rejected = scan_rows(corpus_root, domains, max_bytes, path_contains, progress)
    more_acc, more_rej = extra_resource_rows(
        home, domains, {r["resource_key"] for r in accepted}, include_mcp, max_bytes
    )
    return accepted + more_acc, rejected + more_rej


def corpus_coverage(accepted: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> dict[str, Any]:
    """Coverage of the OpenAPI documents scanned (``source_resources`` and ``rejected_resources`` rows, MCP
    tool lists left out, documents over the size limit not counted): documents that yield an environment,
    operations that become tools (within the resource cap), by kind, and the others by reason (a rejected
    document's operations under ``document_<reason>``). Shares are 0 for an empty scan."""
    docs = [r for r in accepted if r["kind"] == "openapi"]
    refused = [r for r in rejected if r["reason"] != "too_large" and r.get("n_operations")]
    by_kind: Counter[str] = Counter()
    unmapped: Counter[str] = Counter()
    for r in docs:
        by_kind.update(r.get("operations_by_kind") or {})
        unmapped.update(r.get("unmapped_by_reason") or {})
    for r in refused:
        unmapped[f"document_{r['reason']}"] += r["n_operations"]
    scanned = len(docs) + sum(
        1 for r in rejected if r["reason"] != "too_large" and r["path"].endswith(DOCUMENT_SUFFIXES)
    )
    operations = sum(by_kind.values()) + sum(unmapped.values())
    mapped = sum(by_kind.values())
    return {
        "documents_scanned": scanned,
        "documents_yielding_environment": len(docs),
        "documents_yielding_share": round(len(docs) / scanned, 4) if scanned else 0.0,
        "operations": operations,
        "operations_mapped": mapped,
        "operations_mapped_share": round(mapped / operations, 4) if operations else 0.0,
        "operations_by_kind": dict(by_kind.most_common()),
        "operations_unmapped_by_reason": dict(unmapped.most_common()),
    }
