"""When an action's screen has settled: the decision, with no I/O.

Holds :class:`Settling` (one settling wait: fed the screen's changes and the page's
reports, it says whether the screen has settled, why, or how long to wait and whether
to ask the page again), :class:`PageReport` (what a page says it has pending:
``runtimes.settle_page`` asks), :class:`InputFence` (whether the page has handled the
input sent into X so far), :class:`DamageTiming` (how an X program's screen moves: how
long it takes to react to input and how far apart the updates of one redraw come),
:class:`DisplayLag` (how late a page's frame reaches the display), the
reasons a wait ends (:data:`BY_PAGE`, :data:`BY_QUIET`, :data:`BY_DEADLINE`) and the
limits. ``runtimes.xruntime`` (``DisplayRuntime.asettle``) is the asyncio shell.

**Why.** A fixed quiet window (the screen unchanged for :data:`QUIET_SECONDS`) costs that
window on every action, however quick the page, and still misses a change that comes
later than the window (a page's ``setTimeout(..., 400)``). What the remote knows does
better. A page says what it has pending — timers due soon, animation frames, running CSS
animations, requests in flight — and once it has handled the action's input and has
nothing pending, the screen needs only the time its last frame takes to reach the
display (:data:`FAST_QUIET`). Pending things with a known end (a timer due, a finite
animation) are waited for; things with none (a loop of animation frames, a fast
interval, a request) fall back to the quiet window. An X program has no page; its damage
timing does: the quiet window shrinks to what its own reactions and redraws have shown
they need (:meth:`DamageTiming.react_window`, :meth:`DamageTiming.quiet_window`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .base import InputEvent, KeyEvent

#: Seconds the served screen must stay unchanged for an action to have settled when
#: nothing better is known (a page that cannot say, an X program not yet observed).
QUIET_SECONDS: Final = 0.3
#: Seconds a settling action waits at most for the screen to be still.
SETTLE_DEADLINE: Final = 10.0
#: Seconds with no damage, after a page said it is idle, for its last frame to have
#: reached the display: about two frames at 60 Hz (the report itself waits two frames);
#: the least of the window :class:`DisplayLag` learns.
FAST_QUIET: Final = 0.035
#: Margin on the latest a page's frame has reached the display after an idle report,
#: and the latest counted as that frame (a change later than it is the page drawing
#: again, e.g. the remote's reset of a finished episode).
LAG_MARGIN: Final = 2.0
MAX_LAG: Final = 0.1
#: Seconds ahead that a page's one-shot timers (and finite animations) are waited for;
#: later ones are the page's business, not the action's.
TIMER_HORIZON: Final = 1.0
#: Seconds of a still screen after which a page that keeps saying something is due is
#: no longer believed (a polling loop of one-shot timers): the wait ends, by quiet.
MAX_PAGE_HOLD: Final = 1.5
#: Seconds a page may take to show it handled the input sent into X; past it the page
#: cannot say for this wait, and the quiet window decides.
INPUT_WAIT: Final = 1.0
#: Seconds between two reports while the page is busy with things of no known end.
PROBE_INTERVAL: Final = 1 / 60
#: Seconds a page report may take (it waits two of the page's frames); past it the page
#: cannot say (a page stuck in a script).
PROBE_TIMEOUT: Final = 1.0

#: Why a wait ended: the page was idle and the screen still; the screen was still for
#: the quiet window; the deadline.
BY_PAGE: Final = "page-idle"
BY_QUIET: Final = "quiet"
BY_DEADLINE: Final = "deadline"

#: An X program's reactions and redraw gaps remembered, and how many reactions must be
#: seen before its windows are shortened from QUIET_SECONDS.
TIMING_HISTORY: Final = 64
MIN_REACTIONS: Final = 4
#: Margins on the slowest reaction / redraw gap seen, and the shortest windows.
REACT_MARGIN: Final = 3.0
GAP_MARGIN: Final = 3.0
MIN_REACT: Final = 0.2
MIN_QUIET: Final = 0.08

#: Pointer button bits that give the page a mousedown and a mouseup (left, middle,
#: right), and wheel bits whose press gives it one wheel event.
_BUTTON_BITS: Final = 0b0000111
_WHEEL_BITS: Final = 0b1111000


@dataclass(frozen=True, slots=True)
class PageReport:
    """What a page said, two of its frames after it was asked.

    ``due`` things have a known end within :data:`TIMER_HORIZON` (one-shot timers, finite
    animations), the last of them ``until`` seconds from the report; ``ongoing`` names
    pending things with no known end (``frames``, ``interval``, ``timer-loop``,
    ``animation``, ``network``); ``inputs`` counts the trusted mouse button, key and wheel
    events the page has handled, ``pointer`` is where its last mouse event was (screen
    pixels). ``sent``: the inputs sent into X when the page was asked (filled by the
    shell, :class:`InputFence`'s count).
    """

    due: int
    until: float
    ongoing: tuple[str, ...]
    inputs: int
    pointer: tuple[int, int] | None
    sent: int = 0

    @property
    def idle(self) -> bool:
        return self.due == 0 and not self.ongoing


class InputFence:
    """Whether a page has handled what was sent into X so far.

    Input into X reaches the page by another road than DevTools, so a page asked "are you
    idle?" just after a click may not have had the click yet. Each button press and
    release, key press and release and wheel press gives the page one trusted event,
    which it counts; the page has caught up when its count has moved as far as ours, and
    its last mouse event is where we last put the pointer. Counts that drift (an event
    the page never gets) are set level again at the end of each wait (:meth:`sync`).
    """

    def __init__(self) -> None:
        self.sent = 0  # events that give the page one each, sent so far
        self.pointer: tuple[int, int] | None = None  # where we put it last
        self._buttons = 0
        self._moved = False  # the pointer moved since the last sync
        self._lag = 0  # our count minus the page's, when last level

    def on_sent(self, events: Sequence[InputEvent]) -> None:
        """Count what ``events`` give the page (called as they go into X)."""
        for event in events:
            if isinstance(event, KeyEvent):
                self.sent += 1
                continue
            changed = event.buttonmask ^ self._buttons
            self.sent += (changed & _BUTTON_BITS).bit_count()
            self.sent += (changed & event.buttonmask & _WHEEL_BITS).bit_count()
            self._buttons = event.buttonmask
            if (event.x, event.y) != self.pointer:
                self.pointer, self._moved = (event.x, event.y), True

    def restart(self, page_inputs: int = 0) -> None:
        """A new page (its count starts at ``page_inputs``): level from here."""
        self._lag, self._moved = self.sent - page_inputs, False

    def caught_up(self, report: PageReport) -> bool:
        """Whether the page had handled, when it reported, all sent before it was asked."""
        if report.sent - report.inputs > self._lag:
            return False
        return not self._moved or report.pointer == self.pointer

    def sync(self, report: PageReport) -> None:
        """Take the page's count as level (the end of a wait)."""
        self._lag = report.sent - report.inputs
        if report.pointer == self.pointer:
            self._moved = False


class DamageTiming:
    """How an X program's screen moves after input, learned from its damage.

    A change after input is a reaction (its delay is remembered); a change after a
    reaction's last change with no input between, sooner than :data:`QUIET_SECONDS`,
    continues its redraw (the gap is remembered). Changes no input began (the program
    starting, a clock ticking) teach nothing. Windows are the slowest of the last
    :data:`TIMING_HISTORY` times a margin, between the floors and :data:`QUIET_SECONDS`,
    which stands until :data:`MIN_REACTIONS` reactions were seen.
    """

    def __init__(self) -> None:
        self._reacts: deque[float] = deque(maxlen=TIMING_HISTORY)
        self._gaps: deque[float] = deque(maxlen=TIMING_HISTORY)
        self._input_at: float | None = None  # input not yet reacted to
        self._changed_at: float | None = None
        self._burst = False  # the changes since the last reaction continue it
        #: When input last went into X (time.monotonic(); 0: never).
        self.input_at = 0.0

    def on_input(self, at: float) -> None:
        self.input_at = at
        if self._input_at is None:
            self._input_at = at

    def on_change(self, at: float) -> None:
        if self._input_at is not None:
            delay = at - self._input_at
            self._burst = delay < QUIET_SECONDS
            if self._burst:
                self._reacts.append(delay)
            self._input_at = None
        elif self._burst and self._changed_at is not None and at - self._changed_at < QUIET_SECONDS:
            self._gaps.append(at - self._changed_at)
        else:
            self._burst = False  # the program's own drawing (its start, a clock), not a reaction
        self._changed_at = at

    @property
    def learned(self) -> bool:
        return len(self._reacts) >= MIN_REACTIONS

    def react_window(self) -> float:
        """Seconds to wait for a first change before the input counts as changing nothing."""
        if not self.learned:
            return QUIET_SECONDS
        return min(QUIET_SECONDS, max(MIN_REACT, REACT_MARGIN * max(self._reacts)))

    def quiet_window(self) -> float:
        """Seconds of no change after a change for the redraw to be over."""
        if not self.learned:
            return QUIET_SECONDS
        slowest = max(self._gaps, default=0.0)
        return min(QUIET_SECONDS, max(MIN_QUIET, GAP_MARGIN * slowest))


class DisplayLag:
    """How late a page's last frame reaches the display after the page said it is idle.

    The first change within :data:`MAX_LAG` of an idle report, with no input or reset
    between, is that frame (or, rarely, the page's own later drawing: the window only
    grows from it), whether it came during the wait or after it ended. The window is the latest of the last
    :data:`TIMING_HISTORY` times :data:`LAG_MARGIN`, between :data:`FAST_QUIET` and
    :data:`QUIET_SECONDS`: a loaded machine, whose frames come late, waits longer.
    """

    def __init__(self) -> None:
        self._lags: deque[float] = deque(maxlen=TIMING_HISTORY)
        self._idle_at: float | None = None

    def on_idle(self, at: float) -> None:
        """The page said it is idle (its answer arrived at ``at``)."""
        self._idle_at = at

    def forget(self) -> None:
        """Input went into X, or the runtime redraws (a reset): the next change is that,
        not the idle page's last frame."""
        self._idle_at = None

    def on_change(self, at: float) -> None:
        if self._idle_at is not None:
            if at - self._idle_at <= MAX_LAG:
                self._lags.append(max(0.0, at - self._idle_at))
            self._idle_at = None

    def window(self) -> float:
        """Seconds of no damage after an idle report for the page's frame to be shown."""
        latest = max(self._lags, default=0.0)
        return min(QUIET_SECONDS, max(FAST_QUIET, LAG_MARGIN * latest))


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :meth:`Settling.decide` says: settled (and ``by`` what), or wait up to ``wait``
    seconds for the screen to change and decide again, asking the page first if ``probe``."""

    settled: bool
    by: str = ""
    wait: float = 0.0
    probe: bool = False


class Settling:
    """One settling wait, from ``started`` (time.monotonic()).

    Feed it the page's reports (:meth:`on_report`; ``page=False``: there is no page, the
    windows decide) and ask :meth:`decide` with the time the served screen last changed.
    ``react_window``/``quiet_window``: the quiet rule's windows before and after the first
    change; ``fast_quiet``: the still screen an idle page needs (:class:`DisplayLag`).
    """

    def __init__(
        self,
        started: float,
        *,
        page: bool,
        react_window: float = QUIET_SECONDS,
        quiet_window: float = QUIET_SECONDS,
        fast_quiet: float = FAST_QUIET,
        deadline: float = SETTLE_DEADLINE,
    ) -> None:
        self.started, self.deadline, self.fast_quiet = started, deadline, fast_quiet
        self.react_window, self.quiet_window = react_window, quiet_window
        self.page = page  # the page can say (until it fails to)
        self.report: PageReport | None = None
        self.report_at = 0.0
        self._caught_up = False
        self._until = 0.0  # when the report's due things are over

    def on_report(self, report: PageReport | None, at: float, caught_up: bool) -> None:
        """The page's report, received at ``at``; None: the page could not say."""
        if report is None:
            self.page = False
            return
        self.report, self.report_at, self._caught_up = report, at, caught_up
        self._until = at + report.until

    def decide(self, now: float, changed_at: float, input_at: float = 0.0) -> Verdict:
        """Settled, or what to do next, given when the served screen last changed (and
        when input last went in: the program may react to input sent while it waits)."""
        elapsed = now - self.started
        if elapsed >= self.deadline:
            return Verdict(True, BY_DEADLINE)
        quiet = now - max(changed_at, self.started)
        if self.page and self.report is not None and not self._caught_up and elapsed >= INPUT_WAIT:
            self.page = False  # the input never showed in the page: it cannot say
        if not self.page:
            acted = max(input_at, self.started)
            if changed_at > acted:  # it reacted: still for the redraw's window
                window, quiet = self.quiet_window, now - changed_at
            else:  # nothing yet since the input: the reaction's window
                window, quiet = self.react_window, now - acted
            if quiet >= window:
                return Verdict(True, BY_QUIET)
            return Verdict(False, wait=min(window - quiet, self.deadline - elapsed))
        report = self.report
        if report is None or not self._caught_up:
            return Verdict(False, probe=True)
        if report.idle:
            since = now - max(self.report_at, changed_at)
            if since >= self.fast_quiet:
                return Verdict(True, BY_PAGE)
            return Verdict(False, wait=self.fast_quiet - since)
        if changed_at > self.report_at:
            return Verdict(False, probe=True)  # the screen moved since: ask again
        if report.ongoing and not report.due and quiet >= QUIET_SECONDS:
            return Verdict(True, BY_QUIET)  # busy with no known end, and still
        if quiet >= MAX_PAGE_HOLD:
            return Verdict(True, BY_QUIET)  # it keeps promising; the screen stays
        wait = PROBE_INTERVAL if report.ongoing else max(self._until - now, PROBE_INTERVAL)
        return Verdict(False, wait=min(wait, self.deadline - elapsed), probe=True)
