"""The VNC client's statistics: counters from the protocol, rates over a rolling window.

Holds :class:`VNCClientStats` (what :attr:`~.client.VNCClient.stats` returns),
:class:`UpdateRates` (the updates of the last :data:`RATE_WINDOW` seconds with running
sums, so reading rates costs no pass over history), :data:`RATE_WINDOW` and
:func:`encoding_name`. Nothing here does I/O.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from .messages import Encoding

if TYPE_CHECKING:
    from .client_protocol import ClientProtocol, FramebufferUpdated

#: Seconds of recent updates the ``*_per_second`` rates in :class:`VNCClientStats` average.
RATE_WINDOW: Final = 2.0


@dataclass(frozen=True, slots=True)
class VNCClientStats:
    """Counters since the connection was made, and rates over the last RATE_WINDOW seconds.

    ``bytes`` counts everything received after the handshake; ``bytes_per_second`` only
    framebuffer updates. ``rectangles_by_encoding`` is keyed by encoding name (pseudo-
    encodings included, e.g. ``DESKTOP_SIZE``).
    """

    updates: int
    rectangles: int
    bytes: int
    pixels: int
    updates_per_second: float
    rectangles_per_second: float
    bytes_per_second: float
    pixels_per_second: float
    rectangles_by_encoding: dict[str, int]


class UpdateRates:
    """The updates applied in the last :data:`RATE_WINDOW` seconds, with running sums.

    The client :meth:`record`\\ s updates on the event loop thread; :meth:`snapshot` is
    cheap and safe to call from another thread.
    """

    def __init__(self) -> None:
        #: ``(time, rectangles, bytes, pixels)`` of each recent update, oldest first.
        self._recent: collections.deque[tuple[float, int, int, int]] = collections.deque()
        #: Running sums over ``_recent``: rectangles, bytes, pixels.
        self._window = [0, 0, 0]

    def record(self, now: float, updates: Iterable[FramebufferUpdated]) -> None:
        """Add updates applied at ``now`` and drop those older than the window."""
        recent, window = self._recent, self._window
        for update in updates:
            entry = (now, len(update.rects), update.nbytes, update.npixels)
            recent.append(entry)
            window[0] += entry[1]
            window[1] += entry[2]
            window[2] += entry[3]
        self._trim(now)

    def record_one(self, now: float, update: FramebufferUpdated) -> None:
        """:meth:`record` of one update (what a real-time client gets per wake-up)."""
        entry = (now, len(update.rects), update.nbytes, update.npixels)
        recent, window = self._recent, self._window
        recent.append(entry)
        window[0] += entry[1]
        window[1] += entry[2]
        window[2] += entry[3]
        if recent[0][0] < now - RATE_WINDOW:
            self._trim(now)

    def _trim(self, now: float) -> None:
        """Drop updates older than the rate window (on the loop thread only)."""
        recent, window, horizon = self._recent, self._window, now - RATE_WINDOW
        while recent and recent[0][0] < horizon:
            _, rects, nbytes, pixels = recent.popleft()
            window[0] -= rects
            window[1] -= nbytes
            window[2] -= pixels

    def _span(self, connected_at: float) -> float:
        """The seconds the window's updates count over, now."""
        now = time.monotonic()
        try:
            oldest = self._recent[0][0]
        except IndexError:
            oldest = now
        # The window, or the connection's age if younger; if updates stopped, the entries
        # spread over a longer time and the rates fall instead of freezing.
        return max(min(RATE_WINDOW, max(now - connected_at, 1e-3)), now - oldest)

    def updates_per_second(self, connected_at: float) -> float:
        """The update rate :meth:`snapshot` gives, alone (an agent reads it every step)."""
        return len(self._recent) / self._span(connected_at)

    def snapshot(
        self, proto: ClientProtocol | None, updates: int, connected_at: float
    ) -> VNCClientStats:
        """``proto``'s counters and the rates now, for a connection made at
        ``connected_at`` (``time.monotonic()``) that applied ``updates`` updates."""
        span = self._span(connected_at)
        count, rects, nbytes, pixels = len(self._recent), *self._window
        by_encoding: dict[str, int] = {}
        if proto is not None:
            for number, n in list(proto.stats.rectangles_by_encoding.items()):
                by_encoding[encoding_name(number)] = n
        return VNCClientStats(
            updates=updates,
            rectangles=proto.stats.rectangles if proto else 0,
            bytes=proto.stats.bytes_received if proto else 0,
            pixels=proto.stats.pixels if proto else 0,
            updates_per_second=count / span,
            rectangles_per_second=rects / span,
            bytes_per_second=nbytes / span,
            pixels_per_second=pixels / span,
            rectangles_by_encoding=by_encoding,
        )


def encoding_name(number: int) -> str:
    """An encoding's name (``TIGHT``, ``DESKTOP_SIZE``), or its number if we know none."""
    name = _NAMES.get(number)
    if name is None:
        try:
            name = Encoding(number).name
        except ValueError:
            name = str(number)
        if len(_NAMES) < MAX_NAMES:
            _NAMES[number] = name
    return name


#: Encoding names by number, as looked up (an Enum call per lookup adds up: stats are read per step).
_NAMES: dict[int, str] = {}
MAX_NAMES: Final = 1024
