"""The settling decision with no I/O (``runtimes.settle``): times and reports in, verdicts out."""

from __future__ import annotations

import pytest

from runtimes.base import KeyEvent, PointerEvent
from runtimes.settle import (
    BY_DEADLINE,
    BY_PAGE,
    BY_QUIET,
    FAST_QUIET,
    INPUT_WAIT,
    MAX_PAGE_HOLD,
    MIN_QUIET,
    MIN_REACT,
    MIN_REACTIONS,
    QUIET_SECONDS,
    SETTLE_DEADLINE,
    DamageTiming,
    DisplayLag,
    InputFence,
    PageReport,
    Settling,
)

IDLE = PageReport(due=0, until=0.0, ongoing=(), inputs=2, pointer=(5, 5), sent=2)


def test_an_idle_page_settles_a_frame_or_two_after_its_report() -> None:
    watch = Settling(100.0, page=True)
    assert watch.decide(100.0, 0.0).probe  # nothing known yet: ask the page
    watch.on_report(IDLE, 100.03, caught_up=True)
    verdict = watch.decide(100.03, 100.02)
    assert not verdict.settled and verdict.wait == pytest.approx(FAST_QUIET)
    # A late frame of the change extends the wait; then it settles, by the page.
    assert not watch.decide(100.05, 100.04).settled
    assert watch.decide(100.041 + FAST_QUIET, 100.04).by == BY_PAGE


def test_a_page_that_has_not_had_the_input_is_asked_again_then_not_believed() -> None:
    watch = Settling(0.0, page=True)
    behind = PageReport(due=0, until=0.0, ongoing=(), inputs=0, pointer=None, sent=3)
    watch.on_report(behind, 0.03, caught_up=False)
    assert watch.decide(0.03, 0.0).probe
    changed = INPUT_WAIT - 0.1
    verdict = watch.decide(INPUT_WAIT, changed)  # it never showed: the quiet window decides
    assert not verdict.settled and not verdict.probe
    assert watch.decide(changed + QUIET_SECONDS + 0.01, changed).by == BY_QUIET


def test_due_timers_hold_the_wait_past_the_quiet_window_but_not_for_ever() -> None:
    watch = Settling(0.0, page=True)
    due = PageReport(due=1, until=0.4, ongoing=(), inputs=2, pointer=None, sent=2)
    watch.on_report(due, 0.03, caught_up=True)
    verdict = watch.decide(0.05, 0.0)
    assert verdict.probe and verdict.wait == pytest.approx(0.38)  # until it is due, then ask
    assert not watch.decide(QUIET_SECONDS + 0.05, 0.0).settled  # the old window: not yet
    assert watch.decide(MAX_PAGE_HOLD, 0.0).by == BY_QUIET  # a page that keeps promising


def test_things_of_no_known_end_fall_back_to_the_quiet_window() -> None:
    watch = Settling(0.0, page=True)
    loop = PageReport(due=0, until=0.0, ongoing=("frames",), inputs=2, pointer=None, sent=2)
    watch.on_report(loop, 0.05, caught_up=True)
    assert watch.decide(0.06, 0.0).probe
    assert watch.decide(0.31, 0.0).by == BY_QUIET
    # The screen moved since the report: the page is asked again, not judged stale.
    watch.on_report(loop, 0.32, caught_up=True)
    assert watch.decide(0.40, 0.35).probe


def test_no_page_uses_the_windows_and_a_failed_report_falls_back() -> None:
    watch = Settling(0.0, page=False, react_window=0.1, quiet_window=0.05)
    assert watch.decide(0.09, 0.0).wait == pytest.approx(0.01)
    assert watch.decide(0.1, 0.0).by == BY_QUIET  # nothing reacted within the window
    watch = Settling(0.0, page=False, react_window=0.1, quiet_window=0.05)
    assert not watch.decide(0.1, 0.08).settled  # it reacted: still for the quiet window
    assert watch.decide(0.13, 0.08).by == BY_QUIET
    watch = Settling(0.0, page=True)
    watch.on_report(None, 0.02, caught_up=False)
    assert watch.decide(QUIET_SECONDS, 0.0).by == BY_QUIET
    assert Settling(0.0, page=True).decide(SETTLE_DEADLINE, 0.0).by == BY_DEADLINE


def test_the_fence_counts_what_x_input_gives_the_page() -> None:
    fence = InputFence()
    fence.on_sent([PointerEvent(10, 10, 0), PointerEvent(10, 10, 1), PointerEvent(10, 10, 0)])
    assert fence.sent == 2  # a mousedown and a mouseup
    fence.on_sent([PointerEvent(10, 10, 0b1000), PointerEvent(10, 10, 0)])  # a wheel notch
    fence.on_sent([KeyEvent("a", True), KeyEvent("a", False)])
    assert fence.sent == 5
    report = PageReport(due=0, until=0.0, ongoing=(), inputs=4, pointer=(10, 10), sent=5)
    assert not fence.caught_up(report)  # one event short
    assert fence.caught_up(PageReport(0, 0.0, (), 5, (10, 10), sent=5))
    assert not fence.caught_up(PageReport(0, 0.0, (), 5, (3, 3), sent=5))  # the move not seen
    fence.sync(report)  # a drifted count (an event the page never got) is level again
    assert fence.caught_up(report)


def test_an_x_programs_windows_follow_its_reactions_and_redraws() -> None:
    timing = DamageTiming()
    assert timing.react_window() == timing.quiet_window() == QUIET_SECONDS  # not yet known
    t = 0.0
    for _ in range(MIN_REACTIONS):
        timing.on_input(t)
        timing.on_change(t + 0.02)  # reacts in 20 ms
        timing.on_change(t + 0.03)  # and finishes 10 ms later
        t += 1.0
    assert timing.react_window() == MIN_REACT  # 3 x 20 ms is less
    assert timing.quiet_window() == MIN_QUIET
    last = t - 1.0 + 0.03
    timing.on_change(last + 0.09)  # a redraw that went on 90 ms later
    assert timing.quiet_window() == pytest.approx(0.27)
    timing.on_change(last + 2.0)  # a tick a second later is the program's own time
    assert timing.quiet_window() == pytest.approx(0.27)


def test_an_idle_pages_window_grows_with_how_late_its_frames_reach_the_display() -> None:
    lag = DisplayLag()
    assert lag.window() == FAST_QUIET
    lag.on_idle(1.0)
    lag.on_change(1.03)  # the page's frame, 30 ms after it said it was idle
    assert lag.window() == pytest.approx(0.06)
    lag.on_idle(2.0)
    lag.forget()
    lag.on_change(2.05)  # a reaction to new input, not a late frame
    lag.on_idle(3.0)
    lag.on_change(3.2)  # the page drawing again, later than a frame can be
    assert lag.window() == pytest.approx(0.06)
