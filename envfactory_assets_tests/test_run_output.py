"""What a person sees from ``envfactory run``: bars that end at 100%, a line per finished stage, a summary
last; Dagster's events and library output only in the run log file. Reads the session's one run of the real
command on the fixture corpus (``tiny_cli_run``: a child process, stdout and stderr merged as a terminal
shows them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory_assets_tests.tiny_run import REPO_ROOT

# the fixture corpus has 3 environments, so no stage reaches 50 updates here
BAR = re.compile(r"^(\S+)\s+\[[#.]+\] (\d+)/(\d+)\s")


@pytest.fixture(scope="module")
def terminal(tiny_cli_run) -> tuple[str, Path]:
    """What ``envfactory run`` printed, and its ENVFACTORY_HOME."""
    return tiny_cli_run


def test_the_terminal_shows_no_dagster_debug_events_library_bars_or_loss_dicts(terminal):
    text, _ = terminal
    for noise in ("DEBUG", "ASSET_OBSERVATION", "STEP_START", "it/s]", "Loading weights", "BetaWarning"):
        assert noise not in text, noise
    assert not re.search(r"^\{'(loss|train_runtime|reward)'", text, re.M)  # TRL's raw log dicts


def test_every_bar_ends_at_100_percent_and_every_stage_reports_its_time(terminal):
    text, _ = terminal
    last: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        match = BAR.match(line)
        if match:
            last[match[1]] = (int(match[2]), int(match[3]))
    assert {"environments", "verified_environments", "tool_graph", "raw_trajectories", "refined_trajectories",
            "checkpoints", "evaluations"} <= set(last)
    assert all(done == total for done, total in last.values()), last
    for stage in ("source_resources", "tool_graph", "checkpoints", "evaluations", "dataset_exports"):
        assert re.search(rf"^{stage}\s+done in \d+\.\d s$", text, re.M), stage


def test_the_summary_comes_last_with_labelled_checkpoints_results_exports_and_total_time(terminal):
    text, home = terminal
    before, summary = text.split("== envfactory run summary ==")
    assert not BAR.search(summary) and "done in" not in summary  # nothing is drawn after it
    sft = re.search(r"^  SFT\s+(ckpt_\w+)", summary, re.M)
    grpo = re.search(r"^  SFT\+GRPO\s+(ckpt_\w+)", summary, re.M)
    assert sft and grpo and f"lineage: envfactory lineage {grpo[1]}" in summary
    assert "| model |" in summary and "held-out synthetic" in summary.lower()  # the results table
    exports = re.search(r"^exports: (\S+)$", summary, re.M)
    assert exports and Path(exports[1], "manifest.json").is_file()
    assert re.search(r"checkpoints\s+\d+\.\d s", summary)
    assert summary.rstrip().splitlines()[-1].startswith("total time: ")
    log = Path(re.search(r"^run log \(.*\): (\S+)$", before, re.M)[1])
    assert log.parent == home / "logs" and f"run log: {log}" in summary


def test_the_run_records_its_stage_times_and_the_report_prints_them(terminal):
    _, home = terminal
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    proc = subprocess.run([sys.executable, "-m", "envfactory_assets.cli", "report"], env={**env, "ENVFACTORY_HOME": str(home)},
                          cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    section = proc.stdout.split("## Stage times")[1]
    for stage in ("source_resources", "environments", "tool_graph", "checkpoints", "evaluations"):
        # stage | wall time (s) | peak memory (MiB) | status | started | runs (this run only) | range
        assert re.search(rf"^\| {stage} \| \d+\.\d \| \d+ \| SUCCESS \| [^|]+ UTC \| 1 \|", section, re.M), stage


def test_the_run_log_file_holds_dagster_events_from_info_up(terminal):
    text, home = terminal
    (log,) = (home / "logs").glob("run-*.log")
    content = log.read_text()
    assert " - dagster - INFO - " in content and "environments: 3/3 environments built" in content
    assert " - dagster - DEBUG - " not in content
