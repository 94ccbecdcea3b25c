"""Calibration in several processes gives the rows of one process, in input order."""

from __future__ import annotations

import json

import pytest

from envfactory_assets.synth import calibrate_pool
from envfactory_assets.synth.calibrate import CalibrationConfig
from envfactory_assets.synth.simulated_user import ProgrammaticUser, providable_flags
from envfactory_assets.synth.stage import refined_trajectory_rows
from envfactory_assets_tests.fixture_environments import passed_trajectories


@pytest.fixture(scope="module")
def raws(environments, graph, worker) -> list[dict]:
    out = [{**traj, "id": f"raw-{i}", "tool_chain_id": f"chain-{i}", "domains": ["ecommerce_retail"]}
           for i, traj in passed_trajectories(environments, graph, worker, 40, "pool")]
    assert len(out) >= 12
    return out


def test_two_processes_give_the_rows_of_one_in_input_order(raws, environments, graph, monkeypatch):
    # the fixtures are too few for the size floor that keeps small runs in one process
    monkeypatch.setattr(calibrate_pool, "MIN_TRAJECTORIES_PER_WORKER", 1)
    monkeypatch.setattr(calibrate_pool, "CHUNK", 3)  # several chunks per process, finished out of order
    flags = providable_flags(graph)

    def rows(workers: int) -> list[dict]:
        seen = []
        out = refined_trajectory_rows(raws, environments, config=CalibrationConfig(workers=workers),
                                      user=ProgrammaticUser(), providable=flags,
                                      progress=lambda done, total: seen.append((done, total)))
        assert seen[-1] == (len(raws), len(raws)) and [d for d, _ in seen] == sorted(d for d, _ in seen)
        return out

    one, two = rows(1), rows(2)
    assert [r["raw_trajectory_id"] for r in two] == [r["id"] for r in raws]
    assert json.dumps(two, sort_keys=True) == json.dumps(one, sort_keys=True)
    assert any(r["status"] == "passed" for r in two)


def test_worker_count_follows_the_setting_the_cores_and_the_size_floor(monkeypatch):
    monkeypatch.setattr(calibrate_pool.os, "cpu_count", lambda: 2)
    assert calibrate_pool.resolve_workers(0, 3000) == 2
    assert calibrate_pool.resolve_workers(6, 3000) == 6
    assert calibrate_pool.resolve_workers(0, 60) == 1  # too few trajectories to pay for a second process
    assert calibrate_pool.resolve_workers(4, 0) == 1
    with pytest.raises(ValueError, match="workers must be >= 0"):
        calibrate_pool.resolve_workers(-1, 100)
    with pytest.raises(ValueError, match="workers"):
        CalibrationConfig(workers=-2)
