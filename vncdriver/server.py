"""The VNC server: a thin asyncio shell that serves a numpy framebuffer to many clients.

Holds :class:`VNCServer`. The owner (the remote process) calls :meth:`VNCServer.frame_ready`
after drawing each frame; the server diffs that frame against the previous one once, in
64x64 tiles, marks the changed tiles dirty on every client and answers each client's
outstanding update request from the frame *now*. A client whose socket is backed up is
skipped: its dirty tiles accumulate and it gets the latest frame when it drains, never
a backlog, and never slows the game or the other clients.

Input arrives through the ``on_input(client_id, events)`` callback as
:class:`~vncdriver.messages.KeyEvent`/:class:`~vncdriver.messages.PointerEvent`;
``on_disconnect(client_id)`` lets the owner release what that client held.

:meth:`VNCServer.attach` serves a client of the same process over any byte transport
(the browser viewer's WebSockets) and returns its :class:`AttachedClient` handle: the
same per-client code as a socket client (handshake, encodings, dirty tiles, skipping
while backed up, view-only), with no TCP hop and no second parse of its messages.

With ``tls=`` (an ``ssl.SSLContext`` holding the certificate) every socket client goes
through VeNCrypt: the handshake offers nothing else, and the connection switches to TLS
(``loop.start_tls``) before the password challenge. Attached clients are the owner's and
never need it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import numpy as np

from .errors import LocalProtocolError, VNCError
from .handshake import ServerHandshake, StartTLS
from .messages import FrameTag, KeyEvent, PointerEvent, SetEncodings, SetPixelFormat
from .server_protocol import (
    Rect,
    ServerProtocol,
    SharedEncodings,
    TileDiffer,
    tile_mask_to_rects,
)

log = logging.getLogger(__name__)

#: Viewers (clients that do not ask for frame tags: people, noVNC, recorders) one remote
#: serves; more are refused with a reason. 100 viewers and an agent fit.
MAX_VIEWERS: Final = 128
#: Connections kept for agents (clients that ask for FRAME_TAG) beyond MAX_VIEWERS, so
#: the agent's own VNC connection never competes with viewers.
AGENT_SLOTS: Final = 4
#: Connections still in the RFB handshake (not yet authenticated): their own cap, below
#: the client slots, so half-open connections cannot take the places of clients that got
#: in; high enough for a burst of 40 clients connecting at once (a test does).
MAX_HANDSHAKING: Final = 48
#: Compatibility name: every client slot there is.
MAX_CLIENTS: Final = MAX_VIEWERS + AGENT_SLOTS
#: Bytes queued in the kernel and transport for one client before we stop encoding for it
#: and let it catch up (a few full 1024x768 Raw frames).
MAX_WRITE_BUFFER: Final = 8 * 1024 * 1024
#: Seconds a client has to finish the RFB handshake (a VNC password prompt included:
#: viewers ask for it before they connect). Was 10 s, which let a half-open connection
#: hold a slot for long.
HANDSHAKE_TIMEOUT: Final = 3.0
#: Frames up to this size are copied whole as the next diff's reference when anything
#: changed (one memcpy: 100 KB at 160x210); larger ones only in their changed tiles.
WHOLE_COPY_BYTES: Final = 256 * 1024

InputCallback = Callable[[int, Sequence[KeyEvent | PointerEvent]], None]


class AuthGuard(Protocol):
    """Failed-password throttling shared by a remote's ports (``envserver.throttle``):
    ``refusal`` when a connection opens (a blocked address goes at once), ``admit`` right
    before a password is compared (the decision that bounds the guesses), then ``failed``
    or ``succeeded`` (``abandoned``: it was not compared after all)."""

    def blocked(self, address: str | None) -> float: ...
    def refusal(self, address: str | None) -> str | None: ...
    def admit(self, address: str | None) -> str | None: ...
    def failed(self, address: str | None, where: str) -> None: ...
    def succeeded(self, address: str | None) -> None: ...
    def abandoned(self, address: str | None) -> None: ...


class _Gate:
    """One connection's :class:`~vncdriver.handshake.PasswordGate` over the server's guard."""

    __slots__ = ("guard", "peer")

    def __init__(self, guard: AuthGuard, peer: str | None) -> None:
        self.guard, self.peer = guard, peer

    def admit(self) -> str | None:
        return self.guard.admit(self.peer)

    def compared(self, right: bool) -> None:
        if right:
            self.guard.succeeded(self.peer)
        else:
            self.guard.failed(self.peer, "the VNC port")


class _Transport(Protocol):
    """What a :class:`_Connection` writes to: an asyncio transport or :class:`_Callbacks`."""

    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def is_closing(self) -> bool: ...
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...
    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None: ...


class _Connection(asyncio.Protocol):
    """One client: handshake first, then a :class:`ServerProtocol`."""

    def __init__(
        self,
        server: VNCServer,
        client_id: int,
        *,
        trusted: bool = False,
        view_only: bool = False,
        lossless: bool = False,
        refuse_reason: str | None = None,
        player: int | None = None,
    ) -> None:
        self.server = server
        self.refuse_reason = refuse_reason
        #: The player a trusted client drives, as its owner decided (the viewer, by the
        #: password the browser gave); None: decided by the handshake's password.
        self.forced_player = player
        self.client_id = client_id
        #: Authenticated by its owner (the viewer): offered security None.
        self.trusted, self.force_view_only, self.lossless = trusted, view_only, lossless
        self.transport: _Transport | None = None
        self.handshake: ServerHandshake | None = None
        self.proto: ServerProtocol | None = None
        self.paused = False
        self.updates = 0
        #: "agent" (asked for frame tags) or "viewer", from its first SetEncodings.
        self.kind: str | None = None
        #: Why the server closed this client, if it did.
        self.abort_reason: str | None = None
        #: The player whose password it gave (``VNCServer.player_passwords``), or None.
        self.player: int | None = None
        self._timeout: asyncio.TimerHandle | None = None
        self._tls_task: asyncio.Task[None] | None = None

    # asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport | _Transport) -> None:
        # An asyncio.Transport, a look-alike that is no subclass (uvloop's), or ours.
        own: _Transport = transport  # type: ignore[assignment]
        self.transport = own
        own.set_write_buffer_limits(high=MAX_WRITE_BUFFER)
        server = self.server
        height, width = server.frame.shape[:2]
        refuse = self.refuse_reason
        guard = server.auth_guard
        gate = None
        if guard is not None and not self.trusted and server.guarded:
            gate = _Gate(guard, self._peer())  # decides again when the password arrives
            if refuse is None:
                refuse = guard.refusal(self._peer())
        # Clients still shaking hands count too, or a burst of them slips past the limit.
        if refuse is not None:
            pass
        elif len(server.handshaking) >= server.max_handshaking:
            refuse = (
                f"too many connections still shaking hands ({server.max_handshaking}, "
                "MAX_HANDSHAKING); try again in a moment"
            )
        elif len(server.connections) + len(server.handshaking) >= server.max_clients:
            # (Those still shaking hands count too, or a burst slips past the limit.)
            refuse = (
                f"too many clients ({server.max_clients}); serve --max-viewers raises the "
                "limit; try again later"
            )
        else:
            server.handshaking.add(self)
        self.handshake = ServerHandshake(
            width,
            height,
            server.name,
            password=None if self.trusted else server.password,
            view_only_password=None if self.trusted else server.view_only_password,
            player_passwords=None if self.trusted else server.player_passwords,
            refuse_reason=refuse,
            tls=server.tls is not None and not self.trusted,
            gate=gate,
        )
        self._flush_handshake()
        self._timeout = asyncio.get_running_loop().call_later(
            HANDSHAKE_TIMEOUT, self._abort, "did not finish the RFB handshake in time"
        )

    def data_received(self, data: bytes) -> None:
        try:
            if self.proto is None:
                self._handshake_data(data)
            else:
                self._protocol_data(data)
        except VNCError as exc:
            self._failed(exc)

    def _failed(self, exc: VNCError) -> None:
        # (Wrong passwords were counted where they were compared: the handshake's gate.)
        self._abort(str(exc))

    def _peer(self) -> str | None:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return str(peer[0]) if isinstance(peer, tuple) and peer else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget_handshake()
        if self.server.connections.pop(self.client_id, None) is not None:
            log.info("VNC client %d left", self.client_id)
            self.server.on_disconnect(self.client_id)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.send_update()

    # Handshake -------------------------------------------------------------------------------

    def _flush_handshake(self) -> None:
        assert self.handshake is not None and self.transport is not None
        out = self.handshake.data_to_send()
        if out:
            self.transport.write(out)

    def _forget_handshake(self) -> None:
        """Free the handshake slot and its deadline (twice is fine)."""
        if self._timeout is not None:
            self._timeout.cancel()
        self.server.handshaking.discard(self)

    def _handshake_data(self, data: bytes) -> None:
        handshake = self.handshake
        assert handshake is not None
        self._handshake_step(lambda: handshake.receive_data(data))

    def _handshake_step(self, step: Callable[[], None]) -> None:
        """Move the handshake on (bytes in, or the switch to TLS done), write what it
        queued — a failure's reason before the error closes us — and act on its events."""
        try:
            step()
        finally:
            self._flush_handshake()
        self._handshake_events()

    async def _start_tls(self) -> None:
        """VeNCrypt agreed: switch this connection to TLS, then go on with the handshake."""
        assert self.server.tls is not None and self.handshake is not None
        raw = self.transport
        try:
            tls = await asyncio.get_running_loop().start_tls(
                raw,  # type: ignore[arg-type]
                self,
                self.server.tls,
                server_side=True,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            why = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else exc
            self._abort(f"the TLS handshake failed ({why or type(exc).__name__})")
            self._forget_handshake()  # no connection_lost comes for a failed start_tls
            return
        if tls is None or raw is None or raw.is_closing():
            self._forget_handshake()
            return
        own: _Transport = tls  # type: ignore[assignment]
        own.set_write_buffer_limits(high=MAX_WRITE_BUFFER)
        self.transport = own
        try:
            self._handshake_step(self.handshake.tls_started)
        except VNCError as exc:
            self._failed(exc)

    def _handshake_events(self) -> None:
        handshake = self.handshake
        assert handshake is not None and self.transport is not None
        for done in handshake.events_received():
            if isinstance(done, StartTLS):
                self._tls_task = asyncio.ensure_future(self._start_tls())
                continue
            if self._timeout is not None:
                self._timeout.cancel()
            if self.force_view_only:
                done = dataclasses.replace(done, view_only=True)
            elif self.forced_player is not None:
                done = dataclasses.replace(done, player=self.forced_player)
            self.player = done.player
            self.proto = ServerProtocol(
                done, encodings=self.server.encodings, lossless=self.lossless
            )
            self.server.handshaking.discard(self)
            self.server.connections[self.client_id] = self
            log.info(
                "VNC client %d connected from %s (RFB %d.%d%s)",
                self.client_id,
                self.transport.get_extra_info("peername"),
                *done.version,
                ", view only" if done.view_only else f", player {done.player}"
                if done.player is not None else "",
            )
            frame = self.server.frame
            if frame.shape[:2] != (done.height, done.width):  # resized while we shook hands
                self.proto.resize(frame.shape[1], frame.shape[0])
            if self.server._previous is None:
                # The first client: diff the next frame against this one, or every client
                # would get that whole frame again although only a sprite moved.
                self.server._previous = frame.copy()
            trailing = handshake.trailing_data()
            if trailing:
                self._protocol_data(trailing)

    # After the handshake -------------------------------------------------------------------

    def _protocol_data(self, data: bytes) -> None:
        proto = self.proto
        assert proto is not None
        proto.receive_data(data)
        inputs: list[KeyEvent | PointerEvent] = []
        new_format = set_encodings = False
        for event in proto.events_received():  # one pass: an agent sends this every frame
            kind = type(event)
            if kind is KeyEvent or kind is PointerEvent:
                inputs.append(event)
            elif kind is SetPixelFormat:
                new_format = True
            elif kind is SetEncodings:
                set_encodings = True
        if new_format:
            # The client's picture was drawn in the old format (TigerVNC's viewer goes from
            # 8-bit to full colour with an *incremental* request): send all of it again.
            proto.mark_all_dirty()
        if inputs:
            self.server.on_input(self.client_id, inputs)
        if set_encodings and self.kind is None:
            self._classify()
        if self.server.tag is not None:
            proto.set_frame_tag(self.server.tag)  # for a client that just asked for tags
        self.send_update()

    def _classify(self) -> None:
        """A client's first SetEncodings says what it is: an agent asks for frame tags.
        Viewers past ``max_viewers`` go; agents have slots of their own."""
        assert self.proto is not None
        self.kind = "agent" if self.proto.preferences.frame_tag else "viewer"
        if self.kind == "viewer":
            viewers = sum(c.kind == "viewer" for c in self.server.connections.values())
            if viewers > self.server.max_viewers:
                self._abort(
                    f"too many viewers ({self.server.max_viewers}, serve --max-viewers); "
                    "try again later"
                )

    def send_update(self) -> None:
        """Answer the outstanding request from the current frame, unless backed up."""
        proto, transport = self.proto, self.transport
        if proto is None or transport is None or self.paused or transport.is_closing():
            return
        server = self.server
        # Sharing encoded rectangles pays only when another client may want them.
        shared = server.shared if len(server.connections) > 1 else None
        try:
            if proto.send_update(server.frame, shared):
                self.updates += 1
            out = proto.data_to_send()
        except LocalProtocolError as exc:  # a bug of ours: drop this client, keep serving
            log.exception("VNC client %d: cannot encode an update", self.client_id)
            self._abort(f"internal error: {exc}")
            return
        if out:
            transport.write(out)

    def resize(self, width: int, height: int) -> None:
        if self.proto is not None and not self.proto.resize(width, height):
            self._abort("the screen size changed and the client does not accept DesktopSize")

    def _abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
        log.info("closing VNC client %d: %s", self.client_id, reason)
        if self.transport is not None:
            self.transport.close()


class _Callbacks:
    """An attached client's transport: the owner's ``write`` and ``close`` callbacks.

    Like an asyncio transport, closing reports the loss on the next loop iteration, so a
    client the server ends while it iterates its clients leaves between iterations.
    """

    def __init__(self, write: Callable[[bytes], None], close: Callable[[], None],
                 peer: str | None) -> None:
        self._write, self._close, self.peer = write, close, peer
        self.connection: _Connection | None = None
        self.closing = False
        #: The client has left the server (connection_lost ran).
        self.ended = False

    def write(self, data: bytes) -> None:
        if data and not self.closing:
            self._write(data)

    def close(self) -> None:
        """The server ends the client: it leaves, then the owner hears ``close()``."""
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self._end, True)

    def _end(self, tell_owner: bool) -> None:
        if self.ended:
            return
        self.closing = self.ended = True
        if self.connection is not None:
            self.connection.connection_lost(None)
        if tell_owner:
            self._close()

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """The owner's buffer decides: it calls :meth:`AttachedClient.pause`/``resume``."""


