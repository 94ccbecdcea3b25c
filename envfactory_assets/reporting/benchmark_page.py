"""A benchmark's results page (docs/cpu_benchmark.md), rendered from a store's rows (never typed by hand).

The page states what was run (each current checkpoint's training settings, the evaluation's task counts, task
draw and sampling), how long ``checkpoints`` and ``evaluations`` took in their latest run and under what load,
each target of the CPU benchmark with the figure that meets or misses it, and the results tables
(:func:`~envfactory_assets.reporting.results_table.results_markdown`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envfactory_assets.reporting.results_table import STAGE_NAMES, results_markdown

SINGLE_TURN = "bfcl_v3_single_turn"
#: The steps whose wall time is the benchmark's cost (the data stages before them are the store's).
TIMED_STEPS = ("checkpoints", "evaluations")
#: Training settings shown per checkpoint, in this order (the rest are in the row's ``config``).
SHOWN_SETTINGS = ("max_steps", "learning_rate", "per_device_train_batch_size", "n_prompts", "max_tools", "device")


@dataclass(frozen=True)
class Target:
    """One target of the CPU benchmark: ``subset`` of BFCL single-turn (or ``"balanced"``, the measure), and
    the test its SFT checkpoint's row must pass: ``"interval_above_zero"`` (the paired interval against the
    base model lies above 0), ``"at_least"`` (accuracy >= ``value``) or ``"above_base"`` (a difference above
    0 whose interval lies above 0)."""

    subset: str
    test: str
    value: float = 0.0

    def describe(self) -> str:
        if self.test == "at_least":
            return f"`{self.subset}` accuracy at least {self.value:.0%}"
        what = "balanced score" if self.subset == "balanced" else f"`{self.subset}` accuracy"
        return f"{what} above the base model's, interval above zero"


#: The CPU benchmark's targets for its SFT checkpoint (the evidence the recipe exists to give; a target
#: missed is reported with its figure, never dropped).
CPU_BENCHMARK_TARGETS = (
    Target("simple", "interval_above_zero"),
    Target("multiple", "interval_above_zero"),
    Target("parallel", "interval_above_zero"),
    Target("irrelevance", "at_least", 0.6),
    Target("balanced", "above_base"),
)


def _figure(row: Mapping[str, Any] | None, measure: str | None = None) -> dict[str, Any] | None:
    """The value with its ``vs_base`` comparison: the row itself, or one of its measures."""
    if row is None:
        return None
    if measure is None:
        return {"mean": row.get("mean"), "vs_base": (row.get("metrics") or {}).get("vs_base")}
    return ((row.get("metrics") or {}).get("measures") or {}).get(measure)


def target_results(
    rows: Iterable[Mapping[str, Any]], model: str, targets: Sequence[Target] = CPU_BENCHMARK_TARGETS
) -> list[tuple[Target, str, bool | None]]:
    """Each target with the figure of ``model`` on BFCL single-turn and whether it is met (None: not
    measured, e.g. the category was not evaluated).

    Args:
        rows: ``evaluations`` rows (with ``metrics["vs_base"]`` and the balanced measure).
        model: the model label (a checkpoint id).
        targets: what to check.

    Returns:
        ``(target, figure text, met)`` per target, in the order given.
    """
    by_subset = {r["subset"]: r for r in rows if r["model"] == model and r["benchmark"] == SINGLE_TURN}
    out = []
    for target in targets:
        if target.subset == "balanced":
            figure = _figure(by_subset.get("all"), "balanced")
        else:
            figure = _figure(by_subset.get(target.subset))
        if not figure or figure.get("mean") is None:
            out.append((target, "not measured", None))
            continue
        diff = figure.get("vs_base") or {}
        text = f"{figure['mean']:.3f}"
        if diff:
            text += f" (Δ {diff['difference']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}])"
        if target.test == "at_least":
            met = figure["mean"] >= target.value
        elif not diff:
            met = None
        else:
            met = diff["low"] > 0 and (target.test == "interval_above_zero" or diff["difference"] > 0)
        out.append((target, text, met))
    return out


def _settings_lines(checkpoints: Iterable[Mapping[str, Any]]) -> list[str]:
    lines = []
    for row in sorted(checkpoints, key=lambda r: (r.get("stage") != "sft", r["id"])):
        config = row.get("config") or {}
        metrics = row.get("metrics") or {}
        shown = [f"`{k}: {config[k]}`" for k in SHOWN_SETTINGS if k in config]
        if metrics.get("train_mix"):
            shown.append(f"`train_mix: {metrics['train_mix']}`")
        kinds = metrics.get("examples_by_kind") or {}
        if kinds:
            shown.append("examples by last-turn kind " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
        stage = STAGE_NAMES.get(row.get("stage") or "", row.get("stage"))
        lines.append(f"- {stage} `{row['id']}`: {', '.join(shown) or 'settings not recorded'}")
    return lines


def _eval_settings(rows: Sequence[Mapping[str, Any]]) -> str:
    config = next((r.get("config") for r in rows if r.get("config")), None) or {}
    if not config:
        return "evaluation settings not recorded"
    sampling = config.get("sampling") or {}
    parts = [
        f"`n_synthetic: {config.get('n_synthetic')}`",
        f"`n_bfcl: {config.get('n_bfcl')}`",
        f"`n_bfcl_single_turn: {config.get('n_bfcl_single_turn')}` (per category)",
        f"`task_draw: {config.get('task_draw', 0)}`",
        f"`seeds: {list(config.get('seeds') or [])}`",
        f"`temperature: {sampling.get('temperature')}`",
        f"`max_new_tokens: {sampling.get('max_new_tokens')}`",
        f"`device: {sampling.get('device')}`",
    ]
    return ", ".join(parts)


def _times_lines(stage_times: Sequence[tuple[Any, ...]]) -> list[str]:
    """From :func:`~envfactory_assets.reporting.report.latest_stage_times` rows."""
    timed = {row[0]: row for row in stage_times if row[0] in TIMED_STEPS}
    if not timed:
        return ["No stage times recorded for `checkpoints` or `evaluations` (`envfactory run` records them)."]
    lines = ["| step | wall time | mean 1-minute load | status | started (UTC) |", "|---|---|---|---|---|"]
    total = 0.0
    for step in TIMED_STEPS:
        if step not in timed:
            continue
        _, wall, _, load, status, started, *_ = timed[step]
        total += wall or 0.0
        wall_text = "n/a" if wall is None else f"{wall / 60:.1f} min"
        load_text = "n/a" if load is None else f"{load:.2f}"
        started_text = str(started)[:16] if started is not None else "n/a"  # to the minute
        lines.append(f"| `{step}` | {wall_text} | {load_text} | {status} | {started_text} |")
    lines.append(f"| both | {total / 60:.1f} min | | | |")
    return lines


def benchmark_page(
    evaluation_rows: Sequence[Mapping[str, Any]],
    checkpoint_rows: Sequence[Mapping[str, Any]],
    stage_times: Sequence[tuple[Any, ...]],
    *,
    title: str,
    command: str,
    targets: Sequence[Target] = CPU_BENCHMARK_TARGETS,
) -> str:
    """The Markdown page of one benchmark run.

    Args:
        evaluation_rows: the store's current ``evaluations`` rows (with parent comparisons added).
        checkpoint_rows: the store's current ``checkpoints`` rows.
        stage_times: :func:`~envfactory_assets.reporting.report.latest_stage_times` of the store.
        title: the page's first heading.
        command: the command that produced the store's rows (stated on the page).
        targets: checked against each SFT checkpoint's BFCL single-turn rows (a table per checkpoint).

    Returns:
        The page; without evaluation rows, a page that says nothing was evaluated.
    """
    lines = [
        f"# {title}",
        "",
        "Written by `envfactory results --page` from the store (never typed by hand). The rows come from:",
        "",
        "```bash",
        command,
        "```",
        "",
        "## Wall time",
        "",
        *_times_lines(stage_times),
        "",
        "## What was run",
        "",
        *_settings_lines(checkpoint_rows),
        f"- evaluation: {_eval_settings(evaluation_rows)}",
        "",
    ]
    for sft in sorted(r["id"] for r in checkpoint_rows if r.get("stage") == "sft") if evaluation_rows else ():
        lines += [f"## Targets: SFT checkpoint `{sft}` against the base model, BFCL single-turn", ""]
        lines += ["| target | figure | met |", "|---|---|---|"]
        for target, figure, met in target_results(evaluation_rows, sft, targets):
            verdict = {True: "yes", False: "**no**", None: "not measured"}[met]
            lines.append(f"| {target.describe()} | {figure} | {verdict} |")
        lines.append("")
    lines += ["## Results", "", results_markdown(evaluation_rows), ""]
    return "\n".join(lines)


#: ``(op, setting in the run config) -> (checkpoint stage or "evaluation", key in the stored row's config)``:
#: where each setting of a benchmark's run config is recorded in the store. GRPO's settings carry a
#: ``grpo_`` prefix in ``checkpoints``' config and none in the GRPO checkpoint's row.
_RECORDED_AS = {
    **{("checkpoints", k): ("sft", k) for k in ("max_steps", "learning_rate", "per_device_train_batch_size")},
    **{
        ("checkpoints", f"grpo_{k}"): ("grpo", k)
        for k in (
            "max_steps",
            "learning_rate",
            "num_generations",
            "n_prompts",
            "screen_factor",
            "max_completion_length",
            "max_tools",
        )
    },
    **{
        ("evaluations", k): ("evaluation", k)
        for k in ("n_synthetic", "n_bfcl", "n_bfcl_single_turn", "task_draw", "first_turns_only", "seeds")
    },
    ("evaluations", "temperature"): ("evaluation", "sampling.temperature"),
}


def settings_mismatches(
    run_config: Mapping[str, Any],
    checkpoint_rows: Sequence[Mapping[str, Any]],
    evaluation_rows: Sequence[Mapping[str, Any]],
) -> list[str]:
    """Where the store's current rows were made with other settings than ``run_config`` (a run config file's
    mapping, ``ops: {checkpoints: {config}, evaluations: {config}}``) sets: one line per setting that a
    stored checkpoint's or evaluation's ``config`` records with another value (``"checkpoints max_steps: 100
    in the config, 32 in the store's sft checkpoint"``). Settings the rows do not record are not compared;
    ``[]`` means nothing recorded contradicts the config, so a page may name its command."""
    ops = run_config.get("ops") or {}
    stored: dict[str, list[Mapping[str, Any]]] = {"evaluation": [r.get("config") or {} for r in evaluation_rows]}
    for row in checkpoint_rows:
        stored.setdefault(str(row.get("stage")), []).append(row.get("config") or {})
    problems = []
    for (op, setting), (where, key) in _RECORDED_AS.items():
        wanted = ((ops.get(op) or {}).get("config") or {}).get(setting)
        if wanted is None:
            continue
        for config in stored.get(where, []):
            value: Any = config
            for part in key.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            if value is not None and value != wanted:
                problems.append(f"{op} {setting}: {wanted!r} in the config, {value!r} in the store's {where} rows")
                break
    return problems
