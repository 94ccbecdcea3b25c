"""The corpus-scale coverage run, resumable by partition: ``environments`` and ``verified_environments`` built
for the environment partitions not yet verified, a batch of partitions per ``envfactory run`` command, each
command in its own process (its time and peak memory land in the store's ``stage_times``, as for any run).

A batch whose partitions all end with a current verification row is done; a re-run skips them, so a stopped run
(killed, out of time) resumes where it stopped. A batch that fails without verifying any of its partitions stops
the loop: the same command would fail the same way again.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The stages a batch builds, in one ``envfactory run --select``.
BATCH_SELECTION = "environments,verified_environments"


def verified_keys(environments: Sequence[dict[str, Any]], verifications: Sequence[dict[str, Any]]) -> set[str]:
    """Partition keys (``env_id``) whose current environment has a current verification row (of that very
    environment version: a rebuilt environment is pending again)."""
    current = {r["env_id"]: r["id"] for r in environments}
    return {r["env_id"] for r in verifications if current.get(r["env_id"]) == r["environment_id"]}


def plan_batches(partitions: Sequence[str], done: set[str], size: int) -> list[list[str]]:
    """The partitions not in ``done``, sorted, in batches of at most ``size``.

    Raises:
        ValueError: ``size`` below 1.
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"batch size {size!r}: expected a whole number >= 1")
    pending = sorted(set(partitions) - done)
    return [pending[i : i + size] for i in range(0, len(pending), size)]


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
    """What :func:`run_batches` did: the batches run, and why it stopped (``done``, ``time_budget`` or
    ``batch_failed``)."""

    outcomes: list[BatchOutcome] = field(default_factory=list)
    stopped: str = "done"


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
        run: runs one command line and returns its exit code (default: :func:`subprocess.call`).
        log: receives one line per batch.
    """
    call = run or subprocess.call
    started = time.monotonic()
    result = CoverageRun()
    for i, keys in enumerate(batches, start=1):
        if max_seconds is not None and time.monotonic() - started >= max_seconds:
            result.stopped = "time_budget"
            break
        t0 = time.monotonic()
        code = call(batch_command(keys, config_path))
        seconds = time.monotonic() - t0
        outcome = BatchOutcome(keys, code, seconds, is_verified(keys))
        result.outcomes.append(outcome)
        log(
            f"batch {i}/{len(batches)}: {outcome.verified}/{len(keys)} partitions verified in {seconds / 60:.1f} min"
            + (f" (exit {code})" if code else "")
        )
        if outcome.verified == 0:
            result.stopped = "batch_failed"
            break
    return result


def default_output(home: Path) -> Path:
    """Where ``envfactory coverage`` writes its Markdown when no ``--output`` is given."""
    return home / "corpus_coverage.md"