class AttachedClient:
    """The handle of a client attached in-process (:meth:`VNCServer.attach`).

    Call :meth:`feed` with what the client sent; :meth:`pause` when the bytes handed to
    ``write`` back up and :meth:`resume` when they drain (meanwhile the server encodes
    nothing for it, then sends the newest frame, as for a slow socket); :meth:`close`
    when the client is gone. It is a VNC client like any other: it counts against
    ``max_clients``, appears in ``connections`` and ``stats()`` under :attr:`client_id`.
    """

    def __init__(self, connection: _Connection, transport: _Callbacks) -> None:
        self._connection, self._transport = connection, transport
        self.client_id = connection.client_id

    @property
    def closed(self) -> bool:
        """Closed by either side: feeding it does nothing, and nothing more is written."""
        return self._transport.closing

    @property
    def close_reason(self) -> str | None:
        """Why the server closed it (bad bytes, a refusal, shutdown), if it did."""
        return self._connection.abort_reason

    @property
    def paused(self) -> bool:
        return self._connection.paused

    @property
    def ready(self) -> bool:
        """Past the RFB handshake: it gets updates."""
        return self._connection.proto is not None

    @property
    def updates(self) -> int:
        """Updates sent to it so far."""
        return self._connection.updates

    def feed(self, data: bytes) -> None:
        """Bytes the client sent; the server answers through ``write`` (or closes it)."""
        if not self.closed:
            self._connection.data_received(data)

    def pause(self) -> None:
        """Its output is backed up: stop encoding for it, let its dirty tiles accumulate."""
        self._connection.pause_writing()

    def resume(self) -> None:
        """Its output drained: send what changed since it paused, at once if it asked."""
        if self._connection.paused:
            self._connection.resume_writing()

    def close(self) -> None:
        """The client is gone: it leaves the server now (``on_disconnect``). Idempotent;
        ``close`` (the callback) is not called for it."""
        self._transport._end(tell_owner=False)


