"""One log line per kind of event per interval, the rest counted: for what clients send
that a port refuses (bad input, plain HTTP on a TLS port), where a flood of bad input
must not become a flood of log.

Holds :class:`RateLimitedLog` and :data:`LOG_INTERVAL`. The first event of a kind is
logged at once; those that follow within the interval are only counted, and one line
says how many there were when the interval ends (a timer on the running event loop, or
the next event of that kind). A kind is a short string of ours (never a client's words),
so the kinds a port has are few; at most :data:`MAX_KINDS` are remembered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

#: Seconds between two lines of one kind.
LOG_INTERVAL: Final = 60.0
#: Kinds remembered; the least recently seen is forgotten first.
MAX_KINDS: Final = 64


@dataclass(slots=True)
class _Kind:
    logged_at: float
    held: int = 0
    level: int = logging.WARNING
    last: str = ""
    timer: asyncio.TimerHandle | None = None


class RateLimitedLog:
    """``log(kind, level, message, *args)``: at most one line per ``kind`` per ``interval``.

    ``counts`` has every event by kind since the start (logged or not), for tests and
    ``make fuzz``'s report.
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = LOG_INTERVAL,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.interval, self.clock = logger, interval, clock
        self._kinds: OrderedDict[str, _Kind] = OrderedDict()
        self.counts: dict[str, int] = {}

    def log(self, kind: str, level: int, message: str, *args: Any, exc_info: Any = None) -> bool:
        """Log ``message % args`` unless a line of ``kind`` went out within the interval
        (then count it); whether it was logged. ``exc_info`` (a traceback) goes only with
        a logged line: use it for our bugs, never for a client's bad input."""
        if kind not in self.counts and len(self.counts) >= MAX_KINDS:
            return False  # (kinds are ours and few: never reached in practice)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        now = self.clock()
        state = self._kinds.get(kind)
        if state is not None and now - state.logged_at < self.interval:
            state.held += 1
            state.level = max(state.level, level)
            state.last = message % args if args else message
            if state.timer is None:
                state.timer = self._later(state.logged_at + self.interval - now, kind)
            self._kinds.move_to_end(kind)
            return False
        held = state.held if state is not None else 0
        if state is not None and state.timer is not None:
            state.timer.cancel()
        self._kinds[kind] = _Kind(logged_at=now)
        self._kinds.move_to_end(kind)
        while len(self._kinds) > MAX_KINDS:
            _, old = self._kinds.popitem(last=False)
            if old.timer is not None:
                old.timer.cancel()
        if held:
            message += f" (and {held} more of this kind in the {self.interval:g} s before)"
        self.logger.log(level, message, *args, exc_info=exc_info)
        return True

    def _later(self, delay: float, kind: str) -> asyncio.TimerHandle | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None  # no loop: the next event of the kind reports the count
        return loop.call_later(max(0.0, delay), self.flush, kind)

    def flush(self, kind: str | None = None) -> None:
        """Log the count of what was held back (of ``kind``, or of every kind) now."""
        for name in [kind] if kind is not None else list(self._kinds):
            state = self._kinds.get(name)
            if state is None:
                continue
            if state.timer is not None:
                state.timer.cancel()
                state.timer = None
            if state.held:
                self.logger.log(
                    state.level, "%s: %d more since (one line per kind per %g s); the last: %s",
                    name, state.held, self.interval, state.last,
                )
                state.held, state.logged_at = 0, self.clock()

    def close(self) -> None:
        """Report what is held back and stop the timers (at shutdown)."""
        self.flush()
