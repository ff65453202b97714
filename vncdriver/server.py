"""The VNC server: a thin asyncio shell that serves a numpy framebuffer to many clients.

Holds :class:`VNCServer` and its limits. Each client is a
:class:`~.server_connection.ServerConnection`; :mod:`.server_attached` holds the clients
attached in-process; :mod:`.tiles` the differ.

The owner (the remote process) calls :meth:`VNCServer.frame_ready` after drawing each
frame; the server diffs that frame against the previous one once, in 64x64 tiles, marks
the changed tiles dirty on every client and answers each client's outstanding update
request from the frame *now*. A client whose socket is backed up is
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
import itertools
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import numpy as np

from .messages import FrameTag
from .server_attached import AttachedClient, attach_client
from .server_connection import AuthGuard, InputCallback, ServerConnection
from .server_protocol import SharedEncodings
from .tiles import Rect, TileDiffer, rects_inside, tile_mask_to_rects

__all__ = [
    "AGENT_SLOTS",
    "HANDSHAKE_TIMEOUT",
    "MAX_CLIENTS",
    "MAX_HANDSHAKING",
    "MAX_VIEWERS",
    "MAX_WRITE_BUFFER",
    "WHOLE_COPY_BYTES",
    "AttachedClient",  # from .server_attached, re-exported
    "AuthGuard",  # from .server_connection, re-exported
    "InputCallback",  # from .server_connection, re-exported
    "VNCServer",
]

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
        handshake_timeout: float | None = None,
        max_write_buffer: int | None = None,
    ) -> None:
        """Nothing listens until :meth:`start` (or a client is :meth:`attach`-ed).

        Args:
            frame: the first frame, ``uint8[H, W, 3]``; its size is the screen's.
            name: the desktop name clients show.
            password: the VNC password (None: none).
            view_only_password: a password whose viewers only watch.
            on_input: ``on_input(client_id, events)`` for each client's key and pointer events.
            on_disconnect: ``on_disconnect(client_id)`` when a client leaves.
            auth_guard: throttles wrong passwords per address.
            encodings: the encoding numbers offered, Raw always among them (None: all we have).
            max_clients: the old single cap on clients (overrides the next two: all of
                it for viewers).
            max_viewers: clients that are not agents.
            agent_slots: clients kept for agents beyond ``max_viewers``.
            max_handshaking: connections still in the handshake.
            tls: a server context: every socket client goes through VeNCrypt.
            player_passwords: multi-player remotes: player -> a password whose viewers
                drive that player (:meth:`player_of` says which a client gave).
            handshake_timeout: seconds a client has for the handshake (None:
                :data:`HANDSHAKE_TIMEOUT` as it is when the server is made).
            max_write_buffer: bytes queued for one client before the server stops
                encoding for it (None: :data:`MAX_WRITE_BUFFER` as it is then).
        """
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
        #: Called when a client's update request has come in, before it is answered: an
        #: owner that skips frames nobody asked for (:meth:`wanted`) serves the newest now.
        self.on_request: Callable[[], None] | None = None
        self.encodings = encodings
        #: Counts wrong passwords per address and refuses blocked ones (one per remote).
        self.auth_guard = auth_guard
        if max_clients is not None:  # the old single cap: all of it for viewers
            max_viewers, agent_slots = max_clients, 0
        self.max_viewers, self.agent_slots = max_viewers, agent_slots
        self.max_handshaking = max_handshaking
        #: Seconds a client has to finish the handshake (TLS included).
        self.handshake_timeout = (
            HANDSHAKE_TIMEOUT if handshake_timeout is None else handshake_timeout
        )
        #: Bytes queued for one client before the server stops encoding for it.
        self.max_write_buffer = MAX_WRITE_BUFFER if max_write_buffer is None else max_write_buffer
        #: Every client slot: viewers and agents.
        self.max_clients = max_viewers + agent_slots
        self.connections: dict[int, ServerConnection] = {}
        #: Connections still in the RFB handshake (capped by ``max_handshaking``).
        self.handshaking: set[ServerConnection] = set()
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
        """The player whose password client ``client_id`` gave (0 for the full password).

        Args:
            client_id: the client.

        Returns:
            The player its input drives.
        """
        connection = self.connections.get(client_id)
        player = connection.player if connection is not None else None
        return player or 0

    @property
    def port(self) -> int:
        assert self._server is not None, "call start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str = "127.0.0.1", port: int = 5900) -> None:
        """Listen for clients.

        Args:
            host: the address to listen on.
            port: the port (0: any free one; read it back from :attr:`port`).

        Raises:
            OSError: the port cannot be bound.
        """
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self, next(self._ids)), host, port
        )

    async def close(self) -> None:
        self._closed = True
        if self._server is not None:
            self._server.close()
        for connection in [*self.connections.values(), *self.handshaking]:
            connection.abort("the remote is shutting down")
        if self._server is not None:
            await self._server.wait_closed()

    def wanted(self) -> bool:
        """Whether any client has an update request outstanding (else a new frame would
        only be diffed and marked for clients that may never ask: a lockstep agent's own
        paused client, or nobody).

        Returns:
            True while a client waits for an update.
        """
        return any(c.proto is not None and c.proto.requested for c in self.connections.values())

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

        Args:
            frame: the new frame array, if it is another object than before.
            tag: the frame's tag.
            damage: the rectangles that changed, if known.
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
            rects = rects_inside(damage, frame.shape[1], frame.shape[0])
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

    def start_diffing(self) -> None:
        """A client is in (:class:`ServerConnection`, at the end of its handshake): if no
        reference frame is kept, keep the current one, so the next frame is diffed
        against it — else every client would get that whole frame again although only
        a sprite moved."""
        if self._previous is None:
            self._previous = self.frame.copy()

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

        Args:
            write: queues bytes for the client.
            close: ends the client's transport.
            view_only: drop its input.
            lossless: ignore its JPEG quality levels.
            peer: names it in logs.
            refuse_reason: refuse it with this reason.
            player: the player its input drives.

        Returns:
            The client's :class:`~.server_attached.AttachedClient`: feed it what the client sends.
        """
        if self._closed and refuse_reason is None:
            refuse_reason = "the remote is shutting down"
        return attach_client(
            self, next(self._ids), write, close, view_only=view_only, lossless=lossless,
            peer=peer, refuse_reason=refuse_reason, player=player,
        )

    def stats(self) -> dict[int, int]:
        """Updates sent so far to each client (by client id), for diagnostics.

        Returns:
            ``{client id: updates sent}``.
        """
        return {cid: c.updates for cid, c in self.connections.items()}

