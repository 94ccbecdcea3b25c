"""The operating system, not Python, contains generated code: the whole hostile corpus runs with the
Python layer switched off and every probe stays clean; with the OS layer off too, the probes trip.

These tests fail (never skip) when bubblewrap cannot start: containment is a property CI must show.
"""

from __future__ import annotations

import copy
import os
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.revision import build_with_revisions
from envfactory_assets.llm import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.runtime import SandboxLimits, SandboxWorker, cgroups, static_check
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.runtime.errors import SandboxError
from envfactory_assets.runtime.isolation import (
    OS_LAYER_ENV_VAR,
    UNSAFE_ENV_VAR,
    IsolationUnavailable,
    bound_paths,
    resolve_isolation,
)
from envfactory_assets.runtime.sandbox import _PACKAGE_PARENT, IDLE_CPU_S, IDLE_SLOW_POLL_S
from envfactory_assets.runtime.saved_tables import TABLE_SAVE_SOURCE
from envfactory_assets.security.hostile.containment import (
    CPU_AFTER_RETURN_S,
    HEARTBEAT_MAX_GAP_S,
    MEMORY_RETURN_MB,
    MEMORY_RETURN_S,
    RESOURCE_LIMITS,
    MeasuredWorker,
    Probes,
    format_containment,
    is_probe_sensitive,
    run_containment,
    run_resource_sample,
)
from envfactory_assets.security.hostile.os_samples import CORPUS, OS_SAMPLES, RESOURCE_SAMPLES
from envfactory_assets.sources.scan import SourceResource, inspect_file
from envfactory_assets_tests.fixture_environments import FIXTURES

LIMITS = SandboxLimits(memory_mb=256, cpu_seconds=5, call_timeout_s=1.5, kill_grace_s=1.0)

# The reproduction of the Python-layer escape, as reported: it passes the static check.
REPRODUCTION = textwrap.dedent('''\
    import dataclasses
    def load(data): return dict(data)
    def save(state): return dict(state)
    def attack(state):
        @dataclasses.dataclass
        class Base:
            a: int = 0
        dataclasses.fields(Base)[0].name = "a,exec(self.p))#"
        @dataclasses.dataclass(init=False, repr=False)
        class Child(Base):
            """x"""
        c = Child(); c.p = "import os; os.system('id > proof.txt'); self.uid = os.getuid()"
        c == Child()
        return {"uid": getattr(c, "uid", None)}
''')


@pytest.fixture(scope="module", autouse=True)
def os_layer_must_start() -> None:
    isolation = resolve_isolation()
    assert isolation.contained, f"the OS sandbox must start for these tests: {isolation.reason}"


@pytest.fixture(scope="module")
def corpus_rows() -> dict[str, dict]:
    rows = run_containment(CORPUS, limits=LIMITS, python_guards=False)
    print("\n" + format_containment(rows))
    return {row["name"]: row for row in rows}


def test_corpus_has_the_kinds_an_attacker_would_try() -> None:
    assert len(CORPUS) >= 50 and len({s.name for s in CORPUS}) == len(CORPUS)
    categories = {s.category for s in OS_SAMPLES}
    for kind in (
        "code generation",
        "format-string walk",
        "frame walk",
        "cross-environment tampering",
        "delayed payload",
        "non-determinism",
        "protocol forgery",
        "detached children",
    ):
        assert kind in categories
    assert sum(is_probe_sensitive(s) for s in CORPUS) >= 20


def test_every_probe_stays_clean_with_only_the_os_layer(corpus_rows) -> None:
    assert set(corpus_rows) == {s.name for s in CORPUS}
    leaks = {name: row["violations"] for name, row in corpus_rows.items() if not row["contained"]}
    assert leaks == {}
    assert all(row["contained_by_os"] for row in corpus_rows.values())


def test_a_benign_environment_in_the_same_run_is_unchanged(corpus_rows) -> None:
    assert [name for name, row in corpus_rows.items() if not row["benign_unchanged"]] == []


def test_negative_control_without_the_os_layer_trips_the_probes(monkeypatch) -> None:
    monkeypatch.setenv(OS_LAYER_ENV_VAR, "0")
    monkeypatch.setenv(UNSAFE_ENV_VAR, "1")
    sensitive = [s for s in CORPUS if is_probe_sensitive(s)]
    with pytest.warns(RuntimeWarning, match="WITHOUT the OS sandbox"):
        rows = run_containment(sensitive, limits=LIMITS, python_guards=False)
    assert not any(row["contained_by_os"] for row in rows)
    missed = [row["name"] for row in rows if row["contained"]]
    assert missed == []
    seen = " ".join(v for row in rows for v in row["violations"])
    for kind in ("secret leaked", "loopback listener received", "files changed outside", "survived the worker"):
        assert kind in seen


