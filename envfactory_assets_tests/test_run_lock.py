"""``run.lock`` (:func:`envfactory_assets.cli.run_lock`): gone once a run ends however it ends, and a lock file
left by a killed process does not block the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory_assets.cli import UsageError, _is_file_at, run_lock

REPO_ROOT = Path(__file__).resolve().parents[1]

#: a process that takes the run lock of the home given as its argument, says so, and waits to be killed
HOLDER = """
import sys, time
from pathlib import Path
from envfactory_assets.cli import run_lock
with run_lock(Path(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(120)
"""


def test_a_run_that_ends_leaves_no_lock_file(tmp_path):
    lock = tmp_path / "run.lock"
    with run_lock(tmp_path):
        assert lock.read_text() == f"pid {os.getpid()}\n"
    assert not lock.exists()
    with run_lock(tmp_path):  # and the next run takes it
        assert lock.exists()
    assert not lock.exists()


@pytest.mark.parametrize("interruption", [RuntimeError("a step failed"), KeyboardInterrupt()])
def test_a_run_ended_by_an_error_or_ctrl_c_leaves_no_lock_file(tmp_path, interruption):
    with pytest.raises(type(interruption)):
        with run_lock(tmp_path):
            raise interruption
    assert not (tmp_path / "run.lock").exists()
    with run_lock(tmp_path):
        pass


def test_the_lock_of_a_killed_process_does_not_block_the_next_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(UsageError, match=f"another envfactory run holds .*run.lock \\(pid {holder.pid}\\)"):
            with run_lock(tmp_path):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert holder.returncode == -signal.SIGKILL
    lock = tmp_path / "run.lock"
    assert lock.read_text() == f"pid {holder.pid}\n"  # a killed process cleans nothing up
    with run_lock(tmp_path):
        assert lock.read_text() == f"pid {os.getpid()}\n"
    assert not lock.exists()


def test_a_locked_file_no_longer_at_the_path_is_told_apart(tmp_path):
    """What a run checks after its flock succeeds: the file it locked may have been removed by the run that
    held it (between this run's open and its lock) and a third run may hold a new one at the path."""
    lock = tmp_path / "run.lock"
    with run_lock(tmp_path), open(lock, "a+") as current:
        assert _is_file_at(current, lock)
    with open(lock, "a+") as removed:
        lock.unlink()
        assert not _is_file_at(removed, lock)
        lock.write_text("pid 1\n")  # the next run's file
        assert not _is_file_at(removed, lock)
