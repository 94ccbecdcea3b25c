"""The summary ``envfactory run`` prints last: stage times, checkpoints, results, export folder, total time."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import dagster as dg

from envfactory_assets.runner.stage_times import run_step_stats

STAGE_LABELS = {"sft": "SFT", "grpo": "SFT+GRPO"}
"""How a checkpoint's ``stage`` is named to a reader: the GRPO run starts from the SFT checkpoint."""


def stage_seconds(instance: dg.DagsterInstance, run_ids: Sequence[str]) -> dict[str, tuple[float, str]]:
    """``{step key: (wall seconds, status)}`` over ``run_ids`` (Dagster's step stats), in start order."""
    out: dict[str, tuple[float, str]] = {}
    totals: dict[str, float] = defaultdict(float)
    for s in run_step_stats(instance, run_ids):
        if s.start_time is not None and s.end_time is not None:
            totals[s.step_key] += s.end_time - s.start_time
        out[s.step_key] = (totals[s.step_key], s.status.value if s.status else "?")
    return out


def _materializations(results: Sequence[Any], key: str) -> list[Any]:
    return [
        e.materialization
        for r in results
        for e in r.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey(key)
    ]


def not_measured_checks(results: Sequence[Any]) -> list[str]:
    """One line per asset check evaluation of ``results`` whose metadata says it measured nothing (its
    ``not_measured`` entry is non-empty, or its ``measurement`` is ``"not measured"``), naming what was not
    measured: such a check passed without evidence and the summary says so."""
    lines = []
    for result in results:
        for evaluation in result.get_asset_check_evaluations():
            meta = {k: getattr(v, "value", v) for k, v in (evaluation.metadata or {}).items()}
            missing = meta.get("not_measured")
            if not missing and meta.get("measurement") != "not measured":
                continue
            what = "; ".join(map(str, missing)) if isinstance(missing, list) else str(missing or "nothing measured")
            verdict = "passed" if evaluation.passed else "FAILED"
            lines.append(f"  {evaluation.asset_check_key.to_user_string()} ({verdict}, not measured): {what}")
    return lines


def failure_messages(results: Sequence[Any], steps: set[str] | None = None, max_chars: int = 1500) -> list[str]:
    """``"step: message"`` for each failed step of ``results`` (``ExecuteInProcessResult``): a stage's own
    refusal (the description of the ``dg.Failure`` it raised) when it gave one, else the first line of its
    error. ``steps`` limits it to those step keys (the asset steps: failed checks are listed apart). Each
    message is cut to ``max_chars`` characters; the run log keeps the whole traceback."""
    out = []
    for result in results:
        for event in result.get_step_failure_events():
            if steps is not None and event.step_key not in steps:
                continue
            data = event.step_failure_data
            user = getattr(data, "user_failure_data", None)
            error = data.error
            while error is not None and error.cause is not None:  # the stage's own exception, not Dagster's wrapper
                error = error.cause
            first = ((error.message if error is not None else "").strip().splitlines() or ["failed"])[0]
            text = (user.description if user is not None and user.description else first).strip()
            out.append(f"{event.step_key}: {text[:max_chars]}{'...' if len(text) > max_chars else ''}")
    return out


def run_summary(
    instance: dg.DagsterInstance,
    results: Sequence[Any],
    store: Any,
    total_s: float,
    log_file: str | None = None,
    asset_steps: set[str] | None = None,
) -> str:
    """The summary text (several lines, no trailing newline).

    Args:
        results: the runs ``envfactory run`` made (``ExecuteInProcessResult``).
        store: the run's :class:`~envfactory_assets.store.db.Store`, or None when it does not exist.
        total_s: wall seconds of the whole command.
        log_file: where the run's own output went (None with ``--verbose``).
        asset_steps: the steps listed one by one (the asset steps); the others (asset checks) are summed
            in one line. None lists every step.
    """
    from envfactory_assets.reporting.results_table import results_markdown

    lines = ["", "== envfactory run summary =="]
    for result in results:
        lines.append(f"run {result.run_id}: {'success' if result.success else 'FAILED'}")
    times = stage_seconds(instance, [r.run_id for r in results])
    if times:
        listed = {k: v for k, v in times.items() if asset_steps is None or k in asset_steps or v[1] != "SUCCESS"}
        checks = [secs for k, (secs, _status) in times.items() if k not in listed]
        lines += ["", "stage wall time:"]
        lines += [
            f"  {step:<34} {secs:8.1f} s  {'' if status == 'SUCCESS' else status}".rstrip()
            for step, (secs, status) in listed.items()
        ]
        if checks:
            lines.append(f"  {f'asset checks ({len(checks)})':<34} {sum(checks):8.1f} s")
    unmeasured = not_measured_checks(results)
    if unmeasured:
        lines += ["", "checks that measured nothing (too few cases; not evidence of a pass):", *unmeasured]
    checkpoint_ids = [
        i
        for m in _materializations(results, "checkpoints")
        for i in (m.metadata["checkpoint_ids"].value.values() if "checkpoint_ids" in m.metadata else [])
    ]
    if checkpoint_ids and store is not None:
        rows = {r["id"]: r for r in store.read("checkpoints", current=False) if r["id"] in set(checkpoint_ids)}
        lines += ["", "checkpoints:"]
        for ckpt_id in checkpoint_ids:
            row = rows.get(ckpt_id, {})
            label = STAGE_LABELS.get(row.get("stage") or "sft", row.get("stage") or "?")
            lines.append(f"  {label:<9} {ckpt_id}  {row.get('path', '')}")
            lines.append(f"            lineage: envfactory lineage {ckpt_id}")
    if _materializations(results, "evaluations") and store is not None:
        lines += [
            "",
            "results (envfactory results prints this table again):",
            "",
            results_markdown(store.read("evaluations")),
        ]
    exports = _materializations(results, "verl_export")
    if exports and "path" in exports[-1].metadata:
        lines += ["", f"exports: {exports[-1].metadata['path'].value}"]
    if log_file:
        lines += ["", f"run log: {log_file}"]
    minutes, seconds = divmod(total_s, 60)
    lines += ["", f"total time: {int(minutes)} min {seconds:.0f} s ({total_s:.1f} s)"]
    return "\n".join(lines)
