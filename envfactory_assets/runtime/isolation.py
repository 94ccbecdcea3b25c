"""The operating-system boundary around a sandbox worker: the bubblewrap command line and the policy
for when it cannot start.

A Python-level check does not contain untrusted code (``dataclasses``' code generation ``exec``\\ s
text with the real builtins, and every other code generator in the standard library can do the
same), so the boundary is the kernel's: each worker runs under bubblewrap
(https://github.com/containers/bubblewrap) in its own user, network, PID, IPC, UTS and mount
namespaces, as uid/gid 65534, with a read-only view of exactly

- the shared libraries the interpreter links against (``/usr/lib``, ``/usr/lib64`` and the
  ``/lib``/``/lib64`` links to them; no ``/usr/bin``, so there is no shell to run),
- the interpreter's installation (``sys.base_prefix``, or the executable and its standard library
  when it lives in ``/usr``),
- the virtual environment (``sys.prefix`` when it differs from the base),
- the ``envfactory_assets`` package directory itself (not the repository around it),

plus a private, size-capped tmpfs at ``/tmp`` (the working directory, the only writable place) and
a read-only minimal ``/dev``; no ``/proc``. Nothing of ``ENVFACTORY_HOME``, the repository,
``$HOME`` or ``/etc`` is visible. The sandbox user is never host root: run as root, bubblewrap is
started as host uid 65534 (:mod:`.drop_privileges`). The worker dies with its parent
(``--die-with-parent``), and when it exits the kernel kills every process left in its PID
namespace. Inside, the worker adds rlimits and a seccomp filter (:mod:`.seccomp_filter`); around it, the
launcher puts bubblewrap and everything it starts in the worker's control group (:mod:`.cgroups`).

Where bubblewrap cannot start (not installed, user namespaces disabled), :func:`resolve_isolation`
says why; the caller then refuses untrusted code unless :data:`UNSAFE_ENV_VAR` is set.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from envfactory_assets.runtime.errors import SandboxError

#: Set to ``1`` to run environment code without the OS sandbox when bubblewrap cannot start. The
#: name says what it is: with it, generated code runs with the pipeline's own privileges.
UNSAFE_ENV_VAR = "ENVFACTORY_UNSAFE_ALLOW_UNSANDBOXED_CODE"
#: Set to ``0`` (tests only) to turn the OS layer off although bubblewrap works: the negative control
#: of the containment test, which must then see the hostile corpus trip its probes.
OS_LAYER_ENV_VAR = "ENVFACTORY_SANDBOX_OS_LAYER"
SANDBOX_UID = 65534
SANDBOX_GID = 65534
#: Size of the worker's private /tmp, bytes.
TMPFS_BYTES = 64 * 1024 * 1024
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_LAUNCHER = Path(__file__).resolve().with_name("drop_privileges.py")
_LIBRARY_DIRS = ("/usr/lib", "/usr/lib64")


class IsolationUnavailable(SandboxError):
    """The OS sandbox cannot start and the code to run is not allowed without it.

    The message names the reason and the setting that would allow running anyway.
    """


@dataclasses.dataclass(frozen=True)
class Isolation:
    """How workers are started in this process.

    Attributes:
        bwrap: path of the bubblewrap executable, or None when workers run without the OS layer.
        reason: why the OS layer is off (empty when ``bwrap`` is set).
        unsafe_allowed: :data:`UNSAFE_ENV_VAR` is set, so untrusted code may run without it.
        seccomp: workers install their seccomp filter; off only when the OS layer is switched off
            as a whole (:data:`OS_LAYER_ENV_VAR`), for the negative control of the containment test.
    """

    bwrap: str | None
    reason: str = ""
    unsafe_allowed: bool = False
    seccomp: bool = True

    @property
    def contained(self) -> bool:
        """Whether workers run inside the OS sandbox."""
        return self.bwrap is not None

    def check_may_run(self, origin: str) -> None:
        """Refuse to run code of ``origin`` without the OS layer, or warn for templated code.

        Args:
            origin: ``"template"`` for code the offline builder wrote from fixed templates (it may
                run with a warning), anything else (``"model"``, ``"user"``, ``"untrusted"``) for
                code that must not run unless the unsafe setting is on.

        Raises:
            IsolationUnavailable: the OS layer is off, the code is not templated and
                :data:`UNSAFE_ENV_VAR` is not set.
        """
        if self.contained:
            return
        if self.unsafe_allowed:
            warnings.warn(
                f"running {origin} environment code WITHOUT the OS sandbox ({self.reason}; {UNSAFE_ENV_VAR}=1)",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        if origin == "template":
            warnings.warn(
                f"running templated environment code without the OS sandbox: {self.reason}",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        raise IsolationUnavailable(
            f"refusing to run {origin} environment code: the OS sandbox cannot start ({self.reason}). "
            f"Install bubblewrap (Debian package 'bubblewrap'; scripts/setup.sh does as root), or set "
            f"{UNSAFE_ENV_VAR}=1 to run it with this process's privileges (unsafe)."
        )


def _interpreter_binds() -> list[str]:
    base = Path(sys.base_prefix).resolve()
    if base != Path("/usr") and not str(base).startswith("/usr/"):
        return [str(base)]
    paths = {str(Path(sys._base_executable).resolve())}  # type: ignore[attr-defined]
    for key in ("stdlib", "platstdlib"):
        paths.add(str(Path(sysconfig.get_path(key)).resolve()))
    return sorted(paths)


def bound_paths() -> list[str]:
    """Every host path a worker sees, read-only, in bind order (parents before children)."""
    paths = [p for p in _LIBRARY_DIRS if os.path.isdir(p)]
    for path in _interpreter_binds():
        if not any(path == p or path.startswith(p + "/") for p in paths):
            paths.append(path)
    venv = Path(sys.prefix).resolve()
    if sys.prefix != sys.base_prefix and str(venv) not in paths:
        paths.append(str(venv))
    paths.append(str(_PACKAGE_DIR))
    return paths


def _traversable_by_others(path: str) -> bool:
    """Whether a user that is neither owner nor group member can reach and read ``path``."""
    current = Path(path)
    for directory in [current, *current.parents]:
        try:
            mode = directory.stat().st_mode
        except OSError:
            return False
        if not mode & 0o001:
            return False
    return bool(current.stat().st_mode & 0o004)


@functools.lru_cache(maxsize=1)
def _alias_root() -> str:
    """A world-traversable folder holding one empty alias directory per non-traversable bind.

    One fixed folder per user (``/tmp/envfactory-sandbox-binds-<uid>``), reused by every process, so a
    killed run leaves nothing new behind; used only when it is a real directory owned by this user
    and writable by nobody else, else a fresh private one is made (and removed at exit).
    """
    fixed = os.path.join(tempfile.gettempdir(), f"envfactory-sandbox-binds-{os.geteuid()}")
    try:
        os.mkdir(fixed, 0o755)
    except FileExistsError:
        pass
    except OSError:
        fixed = ""
    if fixed:
        info = os.lstat(fixed)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022:
            os.chmod(fixed, 0o755)
            return fixed
    root = tempfile.mkdtemp(prefix="envfactory-sandbox-binds-")
    os.chmod(root, 0o755)
    atexit.register(shutil.rmtree, root, True)
    return root


def _aliases(paths: list[str]) -> dict[str, str]:
    """``{path: alias}`` for the bound paths host uid 65534 cannot reach (running as root only)."""
    aliases = {}
    for index, path in enumerate(paths):
        if not _traversable_by_others(path):
            alias = os.path.join(_alias_root(), str(index))
            os.makedirs(alias, mode=0o755, exist_ok=True)
            os.chmod(alias, 0o755)
            aliases[path] = alias
    return aliases


def launcher_command(
    argv: list[str], cgroups: Sequence[str] = (), *, switch_user: bool = False, aliases: dict[str, str] | None = None
) -> list[str]:
    """The command that runs ``argv`` through :mod:`.drop_privileges`: join ``cgroups`` (``cgroup.procs``
    files) first, then, with ``switch_user``, bind ``aliases`` and become host uid/gid 65534."""
    spec = {
        "uid": SANDBOX_UID if switch_user else None,
        "gid": SANDBOX_GID if switch_user else None,
        "aliases": [[p, a] for p, a in (aliases or {}).items()],
        "cgroups": list(cgroups),
        "argv": argv,
    }
    return [sys.executable, "-I", "-S", str(_LAUNCHER), json.dumps(spec)]


def bwrap_command(bwrap: str, argv: list[str], environment: dict[str, str], cgroups: Sequence[str] = ()) -> list[str]:
    """The command line that runs ``argv`` in a fresh sandbox.

    The sandbox's root, ``/dev`` and every bind are read-only; the only writable place is a
    :data:`TMPFS_BYTES` tmpfs at ``/tmp``. There is no ``/proc`` (nothing in the sandbox needs it, and
    it would expose the namespace's unfiltered init process). When this process is root, bubblewrap
    itself runs as host uid/gid 65534 through :mod:`.drop_privileges`, so that the sandbox user is
    never host root.

    Args:
        bwrap: the bubblewrap executable.
        argv: the command to run inside (an interpreter path visible in :func:`bound_paths`).
        environment: the complete environment of the sandboxed process (everything else is cleared).
        cgroups: ``cgroup.procs`` files of the worker's control group (:class:`.cgroups.WorkerCgroup`),
            joined by the launcher before bubblewrap starts.

    Returns:
        ``[bwrap, ...options, "--", *argv]``, or, as root or with ``cgroups``, the launcher command that
        execs it.
    """
    paths = bound_paths()
    root = os.geteuid() == 0
    aliases = _aliases(paths) if root else {}
    command = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_GID),
        "--hostname",
        "sandbox",
        # The tmpfs first: binds below /tmp (a checkout in /tmp) must land on top of it, not under it.
        "--size",
        str(TMPFS_BYTES),
        "--tmpfs",
        "/tmp",
    ]
    for path in paths:
        command += ["--ro-bind", aliases.get(path, path), path]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64")):
        if os.path.islink(link):
            command += ["--symlink", target, link]
    command += ["--dev", "/dev", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    for key, value in sorted(environment.items()):
        command += ["--setenv", key, value]
    command = [*command, "--", *argv]
    if not root and not cgroups:
        return command
    return launcher_command(command, cgroups, switch_user=root, aliases=aliases)


def _probe(bwrap: str, python: str) -> str:
    """Start the interpreter once in the sandbox; '' when it worked, else the reason."""
    command = bwrap_command(
        bwrap,
        [python, "-c", "import os, orjson, envfactory_assets; assert os.getuid() == 65534"],
        {"PYTHONPATH": str(_PACKAGE_DIR.parent), "LC_ALL": "C.UTF-8"},
    )
    try:
        done = subprocess.run(command, capture_output=True, timeout=30, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not run: {exc}"
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip()[-300:]
        return f"bubblewrap exited with {done.returncode}: {tail}"
    return ""


@functools.lru_cache(maxsize=8)
def _resolve(python: str, os_layer: str, unsafe: str) -> Isolation:
    unsafe_allowed = unsafe == "1"
    if os_layer == "0":
        return Isolation(None, f"{OS_LAYER_ENV_VAR}=0", unsafe_allowed, seccomp=False)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Isolation(None, "bubblewrap (bwrap) is not installed", unsafe_allowed)
    reason = _probe(bwrap, python)
    if reason:
        return Isolation(None, reason, unsafe_allowed)
    return Isolation(bwrap, "", unsafe_allowed)


def resolve_isolation(python: str | None = None) -> Isolation:
    """How workers of ``python`` start in this process: probed once (one sandboxed start, ~0.1 s).

    Reads :data:`OS_LAYER_ENV_VAR` and :data:`UNSAFE_ENV_VAR` on every call, so a test can switch them.
    """
    return _resolve(
        python or sys.executable, os.environ.get(OS_LAYER_ENV_VAR, "1"), os.environ.get(UNSAFE_ENV_VAR, "0")
    )
