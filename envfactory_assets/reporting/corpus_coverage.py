"""Coverage of the corpus by verified tools, read from a store built with every document selected and no cap
of resources per environment (``configs/corpus_coverage.yaml``, driven by ``envfactory coverage``).

A tool counts as verified only when its environment passed verification, its kind's semantic assertion
(the ``semantics`` check) ran on it and passed, and no other check of it failed; a document counts when its
environment has at least :data:`MIN_VERIFIED_TOOLS` verified tools. The denominators are the pipeline's own
(:func:`envfactory_assets.sources.stage.corpus_coverage`): every OpenAPI document under the size limit, and
every operation of those documents, MCP tool lists left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from envfactory_assets.sources.stage import corpus_coverage

#: Verified tools a document's environment needs to count as covered.
MIN_VERIFIED_TOOLS = 3

#: The aims the coverage is measured against: documents with a verified environment of at least
#: :data:`MIN_VERIFIED_TOOLS` verified tools, and operations that become verified tools.
DOCUMENT_AIM, OPERATION_AIM = 0.80, 0.60


def verified_tools(environment: dict[str, Any], verification: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools of ``environment`` (an ``environments`` row) that ``verification`` (its
    ``verified_environments`` row) verified: the environment passed, the tool's ``semantics`` check ran and
    passed, and no check naming the tool failed. Empty for an environment that was not built or did not pass."""
    if environment.get("status") != "built" or verification.get("status") != "passed":
        return []
    checks = verification.get("checks") or []
    failed = {c.get("tool") for c in checks if not c.get("passed")}
    if None in failed:  # a failed check of the whole environment leaves none of its tools verified
        return []
    semantic = {c.get("tool") for c in checks if c.get("check") == "semantics" and c.get("passed")}
    return [t for t in environment.get("tools") or [] if t["name"] in semantic and t["name"] not in failed]


def coverage_figures(
    accepted: list[dict[str, Any]],
    rejected: list[dict[str, Any]],
    environments: Iterable[dict[str, Any]],
    verifications: Iterable[dict[str, Any]],
) -> dict[str, Any]:
    """Verified coverage of the scanned corpus.

    Args:
        accepted, rejected: the ``source_resources`` and ``rejected_resources`` rows of the scan.
        environments, verifications: current ``environments`` and ``verified_environments`` rows.

    Returns:
        ``documents`` (scanned, under the size limit), ``documents_yielding_environment`` (accepted),
        ``documents_built``, ``documents_verified`` (a passed environment), ``documents_covered`` (a passed
        environment with at least :data:`MIN_VERIFIED_TOOLS` verified tools) and its share; ``operations`` (all of
        the scanned documents'), ``tools_built``, ``tools_verified`` and its share of the operations;
        ``built_by_kind`` and ``verified_by_kind``; ``pending`` (accepted documents not yet verified); and the
        scan's own ``scan`` figures (:func:`~envfactory_assets.sources.stage.corpus_coverage`: kinds within the
        default cap, unmapped operations by reason).
    """
    scan = corpus_coverage(accepted, rejected)
    docs = {r["resource_key"] for r in accepted if r["kind"] == "openapi"}
    envs = {r["env_id"]: r for r in environments if r["env_id"] in docs}
    verified = {r["env_id"]: r for r in verifications if r["env_id"] in envs}
    built_by_kind: Counter[str] = Counter()
    verified_by_kind: Counter[str] = Counter()
    covered = passed = 0
    for env_id, env in envs.items():
        built_by_kind.update(t["kind"] for t in env.get("tools") or [])
        ver = verified.get(env_id)
        if ver is None or ver.get("environment_id") != env["id"]:
            continue  # verified for another version of the environment: pending
        tools = verified_tools(env, ver)
        passed += ver["status"] == "passed"
        covered += len(tools) >= MIN_VERIFIED_TOOLS
        verified_by_kind.update(t["kind"] for t in tools)
    scanned = scan["documents_scanned"]
    operations = scan["operations"]
    tools_verified = sum(verified_by_kind.values())
    return {
        "documents": scanned,
        "documents_yielding_environment": len(docs),
        "documents_built": sum(1 for e in envs.values() if e["status"] == "built"),
        "documents_verified": passed,
        "documents_covered": covered,
        "documents_covered_share": round(covered / scanned, 4) if scanned else 0.0,
        "operations": operations,
        "tools_built": sum(built_by_kind.values()),
        "tools_verified": tools_verified,
        "tools_verified_share": round(tools_verified / operations, 4) if operations else 0.0,
        "built_by_kind": dict(built_by_kind.most_common()),
        "verified_by_kind": dict(verified_by_kind.most_common()),
        "pending": sorted(k for k in docs if k not in verified or verified[k].get("environment_id") != envs[k]["id"]),
        "scan": scan,
    }


