"""Kernel limits around one sandbox worker: a control group per worker process.

``RLIMIT_AS`` counts only the worker's address space; System V shared memory, ``memfd`` pages, tmpfs pages
and the kernel's own objects (inodes, dentries) a worker creates are host memory it does not count. A memory
control group charges all of them (page cache, shmem and, in both cgroup v1 and v2, kernel memory) to the
group, and kills a process of the group when the group is over its limit, whatever the code does. So every
worker gets its own group, nested in the group the parent runs in:

- memory: ``memory.limit_in_bytes`` (+ ``memory.memsw.limit_in_bytes``: no swap) on v1, ``memory.max``
  (+ ``memory.swap.max`` 0) on v2. On v1, ``memory.kmem.limit_in_bytes`` is written too where the kernel
  still honours it; since Linux 5.x kernel memory is charged to the same counter as user memory anyway.
- pids: ``pids.max`` (threads count as tasks);
- cpu: a CFS quota (``cpu.cfs_quota_us`` / ``cpu.max``) of a fixed number of cores, so no worker can take
  the machine's every core from the parent;
- CPU time read back from ``cpuacct.usage`` (v1) or ``cpu.stat`` ``usage_usec`` (v2) for the parent's
  per-call CPU check.

The worker joins its group before it starts (the launcher, :mod:`.drop_privileges`, writes itself into
each ``cgroup.procs`` and then execs bubblewrap), so everything the sandbox ever starts is inside.

Where no group can be made (not root and no delegated v2 subtree), :func:`detect` says why and the worker
runs with what it sets on itself: rlimits and the seccomp filter; :class:`ProcessTreeMeter` then reads CPU
time and task counts from ``/proc``.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import itertools
import os
import signal
import time
from pathlib import Path

#: Set to ``0`` to run workers without control groups (rlimits and seccomp only), e.g. to measure their cost.
CGROUP_ENV_VAR = "ENVFACTORY_SANDBOX_CGROUPS"
#: Prefix of every worker group's directory name; the parent's pid follows, so leftovers of a dead parent
#: can be recognised and removed.
GROUP_PREFIX = "envfactory-w"
_V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
_V2_CONTROLLERS = ("memory", "pids", "cpu")
_names = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class CgroupSupport:
    """Whether and where worker groups are made in this process.

    Attributes:
        mode: ``"v1"``, ``"v2"``, or ``"none"`` (workers get rlimits and seccomp only).
        reason: why the mode is ``"none"`` (empty otherwise).
        bases: ``{controller: directory}`` under which worker groups are created (v1: one per controller;
            v2: one key ``""``): the group the parent itself runs in.
    """

    mode: str
    reason: str = ""
    bases: tuple[tuple[str, str], ...] = ()

    @property
    def active(self) -> bool:
        """Whether workers get a control group."""
        return self.mode != "none"

    def describe(self) -> str:
        """What bounds a worker in this mode, for logs and reports."""
        if self.active:
            return f"cgroup {self.mode} (memory incl. kernel memory, pids, cpu) + rlimits + seccomp"
        return f"rlimits + seccomp only ({self.reason})"


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``[(mount point, file system type, options)]`` of every cgroup mount."""
    found = []
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                    found.append((parts[1].replace("\\040", " "), parts[2], set(parts[3].split(","))))
    except OSError:
        pass
    return found


def _own_groups() -> dict[str, str]:
    """``{controller: path}`` of this process's groups (v2's single hierarchy under key ``""``)."""
    groups: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as own:
            for line in own:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    groups[controller] = path
    except (OSError, ValueError):
        pass
    return groups


def _writable_base(base: Path) -> str:
    """'' when a child group can be made and removed under ``base``, else why not."""
    probe = base / f"{GROUP_PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
        probe.rmdir()
    except FileExistsError:
        return ""
    except OSError as exc:
        return f"cannot create a group under {base}: {exc.strerror}"
    return ""


