"""The worker's seccomp filter: system calls environment code never needs fail with ``EPERM``.

Installed by the worker (:mod:`.worker`) on itself before it reads its first request, through
``pyseccomp`` (ctypes bindings to libseccomp). The filter is inherited by any thread and cannot be
removed (``no_new_privs`` is set), so no code the worker later runs can start a process, run a
program, open a socket, trace another process, or create namespaces, whatever Python-level trick
it uses. Threads stay possible (``clone`` with ``CLONE_THREAD``); ``clone3`` answers ``ENOSYS`` so
the C library falls back to ``clone``, whose flags the filter can read.

It complements, not replaces, the namespaces of :mod:`.isolation`: the list is of calls that would
matter even inside them (a fork bomb shares the host's process table), and of calls that make memory
``RLIMIT_AS`` does not count (System V shared memory, ``memfd_create``): the worker's control group
(:mod:`.cgroups`) counts those too, but where there is none the filter is what refuses them. CPython
itself needs none of the refused calls (``os.memfd_create`` fails with ``PermissionError``).
"""

from __future__ import annotations

import ctypes.util
import errno
import glob
import os

#: ``CLONE_THREAD`` from <linux/sched.h>: a clone with it makes a thread, without it a process.
CLONE_THREAD = 0x00010000

#: Calls refused with EPERM. Grouped by what they would let code do.
DENIED_SYSCALLS: tuple[str, ...] = (
    # new processes and programs
    "fork",
    "vfork",
    "execve",
    "execveat",
    # network and local sockets
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    # other processes' memory and tracing
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_open",
    "pidfd_getfd",
    # namespaces, mounts, root
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    # kernel surfaces with a history of exploits
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "mknod",
    "mknodat",
    "iopl",
    "ioperm",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "acct",
    "quotactl",
    "open_by_handle_at",
    "name_to_handle_at",
    # memory no rlimit counts: System V shared memory, message queues and semaphores (they also outlive
    # the process that made them), POSIX message queues, anonymous memory files
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semctl",
    "semtimedop",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    "memfd_create",
    "memfd_secret",
    # kernel objects a tool never needs and whose count no limit bounds
    "inotify_init",
    "inotify_init1",
    "fanotify_init",
)


def _find_libseccomp() -> str | None:
    """The path of libseccomp: ``ctypes.util.find_library`` asks ldconfig, which the sandbox does
    not contain, so look in the library directories it does contain."""
    found = ctypes.util.find_library("seccomp")
    if found:
        return found
    for pattern in ("/usr/lib/*/libseccomp.so.2", "/usr/lib/libseccomp.so.2", "/usr/lib64/libseccomp.so.2"):
        for path in sorted(glob.glob(pattern)):
            if os.path.isfile(path):
                return path
    return None


def _import_pyseccomp():  # noqa: ANN202 - returns the module
    """Import pyseccomp with its library lookup pointed at :func:`_find_libseccomp`'s answer."""
    original = ctypes.util.find_library
    path = _find_libseccomp()
    ctypes.util.find_library = lambda name: path if name == "seccomp" else original(name)
    try:
        import pyseccomp
    finally:
        ctypes.util.find_library = original
    return pyseccomp


def install_seccomp_filter() -> str:
    """Install the filter on the calling process (all its threads, irrevocably).

    Returns:
        ``""`` when installed, else why not (pyseccomp or libseccomp missing, kernel refusal);
        the worker reports the reason in its ready message and the parent decides what it means.
    """
    try:
        seccomp = _import_pyseccomp()
    except (ImportError, OSError, RuntimeError) as exc:  # libseccomp.so.2 missing makes the import fail
        return f"pyseccomp unavailable: {exc}"
    try:
        flt = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        deny = seccomp.ERRNO(errno.EPERM)
        for name in DENIED_SYSCALLS:
            try:
                flt.add_rule(deny, name)
            except (RuntimeError, ValueError, OSError):  # not a call on this architecture
                continue
        flt.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
        flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        flt.load()
    except Exception as exc:  # noqa: BLE001 - any failure means: no filter, say why
        return f"seccomp filter not installed: {type(exc).__name__}: {exc}"
    return ""
