"""Per-stage wall time and peak memory of ``envfactory run``, written to the store's ``stage_times`` table at
the end of the run (one row per run and asset step; rows of earlier runs are kept); ``envfactory report``
prints them (:func:`envfactory_assets.reporting.report.stage_times_section`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from envfactory_assets.runner.memory import PeakMemory
from envfactory_assets.store.ids import content_id


def run_step_stats(instance: dg.DagsterInstance, run_ids: Sequence[str]) -> list[Any]:
    """Dagster's step stats (``RunStepKeyStatsSnapshot``: ``run_id``, ``step_key``, ``status``, ``start_time``
    and ``end_time`` in wall-clock seconds) of every run in ``run_ids``, in start order."""
    return sorted(
        (s for run_id in run_ids for s in instance.get_run_step_stats(run_id)), key=lambda s: s.start_time or 0
    )


def _utc(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def stage_time_rows(
    instance: dg.DagsterInstance,
    run_ids: Sequence[str],
    token: str,
    steps: set[str] | None = None,
    memory: PeakMemory | None = None,
) -> list[dict[str, Any]]:
    """``stage_times`` rows of the runs ``run_ids`` made by the ``envfactory run`` whose run tag is ``token``.

    One row per step (only those in ``steps`` when given: the CLI passes the asset steps): ``run_id``,
    ``run_token``, ``step_key``, ``started_at`` (UTC), ``wall_seconds`` (None for a step that never ran),
    ``status`` (``SUCCESS``, ``FAILURE``, ``SKIPPED``...), ``peak_rss_mib`` (this process's peak resident
    memory during the step, from ``memory``; None without it), ``load_avg_1m`` (the machine's mean 1-minute
    load average during the step, from ``memory``: near this run's own threads on an idle machine, above it
    when other jobs share the cores; None without it). The id is a hash of run id and step key, so
    writing the same run again adds nothing.
    """
    rows = []
    for s in run_step_stats(instance, run_ids):
        if steps is not None and s.step_key not in steps:
            continue
        ran = s.start_time is not None and s.end_time is not None
        rows.append(
            {
                "id": content_id("stage", {"run": s.run_id, "step": s.step_key}),
                "run_id": s.run_id,
                "run_token": token,
                "step_key": s.step_key,
                "started_at": _utc(s.start_time),
                "wall_seconds": round(s.end_time - s.start_time, 3) if ran else None,
                "status": s.status.value if s.status else None,
                "peak_rss_mib": memory.peak_mib(s.start_time, s.end_time) if ran and memory is not None else None,
                "load_avg_1m": memory.mean_load(s.start_time, s.end_time) if ran and memory is not None else None,
            }
        )
    return rows
