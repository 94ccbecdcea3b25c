"""The BFCL executor runs model calls in a sandboxed worker process per task, with a per-call time limit.

Everything here runs the real ``bfcl_eval`` API classes (MathAPI, GorillaFileSystem, MessageAPI...).
"""

from __future__ import annotations

import decimal
import os
import signal
import time
import warnings

import pytest

pytest.importorskip("bfcl_eval")
pytest.importorskip("mpmath")

from envfactory_assets.evaluation import bfcl
from envfactory_assets.evaluation.bfcl_sandbox import (
    CALL_TIMEOUT_ENV_VAR,
    ExecutorSettings,
)
from envfactory_assets.runtime.isolation import OS_LAYER_ENV_VAR, resolve_isolation

LIMIT_S = 2.0
OVERRUN = {"number": 5, "decimal_places": -(10**7)}  # round(5, -10**7): 22 s in one C call (10**10**7)


@pytest.fixture(scope="module")
def tasks() -> dict[str, bfcl.BFCLTask]:
    return {t.id: t for t in bfcl.load_tasks()}


def _task_with(tasks: dict[str, bfcl.BFCLTask], *classes: str) -> bfcl.BFCLTask:
    return next(t for t in tasks.values() if set(classes) <= set(t.involved_classes))


def _process_tree(pid: int) -> list[int]:
    out = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            children = handle.read().split()
    except OSError:
        return out
    for child in children:
        out += _process_tree(int(child))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive


@pytest.mark.filterwarnings("ignore:BFCL executor workers run without the OS sandbox:RuntimeWarning")
@pytest.mark.parametrize("os_layer", ["1", "0"], ids=["os_sandbox_if_available", "no_os_layer"])
def test_an_overrunning_call_is_stopped_and_the_task_goes_on_with_its_state(tasks, monkeypatch, os_layer):
    monkeypatch.setenv(OS_LAYER_ENV_VAR, os_layer)
    task = _task_with(tasks, "GorillaFileSystem", "MathAPI")
    episode = bfcl.BFCLEpisode(task, ExecutorSettings(call_timeout_s=LIMIT_S))
    try:
        assert episode.contained == (os_layer == "1" and resolve_isolation().contained)
        assert episode.call("mkdir", {"dir_name": "made_before"}) == "None"
        assert "made_before" in episode.call("cd", {"folder": "made_before"})  # private state: the cwd
        assert episode.call("touch", {"file_name": "kept.txt"}) == "None"
        before = episode.model.state()
        worker_pids = _process_tree(episode.worker.pid)

        started = time.monotonic()
        text = episode.call("round_number", OVERRUN)
        elapsed = time.monotonic() - started

        assert elapsed < LIMIT_S + 3, f"the overrunning call took {elapsed:.1f} s"
        assert text.startswith("Error during execution: round_number did not finish within 2 s")
        assert episode.n_timeouts == 1 and episode.n_malformed == 0
        assert not _wait_gone(worker_pids), "the killed worker's processes are still running"
        # the next call runs in a fresh worker that holds the state from before the overrun
        assert episode.call("pwd", {}).endswith('/made_before"}')
        assert "kept.txt" in episode.call("ls", {})
        assert episode.call("add", {"a": 2, "b": 3}) == '{"result": 5}'
        assert episode.model.state() == before
        assert episode.worker_starts == 2
        assert episode.score()["n_timeouts"] == 1
    finally:
        episode.close()


def test_an_overrun_inside_the_ground_truth_leaves_the_task_valid(tasks):
    """A timed-out call changes nothing, so the gold calls around it still pass every official check."""
    task = _task_with(tasks, "MathAPI")
    episode = bfcl.BFCLEpisode(task, ExecutorSettings(call_timeout_s=LIMIT_S))
    try:
        for k, calls in enumerate(bfcl.ground_truth_calls(task)):
            if k == 0:
                assert "did not finish" in episode.call("round_number", OVERRUN)
            for c in calls:
                episode.call(c["name"], c["arguments"])
            episode.end_turn(k)
        score = episode.score()
        assert score["valid"] == 1.0 and score["error"] is None and score["n_timeouts"] == 1
        assert episode.replay_mismatches == 0
    finally:
        episode.close()


@pytest.mark.parametrize("function", ["send_message", "book_flight"])
def test_restored_state_continues_seeded_random_ids(tasks, function):
    """MessageAPI and TravelAPI draw ids from a seeded random.Random per instance: after a restart the
    replay puts the generator where it was, so the ids still match the ground truth's."""
    task = next(t for t in tasks.values() if any(f"{function}(" in c for turn in t.ground_truth for c in turn))
    episode = bfcl.BFCLEpisode(task)
    try:
        for k, calls in enumerate(bfcl.ground_truth_calls(task)):
            for c in calls:
                episode.call(c["name"], c["arguments"])
                episode.restart()  # every call's successor runs in a fresh, replayed worker
            episode.end_turn(k)
        score = episode.score()
        assert score["valid"] == 1.0, score
        assert episode.replay_mismatches == 0 and episode.worker_starts > len(task.ground_truth)
    finally:
        episode.close()


