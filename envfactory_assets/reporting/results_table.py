"""The README results table, rendered from ``evaluations`` rows (never typed by hand).

``envfactory results --readme README.md`` replaces the text between :data:`START` and :data:`END` in
the README with :func:`results_markdown` of the store's current evaluations.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

START = "<!-- results:start -->"
END = "<!-- results:end -->"
STAGE_ORDER = {"base": 0, "sft": 1, "grpo": 2}
COLUMNS = (("synthetic_held_out", "all", "held-out synthetic (reward)"),
           ("synthetic_held_out", "no_overlap", "held-out synthetic, no benchmark-tagged env"),
           ("bfcl_v3_multi_turn_base", "all", "BFCL v3 multi-turn base (accuracy)"))
STAGE_NAMES = {"base": "base", "sft": "SFT", "grpo": "SFT+GRPO"}


def _cell(row: dict[str, Any] | None) -> str:
    if row is None or row.get("mean") is None:
        return "n/a"
    return f"{row['mean']:.3f} ± {row['std'] or 0.0:.3f} (n={row['n_tasks']})"


def results_markdown(rows: Iterable[dict[str, Any]]) -> str:
    """A Markdown table: one line per evaluated model (base, SFT, SFT+GRPO), one column per benchmark.

    Cells are ``mean ± std (n=tasks)``: the mean over sampling seeds of the per-seed mean reward (BFCL:
    share of valid tasks), the standard deviation across seeds, the number of tasks. A line under the
    table names the seeds and the task budget, so a reader knows how small the sample is.

    Returns:
        The Markdown text; a one-line note when there are no rows.
    """
    rows = list(rows)
    if not rows:
        return "_No evaluation in the store yet: materialize `evaluations` (`envfactory run --select evaluations`)._"
    models: dict[str, dict[str, Any]] = {}
    for row in rows:
        models.setdefault(row["model"], {"stage": row["stage"], "cells": {}})["cells"][(row["benchmark"], row["subset"])] = row
    order = sorted(models, key=lambda m: (STAGE_ORDER.get(models[m]["stage"], 9), m))
    lines = ["| model | stage | " + " | ".join(c[2] for c in COLUMNS) + " |", "|---|---|" + "---|" * len(COLUMNS)]
    for name in order:
        model = models[name]
        cells = [_cell(model["cells"].get((b, s))) for b, s, _ in COLUMNS]
        lines.append(f"| `{name}` | {STAGE_NAMES.get(model['stage'], model['stage'])} | " + " | ".join(cells) + " |")
    first = rows[0]
    config = first.get("config") or {}
    sampling = config.get("sampling") or {}
    lines += ["", (f"Seeds {first['seeds']}; temperature {sampling.get('temperature')}, at most "
              f"{sampling.get('max_new_tokens')} new tokens per message and {config.get('max_tool_rounds')} tool "
              "rounds per turn. Mean ± standard deviation across seeds. Written by `envfactory results` "
              "from the `evaluations` table.")]
    return "\n".join(lines)


def replace_between_markers(text: str, body: str) -> str:
    """``text`` with everything between :data:`START` and :data:`END` replaced by ``body``.

    Raises:
        ValueError: the markers are missing, repeated or out of order.
    """
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"expected exactly one {START} followed by one {END}")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{body}\n{END}{tail}"


def update_readme(readme: Path, rows: Iterable[dict[str, Any]]) -> str:
    """Write :func:`results_markdown` of ``rows`` between the markers of ``readme``; returns the table.

    The file is replaced atomically (written to a sibling temporary file, then renamed).

    Raises:
        ValueError: see :func:`replace_between_markers` (the file is left unchanged).
    """
    readme = Path(readme)
    table = results_markdown(rows)
    new = replace_between_markers(readme.read_text(encoding="utf-8"), table)
    tmp = readme.with_name(f".{readme.name}.tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(readme)
    return table
