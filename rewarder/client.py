"""The rewarder client: a thin asyncio shell around :class:`protocol.ClientConnection`.

Holds :class:`RewarderClient`, its entry point :func:`connect`, :class:`ClientStats` and
the request and calibration constants; dialling (address, auth header, backoff) is in
:mod:`.dial`, whose names are re-exported here.

One client keeps one WebSocket to one remote's rewarder port. A reader task parses
every server message with the sans-I/O protocol, files rewards into a
:class:`~.reward_buffer.RewardBuffer` (:meth:`RewarderClient.pop` gives them to the
agent), resolves request futures by ``parent_message_id`` and keeps the last
``v0.env.describe``. Pings measure round trip and clock skew on connect and every
:data:`CALIBRATION_INTERVAL` seconds.

Connection lifecycle:

- :meth:`RewarderClient.start` (or ``await connect(...)``) dials with exponential
  backoff until ``start_timeout``, then raises :class:`~.errors.ConnectTimeout`.
- A server that refuses the connection (``v0.connection.close`` before anything else:
  wrong password, the active slot taken) fails it for good with
  :class:`~.errors.ConnectionClosed` carrying the server's reason: no retry loop.
- An established connection that drops (or that the server closes with a reason) is
  redialled in the background for up to ``start_timeout`` (unless ``reconnect=False``).
  Meanwhile requests raise ConnectionClosed, the episode that was running is ended
  (``env_status.disconnected``) and an active client must :meth:`~RewarderClient.reset`
  again once :meth:`~RewarderClient.wait_connected` returns.

Many clients share one event loop; nothing here starts a thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import websockets
from websockets.asyncio.client import ClientConnection as WebSocket

from . import protocol
from .dial import (
    ATTEMPT_TIMEOUT,
    BACKOFF_CAP,
    BACKOFF_FACTOR,
    BACKOFF_START,
    CLOSE_TIMEOUT,
    DEFAULT_PORT,
    MAX_SERVER_MESSAGE_BYTES,
    basic_auth,
    dial,
    parse_address,
)
from .errors import (
    ConnectionClosed,
    ProtocolError,
    RemoteError,
    RewarderError,
    UnknownMethod,
)
from .protocol import (
    ClientConnection,
    Close,
    Describe,
    ErrorReply,
    Observation,
    PingReply,
    ResetReply,
    Reward,
    ServerEvent,
    StepReply,
    Text,
)
from .reward_buffer import EpisodeResult, RewardBuffer

log = logging.getLogger(__name__)

__all__ = [
    "ATTEMPT_TIMEOUT", "BACKOFF_CAP", "BACKOFF_FACTOR", "BACKOFF_START", "CLOSE_TIMEOUT",
    "DEFAULT_PORT", "MAX_SERVER_MESSAGE_BYTES", "ClientStats", "RewarderClient",
    "basic_auth", "connect", "parse_address",
]

#: Pings per clock calibration: enough to narrow the skew bounds, cheap (~0.2 ms each
#: on loopback). Universe used 10.
CALIBRATION_PINGS: Final = 5
#: Seconds between background recalibrations (clocks drift; Universe used 300 s).
CALIBRATION_INTERVAL: Final = 60.0
#: Default wait for a reset reply: loading an environment (a browser) can take a while.
RESET_TIMEOUT: Final = 60.0
#: Default wait for a ping reply.
PING_TIMEOUT: Final = 10.0
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ClientStats:
    """Counters of one :class:`RewarderClient` (since it was made)."""

    #: Server messages received, of every kind.
    messages: int
    #: ``v0.env.reward`` messages received.
    rewards: int
    #: Episode messages the buffer dropped because their episode was already over.
    stale_dropped: int
    #: Successful reconnections after a drop.
    reconnects: int
    #: Messages with a method this client does not know (ignored: forward compatibility).
    unknown_messages: int
    #: Messages of a known method that could not be read (ignored, logged).
    bad_messages: int
    #: ``v0.reply.error`` messages, answered requests and unanswered ones alike.
    remote_errors: int


class _ServerClosed(Exception):
    """Internal: the server sent ``v0.connection.close`` (the reader stops)."""

    def __init__(self, message: str) -> None:
        self.message = message


class RewarderClient:
    """The agent's end of one remote's rewarder channel.

    ``await client.start()`` (or ``await connect(address)``, or ``async with``), then
    :meth:`reset`, :meth:`pop` every step, :meth:`send_action`, :meth:`ping`;
    ``await client.close()`` at the end (idempotent).
    """

    def __init__(
        self,
        address: str,
        *,
        password: str | None = None,
        observer: bool = False,
        start_timeout: float = 30.0,
        reconnect: bool = True,
        name: str | None = None,
        calibration_pings: int = CALIBRATION_PINGS,
        calibration_interval: float = CALIBRATION_INTERVAL,
        client_id: str | None = None,
    ) -> None:
        """``client_id`` (header ``openai-client-id``): a connection of ours with the same
        id may take the active slot from the one holding it (the server closes that one
        for good with close code 4010)."""
        self.address = address
        self.url = parse_address(address)
        self.name = name or address
        self.observer = observer
        self.start_timeout = start_timeout
        self.reconnect = reconnect
        self.calibration_pings = calibration_pings
        self.calibration_interval = calibration_interval
        #: Where rewards go; :meth:`pop` and :meth:`peek` read it. Observers follow the
        #: server's episodes without resetting.
        self.buffer = RewardBuffer(follow=observer)
        self._headers = {protocol.OBSERVER_HEADER: "true" if observer else "false"}
        if password is not None:
            self._headers["authorization"] = basic_auth(password)
        if client_id:
            self._headers[protocol.CLIENT_ID_HEADER] = client_id

        self._ws: WebSocket | None = None
        self._proto: ClientConnection | None = None
        self._ready = False
        self._pending: dict[Any, tuple[str, asyncio.Future[Any]]] = {}
        self._describe: Describe | None = None
        self._changed = asyncio.Event()
        self._failure: RewarderError | None = None
        self._closed = False
        self._supervisor: asyncio.Task[None] | None = None
        self._close_done: asyncio.Event | None = None
        self._rtt: float | None = None
        self._skew: tuple[float, float] | None = None
        self._messages = 0
        self._rewards = 0
        self._reconnects = 0
        self._unknown = 0
        self._bad = 0
        self._remote_errors = 0
        self._unknown_seen: set[str] = set()
        self._handlers: dict[type, Callable[[Any], None]] = {
            Reward: self._on_reward,
            Describe: self._on_describe,
            Text: self._on_episode_event,
            Observation: self._on_episode_event,
            ResetReply: self._on_reset_reply,
            PingReply: self._on_reply,
            StepReply: self._on_reply,
            ErrorReply: self._on_error,
            Close: self._on_close,
        }

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed" if self._closed else "disconnected"
        return f"<RewarderClient {self.name} {self.url} {state} episode={self.episode_id}>"

    # Lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and calibrate the clock; returns once ready.

        Raises :class:`ConnectTimeout` if nothing answered within ``start_timeout``, or
        :class:`ConnectionClosed` with the server's reason if it refused us.
        """
        if self._closed:
            raise ConnectionClosed(f"rewarder client {self.name} is closed")
        if self._supervisor is None:
            self._supervisor = asyncio.get_running_loop().create_task(
                self._supervise(), name=f"rewarder client {self.name}"
            )
        await self.wait_connected()

    async def close(self) -> None:
        """Close the connection and stop every background task (safe to call twice)."""
        if self._close_done is not None:
            await self._close_done.wait()
            return
        self._close_done = asyncio.Event()
        self._closed = True
        try:
            ws = self._ws
            if ws is not None:
                await ws.close()
            if self._supervisor is not None:
                self._supervisor.cancel()
                await asyncio.gather(self._supervisor, return_exceptions=True)
            self._drop(f"rewarder client {self.name} was closed")
        finally:
            self._notify()
            self._close_done.set()

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # State -------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while a WebSocket to the server is open."""
        return self._ws is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def error(self) -> RewarderError | None:
        """Why the client stopped for good (refused, or reconnecting timed out), or None."""
        return self._failure

    @property
    def episode_id(self) -> int | None:
        """The episode :meth:`pop` reports on (None before the first reset)."""
        return self.buffer.episode_id

    @property
    def describe(self) -> Describe | None:
        """The last ``v0.env.describe`` of the current connection."""
        return self._describe

    @property
    def rtt(self) -> float | None:
        """Round trip of the latest ping, in seconds (None before the first)."""
        return self._rtt

    @property
    def clock_skew(self) -> tuple[float, float] | None:
        """Bounds ``(lo, hi)`` on server clock minus local clock, in seconds.

        Each ping bounds it by ``[reply.sent_at - received_at, reply.sent_at -
        request_sent_at]``; calibration intersects :data:`CALIBRATION_PINGS` of them.
        ``server_time - hi <= local_time <= server_time - lo``.
        """
        return self._skew

    @property
    def stats(self) -> ClientStats:
        return ClientStats(
            messages=self._messages,
            rewards=self._rewards,
            stale_dropped=self.buffer.stats.stale_messages,
            reconnects=self._reconnects,
            unknown_messages=self._unknown,
            bad_messages=self._bad,
            remote_errors=self._remote_errors,
        )

    def pop(self) -> EpisodeResult:
        """The current episode's reward, done, info, text since the last pop (consumed)."""
        return self.buffer.pop()

    def peek(self) -> EpisodeResult:
        """What :meth:`pop` would return, without consuming it."""
        return self.buffer.peek()

    # Waiting -----------------------------------------------------------------------------

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until connected and calibrated; raises the reason if that cannot happen."""
        await self._wait(lambda: True if self._ready else None, timeout, "a connection")

    async def wait_for_state(
        self,
        state: str = protocol.RUNNING,
        episode_id: int | None = None,
        timeout: float | None = None,
    ) -> Describe:
        """Wait for a describe with ``env_state == state`` (and episode >= ``episode_id``).

        Returns that :class:`~.protocol.Describe`. Raises :class:`TimeoutError`, or
        :class:`ConnectionClosed` if the client stops for good meanwhile.
        """

        def match() -> Describe | None:
            d = self._describe
            if (
                d is not None
                and d.env_state == state
                and (episode_id is None or d.episode_id >= episode_id)
            ):
                return d
            return None

        what = f"env_state {state!r}"
        if episode_id is not None:
            what += f" in episode {episode_id} or later"
        return await self._wait(match, timeout, what)

    async def _wait(self, check: Callable[[], _T | None], timeout: float | None, what: str) -> _T:
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                while True:
                    result = check()
                    if result is not None:
                        return result
                    self._raise_if_stopped()
                    await self._changed.wait()
        except TimeoutError:
            if not deadline.expired():
                raise  # ConnectTimeout is a TimeoutError too
            raise TimeoutError(
                f"{self.name}: waited {timeout} s for {what} from {self.url} in vain"
            ) from None

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

    async def reset(
        self,
        env_id: str | None = None,
        seed: int | None = None,
        fps: float | None = None,
        timeout: float | None = RESET_TIMEOUT,
        mode: str | None = None,
    ) -> int:
        """Ask for a new episode; returns its id once the server replied.

        ``mode`` (``"realtime"`` or ``"lockstep"``, our extension) switches how the remote
        advances; None keeps its mode.

        The ``episode_id`` header is the newest episode id this client has seen, so the
        server's new id is past everything we know of. The buffer switches to the new
        episode as the reply arrives. Raises :class:`RemoteError` if the server refused
        (an unknown ``env_id``, say), :class:`ConnectionClosed`, or :class:`TimeoutError`.
        """
        ws, proto = self._connection()
        message_id, data = proto.reset(
            self.buffer.newest_episode_id or 0, env_id, seed, fps, mode
        )
        reply, _ = await self._request(ws, protocol.RESET, message_id, data, timeout)
        return int(reply.episode_id)

    async def step(
        self,
        events: Sequence[Sequence[Any]] = (),
        frames: int = 1,
        timeout: float | None = RESET_TIMEOUT,
    ) -> StepReply:
        """Lockstep: hold ``events``' input and advance exactly ``frames`` frames.

        Returns the server's :class:`~rewarder.protocol.StepReply`: the reward and done of
        exactly those frames and the number of the resulting frame. The remote must be in
        lockstep mode (``reset(mode="lockstep")``), else :class:`RemoteError`.
        """
        ws, proto = self._connection()
        message_id, data = proto.step(self.episode_id or 0, list(events), frames)
        reply, _ = await self._request(ws, protocol.STEP, message_id, data, timeout)
        return reply  # type: ignore[no-any-return]

    async def ping(self, timeout: float | None = PING_TIMEOUT) -> float:
        """Round trip to the server in seconds; also narrows :attr:`clock_skew`."""
        rtt, lo, hi = await self._ping_once(timeout)
        self._rtt = rtt
        self._skew = _intersect(self._skew, (lo, hi))
        return rtt

    async def send_action(self, events: Sequence[Sequence[Any]]) -> None:
        """Send ``v0.agent.action`` (``("KeyEvent", key, down)``, ``("PointerEvent", x, y,
        mask)``); nothing waits for an answer, a refusal is logged and counted."""
        ws, proto = self._connection()
        _, data = proto.action(list(events))
        try:
            await ws.send(data, text=True)
        except websockets.ConnectionClosed as exc:
            raise ConnectionClosed(f"{self.name}: connection lost while sending: {exc}") from None

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
            skew = _intersect(skew, (lo, hi))
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
            name=self.name, stopped=lambda: self._closed,
        )
        proto = ClientConnection()
        self._messages += 1
        try:
            event: ServerEvent | None = proto.receive(first)
        except ProtocolError as exc:
            self._on_bad_message(first, exc)
            event = None
        if type(event) is Close:
            await ws.close()
            raise ConnectionClosed(
                f"{self.name}: {self.url} refused the connection: {event.message}"
            )
        self._ws, self._proto = ws, proto
        if event is not None:
            self._handlers[type(event)](event)
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
        """Stop for good: every waiter and later request gets ``exc``."""
        if not self._closed:
            log.warning("%s", exc)
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
        receive = proto.receive
        handlers = self._handlers
        reason = f"the connection to {self.url} closed"
        server_closed = False
        try:
            try:
                async for data in ws:
                    self._messages += 1
                    try:
                        event = receive(data)
                    except ProtocolError as exc:
                        self._on_bad_message(data, exc)
                        continue
                    handlers[type(event)](event)
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

    def _on_reward(self, event: Reward) -> None:
        self._rewards += 1
        self.buffer.file(event)

    def _on_episode_event(self, event: Text | Observation) -> None:
        self.buffer.file(event)

    def _on_describe(self, event: Describe) -> None:
        self._describe = event
        self.buffer.file(event)
        self._notify()

    def _on_reset_reply(self, event: ResetReply) -> None:
        # The server started a new episode even if nobody waits for this reply any more.
        self.buffer.reset(event.episode_id)
        self._on_reply(event)

    def _pending_for(self, parent: Any) -> tuple[str, asyncio.Future[Any]] | None:
        entry = self._pending.get(parent)
        if entry is None and isinstance(parent, str) and parent.isdigit():
            entry = self._pending.get(int(parent))  # Universe servers echo ids as strings
        if entry is None or entry[1].done():
            return None
        return entry

    def _on_reply(self, event: ResetReply | PingReply) -> None:
        entry = self._pending_for(event.parent_message_id)
        if entry is not None:
            entry[1].set_result((event, time.time()))

    def _on_error(self, event: ErrorReply) -> None:
        self._remote_errors += 1
        entry = self._pending_for(event.parent_message_id)
        if entry is not None:
            entry[1].set_exception(RemoteError(event.message, entry[0]))
        else:
            log.warning(
                "%s: the server refused message %s: %s",
                self.name,
                event.parent_message_id,
                event.message,
            )

    def _on_close(self, event: Close) -> None:
        raise _ServerClosed(event.message)

    def _on_bad_message(self, data: str | bytes, exc: ProtocolError) -> None:
        if isinstance(exc, UnknownMethod):
            self._unknown += 1
            if exc.method not in self._unknown_seen:
                self._unknown_seen.add(exc.method)
                log.info("%s: ignoring unknown server method %r", self.name, exc.method)
            return
        self._bad += 1
        log.warning("%s: ignoring a server message: %s", self.name, exc)


def _intersect(bounds: tuple[float, float] | None, new: tuple[float, float]) -> tuple[float, float]:
    """Both bounds hold, so their overlap does; if none (a clock jumped), trust the new."""
    if bounds is None:
        return new
    lo, hi = max(bounds[0], new[0]), min(bounds[1], new[1])
    return (lo, hi) if lo <= hi else new


async def connect(address: str, **kwargs: Any) -> RewarderClient:
    """Connect to the rewarder at ``address``; takes :class:`RewarderClient`'s keywords.

    Returns a started client (use it in ``async with`` to close it).
    """
    client = RewarderClient(address, **kwargs)
    try:
        await client.start()
    except BaseException:
        await client.close()
        raise
    return client
