"""What a person sees from ``envfactory run``: bars that end at 100%, a line per finished stage, a summary
last; Dagster's events and library output only in the run log file. Reads the session's one run of the real
command on the fixture corpus (``tiny_cli_run``: a child process, stdout and stderr merged as a terminal
shows them), and a run of its own on a pseudo-terminal with every bar's count raised to at least 50."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory_assets_tests.tiny_run import REPO_ROOT, many_updates_config, run_on_terminal

# the fixture corpus has 3 environments, so no bar counts 50 items here (the pseudo-terminal run below does)
BAR = re.compile(r"^(\S+)\s+\[[#.]+\] (\d+)/(\d+)\s")
#: the assets that draw a bar, and the step that prints their "done in" line
BAR_STEPS = {
    "source_resources": "source_resources",
    "environments": "environments",
    "verified_environments": "verified_environments",
    "tool_graph": "tool_graph",
    "tool_chains": "tool_chains",
    "raw_trajectories": "raw_trajectories",
    "refined_trajectories": "refined_trajectories",
    "sft_dataset": "datasets",
    "checkpoints": "checkpoints",
    "evaluations": "evaluations",
    "dataset_exports": "dataset_exports",
    "export_audit": "dataset_exports",  # the same step measures what it wrote
}
BAR_STAGES = set(BAR_STEPS)
SUMMARY = "== envfactory run summary =="


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
    assert BAR_STAGES <= set(last)
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
    proc = subprocess.run(
        [sys.executable, "-m", "envfactory_assets.cli", "report"],
        env={**env, "ENVFACTORY_HOME": str(home)},
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    # every trajectory table says whether it counts raw or refined trajectories; operators: applied vs kept
    assert "## Raw trajectories (before refinement)" in proc.stdout
    assert "| status | refined trajectories |" in proc.stdout
    ops = re.findall(
        r"^\| (\w+) \| (\d+) \| (\d+) \| (\d+) \|$",
        proc.stdout.split("| operator | applied | reverted | kept |")[1].split("\n\n")[0],
        re.M,
    )
    assert ops and all(int(applied) - int(reverted) == int(kept) for _, applied, reverted, kept in ops), ops
    section = proc.stdout.split("## Stage times")[1]
    for stage in ("source_resources", "environments", "tool_graph", "checkpoints", "evaluations"):
        # stage | wall time (s) | peak memory (MiB) | load average | status | started | runs (this run only) | range
        assert re.search(rf"^\| {stage} \| \d+\.\d \| \d+ \| \d+\.\d \| SUCCESS \| [^|]+ UTC \| 1 \|", section, re.M), (
            stage
        )


def test_the_run_log_file_holds_dagster_events_from_info_up(terminal):
    text, home = terminal
    (log,) = (home / "logs").glob("run-*.log")
    content = log.read_text()
    assert " - dagster - INFO - " in content and "environments: 3/3 environments built" in content
    assert " - dagster - DEBUG - " not in content


def test_the_checkpoints_metadata_names_which_checkpoint_each_figure_is_of(terminal):
    import dagster as dg

    _, home = terminal
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("checkpoints"))
    metadata = event.asset_materialization.metadata
    both = {
        "checkpoint_ids",
        "checkpoint_paths",
        "training_curves",
        "base_model_hash",
        "empty_argument_share",
        "unwanted_call_share",
    }  # one entry per stage inside, or the base model's
    assert all(key in both or key.startswith(("sft_", "grpo_")) for key in metadata), sorted(metadata)
    assert metadata["sft_checkpoint_id"].value == metadata["checkpoint_ids"].value["sft"]
    assert metadata["sft_path"].value == metadata["checkpoint_paths"].value["sft"]
    assert metadata["grpo_checkpoint_id"].value == metadata["checkpoint_ids"].value["grpo"]


@pytest.fixture(scope="module")
def busy_terminal(one_layer_model_dir, tmp_path_factory) -> str:
    """What ``envfactory run`` wrote to its terminal (a pseudo-terminal: bars redrawn in place) under
    :func:`~envfactory_assets_tests.tiny_run.many_updates_config`, on the 52 environments of the fixture
    folder, training and evaluating a one-layer model with the base model's tokenizer."""
    return run_on_terminal(tmp_path_factory.mktemp("busy_run_home"), many_updates_config(one_layer_model_dir))


