"""Deadlines for an HTTP port's connections, which aiohttp does not keep: a connection that
sends nothing (a client that connected and went quiet, an idle keep-alive one) and one
whose request never finishes arriving (a slow or half-sent head or body) are closed, so
neither holds a socket and a buffer for good. A connection whose request is being
answered (a long tool call, an open event stream) is never cut.

:class:`Deadlines` wraps the port's protocol factory (inside TLS, so it sees the
request's bytes) and is told by the port's handler when a request starts and ends
(:meth:`Deadlines.serving`). One sweep timer per port checks them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

#: Seconds a connection may stay open with no request in it (its first, or the next on a
#: keep-alive connection): more than a client's keep-alive reuse (httpx keeps 5 s).
IDLE_TIMEOUT: Final = 30.0
#: Seconds a request may take to arrive, from its first byte to the end of its body (a tool
#: call is at most MAX_REQUEST_BYTES: a fraction of a second on any link).
REQUEST_TIMEOUT: Final = 10.0


class Deadlines:
    """The deadlines of one port's connections."""

    def __init__(self, idle: float | None = None, request: float | None = None) -> None:
        """``idle``, ``request``: seconds (IDLE_TIMEOUT and REQUEST_TIMEOUT, as they are now)."""
        self.idle = IDLE_TIMEOUT if idle is None else idle
        self.request = REQUEST_TIMEOUT if request is None else request
        self.connections: dict[Any, _Watched] = {}  # by transport
        self.closed_idle = self.closed_slow = 0
        self._timer: asyncio.TimerHandle | None = None

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory whose connections keep these deadlines."""
        return lambda: _Watched(self, inner())

    @contextlib.contextmanager
    def serving(self, transport: Any) -> Iterator[None]:
        """A request of ``transport``'s has arrived (its head): no deadline while it is answered."""
        watched = self.connections.get(transport)
        if watched is None:
            yield
            return
        watched.busy += 1
        watched.head_since = None
        try:
            yield
        finally:
            watched.busy -= 1
            watched.last = time.monotonic()

    def start(self) -> None:
        self._sweep_later()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _sweep_later(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(min(self.idle, self.request) / 4, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        for watched in list(self.connections.values()):
            if watched.busy:
                continue
            if watched.head_since is not None and now - watched.head_since > self.request:
                self.closed_slow += 1
                watched.transport.close()
            elif now - watched.last > self.idle:
                self.closed_idle += 1
                watched.transport.close()
        self._sweep_later()


class _Watched(asyncio.Protocol):
    """A connection's protocol (aiohttp's), and when it last showed a request coming."""

    def __init__(self, deadlines: Deadlines, inner: Any) -> None:
        self.deadlines, self.inner = deadlines, inner
        self.busy = 0
        self.last = time.monotonic()
        self.head_since: float | None = None  # bytes of a request not yet being answered
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.deadlines.connections[transport] = self
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadlines.connections.pop(self.transport, None)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.busy and self.head_since is None:
            self.head_since = time.monotonic()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()
