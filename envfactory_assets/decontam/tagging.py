"""Tag environments whose tools overlap a benchmark's, by tool name and description similarity.

A tool overlaps a benchmark tool when the cosine similarity of their ``name: description`` embeddings is at
least ``threshold`` (default 0.8), or when their normalized names are equal and the similarity is at least
``name_threshold`` (default 0.5): a shared generic name such as ``list_users`` alone is not a copy of the
benchmark's API, a ``close_ticket`` that also reads like BFCL's is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from envfactory_assets.decontam.benchmarks import BenchmarkTool
from envfactory_assets.graph.embeddings import ParameterEmbedder, l2_normalize
from envfactory_assets.sources.names import snake_case

DEFAULT_THRESHOLD = 0.8
DEFAULT_NAME_THRESHOLD = 0.5


def _text(name: str, description: str) -> str:
    return f"{name.replace('_', ' ')}: {description[:300]}"


def overlap_rows(
    environments: Iterable[dict[str, Any]],
    reference: list[BenchmarkTool],
    embedder: ParameterEmbedder,
    threshold: float = DEFAULT_THRESHOLD,
    name_threshold: float = DEFAULT_NAME_THRESHOLD,
    reference_embedder: ParameterEmbedder | None = None,
) -> list[dict[str, Any]]:
    """One row per (environment tool, benchmark tool) pair that overlaps.

    Rows: ``env_id``, ``tool_name``, ``benchmark``, ``suite``, ``benchmark_tool``, ``similarity``
    (cosine, 4 decimals), ``match`` (``"name"`` or ``"description"``). Empty when ``reference`` is empty.
    ``reference_embedder`` (default ``embedder``) encodes the reference's texts: the same model, possibly
    behind a cache (the reference is the same in every run).
    """
    envs = list(environments)
    tools = [(e["env_id"], t) for e in envs for t in e["tools"]]
    if not tools or not reference:
        return []
    ours = l2_normalize(np.asarray(embedder.embed([_text(t["name"], t["description"]) for _, t in tools])))
    theirs = (reference_embedder or embedder).embed([_text(b.name, b.description) for b in reference])
    theirs = l2_normalize(np.asarray(theirs))
    sims = ours @ theirs.T
    names = [snake_case(b.name) for b in reference]
    rows = []
    for i, (env_id, tool) in enumerate(tools):
        own = snake_case(tool["name"])
        for j, bench in enumerate(reference):
            by_name = own == names[j] and sims[i, j] >= name_threshold
            if by_name or sims[i, j] >= threshold:
                rows.append(
                    {
                        "env_id": env_id,
                        "tool_name": tool["name"],
                        "benchmark": bench.benchmark,
                        "suite": bench.suite,
                        "benchmark_tool": bench.name,
                        "similarity": round(float(sims[i, j]), 4),
                        "match": "name" if by_name else "description",
                    }
                )
    return rows


def benchmark_tags(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``{env_id: sorted benchmark names}`` of the environments that overlap any benchmark."""
    tags: dict[str, set[str]] = {}
    for row in rows:
        tags.setdefault(row["env_id"], set()).add(row["benchmark"])
    return {env: sorted(b) for env, b in tags.items()}