def _inside(rects: Sequence[Rect], width: int, height: int) -> list[Rect]:
    """``rects`` cut to the screen, the empty ones dropped (a runtime's report is trusted
    for what changed, not for its bounds)."""
    out = []
    for x, y, w, h in rects:
        left, top = max(x, 0), max(y, 0)
        right, bottom = min(x + w, width), min(y + h, height)
        if left < right and top < bottom:
            out.append((left, top, right - left, bottom - top))
    return out


class VNCServer:
    """Serves ``frame`` (``uint8[H, W, 3]``) to every connected VNC client.

    ``await start(host, port)``, then call :meth:`frame_ready` after each frame and
    :meth:`close` at the end. Passwords follow VNC Authentication: 8 characters count.
    """

    def __init__(
        self,
        frame: np.ndarray,
        *,
        name: str = "universe-remote",
        password: str | None = None,
        view_only_password: str | None = None,
        on_input: InputCallback | None = None,
        on_disconnect: Callable[[int], None] | None = None,
        auth_guard: AuthGuard | None = None,
        encodings: Sequence[int] | None = None,
        max_clients: int | None = None,
        max_viewers: int = MAX_VIEWERS,
        agent_slots: int = AGENT_SLOTS,
        max_handshaking: int = MAX_HANDSHAKING,
        tls: ssl.SSLContext | None = None,
        player_passwords: Mapping[int, str] | None = None,
    ) -> None:
        """``player_passwords`` (multi-player remotes): player -> a password whose viewers
        drive that player; :meth:`player_of` says which a client gave."""
        self.frame = frame
        #: The certificate's server context: every socket client goes through VeNCrypt.
        self.tls = tls
        #: The newest frame tag (see :meth:`frame_ready`).
        self.tag: FrameTag | None = None
        #: What clients of the current frame share of Raw encodings; new for each frame.
        self.shared: SharedEncodings = {}
        self.name = name
        self.password = password
        self.view_only_password = view_only_password
        self.player_passwords: dict[int, str] = dict(player_passwords or {})
        self.on_input: InputCallback = on_input or (lambda client_id, events: None)
        self.on_disconnect: Callable[[int], None] = on_disconnect or (lambda client_id: None)
        self.encodings = encodings
        #: Counts wrong passwords per address and refuses blocked ones (one per remote).
        self.auth_guard = auth_guard
        if max_clients is not None:  # the old single cap: all of it for viewers
            max_viewers, agent_slots = max_clients, 0
        self.max_viewers, self.agent_slots = max_viewers, agent_slots
        self.max_handshaking = max_handshaking
        #: Every client slot: viewers and agents.
        self.max_clients = max_viewers + agent_slots
        self.connections: dict[int, _Connection] = {}
        #: Connections still in the RFB handshake (capped by ``max_handshaking``).
        self.handshaking: set[_Connection] = set()
        self._previous: np.ndarray | None = None
        self._differ = TileDiffer()
        self._ids = itertools.count(1)
        self._server: asyncio.Server | None = None
        self._closed = False

    @property
    def guarded(self) -> bool:
        """Whether a password guards this server (wrong ones are then throttled)."""
        return bool(self.password or self.player_passwords)

    def player_of(self, client_id: int) -> int:
        """The player whose password client ``client_id`` gave (0 for the full password)."""
        connection = self.connections.get(client_id)
        player = connection.player if connection is not None else None
        return player or 0

    @property
    def port(self) -> int:
        assert self._server is not None, "call start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str = "127.0.0.1", port: int = 5900) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self, next(self._ids)), host, port
        )

    async def close(self) -> None:
        self._closed = True
        if self._server is not None:
            self._server.close()
        for connection in [*self.connections.values(), *self.handshaking]:
            connection._abort("the remote is shutting down")
        if self._server is not None:
            await self._server.wait_closed()

    def frame_ready(
        self,
        frame: np.ndarray | None = None,
        tag: FrameTag | None = None,
        damage: Sequence[Rect] | None = None,
    ) -> None:
        """A new frame is drawn (``frame``, if the array itself changed): send what changed.

        ``tag`` names the frame (number, episode, time) for clients that asked for our
        FRAME_TAG pseudo-encoding; they get an update for each new tag even when no pixel
        changed, so a lockstep agent can wait for exactly frame N. ``damage``: the
        rectangles that changed since the previous call, when the caller knows (an X
        display's damage, a built-in game's sprites): the screen is not compared, and
        clients get those rectangles themselves (:meth:`ServerProtocol.mark_damage`).
        """
        self.shared = {}  # the frame changed: nothing encoded before is valid
        if tag is not None:
            self.tag = tag
        if frame is not None and frame is not self.frame:
            if frame.shape != self.frame.shape:
                for connection in self.connections.values():
                    connection.resize(frame.shape[1], frame.shape[0])
                self._previous = None
            self.frame = frame
        if not self.connections:
            self._previous = None  # nobody to diff for; new clients start with a full frame
            return
        previous = self._previous
        frame = self.frame
        connections = self.connections.values()
        if previous is None or previous.shape != frame.shape:
            self._previous = frame.copy()
            for connection in connections:
                if connection.proto is not None:
                    connection.proto.mark_all_dirty()
        elif damage is not None:
            rects = _inside(damage, frame.shape[1], frame.shape[0])
            if rects:
                for x, y, w, h in rects:  # the compare's reference, for frames without damage
                    previous[y : y + h, x : x + w] = frame[y : y + h, x : x + w]
                for connection in connections:
                    if connection.proto is not None:
                        connection.proto.mark_damage(rects)
            elif tag is None:
                return
        else:
            width, height = frame.shape[1], frame.shape[0]
            mask = self._differ.mask(previous, frame)
            if mask.any():
                if frame.nbytes <= WHOLE_COPY_BYTES:
                    np.copyto(previous, frame)
                else:  # a large screen: copy only what is sent
                    for x, y, w, h in tile_mask_to_rects(mask, width, height):
                        previous[y : y + h, x : x + w] = frame[y : y + h, x : x + w]
                for connection in connections:
                    if connection.proto is not None:
                        connection.proto.mark_dirty_tiles(mask)
            elif tag is None:
                return
        for connection in list(connections):
            if tag is not None and connection.proto is not None:
                connection.proto.set_frame_tag(tag)
            connection.send_update()

    def attach(
        self,
        write: Callable[[bytes], None],
        close: Callable[[], None],
        *,
        view_only: bool,
        lossless: bool = False,
        peer: str | None = None,
        refuse_reason: str | None = None,
        player: int | None = None,
    ) -> AttachedClient:
        """A client of this process whose transport is not a socket (a browser's WebSocket).

        The server writes to it with ``write`` (never blocking: queue the bytes, and
        report back-up with :meth:`AttachedClient.pause`) and calls ``close`` once when
        it ends the client (unless the owner closed the handle first).

        The client is pre-authenticated: the caller checked who it is, so its RFB
        handshake offers security None whatever the passwords. With ``view_only`` the
        server drops its key, pointer and clipboard messages: they never reach
        ``on_input``. ``lossless`` ignores its JPEG quality levels. ``peer`` names it in
        logs. With ``refuse_reason`` (the caller's limit) its handshake refuses it with
        that reason. ``player``: on a multi-player remote, the player its input drives
        (as if it had given that player's password; ignored with ``view_only``). Call
        from the server's event loop; the server need not listen on TCP at all.
        """
        if self._closed and refuse_reason is None:
            refuse_reason = "the remote is shutting down"
        transport = _Callbacks(write, close, peer)
        connection = _Connection(
            self, next(self._ids), trusted=True, view_only=view_only, lossless=lossless,
            refuse_reason=refuse_reason, player=player,
        )
        transport.connection = connection
        connection.connection_made(transport)
        return AttachedClient(connection, transport)

    def stats(self) -> dict[int, int]:
        """Updates sent so far to each client (by client id), for diagnostics."""
        return {cid: c.updates for cid, c in self.connections.items()}
