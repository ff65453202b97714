"""The rewarder server: a thin asyncio shell around :class:`connections.ServerConnection`.

Holds :class:`RewarderServer` and the :class:`EnvHandler` protocol it drives. The server
knows the wire (auth, observers, the one active client, order, errors); the handler
(the remote process) knows the environment (episodes, resets, input). The bytes of each
connection are :class:`~.server_link.ServerLink`'s (websockets' sans-I/O protocol in our
own :class:`asyncio.Protocol`); who gets in, and what a client's leaving sets off, are
:class:`~.server_admission.Admission`'s, a part the server holds and each link tells
about its connection coming and going; a link's messages (a step among them) come here.

A client's messages are served in order, one at a time. What can be answered at once
(pings, actions, a step the handler does synchronously: :meth:`EnvHandler.step_now`) is
answered inside the read that brought it, with one write for all its replies; what must
wait (resets, long or joint steps, property calls) runs in a task, and the client's later
messages wait for it. Sends never block the caller: a client whose unread bytes pass
:data:`MAX_BUFFERED_BYTES` is closed with a reason instead of stalling the game loop or
the other clients.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import ssl
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final, Protocol

from . import local_socket, protocol
from .batch_messages import REPLY_BATCH_STEP, BatchStepRequest
from .errors import BadRequest
from .link_reader import reader_for
from .lograte import RateLimitedLog
from .protocol import (
    CLOSE_TOO_SLOW,
)
from .server_admission import Admission, AuthGuard, Entry
from .server_link import MAX_PENDING_MESSAGES, LinkLimits, ServerLink
from .snapshot_messages import (
    MAX_RESTORE_MESSAGE_BYTES,
    REPLY_SNAPSHOT,
    RestoreRequest,
    SnapshotRequest,
)
from .tls import TLSPort

log = logging.getLogger(__name__)

#: Bytes written to one client and not yet taken by its socket before we give up on it:
#: two of the largest messages a client takes (``dial.MAX_SERVER_MESSAGE_BYTES``), or
#: thousands of describes and minutes of 60 fps rewards; a client this far behind is not
#: reading. (It was MAX_QUEUED_MESSAGES = 1024 messages of a per-client queue.)
MAX_BUFFERED_BYTES: Final = 8 * 1024 * 1024
#: WebSocket frames above this close the connection (1009) before we read them: the
#: largest message a method takes (a v0.env.restore's, MAX_RESTORE_MESSAGE_BYTES) and
#: 1 MiB more. A message between its method's limit (MAX_MESSAGE_BYTES for all but
#: restore) and this gets a v0.reply.error saying so, and the connection goes on.
MAX_FRAME_BYTES: Final = MAX_RESTORE_MESSAGE_BYTES + 1024 * 1024
#: How long shutdown waits for each client to take its v0.connection.close, and any
#: closing handshake for the client to finish it before the socket is cut.
CLOSE_TIMEOUT: Final = 2.0
#: Seconds a connection has for its opening handshake (and TLS its own, before it).
OPEN_TIMEOUT: Final = 10.0
#: What the 400 to a plain ``ws://`` handshake on a TLS port says to do.
TLS_HINT: Final = (
    "connect to {url} (our agents: the address vnc+tls://HOST:VNC_PORT+REWARDER_PORT, with "
    "tls_ca= if the remote's CA is not in the system's trust store)"
)

#: Seconds between WebSocket pings to every client, and the wait for each pong: an
#: active client that stops answering (hung, SIGSTOPped, its machine gone) frees the
#: slot within their sum, and its socket is cut CLOSE_TIMEOUT later (websockets'
#: defaults, 20 + 20 + 2 s, held a hung client's slot for most of a minute).
KEEPALIVE_INTERVAL: Final = 1.0
KEEPALIVE_TIMEOUT: Final = 1.5
#: Test-only: seconds between pings instead of KEEPALIVE_INTERVAL, from this variable of
#: the remote's environment, so a test covers a minute's keepalive rounds in seconds.
TEST_KEEPALIVE_INTERVAL_ENV: Final = "UNIVERSE_REMOTE_TEST_KEEPALIVE_INTERVAL"

#: The player of the agent whose request the handler is serving (0 unless a multi-player
#: remote seated it elsewhere): set around each call into the handler for a client's
#: message (and in the task of a request that waits), read by the handler.
PLAYER: contextvars.ContextVar[int] = contextvars.ContextVar("player", default=0)


class EnvHandler(Protocol):
    """What the server asks of the environment side (the remote process)."""

    episode_id: int

    def describe(self) -> dict[str, Any]:
        """The current ``v0.env.describe`` body: env_id, env_state, fps and extensions.

        Returns:
            The body (a dict the server sends as JSON).
        """

    async def reset(
        self, request: protocol.ResetRequest, reply: Callable[..., None]
    ) -> None:
        """Reset past ``request.episode_id``; call ``reply(new_id, body=None)`` before going
        running (``body``: the first frame's number and, for ``obs="shm"``, its segment).

        Raise :class:`BadRequest` (for example for an unknown env id) to refuse.

        Args:
            request: the parsed ``v0.env.reset``.
            reply: sends the reply; call it once, before the new episode runs.

        Raises:
            BadRequest: to refuse the reset (the message goes back to the agent).
        """

    def action(self, request: protocol.ActionRequest) -> None:
        """Queue the events for the next tick; raise :class:`BadRequest` if one is bad.

        Args:
            request: the parsed ``v0.agent.action``.

        Raises:
            BadRequest: an event is bad.
        """

    async def step(self, request: protocol.StepRequest) -> tuple[int, dict[str, Any]]:
        """Lockstep: advance as asked; return the episode id and the reply body.

        Raise :class:`BadRequest` to refuse (or to report a runtime failure).

        Args:
            request: the parsed ``v0.env.step``.

        Returns:
            The episode id and the reply's body.

        Raises:
            BadRequest: to refuse, or to report a runtime failure.
        """

    async def properties(self, request: protocol.PropertiesRequest) -> dict[str, Any]:
        """List, read or write properties; the reply body. :class:`BadRequest` to refuse.

        Args:
            request: the parsed ``v0.env.properties``.

        Returns:
            The reply's body.

        Raises:
            BadRequest: to refuse (an unknown key, a read-only one, a bad value).
        """

    def client_left(self, observer: bool) -> None:
        """A client disconnected (release what the active client held).

        Args:
            observer: whether the client was an observer (then it held nothing).
        """


class RewarderServer:
    """Serves one environment's rewarder channel to one active client and any observers.

    Call :meth:`start`, then the ``broadcast_*`` methods from the game loop (they never
    block), and :meth:`close` at shutdown.
    """

    handler: EnvHandler

    def __init__(
        self,
        handler: EnvHandler,
        *,
        password: str | None = None,
        max_message_bytes: int = protocol.MAX_MESSAGE_BYTES,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
        allow_origins: Sequence[str] = (),
        auth_guard: AuthGuard | None = None,
        held_by: Callable[[], str | None] = lambda: None,
        tls: ssl.SSLContext | None = None,
        players: Callable[[], int] = lambda: 1,
        seat_held_by: Callable[[int], str | None] = lambda player: None,
        keepalive_interval: float | None = None,
        keepalive_timeout: float = KEEPALIVE_TIMEOUT,
        open_timeout: float = OPEN_TIMEOUT,
    ) -> None:
        """Nothing listens until :meth:`start`.

        Args:
            handler: the environment side: what each request is served by.
            password: the password agents must give (None: none).
            max_message_bytes: the largest message most methods take.
            max_buffered_bytes: bytes a client may leave unread before it is dropped.
            allow_origins: web pages (``Origin`` values, ``https://host``) whose WebSocket
                handshakes are accepted; any other handshake with an ``Origin`` header is
                refused, because browsers send one and agents don't.
            auth_guard: throttles wrong passwords per address.
            held_by: names an agent of another front end holding the remote (the
                dm_env_rpc port's): agents are refused as busy meanwhile.
            tls: a server context (:func:`rewarder.tls.server_tls`): serves ``wss://`` only.
            players: how many players the environment has: above 1 an agent may ask for
                one (header ``openai-player``), and several agents are active at once,
                one a player.
            seat_held_by: names who holds a player on another front end.
            keepalive_interval: seconds between pings (None: the default).
            keepalive_timeout: seconds to wait for each pong.
            open_timeout: seconds a connection has for its opening handshake.
        """
        self.handler = handler
        entry = Entry(
            password=password, tls=tls, auth_guard=auth_guard, max_message_bytes=max_message_bytes,
            allow_origins=frozenset(o.rstrip("/").lower() for o in allow_origins),
        )
        #: Who gets in, who is in, and what their leaving sets off (the links' door).
        self.admission = Admission(
            handler, entry, closing=lambda: self._closing, held_by=held_by, players=players,
            seat_held_by=seat_held_by,
        )
        # The admission's own containers, named here for the broadcasts and the remote's
        # seats (asked before every multi-player step: a plain attribute, no call); only
        # the admission changes them.
        #: The admitted clients (agents and observers).
        self.clients: set[ServerLink] = self.admission.clients
        #: The active clients by player: one on a single-player remote, player 0's.
        self.seated: dict[int, ServerLink] = self.admission.seated
        if keepalive_interval is None:  # the default, unless a test asks for quicker rounds
            keepalive_interval = float(os.environ.get(TEST_KEEPALIVE_INTERVAL_ENV) or KEEPALIVE_INTERVAL)
        self.limits = LinkLimits(
            max_frame_bytes=MAX_FRAME_BYTES, max_buffered_bytes=max_buffered_bytes,
            open_timeout=open_timeout, keepalive_interval=keepalive_interval,
            keepalive_timeout=keepalive_timeout, close_timeout=CLOSE_TIMEOUT,
            too_slow_code=CLOSE_TOO_SLOW,
        )
        #: The TLS side of the port (with ``tls``), after :meth:`start`.
        self.tls_port: TLSPort | None = None
        #: Our bugs a client's message ran into: one line (with its traceback) per kind per
        #: interval, counted, so a client repeating the message cannot flood the log.
        self.bugs = RateLimitedLog(log)
        #: Why this port closed a client (a protocol error, a missed keepalive, ...): a
        #: WARNING per close, one line per kind per interval when they come in floods.
        self.closes = RateLimitedLog(log)
        #: Every connection whose socket is open (admitted or not).
        self.links: set[ServerLink] = set()
        #: The tasks of requests that had to wait (resets, long steps, properties).
        self.tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        #: The port's local twin (:mod:`.local_socket`), if this port has one.
        self._local: asyncio.Server | None = None
        self._closing = False

    @property
    def active(self) -> ServerLink | None:
        """Player 0's client: Universe's one active client."""
        return self.admission.seated.get(0)

    @property
    def viewer_port(self) -> int | None:
        """The port of the remote's browser viewer, if it serves one: Universe's viewer
        URL (``http://host:15900/viewer/``) is then redirected there."""
        return self.admission.viewer_port

    @viewer_port.setter
    def viewer_port(self, port: int | None) -> None:
        self.admission.serve_viewer(port)

    @property
    def password(self) -> str | None:
        """The password agents must give (None: none)."""
        return self.admission.entry.password

    @property
    def tls(self) -> ssl.SSLContext | None:
        """The port's TLS context (None: plain ``ws://``)."""
        return self.admission.entry.tls

    @property
    def allow_origins(self) -> frozenset[str]:
        """The web pages whose handshakes are accepted (normalised ``Origin`` values)."""
        return self.admission.entry.allow_origins

    @property
    def port(self) -> int:
        """The bound port (useful after ``start(port=0)``)."""
        assert self._server is not None, "call start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str = "127.0.0.1", port: int = 15900) -> None:
        """Listen on ``host:port``; with ``tls``, every connection goes through
        :class:`~.tls.TLSPort`, which answers a plain ``ws://`` handshake with a 400
        saying the port speaks ``wss://`` (TLS) instead of closing it silently.

        Args:
            host: the address to listen on.
            port: the port (0: any free one; read it back from :attr:`port`).

        Raises:
            OSError: the port cannot be bound (taken, say).
        """
        factory: Callable[[], asyncio.Protocol] = self._new_link
        if self.tls is not None:
            self.tls_port = TLSPort(
                self.tls, scheme="wss", where="the rewarder port",
                hint=TLS_HINT, handshake_timeout=OPEN_TIMEOUT, shutdown_timeout=CLOSE_TIMEOUT,
            )
            factory = self.tls_port.factory(self._new_link)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(factory, host, port)
        if local_socket.serves(host, self.tls is not None):
            try:
                self._local = await loop.create_unix_server(factory, local_socket.name(self.port))
            except OSError as exc:  # the name is taken: local agents dial TCP
                log.warning("%s", local_socket.unavailable(self.port, exc))

    def _new_link(self) -> ServerLink:
        link = ServerLink(self, self.admission, self.limits, self.closes)
        self.links.add(link)
        link.closed.add_done_callback(lambda _: self.links.discard(link))
        return link

    async def close(self, reason: str = "the remote is shutting down") -> None:
        """Tell every client why, give them :data:`CLOSE_TIMEOUT` to hear it, and stop.

        Args:
            reason: what ``v0.connection.close`` tells every client.
        """
        if self._closing:
            return
        self._closing = True
        if self._server is not None:
            self._server.close()
        if self._local is not None:
            self._local.close()
        if self.tls_port is not None:
            self.tls_port.close()
        self.bugs.close()
        self.closes.close()
        links = list(self.links)
        for link in links:
            if link.admitted and not link.ended:
                link.send(link.proto.close(reason))
                link.close(1001, "server shutting down")
            elif not link.admitted:
                link.abort()
        if links:  # each link cuts its socket CLOSE_TIMEOUT after its close frame
            await asyncio.wait([link.closed for link in links], timeout=2 * CLOSE_TIMEOUT)
        for link in links:
            link.abort()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=CLOSE_TIMEOUT)
            for task in self.tasks:
                task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
        if self._local is not None:
            await self._local.wait_closed()

    # Broadcasts from the game loop -------------------------------------------------------

    def broadcast_describe(self) -> None:
        body = self.handler.describe()
        episode_id = self.handler.episode_id
        for client in self.clients:
            client.send(client.proto.describe(episode_id, body))

    def broadcast_reward(
        self,
        episode_id: int,
        reward: float,
        done: bool,
        info: dict[str, Any],
        *,
        observers_only: bool = False,
        rewards: Sequence[float] | None = None,
    ) -> None:
        """Send a reward to every client, or (``observers_only``) to all but the active
        ones: a lockstep reward reaches the stepping client in its step reply, once.
        ``rewards`` (multi-player): each seated client gets its own player's.

        Args:
            episode_id: the episode the reward belongs to.
            reward: the reward.
            done: whether the episode ended.
            info: Universe's info dict.
            observers_only: skip the active clients.
            rewards: each player's reward (multi-player).
        """
        if rewards is not None:
            info = {**info, protocol.REWARDS_INFO_KEY: list(rewards)}
        for client in self.clients:
            if observers_only and not client.observer:
                continue
            if rewards is not None and client.player is not None:
                own = {**info, protocol.PLAYER_INFO_KEY: client.player}
                data = client.proto.reward(episode_id, rewards[client.player], done, own)
            else:
                data = client.proto.reward(episode_id, reward, done, info)
            client.send(data)

    def broadcast_text(self, episode_id: int, text: str) -> None:
        """Send a ``v0.env.text`` (what the environment says, e.g. a task's instruction) to every
        client.

        Args:
            episode_id: the episode it belongs to.
            text: the text.
        """
        for client in self.clients:
            client.send(client.proto.text(episode_id, text))

    def broadcast_observation(self, episode_id: int, observation: Any) -> None:
        """Send a ``v0.env.observation`` (an observation that is not pixels: a page's structure)
        to every client.

        Args:
            episode_id: the episode it belongs to.
            observation: its JSON-able value (sent as the message's ``observation``).
        """
        for client in self.clients:
            client.send(client.proto.observation(episode_id, observation))

    # Messages, in order per client -------------------------------------------------------

    def received(self, link: ServerLink, data: str | bytes) -> None:
        """Serve ``data`` now, or after the request of this client under way.

        Args:
            link: the connection.
            data: one WebSocket message.
        """
        if link.busy:
            link.pending.append(data)
            if len(link.pending) >= MAX_PENDING_MESSAGES and link.transport is not None:
                link.transport.pause_reading()  # TCP pushes back until they are served
            return
        self._serve(link, data)

    def _serve(self, link: ServerLink, data: str | bytes) -> None:
        later = self._answer_now(link, data)
        if later is None:
            return
        link.busy = True
        task = asyncio.get_running_loop().create_task(later)
        self.tasks.add(task)
        task.add_done_callback(lambda done: self._done(link, done))

    def _done(self, link: ServerLink, task: asyncio.Task[None]) -> None:
        """A waiting request is answered: serve what came meanwhile, in one write."""
        self.tasks.discard(task)
        link.busy = False
        if link.ended:
            link.pending.clear()
            self.admission.tell_left(link)
            return
        link.batch_begin()
        try:
            while link.pending and not link.busy and not link.ended:
                self._serve(link, link.pending.popleft())
        finally:
            link.batch_end()
        if link.transport is not None and len(link.pending) < MAX_PENDING_MESSAGES // 2:
            link.transport.resume_reading()  # (a no-op unless paused)

    def _answer_now(
        self, link: ServerLink, data: str | bytes
    ) -> Coroutine[Any, Any, None] | None:
        """Answer what needs no waiting; else the coroutine that will (run it in a task)."""
        started = time.perf_counter()
        parent: Any = None
        try:
            request = link.proto.receive(data)
            parent = request.message_id
            if isinstance(request, protocol.PingRequest):
                link.send(link.proto.reply_ping(parent, time.perf_counter() - started))
                return None
            if isinstance(request, protocol.ActionRequest):
                token = PLAYER.set(link.player or 0)
                try:
                    self.handler.action(request)
                finally:
                    PLAYER.reset(token)
                return None
            if isinstance(request, protocol.StepRequest):
                step_now = getattr(self.handler, "step_now", None)
                if step_now is not None:
                    token = PLAYER.set(link.player or 0)
                    try:
                        done = step_now(request)
                    finally:
                        PLAYER.reset(token)
                    if done is not None:
                        episode_id, body = done
                        runtime = time.perf_counter() - started
                        link.send(link.proto.reply_step(parent, episode_id, body, runtime))
                        self._read_on_thread(link)
                        return None
            if isinstance(request, BatchStepRequest):
                return self._batch_step(link, request, started)
            return self._answer_later(link, request, started)
        except Exception as exc:
            self._failed(link, parent, exc, started)
            return None

    @staticmethod
    def _read_on_thread(link: ServerLink) -> None:
        """A connection that steps in lockstep is read by a thread of its own from now
        on, where the serve process's loop allows (rewarder/link_reader.py)."""
        if link.reader is None and (reader := reader_for(link)) is not None:
            reader.start()

    def _batch_step(
        self, link: ServerLink, request: BatchStepRequest, started: float
    ) -> Coroutine[Any, Any, None] | None:
        """``v0.batch.step`` (rewarder/batch_messages.py): answered at once when every
        step fits one slice, else from a task (the handler's coroutine)."""
        batch_step = getattr(self.handler, "batch_step", None)
        if batch_step is None:
            raise BadRequest("this remote takes no batch steps; step with v0.env.step", request.message_id)
        done = batch_step(request, link.client_id, link)
        if isinstance(done, dict):
            self._reply_batch(link, request, done, started)
            self._read_on_thread(link)
            return None
        return self._batch_later(link, request, done, started)

    async def _batch_later(
        self, link: ServerLink, request: BatchStepRequest, body: Any, started: float
    ) -> None:
        try:
            self._reply_batch(link, request, await body, started)
        except Exception as exc:
            self._failed(link, request.message_id, exc, started)

    def _reply_batch(
        self, link: ServerLink, request: BatchStepRequest, body: dict[str, Any], started: float
    ) -> None:
        link.send(link.proto.send(
            REPLY_BATCH_STEP, body, parent_message_id=request.message_id,
            parent_runtime=time.perf_counter() - started,
        ))

    async def _answer_later(
        self, link: ServerLink, request: protocol.Request, started: float
    ) -> None:
        """A request that waits (a reset, a step the handler cannot do at once, properties)."""
        PLAYER.set(link.player or 0)  # (this task's own context)
        parent = request.message_id
        try:
            if isinstance(request, protocol.PropertiesRequest):
                body = await self.handler.properties(request)
                runtime = time.perf_counter() - started
                link.send(link.proto.reply_properties(parent, body, runtime))
            elif isinstance(request, protocol.StepRequest):
                episode_id, body = await self.handler.step(request)
                runtime = time.perf_counter() - started
                link.send(link.proto.reply_step(parent, episode_id, body, runtime))
            elif isinstance(request, protocol.ResetRequest):

                def reply(episode_id: int, body: dict[str, Any] | None = None) -> None:
                    runtime = time.perf_counter() - started
                    link.send(link.proto.reply_reset(parent, episode_id, runtime, body))

                await self.handler.reset(request, reply)
            else:  # v0.env.snapshot / v0.env.restore (rewarder/snapshot_messages.py)
                await self._snapshots(link, request, started)
        except Exception as exc:
            self._failed(link, parent, exc, started)

    async def _snapshots(
        self, link: ServerLink, request: protocol.Request, started: float
    ) -> None:
        """A snapshot (answered ``v0.reply.env.snapshot``) or a restore (answered as a
        reset is); handlers without them refuse both."""
        parent = request.message_id
        if isinstance(request, SnapshotRequest) and hasattr(self.handler, "snapshot"):
            body = await self.handler.snapshot(request)
            link.send(link.proto.send(
                REPLY_SNAPSHOT, body, parent_message_id=parent,
                parent_runtime=time.perf_counter() - started,
            ))
        elif isinstance(request, RestoreRequest) and hasattr(self.handler, "restore"):

            def reply(episode_id: int, body: dict[str, Any] | None = None) -> None:
                runtime = time.perf_counter() - started
                link.send(link.proto.reply_reset(parent, episode_id, runtime, body))

            await self.handler.restore(request, reply)
        else:
            raise BadRequest("this remote keeps no snapshots", parent)

    def _failed(self, link: ServerLink, parent: Any, exc: Exception, started: float) -> None:
        """Answer a refused request (:class:`BadRequest`), or one that ran into a bug of
        ours: answer, log, and keep serving everyone."""
        if isinstance(exc, BadRequest):
            if exc.parent_message_id is not None:
                parent = exc.parent_message_id
            log.debug("bad request from %s: %s", link.remote_address, exc.message)
            link.send(link.proto.reply_error(parent, exc.message, time.perf_counter() - started))
            return
        self.bugs.log(  # with its traceback, but once per kind per interval
            f"bug: {type(exc).__name__}", logging.ERROR,
            "handling a message from %s failed", link.remote_address, exc_info=exc,
        )
        message = (
            f"the remote failed to handle this message ({type(exc).__name__}: {exc}); "
            "this is a bug in the remote, please report it"
        )
        link.send(link.proto.reply_error(parent, message, time.perf_counter() - started))
