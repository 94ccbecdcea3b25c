"""Coverage of the corpus by tool kinds: how many operations of every document under the size limit become
tools, by kind, and why the others do not (:mod:`envfactory_assets.sources.coverage`).

Every document of the corpus (not the default run's selection, which picks the best-covered ones) is read
as ``source_resources`` reads it (:func:`~envfactory_assets.sources.scan.inspect_file`); a document yields
an environment when it is accepted. Operations count as mapped within the environment's resource cap
(:data:`~envfactory_assets.sources.scan.MAX_RESOURCES_PER_ENV`). With ``--verify N``, N accepted documents
drawn with ``--seed`` are built and verified in the sandbox, and a mapped tool counts as verified when every
check of it passed (its kind's semantic assertion ran and passed). Usage::

    .venv/bin/python -m benchmarks.kind_coverage --verify 100 --json /tmp/coverage.json

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

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.settings import corpus_dir
from envfactory_assets.sources.coverage import operation_coverage, summarize
from envfactory_assets.sources.scan import (
    DEFAULT_MAX_BYTES,
    MAX_RESOURCES_PER_ENV,
    SourceResource,
    corpus_files,
    inspect_file,
    load_document,
)


def scan(root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """``{"documents", "accepted", "rejected": {reason: n}, "coverage": summary, "accepted_docs": [...]}``
    over every document under ``root`` of at most ``max_bytes``."""
    docs = accepted = 0
    rejected: Counter[str] = Counter()
    coverage = []
    accepted_docs: list[tuple[Path, dict[str, Any]]] = []
    for path in corpus_files(root):
        if path.stat().st_size > max_bytes:
            continue
        docs += 1
        result = inspect_file(path, root, max_bytes)
        if not isinstance(result, SourceResource):
            rejected[result.reason] += 1
        else:
            accepted += 1
            accepted_docs.append((path, result.as_row()))
        try:
            spec = load_document(path.read_bytes(), path.suffix.lower())
            ops = operation_coverage(spec, MAX_RESOURCES_PER_ENV) if isinstance(spec, dict) else []
        except Exception:  # an unreadable document has no operations to count
            ops = []
        if not isinstance(result, SourceResource):
            # a rejected document's operations become no tool, whatever extraction found
            ops = [op if op.kind is None else type(op)(op.method, op.path, None, f"document_{result.reason}")
                   for op in ops]
        coverage.extend(ops)
    return {"documents": docs, "accepted": accepted, "rejected": dict(rejected), "coverage": summarize(coverage),
            "accepted_docs": accepted_docs}


def verify_sample(accepted_docs: list[tuple[Path, dict[str, Any]]], n: int, seed: int) -> dict[str, Any]:
    """Build and verify ``n`` accepted documents drawn with ``seed``: tools built, tools whose every check
    passed, environments passed, per kind."""
    rng = random.Random(seed)
    sample = rng.sample(accepted_docs, min(n, len(accepted_docs)))
    built: Counter[str] = Counter()
    verified: Counter[str] = Counter()
    passed_envs = 0
    for path, row in sample:
        spec = load_document(path.read_bytes(), path.suffix.lower())
        try:
            env = build_environment(row, spec)
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
    lines = [f"Documents under the size limit: {result['documents']:,}; yielding an environment: "
             f"{result['accepted']:,} ({result['accepted'] / max(1, result['documents']):.1%}).",
             f"Operations: {cov['operations']:,}; mapped to a tool kind: {cov['mapped']:,} "
             f"({cov['mapped'] / max(1, cov['operations']):.1%}). Scan time {seconds:.0f} s.", "",
             "| kind | operations |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" for k, v in sorted(cov["by_kind"].items(), key=lambda x: -x[1])]
    lines += ["", "| unmapped because | operations |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" for k, v in sorted(cov["unmapped"].items(), key=lambda x: -x[1])]
    if "verification" in result:
        ver = result["verification"]
        lines += ["", f"Verified sample: {ver['environments']} environments, {ver['passed']} passed.", "",
                  "| kind | tools built | every check passed |", "|---|---:|---:|"]
        lines += [f"| {k} | {n:,} | {ver['verified'].get(k, 0):,} |" for k, n in sorted(ver["built"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None, help="corpus folder (default: the installed corpus)")
    parser.add_argument("--verify", type=int, default=0, help="build and verify this many accepted documents")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = scan(args.root or corpus_dir())
    seconds = time.perf_counter() - started
    if args.verify:
        result["verification"] = verify_sample(result["accepted_docs"], args.verify, args.seed)
    result.pop("accepted_docs")
    print(markdown(result, seconds))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
