"""What the remote's three HTTP ports (the browser viewer, OpenEnv, MCP) share: one
aiohttp listener each, set up the same way.

:class:`HTTPPort` runs an app on ``host:port``: no access log, no signal handlers,
:data:`SHUTDOWN_TIMEOUT` to close; TLS through :class:`rewarder.tls.TLSPort` (a plain
``http://`` request gets a 400 saying the port speaks ``https://``, not a closed
connection); and the connection deadlines of :mod:`envserver.http_deadlines` (idle and
half-sent connections closed; a request being answered, a WebSocket open, never), kept
by its :meth:`HTTPPort.watch` middleware, which the app puts first.
:func:`origin_refusal` and :func:`password_refusal` are the checks OpenEnv and MCP make
of every request (the viewer has its own: :mod:`envserver.viewer_auth`).
"""

from __future__ import annotations

import asyncio
import hmac
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from aiohttp import web

from rewarder.auth import given_password
from rewarder.protocol import CLIENT_ID_HEADER, MAX_CLIENT_ID_CHARS, TAKE_BACK_HEADER
from rewarder.tls import TLSPort
from vncdriver.server import AuthGuard

from .http_deadlines import Deadlines

#: Seconds between an HTTP port's WebSocket pings, so a vanished browser or session is
#: noticed (OpenEnv's client pings every 20 s too).
HEARTBEAT: Final = 30.0
#: Seconds a stopping HTTP port gives its handlers, sessions and requests to finish.
SHUTDOWN_TIMEOUT: Final = 2.0

#: What a session is told when a newer one with its client id (``openai-client-id``, as on
#: the rewarder) replaced it: how a warm pool takes a remote back from a session whose
#: lease ended (docs/cluster.md), and what an agent that connected again does.
REPLACED: Final = ("replaced by a newer connection with the same client id (openai-client-id): a "
                   "pool took this remote back because this session's lease ended, or the same agent "
                   "connected again")

#: What a session is told when a pool's take-back (``TAKE_BACK_HEADER`` with its client id)
#: ended it, and a later session with that id: the port retires the id, so a client that
#: reconnects by itself (OpenEnv's does) cannot come back to a remote given to someone else.
TAKEN_BACK: Final = ("a pool took this remote back: this session's lease ended (its holder released it, "
                     "stopped renewing it, or it passed its maximum age); claim another remote from the pool")
#: Client ids a port remembers as retired (the newest): a pool's leases, each retired once.
MAX_RETIRED: Final = 4096

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HTTPPort:
    """One HTTP port's listener: ``await start(app, host, port)``, then :meth:`close`.

    ``where`` names the port in TLS refusals ("the viewer port"); ``hint`` says what to
    open instead of plain http:// (``{url}`` is the https:// one). ``deadlines``: the
    connections' (:class:`Deadlines`' own by default).
    """

    def __init__(self, where: str, hint: str, tls: ssl.SSLContext | None = None,
                 deadlines: Deadlines | None = None) -> None:
        self.where, self.hint, self.tls = where, hint, tls
        self.deadlines = deadlines or Deadlines()
        #: The TLS side of the port (with ``tls``), after :meth:`start`.
        self.tls_port: TLSPort | None = None
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        assert self._runner is not None, "call start() first"
        return int(self._runner.addresses[0][1])

    @web.middleware
    async def watch(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """No connection deadline while a request is answered (the app's first middleware)."""
        with self.deadlines.serving(request.transport):
            return await handler(request)

    async def start(self, app: web.Application, host: str, port: int) -> None:
        """Listen; an OSError (the port is taken) leaves nothing running."""
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=SHUTDOWN_TIMEOUT)
        await self._runner.setup()
        if self.tls is not None:
            self.tls_port = TLSPort(self.tls, scheme="https", where=self.where, hint=self.hint)
        try:
            await _Site(self._runner, host, port, self.deadlines, self.tls_port).start()
        except OSError:
            await self._runner.cleanup()
            raise
        self.deadlines.start()

    async def close(self) -> None:
        """Stop listening and close the connections (after the port's own sessions)."""
        self.deadlines.close()
        if self.tls_port is not None:
            self.tls_port.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def read_body(self, request: web.Request) -> bytes:
        """A request's body; TimeoutError when it does not arrive within the request deadline
        (aiohttp's HTTPRequestEntityTooLarge past the app's ``client_max_size``)."""
        async with asyncio.timeout(self.deadlines.request):
            return await request.read()


