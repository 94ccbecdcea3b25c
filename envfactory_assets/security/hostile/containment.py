"""Containment probes: evidence, independent of the sandbox's own reports, that hostile code did no
harm outside its worker.

:class:`Probes` plants secrets in a fake ``ENVFACTORY_HOME``, a fake ``$HOME``, an ``/etc``-like
folder (plus the first line of the real ``/etc/passwd``) and the parent's environment variables, opens a
loopback listener, and names a canary path and a marker token. Samples only ever get paths under the probe's own folder
to write
to: the negative control runs them unconfined. After a sample ran and its worker was closed, :meth:`Probes.check`
lists every violation: a secret in any output, error or stderr text; a connection the listener
received; a file created or changed anywhere under the probe's folder; a process still alive whose
command line carries the marker or the run's trust-domain label, or (parent running as root) any new
process of host uid 65534; a sample's own report that it achieved something no file or socket shows
(``<marker>:achieved:...``, e.g. writing a host sysctl); the parent's peak memory growing by more than
:data:`PARENT_MEMORY_GROWTH_MB` during the sample. A benign environment called after
each sample in the same :class:`..sandbox.SandboxWorker` must answer exactly as before.

:func:`run_containment` runs a corpus this way, normally with the Python layer (static check,
restricted builtins) switched off, so that the OS layer is the only thing between the code and the
host. With the OS layer switched off too (:data:`..isolation.OS_LAYER_ENV_VAR`) the probe-sensitive
samples must trip the probes: the negative control that shows the probes can see an escape.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import os
import re
import resource
import secrets as token_source
import select
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from envfactory_assets.runtime import cgroups
from envfactory_assets.runtime.errors import EnvironmentRejected, SandboxError
from envfactory_assets.runtime.lock_held_reads import python_thread_runqueue_waits_s, read_small_file
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
from envfactory_assets.security.hostile.runner import BENIGN_SOURCE, check_recovery
from envfactory_assets.security.hostile.samples import CANARY, MARKER, PORT, SECRETS, HostileSample

#: Limits of the containment run: small, so the resource bombs end quickly.
CONTAINMENT_LIMITS = SandboxLimits(memory_mb=256, cpu_seconds=5, call_timeout_s=1.5, kill_grace_s=1.0)
#: Samples of :mod:`.samples` (Python-layer corpus) whose attack the probes see when it succeeds.
PROBE_SENSITIVE_NAMES = frozenset(
    {
        "write_file_with_pathlib",
        "shell_via_subprocess",
        "os_system_through_builtins",
        "update_wrapper_getattr",
        "submodule_from_import",
    }
)
#: The parent's environment variable holding a planted secret while the probes run.
PROBE_ENV_VAR = "ENVFACTORY_PROBE_SECRET"
#: How much the parent's peak resident memory may grow while one sample runs, MiB.
PARENT_MEMORY_GROWTH_MB = 300
#: Seconds a closed worker's processes get to disappear before one still alive counts as left behind.
LEFTOVER_GRACE_S = 3.0
_EMPTY_STATE: dict[str, Any] = {"tables": {}, "meta": {"now": "2024-05-01T00:00:00Z", "seed": 0, "next_id": 1}}
_BENIGN_ENV = "containment_benign"


def is_probe_sensitive(sample: HostileSample) -> bool:
    """Whether the probes must see ``sample`` when nothing contains it (the negative control)."""
    return sample.probe_sensitive or sample.name in PROBE_SENSITIVE_NAMES


def _is_zombie(pid: int) -> bool:
    """Whether ``pid`` is dead but not yet reaped (or gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


#: The host uid of sandboxed code when the parent runs as root.
SANDBOX_UID = 65534


def _visible_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _uid_and_parent(pid: int) -> tuple[int | None, int | None]:
    """``(real uid, parent pid)`` of ``pid`` from ``/proc/<pid>/status``; ``(None, None)`` once it is gone."""
    uid = parent = None
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("Uid:"):
                    uid = int(line.split()[1])
                elif line.startswith("PPid:"):
                    parent = int(line.split()[1])
    except (OSError, IndexError, ValueError):
        return None, None
    return uid, parent


def _ancestors(pid: int) -> set[int]:
    """``pid`` and every process above it, up to pid 1 (and 0)."""
    line = {0}
    while pid and pid not in line:
        line.add(pid)
        pid = _uid_and_parent(pid)[1] or 0
    return line


def _held_by_another_tree(pid: int, own_line: set[int]) -> bool:
    """Whether a sandbox-uid process sits under another program's process (one not in ``own_line``, this
    process and its ancestors, and not of the sandbox uid): the sandbox worker of another run. A process
    left behind by a sample has left its worker's tree: it hangs off init or an ancestor of this process."""
    seen = set()
    parent = _uid_and_parent(pid)[1]
    while parent and parent not in own_line and parent not in seen:
        seen.add(parent)
        uid, above = _uid_and_parent(parent)
        if uid is None:
            return False
        if uid != SANDBOX_UID:
            return True
        parent = above
    return False


def _tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256 of content, or 'dir'/'link'}`` of every entry under ``root``."""
    digest: dict[str, str] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                digest[rel] = "link"
            elif path.is_dir():
                digest[rel] = "dir"
            else:
                try:
                    digest[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError:
                    digest[rel] = "unreadable"
    return digest


class Probes:
    """The planted secrets, the listener, the canary and the marker of one containment run.

    Use as a context manager; :meth:`arguments` gives a sample's probe arguments and
    :meth:`check` the violations seen so far.

    Attributes:
        root: the probe's folder (fake ``ENVFACTORY_HOME``, ``home`` and ``etc`` inside it).
        label: prefix of every environment id of the run (it appears in the workers' command lines).
        marker: token a process left behind by a sample carries on its command line.
    """

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="envfactory-containment-")
        self.root = Path(self._tmp.name)
        self.label = "c" + token_source.token_hex(4)
        self.marker = "envfactory-probe-" + token_source.token_hex(8)
        self.tokens: list[str] = []
        self.secret_paths: list[str] = []
        for folder, name in (("envfactory_home", "api_key.txt"), ("home/.ssh", "id_rsa"), ("etc", "shadow")):
            token = "SECRET-" + token_source.token_hex(12)
            path = self.root / folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{token}\n")
            self.tokens.append(token)
            self.secret_paths.append(str(path))
        # a secret in the parent's own environment, where API keys live: no worker may see it
        self.env_token = "SECRET-" + token_source.token_hex(12)
        os.environ[PROBE_ENV_VAR] = self.env_token
        self.tokens.append(self.env_token)
        try:
            first = Path("/etc/passwd").read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            first = ""
        if len(first) >= 8:  # e.g. "root:x:0:0:root:/root:/bin/bash"; samples read it themselves,
            self.tokens.append(first)  # never get its path to write to (the negative control runs for real)
        self.canary_dir = self.root / "outside"
        self.canary_dir.mkdir()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self._before = _tree_digest(self.root)
        self.connections = 0
        self._sandbox_uid_before = self._sandbox_uid_processes()

    @staticmethod
    def _sandbox_uid_processes() -> set[int]:
        """Pids of processes running as host uid 65534 (the sandbox's uid when the parent is root) that no
        other program's process tree holds (:func:`_held_by_another_tree`): another pipeline's sandbox
        workers on the same host are neither this run's leftovers nor processes to kill."""
        if os.geteuid() != 0:
            return set()
        found = {pid for pid in _visible_pids() if _uid_and_parent(pid)[0] == SANDBOX_UID}
        own_line = _ancestors(os.getpid())
        return {pid for pid in found if not _held_by_another_tree(pid, own_line)}

    def __enter__(self) -> Probes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill anything left behind, close the listener, remove the folder."""
        self.kill_leftovers()
        self.listener.close()
        if os.environ.get(PROBE_ENV_VAR) == self.env_token:
            del os.environ[PROBE_ENV_VAR]
        self._tmp.cleanup()

    def arguments(self, sample: HostileSample) -> dict[str, Any]:
        """The sample's call arguments with the probe placeholders filled in."""
        values = {
            CANARY: str(self.canary_dir / sample.name),
            SECRETS: list(self.secret_paths),
            PORT: self.port,
            MARKER: self.marker,
        }
        return {
            key: values.get(value, value) if isinstance(value, str) else value
            for key, value in sample.arguments.items()
        }

    def source(self, sample: HostileSample) -> str:
        """The sample's module with the source-level placeholders filled in (as Python literals)."""
        text = sample.source
        for name, value in (
            ("__CANARY__", str(self.canary_dir / f"{sample.name}-module")),
            ("__SECRETS__", list(self.secret_paths)),
            ("__PORT__", self.port),
            ("__MARKER__", self.marker),
        ):
            text = text.replace(name, repr(value))
        return text

    def _leftovers(self) -> list[tuple[int, str]]:
        found = []
        own = os.getpid()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == own:
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
                if _is_zombie(int(entry)):
                    continue
            except OSError:
                continue
            if self.marker in cmdline or f"--domain={self.label}" in cmdline:
                found.append((int(entry), cmdline[:200]))
        # Whatever it runs, a process left behind by a sandbox started as root has the sandbox's host uid.
        for pid in sorted(self._sandbox_uid_processes() - self._sandbox_uid_before - {p for p, _ in found}):
            if not _is_zombie(pid):
                found.append((pid, f"uid 65534 process {pid}"))
        return found

    def kill_leftovers(self) -> None:
        """SIGKILL every process the probes would report as left behind."""
        for pid, _ in self._leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def _drain_connections(self) -> None:
        while select.select([self.listener], [], [], 0)[0]:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                break
            self.connections += 1
            conn.close()

    def leaks(self, texts: Iterable[str]) -> list[str]:
        """The planted secrets and the sample's own reports of success (``<marker>:achieved:<what>``) in ``texts``,
        each text searched alone: a Python-level loop over a large reply's strings lets the parent's other threads
        run, where one ``repr`` of a 50 MiB reply holds the interpreter lock for 0.1 to 0.2 s."""
        leaked: set[str] = set()
        achieved: set[str] = set()
        reports = re.compile(re.escape(self.marker) + r":achieved:([a-z-]+)")
        for text in texts:
            leaked.update(token for token in self.tokens if token in text)
            achieved.update(reports.findall(text))
        violations = [f"secret leaked: {token[:16]}..." for token in self.tokens if token in leaked]
        if achieved:
            violations.append(f"sample reports it achieved: {', '.join(sorted(achieved))}")
        return violations

    def check(self, texts: Sequence[str], *, processes: bool = True) -> list[str]:
        """Every violation seen: leaked secrets in ``texts``, connections, changed files, leftovers.

        Args:
            texts: everything the sample produced that reaches the parent (outputs, error
                messages, stderr tails), as text.
            processes: also look for processes left behind (only meaningful once the sample's
                worker is closed).
        """
        violations = self.leaks(["\n".join(texts)])
        self._drain_connections()
        if self.connections:
            violations.append(f"loopback listener received {self.connections} connection(s)")
        after = _tree_digest(self.root)
        changed = sorted(k for k in set(after) | set(self._before) if after.get(k) != self._before.get(k))
        if changed:
            violations.append(f"files changed outside the sandbox: {changed[:5]}")
        if processes:
            # A killed worker's namespace takes a moment to be torn down: a leftover is one still alive
            # (not a zombie) after LEFTOVER_GRACE_S.
            deadline = time.monotonic() + LEFTOVER_GRACE_S
            left = self._leftovers()
            while left and time.monotonic() < deadline:
                time.sleep(0.05)
                left = self._leftovers()
            if left:
                violations.append(f"{len(left)} process(es) survived the worker: {left[0][1]}")
        return violations

    def reset(self) -> None:
        """Forget violations seen so far (after they were reported): new baseline, kill leftovers."""
        self.kill_leftovers()
        for path in self.canary_dir.iterdir():
            if path.is_dir() and not path.is_symlink():
                for inner in path.iterdir():
                    inner.unlink()
                path.rmdir()
            else:
                path.unlink()
        self._drain_connections()
        self.connections = 0
        self._before = _tree_digest(self.root)


def _run_one(worker: SandboxWorker, probes: Probes, sample: HostileSample) -> tuple[str, list[str]]:
    """Load and call ``sample``; ``(how it ended, texts that reached the parent)``."""
    env_id = f"{probes.label}_{sample.name}"
    texts: list[str] = []
    try:
        worker.load_environment(env_id, probes.source(sample))
    except EnvironmentRejected as exc:
        return "rejected at load", [*exc.violations, worker.stderr_tail(env_id)]
    except SandboxError as exc:
        return f"{type(exc).__name__} at load", [str(exc)]
    try:
        episode = worker.open_episode({env_id: _EMPTY_STATE})
        result = worker.call(episode, sample.tool, probes.arguments(sample))
        texts.append(repr(result))
        if worker.is_open(episode):
            try:
                texts.append(repr(worker.save(episode)))
            except SandboxError as exc:
                texts.append(str(exc))
            worker.close_episode(episode)
        ended = "call ok" if result.get("ok") else f"call error: {result.get('error', {}).get('type')}"
    except SandboxError as exc:
        texts.append(str(exc))
        ended = f"{type(exc).__name__}"
    texts.append(worker.stderr_tail(env_id))
    return ended, texts


def run_containment(
    samples: Sequence[HostileSample], *, limits: SandboxLimits = CONTAINMENT_LIMITS, python_guards: bool = False
) -> list[dict[str, Any]]:
    """Run each sample in its own trust domain and report what the probes saw.

    Args:
        samples: the corpus (unique names).
        limits: the workers' limits.
        python_guards: keep the static check and restricted builtins; ``False`` (default) leaves
            the OS layer as the only boundary.

    Returns:
        One row per sample: ``name``, ``category``, ``ended`` (how the sandbox answered),
        ``violations`` (probe findings; empty means contained), ``contained`` (bool),
        ``benign_unchanged`` (the benign environment's answer after the sample equals its answer
        before any sample), ``contained_by_os`` (whether the workers ran under bubblewrap),
        ``seconds``.

    Raises:
        ValueError: duplicate sample names.
    """
    names = [s.name for s in samples]
    if len(set(names)) != len(names):
        raise ValueError("sample names must be unique")
    rows = []
    with Probes() as probes:
        worker = SandboxWorker(limits, python_guards=python_guards)
        try:
            worker.load_environment(_BENIGN_ENV, BENIGN_SOURCE, origin="template")
            baseline_ok, _ = check_recovery(worker, _BENIGN_ENV)
            for sample in samples:
                started = time.monotonic()
                peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                ended, texts = _run_one(worker, probes, sample)
                grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
                benign_ok, _ = check_recovery(worker, _BENIGN_ENV)
                worker.close()  # every worker of the sample gone before processes are looked for
                violations = probes.check(texts)
                if grown_mb > PARENT_MEMORY_GROWTH_MB:
                    violations.append(f"the parent's peak memory grew by {grown_mb:.0f} MiB")
                rows.append(
                    {
                        "name": sample.name,
                        "category": sample.category,
                        "ended": ended,
                        "violations": violations,
                        "contained": not violations,
                        "benign_unchanged": baseline_ok and benign_ok,
                        "contained_by_os": worker.contained,
                        "seconds": round(time.monotonic() - started, 3),
                    }
                )
                probes.reset()
                worker = SandboxWorker(limits, python_guards=python_guards)
                worker.load_environment(_BENIGN_ENV, BENIGN_SOURCE, origin="template")
        finally:
            worker.close()
    return rows


#: Limits of :func:`run_resource_sample`: a CPU budget per call (1 s) well under the call's deadline (5 s), so
#: that the CPU check, not the deadline, is what stops a CPU sample.
RESOURCE_LIMITS = SandboxLimits(memory_mb=256, cpu_seconds=1, call_timeout_s=5.0, kill_grace_s=1.0)
#: After a resource sample: the host's memory must be back within this much of its level before it, MiB...
MEMORY_RETURN_MB = 16
#: ...within this many seconds of the call's return;
MEMORY_RETURN_S = 5.0
#: the worker may burn at most this much CPU after the call returned, seconds (measured over
#: :data:`CPU_AFTER_WINDOW_S`);
CPU_AFTER_RETURN_S = 0.05
CPU_AFTER_WINDOW_S = 0.5
#: and a thread of the parent must get to run at least this often throughout, seconds.
HEARTBEAT_MAX_GAP_S = 0.1


_measure_names = itertools.count(1)


def _glibc_trim() -> Any:
    """glibc's ``malloc_trim`` (None on another C library): returns the allocator's free pages to the kernel."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    return trim


_MALLOC_TRIM = _glibc_trim()


def parent_memory_held() -> int:
    """Bytes of anonymous and shared memory this process holds now (``RssAnon + RssShmem`` of
    ``/proc/self/status``), after handing glibc's free heap pages back to the kernel.

    Without the trim the figure would count heap pages the allocator keeps for reuse after a large reply was
    read and dropped (about 14 MiB after a 24 MB one, measured): memory no object holds. File pages mapped
    (the interpreter, libraries) are left out: they are page cache the kernel reclaims.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    held = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("RssAnon:", "RssShmem:")):
                held += int(line.split()[1]) * 1024
    return held


class SampleGroup:
    """The measuring group of one resource sample: the host memory the sample can leave behind, counted where no
    other program adds to it, and its workers' CPU time.

    The sample's workers get their control groups inside a group of their own (no limit on it; the worker
    groups below keep theirs), so the kernel's hierarchical counters of that group hold every byte charged to
    them: their processes' memory, System V shared memory, ``memfd`` and tmpfs pages and kernel objects
    (inodes, dentries), also once the process that made them and its group are gone (a removed group's
    charges stay in its ancestors' counters until the memory is freed). Page cache of files is left out: the
    kernel reclaims it, and another program's memory pressure can take it at any moment. Added to that, what
    the parent itself holds (:func:`parent_memory_held`). Nothing another process allocates or frees is in
    either figure, so the 16 MiB tolerance is the sample's alone.

    Where workers get no control group (:func:`.cgroups.detect` says why, or the OS layer is off), there is
    nothing to attribute kernel memory by: the figure is then the machine's ``MemTotal - MemAvailable``,
    which sees everything but moves with every other program.

    A :class:`MeasuredWorker` makes one for its workers and removes it when it is closed.

    Args:
        support: the control-group support of the worker (:meth:`SandboxWorker.cgroup_support`).

    Raises:
        OSError: the measuring group cannot be made although worker groups can.
    """

    def __init__(self, support: cgroups.CgroupSupport) -> None:
        self.support = support
        self._memory_dir: Path | None = None
        self._cpu_dir: Path | None = None
        self._dirs: list[Path] = []
        if not support.active:
            return
        name = f"{cgroups.GROUP_PREFIX}{os.getpid()}-m{next(_measure_names)}"
        bases = {}
        try:
            for controller, base in support.bases:
                path = Path(base) / name
                if path not in self._dirs:
                    path.mkdir()
                    self._dirs.append(path)
                bases[controller] = str(path)
            if support.mode == "v2":  # a group with no process of its own may pass controllers to its children
                (self._dirs[0] / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        except OSError:
            self.close()
            raise
        self._memory_dir = Path(bases["memory" if support.mode == "v1" else ""])
        self._cpu_dir = Path(bases["cpuacct" if support.mode == "v1" else ""])
        self.support = cgroups.CgroupSupport(support.mode, "", tuple(bases.items()))

    @property
    def exact(self) -> bool:
        """Whether the figure is the sample's alone (a measuring group exists), not the machine's."""
        return self._memory_dir is not None

    def group_held(self) -> int:
        """Bytes charged to the measuring group and its children now, page cache of files left out (0 without
        a group)."""
        if self._memory_dir is None:
            return 0
        stat = dict(line.split() for line in (self._memory_dir / "memory.stat").read_text().splitlines())
        if self.support.mode == "v1":
            memsw = self._memory_dir / "memory.memsw.usage_in_bytes"  # memory + swap, where swap is accounted
            usage = memsw if memsw.exists() else self._memory_dir / "memory.usage_in_bytes"
            charged = int(usage.read_text())
            files = int(stat["total_active_file"]) + int(stat["total_inactive_file"])
        else:
            charged = int((self._memory_dir / "memory.current").read_text())
            swap = self._memory_dir / "memory.swap.current"
            charged += int(swap.read_text()) if swap.exists() else 0
            files = int(stat["active_file"]) + int(stat["inactive_file"])
        # tmpfs, memfd and shared memory pages sit on the anonymous lists: they are not among the file pages
        return charged - files

    def cpu_seconds(self) -> float | None:
        """CPU seconds used by every task ever in the measuring group's children (``cpuacct.usage``, v2
        ``cpu.stat`` ``usage_usec``); None without a group or once it is removed."""
        cpu_dir = self._cpu_dir  # read once: the heartbeat thread calls this while the group may be closing
        if cpu_dir is None:
            return None
        try:
            # read holding the interpreter lock: the heartbeat thread calls this every tick (lock_held_reads)
            if self.support.mode == "v1":
                text = read_small_file(str(cpu_dir / "cpuacct.usage"))
                return None if text is None else int(text) / 1e9
            text = read_small_file(str(cpu_dir / "cpu.stat"))
            for line in (text or b"").decode("ascii", "replace").splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        except ValueError:
            pass
        return None

    def in_use(self) -> int:
        """The figure compared before and after a sample, bytes: :meth:`group_held` + :func:`parent_memory_held`,
        or the machine's memory in use when there is no measuring group."""
        if self._memory_dir is None:
            fields = {}
            with open("/proc/meminfo") as meminfo:
                for line in meminfo:
                    key, _, value = line.partition(":")
                    fields[key] = int(value.split()[0]) * 1024
            return fields["MemTotal"] - fields["MemAvailable"]
        return self.group_held() + parent_memory_held()

    def __enter__(self) -> SampleGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the measuring group (its workers must be closed first)."""
        for path in reversed(self._dirs):
            cgroups.remove_dir(path)
        self._dirs = []
        self._memory_dir = self._cpu_dir = None


class MeasuredWorker(SandboxWorker):
    """A :class:`SandboxWorker` whose workers' control groups are made inside a :class:`SampleGroup` group of
    its own (:attr:`group`): the same limits on each worker, one more level above them, without limits, that
    counts what they leave behind. :meth:`close` removes that group too.

    Args: as for :class:`SandboxWorker`.

    Raises:
        OSError: the measuring group cannot be made although worker groups can.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = SampleGroup(super().cgroup_support())

    def cgroup_support(self) -> cgroups.CgroupSupport:
        """As for :class:`SandboxWorker`, with the measuring group as the base where groups are made at all."""
        return self.group.support

    def close(self) -> None:
        """Close as :class:`SandboxWorker` does, then remove the measuring group."""
        try:
            super().close()
        finally:
            self.group.close()


class _Heartbeat:
    """A parent thread that wakes every 10 ms and records the longest gap between two wake-ups that the parent
    or the sample's workers caused (:attr:`max_gap_s`; the plain longest gap: :attr:`max_wall_gap_s`).

    From each gap it takes away the time the parent's threads waited, runnable, for a CPU (their run-queue
    wait: other programs on a loaded machine had the cores, which no part of the test controls; this
    thread's own, and the interpreter lock holder's, which this thread then waits behind) less the CPU time
    the sample's workers used meanwhile (each worker CPU-second counts as taken from the parent, so a worker
    that takes the parent's cores still shows). What is left is never less than the CPU time the parent
    itself used during the gap: a reply decoded while holding the interpreter lock counts whole. Without the
    workers' CPU figure (no control group) or the run-queue figures, every gap counts whole.

    Its figures are read holding the interpreter lock (:mod:`~envfactory_assets.runtime.lock_held_reads`):
    read with Python's own calls, each file would hand the lock back and wait for it again, and the ticks
    would measure their own reading (30 ms a tick behind a decoding main thread) along with the parent.

    Args:
        workers_cpu_s: the sample's workers' CPU seconds so far (:meth:`SampleGroup.cpu_seconds`), or None.
    """

    def __init__(self, workers_cpu_s: Callable[[], float | None] | None = None) -> None:
        self.max_gap_s = 0.0
        self.max_wall_gap_s = 0.0
        self._workers_cpu_s = workers_cpu_s or (lambda: None)
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="containment-heartbeat")

    def _run(self) -> None:
        try:
            self._tick_until_stopped()
        except BaseException as exc:  # noqa: BLE001 - handed to the measuring thread at exit, never lost
            self._error = exc

    def _tick_until_stopped(self) -> None:
        last, own_last, waits_last, cpu_last = (
            time.monotonic(),
            time.process_time(),
            python_thread_runqueue_waits_s(),
            self._workers_cpu_s(),
        )
        while not self._stop.wait(0.01):
            now, own, waits, cpu = (
                time.monotonic(),
                time.process_time(),
                python_thread_runqueue_waits_s(),
                self._workers_cpu_s(),
            )
            gap = now - last
            counted = gap
            if waits and waits_last and cpu is not None and cpu_last is not None:
                waited = sum(max(0.0, value - waits_last.get(tid, 0.0)) for tid, value in waits.items())
                excused = max(0.0, waited - (cpu - cpu_last))
                counted = min(gap, max(gap - excused, own - own_last))
            self.max_wall_gap_s = max(self.max_wall_gap_s, gap)
            self.max_gap_s = max(self.max_gap_s, counted)
            last, own_last, waits_last, cpu_last = now, own, waits, cpu

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None and exc_type is None:
            # a heartbeat that stopped early measured nothing after it stopped: never a passing figure
            raise SandboxError(f"the heartbeat thread failed, so no gap was measured after it: {self._error!r}")


def _reply_texts(value: Any) -> Iterator[str]:
    """Every string of a decoded reply, its keys included, and the text of every other scalar, walked without
    recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                yield str(key)
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
        else:
            yield item if isinstance(item, str) else repr(item)


def run_resource_sample(
    sample: HostileSample, *, limits: SandboxLimits = RESOURCE_LIMITS, python_guards: bool = False
) -> dict[str, Any]:
    """Run one resource sample in a fresh worker and measure what it cost the host.

    The host's memory is :meth:`SampleGroup.in_use` of the worker's own measuring group, taken twice before
    the call: with no worker process yet, and after the worker started and its episode opened. The
    call follows, then (without any further request to the worker) its CPU time over
    :data:`CPU_AFTER_WINDOW_S` and the memory until it is back within :data:`MEMORY_RETURN_MB` of its level
    before: the level with the worker running when it still runs, the level before it started when it was
    killed (its own memory, freed with it, then hides nothing the sample left behind).

    Returns:
        ``name``; ``ended`` (as in :func:`run_containment`); ``error_type`` (None when the call succeeded);
        ``stopped`` (the call failed: refused by the system, or the worker killed); ``worker_killed`` (its
        process is gone); ``memory_back_s`` (seconds until the host's memory was back, None when it was not
        back within :data:`MEMORY_RETURN_S`); ``memory_left_mb`` (the difference at that point);
        ``memory_exact`` (the figure is the sample's alone: :attr:`SampleGroup.exact`);
        ``cpu_after_return_s``; ``heartbeat_max_gap_s`` (the longest gap the parent or the workers caused, as
        :class:`_Heartbeat` counts it) and ``heartbeat_wall_gap_s`` (the plain longest gap); ``violations``
        (the probes', as in :func:`run_containment`); ``limits_mode`` (what bounded the worker); ``limit`` (the
        error's, for ``resource_limit``); ``message`` (the error's).

    Raises:
        OSError: the measuring group cannot be made although worker groups can.
    """
    worker = MeasuredWorker(limits, python_guards=python_guards)
    group = worker.group
    with Probes() as probes:
        with _Heartbeat(group.cpu_seconds) as heartbeat:
            env_id = f"{probes.label}_{sample.name}"
            exact = group.exact
            try:
                before_start = group.in_use()
                worker.load_environment(env_id, probes.source(sample))
                episode = worker.open_episode({env_id: _EMPTY_STATE})
                before = group.in_use()
                result = worker.call(episode, sample.tool, probes.arguments(sample))
                returned = time.monotonic()
                cpu_at_return = worker.cpu_seconds(env_id)
                # the reply is searched now and dropped: the memory check below is about what the sample left
                # behind, where the parent's own copy of a large valid reply would count
                reply_violations = probes.leaks(_reply_texts(result))
                error = result.get("error") or {}
                ended = "call ok" if result.get("ok") else f"call error: {error.get('type')}"
                result = None
                time.sleep(CPU_AFTER_WINDOW_S)
                cpu_later = worker.cpu_seconds(env_id)
                pid = worker.pids.get(env_id)  # a worker killed while idle is still to be reaped by its next request
                worker_killed = cpu_later is None or pid is None or _is_zombie(pid)
                if worker_killed and exact:
                    before = before_start
                memory_back_s = None
                while True:
                    left_mb = (group.in_use() - before) / 2**20
                    waited = time.monotonic() - returned
                    if left_mb <= MEMORY_RETURN_MB:
                        memory_back_s = waited
                        break
                    if waited > MEMORY_RETURN_S:
                        break
                    time.sleep(0.05)
                stderr_tail = worker.stderr_tail(env_id)
            finally:
                worker.close()
        return {
            "name": sample.name,
            "ended": ended,
            "error_type": error.get("type"),
            "stopped": ended != "call ok",
            "worker_killed": worker_killed,
            "memory_back_s": memory_back_s,
            "memory_left_mb": round(left_mb, 1),
            "memory_exact": exact,
            "cpu_after_return_s": 0.0 if cpu_later is None or cpu_at_return is None else cpu_later - cpu_at_return,
            "heartbeat_max_gap_s": heartbeat.max_gap_s,
            "heartbeat_wall_gap_s": heartbeat.max_wall_gap_s,
            "violations": reply_violations + probes.check([stderr_tail]),
            "limits_mode": worker.limits_mode,
            "limit": error.get("limit"),
            "message": str(error.get("message", ""))[:300],
        }


def format_containment(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`run_containment` rows."""
    lines = ["| sample | category | sandbox answer | probes | benign env unchanged |", "|---|---|---|---|---|"]
    for row in rows:
        probes = "clean" if row["contained"] else "; ".join(row["violations"])
        lines.append(
            f"| {row['name']} | {row['category']} | {row['ended']} | {probes} | "
            f"{'yes' if row['benign_unchanged'] else 'NO'} |"
        )
    return "\n".join(lines)


__all__ = [
    "CONTAINMENT_LIMITS",
    "RESOURCE_LIMITS",
    "MeasuredWorker",
    "Probes",
    "SampleGroup",
    "format_containment",
    "is_probe_sensitive",
    "parent_memory_held",
    "run_containment",
    "run_resource_sample",
]
