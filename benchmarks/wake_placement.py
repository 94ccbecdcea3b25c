"""Where a sandbox call's time beyond a pipe echo goes on this machine: the control groups, or the CPU the
scheduler wakes each process on.

Two measures, as medians of ``--repeat`` alternated tries (microseconds):

- one call of a trivial tool through the sandbox worker, a pipe echo to a plain process, and the same echo to a
  process placed in a worker's full control group (memory with kernel memory, pids, a CPU quota of one core);
- after each of ``--repeat`` calls and echoes, whether the worker (the echo) last ran on the parent's CPU
  (``/proc/<pid>/stat``, field 39).

Run as root where workers get control groups (cgroup v1 or v2)::

    .venv/bin/python -m benchmarks.wake_placement --repeat 3000

With ``ENVFACTORY_SANDBOX_OS_LAYER=0`` the worker runs without bubblewrap and seccomp (a measure only: never
for untrusted code). The figures are discussed in ``benchmarks/notes.md`` ("Episodes at memory speed").
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable

from benchmarks import episode_speed as bench
from envfactory_assets.runtime import cgroups
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker


def last_cpu(pid: int) -> int:
    """The CPU the process ``pid`` last ran on (``/proc/<pid>/stat`` field 39)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[36])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, parents before children."""
    found, stack = [], [pid]
    while stack:
        children = subprocess.run(["pgrep", "-P", str(stack.pop())], capture_output=True, text=True).stdout.split()
        found += [int(child) for child in children]
        stack += [int(child) for child in children]
    return found


def medians_us(functions: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median wall time of each function, microseconds, their tries alternated after 5 warm-up calls each."""
    for function in functions.values():
        for _ in range(5):
            function()
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeat):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            samples[name].append(time.perf_counter() - start)
    return {name: round(statistics.median(values) * 1e6, 1) for name, values in samples.items()}


def run(repeat: int) -> dict[str, object]:
    """Both measures (see the module docstring)."""
    support = cgroups.detect()
    plain, grouped = bench._Echo(), bench._Echo()
    group = None
    if support.active:
        group = cgroups.WorkerCgroup(support, memory_bytes=1 << 30, pids_max=64, cpu_cores=1.0)
        for procs in group.procs_files:
            with open(procs, "w") as file:
                file.write(str(grouped.proc.pid))
    try:
        with SandboxWorker(SandboxLimits()) as worker:
            worker.load_environment("ping", bench.PING, origin="template")
            episode = worker.open_episode({"ping": {}})
            functions = {"call": lambda: worker.call(episode, "ping"), "echo": plain.round_trip}
            if group is not None:
                functions["echo_in_worker_group"] = grouped.round_trip
            timings = medians_us(functions, repeat)
            echoes = {plain.proc.pid, grouped.proc.pid}
            pythons = [
                pid
                for pid in descendants(os.getpid())
                if pid not in echoes and open(f"/proc/{pid}/comm").read().startswith("python")
            ]
            placement: collections.Counter[str] = collections.Counter()
            for _ in range(repeat):
                worker.call(episode, "ping")
                placement[
                    "worker on the parent's CPU"
                    if last_cpu(pythons[-1]) == last_cpu(os.getpid())
                    else "worker on another CPU"
                ] += 1
                plain.round_trip()
                placement[
                    "echo on the parent's CPU"
                    if last_cpu(plain.proc.pid) == last_cpu(os.getpid())
                    else "echo on another CPU"
                ] += 1
    finally:
        plain.close()
        grouped.close()
        if group is not None:
            group.remove()
    return {"median_us": timings, "last_cpu": dict(placement), "cgroups": support.describe()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3000, help="tries of each measure")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    print(json.dumps(run(args.repeat), indent=2))


if __name__ == "__main__":
    main()
