"""Loss and reward curves of ``checkpoints`` rows as SVG pictures, and the Markdown the asset's metadata shows.

Drawn as plain SVG text (no plotting library), like the tool graph's picture (``graph/stats.py``), and embedded
as data URIs so the Dagster UI shows them inside Markdown metadata.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from typing import Any

from envfactory_assets.reporting.results_table import STAGE_NAMES

#: (stage, key in the row's ``metrics``, picture title, line colour); a series a row lacks is not drawn
CURVES = (
    ("sft", "loss_history", "SFT training loss per step", "#1f77b4"),
    ("grpo", "reward_mean_per_step", "GRPO mean reward per step (band: ± std across rollouts)", "#2ca02c"),
    ("grpo", "loss_per_step", "GRPO loss per step", "#d62728"),
)
#: the ``metrics`` key holding the spread drawn around a series, where there is one
BANDS = {"reward_mean_per_step": "reward_std_per_step"}


def _number(value: float) -> str:
    return f"{value:.3g}"


def curve_svg(
    values: Sequence[float],
    title: str,
    colour: str = "#1f77b4",
    band: Sequence[float] | None = None,
    width: int = 420,
    height: int = 240,
) -> str:
    """SVG text of one curve: ``values[i]`` at step ``i + 1``, a dot per step, the y range labelled at its ends,
    and, when ``band`` (same length) is given, a shaded band ``values[i] ± band[i]``.

    Raises:
        ValueError: ``values`` is empty or holds a value that is not finite, or ``band``'s length differs.
    """
    values = [float(v) for v in values]
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"curve {title!r}: needs at least one finite value, got {values[:5]}")
    if band is not None and len(band) != len(values):
        raise ValueError(f"curve {title!r}: band has {len(band)} values for {len(values)} steps")
    spread = [float(b) for b in band] if band is not None else [0.0] * len(values)
    low = min(v - s for v, s in zip(values, spread, strict=False))
    high = max(v + s for v, s in zip(values, spread, strict=False))
    if high - low < 1e-12:  # a flat curve (or one step): centre it in a small range
        low, high = low - 0.5, high + 0.5
    left, right, top, bottom = 56, 16, 28, 34

    def x(i: int) -> float:
        return left + (i / (len(values) - 1) if len(values) > 1 else 0.5) * (width - left - right)

    def y(v: float) -> float:
        return top + (high - v) / (high - low) * (height - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" font-size="12">{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#333"/>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#333"/>',
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{_number(high)}</text>',
        f'<text x="{left - 4}" y="{height - bottom}" text-anchor="end">{_number(low)}</text>',
        f'<text x="{left}" y="{height - bottom + 14}" text-anchor="middle">1</text>',
        f'<text x="{width - right}" y="{height - bottom + 14}" text-anchor="end">{len(values)}</text>',
        f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6}" text-anchor="middle">step</text>',
    ]
    if band is not None and any(spread):
        outline = [(x(i), y(v + s)) for i, (v, s) in enumerate(zip(values, spread, strict=False))]
        outline += [(x(i), y(v - s)) for i, (v, s) in reversed(list(enumerate(zip(values, spread, strict=False))))]
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in outline)
        parts.append(f'<polygon points="{points}" fill="{colour}" fill-opacity="0.15" stroke="none"/>')
    line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    parts += [
        (
            f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}"><title>step {i + 1}: '
            f"{v:.4g}</title></circle>"
        )
        for i, v in enumerate(values)
    ]
    parts.append("</svg>")
    return "\n".join(parts)


def _data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def checkpoint_curves_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown for the ``checkpoints`` asset: a table of every checkpoint (stage, id, path on disk, steps),
    then one picture per logged series (:data:`CURVES`: SFT loss, GRPO mean reward with its spread, GRPO loss)
    as an inline SVG image, then each series' first, last, lowest and highest value as a table, so the numbers
    are readable where images are not shown.

    Args:
        rows: ``checkpoints`` rows (``stage``, ``id``, ``path``, ``metrics``); series are read from ``metrics``.

    Returns:
        The Markdown text; series with no logged step are named as such instead of drawn.
    """
    by_stage = {row["stage"]: row for row in rows}
    lines = ["| stage | checkpoint | path | steps |", "|---|---|---|---|"]
    lines += [
        f"| {STAGE_NAMES.get(r['stage'], r['stage'])} | `{r['id']}` | `{r['path']}` | "
        f"{(r.get('metrics') or {}).get('steps')} |"
        for r in rows
    ]
    pictures, summary, missing = (
        [],
        ["| series | steps | first | last | lowest | highest |", "|---|---|---|---|---|---|"],
        [],
    )
    for stage, key, title, colour in CURVES:
        if stage not in by_stage:
            continue
        metrics = by_stage[stage].get("metrics") or {}
        values = [float(v) for v in metrics.get(key) or [] if v is not None and math.isfinite(float(v))]
        if not values:
            missing.append(title)
            continue
        band = metrics.get(BANDS[key]) if key in BANDS else None
        band = band if band is not None and len(band) == len(values) else None
        pictures.append(f"![{title}]({_data_uri(curve_svg(values, title, colour, band))})")
        summary.append(
            f"| {title} | {len(values)} | {values[0]:.4g} | {values[-1]:.4g} | {min(values):.4g} | {max(values):.4g} |"
        )
    parts = ["\n".join(lines)]
    if pictures:
        parts += [" ".join(pictures), "\n".join(summary)]
    if missing:
        parts.append("No step logged for: " + "; ".join(missing) + ".")
    return "\n\n".join(parts)
