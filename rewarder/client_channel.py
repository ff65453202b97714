"""The rewarder client's machinery below its public API: one WebSocket, kept up.

Holds :class:`ClientChannel` (the dial, serve, redial loop; requests and the replies that
resolve them; the reader that files every server message; clock calibration), the
calibration constants and :func:`intersect_skew`. :class:`~.client.RewarderClient` is a
``ClientChannel`` and adds what callers use: start and close, waiting, reset, step,
ping, actions.

Clock skew: each ping bounds server clock minus local clock by ``[reply.sent_at -
received_at, reply.sent_at - request_sent_at]``; a calibration intersects the bounds of
:data:`CALIBRATION_PINGS` pings, on connect and every :data:`CALIBRATION_INTERVAL`
seconds.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Mapping
from typing import Any, Final

import websockets
from websockets.asyncio.client import ClientConnection as WebSocket

from . import protocol
from .client_state import Answer, ClientState, Closing
from .connections import ClientConnection
from .dial import dial
from .errors import (
    ConnectionClosed,
    Refused,
    RemoteError,
    RewarderError,
)
from .protocol import (
    ErrorReply,
    Observation,
)
from .reward_buffer import RewardBuffer

log = logging.getLogger(__name__)

#: Pings per clock calibration: enough to narrow the skew bounds, cheap (a loopback round
#: trip each: `python -m benchmarks rewarder_throughput`). Universe used 10.
CALIBRATION_PINGS: Final = 5
#: Seconds between background recalibrations (clocks drift; Universe used 300 s).
CALIBRATION_INTERVAL: Final = 60.0
#: Default wait for a ping reply.
PING_TIMEOUT: Final = 10.0


class _ServerClosed(Exception):
    """Internal: the server sent ``v0.connection.close`` (the reader stops)."""

    def __init__(self, message: str) -> None:
        self.message = message


class ClientChannel(ClientState):
    """One WebSocket to one rewarder at ``url``, redialled after drops: the state and
    machinery behind :class:`~.client.RewarderClient`, which is what callers use."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        name: str,
        buffer: RewardBuffer,
        start_timeout: float,
        reconnect: bool,
        calibration_pings: int,
        calibration_interval: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``headers`` go with every dial (observer flag, authorization, client id);
        ``tls`` verifies a ``wss://`` server."""
        self.url = url
        self.tls = tls
        self.start_timeout = start_timeout
        self.reconnect = reconnect
        self.calibration_pings = calibration_pings
        self.calibration_interval = calibration_interval
        #: Where rewards go; :meth:`~.client.RewarderClient.pop` and
        #: :meth:`~.client.RewarderClient.peek` read it.
        ClientState.__init__(self, buffer)
        self.name = name
        self._headers = dict(headers)

        self._ws: WebSocket | None = None
        self._proto: ClientConnection | None = None
        self._ready = False
        self._pending: dict[Any, tuple[str, asyncio.Future[Any]]] = {}
        #: Actions waiting for their answer (the observation naming them by ``action_id``).
        self._answers: dict[Any, asyncio.Future[Any]] = {}
        self._changed = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None
        self._reconnects = 0

    # Waiters -------------------------------------------------------------------------------

    def _notify(self) -> None:
        """Wake every waiter to re-check its condition."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _raise_if_stopped(self) -> None:
        if self._failure is not None:
            raise self._failure.with_traceback(None)
        if self._closed:
            raise ConnectionClosed(f"rewarder client {self.name} is closed")
        if self._supervisor is None:
            raise ConnectionClosed(
                f"rewarder client {self.name} is not started: await client.start() "
                "or use rewarder.client.connect()"
            )

    # Requests ----------------------------------------------------------------------------

    def _connection(self) -> tuple[WebSocket, ClientConnection]:
        ws, proto = self._ws, self._proto
        if ws is None or proto is None:
            self._raise_if_stopped()
            raise ConnectionClosed(
                f"{self.name}: not connected to {self.url}; reconnecting in the background "
                "(await client.wait_connected())"
            )
        return ws, proto

    async def _request(
        self, ws: WebSocket, method: str, message_id: int, data: bytes, timeout: float | None
    ) -> tuple[Any, float]:
        """Send a request and wait for its reply: ``(event, local time it arrived)``."""
        future: asyncio.Future[tuple[Any, float]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = (method, future)
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                await ws.send(data, text=True)
                return await future
        except TimeoutError:
            if not deadline.expired():
                raise
            raise TimeoutError(
                f"{self.name}: no reply to {method} from {self.url} within {timeout} s"
            ) from None
        except websockets.ConnectionClosed as exc:
            raise ConnectionClosed(
                f"{self.name}: connection lost sending {method}: {exc}"
            ) from None
        finally:
            self._pending.pop(message_id, None)

    async def _ping_once(self, timeout: float | None) -> tuple[float, float, float]:
        ws, proto = self._connection()
        started_wall, started = time.time(), time.perf_counter()
        message_id, data = proto.ping()
        (reply, received_wall), received = (
            await self._request(ws, protocol.PING, message_id, data, timeout),
            time.perf_counter(),
        )
        return received - started, reply.sent_at - received_wall, reply.sent_at - started_wall

    async def _calibrate(self) -> None:
        """:data:`CALIBRATION_PINGS` pings; the skew bounds become their intersection."""
        skew: tuple[float, float] | None = None
        for _ in range(self.calibration_pings):
            rtt, lo, hi = await self._ping_once(PING_TIMEOUT)
            self._rtt = rtt
            skew = intersect_skew(skew, (lo, hi))
        if skew is not None:
            self._skew = skew

    async def _recalibrate_forever(self) -> None:
        while True:
            await asyncio.sleep(self.calibration_interval)
            try:
                await self._calibrate()
            except (RewarderError, TimeoutError) as exc:
                log.debug("%s: clock recalibration failed: %s", self.name, exc)

    # Connecting ----------------------------------------------------------------------------

    async def _supervise(self) -> None:
        """Dial, serve the connection, and redial after drops until told to stop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout
        first = True
        try:
            while True:
                try:
                    ws = await self._dial(deadline)
                except RewarderError as exc:
                    self._fail(exc)
                    return
                if not first:
                    self._reconnects += 1
                    log.info("%s: reconnected to %s", self.name, self.url)
                first = False
                reason = await self._serve(ws)
                if self._closed:
                    return
                if not self.reconnect:
                    self._fail(ConnectionClosed(f"{self.name}: {reason}"))
                    return
                log.warning(
                    "%s: %s; reconnecting for up to %.1f s", self.name, reason, self.start_timeout
                )
                deadline = loop.time() + self.start_timeout
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave callers waiting forever
            log.exception("%s: rewarder client failed", self.name)
            self._fail(ConnectionClosed(f"{self.name}: rewarder client failed: {exc!r}"))

    async def _dial(self, deadline: float) -> WebSocket:
        """Connect (:func:`~.dial.dial`), then read the server's first message: a
        ``v0.connection.close`` there is a refusal, final."""
        ws, first = await dial(
            self.url, self._headers, deadline=deadline, start_timeout=self.start_timeout,
            name=self.name, stopped=lambda: self._closed, tls=self.tls,
        )
        proto = ClientConnection()
        result = self._receive(proto, first)
        if type(result) is Closing and result.refusal:  # type: ignore[union-attr]
            await ws.close()
            raise Refused(f"{self.name}: {self.url} refused the connection: {result.reason}")  # type: ignore[union-attr]
        self._ws, self._proto = ws, proto
        return ws

    async def _serve(self, ws: WebSocket) -> str:
        """Run one established connection until it ends; returns why it ended."""
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._read(ws), name=f"rewarder reader {self.name}")
        recalibrate: asyncio.Task[None] | None = None
        try:
            try:
                await self._calibrate()
            except (RewarderError, TimeoutError) as exc:
                if self._ws is not ws:  # the connection ended during calibration
                    return await reader
                log.warning("%s: clock calibration failed: %s", self.name, exc)
            if self._ws is ws:
                self._ready = True
                self._notify()
                recalibrate = loop.create_task(self._recalibrate_forever())
            return await reader
        finally:
            reader.cancel()
            if recalibrate is not None:
                recalibrate.cancel()

    def _fail(self, exc: RewarderError) -> None:
        """Stop for good: every waiter and later request gets ``exc`` (that is the report;
        the log line is for debugging, not a second warning on the user's terminal)."""
        if not self._closed:
            log.info("%s", exc)
        self._failure = exc
        self._drop(str(exc))
        self._notify()

    def _drop(self, reason: str) -> None:
        """The connection is gone: fail pending requests, end the running episode."""
        had_connection = self._ws is not None
        self._ws = self._proto = None
        self._ready = False
        self._describe = None
        pending, self._pending = self._pending, {}
        self._answers.clear()  # their futures are in pending too
        for method, future in pending.values():
            if not future.done():
                future.set_exception(
                    ConnectionClosed(f"{self.name}: {method} got no reply: {reason}")
                )
        if had_connection:
            self.buffer.disconnected()
        self._notify()

    # Reading -------------------------------------------------------------------------------

    async def _read(self, ws: WebSocket) -> str:
        """Handle every server message until the connection ends; returns why it ended."""
        proto = self._proto
        assert proto is not None
        reason = f"the connection to {self.url} closed"
        server_closed = False
        try:
            try:
                async for data in ws:
                    result = self._receive(proto, data)
                    if result is not None:
                        self._act(result)
            except _ServerClosed as exc:
                reason = f"the server closed the connection: {exc.message}"
                server_closed = True
            except websockets.ConnectionClosed as exc:
                reason = f"the connection to {self.url} dropped ({exc})"
            else:
                if ws.close_code is not None:
                    reason = (
                        f"the connection to {self.url} closed "
                        f"({ws.close_code} {ws.close_reason})".rstrip()
                    )
        finally:
            if self._ws is ws:
                self._drop(reason)  # pending requests fail now, not after the close handshake
        if server_closed:
            await ws.close()
        return reason

    def _waiting(self, message_id: Any) -> bool:
        entry = self._pending.get(message_id)
        return entry is not None and not entry[1].done()

    def _act(self, result: Answer | Closing) -> None:
        """What the core says to do: resolve a request's future, or end the connection."""
        if type(result) is Closing:
            raise _ServerClosed(result.reason)  # type: ignore[union-attr]
        answer: Answer = result  # type: ignore[assignment]
        method, future = self._pending[answer.message_id]
        event = answer.event
        if type(event) is ErrorReply:
            future.set_exception(RemoteError(event.message, method))
            return
        future.set_result((event, time.time()))

    def _observed(self, event: Observation) -> None:
        """An observation that names an action (``action_id``) answers it
        (:meth:`~.client.RewarderClient.send_answered_action`)."""
        body = event.observation
        if self._answers and isinstance(body, dict):
            answer = self._answers.pop(body.get("action_id"), None)
            if answer is not None and not answer.done():
                answer.set_result(body)
        super()._observed(event)

    def _receive(self, proto: ClientConnection, data: str | bytes) -> Answer | Closing | None:
        """:meth:`receive`, waking the waiters of a new describe."""
        describe = self._describe
        result = self.receive(proto, data, self._waiting)
        if self._describe is not describe:
            self._notify()
        return result


def intersect_skew(
    bounds: tuple[float, float] | None, new: tuple[float, float]
) -> tuple[float, float]:
    """Both bounds hold, so their overlap does; if none (a clock jumped), trust the new."""
    if bounds is None:
        return new
    lo, hi = max(bounds[0], new[0]), min(bounds[1], new[1])
    return (lo, hi) if lo <= hi else new
