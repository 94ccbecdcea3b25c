"""Summaries of the refinement stage for asset metadata (plain values and Markdown text, no Dagster)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from envfactory_assets.synth.filtering import diversity


def accuracy_distribution(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Kept turns by per-turn accuracy (``"0.25"`` ... ``"1.0"``), over every row given."""
    counts = Counter(f"{t['accuracy']:.2f}" for r in rows for t in r["turns"])
    return dict(sorted(counts.items()))


def refined_accuracy_distribution(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Turns whose query refinement changed, by the accuracy of the refined query (reverted ones included,
    at 0.00): how often the operators keep a turn solvable."""
    counts = Counter(f"{t['solve_refined']['accuracy']:.2f}" for r in rows for t in r["turns"]
                     if t.get("solve_refined"))
    return dict(sorted(counts.items()))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def examples_markdown(rows: list[dict[str, Any]], n: int = 5) -> str:
    """A Markdown table of up to ``n`` turns whose query refinement changed or reverted: before, after,
    operators and accuracy."""
    lines = ["| before | after | operators | accuracy |", "|---|---|---|---|"]
    shown = 0
    for r in rows:
        for t in r["turns"]:
            if shown >= n:
                break
            if not t.get("operators"):
                continue
            ops = ", ".join(sorted({o["operator"] + (" (reverted)" if o.get("reverted") else "")
                                    for o in t["operators"]}))
            after = t.get("query_refined_rejected", t["query"])
            lines.append(f"| {_md_cell(t['query_raw'])} | {_md_cell(after)} | {ops} | {t['accuracy']:.2f} |")
            shown += 1
    return "\n".join(lines) if shown else "_no turn was changed by refinement_"


def refinement_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Metadata of ``refined_trajectories``: operator counts (applied / reverted), accuracy distribution of
    kept turns and of refined queries, turns reverted, rejection reasons, near-duplicates removed,
    :func:`~envfactory_assets.synth.filtering.diversity`, and a Markdown table of examples
    (``examples_md``; the asset wraps it as Markdown)."""
    ops = Counter(o["operator"] for r in rows for o in r["operators"] if not o.get("reverted"))
    reverted = Counter(o["operator"] for r in rows for o in r["operators"] if o.get("reverted"))
    turns = [t for r in rows for t in r["turns"]]
    return {
        "operators": dict(ops), "operators_reverted": dict(reverted),
        "accuracy_distribution": accuracy_distribution(rows),
        "refined_accuracy_distribution": refined_accuracy_distribution(rows),
        "mean_accuracy": round(sum(t["accuracy"] for t in turns) / len(turns), 4) if turns else 0.0,
        "turns_reverted": sum(1 for t in turns if "query_refined_rejected" in t),
        "rejection_reasons": dict(Counter(x.split(":")[0][:80] for r in rows for x in r["reasons"]).most_common(10)),
        "near_duplicates_removed": sum(1 for r in rows for x in r["reasons"] if x.startswith("near-duplicate")),
        "diversity": diversity(rows),
        "query_statistics": query_statistics(rows),
        "raw_query_statistics": query_statistics(rows, field="query_raw"),
        "examples_md": examples_markdown(rows),
    }


def raw_examples_markdown(rows: list[dict[str, Any]], n: int = 5) -> str:
    """A Markdown table of the first ``n`` turns of passed raw trajectories: query, calls made, turn count."""
    lines = ["| query | calls | turns in trajectory |", "|---|---|---|"]
    shown = [(r, t) for r in rows if r["status"] == "passed" for t in r["turns"][:1]][:n]
    for r, t in shown:
        calls = ", ".join(f"`{c['name']}`" for c in t["calls"])
        lines.append(f"| {_md_cell(t['query'])} | {calls} | {r['n_turns']} |")
    return "\n".join(lines) if shown else "_no passed trajectory_"


_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _is_identifier_argument(name: str) -> bool:
    return name == "id" or name.endswith("_id") or name.endswith("Id")


def identifier_values(turn: dict[str, Any]) -> list[str]:
    """String values of a turn's identifier arguments (``*_id`` / ``id``) across its calls."""
    return [v for c in turn["calls"] for n, v in c["arguments"].items()
            if _is_identifier_argument(n) and isinstance(v, str) and v]


def query_statistics(rows: list[dict[str, Any]], field: str = "query", sample: int = 1000) -> dict[str, Any]:
    """Figures of how the user queries of refined trajectories read, over the passed rows' kept turns.

    Returns ``{"queries", "distinct_trigrams_per_1000", "literal_identifier_share", "mean_words",
    "refined_differs_share", "operator_share", "accuracy_distribution"}``:

    - ``distinct_trigrams_per_1000``: distinct word 3-grams (lower-cased ``[a-z0-9]`` words) among the first
      ``sample`` queries, scaled to 1,000 queries when there are fewer (so small runs overstate it; compare
      runs of the same size);
    - ``literal_identifier_share``: among turns whose calls take an identifier argument, the share whose
      query (``field``: ``"query"`` or ``"query_raw"``) quotes one of those identifier values;
    - ``mean_words``: words per query; ``refined_differs_share``: share of turns whose ``query`` differs from
      ``query_raw``; ``operator_share``: share of turns with each (not reverted) operator;
      ``accuracy_distribution``: kept turns by per-turn solve accuracy.
    """
    turns = [t for r in rows if r.get("status", "passed") == "passed" for t in r["turns"]]
    queries = [t[field] for t in turns]
    n = len(queries)
    trigrams: set[tuple[str, ...]] = set()
    for q in queries[:sample]:
        toks = _WORD.findall(q.lower())
        trigrams.update(zip(toks, toks[1:], toks[2:]))
    with_ids = [t for t in turns if identifier_values(t)]
    literal = sum(1 for t in with_ids if any(v in t[field] for v in identifier_values(t)))
    ops = Counter(o for t in turns for o in {o["operator"] for o in t.get("operators") or [] if not o.get("reverted")})
    return {
        "queries": n,
        "distinct_trigrams_per_1000": round(len(trigrams) * 1000 / min(n, sample), 1) if n else 0.0,
        "literal_identifier_share": round(literal / len(with_ids), 4) if with_ids else 0.0,
        "mean_words": round(sum(len(_WORD.findall(q.lower())) for q in queries) / n, 2) if n else 0.0,
        "refined_differs_share": round(sum(1 for t in turns if t["query"] != t.get("query_raw", t["query"])) / n, 4)
        if n else 0.0,
        "operator_share": {k: round(v / n, 4) for k, v in sorted(ops.items())},
        "accuracy_distribution": dict(sorted(Counter(f"{t['accuracy']:.2f}" for t in turns if "accuracy" in t).items())),
    }
