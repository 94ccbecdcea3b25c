"""The training mix of the SFT rows, per kind: what each row's last turn trains (no call, calls, parallel calls;
:func:`~envfactory_assets.training.stage.example_kind`, the turn SFT's default ``loss_on: last_turn`` learns
from), the share whose tool names are masked (:mod:`envfactory_assets.synth.datasets.name_masking`) and the share
that offers tools the row never calls (distractors). Shown in the ``sft_dataset`` metadata and the report's
"Datasets" section, so a mix set in config is checked against the mix written.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from envfactory_assets.training.stage import EXAMPLE_KINDS, example_kind


def _function(item: dict[str, Any]) -> dict[str, Any]:
    return item.get("function") or item


def distractors(row: dict[str, Any]) -> int:
    """How many tools of the row's tool list no assistant message of the row calls."""
    called = {_function(c).get("name") for m in row.get("messages") or [] for c in m.get("tool_calls") or []}
    return sum(1 for t in row.get("tools") or [] if _function(t).get("name") not in called)


def sft_mix(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mix of ``sft_dataset`` rows (``messages``, ``tools``, ``names_masked``; a store written before masking
    has no ``names_masked``, which counts as not masked).

    Returns:
        ``{"rows": int, "last_turn_kind_shares": {kind: share} for every kind of
        :data:`~envfactory_assets.training.stage.EXAMPLE_KINDS`, "names_masked_share": share,
        "distractor_share": share of rows offering at least one tool they never call,
        "mean_distractors": tools never called, per row}``; shares in [0, 1], 0.0 without rows.
    """
    n = len(rows)
    kinds = Counter(example_kind(r) for r in rows)
    counts = [distractors(r) for r in rows]

    def share(k: int) -> float:
        return k / n if n else 0.0

    return {
        "rows": n,
        "last_turn_kind_shares": {kind: share(kinds[kind]) for kind in EXAMPLE_KINDS},
        "names_masked_share": share(sum(1 for r in rows if r.get("names_masked"))),
        "distractor_share": share(sum(1 for c in counts if c)),
        "mean_distractors": sum(counts) / n if n else 0.0,
    }


def sft_mix_lines(mix: dict[str, Any]) -> list[str]:
    """Markdown lines stating :func:`sft_mix`'s figures (a line saying there is nothing without rows)."""
    if not mix["rows"]:
        return ["SFT training mix: no SFT rows.", ""]
    kinds = mix["last_turn_kind_shares"]
    what = {"no_call": "no call", "calls": "calls", "parallel": "parallel calls"}
    return [
        f"SFT training mix over {mix['rows']} rows, by what the last turn trains: "
        + ", ".join(f"{what.get(k, k)} {v:.1%}" for k, v in kinds.items())
        + f"; tool names masked (neutral tokens): {mix['names_masked_share']:.1%}; offering tools the row never "
        f"calls (distractors): {mix['distractor_share']:.1%} ({mix['mean_distractors']:.1f} per row).",
        "",
    ]
