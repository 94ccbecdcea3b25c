"""The corpus-scale coverage run, resumable by partition: ``environments`` and ``verified_environments`` built
for the environment partitions not yet verified, a batch of partitions per ``envfactory run`` command, each
command in its own process (its time and peak memory land in the store's ``stage_times``, as for any run).

A batch whose partitions all end with a current verification row is done; a re-run skips them, so a stopped run
(killed, out of time) resumes where it stopped. A batch of several partitions that fails without verifying any of
them is run again one partition at a time, so that one document that fails its process (out of memory, a write
the store refuses) does not hold back the rest of the corpus; :data:`MAX_FAILED_IN_A_ROW` one-partition runs in a
row that verify nothing stop the loop, since the cause is then not one document (a bad setting, a held run lock).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The stages a batch builds, in one ``envfactory run --select``.
BATCH_SELECTION = "environments,verified_environments"

#: Longest ``--partition`` argument a batch's command gets: Linux refuses to start a process with one argument
#: over 128 KiB (``MAX_ARG_STRLEN``, E2BIG), which a large ``--batch`` of the whole corpus's keys reaches.
MAX_PARTITION_ARG_CHARS = 100_000

#: One-partition runs in a row that verify nothing before :func:`run_batches` stops: one bad document fails
#: alone, a few bad documents next to each other are passed over, a cause common to every partition stops it.
MAX_FAILED_IN_A_ROW = 3


def verified_keys(environments: Sequence[dict[str, Any]], verifications: Sequence[dict[str, Any]]) -> set[str]:
    """Partition keys (``env_id``) whose current environment has a current verification row (of that very
    environment version: a rebuilt environment is pending again)."""
    current = {r["env_id"]: r["id"] for r in environments}
    return {r["env_id"] for r in verifications if current.get(r["env_id"]) == r["environment_id"]}


def built_with(latest: dict[str, Any], max_resources: int, default: int) -> set[str]:
    """Partition keys whose latest ``environments`` build used ``max_resources``.

    Args:
        latest: ``{partition key: max_resources of its latest environments materialization}``, None for a
            build that recorded none (made before the setting existed, so with the builder's cap ``default``).
        max_resources: the setting the coverage run builds with.
        default: the builder's own cap.
    """
    return {k for k, v in latest.items() if (default if v is None else v) == max_resources}


def plan_batches(partitions: Sequence[str], done: set[str], size: int) -> list[list[str]]:
    """The partitions not in ``done``, in the order of ``partitions`` (the partitions' own order, in which a batch
    of keys next to each other is one partition-range run), in batches of at most ``size`` keys whose
    ``--partition`` argument stays within :data:`MAX_PARTITION_ARG_CHARS`.

    Raises:
        ValueError: ``size`` below 1.
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"batch size {size!r}: expected a whole number >= 1")
    batches: list[list[str]] = []
    chars = 0
    for key in dict.fromkeys(k for k in partitions if k not in done):
        if not batches or len(batches[-1]) >= size or chars + 1 + len(key) > MAX_PARTITION_ARG_CHARS:
            batches.append([])
            chars = -1  # no comma before a batch's first key
        batches[-1].append(key)
        chars += 1 + len(key)
    return batches


def batch_command(keys: Sequence[str], config_path: str | None) -> list[str]:
    """The ``envfactory run`` command line (this interpreter) that builds and verifies ``keys``."""
    command = [sys.executable, "-m", "envfactory_assets.cli", "run", "--select", BATCH_SELECTION]
    command += ["--partition", ",".join(keys)]
    return command + (["--config", config_path] if config_path else [])


@dataclass
class BatchOutcome:
    """One batch: its keys, the command's exit code and wall time (seconds), and how many keys it verified."""

    keys: list[str]
    returncode: int
    seconds: float
    verified: int


@dataclass
class CoverageRun:
    """What :func:`run_batches` did: the batches run (a failed batch's one-partition reruns included), the
    partitions whose one-partition run verified nothing (``failed``: left pending, tried again by a re-run), and
    why it stopped (``done``, ``time_budget`` or ``batch_failed``)."""

    outcomes: list[BatchOutcome] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stopped: str = "done"


def _parent_death_signal() -> Callable[[], None] | None:
    """A function for ``preexec_fn`` that asks the kernel to send the child SIGTERM when its parent dies (Linux
    ``PR_SET_PDEATHSIG``), or None off Linux. The C function is looked up here, in the parent: between fork and
    exec the child only calls it (loading a library there could deadlock on a lock another thread held)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGTERM)


def call_batch(command: list[str]) -> int:
    """Run one batch's command line; returns its exit code. On Linux the batch ends when this process does,
    however it ends: a batch must not go on writing the store after ``envfactory coverage`` was killed, where the
    command run again would find the run lock held by it."""
    return subprocess.call(command, preexec_fn=_parent_death_signal())


def run_batches(
    batches: Sequence[list[str]],
    config_path: str | None,
    is_verified: Callable[[list[str]], int],
    max_seconds: float | None = None,
    run: Callable[[list[str]], int] | None = None,
    log: Callable[[str], None] = print,
) -> CoverageRun:
    """Run each batch as its own ``envfactory run`` process until all are done or ``max_seconds`` (no new batch
    starts after it) has passed.

    Args:
        batches: partition keys per batch (:func:`plan_batches`).
        config_path: the run config every batch runs with (``--config``).
        is_verified: how many of a batch's keys have a current verification row now (read from the store after
            the batch's process ended).
        max_seconds: wall-clock budget of the loop (None: none).
        run: runs one command line and returns its exit code (default: :func:`call_batch`).
        log: receives one line per batch.
    """
    call = run or call_batch
    started = time.monotonic()
    result = CoverageRun()
    failed_in_a_row = 0

    def out_of_time() -> bool:
        return max_seconds is not None and time.monotonic() - started >= max_seconds

    def one(keys: list[str], label: str) -> BatchOutcome:
        t0 = time.monotonic()
        code = call(batch_command(keys, config_path))
        seconds = time.monotonic() - t0
        outcome = BatchOutcome(list(keys), code, seconds, is_verified(keys))
        result.outcomes.append(outcome)
        log(
            f"{label}: {outcome.verified}/{len(keys)} partitions verified in {seconds / 60:.1f} min"
            + (f" (exit {code})" if code else "")
        )
        return outcome

    for i, keys in enumerate(batches, start=1):
        if out_of_time():
            result.stopped = "time_budget"
            return result
        label = f"batch {i}/{len(batches)}"
        if one(keys, label).verified:
            failed_in_a_row = 0
            continue
        # nothing verified: each partition alone, to tell one bad document from a cause they all share
        singles = [[k] for k in keys] if len(keys) > 1 else [keys]
        if len(keys) > 1:
            log(f"{label} verified none of its {len(keys)} partitions: running them one at a time")
        for j, single in enumerate(singles, start=1):
            if len(keys) > 1:
                if out_of_time():
                    result.stopped = "time_budget"
                    return result
                verified = one(single, f"{label}, partition {j}/{len(keys)} ({single[0]})").verified
            else:
                verified = 0
            if verified:
                failed_in_a_row = 0
                continue
            result.failed += single
            failed_in_a_row += 1
            if failed_in_a_row >= MAX_FAILED_IN_A_ROW:
                result.stopped = "batch_failed"
                return result
    return result


def default_output(home: Path) -> Path:
    """Where ``envfactory coverage`` writes its Markdown when no ``--output`` is given."""
    return home / "corpus_coverage.md"