def test_the_reported_reproduction_passes_the_static_check_but_is_contained(tmp_path, monkeypatch) -> None:
    assert static_check(REPRODUCTION) == []
    monkeypatch.chdir(tmp_path)
    with SandboxWorker(LIMITS) as worker:
        worker.load_environment("repro", REPRODUCTION)
        episode = worker.open_episode({"repro": {}})
        result = worker.call(episode, "attack")
    # The Python layer was escaped (exec ran with the real builtins), the OS layer held: the code is
    # an unprivileged user with no shell, no process creation and no view of the host's files.
    assert result["ok"], result
    assert result["output"]["uid"] == 65534
    for place in (tmp_path, Path(_PACKAGE_PARENT), Path.home()):
        assert not (place / "proof.txt").exists()


def test_a_model_reply_with_the_payload_at_module_level_runs_only_in_the_sandbox(tmp_path) -> None:
    resource = inspect_file(FIXTURES / "bookshop.json", FIXTURES)
    assert isinstance(resource, SourceResource), resource
    env = build_environment(resource.as_row(), orjson.loads((FIXTURES / "bookshop.json").read_bytes()))
    with Probes() as probes:
        payload = textwrap.dedent(f'''\
            import dataclasses
            @dataclasses.dataclass
            class _Base:
                a: int = 0
            dataclasses.fields(_Base)[0].name = "a,exec(self.p))#"
            @dataclasses.dataclass(init=False, repr=False)
            class _Child(_Base):
                """x"""
            _c = _Child()
            _c.p = ("import builtins as b; h = b.open({probes.secret_paths[0]!r}); self.s = h.read(); "
                    "b.open({str(probes.canary_dir / "proof.txt")!r}, 'w').write(self.s); "
                    "import os; os.system('id > {tmp_path / "proof.txt"}')")
            _c == _Child()
        ''')
        reply = "```python\n" + payload + "\n" + env["source"] + "\n```\n"
        with FakeChatServer([reply, reply]) as server:
            backend = OpenAICompatibleBackend(server.base_url, "fake-coder", backoff_s=0.01, timeout_s=10)
            result = build_with_revisions(env, backend, max_revisions=1)
        assert probes.check([repr(result.as_dict())]) == []
    assert not (tmp_path / "proof.txt").exists()
    # What the verifier saw is recorded: the payload failed inside the sandbox (no such file there).
    assert result.status == "failed"
    assert "FileNotFoundError" in repr(result.as_dict()) or "PermissionError" in repr(result.as_dict())


def test_forks_never_share_a_mutated_row() -> None:
    source = textwrap.dedent("""\
        def load(data): return data
        def save(state): return state
        def scribble(state):
            row = state["tables"]["items"][0]
            row["name"] = "scribbled"
            row["tags"].append("x")
            return row
        def read(state):
            return state["tables"]["items"][0]
    """)
    state = {"tables": {"items": [{"name": "original", "tags": []}]}, "meta": {}}
    with SandboxWorker(LIMITS, python_guards=False) as worker:
        worker.load_environment("mutator", source)
        base = worker.open_episode({"mutator": state})
        sibling = worker.fork(base)
        other = worker.fork(base)
        assert worker.call(sibling, "scribble")["ok"]
        assert worker.call(base, "read")["output"] == {"name": "original", "tags": []}
        assert worker.call(other, "read")["output"] == {"name": "original", "tags": []}
        assert worker.save(sibling)["mutator"]["tables"]["items"][0]["tags"] == ["x"]


# Every way a tool can reach a nested object of a row it read, and change it in place.
HOSTILE_MUTATOR = textwrap.dedent("""\
    import copy
    NOTES = {"seen": []}

    def load(data):
        return {"tables": {"items": {r["id"]: dict(r) for r in data["tables"]["items"]}}, "log": list(data["log"])}

    def save(state):
        return {"tables": {"items": list(state["tables"]["items"].values())}, "log": state["log"]}

    def vandalize(state):
        items = state["tables"]["items"]
        for row in items.values():
            row["tags"].append("x")
            row["owner"]["name"] = "mallory"
            row["history"][0]["by"] = "mallory"
            row["history"].sort(key=lambda h: h["by"], reverse=True)
        first = next(iter(items))
        dict(items[first])["tags"].append("via dict()")
        {**items[first]}["owner"]["email"] = "via unpacking"
        items[first].copy()["history"].append({"by": "via copy()"})
        list(items.values())[-1]["tags"].clear()
        sorted(items.values(), key=lambda r: r["id"])[0]["owner"]["age"] = 99
        items.setdefault(first, {})["tags"].insert(0, "via setdefault")
        items.get(first)["history"][::-1][0]["by"] = "via a slice"
        for entry in reversed(items[first]["history"]):
            entry["when"] = "never"
        popped = items.pop(first)
        popped["tags"].append("popped")
        items[first] = popped
        state["log"][0]["n"] += 1
        state["log"] *= 2
        NOTES["seen"].append(first)
        copy.deepcopy(items)
        return {"ok": True}

    def read(state):
        return {"items": list(state["tables"]["items"].values()), "log": state["log"], "notes": NOTES}
""")


