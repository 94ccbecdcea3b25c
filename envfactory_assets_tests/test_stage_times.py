"""Per-stage wall time and peak memory: measured around real in-process Dagster runs, written to the store's
``stage_times`` table (earlier runs kept) and printed by ``envfactory report``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from envfactory_assets.reporting.report import run_report
from envfactory_assets.runner.memory import PeakMemory
from envfactory_assets.runner.stage_times import stage_time_rows
from envfactory_assets.store.db import Store

BIG_MIB = 300
REPO = Path(__file__).resolve().parents[1]


@dg.asset
def small() -> int:
    return 1


@dg.asset
def big(small: int) -> int:
    block = bytearray(b"\x01") * (BIG_MIB << 20)  # written, so every page is resident
    return small + len(block) // (1 << 20)


@dg.asset_check(asset=big)
def big_is_big(big: int) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=big > BIG_MIB)


def _resident_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def _measured_run(instance: dg.DagsterInstance, token: str) -> tuple[list[dict], float]:
    before = _resident_mib()
    with PeakMemory(interval_s=0.05) as memory:
        result = dg.materialize([small, big, big_is_big], instance=instance, tags={"envfactory/cli_run": token})
    assert result.success
    return stage_time_rows(instance, [result.run_id], token, steps={"small", "big"}, memory=memory), before


def _two_runs() -> tuple[list[dict], list[dict], float]:
    """Two measured runs on one ephemeral instance: ``(first rows, second rows, resident MiB before the second)``."""
    with dg.DagsterInstance.ephemeral() as instance:
        first, _ = _measured_run(instance, "token1")
        second, resident_before = _measured_run(instance, "token2")
    return first, second, resident_before


def _two_runs_in_a_fresh_process() -> tuple[list[dict], list[dict], float]:
    """:func:`_two_runs` in a new Python process: a long test session holds freed memory the allocator hands
    back to the next allocation without the resident size growing, so the step's peak would not show there."""
    code = (
        "import json; from envfactory_assets_tests.test_stage_times import _two_runs; "
        "print(json.dumps(_two_runs(), default=str))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second, resident_before = json.loads(proc.stdout.strip().splitlines()[-1])
    return first, second, resident_before


def test_each_run_adds_its_asset_steps_times_and_peaks_and_the_report_shows_the_latest(tmp_path):
    store = Store(tmp_path / "envfactory.duckdb")
    first, second, resident_before = _two_runs_in_a_fresh_process()
    for rows, token in ((first, "token1"), (second, "token2")):
        assert [r["step_key"] for r in rows] == ["small", "big"]  # asset steps only, in start order; no check
        assert all(r["status"] == "SUCCESS" and r["run_token"] == token and r["wall_seconds"] >= 0 for r in rows)
        assert len({r["run_id"] for r in rows}) == 1
    big_row = second[1]
    # the step's own peak: the block it wrote on top of what the process held before the run
    assert big_row["peak_rss_mib"] >= resident_before + BIG_MIB * 0.9, (big_row, resident_before)

    assert store.append("stage_times", first)["inserted"] == 2
    assert store.append("stage_times", second) == {"inserted": 2, "kept": 0, "superseded": 0}
    assert store.append("stage_times", second)["inserted"] == 0  # the same run again adds nothing
    stored = store.read("stage_times")
    assert len(stored) == 4 and {r["run_token"] for r in stored} == {"token1", "token2"}  # the first run stays

    report = run_report(store)
    section = report.split("## Stage times")[1]
    lines = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| stage")
    }
    assert list(lines) == ["small", "big"]
    seconds, peak, load, status, _started, runs, _range = lines["big"]
    assert seconds == f"{big_row['wall_seconds']:.1f}" and peak == f"{big_row['peak_rss_mib']:.0f}"
    # the machine's load during the step, sampled with the memory: a real reading of this machine's
    assert big_row["load_avg_1m"] is not None and big_row["load_avg_1m"] >= 0
    assert load == f"{big_row['load_avg_1m']:.1f}"
    assert status == "SUCCESS" and runs == "2"


def test_the_report_says_when_no_stage_time_is_recorded(tmp_path):
    store = Store(tmp_path / "envfactory.duckdb")
    with store.connect():
        pass
    assert "No stage times recorded yet" in run_report(store).split("## Stage times")[1]
