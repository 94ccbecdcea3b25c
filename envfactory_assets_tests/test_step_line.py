"""The step line of commands made of a few long named steps (``envfactory report``): one line per step where the
stream is not a terminal, one line redrawn in place on a terminal."""

from __future__ import annotations

import io

import pytest

from envfactory_assets.progress_meter import StepLine


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    """A text stream that says it is a terminal, as a console's stderr does."""

    def isatty(self) -> bool:
        return True


def test_a_stream_that_is_not_a_terminal_gets_one_line_per_step_and_the_total_time():
    out, clock = io.StringIO(), FakeClock()
    with StepLine("report", 3, out=out, clock=clock) as line:
        line("counting")
        clock.now += 2.0
        line("reading")
        clock.now += 2.0
        line("writing")
        clock.now += 2.0
    assert out.getvalue().splitlines() == [
        "report [..............................] 0/3  counting",
        "report [##########....................] 1/3  reading",
        "report [####################..........] 2/3  writing",
        "report [##############################] 3/3  done in 6.0 s",
    ]


def test_a_terminal_gets_one_line_redrawn_in_place():
    out, clock = Terminal(), FakeClock()
    with StepLine("report", 2, out=out, clock=clock) as line:
        line("counting")
        assert "\n" not in out.getvalue()
        clock.now += 1.0
        line("reading")
    text = out.getvalue()
    assert text.count("\r") == 3 and text.count("\n") == 1 and text.endswith("done in 1.0 s\x1b[K\n")
    drawn = [d.split("\x1b[K")[0] for d in text.split("\r")[1:]]
    assert drawn == [
        "report [..............................] 0/2  counting",
        "report [###############...............] 1/2  reading",
        "report [##############################] 2/2  done in 1.0 s",
    ]


def test_a_failed_command_ends_the_line_without_claiming_it_done():
    for out in (io.StringIO(), Terminal()):
        with pytest.raises(RuntimeError), StepLine("report", 2, out=out) as line:
            line("counting")
            raise RuntimeError("store busy")
        assert "done" not in out.getvalue() and out.getvalue().endswith("\n")
    with pytest.raises(ValueError, match="total must be >= 1"):
        StepLine("report", 0)
