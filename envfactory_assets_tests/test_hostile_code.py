"""The hostile-code corpus (issue 3, item 3): every sample is contained by the static check or by the
worker's limits, the parent never waits past its bound, and the worker recovers after each one.

One run of the whole corpus (~15-20 s) is shared by the tests of this module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from envfactory_assets.runtime import SandboxLimits, static_check
from envfactory_assets.security.hostile import (
    ESCAPED,
    RUNTIME_STOP,
    SAMPLES,
    STATIC_REJECT,
    HostileSample,
    environment,
    format_table,
    parent_wait_bound,
    run_corpus,
)

LIMITS = SandboxLimits(memory_mb=256, cpu_seconds=5, call_timeout_s=1.5, kill_grace_s=1.0)
# Stopped by the parent killing the worker (they swallow, or never see, the worker's alarm) or
# by the worker crashing: the only samples allowed to cost a restart.
RESTARTING = {"alarm_swallowed_in_finally", "native_infinite_iterator", "native_stack_overflow", "gigabyte_output"}

# A harmless module labelled hostile: the runner must call it an escape (its detector works).
HARMLESS = HostileSample(
    "harmless_control",
    "control",
    "does nothing wrong, so nothing stops it",
    RUNTIME_STOP,
    environment("def attack(state):\n    return {'fine': True}\n"),
    errors=("timeout",),
)


@pytest.fixture(scope="module")
def rows() -> Iterator[dict[str, dict]]:
    results = run_corpus(LIMITS, SAMPLES)
    print("\n" + format_table(results))  # visible with -s: the corpus report
    yield {row["name"]: row for row in results}


@pytest.fixture(scope="module")
def probe_rows() -> dict[str, dict]:
    return {row["name"]: row for row in run_corpus(LIMITS, [HARMLESS])}


# -- the corpus itself (no worker) ----------------------------------------------------------------
def test_corpus_is_large_varied_and_mostly_runtime() -> None:
    names = [sample.name for sample in SAMPLES]
    assert len(SAMPLES) >= 15 and len(set(names)) == len(names)
    runtime = [s for s in SAMPLES if s.expected == RUNTIME_STOP]
    assert 2 * len(runtime) >= len(SAMPLES)
    categories = Counter(sample.category for sample in SAMPLES)
    for category in (
        "file access",
        "process/exec",
        "network",
        "import tricks",
        "object-graph walk",
        "clock/randomness",
        "CPU exhaustion",
        "memory exhaustion",
        "recursion",
        "output bombs",
        "stdout protocol corruption",
        "fork/thread bomb",
        "huge integers",
        "regex backtracking",
        "infinite generators",
    ):
        assert categories[category] >= 1, category


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_static_verdict_matches_the_label(sample: HostileSample) -> None:
    violations = static_check(sample.source)
    if sample.expected == STATIC_REJECT:
        for part in sample.violations:
            assert any(part in v for v in violations), (part, violations)
    else:
        assert violations == [], "a runtime_stop sample must pass the static check"


def test_samples_validate_their_labels() -> None:
    with pytest.raises(ValueError, match="expected violations"):
        HostileSample("x", "c", "d", STATIC_REJECT, "x = 1")
    with pytest.raises(ValueError, match="expected error types"):
        HostileSample("x", "c", "d", RUNTIME_STOP, "x = 1")
    with pytest.raises(ValueError, match="unique"):
        run_corpus(LIMITS, [HARMLESS, HARMLESS])


# -- the corpus run ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_sample_is_contained_as_expected(rows: dict[str, dict], sample: HostileSample) -> None:
    row = rows[sample.name]
    assert row["outcome"] != ESCAPED, row
    assert row["canary_clean"], row
    assert row["outcome"] == sample.expected, row
    if sample.expected == RUNTIME_STOP:
        assert row["error_type"] in sample.errors, row
        assert row["stage"] == sample.stage, row
        assert row["observed"] == f"runtime_stop({row['error_type']})"
    else:
        assert row["worker_rejected"] is True, "the worker's own static check must refuse it too"
    assert row["as_expected"], row


def test_nothing_escaped_and_half_were_stopped_at_run_time(rows: dict[str, dict]) -> None:
    outcomes = Counter(row["outcome"] for row in rows.values())
    assert outcomes[ESCAPED] == 0, [r for r in rows.values() if r["outcome"] == ESCAPED]
    assert 2 * outcomes[RUNTIME_STOP] >= len(rows), outcomes
    assert all(row["canary_clean"] for row in rows.values())


def test_parent_never_waited_past_timeout_plus_grace(rows: dict[str, dict]) -> None:
    bound = parent_wait_bound(LIMITS)  # call_timeout + kill_grace + 1 s to kill and reap
    slow = {name: row["longest_wait_s"] for name, row in rows.items() if row["longest_wait_s"] > bound}
    assert not slow, (bound, slow)
    frozen = {name: row["heartbeat_gap_s"] for name, row in rows.items() if not row["parent_responsive"]}
    assert not frozen, frozen


def test_worker_recovers_after_every_sample(rows: dict[str, dict]) -> None:
    broken = {name: row["recovery_detail"] for name, row in rows.items() if not row["recovered"]}
    assert not broken, broken


def test_only_unstoppable_code_costs_a_worker_restart(rows: dict[str, dict]) -> None:
    # A module refused at load ends its trust domain's process by design (the next load starts clean;
    # test_bounded_readers.py checks that), so only code that ran counts here.
    refused_at_load = {
        name for name, row in rows.items() if row["outcome"] == STATIC_REJECT or row["stage"] in ("load", "module")
    }
    restarted = {name for name, row in rows.items() if row["worker_restarted"]} - refused_at_load
    assert restarted <= RESTARTING, restarted - RESTARTING
    # Code that swallows or never sees the alarm is killed by the parent.
    assert {"alarm_swallowed_in_finally", "native_infinite_iterator"} <= restarted, restarted
    # Plain loops, regexes, big powers and stderr floods are stopped by the in-worker alarm.
    for name in ("cpu_arithmetic_loop", "catastrophic_regex", "huge_power", "stderr_flood", "exception_str_spin"):
        assert rows[name]["error_type"] == "timeout" and not rows[name]["worker_restarted"], rows[name]


# -- the runner's escape detector, and the escapes it found ----------------------------------------
def test_runner_reports_code_that_nothing_stops_as_escaped(probe_rows: dict[str, dict]) -> None:
    row = probe_rows[HARMLESS.name]
    assert row["outcome"] == ESCAPED and row["observed"] == ESCAPED and not row["as_expected"]
    assert row["recovered"]
