"""A browser watching the remote's own VNC server in-process: no TCP hop, no second parse.

Holds :class:`AttachedBridge`, the viewer's bridge when the remote runs its own VNC
server (every runtime but those that serve VNC themselves through Xvnc). The browser's
WebSocket becomes a client of :class:`~vncdriver.server.VNCServer` through
:meth:`~vncdriver.server.VNCServer.attach`: the server parses what the browser sends
(once), enforces view-only itself, and writes updates into :class:`_WebSocketTransport`,
which never blocks the game loop: past :data:`HIGH_WATER` bytes unsent it pauses the
client, which then skips frames and later gets only the newest one, like a slow socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Final

from aiohttp import WSMsgType, web

if TYPE_CHECKING:
    from vncdriver.server import VNCServer

log = logging.getLogger(__name__)

#: Bytes waiting for one browser before its VNC client is paused (a few Raw frames).
HIGH_WATER: Final = 4 * 1024 * 1024
#: Bytes below which a paused browser's client resumes.
LOW_WATER: Final = 256 * 1024

#: Why a bridge closed when the browser went away (a normal close, code 1000).
BROWSER_LEFT: Final = "the browser closed the page"

_CLOSED: Final = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


class _WebSocketTransport:
    """The transport an attached VNC client writes to: a queue a task sends to the browser."""

    def __init__(self, ws: web.WebSocketResponse, peer: str | None) -> None:
        self.ws, self.peer = ws, peer
        self.connection: Any = None  # the server's client, set right after attach
        self.queued = 0
        self.bytes_down = 0
        self._chunks: list[bytes] = []
        self._ready = asyncio.Event()
        self._closing = False

    # What the VNC server calls ----------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closing or not data:
            return
        self._chunks.append(data)
        self.queued += len(data)
        self._ready.set()
        if self.queued > HIGH_WATER and self.connection is not None:
            self.connection.pause_writing()

    def close(self) -> None:
        self._closing = True
        self._ready.set()

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("browser", self.peer) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Ours are :data:`HIGH_WATER` and :data:`LOW_WATER`."""

    # The task that sends -----------------------------------------------------------------

    async def pump(self) -> str:
        """Send queued bytes to the browser until closed; returns why it stopped."""
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                if self._chunks:
                    data = b"".join(self._chunks)
                    self._chunks.clear()
                    await self.ws.send_bytes(data)
                    self.queued -= len(data)
                    self.bytes_down += len(data)
                    if self.queued < LOW_WATER and self.connection is not None:
                        if self.connection.paused:
                            self.connection.resume_writing()
                if self._closing and not self._chunks:
                    return "the VNC server closed the connection"
        except (ConnectionError, RuntimeError) as exc:  # aiohttp: closing transport
            return f"connection lost: {exc}"


class AttachedBridge:
    """One browser as an in-process client of the remote's VNC server."""

    def __init__(
        self, server: VNCServer, ws: web.WebSocketResponse, peer: str | None,
        view_only: bool, lossless: bool, refuse_reason: str | None = None,
    ) -> None:
        self.server, self.ws, self.peer = server, ws, peer
        self.view_only, self.lossless = view_only, lossless
        self.transport = _WebSocketTransport(ws, peer)
        self.closing: str | None = None
        self.refuse_reason = refuse_reason

    @property
    def bytes_down(self) -> int:
        return self.transport.bytes_down

    async def run(self) -> None:
        transport = self.transport
        connection = self.server.attach(
            transport, view_only=self.view_only, lossless=self.lossless,
            refuse_reason=self.refuse_reason,
        )
        transport.connection = connection
        mode = "view only" if self.view_only else "control"
        log.info("viewer: %s watches in-process (%s)", self.peer, mode)
        pump = asyncio.create_task(transport.pump())
        receive = asyncio.create_task(self._receive(connection))
        try:
            done, _ = await asyncio.wait([pump, receive], return_when=asyncio.FIRST_COMPLETED)
            reason = self.closing or done.pop().result()
        finally:
            for task in (pump, receive):
                task.cancel()
            await asyncio.gather(pump, receive, return_exceptions=True)
            transport.close()
            connection.connection_lost(None)
        await self.close(reason)
        log.info("viewer: %s left (%s)", self.peer, reason)

    async def _receive(self, connection: Any) -> str:
        """Browser -> the VNC server's parser; returns why it stopped."""
        while True:
            msg = await self.ws.receive()
            if msg.type in _CLOSED:
                return BROWSER_LEFT
            if msg.type != WSMsgType.BINARY:
                return "the browser sent a text message; the bridge carries binary RFB"
            connection.data_received(msg.data)
            if self.transport.is_closing():
                return "the VNC server closed the connection"

    async def close(self, reason: str, code: int = 1011) -> None:
        """Close the WebSocket with ``reason``, once."""
        if self.closing is None:
            self.closing = reason
        self.transport.close()
        if not self.ws.closed:
            if reason == BROWSER_LEFT:
                code = 1000
            with contextlib.suppress(Exception):
                await self.ws.close(code=code, message=reason.encode()[:120])
