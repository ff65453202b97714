"""The HTTP viewer a remote serves: its screen, live, in a browser (noVNC); view only
unless the page was opened with a password that plays (:meth:`Viewer.allow_control`).

Holds :class:`Viewer` (an aiohttp app: the page, noVNC's files and a WebSocket-to-VNC
bridge per browser), :class:`ClientFilter` (sans-I/O: frames the RFB messages a browser
sends and passes on only what it may send), :func:`find_novnc` and the limits.

URLs (``universe-remote serve ENV --http-port 8900``)::

    /viewer/             the page (Universe served the same at :15900/viewer/)
    /viewer/session      JSON for the page: env id, view-only, the bridge's URL with a token
    /viewer/status       JSON: the remote's describe (env state, episode), polled by the page
    /viewer/websockify   the bridge: binary WebSocket <-> the remote's VNC port
    /viewer/static/      our page's JS and CSS (envserver/static)
    /viewer/novnc/       noVNC itself, from the Debian package or an npm install

Served over https when the remote has a certificate (``serve --tls-cert/--tls-key``).
Connections that idle or whose request never finishes arriving are closed
(:mod:`envserver.http_deadlines`; an open bridge never is). The listener, TLS and
deadlines are :mod:`envserver.http_port`'s, shared with OpenEnv and MCP.

The page takes ``?password=PW``, ``?quality=lossless`` (no JPEG: exact pixels) or
``?quality=0..9`` (noVNC's JPEG level; default 6 where the server does JPEG), and
``?scale=sharp`` (the default: the largest whole multiple of the screen that fits the
window, each pixel a square of pixels, nearest-neighbour; a screen larger than the
window is fitted smoothly), ``?scale=smooth`` (fit the window exactly, smoothed) or
``?scale=1`` (pixel for pixel).

Input: view only by default. A browser that opens the page with the control password
(``serve --control-password``) plays as player 0; with player N's password of a
multi-player remote (``--player-password N=PW``), as player N. Its keys and pointer go
through the remote's VNC server like any viewer's, so ``serve --record`` records them
(a demonstration from a browser tab).

The port: Universe served the viewer on the rewarder's port; ours speaks ``websockets``
there, so the viewer has its own, off unless asked for (``--http-port``; 8900 when given
without a number, 0 for a free one). Off by default because every local remote would
race for one fixed port, and an extra open port showing the screen should be asked for.
A viewer and its watchers share the remote's event loop either way, and
``python -m benchmarks viewer_port`` measures (one noVNC-like watcher, Catch and Enduro
x4) that the rewarder's ping round trip, p99 and pipelined messages/s are the same with
the bridge on its own port as on the rewarder's: what a watcher costs is the VNC encoding
it asks for, wherever it connects.

Password (:mod:`envserver.viewer_auth`): with one configured, every URL here needs it,
as HTTP Basic auth with the password in the username *or* the password field (Universe
put it in the username), or as ``?password=`` (Universe's viewer URL); the page's own
files accept the session cookie the page sets instead. The page trades it for a
short-lived, single-use token that opens the bridge. With no password, only this machine
(loopback peers) may watch.

Two bridges. When the remote runs its own VNC server, each browser attaches to it
in-process (:mod:`envserver.attached`): the server offers it security type None (the
viewer already checked its password), parses its messages once and enforces view-only
itself. When the runtime serves VNC itself (Xvnc), the bridge (:class:`_Bridge`) dials
it over TCP with the view-only password when there is one (else the full one), offers
the browser security None, and :class:`ClientFilter` drops input from view-only
browsers. Either way no VNC password reaches the browser, and view-only also holds in
noVNC's ``viewOnly`` flag.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from vncdriver.addresses import is_loopback
from vncdriver.errors import ProtocolError, VNCError
from vncdriver.handshake import ClientHandshake, HandshakeComplete, ServerHandshake
from vncdriver.limits import MAX_CUT_TEXT_BYTES, MAX_ENCODINGS
from vncdriver.messages import (
    ClientCutText,
    FramebufferUpdateRequest,
    KeyEvent,
    PointerEvent,
    SetEncodings,
    SetPixelFormat,
)
from vncdriver.pixelformat import NATIVE
from vncdriver.server import AuthGuard, VNCServer
from vncdriver.streams import BytesFeeder, Parser, read_exact

from .attached import BROWSER_LEFT, CLOSE_TIMEOUT, AttachedBridge, close_websocket
from .http_deadlines import Deadlines
from .http_port import HEARTBEAT, HTTPPort
from .ports import HTTP_BASE
from .viewer_auth import CONTROL, PLAY, VIEW, ViewerAuth, credentials, cross_site, role_player

__all__ = ["ClientFilter", "Viewer", "credentials", "cross_site", "find_novnc"]

log = logging.getLogger(__name__)

#: Where to look for noVNC besides $UNIVERSE_REMOTE_NOVNC: Debian's package, then npm.
NOVNC_ENV: Final = "UNIVERSE_REMOTE_NOVNC"
NOVNC_DIRS: Final = (
    "/usr/share/novnc",
    "/usr/local/share/novnc",
    f"{sys.prefix}/share/novnc",
    "node_modules/@novnc/novnc",
    "/usr/local/lib/node_modules/@novnc/novnc",
    "/usr/lib/node_modules/@novnc/novnc",
)
INSTALL_NOVNC: Final = (
    "install noVNC: `apt-get install novnc` (Debian/Ubuntu), or `npm install @novnc/novnc` "
    f"and set ${NOVNC_ENV} to its node_modules/@novnc/novnc directory"
)

#: Browsers bridged at once; each is a VNC client of the remote (the server takes 64).
MAX_VIEWERS: Final = 16
#: Bytes read from the VNC server per WebSocket message, and the stream buffer limit:
#: together with aiohttp's writer limit, what one slow browser can hold in our memory.
BRIDGE_CHUNK: Final = 256 * 1024
#: WebSocket messages from a browser carry a few small RFB messages; larger is abuse.
MAX_BROWSER_MESSAGE: Final = 64 * 1024
#: aiohttp drains the browser's socket past this many buffered bytes.
WRITER_LIMIT: Final = 1024 * 1024
#: Seconds for the VNC handshake with the remote and for the browser's.
HANDSHAKE_TIMEOUT: Final = 10.0

#: Pseudo-encodings that would let a browser send messages outside RFB 3.8's six (or
#: change their layout): the bridge strips them from SetEncodings, so it can frame
#: every message, and fails closed on anything else.
EXTENSION_ENCODINGS: Final = frozenset(
    {
        -258,  # QEMU extended key event: client message 255
        -259,  # QEMU audio: client message 255
        -305,  # GII: client message 253
        -308,  # ExtendedDesktopSize: SetDesktopSize, client message 251
        -309,  # xvp: client message 250
        -312,  # Fence: client message 248
        -313,  # ContinuousUpdates: client message 150
        -316,  # ExtendedMouseButtons: longer PointerEvents
        -1063131698,  # ExtendedClipboard (0xC0A1E5CE): ClientCutText with negative lengths
    }
)
#: JPEG pseudo-encodings (quality levels 0..9, fine quality 0..100), stripped when the
#: page asks for ``?quality=lossless``.
JPEG_ENCODINGS: Final = frozenset(range(-32, -22)) | frozenset(range(-512, -411))

STATIC_DIR: Final = Path(str(resources.files("envserver") / "static"))
_CLOSED: Final = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)
#: URLs anyone may ask for (redirects to the page), and the bridge (its token decides).
_OPEN_PATHS: Final = frozenset({"/", "/viewer", "/viewer/websockify"})
#: Files the page loads after it was let in: a refusal there says how to get the cookie.
_PAGE_FILES: Final = ("/viewer/static/", "/viewer/novnc/")
_PAGE: Final = "/viewer/"
#: The role a request's password or cookie gives, for the handlers.
_ROLE: Final = web.RequestKey("role", str)


def find_novnc(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """noVNC's directory (it holds ``core/rfb.js``): ``explicit``, $UNIVERSE_REMOTE_NOVNC,
    then :data:`NOVNC_DIRS`; None when there is none."""
    chosen = explicit or os.environ.get(NOVNC_ENV)
    candidates = [chosen] if chosen else list(NOVNC_DIRS)
    for candidate in candidates:
        path = Path(candidate).expanduser()
        if (path / "core" / "rfb.js").is_file():
            return path.resolve()
    if chosen:
        log.warning("%s (%s) holds no core/rfb.js; %s", NOVNC_ENV, chosen, INSTALL_NOVNC)
    return None


# The browser's side of RFB, framed ------------------------------------------------------------


class ClientFilter:
    """Sans-I/O: RFB messages from a browser in, the ones it may send to the server out.

    Feed bytes after the handshake with :meth:`receive_data`, then write
    :meth:`data_to_send` to the VNC server. View-only drops KeyEvent, PointerEvent and
    ClientCutText (counted in ``dropped``); SetEncodings loses :data:`EXTENSION_ENCODINGS`
    (and :data:`JPEG_ENCODINGS` with ``lossless``). A message type outside RFB 3.8 raises
    :class:`~vncdriver.errors.ProtocolError`: close the bridge.
    """

    def __init__(self, *, view_only: bool, lossless: bool = False) -> None:
        self.view_only, self.lossless = view_only, lossless
        self.dropped = 0
        self._out: list[bytes] = []
        self._feeder = BytesFeeder(self._run())

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._feeder.feed(data)

    def data_to_send(self) -> bytes:
        out = b"".join(self._out)
        self._out.clear()
        return out

    def _input(self, message: bytes) -> None:
        if self.view_only:
            self.dropped += 1
        else:
            self._out.append(message)

    def _run(self) -> Parser[None]:
        while True:
            head = yield from read_exact(1)
            kind = head[0]
            if kind == SetPixelFormat.TYPE:
                self._out.append(head + (yield from read_exact(SetPixelFormat.SIZE - 1)))
            elif kind == SetEncodings.TYPE:
                header = head + (yield from read_exact(3))
                body = yield from read_exact(SetEncodings.body_length(header, MAX_ENCODINGS))
                wanted = SetEncodings.parse(header + body, MAX_ENCODINGS).encodings
                stripped = EXTENSION_ENCODINGS | (JPEG_ENCODINGS if self.lossless else frozenset())
                kept = tuple(e for e in wanted if e not in stripped)
                self._out.append(SetEncodings(kept).serialize())
            elif kind == FramebufferUpdateRequest.TYPE:
                self._out.append(head + (yield from read_exact(FramebufferUpdateRequest.FORMAT.size - 1)))
            elif kind == KeyEvent.TYPE:
                self._input(head + (yield from read_exact(KeyEvent.FORMAT.size - 1)))
            elif kind == PointerEvent.TYPE:
                self._input(head + (yield from read_exact(PointerEvent.FORMAT.size - 1)))
            elif kind == ClientCutText.TYPE:
                header = head + (yield from read_exact(7))
                body = yield from read_exact(ClientCutText.body_length(header, MAX_CUT_TEXT_BYTES))
                self._input(header + body)
            else:
                raise ProtocolError(
                    f"browser sent RFB message type {kind}; the viewer bridges RFB 3.8's "
                    "types 0 and 2-6 only (it announced no extension)"
                )


# One browser ------------------------------------------------------------------------------------


class _Bridge:
    """One browser's WebSocket and its own TCP connection to the VNC server."""

    def __init__(self, viewer: Viewer, request: web.Request, ws: web.WebSocketResponse,
                 view_only: bool, lossless: bool) -> None:
        self.viewer, self.request, self.ws = viewer, request, ws
        self.peer = request.remote
        self.filter = ClientFilter(view_only=view_only, lossless=lossless)
        self.writer: asyncio.StreamWriter | None = None
        self.closing: str | None = None

    async def run(self) -> None:
        """Shake hands with the VNC server, then with the browser, then pump both ways."""
        viewer = self.viewer
        result: HandshakeComplete | None = None
        refusal = None
        if len(viewer.bridges) > MAX_VIEWERS:
            refusal = f"too many viewers ({MAX_VIEWERS}); try again later"
        else:
            try:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                    reader, self.writer = await asyncio.open_connection(
                        viewer.vnc_host, viewer.vnc_port, limit=BRIDGE_CHUNK
                    )
                    vnc = ClientHandshake(viewer.vnc_password(self.filter.view_only), shared=True)
                    while not vnc.complete:
                        self.writer.write(vnc.data_to_send())
                        data = await reader.read(BRIDGE_CHUNK)
                        if not data:
                            raise ConnectionError("the VNC server closed the connection")
                        vnc.receive_data(data)
                    self.writer.write(vnc.data_to_send())  # ClientInit
                    result = vnc.result
            except (OSError, TimeoutError, VNCError) as exc:
                refusal = f"the remote's screen is not available ({exc or type(exc).__name__})"
                log.warning("viewer: %s", refusal)
        browser = ServerHandshake(
            result.width if result else 1,
            result.height if result else 1,
            result.name if result else "universe-remote",
            result.pixel_format if result else NATIVE,
            refuse_reason=refusal,
        )
        if not await self._browser_handshake(browser) or result is None:
            await self.close(refusal or "the RFB handshake failed")
            return
        mode = "view only" if self.filter.view_only else "control"
        log.info("viewer: %s watches (%s)", self.peer, mode)
        pumps = [
            asyncio.create_task(self._down(reader, vnc.trailing_data())),
            asyncio.create_task(self._up(browser.trailing_data())),
        ]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        reason = self.closing or done.pop().result()
        await self.close(reason)
        log.info("viewer: %s left (%s)", self.peer, reason)

    async def _browser_handshake(self, handshake: ServerHandshake) -> bool:
        """Offer the browser security None and the server's ServerInit; False if it failed."""
        ws = self.ws
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                await ws.send_bytes(handshake.data_to_send())
                while not handshake.complete:
                    msg = await ws.receive()
                    if msg.type != WSMsgType.BINARY:
                        raise ConnectionError("the browser left during the RFB handshake")
                    try:
                        handshake.receive_data(msg.data)
                    finally:
                        if out := handshake.data_to_send():
                            await ws.send_bytes(out)
        except (OSError, TimeoutError, VNCError) as exc:
            if self.closing is None:
                self.closing = f"RFB handshake with the browser failed: {exc}"
            return False
        return True

    async def _down(self, reader: asyncio.StreamReader, first: bytes) -> str:
        """VNC server -> browser, a chunk per binary message; returns why it stopped."""
        try:
            if first:
                await self.ws.send_bytes(first)
            while data := await reader.read(BRIDGE_CHUNK):
                await self.ws.send_bytes(data)
        except OSError as exc:
            return f"connection lost: {exc}"
        return "the remote's VNC server closed the connection"

    async def _up(self, first: bytes) -> str:
        """Browser -> VNC server through the filter; returns why it stopped."""
        assert self.writer is not None
        data: bytes = first
        try:
            while True:
                if data:
                    self.filter.receive_data(data)
                    if out := self.filter.data_to_send():
                        self.writer.write(out)
                        await self.writer.drain()
                msg = await self.ws.receive()
                if msg.type in _CLOSED:
                    return BROWSER_LEFT
                if msg.type != WSMsgType.BINARY:
                    return "the browser sent a text message; the bridge carries binary RFB"
                data = msg.data
        except VNCError as exc:
            return str(exc)
        except OSError as exc:
            return f"connection lost: {exc}"

    async def close(self, reason: str, code: int = 1011) -> None:
        """Close both sides (the WebSocket with ``reason``), once."""
        if self.closing is None:
            self.closing = reason
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        await close_websocket(self.request, self.ws, reason, code)


