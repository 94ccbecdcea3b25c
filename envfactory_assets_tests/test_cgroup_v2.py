"""The cgroup v2 side of the worker groups (:mod:`envfactory_assets.runtime.cgroups`), on this machine's own v2
hierarchy, in a group of the test's own: detection, a group without delegated controllers, and the file
protocol v2 needs no controller for (joining through the launcher, ``cpu.stat``, ``cgroup.kill``, removal).

Where the v2 hierarchy holds the memory, pids and cpu controllers the limits are checked too; where it holds
none (a host whose controllers are bound to v1, as these machines), what needs them is not run here, and the
tests say which branch ran. Nothing of the hierarchy outside the test's group is written.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envfactory_assets.runtime import cgroups
from envfactory_assets.runtime.isolation import launcher_command


def _v2_base() -> Path | None:
    """The group this process runs in on the v2 hierarchy, or None when no v2 hierarchy is mounted."""
    mount = next((m for m, kind, _ in cgroups._mounts() if kind == "cgroup2"), None)
    own = cgroups._own_groups()
    if mount is None or "" not in own:
        return None
    return Path(mount) / own[""].lstrip("/")


def _controllers(group: Path) -> set[str]:
    return set((group / "cgroup.controllers").read_text().split())


@pytest.fixture
def v2_group() -> Iterator[Path]:
    """A group of this test's own under this process's v2 group, removed afterwards with anything left in it."""
    base = _v2_base()
    if base is None:
        pytest.skip("no cgroup v2 hierarchy is mounted")
    group = base / f"{cgroups.GROUP_PREFIX}{os.getpid()}-v2test"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a group under {base}: {exc.strerror}")
    try:
        yield group
    finally:
        for child in sorted(group.glob("**/"), key=lambda p: len(p.parts), reverse=True):
            if (child / "cgroup.kill").exists():
                (child / "cgroup.kill").write_text("1")
            cgroups.remove_dir(child)


def test_v2_detection_names_the_controllers_the_hierarchy_lacks_and_writes_nothing() -> None:
    base = _v2_base()
    if base is None:
        pytest.skip("no cgroup v2 hierarchy is mounted")
    subtree_before = (base / "cgroup.subtree_control").read_text()
    found = cgroups._detect_v2(cgroups._mounts(), cgroups._own_groups())
    missing = [c for c in ("memory", "pids", "cpu") if c not in _controllers(base)]
    if missing:
        assert found == f"cgroup v2 group {base} is not delegated the {', '.join(missing)} controller(s)", found
        assert (base / "cgroup.subtree_control").read_text() == subtree_before
    else:  # a delegated hierarchy: either usable, or refused with the reason (a parent in a non-leaf group)
        assert isinstance(found, cgroups.CgroupSupport) or "cannot enable" in found, found


def test_a_v2_worker_group_needs_its_controllers_and_a_failed_one_leaves_nothing(v2_group: Path) -> None:
    support = cgroups.CgroupSupport("v2", "", (("", str(v2_group)),))
    limits = {"memory_bytes": 64 << 20, "pids_max": 8, "cpu_cores": 0.5}
    if not {"memory", "pids", "cpu"} <= _controllers(v2_group):
        with pytest.raises(OSError) as refused:
            cgroups.WorkerCgroup(support, **limits)
        assert refused.value.errno in (errno.ENOENT, errno.EACCES), refused.value
        assert [p for p in v2_group.iterdir() if p.is_dir()] == []  # the half-made group was removed
        return
    group = cgroups.WorkerCgroup(support, **limits)
    try:
        directory = group.dirs[""]
        assert (directory / "memory.max").read_text().strip() == str(64 << 20)
        assert (directory / "pids.max").read_text().strip() == "8"
        assert (directory / "cpu.max").read_text().split() == ["50000", "100000"]
    finally:
        group.remove()
    assert not directory.exists()


class _UnlimitedV2Group(cgroups.WorkerCgroup):
    """A v2 worker group whose limits are not written: this hierarchy delegates no controller, so the limits'
    files do not exist (the test above shows the real group refusing to start then). Everything else, the
    group's directory, joining, CPU time, kill and removal, is :class:`cgroups.WorkerCgroup`'s own code."""

    def _write_limits(self, memory_bytes: int, pids_max: int, cpu_cores: float) -> None:
        return None


_SPINNER = textwrap.dedent("""\
    import hashlib, os, sys, threading, time
    def spin():
        while True:
            hashlib.sha256(b"x" * 4096).digest()
    threading.Thread(target=spin, daemon=True).start()
    if os.fork() == 0:  # a grandchild in a session of its own: a kill of the process group misses it
        os.setsid()
        spin()
    print("started", flush=True)
    spin()
""")


def test_the_v2_file_protocol_joins_meters_kills_and_removes_a_worker_group(v2_group: Path) -> None:
    support = cgroups.CgroupSupport("v2", "", (("", str(v2_group)),))
    group = _UnlimitedV2Group(support, memory_bytes=64 << 20, pids_max=8, cpu_cores=1.0)
    directory = group.dirs[""]
    assert directory.parent == v2_group and group.procs_files == [str(directory / "cgroup.procs")]
    # the launcher joins the group before it execs, as for a sandbox worker
    proc = subprocess.Popen(
        launcher_command([sys.executable, "-c", _SPINNER], group.procs_files),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline() == b"started\n"
        members = {int(p) for p in (directory / "cgroup.procs").read_text().split()}
        assert proc.pid in members and len(members) == 2, members  # the launcher's exec and the grandchild
        first = group.cpu_seconds()
        time.sleep(0.5)
        assert group.cpu_seconds() - first > 0.1  # cpu.stat's usage_usec, read through the kept descriptor
        group.kill()  # cgroup.kill: every task, the grandchild in its own session too
        assert proc.wait(timeout=5) == -9
        deadline = time.monotonic() + 5
        while (directory / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (directory / "cgroup.procs").read_text().split() == []
        assert "populated 0" in (directory / "cgroup.events").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    group.remove()
    assert not directory.exists()
