"""The processes under a test's server: a sandbox worker killed for real, and whether processes are gone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return parents


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    return [child for child, parent in _parents().items() if parent == pid]


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (from /proc)."""
    parents = _parents()
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        tree += frontier
    return tree


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_worker(pid: int) -> None:
    """SIGKILL a sandbox worker (its bubblewrap process group) and wait until every process of it is gone: the
    sandboxed interpreter, two bubblewrap levels down, dies a moment after the outer process."""
    tree = descendants(pid)
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(running(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(running(p) for p in tree)