# The app ----------------------------------------------------------------------------------------


#: What the 400 to plain http:// on a TLS viewer port says to do.
TLS_HINT: Final = "open {url}viewer/ (the browser must trust the remote's certificate or its CA)"


class _QuietBadRequests(logging.Filter):
    """aiohttp logs a traceback at ERROR for every malformed request (a 100 KB URL, say):
    a client's mistake, not ours. One INFO line instead, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = "refused a malformed HTTP request: %s", (
                str(exc.message)[:200],
            )
        return True


_QUIET_BAD_REQUESTS: Final = _QuietBadRequests()


class Viewer:
    """Serves the page, noVNC and one WebSocket-to-VNC bridge per browser.

    ``await viewer.start(host, port)`` (0 picks a free port: read :attr:`port`), then
    :meth:`close`. ``view_only=False`` lets holders of the full password control the
    remote from the page (the view-only password stays view-only).
    """

    def __init__(
        self,
        vnc_port: int,
        *,
        vnc_host: str = "127.0.0.1",
        password: str | None = None,
        view_only_password: str | None = None,
        view_only: bool = True,
        describe: Callable[[], dict[str, Any]] | None = None,
        novnc_dir: str | os.PathLike[str] | None = None,
        vnc_server: VNCServer | None = None,
        auth_guard: AuthGuard | None = None,
        tls: ssl.SSLContext | None = None,
        deadlines: Deadlines | None = None,
    ) -> None:
        """``vnc_server``: the remote's own VNC server, which browsers then attach to
        in-process (:mod:`envserver.attached`); without it (Xvnc) each browser gets a TCP
        bridge to ``vnc_host:vnc_port``. ``tls``: a server context: https only.
        ``deadlines``: the connections' (:class:`Deadlines`' own by default)."""
        self.vnc_port = vnc_port
        self.vnc_server = vnc_server
        self.tls = tls
        self.http = HTTPPort("the viewer port", TLS_HINT, tls, deadlines)
        #: Passwords, the page's session cookies, the bridge's tokens, refusals.
        self.auth = ViewerAuth(password, view_only_password, auth_guard, secure=tls is not None)
        # A multi-player remote's player passwords open the page as that player.
        self.auth.allow_control(None, getattr(vnc_server, "player_passwords", None))
        # The bridge runs beside the VNC server: a wildcard bind is reached on loopback.
        self.vnc_host = "127.0.0.1" if vnc_host in ("", "0.0.0.0", "::") else vnc_host
        self.password, self.view_only_password = password, view_only_password
        self.view_only = view_only
        self.describe = describe or dict
        self.novnc = find_novnc(novnc_dir)
        self.bridges: set[_Bridge | AttachedBridge] = set()
        self._closing = False
        self.app = self._make_app()

    # Lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.http.port

    async def start(self, host: str = "127.0.0.1", port: int = HTTP_BASE) -> None:
        if self.password is None and self.view_only_password is None and not is_loopback(host):
            log.warning(
                "viewer on %s without a password: only this machine may watch; "
                "serve with --password to watch from elsewhere", host,
            )
        if self.novnc is None:
            log.warning("viewer: noVNC not found, the page will say so; %s", INSTALL_NOVNC)
        logging.getLogger("aiohttp.server").addFilter(_QUIET_BAD_REQUESTS)  # once: a set
        await self.http.start(self.app, host, port)
        self.auth.bind(self.port)

    async def close(self, reason: str = "the remote is shutting down") -> None:
        if self._closing:
            return
        self._closing = True
        await asyncio.gather(*(b.close(reason, code=1001) for b in list(self.bridges)))
        await self.http.close()

    def allow_control(self, control_password: str | None) -> None:
        """Let browsers that open the page with ``control_password`` play (as player 0),
        beside the player passwords of a multi-player remote; the rest stay as they are
        (view only by default). ``serve --control-password``."""
        self.auth.allow_control(control_password, getattr(self.vnc_server, "player_passwords", None))

    @property
    def controllable(self) -> bool:
        """Whether some password opens the page with input."""
        return (not self.view_only or self.auth.control_password is not None
                or bool(self.auth.player_passwords))

    def input_of(self, role: str) -> tuple[bool, int | None]:
        """(view only, the player it drives) for a page opened as ``role``: the control
        password plays player 0, player N's password player N, the full password only
        when the viewer is not view-only, and everyone else watches."""
        if role == PLAY:
            return False, None
        if (player := role_player(role)) is not None:
            return False, player
        return (self.view_only or role != CONTROL), None

    def vnc_password(self, view_only: bool) -> str | None:
        """The VNC password the bridge uses: the view-only one where it will do."""
        if view_only and self.view_only_password is not None:
            return self.view_only_password
        return self.password

    # Handlers ----------------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.http.watch, self._guard])
        app.router.add_get("/", self._to_viewer)
        app.router.add_get("/viewer", self._to_viewer)
        app.router.add_get("/viewer/", self._page)
        app.router.add_get("/viewer/session", self._session)
        app.router.add_get("/viewer/status", self._status)
        app.router.add_get("/viewer/websockify", self._websockify)
        app.router.add_static("/viewer/static/", STATIC_DIR)
        if self.novnc is not None:
            app.router.add_static("/viewer/novnc/", self.novnc)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every viewer URL but the redirects needs the password or the page's session
        cookie (the bridge: its token, checked by its handler); renews the cookie."""
        session = None
        if request.path not in _OPEN_PATHS:
            role, session = self.auth.authorise(request)
            if role is None:
                return self.auth.refusal(request, page_file=request.path.startswith(_PAGE_FILES))
            request[_ROLE] = role
            if session is None and request.path == _PAGE and not self.auth.open:
                session = self.auth.open_session(role)  # for the files the page loads next
        response: web.StreamResponse = await handler(request)
        if not response.prepared:
            response.headers.setdefault("Referrer-Policy", "no-referrer")  # ?password=
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
            if session is not None:
                self.auth.set_cookie(response, session)
        return response

    async def _to_viewer(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/viewer/" + (f"?{request.query_string}" if request.query_string else ""))

    async def _page(self, request: web.Request) -> web.StreamResponse:
        if self.novnc is None:
            return web.Response(
                status=503,
                content_type="text/html",
                text=(STATIC_DIR / "novnc-missing.html").read_text().replace("{install}", INSTALL_NOVNC),
            )
        return web.FileResponse(STATIC_DIR / "viewer.html", headers={"Cache-Control": "no-store"})

    async def _session(self, request: web.Request) -> web.Response:
        role = request[_ROLE]
        view_only, player = self.input_of(role)
        body = {
            **self._describe(),
            "view_only": view_only,
            "player": player if player is not None else (None if view_only else 0),
            "websocket": f"websockify?token={self.auth.token(VIEW if view_only else role)}",
        }
        return _json(body)

    async def _status(self, request: web.Request) -> web.Response:
        return _json({**self._describe(), "viewers": len(self.bridges)})

    def _describe(self) -> dict[str, Any]:
        try:
            return dict(self.describe())
        except Exception:  # the page's status line must not take the viewer down
            log.exception("viewer: describe() failed")
            return {}

    async def _websockify(self, request: web.Request) -> web.StreamResponse:
        role = None if cross_site(request) else self.auth.redeem(request.query.get("token"))
        role = role or self.auth.authorise(request)[0]
        if role is None:
            return self.auth.refusal(request)
        if self._closing:
            return web.Response(status=503, text="the remote is shutting down\n")
        ws = web.WebSocketResponse(
            timeout=CLOSE_TIMEOUT,
            protocols=("binary",),
            compress=False,  # RFB is compressed already; deflating it again costs CPU here
            max_msg_size=MAX_BROWSER_MESSAGE,
            writer_limit=WRITER_LIMIT,
            heartbeat=HEARTBEAT,
        )
        await ws.prepare(request)
        view_only, player = self.input_of(role)
        lossless = request.query.get("quality") == "lossless"
        bridge: _Bridge | AttachedBridge
        if self.vnc_server is not None:
            refusal = None
            if len(self.bridges) >= MAX_VIEWERS:
                refusal = f"too many viewers ({MAX_VIEWERS}); try again later"
            bridge = AttachedBridge(self.vnc_server, request, ws, view_only, lossless, refusal,
                                    player=player)
        else:
            bridge = _Bridge(self, request, ws, view_only, lossless)
        self.bridges.add(bridge)
        try:
            await bridge.run()
        finally:
            self.bridges.discard(bridge)
            await bridge.close("the viewer stopped")
        return ws


def _json(body: dict[str, Any]) -> web.Response:
    return web.Response(
        body=orjson.dumps(body, default=str),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
