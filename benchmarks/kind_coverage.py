"""Coverage of the corpus by tool kinds: how many operations of every document under the size limit become
tools, by kind, and why the others do not (:mod:`envfactory_assets.sources.coverage`).

Every document of the corpus (not the default run's selection, which picks the best-covered ones) is read
as ``source_resources`` reads it, and the figures are the ones its metadata and the ``operation_coverage``
mart report: a document yields an environment when it is accepted; operations count as mapped within the
environment's resource cap (:data:`~envfactory_assets.sources.scan.MAX_RESOURCES_PER_ENV`), and the count
without the cap is printed beside them. With ``--verify N``, N accepted documents
drawn with ``--seed`` are built and verified in the sandbox, and a mapped tool counts as verified when every
check of it passed (its kind's semantic assertion ran and passed). Usage::

    .venv/bin/python -m benchmarks.kind_coverage --verify 100 --json /tmp/coverage.json

With ``--documents FILE`` the sample is drawn only from the accepted documents that file lists (corpus-relative
paths, one a line): the documents a rules change newly accepts, say.

Prints a Markdown summary (documents, operations, by kind, unmapped by reason, verified share).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.builder import MAX_RESOURCES, build_environment
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.settings import corpus_dir
from envfactory_assets.sources.coverage import operation_coverage
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES, MAX_RESOURCES_PER_ENV, load_document
from envfactory_assets.sources.stage import corpus_coverage, scan_rows


def scan(root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """The pipeline's own figures over every document under ``root`` of at most ``max_bytes``
    (:func:`~envfactory_assets.sources.stage.corpus_coverage` of ``source_resources``' rows), plus
    ``mapped_without_cap``: the operations of the accepted documents that would become tools if every
    resource were kept; and ``accepted_docs`` ``[(path, row)]`` for :func:`verify_sample`."""
    accepted, rejected = scan_rows(root, max_bytes=max_bytes)
    coverage = corpus_coverage(accepted, rejected)
    uncapped = 0
    for row in accepted:
        path = root / row["path"]
        spec = load_document(path.read_bytes(), path.suffix.lower())
        uncapped += sum(1 for op in operation_coverage(spec) if op.kind)
    return {
        "documents": len(accepted) + sum(1 for r in rejected if r["reason"] != "too_large"),
        "coverage": coverage,
        "mapped_without_cap": uncapped,
        "accepted_docs": [(root / r["path"], r) for r in accepted],
    }


def verify_sample(
    accepted_docs: list[tuple[Path, dict[str, Any]]], n: int, seed: int, resource_cap: int | None = MAX_RESOURCES
) -> dict[str, Any]:
    """Build and verify ``n`` accepted documents drawn with ``seed``, each with at most ``resource_cap`` resources
    (None: every one, as the corpus coverage command builds them): tools built, tools whose every check passed,
    environments passed, per kind."""
    rng = random.Random(seed)
    sample = rng.sample(accepted_docs, min(n, len(accepted_docs)))
    built: Counter[str] = Counter()
    verified: Counter[str] = Counter()
    passed_envs = 0
    for path, row in sample:
        spec = load_document(path.read_bytes(), path.suffix.lower())
        try:
            env = build_environment(row, spec, resource_cap)
        except Exception as exc:  # a document the builder refuses counts its tools as not verified
            print(f"  build failed: {row['path']}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        report = verify_environment(env)
        passed_envs += report.status == "passed"
        failed_tools = {c.tool for c in report.checks if not c.passed}
        env_wide_failure = any(not c.passed and c.tool is None for c in report.checks)
        checked = {c.tool for c in report.checks if c.check == "semantics" and c.passed}
        for tool in env["tools"]:
            built[tool["kind"]] += 1
            if tool["name"] in checked and tool["name"] not in failed_tools and not env_wide_failure:
                verified[tool["kind"]] += 1
    return {"environments": len(sample), "passed": passed_envs, "built": dict(built), "verified": dict(verified)}


def markdown(result: dict[str, Any], seconds: float) -> str:
    cov = result["coverage"]
    ops = max(1, cov["operations"])
    lines = [
        f"Documents under the size limit: {result['documents']:,}; yielding an environment: "
        f"{cov['documents_yielding_environment']:,} ({cov['documents_yielding_share']:.1%}).",
        f"Operations: {cov['operations']:,}; mapped to a tool kind within the resource cap "
        f"({MAX_RESOURCES_PER_ENV} per environment): {cov['operations_mapped']:,} "
        f"({cov['operations_mapped_share']:.1%}); without the cap: {result['mapped_without_cap']:,} "
        f"({result['mapped_without_cap'] / ops:.1%}). Scan time {seconds:.0f} s.",
        "",
        "| kind | operations |",
        "|---|---:|",
    ]
    lines += [f"| {k} | {v:,} |" for k, v in cov["operations_by_kind"].items()]
    lines += ["", "| unmapped because | operations |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" for k, v in cov["operations_unmapped_by_reason"].items()]
    if "verification" in result:
        ver = result["verification"]
        lines += [
            "",
            f"Verified sample: {ver['environments']} environments, {ver['passed']} passed.",
            "",
            "| kind | tools built | every check passed |",
            "|---|---:|---:|",
        ]
        lines += [f"| {k} | {n:,} | {ver['verified'].get(k, 0):,} |" for k, n in sorted(ver["built"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None, help="corpus folder (default: the installed corpus)")
    parser.add_argument("--verify", type=int, default=0, help="build and verify this many accepted documents")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    parser.add_argument(
        "--documents",
        type=Path,
        default=None,
        help="draw the verified sample only from these accepted documents (corpus-relative paths, one a line)",
    )
    parser.add_argument(
        "--uncapped", action="store_true", help="build the verified sample with every resource of each document"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = scan(args.root or corpus_dir())
    seconds = time.perf_counter() - started
    if args.verify:
        pool = result["accepted_docs"]
        if args.documents is not None:
            wanted = {line.strip() for line in args.documents.read_text().splitlines() if line.strip()}
            pool = [(path, row) for path, row in pool if row["path"] in wanted]
            if not pool:
                parser.error(f"--documents {args.documents}: none of its paths is an accepted document")
        cap = None if args.uncapped else MAX_RESOURCES
        result["verification"] = verify_sample(pool, args.verify, args.seed, cap)
    result.pop("accepted_docs")
    print(markdown(result, seconds))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