def stage_time_figures(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per asset step of ``stage_times`` rows: ``runs``, total and longest ``wall_seconds``, and the largest
    ``peak_rss_mib`` of the run process (sandbox workers not counted), for the time and memory each stage of
    a batched run took."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        step = out.setdefault(r["step_key"], {"runs": 0, "seconds": 0.0, "longest_s": 0.0, "peak_rss_mib": 0.0})
        seconds = float(r.get("wall_seconds") or 0.0)
        step["runs"] += 1
        step["seconds"] += seconds
        step["longest_s"] = max(step["longest_s"], seconds)
        step["peak_rss_mib"] = max(step["peak_rss_mib"], float(r.get("peak_rss_mib") or 0.0))
    return out


def coverage_markdown(figures: dict[str, Any], times: dict[str, dict[str, float]] | None = None) -> str:
    """The figures of :func:`coverage_figures` (and :func:`stage_time_figures`) as a Markdown section."""
    docs, ops = figures["documents"], figures["operations"]
    lines = [
        "| | count | share | aim |",
        "|---|---:|---:|---:|",
        f"| documents under the size limit | {docs:,} | | |",
        f"| documents accepted (an environment to build) | {figures['documents_yielding_environment']:,} | "
        f"{_share(figures['documents_yielding_environment'], docs)} | |",
        f"| documents whose environment passed verification | {figures['documents_verified']:,} | "
        f"{_share(figures['documents_verified'], docs)} | |",
        f"| documents with a passed environment of at least {MIN_VERIFIED_TOOLS} verified tools | "
        f"{figures['documents_covered']:,} | {_share(figures['documents_covered'], docs)} | {DOCUMENT_AIM:.0%} |",
        f"| operations | {ops:,} | | |",
        f"| tools built (no cap of resources) | {figures['tools_built']:,} | {_share(figures['tools_built'], ops)} | |",
        f"| verified tools | {figures['tools_verified']:,} | {_share(figures['tools_verified'], ops)} | "
        f"{OPERATION_AIM:.0%} |",
        "",
        "| kind | tools built | verified |",
        "|---|---:|---:|",
    ]
    verified = figures["verified_by_kind"]
    lines += [f"| {k} | {n:,} | {verified.get(k, 0):,} |" for k, n in figures["built_by_kind"].items()]
    unmapped = figures["scan"]["operations_unmapped_by_reason"]
    lines += ["", "| unmapped because (scan, default cap) | operations |", "|---|---:|"]
    lines += [f"| `{k}` | {v:,} |" for k, v in unmapped.items()]
    if figures["pending"]:
        lines += ["", f"Not verified yet: {len(figures['pending']):,} accepted documents (the run is resumable)."]
    if times:
        lines += ["", "| stage | runs | total | longest run | peak memory of a run |", "|---|---:|---:|---:|---:|"]
        lines += [
            f"| {step} | {t['runs']} | {t['seconds'] / 60:.1f} min | {t['longest_s'] / 60:.1f} min | "
            f"{t['peak_rss_mib']:,.0f} MiB |"
            for step, t in times.items()
        ]
    return "\n".join(lines) + "\n"


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"