def _hostile_state() -> dict:
    rows = [
        {
            "id": f"r{i}",
            "tags": ["a", "b"],
            "owner": {"name": "ana", "email": "ana@example.com"},
            "history": [{"by": "ana", "when": "2024-01-01"}, {"by": "bo", "when": "2024-01-02"}],
        }
        for i in range(3)
    ]
    return {"tables": {"items": rows}, "log": [{"n": 0}]}


@pytest.mark.parametrize("python_guards", [True, False], ids=["guards", "no-guards"])
def test_forks_never_share_a_row_mutated_through_its_nested_objects(python_guards: bool) -> None:
    state = _hostile_state()
    pristine = {"items": state["tables"]["items"], "log": state["log"], "notes": {"seen": []}}
    with SandboxWorker(LIMITS, python_guards=python_guards) as worker:
        worker.load_environment("vandal", HOSTILE_MUTATOR)
        base = worker.open_episode({"vandal": state})
        first, second = worker.fork(base), worker.fork(base)
        assert worker.call(first, "vandalize")["output"] == {"ok": True}
        rows = {row["id"]: row for row in worker.save(first)["vandal"]["tables"]["items"]}
        assert rows["r0"]["tags"] == ["via setdefault", "a", "b", "x", "via dict()", "popped"]
        assert rows["r1"]["owner"]["name"] == "mallory" and rows["r2"]["tags"] == []
        assert worker.call(first, "vandalize")["output"] == {"ok": True}
        assert worker.save(first)["vandal"]["log"] == [{"n": 2}] * 4  # one object repeated, as in a plain list
        later = worker.fork(base)
        for untouched in (base, second, later):
            assert worker.call(untouched, "read")["output"] == pristine
        assert worker.call(second, "vandalize")["output"] == {"ok": True}
        assert worker.save(second)["vandal"] == worker.save(worker.fork(second))["vandal"]
        assert worker.call(later, "read")["output"] == pristine


# Every way a tool can read the snapshot's own containers past a copy-on-write node's methods (the unbound
# methods of dict and list, and of the dict subclasses an allowed module exports; copy.copy; the frozen list's
# class, shared by every episode of the worker), each followed by a change in place. The save is the table
# layout's, so the final-state hash comes from the rows' kept encodings.
SNAPSHOT_VANDAL = (
    textwrap.dedent("""\
    import collections
    import copy

    def load(data):
        return {"tables": {t: {r["id"]: dict(r) for r in rows} for t, rows in data["tables"].items()},
                "meta": dict(data["meta"])}

    def via_values(state):
        for row in dict.values(state["tables"]["flat"]):
            row["name"] = "mallory"

    def via_items(state):
        for _, row in dict.items(state["tables"]["flat"]):
            row.update(name="mallory")

    def via_get(state):
        dict.get(state["tables"]["flat"], "r0")["name"] = "mallory"

    def via_setdefault(state):
        dict.setdefault(state["tables"]["flat"], "r0", {})["name"] = "mallory"

    def via_pop(state):
        row = dict.pop(state["tables"]["flat"], "r0")
        row["name"] = "mallory"

    def via_copy(state):
        dict.copy(state["tables"]["flat"])["r0"].pop("name")

    def via_subclass(state):
        for row in collections.defaultdict.values(state["tables"]["flat"]):
            row.clear()

    def via_tables(state):
        dict.get(state, "tables")["flat"]["r0"]["name"] = "mallory"

    def via_nested_list(state):
        dict.get(state["tables"]["deep"]["r0"], "tags").append("mallory")

    def via_nested_dict(state):
        dict.get(state["tables"]["deep"]["r0"], "owner")["name"] = "mallory"

    def via_list_copy(state):
        list.copy(state["tables"]["deep"]["r0"]["history"])[0]["by"] = "mallory"

    def via_list_pop(state):
        list.pop(state["tables"]["deep"]["r0"]["history"], 0)["by"] = "mallory"

    def via_meta(state):
        dict.get(state, "meta")["now"] = "never"

    def via_copy_module(state):
        copy.copy(dict.get(state["tables"]["flat"], "r0"))["name"] = "mallory"

    def via_the_class(state):
        setattr(type(dict.get(state["tables"]["deep"]["r0"], "tags")), "copy", lambda self: self)

    def read_only(state):
        names = [row["name"] for row in dict.values(state["tables"]["flat"])]
        tags = list(dict.get(state["tables"]["deep"]["r0"], "tags"))
        return {"names": names, "tags": tags, "equal": dict.get(state["tables"]["flat"], "r0") == {"id": "r0",
                "name": "row 0"}}

    def rename(state, row_id, name):
        state["tables"]["flat"][row_id]["name"] = name
    """)
    + TABLE_SAVE_SOURCE
)
SNAPSHOT_ROUTES = [
    "via_values",
    "via_items",
    "via_get",
    "via_setdefault",
    "via_pop",
    "via_copy",
    "via_subclass",
    "via_tables",
    "via_nested_list",
    "via_nested_dict",
    "via_list_copy",
    "via_list_pop",
    "via_meta",
    "via_copy_module",
    "via_the_class",
]

