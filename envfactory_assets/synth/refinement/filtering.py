"""Trajectory filtering (near-duplicates) and diversity figures (EnvFactory paper, QueryGen filtering).

Two trajectories are near-duplicates when they call the same tool sequence and their user queries are
near-identical: the similarity of their concatenated queries (``difflib.SequenceMatcher.ratio``, 0..1,
on lower-cased text with whitespace collapsed) is at least the threshold. The first of a group in id
order is kept, so the result does not depend on input order.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from typing import Any

DEFAULT_SIMILARITY = 0.9


def tool_sequence(row: dict[str, Any]) -> tuple[str, ...]:
    """Names of every call of a trajectory row, in order across its turns."""
    return tuple(c["name"] for t in row["turns"] for c in t["calls"])


def _query_text(row: dict[str, Any]) -> str:
    return re.sub(r"\s+", " ", " ".join(t["query"] for t in row["turns"]).lower()).strip()


def near_duplicates(rows: list[dict[str, Any]], threshold: float = DEFAULT_SIMILARITY) -> dict[str, str]:
    """``{duplicate_id: reason}`` for every row that near-duplicates an earlier-kept row (``id`` order).

    Only rows with status ``passed`` take part. Raises ValueError for a threshold outside (0, 1].
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"similarity threshold must be in (0, 1], got {threshold}")
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in sorted((r for r in rows if r["status"] == "passed"), key=lambda r: r["id"]):
        groups[tool_sequence(row)].append(row)
    duplicates: dict[str, str] = {}
    for members in groups.values():
        kept: list[tuple[str, str]] = []
        for row in members:
            text = _query_text(row)
            for kept_id, kept_text in kept:
                matcher = difflib.SequenceMatcher(None, kept_text, text, autojunk=False)
                if matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold:
                    ratio = matcher.ratio()
                    if ratio >= threshold:
                        duplicates[row["id"]] = (
                            f"near-duplicate: same tool sequence as {kept_id} and "
                            f"query similarity {ratio:.2f} >= {threshold}"
                        )
                        break
            else:
                kept.append((row["id"], text))
    return duplicates


def diversity(rows: list[dict[str, Any]]) -> dict[str, float | int]:
    """Diversity of the ``passed`` rows: distinct consecutive tool pairs (environment-qualified), environments
    and domains, each also per 1,000 trajectories (``count * 1000 / trajectories``)."""
    ok = [r for r in rows if r["status"] == "passed"]
    pairs, envs, domains = set(), set(), set()
    for r in ok:
        calls = [f"{c['env_id']}.{c['name']}" for t in r["turns"] for c in t["calls"]]
        pairs.update(zip(calls, calls[1:], strict=False))
        envs.update(r["env_ids"])
        domains.update(r["domains"])
    n = len(ok)

    def per_1000(count: int) -> float:
        return round(count * 1000 / n, 2) if n else 0.0

    return {
        "trajectories": n,
        "distinct_tool_pairs": len(pairs),
        "environments": len(envs),
        "domains": len(domains),
        "tool_pairs_per_1000": per_1000(len(pairs)),
        "environments_per_1000": per_1000(len(envs)),
        "domains_per_1000": per_1000(len(domains)),
    }


def apply_filter(rows: list[dict[str, Any]], threshold: float = DEFAULT_SIMILARITY) -> int:
    """Mark near-duplicates ``failed`` with their reason, in place; returns how many were marked."""
    dups = near_duplicates(rows, threshold)
    for r in rows:
        if r["id"] in dups:
            r["status"] = "failed"
            r["reasons"] = [*r["reasons"], dups[r["id"]]]
    return len(dups)
