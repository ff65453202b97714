"""The rewarder client for lockstep agents: one blocking socket, driven by whoever calls.

Holds :class:`BlockingRewarder`. A lockstep step is one request and one reply, back to
back, from the agent's own thread: a blocking socket there costs two system calls and
no event loop, no thread hand-off and no borrowed loop (`python -m benchmarks
step_channel` measures it against the alternatives). The protocol state is sans-I/O —
websockets' ``ClientProtocol`` for the WebSocket framing and our
:class:`~.connections.ClientConnection` for the messages — so only bytes move here:
dialling and the requests in this module, the socket's reads and writes in its base,
:class:`~.blocking_socket.BlockingSocket`.

**Framing.** websockets does the handshake, control frames and anything unusual; once
the connection is open :class:`~.client_frames.ClientFrames` splits the stream into frames
and reads whole text frames itself (websockets' generic parser was a measurable share of
a lockstep step's agent CPU).

**Threads.** Every method may be called from any thread; a lock makes each one whole.
While nobody calls, :mod:`.keeper`'s thread reads the socket now and then, so the
remote's keepalive pings are answered while the agent trains for minutes between two
steps (the remote drops a client that leaves a ping unanswered for
``KEEPALIVE_TIMEOUT``: that is how it tells a hung agent from a thinking one).

**Requests in flight.** :meth:`send_step` and :meth:`take_reply` split a step so a vector
env sends every remote its step before it waits for any; a reply read by anyone (the
keeper included) is kept by message id until taken. A request whose reply was never
taken (the caller was interrupted) is :attr:`outstanding`: the next caller decides.

Fork: a child never touches its parent's connections (they are the parent's sockets);
:meth:`BlockingRewarder.forked` says whether this object belongs to another process.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake, InvalidMessage, InvalidStatus
from websockets.protocol import State
from websockets.uri import WebSocketURI, parse_uri

from . import keeper, local_peer, local_socket, protocol
from .batch_messages import BATCH_STEP, StepTuple, request_bytes, step_entries, steps_json
from .blocking_socket import BlockingSocket
from .client_channel import CALIBRATION_PINGS, PING_TIMEOUT, intersect_skew
from .client_frames import ClientFrames
from .connections import ClientConnection
from .dial import (
    ATTEMPT_TIMEOUT,
    MAX_SERVER_MESSAGE_BYTES,
    Backoff,
    Busy,
    handshake_headers,
    parse_address,
)
from .errors import ConnectionClosed, Refused, Untrusted
from .interrupts import SEND_TIMEOUT
from .protocol import (
    Describe,
    ResetReply,
    StepReply,
)
from .reward_buffer import EpisodeResult
from .snapshot_messages import RESTORE, SNAPSHOT, SnapshotReply
from .tls import client_context, says_tls_only, tls_failure

log = logging.getLogger(__name__)

_REFUSAL_STATUSES: Final = frozenset({401, 403})


@dataclass(frozen=True, slots=True)
class Counters:
    """What :class:`BlockingRewarder` counted (the async client's ``ClientStats`` fields)."""

    messages: int
    rewards: int
    remote_errors: int


class BlockingRewarder(BlockingSocket):
    """The agent's end of one lockstep remote's rewarder channel, on a blocking socket.

    ``connect()``, then ``reset(mode="lockstep")``, ``step()`` (or ``send_step`` +
    ``take_reply``), ``close()``. Attributes as :class:`~.client.RewarderClient` names
    them (``describe``, ``episode_id``, ``buffer``, ``connected``, ``rtt``,
    ``clock_skew``), so code that reads a session's rewarder reads either.
    """

    def __init__(
        self,
        address: str,
        *,
        password: str | None = None,
        start_timeout: float = 30.0,
        name: str | None = None,
        client_id: str | None = None,
        tls: ssl.SSLContext | None = None,
        player: int | None = None,
        calibration_pings: int = CALIBRATION_PINGS,
        local: bool = True,
    ) -> None:
        """Nothing is dialled until :meth:`connect`.

        Args:
            address: ``host:port`` of the rewarder.
            password: the remote's password (Universe's Basic ``Authorization``).
            start_timeout: seconds :meth:`connect` keeps dialling.
            name: how log lines and errors name the remote (default: ``address``).
            client_id: the ``openai-client-id`` header: a newer connection with the same id
                takes the active slot.
            tls: a verifying client context: ``host:port`` then means ``wss://``.
            player: the player to hold on a multi-player remote (None: player 0).
            calibration_pings: pings that measure the clock skew after connecting.
            local: dial the remote's Unix socket first when it runs here.
        """
        self.address = address
        #: Dial the remote's local Unix socket first when it runs here (:mod:`.local_socket`).
        self.local = local
        self.url = parse_address(address, tls=tls is not None)
        self.tls = tls
        self.start_timeout = start_timeout
        self.calibration_pings = calibration_pings
        self._headers = handshake_headers(False, password, client_id, player)
        BlockingSocket.__init__(self, self.url, name or address)
        self._pid = os.getpid()
        #: Counts the pings that set :attr:`rtt` and :attr:`clock_skew`: a vector's steady
        #: step reads those two again only when it moved (remotes.lockstep_fast).
        self.measured = 0

    @property
    def over_unix(self) -> bool:
        """Whether the connection is the remote's local Unix socket (else TCP, or none)."""
        sock = self._sock
        return sock is not None and sock.family == socket.AF_UNIX

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed" if self._closed else "disconnected"
        return f"<BlockingRewarder {self.name} {self.url} {state} episode={self.episode_id}>"

    # State ---------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def stats(self) -> Counters:
        return Counters(self._messages, self._rewards, self._remote_errors)

    def forked(self) -> bool:
        """Whether this object was made by another process (a fork's parent).

        Returns:
            True in a child process: it must not use the parent's socket.
        """
        return os.getpid() != self._pid

    def fileno(self) -> int:
        """The socket's descriptor (-1 when not connected): for waiting on several.

        Returns:
            The descriptor, or -1.
        """
        sock = self._sock
        return sock.fileno() if sock is not None else -1

    def pop(self) -> EpisodeResult:
        """The current episode's reward, done, info and text since the last pop (consumed).

        Returns:
            An :class:`~.reward_buffer.EpisodeResult`.
        """
        with self._lock:
            return self.buffer.pop()

    def peek(self) -> EpisodeResult:
        """What :meth:`pop` would return, without consuming it.

        Returns:
            An :class:`~.reward_buffer.EpisodeResult`.
        """
        with self._lock:
            return self.buffer.peek()

    # Connecting ----------------------------------------------------------------------------

    def connect(self) -> None:
        """Dial with backoff until ``start_timeout``, then calibrate the clock.

        Raises:
            ConnectTimeout: nothing answered within ``start_timeout``.
            Refused: the remote said no (wrong password, busy past the timeout, not a
                rewarder).
            Untrusted: TLS: the remote's certificate did not verify.
            ConnectionClosed: the client was closed.
        """
        with self._lock:
            if self._closed:
                raise ConnectionClosed(f"rewarder client {self.name} is closed")
            deadline = time.monotonic() + self.start_timeout
            backoff = Backoff(self.url, self.name, self.start_timeout)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise backoff.give_up()
                backoff.attempt()
                try:
                    self._attempt(min(remaining, ATTEMPT_TIMEOUT))
                    break
                except Refused:
                    raise
                except (Busy, OSError, InvalidHandshake, ConnectionClosed) as exc:
                    wait = backoff.failed(exc)
                time.sleep(max(0.0, min(wait, deadline - time.monotonic())))
            self._failure = None
            keeper.watch(self)
            try:
                self._calibrate()
            except (ConnectionClosed, TimeoutError) as exc:
                log.warning("%s: clock calibration failed: %s", self.name, exc)

    def _attempt(self, timeout: float) -> None:
        """One attempt: TCP (and TLS), the WebSocket handshake, the server's first message."""
        uri = parse_uri(self.url)
        deadline = time.monotonic() + timeout
        sock = self._dial_local(uri, timeout)
        if sock is None:
            sock = socket.create_connection((uri.host, uri.port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if uri.secure:
                try:
                    sock = (self.tls or client_context()).wrap_socket(sock, server_hostname=uri.host)
                except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
                    raise
                except ssl.SSLError as exc:
                    raise Untrusted(f"{self.name}: {tls_failure(f'{uri.host}:{uri.port}', exc)}") from None
            self._handshake(sock, uri, deadline)
        except InvalidStatus as exc:
            self._abort()
            status = exc.response.status_code
            if self.url.startswith("ws:") and says_tls_only(status, exc.response.body, "wss"):
                raise Refused(
                    f"{self.name}: {self.url} serves TLS (a remote served with --tls-cert): use "
                    "wss:// or vnc+tls://HOST:VNC_PORT+REWARDER_PORT, with tls_ca= if its CA is "
                    "not in the system's trust store"
                ) from None
            if status in _REFUSAL_STATUSES:
                body = exc.response.body.decode(errors="replace").strip()
                raise Refused(f"{self.name}: {self.url} refused the connection (HTTP {status})"
                              f"{': ' + body if body else ''}") from None
            raise
        except InvalidMessage:
            self._abort()
            raise Refused(
                f"{self.name}: {self.url} did not answer the WebSocket handshake: it is not a "
                "rewarder (are the ports swapped? vnc://HOST:VNC_PORT+REWARDER_PORT), or it "
                "serves TLS (vnc+tls://)"
            ) from None
        except BaseException:
            self._abort()
            raise
        sock.settimeout(None)

    def _dial_local(self, uri: WebSocketURI, timeout: float) -> socket.socket | None:
        """The remote's local Unix socket (:mod:`.local_socket`), if it has one, its peer
        is the process that holds the port (:mod:`.local_peer`) and :attr:`local`
        allows; None: dial TCP."""
        if not (self.local and local_socket.dials(uri.host, uri.secure)):
            return None
        return local_peer.dial(uri.port, timeout)

    def _handshake(self, sock: socket.socket, uri: WebSocketURI, deadline: float) -> None:
        """On a connected ``sock``: the WebSocket handshake, then the server's first
        message (a describe, or the reason it refuses us), until ``deadline``."""
        ws = ClientProtocol(uri, max_size=MAX_SERVER_MESSAGE_BYTES)
        request = ws.connect()
        for key, value in self._headers.items():
            request.headers[key] = value
        ws.send_request(request)
        self._sock, self._ws, self._proto = sock, ws, ClientConnection()
        self._frames = ClientFrames(ws, self._message, MAX_SERVER_MESSAGE_BYTES)
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self._flush(timeout=max(0.0, deadline - time.monotonic()))
        while ws.state is State.CONNECTING:
            self._read_some(deadline)
        if ws.handshake_exc is not None:
            raise ws.handshake_exc
        while self._describe is None:
            self._read_some(deadline)

    def _calibrate(self) -> None:
        skew: tuple[float, float] | None = None
        for _ in range(self.calibration_pings):
            started_wall, started = time.time(), time.perf_counter()
            reply, received_wall = self._call(protocol.PING, self._need_proto().ping(), PING_TIMEOUT)
            self._rtt = time.perf_counter() - started
            skew = intersect_skew(skew, (reply.sent_at - received_wall, reply.sent_at - started_wall))
            self.measured += 1
        self._skew = skew
        self.measured += 1

    # Requests ------------------------------------------------------------------------------

    def reset(
        self, env_id: str | None = None, seed: int | None = None, fps: float | None = None,
        mode: str | None = None, timeout: float = 60.0,
    ) -> int:
        """Ask for a new episode; its id once the server replied (the buffer switches).

        Args:
            env_id: switch to this environment (None: keep it).
            seed: the episode's seed.
            fps: the remote's new frame rate (None: keep it).
            mode: ``"realtime"`` or ``"lockstep"`` (None: keep it).
            timeout: seconds to wait for the reply.

        Returns:
            The new episode's id.

        Raises:
            RemoteError: the server refused (an unknown env id, say).
            ConnectionClosed: the connection ended first.
            TimeoutError: no reply within ``timeout``.
        """
        with self._lock:
            deadline = time.monotonic() + timeout
            message_id = self.send_reset(env_id, seed, fps, mode, timeout=timeout)
            reply: ResetReply = self.wait_reply(message_id, deadline)
            return int(reply.episode_id)

    def send_reset(
        self, env_id: str | None = None, seed: int | None = None, fps: float | None = None,
        mode: str | None = None, obs: str = protocol.OBS_VNC, timeout: float = SEND_TIMEOUT,
    ) -> int:
        """Send ``v0.env.reset`` (past the newest episode this channel saw) without waiting.

        Args:
            env_id: switch to this environment (None: keep it).
            seed: the episode's seed.
            fps: the remote's new frame rate (None: keep it).
            mode: ``"realtime"`` or ``"lockstep"`` (None: keep it).
            obs: ``"shm"``: the reply names the shared-memory segment holding the new
                episode's first frame, as a step's does (else ``"vnc"``).
            timeout: seconds the send may take.

        Returns:
            The request's message id, for :meth:`wait_reply` or :meth:`take_reply`.
        """
        with self._lock:
            newest = self.buffer.newest_episode_id or 0
            request = self._need_proto().reset(newest, env_id, seed, fps, mode, obs)
            return self._send_request(protocol.RESET, request, timeout)

    def write_property(self, key: str, value: Any, timeout: float = PING_TIMEOUT) -> dict[str, Any]:
        """Write the remote's property ``key`` (our extension).

        Args:
            key: the property.
            value: its new value.
            timeout: seconds to wait for the reply.

        Returns:
            The reply's body (``{"key", "value"}``).

        Raises:
            RemoteError: an unknown key, a read-only one or a bad value.
        """
        with self._lock:
            request = self._need_proto().properties("write", key, value)
            reply, _ = self._call(protocol.PROPERTIES_WRITE, request, timeout)
            return dict(reply.body)

    def snapshot(self, export: bool = False, timeout: float = PING_TIMEOUT) -> SnapshotReply:
        """Save the remote's state (``v0.env.snapshot``, docs/snapshots.md).

        Args:
            export: carry the state's bytes too.
            timeout: seconds to wait for the reply.

        Returns:
            The :class:`~.snapshot_messages.SnapshotReply` (token, bytes when exported).

        Raises:
            RemoteError: the remote cannot save its state (the message says why).
        """
        with self._lock:
            reply, _ = self._call(SNAPSHOT, self._need_proto().snapshot(export), timeout)
            return reply  # type: ignore[no-any-return]

    def send_restore(self, token: str | None, state: bytes | None, obs: str = protocol.OBS_VNC,
                     timeout: float = SEND_TIMEOUT) -> int:
        """Send ``v0.env.restore`` of a token or exported bytes without waiting.

        Args:
            token: a snapshot's token (or None with ``state``).
            state: exported bytes (or None with ``token``).
            obs: ``"vnc"`` or ``"shm"``.
            timeout: seconds the send may take.

        Returns:
            The request's message id: its reply, for :meth:`wait_reply`, is a
            :class:`ResetReply` (a new episode id, the branch).
        """
        with self._lock:
            return self._send_request(RESTORE, self._need_proto().restore(token, state, obs), timeout)

    def restore(self, token: str | None = None, state: bytes | None = None,
                timeout: float = 60.0) -> ResetReply:
        """Go back to a snapshot's state; the reply (a new episode id, the restored frame).

        Args:
            token: a snapshot's token (or None with ``state``).
            state: exported bytes (or None with ``token``).
            timeout: seconds to wait for the reply.

        Returns:
            The :class:`~.protocol.ResetReply`.

        Raises:
            RemoteError: a dropped token, bytes of another env, or not a snapshot.
        """
        with self._lock:
            deadline = time.monotonic() + timeout
            message_id = self.send_restore(token, state, timeout=timeout)
            reply: ResetReply = self.wait_reply(message_id, deadline)
            return reply

    def wait_for_state(self, state: str, episode_id: int | None, timeout: float) -> Describe:
        """Wait for a describe with ``env_state == state`` (episode >= ``episode_id``).

        Args:
            state: the ``env_state`` awaited (``"running"``).
            episode_id: the oldest episode that counts (None: any).
            timeout: seconds to wait.

        Returns:
            That :class:`~.protocol.Describe`.

        Raises:
            TimeoutError: not within ``timeout``.
            ConnectionClosed: the connection ended first.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                d = self._describe
                if d is not None and d.env_state == state and (
                    episode_id is None or d.episode_id >= episode_id
                ):
                    return d
                self._read_some(deadline)

    def send_step(
        self, action: str | Sequence[Sequence[Any]], frames: int, obs: str, settle: bool = False,
        timeout: float = SEND_TIMEOUT,
    ) -> int:
        """Send ``v0.env.step`` without waiting.

        Args:
            action: input events, or a browser remote's action string.
            frames: frames to advance.
            obs: ``"vnc"`` or ``"shm"``.
            settle: the remote answers once its screen is still instead.
            timeout: seconds the send may take.

        Returns:
            The request's message id, for :meth:`take_reply`.

        Raises:
            SendTimeout: the remote did not take it all within ``timeout``: it is lost.
        """
        with self._lock:
            message_id, data = self._need_proto().step(self.episode_id or 0, action, frames, obs, settle)
            self.outstanding[message_id] = protocol.STEP  # first: an interrupt after the send
            self._send_text(data, timeout)
            return message_id

    def send_batch_step(self, steps: list[StepTuple], memfd: bool = False) -> int:
        """Send a ``v0.batch.step`` (:func:`rewarder.batch_messages.request_body`).

        Args:
            steps: one ``(game, episode id, events, frames)`` per game of the remote's process.
            memfd: ask for the frames in a sealed memfd (:mod:`rewarder.shm`).

        Returns:
            The request's message id; :meth:`take_reply` gives its ``BatchStepReply``.
        """
        return self.send_batch_steps(steps_json(step_entries(steps)), memfd)

    def send_batch_steps(self, steps: bytes, memfd: bool = False, into: bytes | None = None) -> int:
        """Send a ``v0.batch.step`` whose steps are ``steps``
        (:func:`rewarder.batch_messages.steps_json`): a vector's steady steps keep each
        game's entry and send one of these a process.

        Args:
            steps: the JSON of the request's steps.
            memfd: ask for the frames in a sealed memfd (:mod:`rewarder.shm`).
            into: the JSON of the agent's buffer for the frames (:mod:`rewarder.shm_bank`).

        Returns:
            The request's message id.

        Raises:
            SendTimeout: the remote did not take it all within :data:`SEND_TIMEOUT`.
        """
        with self._lock:
            numbering = self._need_proto().numbering  # (as ClientConnection numbers a request)
            message_id = numbering.next_message_id
            data = request_bytes(message_id, numbering.clock(), steps, memfd, into)
            numbering.next_message_id = message_id + 1
            self.outstanding[message_id] = BATCH_STEP  # first: an interrupt after the send
            self._send_text(data, SEND_TIMEOUT)
            return message_id

    def _send_text(self, data: bytes, timeout: float) -> None:
        """:meth:`_send`, its usual case (an open connection: one text frame) flat: the
        steps' sends."""
        ws, framing = self._ws, self._frames
        if ws is not None and framing is not None and ws.state is State.OPEN:
            self._flush(framing.text_frame(data), timeout)
        else:
            self._send(data, timeout)

    def _send_request(self, method: str, request: tuple[int, bytes], timeout: float = SEND_TIMEOUT) -> int:
        message_id, data = request
        self.outstanding[message_id] = method  # first: an interrupt after the send
        self._send(data, timeout)
        return message_id

    def take_reply(self, message_id: Any, read: bool = True, ready: bool = False) -> StepReply | None:
        """The reply to ``message_id`` if it arrived, never waiting.

        Args:
            message_id: the request's id.
            read: first read what the socket holds (else only look at the replies read).
            ready: a poll just said the socket has bytes (read them without asking again).

        Returns:
            The reply, or None while it has not arrived.

        Raises:
            RemoteError: the server refused the request.
        """
        with self._lock:
            self.used_at = time.monotonic()
            if read and message_id not in self._replies:
                self._read_ready(ready)
            return self._pop_reply(message_id)

    def wait_reply(self, message_id: Any, deadline: float) -> Any:
        """The reply to ``message_id``, waiting for it.

        Args:
            message_id: the request's id.
            deadline: ``time.monotonic()`` to give up at.

        Returns:
            The reply.

        Raises:
            TimeoutError: past ``deadline``.
            ConnectionClosed: the connection ended first.
            RemoteError: the server refused the request.
        """
        with self._lock:
            while message_id not in self._replies:
                self._read_some(deadline)
            return self._pop_reply(message_id)

    def step(
        self, events: Sequence[Sequence[Any]] = (), frames: int = 1, obs: str = protocol.OBS_VNC,
        timeout: float = 60.0,
    ) -> StepReply:
        """Lockstep: hold ``events`` and advance exactly ``frames`` frames; the reply.

        Args:
            events: input events held for the step.
            frames: frames to advance.
            obs: ``"vnc"`` or ``"shm"`` (the frame in a shared-memory segment).
            timeout: seconds to wait for the reply.

        Returns:
            The :class:`~.protocol.StepReply`: the reward and done of exactly those frames.

        Raises:
            RemoteError: the remote refused (not in lockstep, say).
            ConnectionClosed: the connection ended first.
            TimeoutError: no reply within ``timeout``.
        """
        with self._lock:
            deadline = time.monotonic() + timeout
            message_id = self.send_step(events, frames, obs, timeout=timeout)
            reply: StepReply = self.wait_reply(message_id, deadline)
            return reply

    def ping(self, timeout: float = PING_TIMEOUT) -> float:
        """Measure the round trip.

        Args:
            timeout: seconds to wait for the pong.

        Returns:
            The round trip in seconds.
        """
        with self._lock:
            started = time.perf_counter()
            self._call(protocol.PING, self._need_proto().ping(), timeout)
            self._rtt = time.perf_counter() - started
            self.measured += 1
            return self._rtt

    def outstanding_step(self) -> Any:
        """The id of the newest step request whose reply nobody took, or None.

        Returns:
            A message id, or None.
        """
        if not self.outstanding:  # (every lockstep step asks; most have nothing out)
            return None
        with self._lock:
            steps = [i for i, method in self.outstanding.items() if method == protocol.STEP]
            return steps[-1] if steps else None

    def drop_outstanding(self) -> list[Any]:
        """Forget the requests whose replies nobody took (their replies are dropped as they
        come).

        Returns:
            The ids forgotten.
        """
        with self._lock:
            ids = list(self.outstanding)
            self.outstanding.clear()
            for message_id in ids:
                self._replies.pop(message_id, None)
            return ids

    def close(self) -> None:
        """Close the connection (idempotent; a forked child only forgets it)."""
        if self.forked():
            self._sock = None
            return
        keeper.forget(self)
        with self._lock:
            self._closed = True
            sock, ws = self._sock, self._ws
            if sock is not None and ws is not None and ws.state is State.OPEN:
                try:
                    ws.send_close()
                    self._flush(timeout=0.0)  # never waits: a peer that takes nothing is gone
                except (ConnectionClosed, OSError):  # the peer went first (a Unix socket says so at once)
                    pass
            self._lost(f"rewarder client {self.name} was closed")