OWN_CHANGES = {
    "via_pop": lambda saved: saved["tables"]["flat"].pop(0),
    "via_copy": lambda saved: saved["tables"]["flat"][0].pop("name"),
    "via_list_pop": lambda saved: saved["tables"]["deep"][0]["history"].pop(0),
}


def _vandal_state() -> dict:
    flat = [{"id": f"r{i}", "name": f"row {i}"} for i in range(3)]
    deep = [
        {
            "id": f"r{i}",
            "tags": ["a"],
            "owner": {"name": "ana"},
            "history": [{"by": "ana"}, {"by": "bo"}],
        }
        for i in range(2)
    ]
    return {"tables": {"flat": flat, "deep": deep}, "meta": {"now": "2024-05-01T00:00:00Z"}}


@pytest.mark.parametrize("python_guards", [True, False], ids=["guards", "no-guards"])
def test_forks_never_share_a_row_mutated_past_the_copy_on_write_methods(python_guards: bool) -> None:
    """A tool that reaches the shared snapshot's rows through ``dict.values(table)`` and the like can read them,
    and its change in place fails with an error naming the type: siblings, later forks and the final-state hash
    (from the rows' kept encodings) still see the snapshot as it was."""
    state = _vandal_state()
    pristine_hash = state_hash(state)
    with SandboxWorker(LIMITS, python_guards=python_guards) as worker:
        worker.load_environment("vandal", SNAPSHOT_VANDAL)
        base = worker.open_episode({"vandal": state})
        gold = worker.fork(base)
        assert worker.state_hashes(gold) == {"vandal": pristine_hash}
        forks = [worker.fork(base) for _ in SNAPSHOT_ROUTES]
        for route, episode in zip(SNAPSHOT_ROUTES, forks, strict=True):
            result = worker.call(episode, route)
            expected = copy.deepcopy(state)
            if route in OWN_CHANGES:  # what changed the episode's own copy (a pop, a copy made through the view)
                OWN_CHANGES[route](expected)
            if route != "via_copy":  # dict.copy reads a dict subclass through its keys and items: own copies
                assert not result["ok"] and result["error"]["exception"] in ("TypeError", "AttributeError"), route
            assert worker.state_hashes(episode, [gold]) == {"vandal": state_hash(expected)}, route
            assert worker.save(episode)["vandal"] == expected, route
        sibling = forks[0]
        assert worker.call(sibling, "read_only")["output"] == {
            "names": ["row 0", "row 1", "row 2"],
            "tags": ["a"],
            "equal": True,
        }
        assert worker.save(worker.fork(base))["vandal"] == state
        assert worker.call(sibling, "rename", {"row_id": "r1", "name": "mine"})["ok"]  # its own copy changes
        assert worker.save(sibling)["vandal"]["tables"]["flat"][1]["name"] == "mine"
        assert worker.save(worker.fork(base))["vandal"] == worker.save(gold)["vandal"] == state
        assert worker.state_hashes(worker.fork(base), [gold]) == {"vandal": pristine_hash}


def test_each_environment_runs_in_its_own_process() -> None:
    with SandboxWorker(LIMITS) as worker:
        worker.load_environment("one", "def load(d): return d\ndef save(s): return s\ndef ping(state): return 1\n")
        worker.load_environment("two", "def load(d): return d\ndef save(s): return s\ndef pong(state): return 2\n")
        episode = worker.open_episode({"one": {}, "two": {}})
        assert worker.call(episode, "ping")["output"] == 1 and worker.call(episode, "pong")["output"] == 2
        pids = worker.pids
        assert set(pids) == {"one", "two"} and len(set(pids.values())) == 2
        assert worker.seccomp_status("one") == "on"


def test_the_sandbox_sees_only_the_named_paths() -> None:
    paths = bound_paths()
    home = os.environ.get("ENVFACTORY_HOME", str(Path(_PACKAGE_PARENT) / ".envfactory"))
    assert not any(p == _PACKAGE_PARENT or home.startswith(p + "/") or p == home for p in paths)
    assert str(Path(_PACKAGE_PARENT) / "envfactory_assets") in paths
    assert not any(p == "/etc" or p.startswith("/etc/") for p in paths)


def test_untrusted_code_is_refused_when_the_os_layer_cannot_start(monkeypatch) -> None:
    monkeypatch.setenv(OS_LAYER_ENV_VAR, "0")
    monkeypatch.delenv(UNSAFE_ENV_VAR, raising=False)
    with SandboxWorker(LIMITS) as worker:
        with pytest.raises(IsolationUnavailable, match=UNSAFE_ENV_VAR):
            worker.load_environment("model_written", REPRODUCTION, origin="model")
        with pytest.warns(RuntimeWarning, match="templated"):
            worker.load_environment("templated", "def load(d): return d\ndef save(s): return s\n", origin="template")


