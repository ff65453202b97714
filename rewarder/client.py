"""The rewarder client: a thin asyncio shell around :class:`connections.ClientConnection`.

Holds :class:`RewarderClient`, its entry point :func:`connect`, :class:`ClientStats` and
the request constants. The machinery below the public API (dial, serve, redial; requests
and replies; the reader; clock calibration) is :class:`~.client_channel.ClientChannel`,
whose calibration constants are re-exported here; dialling (address, auth header,
backoff) is in :mod:`.dial`, whose names are re-exported here too.

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
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import websockets

from . import protocol
from .client_channel import (
    CALIBRATION_INTERVAL,
    CALIBRATION_PINGS,
    PING_TIMEOUT,
    ClientChannel,
    intersect_skew,
)
from .dial import (
    ATTEMPT_TIMEOUT,
    BACKOFF_CAP,
    BACKOFF_FACTOR,
    BACKOFF_START,
    CLOSE_TIMEOUT,
    DEFAULT_PORT,
    MAX_SERVER_MESSAGE_BYTES,
    basic_auth,
    handshake_headers,
    parse_address,
)
from .errors import ConnectionClosed
from .protocol import Describe, StepReply
from .reward_buffer import EpisodeResult, RewardBuffer
from .snapshot_messages import RESTORE, SNAPSHOT, SnapshotReply

__all__ = [
    "ATTEMPT_TIMEOUT", "BACKOFF_CAP", "BACKOFF_FACTOR", "BACKOFF_START", "CLOSE_TIMEOUT",
    "DEFAULT_PORT", "MAX_SERVER_MESSAGE_BYTES", "ClientStats", "RewarderClient",
    "basic_auth", "connect", "parse_address",
]

#: Default wait for a reset reply: loading an environment (a browser) can take a while.
RESET_TIMEOUT: Final = 60.0
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


class RewarderClient(ClientChannel):
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
        tls: ssl.SSLContext | None = None,
        player: int | None = None,
    ) -> None:
        """Nothing is dialled until :meth:`start`.

        Args:
            address: ``host:port`` of the rewarder.
            password: the remote's password (Universe's Basic ``Authorization``).
            observer: connect as an observer: rewards and describes, never the active slot.
            start_timeout: seconds :meth:`start` keeps dialling.
            reconnect: dial again after a drop (with backoff).
            name: how log lines and errors name the remote (default: ``address``).
            calibration_pings: pings that measure the clock skew after connecting.
            calibration_interval: seconds between recalibrations.
            client_id: header ``openai-client-id``: a connection of ours with the same id
                may take the active slot from the one holding it (the server closes that
                one for good with close code 4010).
            tls: a verifying client context (:func:`rewarder.tls.client_context`);
                ``host:port`` then means ``wss://``, and a certificate it does not trust
                raises :class:`~.errors.Untrusted`.
            player: header ``openai-player``: the player to hold on a multi-player remote
                (None: player 0).
        """
        headers = handshake_headers(observer, password, client_id, player)
        super().__init__(
            parse_address(address, tls=tls is not None),
            headers,
            name=name or address,
            # Observers follow the server's episodes without resetting.
            buffer=RewardBuffer(follow=observer),
            start_timeout=start_timeout,
            reconnect=reconnect,
            calibration_pings=calibration_pings,
            calibration_interval=calibration_interval,
            tls=tls,
        )
        self.address = address
        self.observer = observer
        self._close_done: asyncio.Event | None = None

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed" if self._closed else "disconnected"
        return f"<RewarderClient {self.name} {self.url} {state} episode={self.episode_id}>"

    # Lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and calibrate the clock; returns once ready.

        Raises:
            ConnectTimeout: nothing answered within ``start_timeout``.
            ConnectionClosed: the server refused us (:class:`Refused`, with its reason),
                or the client was closed.
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
        """The current episode's reward, done, info, text since the last pop (consumed).

        Returns:
            An :class:`~.reward_buffer.EpisodeResult`.
        """
        return self.buffer.pop()

    def peek(self) -> EpisodeResult:
        """What :meth:`pop` would return, without consuming it.

        Returns:
            An :class:`~.reward_buffer.EpisodeResult`.
        """
        return self.buffer.peek()

    # Waiting -----------------------------------------------------------------------------

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until connected and calibrated; raises the reason if that cannot happen.

        Args:
            timeout: seconds to wait (None: for ever).

        Raises:
            TimeoutError: not within ``timeout`` (:class:`ConnectTimeout` when dialling
                gave up first).
            ConnectionClosed: the client stopped for good (refused, or closed).
        """
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

        Args:
            state: the ``env_state`` awaited.
            episode_id: the oldest episode that counts (None: any).
            timeout: seconds to wait (None: for ever).

        Returns:
            The describe.

        Raises:
            TimeoutError: not within ``timeout``.
            ConnectionClosed: the client stopped for good first.
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

        Args:
            env_id: switch to this environment (None: keep it).
            seed: the episode's seed.
            fps: the remote's new frame rate (None: keep it).
            timeout: seconds to wait for the reply (None: for ever).
            mode: ``"realtime"`` or ``"lockstep"`` (None: keep it).

        Returns:
            The new episode's id.

        Raises:
            RemoteError: the server refused.
            ConnectionClosed: the connection ended first.
            TimeoutError: no reply within ``timeout``.
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
        obs: str = protocol.OBS_VNC,
    ) -> StepReply:
        """Lockstep: hold ``events``' input and advance exactly ``frames`` frames.

        Returns the server's :class:`~rewarder.protocol.StepReply`: the reward and done of
        exactly those frames and the number of the resulting frame. The remote must be in
        lockstep mode (``reset(mode="lockstep")``), else :class:`RemoteError`. With
        ``obs="shm"`` the frame is in the shared-memory segment ``reply.shm`` names
        (read it with :class:`~rewarder.shm.FrameReader`) instead of a VNC update.

        Args:
            events: input events held for the step.
            frames: frames to advance.
            timeout: seconds to wait for the reply (None: for ever).
            obs: ``"vnc"`` or ``"shm"``.

        Returns:
            The :class:`~rewarder.protocol.StepReply`.

        Raises:
            RemoteError: the remote refused (not in lockstep, say).
            ConnectionClosed: the connection ended first.
            TimeoutError: no reply within ``timeout``.
        """
        ws, proto = self._connection()
        message_id, data = proto.step(self.episode_id or 0, list(events), frames, obs)
        reply, _ = await self._request(ws, protocol.STEP, message_id, data, timeout)
        return reply  # type: ignore[no-any-return]

    async def properties(
        self, op: str = "list", key: str = "", value: Any = None,
        timeout: float | None = PING_TIMEOUT,
    ) -> dict[str, Any]:
        """The remote's properties (our extension): ``op`` ``"list"`` gives
        ``{"properties": [{"key", "type", "description", "readable", "writable"}, ...]}``,
        ``"read"`` and ``"write"`` give ``{"key", "value"}``. :class:`RemoteError` names an
        unknown key, a read-only one or a bad value.

        Args:
            op: ``"list"``, ``"read"`` or ``"write"``.
            key: the property (read, write).
            value: its new value (write).
            timeout: seconds to wait for the reply.

        Returns:
            The reply's body.

        Raises:
            RemoteError: the remote refused.
        """
        if op not in ("list", "read", "write"):
            raise ValueError(f"op must be list, read or write, not {op!r}")
        ws, proto = self._connection()
        message_id, data = proto.properties(op, key, value)
        reply, _ = await self._request(ws, f"v0.env.properties.{op}", message_id, data, timeout)
        return dict(reply.body)

    async def snapshot(self, export: bool = False, timeout: float | None = RESET_TIMEOUT) -> SnapshotReply:
        """Save the remote's state (``v0.env.snapshot``, docs/snapshots.md): a token the
        remote keeps, and the bytes when ``export`` (restorable on any remote of the same
        env id, version and key). :class:`RemoteError` says why a remote cannot.

        Args:
            export: carry the state's bytes too.
            timeout: seconds to wait for the reply.

        Returns:
            The :class:`~.snapshot_messages.SnapshotReply`.

        Raises:
            RemoteError: the remote cannot save its state.
        """
        ws, proto = self._connection()
        message_id, data = proto.snapshot(export)
        reply, _ = await self._request(ws, SNAPSHOT, message_id, data, timeout)
        return reply  # type: ignore[no-any-return]

    async def restore(
        self, token: str | None = None, state: bytes | None = None,
        timeout: float | None = RESET_TIMEOUT,
    ) -> int:
        """Go back to a snapshot's state (its token, or exported bytes): a new episode,
        the branch; its id once the remote replied. :class:`RemoteError` for a dropped
        token, bytes of another env, anything not a snapshot.

        Args:
            token: a snapshot's token (or None with ``state``).
            state: exported bytes (or None with ``token``).
            timeout: seconds to wait for the reply.

        Returns:
            The new episode's id.

        Raises:
            RemoteError: the remote refused the state.
        """
        ws, proto = self._connection()
        message_id, data = proto.restore(token, state)
        reply, _ = await self._request(ws, RESTORE, message_id, data, timeout)
        return int(reply.episode_id)

    async def ping(self, timeout: float | None = PING_TIMEOUT) -> float:
        """Round trip to the server in seconds; also narrows :attr:`clock_skew`.

        Args:
            timeout: seconds to wait for the pong.

        Returns:
            The round trip in seconds.
        """
        rtt, lo, hi = await self._ping_once(timeout)
        self._rtt = rtt
        self._skew = intersect_skew(self._skew, (lo, hi))
        return rtt

    async def send_action(self, events: Sequence[Sequence[Any]]) -> None:
        """Send ``v0.agent.action`` (``("KeyEvent", key, down)``, ``("PointerEvent", x, y,
        mask)``); nothing waits for an answer, a refusal is logged and counted.

        Args:
            events: the input events.
        """
        ws, proto = self._connection()
        _, data = proto.action(events)
        try:
            await ws.send(data, text=True)
        except websockets.ConnectionClosed as exc:
            raise ConnectionClosed(f"{self.name}: connection lost while sending: {exc}") from None

    async def send_answered_action(
        self, action: str | Sequence[Sequence[Any]], settle: bool = False,
    ) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        """Send ``v0.agent.action`` with an action string or events (``settle``: answered
        once the screen is still) to a remote that answers actions (a browser remote
        observing, docs/rewarder.md); its message id and the future of its answer, the
        body of the ``v0.env.observation`` whose ``action_id`` is that id. A
        ``v0.reply.error`` for it raises :class:`RemoteError` there, the connection's end
        :class:`ConnectionClosed`. Call :meth:`forget_action` when you stop waiting.

        Args:
            action: an action string, or input events.
            settle: answer once the screen is still.

        Returns:
            The message id and the future of the answer's body.

        Raises:
            ConnectionClosed: not connected, or the connection ended while sending.
        """
        ws, proto = self._connection()
        message_id, data = proto.action(action, settle)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = (protocol.ACTION, future)
        self._answers[message_id] = future
        try:
            await ws.send(data, text=True)
        except websockets.ConnectionClosed as exc:
            self.forget_action(message_id)
            raise ConnectionClosed(f"{self.name}: connection lost while sending an action: {exc}") from None
        return message_id, future

    def forget_action(self, message_id: Any) -> None:
        """Stop waiting for the answer of :meth:`send_answered_action`'s ``message_id``.

        Args:
            message_id: what :meth:`send_answered_action` returned.
        """
        self._pending.pop(message_id, None)
        self._answers.pop(message_id, None)


async def connect(address: str, **kwargs: Any) -> RewarderClient:
    """Connect to the rewarder at ``address``; takes :class:`RewarderClient`'s keywords.

    Returns a started client (use it in ``async with`` to close it).

    Args:
        address: ``host:port`` of the rewarder.
        **kwargs: :class:`RewarderClient`'s keywords.

    Returns:
        The started client.

    Raises:
        ConnectTimeout: nothing answered within ``start_timeout``.
        Refused: the remote said no (wrong password, busy, not a rewarder).
    """
    client = RewarderClient(address, **kwargs)
    try:
        await client.start()
    except BaseException:
        await client.close()
        raise
    return client
