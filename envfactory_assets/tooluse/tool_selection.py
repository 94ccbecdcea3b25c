"""Which tools a prompt offers: the called tools plus a stable sample of distractors.

Shared by training (SFT and GRPO prompts) and evaluation (held-out synthetic tasks), so that a model is
evaluated on tool blocks cut the way it was trained on.
"""

from __future__ import annotations

import hashlib
from typing import Any


def restrict_tools(row: dict[str, Any], max_tools: int, needed: set[str] | None = None) -> dict[str, Any]:
    """Keep at most ``max_tools`` tools: every tool the row calls (or ``needed``), then distractors in a
    stable pseudo-random order (sha256 of row id and tool name). ``max_tools <= 0`` keeps all tools.

    The tool block dominates prompt length, and CPU training speed is set by prompt length.
    """
    if max_tools <= 0 or len(row["tools"]) <= max_tools:
        return row
    if needed is None:
        needed = {c["function"]["name"] for m in row["messages"] for c in m.get("tool_calls") or []}
    order = sorted(
        row["tools"],
        key=lambda t: (
            t["function"]["name"] not in needed,
            hashlib.sha256(f"{row.get('id')}/{t['function']['name']}".encode()).hexdigest(),
        ),
    )
    keep = {t["function"]["name"] for t in order[: max(max_tools, len(needed))]}
    return {**row, "tools": [t for t in row["tools"] if t["function"]["name"] in keep]}