def test_idle_workers_are_stopped_beyond_the_process_cap_and_come_back() -> None:
    module = "def load(d): return d\ndef save(s): return s\ndef who(state): return state.get('name')\n"
    with SandboxWorker(LIMITS, max_processes=2) as worker:
        for name in ("a", "b", "c"):
            worker.load_environment(name, module)
        assert len(worker.pids) == 2  # "a" was idle and the least recently used
        episode = worker.open_episode({"a": {"name": "A"}, "b": {"name": "B"}, "c": {"name": "C"}})
        assert [worker.call(episode, f"{e}.who")["output"] for e in "abc"] == ["A", "B", "C"]
        assert len(worker.pids) == 3  # an open episode's workers are never stopped
        worker.close_episode(episode)
        again = worker.open_episode({"a": {"name": "again"}})
        assert worker.call(again, "who")["output"] == "again"


def _host_uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("Uid:")).split()[1])


def test_the_sandbox_user_is_never_host_root() -> None:
    with SandboxWorker(LIMITS) as worker:
        worker.load_environment("plain", "def load(d): return d\ndef save(s): return s\n")
        uid = _host_uid(worker.pid)
    assert uid != 0
    if os.geteuid() == 0:
        assert uid == 65534


def test_environment_ids_that_look_like_options_or_are_malformed() -> None:
    module = "def load(d): return d\ndef save(s): return s\ndef ping(state): return 'pong'\n"
    with SandboxWorker(LIMITS) as worker:
        worker.load_environment("--help", module)
        assert worker.call(worker.open_episode({"--help": {}}), "ping")["output"] == "pong"
        for bad in ("with\0nul", "x" * 201, ""):
            with pytest.raises(ValueError, match="env_id"):
                worker.load_environment(bad, module)


