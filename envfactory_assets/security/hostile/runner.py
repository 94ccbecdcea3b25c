"""Run the hostile-code corpus against the real sandbox and report one row per sample.

Usage::

    rows = run_corpus(SandboxLimits(memory_mb=256, cpu_seconds=5, call_timeout_s=1.5))
    print(format_table(rows))

Every sample goes through the static check first. Flagged samples are also offered to the worker
(which must refuse them too) and never run. Accepted samples go through the whole lifecycle in one
shared :class:`.SandboxWorker`, each in its own worker process (``load_environment`` ->
``open_episode`` -> the tool call -> ``save``); the first stage that fails is the observed stop, and a sample that gets
through every
stage, or leaves anything in its canary directory, has *escaped*. After each sample a benign
environment is called in the same worker (restarted if the sample killed it) to prove it recovered.
Nothing here can hang: each request is bounded by the worker's limits plus ``kill_grace_s``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from envfactory_assets.runtime.errors import (
    EnvironmentFault,
    EnvironmentRejected,
    SandboxError,
    StateRejected,
    WorkerCrashed,
)
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
from envfactory_assets.runtime.static_check import static_check
from envfactory_assets.security.hostile.samples import (
    CANARY,
    ESCAPED,
    RUNTIME_STOP,
    SAMPLES,
    STATIC_REJECT,
    HostileSample,
    environment,
)

T = TypeVar("T")

#: Small limits: the corpus runs in well under a minute with them.
DEFAULT_LIMITS = SandboxLimits(memory_mb=256, cpu_seconds=5, call_timeout_s=1.5, kill_grace_s=1.0)
#: Extra seconds a request may take beyond ``call_timeout_s + kill_grace_s``: killing and reaping
#: the worker, reading its last stderr, scheduling on a busy machine.
PARENT_SLACK_S = 1.0
#: The parent's heartbeat thread ticks this often; a longer gap means the parent was frozen.
HEARTBEAT_INTERVAL_S = 0.02
HEARTBEAT_LIMIT_S = 1.0
_DETAIL_CHARS = 300

BENIGN_ENV = "hostile_corpus_benign"
# A well-behaved environment used to prove the worker recovered after each hostile sample.
BENIGN_SOURCE = environment(
    """
def ping(state, text):
    pings = state["meta"].get("pings", 0) + 1
    state["meta"] = dict(state["meta"], pings=pings)
    return {"echo": text, "pings": pings, "seventh": str(decimal.Decimal(1) / decimal.Decimal(7))}
