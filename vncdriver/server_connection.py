"""One VNC client of :class:`~.server.VNCServer`: its handshake, then its updates.

Holds :class:`ServerConnection` (an ``asyncio.Protocol``: the refusals and limits at
connect, the :class:`~.handshake.ServerHandshake` with its deadline and its switch to
TLS, then a :class:`~.server_protocol.ServerProtocol` whose input goes to the server's
``on_input`` and whose updates it writes unless its transport is backed up), the
:class:`AuthGuard` the server's owner passes in, and :class:`Transport`, what a
connection writes to: a socket's transport, or an attached client's callbacks
(:mod:`.server_attached`). The server owns the connections and the frame; a connection
reads the frame, the limits and the callbacks from it through :class:`Host`, what it
needs of its server (:class:`~.server.VNCServer` imports this module, never the other
way), and :data:`InputCallback`, the type of its input callback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from .errors import LocalProtocolError, VNCError
from .handshake import ServerHandshake, StartTLS
from .messages import FrameTag, KeyEvent, PointerEvent, SetEncodings, SetPixelFormat
from .server_protocol import ServerProtocol, SharedEncodings

__all__ = ["AuthGuard", "Host", "InputCallback", "ServerConnection", "Transport"]

log = logging.getLogger(__name__)


class AuthGuard(Protocol):
    """Failed-password throttling shared by a remote's ports (``rewarder.throttle``):
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


InputCallback = Callable[[int, Sequence[KeyEvent | PointerEvent]], None]


class Host(Protocol):
    """What a :class:`ServerConnection` reads of its server (:class:`~.server.VNCServer`):
    the frame and what clients share of it, the limits, the passwords, the callbacks, and
    the two tables of connections it enters and leaves."""

    @property
    def frame(self) -> np.ndarray: ...
    @property
    def tag(self) -> FrameTag | None: ...
    @property
    def shared(self) -> SharedEncodings: ...
    @property
    def name(self) -> str: ...
    @property
    def password(self) -> str | None: ...
    @property
    def view_only_password(self) -> str | None: ...
    @property
    def player_passwords(self) -> Mapping[int, str]: ...
    @property
    def guarded(self) -> bool: ...
    @property
    def auth_guard(self) -> AuthGuard | None: ...
    @property
    def tls(self) -> ssl.SSLContext | None: ...
    @property
    def on_request(self) -> Callable[[], None] | None: ...
    @property
    def encodings(self) -> Sequence[int] | None: ...
    @property
    def max_clients(self) -> int: ...
    @property
    def max_viewers(self) -> int: ...
    @property
    def max_handshaking(self) -> int: ...
    @property
    def handshake_timeout(self) -> float: ...
    @property
    def max_write_buffer(self) -> int: ...
    @property
    def on_input(self) -> InputCallback: ...
    @property
    def on_disconnect(self) -> Callable[[int], None]: ...
    @property
    def connections(self) -> dict[int, ServerConnection]:
        """The clients past the handshake, by id."""
    @property
    def handshaking(self) -> set[ServerConnection]:
        """The clients still in the handshake."""

    def start_diffing(self) -> None:
        """A client is in: diff the next frame against the current one."""


class Transport(Protocol):
    """What a :class:`ServerConnection` writes to: an asyncio transport, or an attached
    client's callbacks (:mod:`.server_attached`)."""

    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def is_closing(self) -> bool: ...
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...
    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None: ...


class ServerConnection(asyncio.Protocol):
    """One client: handshake first, then a :class:`ServerProtocol`. The server makes one
    per accepted socket; :func:`~.server_attached.attach_client` one per attached client."""

    def __init__(
        self,
        server: Host,
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
        self.transport: Transport | None = None
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

    def connection_made(self, transport: asyncio.BaseTransport | Transport) -> None:
        # An asyncio.Transport, a look-alike that is no subclass (uvloop's), or ours.
        own: Transport = transport  # type: ignore[assignment]
        self.transport = own
        server = self.server
        own.set_write_buffer_limits(high=server.max_write_buffer)
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
            server.handshake_timeout, self.abort, "did not finish the RFB handshake in time"
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
        self.abort(str(exc))

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
                ssl_handshake_timeout=self.server.handshake_timeout,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            why = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else exc
            self.abort(f"the TLS handshake failed ({why or type(exc).__name__})")
            self._forget_handshake()  # no connection_lost comes for a failed start_tls
            return
        if tls is None or raw is None or raw.is_closing():
            self._forget_handshake()
            return
        own: Transport = tls  # type: ignore[assignment]
        own.set_write_buffer_limits(high=self.server.max_write_buffer)
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
            self.server.start_diffing()
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
        on_request = self.server.on_request
        if on_request is not None and proto.requested:
            on_request()  # (a frame skipped while nobody asked is served first)
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
                self.abort(
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
            self.abort(f"internal error: {exc}")
            return
        if out:
            transport.write(out)

    def resize(self, width: int, height: int) -> None:
        if self.proto is not None and not self.proto.resize(width, height):
            self.abort("the screen size changed and the client does not accept DesktopSize")

    def abort(self, reason: str) -> None:
        """Close this client, keeping the first reason (``close_reason`` of an attached
        client); the server calls it too, at shutdown."""
        if self.abort_reason is None:
            self.abort_reason = reason
        log.info("closing VNC client %d: %s", self.client_id, reason)
        if self.transport is not None:
            self.transport.close()

