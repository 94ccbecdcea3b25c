"""Progress of long assets: per-shard observations (done, total, rate) and the bar `envfactory run` draws."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import pytest
import yaml

from envfactory_assets.cli import COMMAND_TAG
from envfactory_assets.cli import main as cli_main
from envfactory_assets.progress_meter import DONE, RATE, TOTAL, Progress, ProgressMeter, format_bar
from envfactory_assets.runner.materialize import run_job_name
from envfactory_assets.store.db import Store
from envfactory_assets_tests.fixture_environments import FIXTURES


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_meter_emits_once_per_shard_at_the_end_and_after_a_quiet_interval():
    clock, seen = FakeClock(), []
    meter = ProgressMeter(10, seen.append, shard=3, min_interval_s=60.0, clock=clock)
    for _ in range(10):
        clock.now += 2.0
        meter.advance()
    meter.finish()  # the end was already emitted: nothing new
    assert [p.done for p in seen] == [3, 6, 9, 10]
    assert seen[-1] == Progress(10, 10, 20.0) and seen[-1].rate == pytest.approx(0.5)
    slow = []
    meter = ProgressMeter(100, slow.append, shard=50, min_interval_s=5.0, clock=clock)
    clock.now += 6.0
    meter.advance()  # one item, but 6 s since the last emission
    assert [p.done for p in slow] == [1] and slow[0].eta_s == pytest.approx(594.0)


def test_meter_counts_exactly_from_many_threads_and_rejects_bad_arguments():
    seen = []
    meter = ProgressMeter(400, seen.append, shard=40)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: meter.advance(), range(400)))
    assert seen[-1].done == 400 and [p.done for p in seen] == sorted(p.done for p in seen)
    assert ProgressMeter(20, [].append).shard == 1 and ProgressMeter(1000, [].append).shard == 50
    with pytest.raises(ValueError):
        ProgressMeter(-1, seen.append)
    with pytest.raises(ValueError):
        ProgressMeter(5, seen.append, shard=0)
    empty = []
    ProgressMeter(0, empty.append, clock=FakeClock()).finish()
    assert empty == [Progress(0, 0, 0.0)]


def test_a_run_job_is_named_after_its_selection_in_dagster_name_characters():
    assert run_job_name(None) == run_job_name("  ") == "envfactory_run"
    assert run_job_name("refined_trajectories+") == "envfactory_run__refined_trajectories_plus"
    assert run_job_name("+tool_graph,sft_dataset") == "envfactory_run__plus_tool_graph__sft_dataset"
    assert run_job_name('key:"a b"') == "envfactory_run__key__a_b"
    assert run_job_name("*", prefix="envfactory_ablation") == "envfactory_ablation__all"
    long_a, long_b = run_job_name("x" * 200 + "a"), run_job_name("x" * 200 + "b")
    assert len(long_a) == len(long_b) == 80 and long_a != long_b  # cut, told apart by the selection's hash
    for name in (long_a, run_job_name("\u00e9t\u00e9!?"), run_job_name("a/b:c")):
        assert re.fullmatch(r"[A-Za-z0-9_]+", name), name


def test_bar_shows_share_counts_rate_and_eta():
    assert format_bar("env", Progress(5, 10, 2.0), width=10) == "env [#####.....] 5/10  2.5/s  eta 2 s"
    assert format_bar("env", Progress(10, 10, 4.0), width=4) == "env [####] 10/10  2.5/s"


def _fixture_home(tmp_path, monkeypatch, per_domain: int):
    """``(ENVFACTORY_HOME, run config)`` for a CLI run of the fixture corpus, ``per_domain`` documents each."""
    home = tmp_path / "home"
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "ops": {
                    "source_resources": {
                        "config": {"corpus_dir": str(FIXTURES), "include_mcp": False, "per_domain": per_domain}
                    }
                }
            }
        )
    )
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    return home, config


def test_run_logs_progress_observations_and_the_cli_draws_a_bar_from_them(tmp_path, monkeypatch, capsys):
    home, config = _fixture_home(tmp_path, monkeypatch, per_domain=2)
    assert (
        cli_main(["run", "--select", "source_resources,environments,verified_environments", "--config", str(config)])
        == 0
    )
    err = capsys.readouterr().err
    bars = [line for line in err.splitlines() if "] " in line and "/s" in line and "[" in line]
    assert any(line.startswith("environments ") and "3/3" in line for line in bars), bars
    assert any(line.startswith("verified_environments ") and "3/3" in line for line in bars), bars
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        records = instance.fetch_observations(dg.AssetKey("verified_environments"), limit=10).records
        # each run is named in the UI by the command line that made it
        commands = {run.tags.get(COMMAND_TAG) for run in instance.get_runs()}
        jobs = sorted(run.job_name for run in instance.get_runs())
    assert commands == {"envfactory run --select source_resources,environments,verified_environments"}, commands
    # and listed under a job named after its selection, not Dagster's `__ephemeral_asset_job__`
    assert jobs == [
        "envfactory_run__source_resources__environments__verified_environments",
        "envfactory_run__source_resources__environments__verified_environments__sources",
    ], jobs
    progress = [r.asset_observation.metadata for r in records]
    assert progress and {m[DONE].value for m in progress} == {1, 2, 3}
    assert all(m[TOTAL].value == 3 and m[RATE].value > 0 for m in progress)
    # the run's own timing and peak memory, one row per asset step, in the store for `envfactory report`
    times = Store(home / "envfactory.duckdb").read("stage_times")
    assert sorted(r["step_key"] for r in times) == ["environments", "source_resources", "verified_environments"]
    assert all(r["status"] == "SUCCESS" and r["wall_seconds"] > 0 and r["peak_rss_mib"] > 0 for r in times)
    assert len({r["run_token"] for r in times}) == 1 and len({r["run_id"] for r in times}) == 2  # two phases


def test_verbose_run_prints_dagsters_debug_events_on_the_terminal_and_writes_no_run_log(tmp_path, monkeypatch, capfd):
    home, config = _fixture_home(tmp_path, monkeypatch, per_domain=1)
    assert cli_main(["run", "--select", "source_resources", "--config", str(config), "--verbose"]) == 0
    out, err = capfd.readouterr()
    terminal = out + err
    assert " - DEBUG - " in terminal and "STEP_START" in terminal  # Dagster's own events, as without the CLI
    assert "run log (" not in terminal and not list((home / "logs").glob("run-*.log"))
    assert "== envfactory run summary ==" in terminal
