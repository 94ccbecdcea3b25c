"""The results table, rendered from ``evaluations`` rows (never typed by hand).

``envfactory results --into docs/evaluation.md`` replaces the text between :data:`START` and :data:`END` in
that Markdown file with :func:`results_markdown` of the store's current evaluations; ``--section NAME``
writes between ``<!-- results:NAME:start -->`` and ``<!-- results:NAME:end -->`` instead (:func:`markers`),
so one page can hold the default run's table and a benchmark configuration's, each from its own store.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

START = "<!-- results:start -->"
END = "<!-- results:end -->"
_SECTION = re.compile(r"[a-z][a-z0-9_]{0,63}")
STAGE_ORDER = {"base": 0, "do_nothing": 1, "sft": 2, "grpo": 3}
STAGE_NAMES = {"base": "base", "do_nothing": "does nothing", "sft": "SFT", "grpo": "SFT+GRPO"}
#: Known benchmarks in table order: (title, headline score's name, secondary metric key and its name or None).
#: A benchmark not listed here gets a table too, after these, titled by its name.
BENCHMARKS = {
    "synthetic_held_out": (
        "Held-out synthetic tasks (environments never trained on)",
        "task success",
        ("reward", "hybrid reward"),
    ),
    "bfcl_v3_multi_turn_base": ("BFCL v3 multi-turn base", "accuracy", None),
    "bfcl_v3_single_turn": ("BFCL v3 single-turn (non-live AST)", "accuracy", None),
}
SUBSET_NAMES = {"all": "all", "no_overlap": "no benchmark-tagged env"}
#: Titles of the measures a benchmark reports beside its headline (``metrics["measures"]``,
#: :class:`~envfactory_assets.evaluation.stats.Measure`); one table each, under the benchmark's table.
MEASURE_TITLES = {
    "call_rate": "must-call call rate (share of tasks whose right answer is a call where the model made at "
    "least one parseable call; `irrelevance` excluded)",
    "parse_failure": "parse-failure share (outputs with an undecodable call block, or call-looking text that "
    "parses to no call; lower is better)",
    "balanced": "balanced score (mean of the accuracies of simple, multiple, parallel, parallel_multiple and "
    "irrelevance, equal weights; interval: paired bootstrap resampling tasks within each category)",
}


def _fmt_diff(d: dict[str, Any]) -> str:
    return f"Δ {d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def _cell(row: dict[str, Any] | None) -> str:
    if row is None or row.get("mean") is None:
        return "n/a"
    return _value_cell(row, row.get("metrics") or {}, row.get("stage"))


def _measure_cell(row: dict[str, Any] | None, name: str) -> str:
    summary = ((row or {}).get("metrics") or {}).get("measures", {}).get(name)
    if not summary or summary.get("mean") is None:
        return "not measured"
    return _value_cell(summary, summary, (row or {}).get("stage"))


def _value_cell(value: dict[str, Any], comparisons: dict[str, Any], stage: str | None) -> str:
    text = f"{value['mean']:.3f} ± {value.get('std') or 0.0:.3f}"
    diff = comparisons.get("vs_base")
    over_parent = comparisons.get("vs_parent")
    # one line per cell: an HTML line break is stripped by the Dagster UI's Markdown and shows as text on
    # the terminal, where the run summary prints this table
    if diff:
        text = f"{text}; {_fmt_diff(diff)}"
    if over_parent:
        parent = "SFT" if stage == "grpo" else "parent"
        text = f"{text}; over {parent} {_fmt_diff(over_parent)}"
    return text


def _secondary(row: dict[str, Any] | None, key: str) -> str:
    value = None if row is None else (row.get("metrics") or {}).get(key)
    return "n/a" if value is None else f"{value:.3f}"


def _subset_order(subset: str) -> tuple[int, str]:
    return ({"all": 0, "no_overlap": 1}.get(subset, 2), subset)


def results_markdown(rows: Iterable[dict[str, Any]]) -> str:
    """Markdown tables, one per benchmark: one line per model (base, the do-nothing baseline, SFT, SFT+GRPO),
    one column per subset (``all``, categories, ``no_overlap``), plus the benchmark's secondary metric.

    A cell is ``mean ± std`` (the mean over sampling seeds of the per-seed mean headline score, the standard
    deviation across seeds) and, for every model but the base one, ``Δ diff [low, high]``: the difference to
    the base model's mean on the same tasks with its paired bootstrap 95% interval (``metrics["vs_base"]``,
    :func:`envfactory_assets.evaluation.run.add_comparisons`). Column heads give the number of tasks. A line
    under the tables names the seeds, the sampling and the interval's method, so a reader knows how small the
    sample is and what an interval that contains 0 means.

    Returns:
        The Markdown text; a one-line note when there are no rows.
    """
    rows = list(rows)
    if not rows:
        return "_No evaluation in the store yet: materialize `evaluations` (`envfactory run --select evaluations`)._"
    by_benchmark: dict[str, dict[str, Any]] = {}
    for row in rows:
        bench = by_benchmark.setdefault(row["benchmark"], {"models": {}, "subsets": {}})
        bench["models"].setdefault(row["model"], {"stage": row["stage"], "cells": {}})["cells"][row["subset"]] = row
        bench["subsets"][row["subset"]] = max(bench["subsets"].get(row["subset"], 0), row.get("n_tasks") or 0)
    order = [b for b in BENCHMARKS if b in by_benchmark] + sorted(b for b in by_benchmark if b not in BENCHMARKS)
    lines: list[str] = []
    for name in order:
        bench = by_benchmark[name]
        title, headline, secondary = BENCHMARKS.get(name, (name, None, None))
        if headline is None:
            some = next(iter(next(iter(bench["models"].values()))["cells"].values()))
            headline = (some.get("metrics") or {}).get("headline") or "score"
        subsets = sorted(bench["subsets"], key=_subset_order)
        heads = [f"{SUBSET_NAMES.get(s, s)} (n={bench['subsets'][s]})" for s in subsets]
        if secondary:
            heads.append(f"{secondary[1]} (all, secondary)")
        lines += [
            f"**{title}**: {headline}",
            "",
            "| model | stage | " + " | ".join(heads) + " |",
            "|---|---|" + "---|" * len(heads),
        ]
        models = bench["models"]
        for model in sorted(models, key=lambda m: (STAGE_ORDER.get(models[m]["stage"], 9), m)):
            cells = [_cell(models[model]["cells"].get(s)) for s in subsets]
            if secondary:
                cells.append(_secondary(models[model]["cells"].get("all"), secondary[0]))
            stage = models[model]["stage"]
            lines.append(f"| `{model}` | {STAGE_NAMES.get(stage, stage)} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += _measure_tables(title, bench, subsets)
    first = rows[0]
    config = first.get("config") or {}
    sampling = config.get("sampling") or {}
    diff = next((d for r in rows if (d := (r.get("metrics") or {}).get("vs_base"))), None)
    method = (
        ""
        if diff is None
        else f" Δ: the model's mean minus the base model's on the same tasks, with a paired bootstrap "
        f"{diff['confidence']:.0%} interval over tasks ({diff['resamples']:,} resamples, seed {diff['seed']}; "
        "docs/evaluation.md); an interval that contains 0 shows no difference at this sample size."
        + (
            " 'over SFT': the same interval for the GRPO checkpoint against its SFT parent."
            if any((r.get("metrics") or {}).get("vs_parent") for r in rows)
            else ""
        )
    )
    lines += [
        (
            f"Seeds {first['seeds']}; temperature {sampling.get('temperature')}, at most "
            f"{sampling.get('max_new_tokens')} new tokens per message and {config.get('max_tool_rounds')} tool "
            "rounds per turn. Mean ± standard deviation across seeds." + method + " `does nothing` is a built-in "
            "policy that never calls a tool. Written by `envfactory results` from the `evaluations` table."
        )
    ]
    return "\n".join(lines)


def _measure_tables(title: str, bench: dict[str, Any], subsets: list[str]) -> list[str]:
    """One table per measure the benchmark's rows report (:data:`MEASURE_TITLES`), one column per subset where
    some model has it measured; a cell a model lacks reads ``not measured`` (never 0)."""
    models = bench["models"]
    names: dict[str, None] = {}
    for model in models.values():
        for row in model["cells"].values():
            names.update(dict.fromkeys((row.get("metrics") or {}).get("measures") or {}))
    lines: list[str] = []
    for name in names:
        measured = [
            s
            for s in subsets
            if any(
                ((m["cells"].get(s, {}).get("metrics") or {}).get("measures") or {}).get(name, {}).get("mean")
                is not None
                for m in models.values()
            )
        ]
        if not measured:
            continue
        heads = []
        for s in measured:
            n = max(
                (((m["cells"].get(s, {}).get("metrics") or {}).get("measures") or {}).get(name) or {}).get("n_tasks")
                or 0
                for m in models.values()
            )
            heads.append(f"{SUBSET_NAMES.get(s, s)} (n={n})")
        lines += [
            f"**{title}**: {MEASURE_TITLES.get(name, name)}",
            "",
            "| model | stage | " + " | ".join(heads) + " |",
            "|---|---|" + "---|" * len(heads),
        ]
        for model in sorted(models, key=lambda m: (STAGE_ORDER.get(models[m]["stage"], 9), m)):
            stage = models[model]["stage"]
            cells = [_measure_cell(models[model]["cells"].get(s), name) for s in measured]
            lines.append(f"| `{model}` | {STAGE_NAMES.get(stage, stage)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def markers(section: str | None = None) -> tuple[str, str]:
    """The ``(start, end)`` comment markers of a results section: :data:`START`/:data:`END` for None, else
    ``<!-- results:<section>:start -->`` and its end.

    Raises:
        ValueError: ``section`` is not a lower-case name (a letter, then letters, digits or ``_``; at most
            64 characters), so no marker can contain ``-->`` or match another section's.
    """
    if section is None:
        return START, END
    if not isinstance(section, str) or not _SECTION.fullmatch(section):
        raise ValueError(
            f"results section {section!r}: expected a lower-case name such as 'cpu_benchmark' "
            "(a letter, then letters, digits or '_'; at most 64 characters)"
        )
    return f"<!-- results:{section}:start -->", f"<!-- results:{section}:end -->"


def replace_between_markers(text: str, body: str, section: str | None = None) -> str:
    """``text`` with everything between the section's start and end markers (:func:`markers`) replaced by
    ``body``.

    Raises:
        ValueError: the markers are missing, repeated or out of order, or ``section`` is not a valid name.
    """
    start, end = markers(section)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"expected exactly one {start} followed by one {end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{body}\n{end}{tail}"


def update_markdown(page: Path, rows: Iterable[dict[str, Any]], section: str | None = None) -> str:
    """Write :func:`results_markdown` of ``rows`` between the markers of the Markdown file ``page`` (those of
    ``section``, :func:`markers`); returns the table. The repository keeps its markers in
    ``docs/evaluation.md``.

    The file is replaced atomically (written to a sibling temporary file, then renamed).

    Raises:
        FileNotFoundError: ``page`` does not exist.
        ValueError: see :func:`replace_between_markers` (the file is left unchanged).
    """
    page = Path(page)
    table = results_markdown(rows)
    new = replace_between_markers(page.read_text(encoding="utf-8"), table, section)
    tmp = page.with_name(f".{page.name}.tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(page)
    return table
