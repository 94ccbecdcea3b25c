"""``docs/ablations.md``: what the paper found, what the arms here score, and each ablation's difference
with its paired bootstrap interval (:mod:`envfactory_assets.evaluation.stats`), written from evaluation rows."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envfactory_assets.ablations.plan import ARMS, COMPARISONS, Arm, Comparison
from envfactory_assets.ablations.steps import STEPS
from envfactory_assets.evaluation.stats import compare_on_shared_tasks, per_task_scores
from envfactory_assets.reporting.results_table import BENCHMARKS, results_markdown

#: The commands that materialize the ablations, one step at a time or all at once.
COMMANDS = (
    "envfactory ablations --config configs/ablations.yaml                       # every arm, every step, the page",
    "envfactory ablations --config configs/ablations.yaml --arm random_walk --step data   # one arm's one step",
    "envfactory run --select ablation_data --partition random_walk --config configs/ablations.yaml  # the same",
    "envfactory ablations --step report --write-docs                            # this page, into docs/",
)
PAPER = (
    "The paper reports gains from both: training data from the topology-aware sampler scores higher "
    "downstream than data from a random-walk sampler, and refined queries score higher than raw ones "
    "(EnvFactory, ablations). In the table below the paper's direction is a negative Δ (the ablated arm lower)."
)

METHOD = (
    "Written by the `ablations_report` asset (never typed by hand) from whatever arms have been evaluated. "
    "The ablations are Dagster assets partitioned by arm, left out of a plain `envfactory run`: "
    "`ablation_data` is a full synthesis (sources to `sft_dataset`) in the arm's own `ENVFACTORY_HOME` under "
    "`<main home>/ablations/<arm>`, reading the main home's OpenAPI corpus, so no arm supersedes the main "
    "dataset; `ablation_checkpoint` trains an SFT checkpoint (no GRPO) on the same number of rows for every "
    "arm (the configured `max_train_rows`; an arm with fewer train-split rows is refused); "
    "`ablation_evaluation` evaluates that checkpoint on the main store's held-out tasks (the same tasks and "
    "seeds for every arm; the base model and the do-nothing baseline come from the evaluation result cache, "
    "computed once). Each step is resumable: a step already finished with the same settings and inputs is "
    "skipped (`<arm home>/ablation_steps.json`). Each ablation is the paired bootstrap 95% interval of the "
    "difference between two arms on their shared tasks (docs/evaluation.md). Environments are held out by a "
    "hash of their id (`tooluse/splits.py`), so no arm trains on an environment the main store holds out. "
    "The raw-query arm copies the topology arm's finished store (its synthesis up to the refined trajectories) "
    "and runs only the datasets step, keeping the refined trajectories' turns and calls and putting back each "
    "turn's query as synthesized (`datasets.query_source: raw`), so it differs from the topology arm only in "
    "how the user asks."
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
    lines = ["| arm | data | settings over `synthesis_config` |", "|---|---|---|"]
    for arm in arms:
        settings = "; ".join(f"`{op}.{k}: {v}`" for op, vals in arm.ops.items() for k, v in vals.items())
        what = arm.what
        if arm.shares_synthesis_of:
            what += f"; the `{arm.shares_synthesis_of}` arm's synthesis up to the refined trajectories, copied"
        lines.append(f"| `{arm.name}` | {what} | {settings} |")
    return lines


def _steps_section(steps: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per arm: which steps finished, the rows synthesized and trained on, and each step's seconds."""
    lines = [
        "| arm | steps finished | train-split SFT rows | rows trained on | SFT checkpoint "
        "| seconds (data / SFT / evaluation) |",
        "|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        entries = steps.get(arm.name) or {}
        data = (entries.get("data") or {}).get("outputs") or {}
        ckpt = (entries.get("checkpoint") or {}).get("outputs") or {}
        done = [s for s in STEPS if s in entries] or ["none"]
        seconds = " / ".join(
            f"{entries[s]['seconds']:.0f}" if s in entries and entries[s].get("seconds") is not None else "-"
            for s in STEPS
        )
        lines.append(
            f"| `{arm.name}` | {', '.join(done)} | {data.get('train_rows', '-')} | {ckpt.get('training_rows', '-')} "
            f"| {ckpt.get('checkpoint_id', '-')} | {seconds} |"
        )
    return lines


def ablations_markdown(
    evaluations: Sequence[Mapping[str, Any]],
    steps: Mapping[str, Mapping[str, Any]],
    comparisons: Sequence[Comparison] = COMPARISONS,
) -> str:
    """The whole of ``docs/ablations.md``, from whatever arms exist.

    Args:
        evaluations: ``evaluations``-shaped rows of every evaluated arm (``model``: the arm's name), the base
            model and the do-nothing baseline; empty before any arm is evaluated (the page then says so).
        steps: arm name -> its step ledger entries (:meth:`.steps.StepLedger.entries`); arms without one are
            listed as not started.
        comparisons: the comparisons to report (default :data:`.plan.COMPARISONS`); one whose arms are not both
            evaluated is listed as waiting for them.

    Returns:
        Markdown text.
    """
    evaluated = {r["model"] for r in evaluations}
    run = bool(evaluated & {a.name for a in ARMS})
    lines = ["# Ablations", ""]
    if not run:  # said first: a reader must not take the empty tables below for a measurement
        lines += ['**No arm has been run yet: this page holds no measurement.** How to run them: "What we find".', ""]
    lines += [METHOD, "", "## What the paper found", "", PAPER, "", "## Arms", ""]
    lines += [*_arms_section(ARMS), "", "## What we find", ""]
    lines += [*_steps_section(steps), ""]
    if not run:
        lines += [
            (
                "**Not run yet.** The ablations take hours on a 2-core CPU (two full syntheses, three SFT runs "
                "and their evaluations, each step under an hour), so they are not part of CI or of the default "
                "run. On a home whose main pipeline has run (its `rl_dataset` holds the held-out tasks):"
            ),
            "",
            "```",
            *COMMANDS,
            "```",
        ]
        return "\n".join(lines) + "\n"
    compared = compare_arms(evaluations, comparisons)
    lines += [
        "| ablation | benchmark | subset | full arm | ablated arm | Δ ablated − full [95% CI] | paper | ours |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in compared:
        d = c["difference"]
        cell = "n/a" if d is None else f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] (n={d['n']})"
        lines.append(
            f"| {c['question']} | {c['benchmark']} | {c['subset']} | `{c['control']}` {_num(c['control_mean'])} "
            f"| `{c['treatment']}` {_num(c['treatment_mean'])} | {cell} | ablated arm lower | {_verdict(d)} |"
        )
    for c in comparisons:
        missing = [f"`{a}`" for a in (c.control, c.treatment) if a not in evaluated]
        if missing:
            lines.append(
                f"| {c.question} | waiting for {', '.join(missing)} | | | | | ablated arm lower | not measured |"
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
        results_markdown([dict(r) for r in evaluations]),
        "",
        "## Configuration",
        "",
        "Settings of each arm's finished steps (`ablation_steps.json`):",
        "",
        "```json",
        json.dumps(
            {a: {s: (e.get("outputs") or {}).get("settings") for s, e in st.items()} for a, st in steps.items()},
            indent=1,
            sort_keys=True,
            default=str,
        ),
        "```",
    ]
    return "\n".join(lines) + "\n"


def write_ablations(
    path: Path, evaluations: Sequence[Mapping[str, Any]], steps: Mapping[str, Mapping[str, Any]]
) -> str:
    """Write :func:`ablations_markdown` to ``path`` atomically (a sibling temporary file renamed); returns it.

    Raises:
        OSError: the file cannot be written (the old one is left as it was).
    """
    path = Path(path)
    text = ablations_markdown(evaluations, steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return text