def test_decimal_precision_set_by_a_call_never_reaches_a_later_call_or_task(tasks):
    task = _task_with(tasks, "MathAPI")
    parent_prec = decimal.getcontext().prec
    first = bfcl.BFCLEpisode(task, ExecutorSettings(test_probe=True))
    try:
        digits = first.call("square_root", {"number": 2, "precision": 1000})
        assert len(digits) > 1000  # the call itself computed with precision 1000
        assert decimal.getcontext().prec == parent_prec  # nothing ran in this process
        context = first.worker.request("probe_context", {}, LIMIT_S)
        assert context["decimal_prec"] == decimal.DefaultContext.prec  # fresh context per call
    finally:
        first.close()
    later = bfcl.BFCLEpisode(task, ExecutorSettings(test_probe=True))
    try:
        context = later.worker.request("probe_context", {}, LIMIT_S)
        assert context["decimal_prec"] == decimal.DefaultContext.prec == 28
        assert context["one_third"] == "0." + "3" * 28
        assert context["mpmath_dps"] == 15
        assert later.call("square_root", {"number": 2, "precision": 10}) == "{'result': Decimal('1.414213562')}"
    finally:
        later.close()


def test_a_call_cannot_read_a_file_planted_in_the_parents_temp_dir(tasks, tmp_path, monkeypatch):
    isolation = resolve_isolation()
    if not isolation.contained:
        pytest.skip(f"bubblewrap cannot start here ({isolation.reason}); the worker runs without the OS layer")
    planted = tmp_path / "planted_secret.txt"
    planted.write_text("the parent's secret", encoding="utf-8")
    task = _task_with(tasks, "MathAPI")
    episode = bfcl.BFCLEpisode(task, ExecutorSettings(test_probe=True))
    try:
        assert episode.contained
        seen = episode.worker.request("probe_read", {"path": str(planted)}, LIMIT_S)
        assert seen.get("read") is None and "FileNotFoundError" in seen["error"], seen
        assert episode.worker.seccomp == "on"
    finally:
        episode.close()
    # negative control: the same probe without the OS layer does read it
    monkeypatch.setenv(OS_LAYER_ENV_VAR, "0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "workers run without the OS sandbox", once per reason
        uncontained = bfcl.BFCLEpisode(task, ExecutorSettings(test_probe=True))
    try:
        assert not uncontained.contained
        assert uncontained.worker.request("probe_read", {"path": str(planted)}, LIMIT_S) == {
            "read": "the parent's secret"
        }
    finally:
        uncontained.close()


def test_closing_an_episode_kills_its_worker(tasks):
    episode = bfcl.BFCLEpisode(_task_with(tasks, "MathAPI"))
    assert episode.call("add", {"a": 1, "b": 1}) == '{"result": 2}'
    pids = _process_tree(episode.worker.pid)
    episode.close()
    assert not _wait_gone(pids)
    with pytest.raises(RuntimeError, match="closed"):
        episode.call("add", {"a": 1, "b": 1})


def test_the_call_time_limit_is_a_setting(monkeypatch):
    monkeypatch.delenv(CALL_TIMEOUT_ENV_VAR, raising=False)
    assert ExecutorSettings.from_env().call_timeout_s == 2.0
    monkeypatch.setenv(CALL_TIMEOUT_ENV_VAR, "0.5")
    assert ExecutorSettings.from_env().call_timeout_s == 0.5
    assert ExecutorSettings(call_timeout_s=0.5).cpu_seconds == 2
    for bad in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv(CALL_TIMEOUT_ENV_VAR, bad)
        with pytest.raises(ValueError, match="call_timeout_s|not a number"):
            ExecutorSettings.from_env()


def test_a_worker_that_died_between_calls_is_restored_without_blaming_the_next_call(tasks):
    episode = bfcl.BFCLEpisode(_task_with(tasks, "GorillaFileSystem"))
    try:
        assert episode.call("mkdir", {"dir_name": "survives"}) == "None"
        os.killpg(episode.worker.pid, signal.SIGKILL)  # e.g. the out-of-memory killer
        deadline = time.monotonic() + 5
        while not episode.worker.exited() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "survives" in episode.call("ls", {})
        assert episode.worker_starts == 2 and episode.n_timeouts == 0
    finally:
        episode.close()


def test_a_contained_worker_runs_in_its_own_control_group_which_goes_with_it(tasks):
    from envfactory_assets.runtime import cgroups

    if not resolve_isolation().contained or not cgroups.detect().active:
        pytest.fail("the OS sandbox and control groups must be available here (as for environment workers)")
    episode = bfcl.BFCLEpisode(_task_with(tasks, "MathAPI"))
    assert episode.call("add", {"a": 1, "b": 1}) == '{"result": 2}'
    group = episode.worker.cgroup
    assert group is not None and group.memory_bytes == ExecutorSettings().memory_mb * 1024 * 1024
    members = {int(p) for f in group.procs_files for p in open(f).read().split()}
    assert set(_process_tree(episode.worker.pid)) & members, "the worker's processes are not in its group"
    dirs = list(group.dirs.values())
    episode.close()
    assert not any(d.exists() for d in dirs), "the worker's control group outlived it"
