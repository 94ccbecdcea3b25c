"""Launcher run as root in front of bubblewrap: become uid/gid 65534 on the host, then exec bwrap.

Why: bubblewrap started by root maps the sandbox user onto host uid 0, and host uid 0 may write
host-wide kernel settings (``/proc/sys``) without any capability. So when the pipeline runs as root,
each worker's bubblewrap runs as the unprivileged host user ``nobody`` instead, in its own user
namespace. Paths the sandbox binds that ``nobody`` cannot traverse (an interpreter under ``/root``)
are first bind-mounted, in a private mount namespace of this launcher only, onto world-traversable
alias directories, and bubblewrap binds the aliases back onto their real paths.

Before anything else it joins the worker's control groups (``"cgroups"``: the ``cgroup.procs`` files of
:class:`.cgroups.WorkerCgroup`), so that bubblewrap and everything it starts is inside them; it is also run
without root (``"uid": null``) when only that step is wanted.

Run as ``python -I -S drop_privileges.py SPEC_JSON``, with SPEC_JSON
``{"uid": 65534, "gid": 65534, "aliases": [[source, alias], ...], "cgroups": [procs file, ...],
"argv": [bwrap, ...]}``. Standard
library only (ctypes for ``unshare``/``mount``), no site packages, a fresh single-threaded process.
Exits 126 with a message on stderr when a step fails; never execs bwrap with privileges kept.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys

CLONE_NEWNS = 0x00020000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18


def _fail(message: str) -> None:
    sys.stderr.write(f"drop_privileges: {message}\n")
    sys.stderr.flush()
    os._exit(126)


def main() -> None:
    """Apply the spec in ``sys.argv[1]`` and exec its argv; never returns."""
    try:
        spec = json.loads(sys.argv[1])
        switch = spec["uid"] is not None
        uid, gid = (int(spec["uid"]), int(spec["gid"])) if switch else (-1, -1)
        aliases, argv, cgroups = spec["aliases"], list(spec["argv"]), list(spec.get("cgroups", []))
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        _fail(f"bad spec: {exc}")
        return
    if switch and (uid == 0 or gid == 0):
        _fail("refusing to run the sandbox as uid or gid 0")
    for procs in cgroups:
        try:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as exc:
            _fail(f"joining control group {procs}: {exc}")
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if aliases:
        if libc.unshare(CLONE_NEWNS) != 0:
            _fail(f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
        # Private first, so that no bind below propagates back to the host's mount namespace.
        if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            _fail(f"making / private: {os.strerror(ctypes.get_errno())}")
        for source, alias in aliases:
            if libc.mount(os.fsencode(source), os.fsencode(alias), None, MS_BIND | MS_REC, None) != 0:
                _fail(f"bind {source} -> {alias}: {os.strerror(ctypes.get_errno())}")
    if switch:
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except OSError as exc:
            _fail(f"switching to uid {uid}: {exc}")
        if os.getuid() == 0 or os.geteuid() == 0 or 0 in os.getresuid():
            _fail("still root after setresuid")
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        _fail(f"exec {argv[0]}: {exc}")


if __name__ == "__main__":
    main()
