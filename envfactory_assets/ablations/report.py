"""``docs/ablations.md``: what the paper found, what the arms here score, and each ablation's difference
with its paired bootstrap interval (:mod:`envfactory_assets.evaluation.stats`), written from evaluation rows."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envfactory_assets.ablations.plan import ARMS, COMPARISONS, Arm, Comparison
from envfactory_assets.evaluation.stats import compare_on_shared_tasks, per_task_scores
from envfactory_assets.reporting.results_table import BENCHMARKS, results_markdown

COMMAND = "envfactory ablations --config configs/ablations.yaml"
PAPER = (
    "The paper reports gains from both: training data from the topology-aware sampler scores higher "
    "downstream than data from a random-walk sampler, and refined queries score higher than raw ones "
    "(EnvFactory, ablations)."
)

METHOD = (
    "Written by `envfactory ablations` (never typed by hand). Each arm is a full synthesis (sources to "
    "`sft_dataset`) in its own `ENVFACTORY_HOME` under `<main home>/ablations/<arm>`, reading the main "
    "home's OpenAPI corpus, so no arm supersedes the main dataset; then an SFT checkpoint (no GRPO) on "
    "the same number of rows per arm (the configured `max_train_rows`, capped at the smallest arm's "
    "train-split row count). Every arm's checkpoint, the base model and the do-nothing baseline are "
    "evaluated together on the main store's held-out tasks (the same tasks and seeds for every arm), "
    "and each ablation is the paired bootstrap 95% interval of the difference between two arms on "
    "those tasks (docs/evaluation.md). Environments are held out by a hash of their id "
    "(`tooluse/splits.py`), so no arm trains on an environment the main store holds out. The raw-query "
    "arm keeps the refined trajectories' turns and calls and puts back each turn's query as synthesized "
    "(`datasets.query_source: raw`), so it differs from the topology arm only in how the user asks."
)


def compare_arms(
    rows: Iterable[Mapping[str, Any]], comparisons: Sequence[Comparison] = COMPARISONS
) -> list[dict[str, Any]]:
    """Per comparison, benchmark and subset where both arms have a row: the paired bootstrap interval of
    ``treatment - control`` on their shared tasks (each task's headline score averaged over seeds).

    Args:
        rows: ``evaluations`` rows with ``model`` (arm name), ``benchmark``, ``subset``, ``results`` (per task
            and seed, with ``score``) and ``metrics["headline"]``.

    Returns:
        ``[{"question", "control", "treatment", "benchmark", "subset", "control_mean", "treatment_mean",
        "difference": PairedDifference dict or None (no shared task)}]`` in comparison, benchmark, subset order.

    Raises:
        KeyError: a result lacks its row's headline score.
    """
    index = {(r["model"], r["benchmark"], r["subset"]): r for r in rows}
    out = []
    for comp in comparisons:
        keys = sorted(
            {(b, s) for (m, b, s) in index if m == comp.control}
            & {(b, s) for (m, b, s) in index if m == comp.treatment},
            key=lambda k: (list(BENCHMARKS).index(k[0]) if k[0] in BENCHMARKS else 9, k[0], k[1] != "all", k[1]),
        )
        for bench, subset in keys:
            control, treatment = index[(comp.control, bench, subset)], index[(comp.treatment, bench, subset)]
            headline = (control.get("metrics") or {}).get("headline", "reward")
            diff = compare_on_shared_tasks(
                per_task_scores(control["results"], headline), per_task_scores(treatment["results"], headline)
            )
            out.append(
                {
                    "question": comp.question,
                    "control": comp.control,
                    "treatment": comp.treatment,
                    "benchmark": bench,
                    "subset": subset,
                    "control_mean": control.get("mean"),
                    "treatment_mean": treatment.get("mean"),
                    "difference": diff.as_dict() if diff else None,
                }
            )
    return out


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _verdict(d: Mapping[str, Any] | None) -> str:
    if d is None:
        return "no shared task"
    if d["low"] > 0:
        return "ablated arm higher (against the paper)"
    if d["high"] < 0:
        return "ablated arm lower (as in the paper)"
    return "no difference at this sample size"


def _arms_section(arms: Sequence[Arm]) -> list[str]:
    lines = ["| arm | data | settings over the user's config |", "|---|---|---|"]
    for arm in arms:
        settings = "; ".join(f"`{op}.{k}: {v}`" for op, vals in arm.ops.items() for k, v in vals.items())
        lines.append(f"| `{arm.name}` | {arm.what} | {settings} |")
    return lines


def ablations_markdown(
    run: Any | None = None, comparisons: Sequence[Comparison] = COMPARISONS, command: str = COMMAND
) -> str:
    """The whole of ``docs/ablations.md``.

    Args:
        run: an :class:`~envfactory_assets.ablations.orchestrate.AblationRun` (anything with its fields), or
            None before the ablations have run: the page then says so and gives the command.
        comparisons: the comparisons to report (default :data:`.plan.COMPARISONS`).
        command: the command line shown for re-running.

    Returns:
        Markdown text.
    """
    arms = run.arms if run is not None else ARMS
    lines = [
        "# Ablations",
        "",
        METHOD,
        "",
        "## What the paper found",
        "",
        PAPER,
        "",
        "## Arms",
        "",
        *_arms_section(arms),
        "",
    ]
    lines += ["## What we find", ""]
    if run is None:
        lines += [
            (
                "**Not run yet.** The ablations take hours on a 2-core CPU (three full syntheses, three SFT "
                "runs and one evaluation), so they are not part of CI or of the default run. Run them with:"
            ),
            "",
            "```",
            command,
            "```",
            "",
            (
                "on a home whose main pipeline has run (its `rl_dataset` holds the held-out tasks); this page "
                "is then rewritten with the results, the wall time and the configuration."
            ),
        ]
        return "\n".join(lines) + "\n"
    compared = compare_arms(run.evaluations, comparisons)
    lines += [
        f"Every arm trained on **{run.budget}** SFT rows (train-split rows synthesized: "
        + ", ".join(f"`{a}` {n}" for a, n in run.train_rows.items())
        + ").",
        "",
        "| ablation | benchmark | subset | full arm | ablated arm | Δ ablated − full [95% CI] | reading |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in compared:
        d = c["difference"]
        cell = "n/a" if d is None else f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] (n={d['n']})"
        lines.append(
            f"| {c['question']} | {c['benchmark']} | {c['subset']} | `{c['control']}` {_num(c['control_mean'])} "
            f"| `{c['treatment']}` {_num(c['treatment_mean'])} | {cell} | {_verdict(d)} |"
        )
    lines += [
        "",
        (
            "An interval that contains 0 shows no difference at this sample size; the paper's direction "
            "is a negative Δ (the ablated arm drops what the paper adds)."
        ),
        "",
        "### Every model on every benchmark",
        "",
        "Arms are labelled by name; Δ here is the difference to the base model.",
        "",
        results_markdown(run.evaluations),
        "",
        "## Wall time",
        "",
        "| phase | seconds |",
        "|---|---|",
        *[f"| {k} | {v:.0f} |" for k, v in run.seconds.items()],
        "",
        "## Configuration",
        "",
        "Checkpoints: " + ", ".join(f"`{a}` {c.get('id')}" for a, c in run.checkpoints.items()) + ".",
        "",
        "Run config of each arm (after the budget was set):",
        "",
        "```json",
        json.dumps(run.configs, indent=1, sort_keys=True, default=str),
        "```",
    ]
    return "\n".join(lines) + "\n"


def write_ablations(path: Path, run: Any | None = None, **kwargs: Any) -> str:
    """Write :func:`ablations_markdown` to ``path`` atomically (a sibling temporary file renamed); returns it.

    Raises:
        OSError: the file cannot be written (the old one is left as it was).
    """
    path = Path(path)
    text = ablations_markdown(run, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return text
