"""The worker's per-request bounds set with fewer system calls: each request still stops at its own deadline, and
the CPU soft limit is the one a fresh reading gives."""

from __future__ import annotations

import math
import resource
import signal
import time

import pytest

from envfactory_assets.runtime.engine import CallTimedOut
from envfactory_assets.runtime.worker import Alarm, CpuLimit


def _stopped_after(alarm: Alarm, seconds: float) -> float:
    """Arm ``seconds``, spin until the alarm stops the code; the wall seconds that took."""
    start = time.monotonic()
    alarm.arm(seconds)
    try:
        while time.monotonic() - start < 10:
            pass
    except CallTimedOut:
        return time.monotonic() - start
    finally:
        alarm.disarm()
    raise AssertionError("the alarm never fired")


@pytest.fixture
def alarm():
    previous = signal.getsignal(signal.SIGALRM)
    yield Alarm()
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_a_request_stops_at_its_own_deadline_whatever_timer_an_earlier_request_left(alarm: Alarm) -> None:
    alarm.arm(0.3)  # a request that ended at once: its timer is left to run
    alarm.disarm()
    time.sleep(0.15)
    assert _stopped_after(alarm, 0.3) >= 0.3  # the earlier timer fires at 0.15 s: set again, not obeyed
    alarm.arm(2.0)
    alarm.disarm()
    assert 0.1 <= _stopped_after(alarm, 0.1) < 1.0  # an earlier timer firing too late is replaced


def test_a_late_signal_of_an_ended_request_does_not_stop_the_next_one(alarm: Alarm) -> None:
    alarm.arm(0.05)
    alarm.disarm()
    alarm.arm(5.0)
    try:
        time.sleep(0.2)  # the first request's timer fires here
        assert not alarm.deadline_passed()
    finally:
        alarm.disarm()
    alarm.arm(None)  # no budget: nothing stops it
    try:
        time.sleep(0.05)
    finally:
        alarm.disarm()


def test_the_cpu_soft_limit_is_always_the_one_a_fresh_reading_gives() -> None:
    original = resource.getrlimit(resource.RLIMIT_CPU)
    try:
        limit = CpuLimit(600)
        start = time.process_time()
        rearms = 0
        while time.process_time() - start < 1.2:  # crosses at least one whole CPU second
            before = math.ceil(time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID))
            limit.rearm()
            after = math.ceil(time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID))
            soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
            assert before + 600 <= soft <= after + 600
            rearms += 1
        assert rearms > 100
    finally:
        resource.setrlimit(resource.RLIMIT_CPU, original)
