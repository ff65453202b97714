"""The VNC client: a thin asyncio shell around :class:`~.client_protocol.ClientProtocol`.

Holds :class:`VNCClient`, its entry point :func:`connect` and :data:`CLOSE_TIMEOUT`.
Below it, :mod:`.client_connection` holds the TCP connection and the dialling (backoff
constants re-exported here), :mod:`.client_updates` the update requests (when the next
goes out; :data:`MAX_REQUEST_HOLD`, re-exported) and the count of updates with its
waiters, and :mod:`.client_stats` the counters and rates (:class:`VNCClientStats`,
:data:`RATE_WINDOW`, re-exported); :func:`parse_address` (``addresses``) and
:func:`encoding_list` are re-exported too.

One client keeps one RFB connection to one VNC server (our remote, TigerVNC's Xvnc,
x11vnc, ...). It is an ``asyncio.BufferedProtocol``: the event loop receives straight
into the numpy memory the sans-I/O parser points at (a Raw rectangle's staging array, a
zlib or JPEG buffer), so the frame path has no ``readexactly`` and no per-message copies.
The framebuffer is ``uint8[H, W, 3]`` RGB, updated in place; we ask for a pixel format
(:data:`~.pixelformat.NATIVE`) where that needs no per-pixel shuffle.

Exactly one incremental FramebufferUpdateRequest is outstanding at any time: the next
one goes out as soon as an update is applied, so the server sends whatever changed since
(and nothing while the screen stands still).

Addresses are read as VNC viewers write them (:func:`parse_address`: ``host:N`` is
display N below 100 and port N from 100, ``host::N`` always port N, IPv6 hosts in
brackets); an absolute path is a Unix socket, as in TigerVNC's viewer (``Xvnc
-rfbunixpath``).

Lifecycle:

- :meth:`VNCClient.start` (or ``await connect(...)``, or ``async with``) dials with capped
  exponential backoff until ``start_timeout``, then raises
  :class:`~.errors.ConnectTimeout`. :class:`~.errors.AuthenticationFailed`,
  :class:`~.errors.ServerRefused`, :class:`~.errors.TLSFailed` and
  :class:`~.errors.ProtocolError` during the handshake are final (no retry) and carry
  the server's reason.
- When an established connection ends (the server closed it, the socket broke, the
  server broke RFB), ``connected`` turns False, ``error`` holds a
  :class:`~.errors.ConnectionLost` (its ``__cause__`` is the underlying error, if any),
  ``wait_update`` waiters get it raised and sending raises it. There is **no automatic
  reconnect**: the env layer decides whether to make a new client.
- :meth:`VNCClient.close` is idempotent.

Many clients share one event loop; nothing here starts a thread.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Final, Self

import numpy as np

from .addresses import DEFAULT_PORT, DISPLAY_LIMIT, parse_address
from .client_connection import (
    ATTEMPT_TIMEOUT,
    BACKOFF_CAP,
    BACKOFF_FACTOR,
    BACKOFF_START,
    ENCODING_PREFERENCES,
    Connection,
    dial,
    encoding_list,
)
from .client_protocol import ClientProtocol, FramebufferUpdated
from .client_stats import RATE_WINDOW, UpdateRates, VNCClientStats
from .client_updates import MAX_REQUEST_HOLD, AppliedUpdates, UpdateRequests
from .errors import ConnectionLost, LocalProtocolError
from .messages import Bell, Encoding, FrameTag, ServerCutText, Subsampling

__all__ = [
    "ATTEMPT_TIMEOUT",
    "BACKOFF_CAP",
    "BACKOFF_FACTOR",
    "BACKOFF_START",
    "DEFAULT_PORT",
    "DISPLAY_LIMIT",
    "ENCODING_PREFERENCES",
    "MAX_REQUEST_HOLD",
    "RATE_WINDOW",
    "VNCClient",
    "VNCClientStats",
    "connect",
    "encoding_list",
    "parse_address",
]

log = logging.getLogger(__name__)

#: How long close() lets queued input drain before it drops the connection.
CLOSE_TIMEOUT: Final = 2.0
UpdateCallback = Callable[["VNCClient", FramebufferUpdated], None]


class VNCClient:
    """The agent's end of one VNC connection: a live RGB framebuffer, keyboard and mouse.

    ``await client.start()`` (or ``await connect(address)``, or ``async with``), then read
    :meth:`frame` (or :attr:`framebuffer`), :meth:`wait_update` for news, send input with
    :meth:`key_event`, :meth:`pointer_event` or :meth:`send_events`; ``await
    client.close()`` at the end (idempotent).

    Args:
        address: ``host:N`` (display N, port 5900+N for N < 100), ``host::port``, or a
            Unix socket's path.
        password: the VNC password (only its first 8 characters count).
        encoding: ``"tight"``, ``"zrle"`` or ``"raw"`` (that encoding first, with
            fallbacks) or an exact list of names/numbers, best first.
        quality: 0-9 turns on Tight JPEG (lossy); None keeps every encoding lossless.
        compress_level: 0-9, TurboVNC's refinement (other servers ignore it).
        fine_quality: 0-100, TurboVNC's JPEG quality.
        subsample: TurboVNC's JPEG chroma subsampling.
        start_timeout: seconds :meth:`start` keeps dialling.
        shared: let other viewers stay connected (RFB's shared flag).
        name: labels logs and errors (default: the address).
        on_update: ``on_update(client, update)``, called after each applied update.
        frame_tags: ask a universe-remote server to tag each update with its frame
            (:meth:`wait_frame`); other servers ignore it.
        tls: an ``ssl.SSLContext`` that verifies the server (e.g.
            ``ssl.create_default_context(cafile=...)``): the session runs over VeNCrypt
            TLS or not at all, and an untrusted certificate raises :class:`TLSFailed`.
        request_hold: seconds the next update request may wait for the input that
            answers an update, to go in one packet with it (None: ask at once).

    Raises:
        ValueError: ``request_hold`` is out of range.
    """

    def __init__(
        self,
        address: str,
        *,
        password: str | None = None,
        encoding: str | Sequence[str | int] = "tight",
        quality: int | None = None,
        compress_level: int | None = None,
        fine_quality: int | None = None,
        subsample: Subsampling | int | None = None,
        start_timeout: float = 30.0,
        shared: bool = True,
        name: str | None = None,
        on_update: UpdateCallback | None = None,
        frame_tags: bool = False,
        tls: ssl.SSLContext | None = None,
        request_hold: float | None = None,
    ) -> None:
        if request_hold is not None and not 0 < request_hold <= MAX_REQUEST_HOLD:
            raise ValueError(
                f"request_hold must be None or in (0, {MAX_REQUEST_HOLD}] seconds, "
                f"not {request_hold!r}"
            )
        self.address = address
        self.tls = tls
        #: A Unix socket's path (an address that starts with "/", as TigerVNC's viewer
        #: writes one): how a remote reads the X display its program draws on.
        self.unix_path: str | None = address if address.startswith("/") else None
        self.host, self.port = ("", 0) if self.unix_path else parse_address(address)
        self.name = name or address
        self.password = password
        self.shared = shared
        self.start_timeout = start_timeout
        #: The SetEncodings list we send (see :func:`encoding_list`).
        self.encodings = encoding_list(
            encoding,
            quality=quality,
            compress_level=compress_level,
            fine_quality=fine_quality,
            subsample=subsample,
        )
        if frame_tags:  # ask universe-remote servers to say which frame each update shows
            self.encodings.append(Encoding.FRAME_TAG)
        #: Called as ``on_update(client, update)`` after each applied update; exceptions
        #: are logged, never raised into the connection.
        self.on_update = on_update
        #: The server's latest clipboard text (ServerCutText), if it sent any.
        self.clipboard: str | None = None
        #: Bell messages received.
        self.bells = 0
        self._conn: Connection | None = None
        self._proto: ClientProtocol | None = None
        self._error: ConnectionLost | None = None
        self._closed = False
        self._dial_task: asyncio.Task[Connection] | None = None
        self._requests = UpdateRequests(request_hold)
        self._applied = AppliedUpdates()
        self._rates = UpdateRates()
        self._connected_at = 0.0

    @property
    def on_demand(self) -> bool:
        """Whether the client asks for an update only when a reader wants one
        (:meth:`want_update`, :meth:`wait_update`, :meth:`wait_frame`, or input): a
        real-time agent between its steps then has the server encode and send nothing."""
        return self._requests.on_demand

    @on_demand.setter
    def on_demand(self, value: bool) -> None:
        self._requests.on_demand = value

    def want_update(self) -> None:
        """On demand: ask for one update now (the newest frame), unless one is asked for
        (nothing otherwise)."""
        self._requests.want(self._conn, self._proto)

    @property
    def asked_at(self) -> float | None:
        """Monotonic time the outstanding update request went out (None: none is): how
        long an on-demand client has waited for the server."""
        return self._requests.asked_at(self._proto)

    @property
    def request_hold(self) -> float | None:
        """Seconds the next update request may wait for the input that answers an update;
        None asks for the next update at once."""
        return self._requests.hold

    def __repr__(self) -> str:
        if self.connected:
            state = f"connected {self.width}x{self.height} updates={self._applied.count}"
        else:
            state = "closed" if self._closed else "failed" if self._error else "not connected"
        where = self.unix_path or f"{self.host}:{self.port}"
        return f"<VNCClient {self.name} {where} {state}>"

    # Lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and finish the RFB handshake; returns once the first update is requested.

        Raises:
            ConnectTimeout: no server completed a handshake within ``start_timeout``
                (retrying with backoff meanwhile).
            AuthenticationFailed: at once: the server refused the password.
            ServerRefused: at once, with the server's reason.
            ProtocolError: at once: not a VNC server we can talk to.
            ConnectionLost: the client was closed (make a new one).
        """
        if self._closed:
            raise ConnectionLost(self.address, "the client is closed; make a new one")
        if self._conn is not None:
            if self._error is not None:
                raise self._error.with_traceback(None)
            return
        if self._dial_task is not None:
            raise LocalProtocolError(f"{self.name}: start() is already running")
        dialling = dial(self, self._handle_events, self._connection_lost)
        task = asyncio.get_running_loop().create_task(dialling, name=f"VNC dial {self.name}")
        self._dial_task = task
        try:
            conn = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._closed and (current is None or not current.cancelling()):
                raise ConnectionLost(
                    self.address, "the client was closed while connecting"
                ) from None
            raise
        finally:
            self._dial_task = None
        assert conn.proto is not None
        self._conn, self._proto = conn, conn.proto
        self._connected_at = time.monotonic()
        log.info(
            "%s: connected to %r, %dx%d, encodings %s",
            self.name,
            conn.proto.name,
            conn.proto.width,
            conn.proto.height,
            self.encodings,
        )
        if conn.lost.done():  # dropped between the handshake and now
            self._connection_lost(conn)

    async def close(self) -> None:
        """Close the connection (queued input is flushed first, for up to CLOSE_TIMEOUT).

        Pending :meth:`wait_update` calls raise ConnectionLost. Safe to call twice.
        """
        if self._closed:
            return
        self._closed = True
        self._requests.stop()
        task = self._dial_task
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        conn = self._conn
        if conn is not None and conn.transport is not None and not conn.lost.done():
            conn.transport.close()
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await asyncio.shield(conn.lost)
            except TimeoutError:
                conn.transport.abort()
        self._applied.fail(ConnectionLost(self.address, "the client was closed"))

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
        """True from the end of the handshake until the connection ends or is closed."""
        conn = self._conn
        return conn is not None and not conn.lost.done() and not self._closed

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def error(self) -> ConnectionLost | None:
        """Why the connection ended, if it ended by itself (not by :meth:`close`).

        A :class:`ConnectionLost`; its ``__cause__`` is the underlying error (a
        :class:`ProtocolError` from the server's bytes, an OSError), if there was one.
        """
        return self._error

    @property
    def framebuffer(self) -> np.ndarray:
        """The live ``uint8[H, W, 3]`` RGB framebuffer.

        The client writes into this array as updates arrive (and replaces it when the
        server resizes the screen): read it between awaits, or use :meth:`frame` for a
        copy you may keep. After the connection ends it holds the last picture.
        """
        return self._protocol().framebuffer

    def frame(self) -> np.ndarray:
        """A copy of the latest framebuffer (``uint8[H, W, 3]``, RGB) the caller may keep.

        Returns:
            The copy.
        """
        return self._protocol().framebuffer.copy()

    @property
    def width(self) -> int:
        """Screen width in pixels (0 before the handshake)."""
        return self._proto.width if self._proto is not None else 0

    @property
    def height(self) -> int:
        """Screen height in pixels (0 before the handshake)."""
        return self._proto.height if self._proto is not None else 0

    @property
    def desktop_name(self) -> str | None:
        """The name the server gave its desktop (None before the handshake)."""
        return self._proto.name if self._proto is not None else None

    @property
    def updates(self) -> int:
        """Framebuffer updates applied so far; :meth:`wait_update` waits for it to grow."""
        return self._applied.count

    @property
    def stats(self) -> VNCClientStats:
        """Counters, and rates over the last :data:`RATE_WINDOW` seconds of updates.

        Cheap (running sums, no pass over history) and safe to read from another thread.
        """
        return self._rates.snapshot(self._proto, self._applied.count, self._connected_at)

    @property
    def counts(self) -> tuple[int, int, int, float]:
        """The few figures of :attr:`stats` an agent's info shows each step, without the
        rest (the rates by kind and by encoding) that :attr:`stats` builds.

        Returns:
            ``(updates, bytes, pixels, updates_per_second)``, as :attr:`stats` has them.
        """
        proto = self._proto
        rate = self._rates.updates_per_second(self._connected_at)
        if proto is None:
            return self._applied.count, 0, 0, rate
        stats = proto.stats
        return self._applied.count, stats.bytes_received, stats.pixels, rate

    @property
    def tag(self) -> FrameTag | None:
        """Which frame :attr:`framebuffer` shows (number, episode id, server time), when
        the client was made with ``frame_tags=True`` and the server is ours."""
        proto = self._proto
        return proto.frame_tag if proto is not None else None

    # Waiting -----------------------------------------------------------------------------

    async def wait_frame(self, frame: int, timeout: float | None = None) -> FrameTag:
        """Wait until the framebuffer shows frame ``frame`` or a later one (needs
        ``frame_tags=True`` and a universe-remote server); returns its tag.

        Args:
            frame: the frame number awaited.
            timeout: seconds to wait (None: for ever).

        Returns:
            The tag of the frame shown.

        Raises:
            TimeoutError: not within ``timeout``.
            ConnectionLost: the connection ended first.
            LocalProtocolError: the client was made without ``frame_tags=True``.
        """
        if Encoding.FRAME_TAG not in self.encodings:
            raise LocalProtocolError("wait_frame needs VNCClient(..., frame_tags=True)")
        async with asyncio.timeout(timeout):
            while (tag := self.tag) is None or tag.frame < frame:
                await self.wait_update(self._applied.count)
        return tag

    async def wait_update(self, after: int | None = None, timeout: float | None = None) -> int:
        """Wait until update number ``after + 1`` or later is applied; its number.

        ``after`` defaults to :attr:`updates` now (wait for the next one). Returns at once
        if a newer update is already in. Servers send updates only when the screen
        changes, so a still screen makes this time out (:class:`TimeoutError`). Raises
        the connection's :class:`ConnectionLost` if it ends first.

        Args:
            after: the update number to wait past (None: the current one).
            timeout: seconds to wait (None: for ever).

        Returns:
            The number of the newest update applied.

        Raises:
            TimeoutError: no update within ``timeout``.
            ConnectionLost: the connection ended first.
        """
        if after is None:
            after = self._applied.count
        if self._applied.count > after:
            return self._applied.count
        self._raise_if_stopped()
        if self._requests.on_demand:
            self.want_update()
        return await self._applied.wait(after, timeout, self.name)

    # Input -------------------------------------------------------------------------------

    def key_event(self, key: int | str, down: bool) -> None:
        """Press or release ``key`` (a keysym number, or any name :mod:`.keysyms` knows).

        Written to the socket at once (no await). TigerVNC adds Shift for capital letters
        itself: send unshifted keys plus Shift to type a capital.

        Args:
            key: a keysym number or name (``"Left"``, ``"a"``, ``"ctrl"``).
            down: True to press, False to release.

        Raises:
            UnknownKey: ``key`` is no name :mod:`.keysyms` knows.
        """
        proto = self._live()
        proto.key_event(key, down)
        self._flush(proto)

    def pointer_event(self, x: int, y: int, buttons: int = 0) -> None:
        """Move the pointer to (x, y) with ``buttons`` down (bit 0 left, 1 middle, 2 right,
        3/4 wheel up/down); written at once.

        Args:
            x: column, in screen pixels.
            y: row, in screen pixels.
            buttons: the button mask.
        """
        proto = self._live()
        proto.pointer_event(x, y, buttons)
        self._flush(proto)

    def send_events(self, events: Iterable[Sequence[Any]]) -> None:
        """Send Universe-style actions in one write: ``("KeyEvent", key, down)`` and
        ``("PointerEvent", x, y, buttonmask)`` tuples (lists too, as JSON gives them).

        Every event is checked before any is sent: a bad one raises ValueError (or
        :class:`~.errors.UnknownKey`) and nothing goes out.

        Args:
            events: the actions, in order.

        Raises:
            ValueError: an event is malformed (nothing is sent).
            UnknownKey: a key name is unknown (nothing is sent).
        """
        proto = self._live()
        proto.send_events(events)
        self._flush(proto)

    def cut_text(self, text: str) -> None:
        """Set the server's clipboard (Latin-1 text, as RFB requires).

        Args:
            text: the clipboard's new text.
        """
        proto = self._live()
        proto.cut_text(text)
        self._flush(proto)

    # Internals ---------------------------------------------------------------------------

    def _protocol(self) -> ClientProtocol:
        if self._proto is None:
            raise LocalProtocolError(
                f"{self.name}: not connected yet; await client.start() or use "
                "vncdriver.client.connect()"
            )
        return self._proto

    def _live(self) -> ClientProtocol:
        self._raise_if_stopped()
        return self._protocol()

    def _raise_if_stopped(self) -> None:
        if self._error is not None:
            raise self._error.with_traceback(None)
        if self._closed:
            raise ConnectionLost(self.address, "the client was closed")
        if self._conn is None:
            raise LocalProtocolError(
                f"{self.name}: not connected yet; await client.start() or use "
                "vncdriver.client.connect()"
            )

    def pause_updates(self) -> None:
        """Ask for no update after the one outstanding: a lockstep agent that takes its
        frames another way (shared memory) saves the server's encoding and our decoding.
        :meth:`wait_update` and :meth:`wait_frame` wait in vain until
        :meth:`resume_updates`."""
        self._requests.pause()

    def resume_updates(self) -> None:
        """Ask for updates again: the next one brings everything that changed meanwhile."""
        self._requests.resume(self._conn, self._proto)

    def _flush(self, proto: ClientProtocol) -> None:
        self._requests.input_queued(proto)
        data = proto.data_to_send()
        conn = self._conn
        if data and conn is not None and conn.transport is not None:
            conn.transport.write(data)

    def _handle_events(self, conn: Connection, proto: ClientProtocol, events: list[Any]) -> None:
        """Events from the parser: keep one request outstanding, wake waiters, call back."""
        if len(events) == 1 and type(events[0]) is FramebufferUpdated:  # a frame: the usual
            updates: list[FramebufferUpdated] = events
        else:
            updates = []
            for event in events:
                kind = type(event)
                if kind is FramebufferUpdated:
                    updates.append(event)
                elif kind is ServerCutText:
                    self.clipboard = event.text
                elif kind is Bell:
                    self.bells += 1
            if not updates:
                return
        self._requests.applied(conn, proto, updates[-1])
        if len(updates) == 1:
            self._rates.record_one(time.monotonic(), updates[0])
        else:
            self._rates.record(time.monotonic(), updates)
        self._applied.add(len(updates))
        callback = self.on_update
        if callback is not None:
            for update in updates:
                try:
                    callback(self, update)
                except Exception:
                    log.exception("%s: on_update callback failed", self.name)

    def _connection_lost(self, conn: Connection) -> None:
        if conn is not self._conn:
            return  # an attempt still in its handshake: _dial handles it
        self._requests.stop()
        if self._closed:
            return
        if self._error is None:
            cause = conn.error
            if cause is None:
                reason = "the server closed the connection"
            else:
                reason = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
            error = ConnectionLost(self.address, reason)
            error.__cause__ = cause
            self._error = error
            log.info("%s: %s", self.name, error)
        self._applied.fail(self._error)


async def connect(address: str, **kwargs: Any) -> VNCClient:
    """Make a :class:`VNCClient` for ``address`` (keywords as its constructor) and start it.

    Args:
        address: the server (as :class:`VNCClient` reads it).
        **kwargs: :class:`VNCClient`'s keywords.

    Returns:
        The started client (close it, or use it in ``async with``).

    Raises:
        ConnectTimeout: no server completed a handshake within ``start_timeout``.
        AuthenticationFailed: the server refused the password.
        ServerRefused: the server refused the connection.
    """
    client = VNCClient(address, **kwargs)
    try:
        await client.start()
    except BaseException:
        await client.close()
        raise
    return client
