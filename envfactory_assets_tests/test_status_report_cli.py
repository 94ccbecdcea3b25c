"""``envfactory status`` counts what ``envfactory report`` states: the passed rows of the main sampler, with
rejected rows and the baseline sampler's chains beside them; ``envfactory report`` says on stderr which step it
is at; read-only commands run while another process reads the store. On a store of real rows of the bookshop
fixture."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from envfactory_assets.cli import main as cli_main
from envfactory_assets.envgen.stage import as_environment, environment_row, verification_row
from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import HashingEmbedder
from envfactory_assets.reporting.report import COMPARE_STEPS, REPORT_STEPS, run_report
from envfactory_assets.settings import store_path
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.store.db import Store
from envfactory_assets.store.schema import TABLES
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.sampling.sampler import SamplerConfig
from envfactory_assets.synth.stage import chain_rows, raw_trajectory_rows, refined_trajectory_rows
from envfactory_assets.synth.trajectories.execution import SynthConfig
from envfactory_assets_tests.fixture_environments import FIXTURES

ENV_ID = "bookshop_example"


def _store_of_bookshop(home: Path, main: str, other: str) -> Path:
    """Write into ``home`` a store holding the bookshop fixture's source, environment and verification, 8
    ``main`` chains and 6 ``other`` (baseline) chains sampled on its tool graph, raw trajectories of the passed
    ``main`` chains (those of the last three asked for more turns than a chain has, so they fail as such a run's
    would) and the refined trajectories calibrated from the passed ones (at least 4 solvable turns each, so
    shorter ones fail). Returns ``home``."""
    corpus = home / "corpus"
    corpus.mkdir()
    shutil.copy(FIXTURES / "bookshop.json", corpus / "bookshop.json")
    accepted, _ = scan_rows(corpus)
    env_row = environment_row(accepted[0])
    verified = verification_row(env_row)
    envs = {ENV_ID: as_environment(env_row)}
    graph = build_tool_graph(tools_from_environments(envs.values()), HashingEmbedder())
    sampler = SamplerConfig(min_tools=2)
    chains = chain_rows(graph, envs, {ENV_ID: verified["id"]}, 8, "status", main, sampler)
    baseline = chain_rows(graph, envs, {ENV_ID: verified["id"]}, 6, "status/baseline", other, sampler)
    passed = [c for c in chains if c["status"] == "passed"]
    assert len(passed) >= 5
    raw = raw_trajectory_rows(passed[:-3], graph, envs, SynthConfig(min_turns=1)) + raw_trajectory_rows(
        passed[-3:], graph, envs, SynthConfig(min_turns=50)
    )
    calibration = CalibrationConfig(k=2, min_turns=4, conversational_share=0.0, workers=1)
    refined = refined_trajectory_rows([r for r in raw if r["status"] == "passed"], envs, config=calibration)
    store = Store(store_path(home))
    store.replace_current("source_resources", accepted)
    store.replace_current("environments", [env_row])
    store.replace_current("verified_environments", [verified])
    store.replace_current("tool_chains", chains + baseline)
    store.replace_current("raw_trajectories", raw)
    store.replace_current("refined_trajectories", refined)
    return home


@pytest.fixture(scope="module")
def status_home(tmp_path_factory) -> Path:
    """A home of the default arms: topology chains, the random-walk ones as the baseline."""
    return _store_of_bookshop(tmp_path_factory.mktemp("status_home"), "topology", "random_walk")


def _status(home: Path, monkeypatch, capsys) -> dict[str, str]:
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    assert cli_main(["status"]) == 0
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in capsys.readouterr().out.splitlines())


def _count(home: Path, sql: str) -> int:
    with duckdb.connect(str(store_path(home)), read_only=True) as con:
        return con.execute(sql).fetchone()[0]


def test_status_counts_the_passed_rows_of_the_main_sampler_with_the_others_beside(status_home, monkeypatch, capsys):
    lines = _status(status_home, monkeypatch, capsys)
    topology = _count(
        status_home, "SELECT count(*) FROM current_tool_chains WHERE sampler = 'topology' AND status = 'passed'"
    )
    all_topology = _count(status_home, "SELECT count(*) FROM current_tool_chains WHERE sampler = 'topology'")
    walks = _count(status_home, "SELECT count(*) FROM current_tool_chains WHERE sampler = 'random_walk'")
    assert walks > 0
    chains_text = f"{topology}" if topology == all_topology else f"{topology} passed of {all_topology}"
    assert lines["tool_chains"] == f"{chains_text} (+{walks} random-walk baseline)"
    raw_passed = _count(status_home, "SELECT count(*) FROM current_raw_trajectories WHERE status = 'passed'")
    raw_all = _count(status_home, "SELECT count(*) FROM current_raw_trajectories")
    assert raw_all - raw_passed == 3  # the three asked for more turns than their chains have
    assert lines["raw_trajectories"] == f"{raw_passed} passed of {raw_all}"
    refined_passed = _count(status_home, "SELECT count(*) FROM current_refined_trajectories WHERE status = 'passed'")
    refined_all = _count(status_home, "SELECT count(*) FROM current_refined_trajectories")
    assert 0 < refined_passed < refined_all == raw_passed
    assert lines["refined_trajectories"] == f"{refined_passed} passed of {refined_all}"
    assert lines["environments"] == lines["verified_environments"] == "1"
    assert lines["sft_dataset"] == "0"  # a table without a status: its rows, as before
    assert list(lines) == list(TABLES)  # every table, in schema order


def test_the_main_sampler_is_the_one_trajectories_were_executed_from(tmp_path, monkeypatch, capsys):
    home = _store_of_bookshop(tmp_path, "random_walk", "topology")  # a run with sampler: random_walk
    lines = _status(home, monkeypatch, capsys)
    walks = _count(home, "SELECT count(*) FROM current_tool_chains WHERE sampler = 'random_walk' AND status = 'passed'")
    topology = _count(home, "SELECT count(*) FROM current_tool_chains WHERE sampler = 'topology'")
    assert re.fullmatch(rf"{walks}( passed of 8)? \(\+{topology} topology baseline\)", lines["tool_chains"])


def test_status_and_the_report_state_the_same_counts(status_home, monkeypatch, capsys):
    lines = _status(status_home, monkeypatch, capsys)
    report = run_report(Store(store_path(status_home)))
    chains = report.split("## Tool chains", 1)[1]
    assert f"| topology | passed | {lines['tool_chains'].split()[0]} |" in chains
    raw = report.split("## Raw trajectories", 1)[1]
    assert f"| passed | {lines['raw_trajectories'].split()[0]} |" in raw
    refined = report.split("Refined trajectories by status", 1)[1]
    assert f"| passed | {lines['refined_trajectories'].split()[0]} |" in refined


def test_status_reads_a_store_it_cannot_write(status_home, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(store_path(status_home), store_path(home))
    store_path(home).chmod(0o444)
    assert _status(home, monkeypatch, capsys) == _status(status_home, monkeypatch, capsys)


def test_report_names_each_step_on_stderr_and_writes_the_same_report(status_home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(status_home))
    out = tmp_path / "report.md"
    assert cli_main(["report", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()  # not a terminal: one line per step, then the total time
    assert len(lines) == len(REPORT_STEPS) + 1
    for i, (line, name) in enumerate(zip(lines, REPORT_STEPS, strict=False)):
        assert line.startswith("envfactory report [") and f" {i}/{len(REPORT_STEPS)} " in line
        assert line.endswith(f"  {name}")
    assert f" {len(REPORT_STEPS)}/{len(REPORT_STEPS)} " in lines[-1] and re.search(r"done in \d+\.\d s$", lines[-1])
    assert out.read_text() == run_report(Store(store_path(status_home))) + "\n"  # what it writes is unchanged
    assert cli_main(["report", "--compare", str(store_path(status_home))]) == 0
    compared = capsys.readouterr()
    assert "| figure | before | after |" in compared.out
    assert [line.rsplit("  ", 1)[1] for line in compared.err.splitlines()][:-1] == list(COMPARE_STEPS)


def _hold_store(path: Path, read_only: bool) -> subprocess.Popen[str]:
    """Another process holding the store file open (read-only: as a running ``envfactory report`` does)."""
    code = (
        "import time, duckdb\n"
        f"con = duckdb.connect({str(path)!r}, read_only={read_only})\n"
        "print('holding', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder


def test_read_only_commands_run_beside_another_process_reading_the_store(status_home, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(status_home))
    holder = _hold_store(store_path(status_home), read_only=True)
    try:
        assert cli_main(["environments"]) == 0
        listed = capsys.readouterr()
        listing = re.fullmatch(rf"{ENV_ID}  \S+  +(\d+) tools?\n", listed.out)
        assert listing, listed
        # the closing line sums the tools listed
        assert f"1 servable environment(s), {listing.group(1)} tools;" in listed.err, listed.err
        lines = _status(status_home, monkeypatch, capsys)
        assert lines["environments"] == "1"
    finally:
        holder.kill()
        holder.wait()


def test_estimate_names_the_process_writing_the_store_instead_of_a_traceback(status_home, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(status_home))
    holder = _hold_store(store_path(status_home), read_only=False)
    try:
        assert cli_main(["estimate"]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the store's source_resources: ")
    assert f"process {holder.pid} " in err and "open for writing" in err and "Traceback" not in err