def _detect_v1(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> CgroupSupport | str:
    bases = {}
    for controller in _V1_CONTROLLERS:
        mount = next((m for m, kind, options in mounts if kind == "cgroup" and controller in options), None)
        if mount is None:
            return f"cgroup v1 controller {controller!r} is not mounted"
        bases[controller] = Path(mount) / own.get(controller, "/").lstrip("/")
    for base in dict.fromkeys(bases.values()):
        problem = _writable_base(base)
        if problem:
            return problem
    return CgroupSupport("v1", "", tuple((c, str(p)) for c, p in bases.items()))


def _detect_v2(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> CgroupSupport | str:
    mount = next((m for m, kind, _ in mounts if kind == "cgroup2"), None)
    if mount is None or "" not in own:
        return "no cgroup v2 hierarchy"
    base = Path(mount) / own[""].lstrip("/")
    try:
        available = (base / "cgroup.controllers").read_text().split()
    except OSError as exc:
        return f"cannot read {base}/cgroup.controllers: {exc.strerror}"
    missing = [c for c in _V2_CONTROLLERS if c not in available]
    if missing:
        return f"cgroup v2 group {base} is not delegated the {', '.join(missing)} controller(s)"
    try:  # the group of a running process can enable controllers for its children only when it is the root
        (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _V2_CONTROLLERS))
    except OSError as exc:
        return (
            f"cannot enable {', '.join(_V2_CONTROLLERS)} under {base} ({exc.strerror}): a delegated v2 group "
            "must hold the parent in a leaf of its own"
        )
    problem = _writable_base(base)
    return problem or CgroupSupport("v2", "", (("", str(base)),))


def _remove_stale(support: CgroupSupport) -> None:
    """Remove empty worker groups left by parents that are gone (a killed test run)."""
    for _, base in support.bases:
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith(GROUP_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            owner = entry.name[len(GROUP_PREFIX) :].split("-", 1)[0]
            if owner.isdigit() and int(owner) != os.getpid() and not os.path.exists(f"/proc/{owner}"):
                try:
                    os.rmdir(entry.path)
                except OSError:
                    pass


@functools.lru_cache(maxsize=2)
def _detect(setting: str) -> CgroupSupport:
    if setting == "0":
        return CgroupSupport("none", f"{CGROUP_ENV_VAR}=0")
    mounts, own = _mounts(), _own_groups()
    reasons = []
    for attempt in (_detect_v1, _detect_v2):
        found = attempt(mounts, own)
        if isinstance(found, CgroupSupport):
            _remove_stale(found)
            return found
        reasons.append(found)
    return CgroupSupport("none", "; ".join(reasons))


def detect() -> CgroupSupport:
    """How worker groups are made in this process (probed once: one group made and removed).

    Prefers v1 when its memory, pids, cpu and cpuacct controllers are mounted (the controllers then cannot
    be on the v2 hierarchy); else a delegated v2 group. Reads :data:`CGROUP_ENV_VAR` on every call.
    """
    return _detect(os.environ.get(CGROUP_ENV_VAR, "1"))


def _read_int(path: Path, default: int = 0) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


class WorkerCgroup:
    """One worker's control group (one directory per v1 controller, or one v2 directory).

    Args:
        support: from :func:`detect`; must be active.
        memory_bytes: memory limit, bytes (user, shared, tmpfs and kernel memory together).
        pids_max: most tasks (processes and threads) at once.
        cpu_cores: CPU quota, in cores (1.0 = one core's time per period).

    Raises:
        OSError: a group could not be made or a limit not written (the partial group is removed).
        ValueError: ``support`` is not active, or a limit is not positive.
    """

    def __init__(self, support: CgroupSupport, *, memory_bytes: int, pids_max: int, cpu_cores: float) -> None:
        if not support.active:
            raise ValueError(f"control groups are not available: {support.reason}")
        if memory_bytes <= 0 or pids_max <= 0 or cpu_cores <= 0:
            raise ValueError("WorkerCgroup limits must be positive")
        self.mode = support.mode
        self.memory_bytes = memory_bytes
        self.pids_max = pids_max
        name = f"{GROUP_PREFIX}{os.getpid()}-{next(_names)}"
        self.dirs = {controller: Path(base) / name for controller, base in support.bases}
        self._fds: dict[str, int] = {}
        self._paths: dict[tuple[str, str], str] = {}
        made: list[Path] = []
        try:
            for path in dict.fromkeys(self.dirs.values()):
                path.mkdir()
                made.append(path)
            self._write_limits(memory_bytes, pids_max, cpu_cores)
        except OSError:
            for path in made:
                remove_dir(path)
            raise

    def _dir(self, controller: str) -> Path:
        return self.dirs[controller] if self.mode == "v1" else self.dirs[""]

    def _control(self, controller: str, name: str) -> str:
        """The path of control file ``name`` of ``controller``'s directory, built once (the parent reads three of
        them after every request, and building a ``Path`` costs more than reading the file)."""
        key = self._paths.get((controller, name))
        if key is None:
            key = self._paths[(controller, name)] = str(self._dir(controller) / name)
        return key

    def _text(self, key: str) -> str:
        """A control file's content now (``key``: its path from :meth:`_control`): read again from offset 0 through
        a descriptor kept open, opened anew if reading fails; '' when it cannot be read."""
        for _ in range(2):
            fd = self._fds.get(key)
            try:
                if fd is None:
                    fd = self._fds[key] = os.open(key, os.O_RDONLY | os.O_CLOEXEC)
                return os.pread(fd, 65536, 0).decode("ascii", "replace")
            except OSError:
                self._close_fd(key)
        return ""

    def _close_fd(self, key: str) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _int(self, controller: str, name: str) -> int:
        key = self._control(controller, name)
        fd = self._fds.get(key)
        if fd is not None:  # the parent reads two of these after every answer: one system call, no decoding
            try:
                return int(os.pread(fd, 64, 0))
            except (OSError, ValueError):
                pass
        try:
            return int(self._text(key).split()[0])
        except (ValueError, IndexError):
            return 0

    def _write_limits(self, memory_bytes: int, pids_max: int, cpu_cores: float) -> None:
        memory = self._dir("memory")
        if self.mode == "v1":
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            for optional in ("memory.memsw.limit_in_bytes", "memory.kmem.limit_in_bytes"):
                try:  # memsw exists only with swap accounting; kmem is a no-op on recent kernels
                    (memory / optional).write_text(str(memory_bytes))
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.EINVAL, errno.EOPNOTSUPP, errno.EBUSY):
                        raise
            period = _read_int(self._dir("cpu") / "cpu.cfs_period_us", 100000)
            (self._dir("cpu") / "cpu.cfs_quota_us").write_text(str(max(1000, int(period * cpu_cores))))
        else:
            (memory / "memory.max").write_text(str(memory_bytes))
            try:
                (memory / "memory.swap.max").write_text("0")
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
            period = 100000
            (self._dir("cpu") / "cpu.max").write_text(f"{max(1000, int(period * cpu_cores))} {period}")
        (self._dir("pids") / "pids.max").write_text(str(pids_max))

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid into to join every part of the group."""
        return [str(path / "cgroup.procs") for path in dict.fromkeys(self.dirs.values())]

    def cpu_seconds(self) -> float:
        """CPU time used by every task that was ever in the group, seconds (user + system)."""
        if self.mode == "v1":
            return self._int("cpuacct", "cpuacct.usage") / 1e9
        return self._keyed_value("cpu", "cpu.stat", "usage_usec") / 1e6

    def tasks(self) -> int:
        """Tasks (processes and threads) in the group now."""
        return self._int("pids", "pids.current")

    def usage(self) -> tuple[float, int]:
        """``(cpu_seconds(), tasks())``: what the parent reads after every answer."""
        return self.cpu_seconds(), self.tasks()

    def memory_in_use(self) -> int:
        """Bytes charged to the group now (user, shared, tmpfs and kernel memory)."""
        name = "memory.usage_in_bytes" if self.mode == "v1" else "memory.current"
        return _read_int(self._dir("memory") / name)

    def oom_killed(self) -> bool:
        """Whether the kernel's out-of-memory killer killed a task of the group (its memory limit)."""
        if self.mode == "v1":
            return self._keyed_value("memory", "memory.oom_control", "oom_kill") > 0
        return self._keyed_value("memory", "memory.events", "oom_kill") > 0

    def tasks_refused(self) -> bool:
        """Whether the group refused a new task (its ``pids.max``)."""
        return self._keyed_value("pids", "pids.events", "max") > 0

    def _keyed_value(self, controller: str, name: str, key: str) -> int:
        """The value of ``key`` in a flat-keyed control file (``key value`` lines); 0 when absent."""
        prefix = key + " "
        for line in self._text(self._control(controller, name)).splitlines():
            if line.startswith(prefix):
                try:
                    return int(line[len(prefix) :])
                except ValueError:
                    return 0
        return 0

    def kill(self) -> None:
        """SIGKILL every task of the group (v2: ``cgroup.kill``; v1: each pid, until none is left)."""
        if self.mode == "v2":
            try:
                (self.dirs[""] / "cgroup.kill").write_text("1")
                return
            except OSError:
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            pids = set()
            for procs in self.procs_files:
                try:
                    pids.update(int(p) for p in Path(procs).read_text().split())
                except (OSError, ValueError):
                    continue
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left in the group and remove its directories (retrying while exiting tasks leave)."""
        for key in list(self._fds):
            self._close_fd(key)
        self.kill()
        for path in dict.fromkeys(self.dirs.values()):
            remove_dir(path)


def remove_dir(path: Path, timeout_s: float = 2.0) -> None:
    """Remove the (empty) group directory ``path``, retrying for ``timeout_s`` seconds while tasks that are
    exiting still hold it; a directory already gone, or still busy after that, is left as it is."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return
            time.sleep(0.01)


class ProcessTreeMeter:
    """CPU time and task count of a process and all its descendants, from ``/proc``: the parent's per-call
    CPU check when workers have no control group. A task that left the tree (reparented to init) is not
    seen; the worker's seccomp filter refuses new processes, so only threads can add to the tree."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._ticks = os.sysconf("SC_CLK_TCK")

    def _tree(self) -> list[int]:
        found, queue = [], [self.pid]
        while queue:
            pid = queue.pop()
            found.append(pid)
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/children") as children:
                        queue.extend(int(child) for child in children.read().split())
            except (OSError, ValueError):
                continue
        return found

    @staticmethod
    def _stat(pid: int) -> list[str]:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rpartition(")")[2].split()
        except OSError:
            return []

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the tree's live processes (and their reaped children)."""
        total = 0
        for pid in self._tree():
            fields = self._stat(pid)
            if len(fields) > 15:  # utime, stime, cutime, cstime are fields 14-17 (1-based) of stat
                total += sum(int(value) for value in fields[11:15])
        return total / self._ticks

    def tasks(self) -> int:
        """Threads of every process of the tree."""
        total = 0
        for pid in self._tree():
            fields = self._stat(pid)
            if len(fields) > 17:
                total += int(fields[17])
        return total

    def usage(self) -> tuple[float, int]:
        """``(cpu_seconds(), tasks())`` from one walk of the tree."""
        cpu, threads = 0, 0
        for pid in self._tree():
            fields = self._stat(pid)
            if len(fields) > 17:
                cpu += sum(int(value) for value in fields[11:15])
                threads += int(fields[17])
        return cpu / self._ticks, threads


__all__ = ["CGROUP_ENV_VAR", "CgroupSupport", "ProcessTreeMeter", "WorkerCgroup", "detect", "remove_dir"]