def origin_refusal(request: web.BaseRequest, allowed: frozenset[str]) -> str | None:
    """Why a request from a web page (an ``Origin`` header) not in ``allowed`` is refused.

    ``allowed``: origins as :func:`allowed_origins` makes them."""
    origin = request.headers.get("Origin")
    if origin is None or origin.rstrip("/").lower() in allowed:
        return None
    return (f"this port does not serve web pages (Origin: {origin[:200]}): any site open in a "
            f"browser here could drive the remote; serve with --allow-origin {origin[:200]} to allow it")


def allowed_origins(origins: Iterable[str]) -> frozenset[str]:
    """``serve --allow-origin``'s origins, as :func:`origin_refusal` compares them."""
    return frozenset(o.rstrip("/").lower() for o in origins)


def client_id(request: web.Request) -> str:
    """The request's ``openai-client-id`` ("" without one, or past its length limit)."""
    value = request.headers.get(CLIENT_ID_HEADER, "").strip()
    return value if len(value) <= MAX_CLIENT_ID_CHARS else ""


def taking_back(request: web.Request) -> bool:
    """Whether ``request`` is a pool's take-back (:data:`TAKE_BACK_HEADER`)."""
    return request.headers.get(TAKE_BACK_HEADER, "").strip().lower() == "true"


class Retired:
    """Client ids a pool took back on this port (at most :data:`MAX_RETIRED`, the newest)."""

    def __init__(self) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, ident: str) -> None:
        self._ids[ident] = None
        self._ids.move_to_end(ident)
        while len(self._ids) > MAX_RETIRED:
            self._ids.popitem(last=False)

    def __contains__(self, ident: object) -> bool:
        return ident in self._ids


def password_refusal(request: web.BaseRequest, password: str, guard: AuthGuard | None,
                     where: str, how: str) -> tuple[int, str] | None:
    """429 or 401 and why, for a request without ``password`` as ``Authorization: Bearer``
    (or the rewarder's Basic form); None lets it in. Wrong passwords count toward the
    remote's throttle (``guard``), which a blocked address hears from, its password not
    compared. ``how``: how to send the password, for the 401 without one."""
    peer = str(request.remote or "?")
    given = given_password(request.headers.get("Authorization"))
    blocked = guard.admit(peer) if guard is not None else None
    if blocked is not None:
        return 429, blocked
    if given is None:
        if guard is not None:
            guard.abandoned(peer)
        return 401, ("this remote needs a password: send the header 'Authorization: Bearer "
                     f"<password>' ({how})")
    if not hmac.compare_digest(given.encode(), password.encode()):
        if guard is not None:
            guard.failed(peer, where)
        return 401, "wrong password for this remote"
    if guard is not None:
        guard.succeeded(peer)
    return None


class _Site(web.BaseSite):
    """aiohttp's site on our own listener: connections keep :class:`Deadlines`, through TLS
    when the port has a certificate (the deadlines inside it, so they see the requests)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, deadlines: Deadlines,
                 tls_port: TLSPort | None) -> None:
        super().__init__(runner)
        self.host, self.port, self.deadlines, self.tls_port = host, port, deadlines, tls_port

    @property
    def name(self) -> str:
        return f"{'https' if self.tls_port is not None else 'http'}://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        factory = self.deadlines.factory(server)
        if self.tls_port is not None:
            factory = self.tls_port.factory(factory)
        self._server = await asyncio.get_running_loop().create_server(factory, self.host, self.port,
                                                                      backlog=self._backlog)