def test_binds_land_on_top_of_the_private_tmp() -> None:
    """A checkout or virtualenv under /tmp must stay visible: the tmpfs is mounted before the binds."""
    from envfactory_assets.runtime.isolation import bwrap_command

    command = bwrap_command("/usr/bin/bwrap", ["/bin/true"], {})
    if command[0] != "/usr/bin/bwrap":  # run as root: the launcher's spec holds the bubblewrap command
        import json

        command = json.loads(command[-1])["argv"]
    tmpfs = command.index("--tmpfs")
    assert command[tmpfs + 1] == "/tmp"
    binds = [i for i, arg in enumerate(command) if arg == "--ro-bind"]
    assert binds and min(binds) > tmpfs
    assert command.index("--remount-ro") > max(binds)


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox uid is only a host uid when the parent is root")
def test_leftover_probe_ignores_another_runs_sandbox_processes_and_kills_only_escaped_ones() -> None:
    """As root every sandbox runs as host uid 65534, so a pipeline running beside the corpus has processes of
    that uid too: the probe counted (and killed) those as the sample's leftovers. A process of that uid
    under another program's tree is not one; a detached one hanging off init still is."""
    import subprocess
    import sys
    import time

    probes = Probes()
    other = subprocess.Popen(  # another run: a root parent holding a sandbox-uid child
        [
            sys.executable,
            "-c",
            (
                "import subprocess, sys, time\n"
                "child = subprocess.Popen([sys.executable, '-c', "
                "'import os, time; os.setuid(65534); time.sleep(60)'])\n"
                "print(child.pid, flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    read_end, write_end = os.pipe()
    if os.fork() == 0:  # a detached sandbox-uid process, as an escaped sample would leave
        os.setsid()
        if os.fork() == 0:
            os.setuid(65534)
            os.write(write_end, str(os.getpid()).encode())
            time.sleep(60)
        os._exit(0)
    os.close(write_end)
    escaped = int(os.read(read_end, 32))
    os.close(read_end)
    os.wait()
    other_child = int(other.stdout.readline())
    try:
        left = {pid for pid, _ in probes._leftovers()}
        assert escaped in left and other_child not in left
        probes.kill_leftovers()
        os.kill(other_child, 0)  # still alive: not killed as a leftover
    finally:
        probes.close()
        os.kill(other_child, 9)
        other.kill()
        other.wait()
    deadline = time.monotonic() + 5
    while not _is_gone(escaped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _is_gone(escaped)


def _is_gone(pid: int) -> bool:
    from envfactory_assets.security.hostile.containment import _is_zombie

    return _is_zombie(pid)


# -- kernel limits: memory no rlimit counts, CPU per call and after it, the worker's lifetime CPU budget --------

_EXPECTED_END = {  # how each resource sample must end: refused by the seccomp filter, or its worker killed
    "shm_800_mib": ("tool_error", "PermissionError"),
    "memfd_750_mib": ("tool_error", "PermissionError"),
    "tmpfs_inode_flood": ("resource_limit", "worker killed at its"),
    "cpu_threads_left_running": ("resource_limit", "left 2 thread(s) running"),
    "timer_runs_code_after_return": (None, ""),  # the call answers; the worker is killed while idle
    "raise_rlimit_cpu": ("resource_limit", "CPU limit of 1 s per call"),
    "reply_amplification": ("too_large", "max_decoded_bytes"),
    "reply_50_mib_valid": (None, ""),  # decoded piecewise: the heartbeat check below is the point
    "frame_declaring_1_gib": ("too_large", "worker killed"),
    "forged_deep_frame": ("too_large", "max_depth"),
    "fd_flood_eventfd_timerfd_epoll": ("tool_error", "Too many open files"),
    "raise_rlimit_nofile": ("bad_arguments", "not allowed to raise maximum limit"),
    "stderr_firehose": ("timeout", "exceeded the time limit"),
    "reply_ucs4_string": ("too_large", "max_decoded_bytes"),
    "reply_huge_integer": ("protocol", "frame is not JSON"),
    "reply_invalid_utf8": ("protocol", "frame is not JSON"),
    "close_protocol_fds_exit_0": ("crash", "worker exited with status 0"),
    "clone3_vfork_posix_spawn": ("tool_error", "PermissionError: no process"),
    "thread_left_sleeping": ("resource_limit", "left 1 thread(s) running"),
    "mmap_shared_tmp_file": ("tool_error", "File too large"),
}
#: the samples whose worker must be gone afterwards; the rest keep serving their other episodes. A forged frame
#: leaves the worker's own reply behind it in the pipe, so the next exchange (closing the lost episode) finds
#: the response ids out of step and kills the worker.
_WORKER_KILLED = {
    "tmpfs_inode_flood",
    "timer_runs_code_after_return",
    "cpu_threads_left_running",
    "raise_rlimit_cpu",
    "frame_declaring_1_gib",
    "forged_deep_frame",
    "reply_ucs4_string",
    "reply_huge_integer",
    "reply_invalid_utf8",
    "close_protocol_fds_exit_0",
    "thread_left_sleeping",
}


#: the limit a ``resource_limit`` or a decoded ``too_large`` answer names in its ``limit`` field (none elsewhere)
_LIMIT_NAMED = {
    "tmpfs_inode_flood": ("memory_mb", "cpu_seconds"),  # 1 CPU-s may run out first (its own test: memory)
    "cpu_threads_left_running": "threads_after_call",
    "raise_rlimit_cpu": "cpu_seconds",
    "thread_left_sleeping": "threads_after_call",
    "reply_amplification": "max_decoded_bytes",
    "forged_deep_frame": "max_depth",
    "reply_ucs4_string": "max_decoded_bytes",
}


def test_every_resource_case_has_a_sample() -> None:
    assert {s.name for s in RESOURCE_SAMPLES} == set(_EXPECTED_END)
    assert all(s in OS_SAMPLES for s in RESOURCE_SAMPLES)


@pytest.mark.parametrize("sample", RESOURCE_SAMPLES, ids=lambda s: s.name)
def test_resource_samples_are_stopped_and_leave_the_host_as_it_was(sample) -> None:
    row = run_resource_sample(sample, limits=RESOURCE_LIMITS, python_guards=False)
    error_type, message = _EXPECTED_END[sample.name]
    assert (row["error_type"], row["violations"]) == (error_type, []), row
    assert message in row["message"], row
    named = _LIMIT_NAMED.get(sample.name)
    assert row["limit"] in (named if isinstance(named, tuple) else (named,)), row
    assert row["worker_killed"] == (sample.name in _WORKER_KILLED), row
    assert row["memory_back_s"] is not None and row["memory_back_s"] <= MEMORY_RETURN_S, row
    assert row["cpu_after_return_s"] < CPU_AFTER_RETURN_S, row
    assert row["heartbeat_max_gap_s"] < HEARTBEAT_MAX_GAP_S, row


def test_the_workers_memory_group_counts_the_kernel_memory_of_a_tmpfs_inode_flood() -> None:
    """No byte is written, so neither RLIMIT_AS nor the tmpfs size cap strikes: only the control group,
    which charges inodes and dentries to the worker, stops it (CPU and time budgets are out of reach)."""
    assert cgroups.detect().active, f"workers must get a control group here: {cgroups.detect().reason}"
    flood = next(s for s in RESOURCE_SAMPLES if s.name == "tmpfs_inode_flood")
    limits = SandboxLimits(memory_mb=128, cpu_seconds=60, call_timeout_s=60.0, kill_grace_s=1.0)
    row = run_resource_sample(flood, limits=limits)
    assert row["error_type"] == "resource_limit" and "memory limit of 128 MiB" in row["message"], row
    assert row["limit"] == "memory_mb", row
    assert row["memory_back_s"] is not None and row["violations"] == [], row


def test_the_hard_cpu_limit_is_the_lifetime_budget_and_groups_are_removed() -> None:
    source = textwrap.dedent("""\
        import resource
        def load(d): return d
        def save(s): return s
        def limits(state):
            soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
            try:
                resource.setrlimit(resource.RLIMIT_CPU, (hard + 1, hard + 1))
                raised = True
            except (ValueError, OSError):
                raised = False
            return {"hard": hard, "raised": raised}
    """)
    limits = SandboxLimits(memory_mb=256, cpu_seconds=2, cpu_lifetime_s=30, call_timeout_s=5.0)
    support = cgroups.detect()
    with SandboxWorker(limits, python_guards=False) as worker:
        worker.load_environment("budget", source)
        result = worker.call(worker.open_episode({"budget": {}}), "limits")
        assert result["output"] == {"hard": 30, "raised": False}, result
        assert worker.cpu_seconds("budget") > 0
        groups = [p for _, base in support.bases for p in Path(base).glob(f"{cgroups.GROUP_PREFIX}{os.getpid()}-*")]
        assert len(groups) == len(support.bases)
    assert [p for p in groups if p.exists()] == []
    with pytest.raises(ValueError, match="cpu_lifetime_s"):
        SandboxLimits(cpu_seconds=60, cpu_lifetime_s=10)


def test_code_that_runs_on_after_its_call_is_killed_while_idle_and_the_next_call_says_why() -> None:
    """A signal handler armed by a call runs in the worker's own loop between requests, with no thread left and
    SIGXCPU ignored: however long after the call it starts, the parent kills the worker within about one slow
    poll of CPU, and the next call answers ``resource_limit`` naming the limit; a fresh worker serves on."""
    source = textwrap.dedent("""\
        import hashlib, signal
        def load(d): return d
        def save(s): return s
        def arm(state, delay):
            signal.signal(signal.SIGXCPU, signal.SIG_IGN)
            def spin(signum, frame):
                while True:
                    hashlib.sha256(b"h" * 4096).digest()
            signal.signal(signal.SIGALRM, spin)
            signal.setitimer(signal.ITIMER_REAL, delay)
            return "armed"
        def ping(state): return "pong"
    """)
    limits = SandboxLimits(memory_mb=256, cpu_seconds=5, call_timeout_s=5.0, kill_grace_s=1.0)
    with SandboxWorker(limits, python_guards=False) as worker:
        worker.load_environment("late", source)
        for delay in (0.05, 1.5):  # within the first second after the answer, and past it (the slower poll)
            episode = worker.open_episode({"late": {}})
            assert worker.call(episode, "arm", {"delay": delay})["output"] == "armed"
            at_return = worker.cpu_seconds("late")
            time.sleep(delay + 1.5)
            used = worker.cpu_seconds("late") - at_return
            assert used < IDLE_CPU_S + IDLE_SLOW_POLL_S, used  # one core at most, for one slow poll at most
            result = worker.call(episode, "ping")
            assert result["error"]["type"] == "resource_limit" and result["error"]["episode_lost"], result
            assert "CPU limit between calls" in result["error"]["message"], result
            assert result["error"]["limit"] == "idle_cpu", result
            assert not worker.is_open(episode)
            assert worker.call(worker.open_episode({"late": {}}), "ping")["output"] == "pong"
        episode = worker.open_episode({"late": {}})
        for _ in range(20):  # an honest worker, called often, is never taken for one
            assert worker.call(episode, "ping")["output"] == "pong"
            time.sleep(0.05)


def test_a_workers_stderr_is_read_at_a_bounded_rate_into_a_bounded_tail() -> None:
    """A stream faster than the parent's drain rate blocks the worker on a full pipe (no CPU in it, none spent
    copying in the parent): 32 MiB of stderr outlasts a 2 s call, and the parent keeps only the tail."""
    source = textwrap.dedent("""\
        import sys
        def load(d): return d
        def save(s): return s
        def shout(state):
            block = "e" * (1 << 20)
            for _ in range(32):
                sys.stderr.write(block)
            sys.stderr.flush()
            return "done"
    """)
    limits = SandboxLimits(memory_mb=256, cpu_seconds=5, call_timeout_s=2.0, kill_grace_s=1.0)
    with SandboxWorker(limits, python_guards=False) as worker:
        worker.load_environment("loud", source)
        started = time.monotonic()
        result = worker.call(worker.open_episode({"loud": {}}), "shout")
        assert result["error"]["type"] == "timeout" and time.monotonic() - started < 5, result
        assert 0 < len(worker.stderr_tail("loud")) <= 16 * 1024


# -- the memory measure of the resource samples: what a sample leaves behind, and nothing else -----------------

_LEAKER = textwrap.dedent("""\
    import ctypes, os, sys
    size = int(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    segment = libc.shmget(0, ctypes.c_size_t(size), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    address = libc.shmat(segment, None, 0)
    assert segment >= 0 and address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    ctypes.memset(address, 1, size)
    memfd = os.memfd_create("leak")
    os.write(memfd, b"\\1" * size)
    print(segment, memfd, flush=True)
    sys.stdin.readline()  # the test holds both before this process ends: they outlive it and its group
""")


def _group_for_a_child(measuring) -> Path:
    """A child group of the measuring group, made for the memory controller only (all that is measured)."""
    base = dict(measuring.support.bases)["memory" if measuring.support.mode == "v1" else ""]
    path = Path(base) / "leaker"
    path.mkdir()
    return path


def test_the_sample_memory_counts_shared_memory_and_memfd_pages_left_after_the_process_and_its_group() -> None:
    """What a worker leaves behind outlives it: 2 x 48 MiB made by a process in a group under the measuring group,
    held after that process ended and its group was removed, are in the measure until they are freed."""
    import ctypes
    import subprocess
    import sys

    size = 48 << 20
    with MeasuredWorker(RESOURCE_LIMITS) as worker:
        group = worker.group
        assert group.exact, f"workers must get a control group here: {cgroups.detect().reason}"
        before = group.in_use()
        child = _group_for_a_child(group)
        leaker = subprocess.Popen(
            [sys.executable, "-c", _LEAKER, str(size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: Path(child / "cgroup.procs").write_text(str(os.getpid())),
        )
        segment, memfd_number = (int(v) for v in leaker.stdout.readline().split())
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        attached = libc.shmat(segment, None, 0)  # kept even where the kernel removes unattached segments at exit
        memfd = os.open(f"/proc/{leaker.pid}/fd/{memfd_number}", os.O_RDONLY)
        try:
            leaker.communicate("\n", timeout=10)
            cgroups.remove_dir(child)
            assert not child.exists()
            left_mb = (group.in_use() - before) / 2**20
            assert left_mb > 2 * 48 - 2, left_mb
        finally:
            libc.shmdt(ctypes.c_void_p(attached))
            libc.shmctl(segment, 0, None)  # IPC_RMID
            os.close(memfd)
        assert (group.in_use() - before) / 2**20 < MEMORY_RETURN_MB / 4


def test_the_sample_memory_does_not_move_when_other_processes_allocate_and_read_files(tmp_path) -> None:
    """200 MiB allocated and 64 MiB of file written and read by a process outside the measuring group (what a
    pipeline beside the tests does, and what moved the machine-wide figure past the 16 MiB tolerance): the
    sample's measure moves by less than 1 MiB."""
    import subprocess
    import sys

    other = textwrap.dedent(f"""\
        import sys
        block = bytearray(200 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        with open({str(tmp_path / "file")!r}, "wb") as handle:
            handle.write(b"x" * (64 << 20))
        with open({str(tmp_path / "file")!r}, "rb") as handle:
            handle.read()
        print("ready", flush=True)
        sys.stdin.readline()
    """)
    with MeasuredWorker(RESOURCE_LIMITS) as worker:
        worker.load_environment("quiet", "def load(d): return d\ndef save(s): return s\n")
        worker.open_episode({"quiet": {}})
        group = worker.group
        assert group.exact, f"workers must get a control group here: {cgroups.detect().reason}"
        before = group.in_use()
        process = subprocess.Popen([sys.executable, "-c", other], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert process.stdout.readline() == b"ready\n"
            during_mb = (group.in_use() - before) / 2**20
        finally:
            process.communicate(b"\n", timeout=10)
        after_mb = (group.in_use() - before) / 2**20
    assert abs(during_mb) < 1 and abs(after_mb) < 1, (during_mb, after_mb)


def test_the_heartbeat_counts_a_parent_that_holds_the_interpreter_whatever_the_machine_does() -> None:
    """A freeze in the parent (one C call holding the interpreter lock, as decoding a huge reply does) is a gap
    the heartbeat counts whole: its thread sleeps on the lock, which is no run-queue wait to excuse."""
    import random

    from envfactory_assets.security.hostile.containment import _Heartbeat

    numbers = [random.random() for _ in range(3_000_000)]
    with MeasuredWorker(RESOURCE_LIMITS) as worker, _Heartbeat(worker.group.cpu_seconds) as heartbeat:
        time.sleep(0.05)
        started = time.thread_time()
        sorted(numbers)  # one C call: the lock is not released until it returns
        held_s = time.thread_time() - started
    assert held_s > 0.2, held_s
    assert heartbeat.max_gap_s >= held_s * 0.9, (heartbeat.max_gap_s, held_s)


def test_a_heartbeat_whose_thread_failed_never_reports_a_figure() -> None:
    """A heartbeat thread that stops on an error has measured nothing since: leaving its context raises rather
    than handing back the gaps it saw before it stopped."""
    from envfactory_assets.security.hostile.containment import _Heartbeat

    ticks = iter(range(3))

    def workers_cpu_s() -> float:
        return float(next(ticks))  # the third tick finds nothing left: StopIteration in the heartbeat thread

    with pytest.raises(SandboxError, match="heartbeat thread failed.*StopIteration"), _Heartbeat(workers_cpu_s):
        time.sleep(0.1)