""",
    imports="import decimal",
)
# The decimal result proves that the default context (28 digits) is back after decimal_precision_bomb.
BENIGN_EXPECTED = {"echo": "still alive", "pings": 1, "seventh": "0.1428571428571428571428571429"}
_EMPTY_STATE: dict[str, Any] = {"tables": {}, "meta": {"now": "2024-05-01T00:00:00Z", "seed": 0, "next_id": 1}}


def parent_wait_bound(limits: SandboxLimits) -> float:
    """The longest a single request of a one-environment sample may block the parent, in seconds."""
    return limits.call_timeout_s + limits.kill_grace_s + PARENT_SLACK_S


class _Heartbeat:
    """Ticks on a parent thread during a sample; the largest gap between ticks shows whether the
    parent process itself stayed responsive (not frozen by the GIL, a huge payload, or the OOM)."""

    def __init__(self) -> None:
        self.max_gap = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="hostile-heartbeat")

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            now = time.monotonic()
            self.max_gap = max(self.max_gap, now - last)
            last = now
        self.max_gap = max(self.max_gap, time.monotonic() - last)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."


def _timed(waits: list[float], function: Callable[..., T], *args: Any) -> T:
    started = time.monotonic()
    try:
        return function(*args)
    finally:
        waits.append(time.monotonic() - started)


def _drive(
    worker: SandboxWorker, sample: HostileSample, env_id: str, arguments: dict[str, Any], waits: list[float]
) -> tuple[str | None, str | None, str]:
    """Run one accepted sample through every stage; returns ``(stage, error_type, detail)`` of the
    first stage that failed, or ``(None, None, detail)`` when every stage succeeded."""
    episode: str | None = None
    stage = "module"
    try:
        try:
            _timed(waits, worker.load_environment, env_id, sample.source)
        except EnvironmentRejected as exc:
            return stage, "environment_rejected", "; ".join(exc.violations)
        stage = "load"
        try:
            episode = _timed(waits, worker.open_episode, {env_id: _EMPTY_STATE})
        except StateRejected as exc:
            return stage, "state_rejected", exc.message
        stage = "call"
        result = _timed(waits, worker.call, episode, sample.tool, arguments)
        if not result.get("ok"):
            error = result.get("error") or {}
            return stage, str(error.get("type")), str(error.get("message", ""))
        stage = "save"
        try:
            _timed(waits, worker.save, episode)
        except EnvironmentFault as exc:
            return stage, f"environment_fault:{exc.cause}", exc.message
        return None, None, f"every stage succeeded; tool output: {result.get('output')!r}"
    except WorkerCrashed as exc:
        return stage, f"worker_crashed:{exc.kind}", exc.message
    except SandboxError as exc:
        return stage, f"sandbox_error:{type(exc).__name__}", str(exc)
    finally:
        if episode is not None and worker.is_open(episode):
            worker.close_episode(episode)


def check_recovery(worker: SandboxWorker, env_id: str = BENIGN_ENV) -> tuple[bool, str]:
    """Open an episode of the benign environment (loaded as ``env_id``) and call it; ``(worked, detail)``:
    worked when it answered exactly :data:`BENIGN_EXPECTED`."""
    try:
        episode = worker.open_episode({env_id: _EMPTY_STATE})
        try:
            result = worker.call(episode, "ping", {"text": "still alive"})
        finally:
            worker.close_episode(episode)
    except SandboxError as exc:
        return False, _clip(f"{type(exc).__name__}: {exc}")
    if result.get("ok") and result.get("output") == BENIGN_EXPECTED:
        return True, ""
    return False, _clip(repr(result))


def run_sample(worker: SandboxWorker, sample: HostileSample, *, canary_dir: str) -> dict[str, Any]:
    """Run one sample in ``worker`` (which must have :data:`BENIGN_ENV` loaded) and describe it.

    Args:
        worker: the shared worker; it may be killed and restarted by the sample.
        sample: the hostile module.
        canary_dir: an empty directory; :data:`.samples.CANARY` arguments point into it, and the
            sample has escaped if anything is in it afterwards.

    Returns:
        A row: ``name``, ``category``, ``expected``, ``outcome`` (``static_reject`` /
        ``runtime_stop`` / ``escaped``), ``observed`` (``static_reject``, ``runtime_stop(<type>)``
        or ``escaped``), ``stage`` (``static``/``module``/``load``/``call``/``save``, None when it
        escaped), ``error_type``, ``detail``, ``violations``, ``worker_rejected`` (static rejects:
        the worker refused it too), ``as_expected``, ``seconds``, ``longest_wait_s``,
        ``heartbeat_gap_s``, ``parent_responsive``, ``worker_restarted``, ``recovered``,
        ``recovery_detail``, ``recovery_s``, ``canary_clean``.

        Error types: a failed call's ``error.type`` (``timeout``, ``memory``, ``crash``,
        ``tool_error``...); ``environment_rejected`` (module stage), ``state_rejected`` (load stage),
        ``environment_fault:<cause>`` (save stage), ``worker_crashed:<kind>``.
    """
    env_id = f"hostile_{sample.name}"
    arguments = {
        key: os.path.join(canary_dir, sample.name) if value == CANARY else value
        for key, value in sample.arguments.items()
    }
    waits: list[float] = []
    starts_before = worker.starts
    started = time.monotonic()
    violations = static_check(sample.source)
    worker_rejected: bool | None = None
    with _Heartbeat() as heartbeat:
        if violations:
            stage, error_type, detail = "static", None, "; ".join(violations)
            try:
                _timed(waits, worker.load_environment, env_id, sample.source)
                worker_rejected = False
            except EnvironmentRejected:
                worker_rejected = True
        else:
            stage, error_type, detail = _drive(worker, sample, env_id, arguments, waits)
    seconds = time.monotonic() - started
    canary_clean = not os.listdir(canary_dir)
    if violations:
        outcome = STATIC_REJECT
    elif error_type is None:
        outcome = ESCAPED
    else:
        outcome = RUNTIME_STOP
    if not canary_clean:
        outcome = ESCAPED
        detail = f"canary directory written: {sorted(os.listdir(canary_dir))}; {detail}"
    observed = f"runtime_stop({error_type})" if outcome == RUNTIME_STOP else outcome

    if outcome == STATIC_REJECT:
        joined = "\n".join(violations)
        as_expected = (
            sample.expected == STATIC_REJECT
            and worker_rejected is True
            and all(part in joined for part in sample.violations)
        )
    else:
        as_expected = (
            outcome == RUNTIME_STOP
            and sample.expected == RUNTIME_STOP
            and error_type in sample.errors
            and stage == sample.stage
        )
    # Each sample has its own worker process (its own trust domain), started once; a killed or
    # crashed one is discarded at once (no pid) and restarted lazily later.
    worker_restarted = env_id not in worker.pids or worker.starts - starts_before > 1
    longest_wait = max(waits, default=0.0)

    recovery_started = time.monotonic()
    recovered, recovery_detail = check_recovery(worker)
    return {
        "name": sample.name,
        "category": sample.category,
        "expected": sample.expected,
        "outcome": outcome,
        "observed": observed,
        "stage": stage,
        "error_type": error_type,
        "detail": _clip(detail),
        "violations": violations,
        "worker_rejected": worker_rejected,
        "as_expected": as_expected,
        "seconds": round(seconds, 3),
        "longest_wait_s": round(longest_wait, 3),
        "heartbeat_gap_s": round(heartbeat.max_gap, 3),
        "parent_responsive": longest_wait <= parent_wait_bound(worker.limits)
        and heartbeat.max_gap <= HEARTBEAT_LIMIT_S,
        "worker_restarted": worker_restarted,
        "recovered": recovered,
        "recovery_detail": recovery_detail,
        "recovery_s": round(time.monotonic() - recovery_started, 3),
        "canary_clean": canary_clean,
    }


def run_corpus(limits: SandboxLimits | None = None, samples: Sequence[HostileSample] = SAMPLES) -> list[dict[str, Any]]:
    """Run every sample in one shared worker; one row per sample (see :func:`run_sample`).

    Args:
        limits: the worker's limits; defaults to :data:`DEFAULT_LIMITS`. The samples are sized so
            that the memory samples exceed any ``memory_mb`` up to a few GiB and the loops exceed
            any ``call_timeout_s``.
        samples: the corpus; defaults to :data:`.samples.SAMPLES`.

    Returns:
        Rows in sample order.

    Raises:
        ValueError: duplicate sample names.
        WorkerCrashed: the worker could not be started at all.
    """
    names = [sample.name for sample in samples]
    if len(set(names)) != len(names):
        raise ValueError("sample names must be unique")
    limits = limits or DEFAULT_LIMITS
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="envfactory-hostile-") as canary_root, SandboxWorker(limits) as worker:
        worker.load_environment(BENIGN_ENV, BENIGN_SOURCE)
        for sample in samples:
            canary_dir = os.path.join(canary_root, sample.name)
            os.mkdir(canary_dir)
            rows.append(run_sample(worker, sample, canary_dir=canary_dir))
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of the rows: name, category, expected, observed, seconds, checks."""
    lines = [
        "| name | category | expected | observed | seconds | ok |",
        "|---|---|---|---|---:|---|",
    ]
    for row in rows:
        checks = row["as_expected"] and row["parent_responsive"] and row["recovered"] and row["canary_clean"]
        restarted = " (worker restarted)" if row["worker_restarted"] else ""
        lines.append(
            f"| {row['name']} | {row['category']} | {row['expected']} | {row['observed']}{restarted} "
            f"| {row['seconds']:.2f} | {'yes' if checks else 'NO'} |"
        )
    return "\n".join(lines)
