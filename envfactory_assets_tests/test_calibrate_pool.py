"""Calibration in several processes gives the rows of one process, in input order."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from envfactory_assets.runtime.errors import EnvironmentRejected
from envfactory_assets.synth.refinement import calibrate_pool
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.stage import refined_trajectory_rows
from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, providable_flags
from envfactory_assets_tests.fixture_environments import passed_trajectories


@pytest.fixture(scope="module")
def raws(environments, graph, worker) -> list[dict]:
    out = [
        {**traj, "id": f"raw-{i}", "tool_chain_id": f"chain-{i}", "domains": ["ecommerce_retail"]}
        for i, traj in passed_trajectories(environments, graph, worker, 40, "pool")
    ]
    assert len(out) >= 12
    return out


def test_two_processes_give_the_rows_of_one_in_input_order(raws, environments, graph, monkeypatch):
    # the fixtures are too few for the size floor that keeps small runs in one process
    monkeypatch.setattr(calibrate_pool, "MIN_TRAJECTORIES_PER_WORKER", 1)
    monkeypatch.setattr(calibrate_pool, "CHUNK", 3)  # several chunks per process, finished out of order
    flags = providable_flags(graph)

    def rows(workers: int) -> list[dict]:
        seen = []
        out = refined_trajectory_rows(
            raws,
            environments,
            config=CalibrationConfig(workers=workers),
            user=ProgrammaticUser(),
            providable=flags,
            progress=lambda done, total: seen.append((done, total)),
        )
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
    # one sandbox worker per environment per process: the auto setting stops where memory would run out
    many = int(__import__("psutil").virtual_memory().available / 2**20 // calibrate_pool.MIB_PER_ENVIRONMENT)
    assert calibrate_pool.resolve_workers(0, 3000, many) == 1
    assert calibrate_pool.resolve_workers(2, 3000, many) == 2  # an explicit setting is the user's call
    for bad in (-1, True, 2.5, calibrate_pool.MAX_WORKERS + 1, 10**9):
        with pytest.raises(ValueError, match=rf"workers={bad!r}: expected a whole number in \[0, 64\]"):
            calibrate_pool.resolve_workers(bad, 100)
        with pytest.raises(ValueError, match=rf"calibration setting workers={bad!r}"):
            CalibrationConfig(workers=bad)


def _exit_abruptly(raw, environments, worker):
    os._exit(3)  # what the kernel's OOM killer or a kill -9 leaves the pool with


def test_a_pool_process_that_dies_or_cannot_load_an_environment_raises_a_clear_error(raws, environments, monkeypatch):
    """A sandbox error in a pool process reaches the caller as itself (as with one process), and a
    process that dies is named as such, not as a bare BrokenProcessPool; the caller gets no rows."""
    monkeypatch.setattr(calibrate_pool, "MIN_TRAJECTORIES_PER_WORKER", 1)
    rejected = pickle.loads(pickle.dumps(EnvironmentRejected("e", ["line 1: import of 'os' is not allowed"])))
    assert (rejected.env_id, rejected.violations) == ("e", ["line 1: import of 'os' is not allowed"])
    hostile = {e: {**env, "source": "import os\n" + env["source"]} for e, env in environments.items()}
    with pytest.raises(EnvironmentRejected, match="import of 'os' is not allowed") as caught:
        refined_trajectory_rows(raws[:4], hostile, config=CalibrationConfig(workers=2))
    assert caught.value.env_id in environments
    with pytest.raises(RuntimeError, match="calibration process ended without an answer.*workers=1"):
        list(calibrate_pool.calibrate_all(raws[:4], environments, _exit_abruptly, 2))
