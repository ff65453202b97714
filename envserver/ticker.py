"""The real-time clock of a remote process: one timer per frame rate for every game in it.

Holds :class:`Ticker` and :func:`shared_ticker`. Every real-time :class:`~envserver.remote.Remote`
of an event loop joins the loop's ticker (``serve --games K`` runs K of them): remotes of
the same fps share one timer, whose callback ticks each of them in turn, so a process
serving K games wakes once per frame, not K times: a wake-up of a process that sleeps a
frame costs more CPU than a Catch frame's own work (cold caches, the event loop, epoll;
``python -m benchmarks realtime_cpu``, ``density``; RESULTS.md).

The callback is a plain timer handle (``loop.call_at``), not a task: no future, no task
switch per frame and none per game. A game's tick is synchronous (advance, serve, reward);
the one part that may wait — the new episode after ``done``, whose runtime may reset over
I/O (a browser) — is the remote's own task, so it holds no other game. A game whose tick
raises takes its own error exit; the others tick on.

Timing is the game loop's as it was: a tick more than :data:`MAX_CATCH_UP_FRAMES` periods
late is not caught up (that would burst frames); the clock restarts from now and every
remote of that rate counts a late tick.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Final, Protocol

#: A tick later than this many frames is not caught up (that would burst frames);
#: the clock restarts from now and the lateness is counted.
MAX_CATCH_UP_FRAMES: Final = 2


class Ticked(Protocol):
    """What the ticker drives: a remote (``envserver.remote.Remote``)."""

    fps: float
    late_ticks: int

    def tick_due(self) -> None:
        """One real-time frame is due: draw and serve it (never raises)."""


class _Rate:
    """The remotes of one fps and their timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fps: float) -> None:
        self.loop = loop
        self.fps = fps
        self.period = 1.0 / fps
        self.remotes: list[Ticked] = []
        self.due = loop.time()
        self.handle: asyncio.TimerHandle | None = loop.call_at(self.due, self._fire)

    def _fire(self) -> None:
        for remote in tuple(self.remotes):  # a tick may move a remote (fps, mode, close)
            remote.tick_due()
        if not self.remotes:
            self.handle = None
            return
        loop, period = self.loop, self.period
        self.due += period
        now = loop.time()
        if now - self.due > MAX_CATCH_UP_FRAMES * period:
            for remote in self.remotes:
                remote.late_ticks += 1
            self.due = now
        self.handle = loop.call_at(self.due, self._fire)

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class Ticker:
    """Ticks every real-time remote of one event loop, one timer per fps (module docstring).

    A remote is :meth:`add`-ed while it runs in real time and :meth:`discard`-ed in
    lockstep and when it closes; a remote whose fps changed is added again (it moves to
    its new rate's timer). A remote joining a rate that already ticks is ticked on that
    rate's grid, from its next frame.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._rates: dict[float, _Rate] = {}
        self._rate_of: dict[int, _Rate] = {}  # id(remote) -> its rate

    def add(self, remote: Ticked) -> None:
        """Tick ``remote`` at its fps from now on (again after its fps changed)."""
        rate = self._rate_of.get(id(remote))
        if rate is not None:
            if rate.fps == remote.fps:
                return
            self.discard(remote)
        rate = self._rates.get(remote.fps)
        if rate is None or rate.handle is None:
            rate = self._rates[remote.fps] = _Rate(self.loop, remote.fps)
        rate.remotes.append(remote)
        self._rate_of[id(remote)] = rate

    def discard(self, remote: Ticked) -> None:
        """Stop ticking ``remote`` (lockstep, closing); a rate left with none stops."""
        rate = self._rate_of.pop(id(remote), None)
        if rate is None:
            return
        rate.remotes.remove(remote)
        if not rate.remotes:
            rate.stop()
            if self._rates.get(rate.fps) is rate:
                del self._rates[rate.fps]

    def __contains__(self, remote: Ticked) -> bool:
        return id(remote) in self._rate_of

    @property
    def timers(self) -> int:
        """Timers running now: one per fps that has a real-time remote."""
        return sum(rate.handle is not None for rate in self._rates.values())

    def __len__(self) -> int:
        return len(self._rate_of)


_tickers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Ticker] = weakref.WeakKeyDictionary()


def shared_ticker() -> Ticker:
    """The running loop's ticker: every remote of one process (one loop) shares it."""
    loop = asyncio.get_running_loop()
    ticker = _tickers.get(loop)
    if ticker is None:
        ticker = _tickers[loop] = Ticker(loop)
    return ticker
