"""A browser watching the remote's own VNC server in-process: no TCP hop, no second parse.

Holds :class:`AttachedBridge`, the viewer's bridge when the remote runs its own VNC
server (every runtime but those that serve VNC themselves through Xvnc), its
:class:`_Outbox`, and :func:`close_websocket` (both bridges close a browser with it).

The browser's WebSocket becomes a client of
:class:`~vncdriver.server.VNCServer` through :meth:`~vncdriver.server.VNCServer.attach`:
the server parses what the browser sends (once) and enforces view-only itself. What the
server writes goes into the outbox, which a task sends to the browser: the game loop
never waits for a browser. Past :data:`HIGH_WATER` bytes unsent the client is paused and
skips frames, then gets only the newest one, like a slow socket client.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

from aiohttp import WSMsgType, web

if TYPE_CHECKING:
    from vncdriver.server import AttachedClient, VNCServer

log = logging.getLogger(__name__)

#: Bytes waiting for one browser before its VNC client is paused (a few Raw frames):
#: with aiohttp's writer limit and the socket's buffers, what a slow browser holds here.
HIGH_WATER: Final = 4 * 1024 * 1024
#: Bytes below which a paused browser's client resumes.
LOW_WATER: Final = 256 * 1024

#: Seconds a browser has to take our WebSocket close frame and answer it; one that reads
#: nothing (its socket full) is cut off after that, or a stalled page would hold up
#: the remote's shutdown.
CLOSE_TIMEOUT: Final = 2.0

#: Why a bridge closed when the browser went away (a normal close, code 1000).
BROWSER_LEFT: Final = "the browser closed the page"
#: Why a bridge closed when the VNC server ended its client (its reason follows).
SERVER_CLOSED: Final = "the VNC server closed the connection"

_CLOSED: Final = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


async def close_websocket(request: web.BaseRequest, ws: web.WebSocketResponse, reason: str,
                          code: int = 1011) -> None:
    """Close ``ws`` with ``reason`` (code 1000 when the browser left), in CLOSE_TIMEOUT."""
    if ws.closed:
        return
    if reason == BROWSER_LEFT:
        code = 1000
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await ws.close(code=code, message=reason.encode()[:120])
    except TimeoutError:  # it reads nothing: our close frame cannot even be sent
        if request.transport is not None:
            request.transport.abort()
    except Exception:  # already gone
        log.debug("viewer: closing a WebSocket failed", exc_info=True)


class _Outbox:
    """What the VNC server wrote for one browser; :meth:`pump` sends it, one message a turn."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.client: AttachedClient | None = None  # set right after attach
        self.queued = 0
        self._chunks: list[bytes] = []
        self._ready = asyncio.Event()
        self._ended = False

    def write(self, data: bytes) -> None:
        """The server's ``write``: queue, never block; pause the client past HIGH_WATER."""
        self._chunks.append(data)
        self.queued += len(data)
        self._ready.set()
        if self.queued > HIGH_WATER and self.client is not None:
            self.client.pause()

    def end(self) -> None:
        """The server's ``close``: send what is queued, then stop."""
        self._ended = True
        self._ready.set()

    async def pump(self) -> str:
        """Send queued bytes to the browser until the server ends; returns why it stopped."""
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                if self._chunks:
                    data = b"".join(self._chunks)
                    self._chunks.clear()
                    await self.ws.send_bytes(data)  # waits while the browser's socket is full
                    self.queued -= len(data)
                    if self.queued < LOW_WATER and self.client is not None:
                        self.client.resume()
                if self._ended and not self._chunks:
                    reason = self.client.close_reason if self.client is not None else None
                    return f"{SERVER_CLOSED}: {reason}" if reason else SERVER_CLOSED
        except (ConnectionError, RuntimeError) as exc:  # aiohttp: closing transport
            return f"connection lost: {exc}"


class AttachedBridge:
    """One browser as an in-process client of the remote's VNC server."""

    def __init__(
        self, server: VNCServer, request: web.BaseRequest, ws: web.WebSocketResponse,
        view_only: bool, lossless: bool, refuse_reason: str | None = None,
        player: int | None = None,
    ) -> None:
        """``player``: the player this browser's input drives (None: player 0)."""
        self.server, self.request, self.ws = server, request, ws
        self.peer = request.remote
        self.view_only, self.lossless, self.player = view_only, lossless, player
        self.refuse_reason = refuse_reason
        self.outbox = _Outbox(ws)
        #: The browser's handle on the VNC server, once :meth:`run` attached it.
        self.client: AttachedClient | None = None
        self.closing: str | None = None

    async def run(self) -> None:
        """Attach to the VNC server, then pump both ways until either side ends."""
        outbox = self.outbox
        client = self.client = self.server.attach(
            outbox.write, outbox.end, view_only=self.view_only, lossless=self.lossless,
            peer=f"browser {self.peer}", refuse_reason=self.refuse_reason, player=self.player,
        )
        outbox.client = client
        mode = "view only" if self.view_only else (
            "control" if not self.player else f"control of player {self.player}")
        log.info("viewer: %s watches in-process (%s)", self.peer, mode)
        pumps = [asyncio.create_task(outbox.pump()), asyncio.create_task(self._receive(client))]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            reason = self.closing or done.pop().result()
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            client.close()
        await self.close(reason)
        log.info("viewer: %s left (%s)", self.peer, reason)

    async def _receive(self, client: AttachedClient) -> str:
        """Browser -> the VNC server's parser; returns why it stopped."""
        while True:
            msg = await self.ws.receive()
            if msg.type in _CLOSED:
                return BROWSER_LEFT
            if msg.type != WSMsgType.BINARY:
                return "the browser sent a text message; the bridge carries binary RFB"
            # Once the server ended the client this feeds nothing: the outbox sends what is
            # left (a refusal's reason), then its pump says why the bridge ends.
            client.feed(msg.data)

    async def close(self, reason: str, code: int = 1011) -> None:
        """Leave the VNC server and close the WebSocket with ``reason``, once."""
        if self.closing is None:
            self.closing = reason
        if self.client is not None:
            self.client.close()
        await close_websocket(self.request, self.ws, reason, code)