def _frames(text: str) -> list[str]:
    """Every line as the terminal drew it: a redrawn bar (``\\r`` + bar + erase to the end of the line) is a
    frame of its own, in the order written."""
    return [frame.replace("\x1b[K", "").rstrip() for line in text.split("\n") for frame in line.split("\r")]


def test_with_counts_raised_every_bar_counts_50_items_ends_at_100_and_the_summary_comes_last(busy_terminal):
    text = busy_terminal
    assert text.count(SUMMARY) == 1
    before, summary = text.split(SUMMARY)
    bars: dict[str, list[tuple[int, int]]] = {}
    for frame in filter(None, _frames(before)):
        match = BAR.match(frame)
        if match:
            bars.setdefault(match[1], []).append((int(match[2]), int(match[3])))
        else:  # nothing else reaches the terminal: no Dagster event, library bar, warning or trainer line
            assert (
                re.fullmatch(r"\S+\s+done in \d+\.\d s", frame)
                or frame.startswith("run log (")
                or frame == "  (envfactory run --verbose prints it all here instead)"
            ), frame
    assert set(bars) == BAR_STAGES, sorted(bars)
    for stage, drawn in bars.items():
        totals = {total for _, total in drawn}
        assert len(totals) == 1 and min(totals) >= 50, (stage, drawn)  # one bar of at least 50 items
        done = [d for d, _ in drawn]
        assert done == sorted(done) and len(set(done)) >= 5, (stage, drawn)  # it moved, and never back
        assert drawn[-1][0] == drawn[-1][1], (stage, drawn)  # it ends at 100%
        assert re.search(rf"\n{BAR_STEPS[stage]}\s+done in \d+\.\d s\n", before), stage  # its step reports done
    for noise in ("DEBUG", "ASSET_OBSERVATION", "STEP_START", "it/s]", "Loading weights", "Warning"):
        assert noise not in text, noise
    assert not re.search(r"\{'(loss|train_runtime|reward|grad_norm|learning_rate)'", text)  # TRL's raw log dicts
    # the summary is the last thing written: no bar or redraw after it, and it ends with the total time
    assert "\r" not in summary and not any(BAR.match(frame) for frame in _frames(summary))
    assert re.search(r"^  SFT\+GRPO\s+ckpt_\w+", summary, re.M) and "| model |" in summary
    assert summary.rstrip().splitlines()[-1].startswith("total time: ")


def test_a_check_that_measured_nothing_says_so_in_the_summary():
    import dagster as dg

    from envfactory_assets.runner.summary import not_measured_checks, run_summary

    @dg.asset
    def gated():
        return 1

    @dg.asset_check(asset=gated, blocking=True)
    def share_gate():  # a gate with fewer cases than it needs to compare
        return dg.AssetCheckResult(
            passed=True, metadata={"measurement": "not measured", "not_measured": ["empty_argument_share: 0 calls"]}
        )

    @dg.asset_check(asset=gated)
    def measured_gate():
        return dg.AssetCheckResult(passed=True, metadata={"measurement": "measured", "not_measured": []})

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([gated, share_gate, measured_gate], instance=instance)
    assert result.success
    assert not_measured_checks([result]) == ["  gated:share_gate (passed, not measured): empty_argument_share: 0 calls"]
    text = run_summary(instance, [result], None, 1.0)
    assert "checks that measured nothing" in text and "gated:share_gate" in text
    assert "gated:measured_gate" not in text


def test_failure_messages_show_a_stages_own_refusal_and_an_errors_first_line():
    import dagster as dg

    from envfactory_assets.runner.summary import failure_messages

    @dg.asset
    def refusing() -> None:
        raise dg.Failure("refusing to write verified_environments: 2 of the 3 passed items would fail")

    @dg.asset
    def crashing() -> None:
        raise RuntimeError("disk full\nsecond line")

    result = dg.materialize([refusing, crashing], raise_on_error=False)
    messages = sorted(failure_messages([result]))
    assert messages[0].startswith("crashing: ") and "disk full" in messages[0] and "second line" not in messages[0]
    assert messages[1] == "refusing: refusing to write verified_environments: 2 of the 3 passed items would fail"
