"""What the VNC client keeps of the update stream, each part the only owner of its state.

Holds :class:`UpdateRequests` (the one incremental FramebufferUpdateRequest outstanding:
when the next one goes out, at once, held for the agent's input or not while paused) with
:data:`MAX_REQUEST_HOLD` and :data:`REQUEST_HOLD_MARGIN`, and :class:`AppliedUpdates` (how
many updates were applied, and who waits for that number to grow).
:class:`~.client.VNCClient` holds one of each and hands them the connection's objects; they
import nothing of it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from .client_connection import Connection
from .client_protocol import ClientProtocol, FramebufferUpdated

#: The longest ``request_hold`` a client takes (seconds): a hold is meant to last a
#: fraction of a frame.
MAX_REQUEST_HOLD: Final = 0.1
#: A held request goes out at least this long before the server's next frame is due (by
#: the frame tags' times), so holding it never delays that frame.
REQUEST_HOLD_MARGIN: Final = 0.003


class UpdateRequests:
    """Keeps exactly one incremental FramebufferUpdateRequest outstanding.

    The next request goes out as soon as an update is applied, so the server sends
    whatever changed since. With ``hold`` (seconds, None: never) a real-time agent's next
    request waits for the input that answers the update and goes out with it, in one
    packet. :meth:`pause` stops asking; :meth:`stop` for good (the connection ended).
    :attr:`on_demand` asks only when a reader wants an update (:meth:`want`) or input
    goes out: the server then neither encodes nor sends frames nobody reads (issue 44).
    """

    def __init__(self, hold: float | None) -> None:
        #: Seconds the next request may wait for the input that answers an update.
        self.hold = hold
        #: True between :meth:`pause` and :meth:`resume`: no new request goes out.
        self.paused = False
        self._stopped = False
        self._held: asyncio.TimerHandle | None = None  # a request waiting for input
        self._input_since_update = False  # input was sent after the last update
        self._tag_pace: tuple[int, float] | None = None  # (frame, server time) of a tag
        self._frame_period: float | None = None  # between the server's frames, by its tags
        #: No request goes out after an update unless a reader asks (:meth:`want`).
        self.on_demand = False
        self._asked_at: float | None = None  # when the outstanding request went out

    @property
    def held(self) -> bool:
        """True while a request waits for input (or for its hold to end)."""
        return self._held is not None

    def asked_at(self, proto: ClientProtocol | None) -> float | None:
        """Monotonic time the outstanding request went out (None: none is out)."""
        return self._asked_at if proto is not None and proto.pending_requests else None

    def want(self, conn: Connection | None, proto: ClientProtocol | None) -> None:
        """On demand: ask for one update now, unless one is out (nothing otherwise: a
        streaming client always has one out, or held for input)."""
        if (
            not self.on_demand or self.paused or self._stopped or conn is None
            or proto is None or conn.lost.done() or proto.pending_requests
        ):
            return
        self._request(proto)
        conn.write(proto.data_to_send())

    def _request(self, proto: ClientProtocol) -> None:
        if not proto.pending_requests:
            self._asked_at = time.monotonic()
        proto.request_update()

    def applied(self, conn: Connection, proto: ClientProtocol, last: FramebufferUpdated) -> None:
        """Updates were applied (``last`` the newest): send the next request, or hold it
        (on demand: neither; a reader asks)."""
        if (
            proto.pending_requests == 0 and not self.paused and self._held is None
            and not self.on_demand
        ):
            hold = self._hold_for(last)
            if hold > 0:
                # A real-time agent answers each update with input: its next request
                # goes out with that input, one packet and one wake-up of the server
                # instead of two, or alone when the hold ends, before the next frame.
                self._held = asyncio.get_running_loop().call_later(
                    hold, self._release, conn, proto
                )
            else:
                proto.request_update()
        self._input_since_update = False
        conn.write(proto.data_to_send())

    def input_queued(self, proto: ClientProtocol) -> None:
        """Input waits in ``proto`` to be written: a held request joins it (the caller
        writes both)."""
        self._input_since_update = True
        if self._held is not None:  # the held request travels with this input
            self._held.cancel()
            self._held = None
            if proto.pending_requests == 0 and not self.paused:
                self._request(proto)
        elif self.on_demand and not proto.pending_requests and not self.paused:
            self._request(proto)  # input wants its effect seen: the request travels with it

    def pause(self) -> None:
        """Ask for no update after the one outstanding."""
        self.paused = True

    def resume(self, conn: Connection | None, proto: ClientProtocol | None) -> None:
        """Ask for updates again (at once, if the connection is up and none is pending)."""
        if not self.paused:
            return
        self.paused = False
        if proto is not None and conn is not None and proto.pending_requests == 0:
            self._request(proto)
            conn.write(proto.data_to_send())

    def stop(self) -> None:
        """The connection ended or the client closed: drop a held request, ask no more."""
        self._stopped = True
        if self._held is not None:
            self._held.cancel()
            self._held = None

    def _hold_for(self, update: FramebufferUpdated) -> float:
        """How long to hold the request after ``update``: ``hold`` if input followed the
        previous update (a real-time agent's way) and frame tags tell the server's pace,
        cut to end REQUEST_HOLD_MARGIN before its next frame is due; 0: ask at once."""
        tag = update.tag
        if tag is not None:
            pace = self._tag_pace
            if pace is not None and tag.frame > pace[0] and tag.timestamp > pace[1]:
                self._frame_period = (tag.timestamp - pace[1]) / (tag.frame - pace[0])
            self._tag_pace = (tag.frame, tag.timestamp)
        hold = self.hold
        if hold is None or not self._input_since_update or self._frame_period is None:
            return 0.0  # (no pace known: a server without tags is not held up)
        return min(hold, self._frame_period - REQUEST_HOLD_MARGIN)

    def _release(self, conn: Connection, proto: ClientProtocol) -> None:
        """The hold ended without input: ask for the next update now."""
        self._held = None
        if (
            not self._stopped and not self.paused and not conn.lost.done()
            and proto.pending_requests == 0
        ):
            proto.request_update()
            conn.write(proto.data_to_send())


class AppliedUpdates:
    """The number of framebuffer updates applied, and the waiters for it to grow."""

    def __init__(self) -> None:
        #: Updates applied so far.
        self.count = 0
        self._waiters: list[tuple[int, asyncio.Future[int]]] = []

    def add(self, n: int) -> int:
        """``n`` more updates were applied: wake who waited past fewer; the new count."""
        self.count += n
        number = self.count
        if self._waiters:
            keep: list[tuple[int, asyncio.Future[int]]] = []
            for waiting in self._waiters:
                after, waiter = waiting
                if after < number:
                    if not waiter.done():
                        waiter.set_result(number)
                else:
                    keep.append(waiting)
            self._waiters = keep
        return number

    async def wait(self, after: int, timeout: float | None, name: str) -> int:
        """Wait until the count passes ``after``; the count then. A TimeoutError names
        ``name`` (the client) and says why a still screen sends nothing."""
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        entry = (after, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                return waiter.result()
            raise TimeoutError(
                f"{name}: no framebuffer update past #{after} within {timeout} s "
                "(servers send updates only when the screen changes)"
            ) from None
        finally:
            if not waiter.done():
                waiter.cancel()
            try:
                self._waiters.remove(entry)
            except ValueError:
                pass

    def fail(self, error: BaseException) -> None:
        """Raise ``error`` in every waiter (the connection ended)."""
        waiters, self._waiters = self._waiters, []
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)
