"""The OpenEnv port: OpenEnv's HTTP endpoints and ``/ws`` sessions (aiohttp) on the remote's
event loop.

A thin shell around :mod:`.session` (what each message does) and :mod:`.protocol` (its
shapes). URLs (``universe-remote serve ENV --openenv-port``, 8000 by default)::

    GET  /health         {"status": "healthy"} (no password: OpenEnv's providers poll it)
    GET  /metadata       the env, its description, universe-remote's version, the protocols
    GET  /schema         JSON Schemas of the action, observation and state (schemas.py)
    GET  /ws             a session: {"type": "reset"|"step"|"state"|"close", "data": {...}}
    POST /reset, /step   one request each, as the HTTP session (session.py; docs/openenv.md)
    GET  /state          the remote's state
    GET  /frame[/{n}]    the screen as a PNG (frame n if it is still the newest)
    GET  /openapi.json   the endpoints, for ``openenv validate``
    POST /mcp            MCP's JSON-RPC: tools/list, tools/call (docs/computer-use.md)

**Password** (``serve --password``): ``Authorization: Bearer <password>`` — the header
OpenEnv's clients send with ``headers=`` (``GenericEnvClient(base_url, headers={...})``)
— or the rewarder's ``Authorization: Basic base64("<password>:")``; on every URL but
``/health``. A WebSocket without it is accepted, told why in OpenEnv's error shape
(``UNAUTHORIZED``: OpenEnv's client raises it as ``RuntimeError`` with our words; a 401
at the handshake would reach it as a bare status) and closed. Wrong passwords count
toward the remote's failed-password throttle like on every port (``TOO_MANY_ATTEMPTS``,
HTTP 429, says for how long). **Web pages** (an ``Origin`` header) are refused unless
``serve --allow-origin`` names them, as on the rewarder. **TLS**: the remote's
certificate (https://, wss://); plain http:// to it gets a 400 saying so. **Limits**:
MAX_SESSIONS sessions, each closed (told why) after IDLE_TIMEOUT s without a message;
messages and bodies over MAX_MESSAGE_BYTES are answered ``TOO_LARGE`` (413), a body that
does not arrive within the port's request deadline ``TOO_SLOW`` (408). **Connections**
that idle or whose request never finishes arriving are closed
(:mod:`envserver.http_deadlines`). The listener, TLS and those checks are
:mod:`envserver.http_port`'s, shared with the viewer and MCP. **Client ids**: a session
opened with ``openai-client-id`` replaces an open one with that id (as on the rewarder);
with ``universe-remote-take-back: true`` too (a warm pool taking its remote back) the id's
sessions end, the id is retired and no session is opened (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

import orjson
from aiohttp import WSMsgType, web

from rewarder.lograte import RateLimitedLog
from vncdriver.server import AuthGuard

from .. import version
from ..agent_port import RemoteLike
from ..computer_use.jsonrpc import OpenEnvTools
from ..http_deadlines import Deadlines
from ..http_port import (
    HEARTBEAT,
    REPLACED,
    TAKEN_BACK,
    HTTPPort,
    Retired,
    allowed_origins,
    client_id,
    origin_refusal,
    password_refusal,
    taking_back,
)
from . import frames, protocol
from .protocol import Code, Refusal
from .schemas import Spec
from .session import Port, Session

log = logging.getLogger(__name__)

#: The port ``serve --openenv-port`` suggests and the Docker image uses: OpenEnv's own
#: servers listen on 8000 (uvicorn's default in its Dockerfiles and docs).
DEFAULT_PORT: Final = 8000
#: WebSocket sessions at once (one drives; the rest watch). Past it a session is told
#: CAPACITY_REACHED and closed, as OpenEnv's servers do at MAX_CONCURRENT_ENVS.
MAX_SESSIONS: Final = 16
#: Seconds a session may send nothing (between an answer and its next message) before it
#: is told why and closed: sessions left open would otherwise hold the seat or fill
#: MAX_SESSIONS for good. Long enough for a slow agent's turn (a model thinking between
#: steps); OpenEnv's servers have the same limit as ``session_timeout``.
IDLE_TIMEOUT: Final = 300.0
#: Digits of a frame number ``GET /frame/{n}`` takes (a frame counter fits in far fewer).
MAX_FRAME_DIGITS: Final = 20
#: What OpenEnv's HTTP API is at (its FastAPI apps say 1.0.0; ``openenv validate`` reads it).
API_VERSION: Final = "1.0.0"
#: The protocols the remote speaks, with this port's: its /metadata lists them.
PROTOCOLS: Final = version.PROTOCOLS
#: URLs open without the password.
OPEN_PATHS: Final = frozenset({"/health"})
#: What the 400 to plain http:// on a TLS port says to do.
TLS_HINT: Final = "use {url} (GenericEnvClient(base_url='{url}'); the client must trust the certificate)"
_JSON: Final = "application/json"


class OpenEnvServer:
    """OpenEnv for one remote: ``await start(host, port)``, ``await close(reason)``."""

    def __init__(
        self,
        remote: RemoteLike,
        *,
        password: str | None = None,
        auth_guard: AuthGuard | None = None,
        tls: ssl.SSLContext | None = None,
        allow_origins: Iterable[str] = (),
        description: str = "",
        idle_timeout: float = IDLE_TIMEOUT,
        deadlines: Deadlines | None = None,
    ) -> None:
        """``deadlines``: the connections' (:class:`Deadlines`' own by default)."""
        if not idle_timeout > 0:
            raise ValueError(f"idle_timeout is seconds > 0, not {idle_timeout!r}")
        self.idle_timeout = idle_timeout
        self.endpoint = Port(remote)
        #: The computer-use tools: {"type": "mcp"} messages and POST /mcp (OpenEnv's RFC 003).
        self.tools = OpenEnvTools(remote, take_over=password is not None)
        self.remote = remote
        self.password, self.auth_guard, self.tls = password, auth_guard, tls
        self.allow_origins = allowed_origins(allow_origins)
        self.description = description
        self.sessions: dict[web.WebSocketResponse, Session] = {}
        #: Each session's ``openai-client-id`` (those that sent one): a newer session with
        #: the same id replaces it, as on the rewarder (a warm pool takes its remote back so).
        self.client_ids: dict[web.WebSocketResponse, str] = {}
        #: Client ids a pool took back here: their sessions are refused.
        self.retired = Retired()
        self.http = HTTPPort("the OpenEnv port", TLS_HINT, tls, deadlines)
        #: What clients send that is refused (and our bugs): one line per kind per interval.
        self.bad_input = RateLimitedLog(log)
        self._http_lock = asyncio.Lock()
        self._numbers = itertools.count(1)
        self._telling: set[asyncio.Task[None]] = set()
        self._closing: str | None = None
        self.app = self._make_app()

    @property
    def port(self) -> int:
        return self.http.port

    def held_by(self) -> str | None:
        """Which OpenEnv session drives the remote (the other front ends ask)."""
        return self.endpoint.held_by() or self.tools.held_by()

    async def start(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
        await self.http.start(self.app, host, port)

    async def close(self, reason: str = "the remote is shutting down") -> None:
        if self._closing is not None:
            return
        self._closing = reason
        await asyncio.gather(*(
            ws.close(code=1001, message=reason[:120].encode()) for ws in list(self.sessions)
        ), return_exceptions=True)
        await self.http.close()
        self.bad_input.close()

    # The app -------------------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.http.watch, self._guard],
                              client_max_size=protocol.MAX_MESSAGE_BYTES)
        for path, handler in (
            ("/health", self._health), ("/metadata", self._metadata), ("/schema", self._schema),
            ("/state", self._state), ("/frame", self._frame), ("/frame/{number}", self._frame),
            ("/openapi.json", self._openapi), ("/ws", self._ws),
        ):
            app.router.add_get(path, handler)
        app.router.add_post("/reset", self._reset)
        app.router.add_post("/step", self._step)
        app.router.add_post("/mcp", self._mcp)
        return app

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Web pages and missing or wrong passwords are refused (a WebSocket is told in
        OpenEnv's error shape, then closed); a request that fails is answered in OpenEnv's
        error shape and logged with the port's rate limit, not aiohttp's 500 and traceback."""
        refusal = self._refusal(request)
        if refusal is None:
            if request.path == "/ws":  # (a session answers each message itself)
                return await handler(request)
            try:
                return await handler(request)
            except web.HTTPException:
                raise
            except Exception as exc:  # a bug of ours: answered, logged one per kind per interval
                status, body = protocol.http_error(self._bug(exc, str(request.remote)))
                return web.Response(status=status, body=body, content_type=_JSON)
        self.bad_input.log(f"refused: {refusal.code.value}", logging.INFO,
                           "OpenEnv port: refused %s %s from %s: %s", request.method, request.path,
                           request.remote, refusal.message)
        if request.path == "/ws" and request.headers.get("Upgrade", "").lower() == "websocket":
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            await ws.send_str(protocol.error(refusal).decode())
            await ws.close(code=1008, message=refusal.code.value.encode())
            return ws
        status, body = protocol.http_error(refusal)
        headers = {"WWW-Authenticate": 'Bearer realm="universe-remote"'} if status == 401 else None
        return web.Response(status=status, body=body, content_type=_JSON, headers=headers)

    def _refusal(self, request: web.Request) -> Refusal | None:
        why = origin_refusal(request, self.allow_origins)
        if why is not None:
            return Refusal(Code.UNAUTHORIZED, why)
        if self.password is None or request.path in OPEN_PATHS:
            return None
        how = "GenericEnvClient(base_url, headers={'Authorization': 'Bearer <password>'})"
        refused = password_refusal(request, self.password, self.auth_guard, "the OpenEnv port", how)
        if refused is None:
            return None
        status, why = refused
        return Refusal(Code.TOO_MANY_ATTEMPTS if status == 429 else Code.UNAUTHORIZED, why)

    # Sessions ------------------------------------------------------------------------------

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        # Messages up to MAX_READ_BYTES are read, so that one over MAX_MESSAGE_BYTES is
        # answered (TOO_LARGE) and the session goes on.
        ws = web.WebSocketResponse(max_msg_size=protocol.MAX_READ_BYTES, heartbeat=HEARTBEAT,
                                   compress=False)
        await ws.prepare(request)
        ident = client_id(request)
        back = bool(ident) and taking_back(request)
        if ident:
            for older in [w for w, i in self.client_ids.items() if i == ident]:
                self._replace(older, TAKEN_BACK if back else REPLACED)
        if back:  # a pool's take-back: the id is retired, and this is no session
            self.retired.add(ident)
            await ws.close()
            return ws
        refusal = None
        if ident in self.retired:
            refusal = Refusal(Code.SESSION_ERROR, f"closed: {TAKEN_BACK}")
        elif self._closing is not None:
            refusal = Refusal(Code.SESSION_ERROR, self._closing)
        elif len(self.sessions) >= MAX_SESSIONS:
            refusal = Refusal(Code.CAPACITY_REACHED, (
                f"{MAX_SESSIONS} OpenEnv sessions are open on this remote (MAX_SESSIONS); "
                "try again once one has closed"), active_sessions=len(self.sessions),
                max_sessions=MAX_SESSIONS)
        if refusal is not None:
            await ws.send_str(protocol.error(refusal).decode())
            await ws.close(code=1013, message=refusal.code.value.encode())
            return ws
        session = Session(self.endpoint, f"session {next(self._numbers)} from {request.remote}")
        self.sessions[ws] = session
        if ident:
            self.client_ids[ws] = ident
        try:
            while True:
                try:
                    message = await ws.receive(timeout=self.idle_timeout)
                except TimeoutError:
                    await self._idle(ws, session)
                    break
                if message.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    if message.type is WSMsgType.ERROR:  # past MAX_READ_BYTES: aiohttp closed it
                        self.bad_input.log("closed: unreadable", logging.INFO,
                                           "OpenEnv port: closed %s: %s", session.name, message.data)
                    break
                answer = await self._answer(session, message.data, str(request.remote))
                if answer is None:  # "close"
                    break
                await ws.send_str(answer.decode())
        except (ConnectionError, RuntimeError) as exc:  # the client went while we answered
            log.debug("OpenEnv %s ended: %r", session.name, exc)
        finally:
            del self.sessions[ws]
            self.client_ids.pop(ws, None)
            session.close()
            self.tools.forget(session)
            await ws.close()
        return ws

    def _replace(self, ws: web.WebSocketResponse, why: str) -> None:
        """A newer session with ``ws``'s client id came (or its pool took the remote back):
        ``ws``'s lets go of its seat now, is told ``why`` and is closed."""
        session = self.sessions.get(ws)
        self.client_ids.pop(ws, None)
        if session is None:
            return
        log.info("OpenEnv port: %s: %s", session.name, why)
        session.close()

        async def tell() -> None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.send_str(protocol.error(Refusal(Code.SESSION_ERROR, f"closed: {why}")).decode())
                await ws.close(code=1000, message=b"replaced by a newer connection with its client id")

        task = asyncio.get_running_loop().create_task(tell())  # (a gone client must not hold the new one)
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def _idle(self, ws: web.WebSocketResponse, session: Session) -> None:
        """``session`` sent nothing for :attr:`idle_timeout` s: tell it why (OpenEnv's client
        raises it at its next call) and close it, letting go of its seat."""
        why = (f"closed: this session sent nothing for {self.idle_timeout:g} s (IDLE_TIMEOUT), "
               "and an idle session holds a place others wait for; connect again to go on")
        self.bad_input.log("closed: idle", logging.INFO, "OpenEnv port: %s %s", session.name, why)
        session.close()  # the seat is free now, not once the closing handshake is done
        await ws.send_str(protocol.error(Refusal(Code.SESSION_ERROR, why)).decode())
        await ws.close(code=1000, message=f"idle for {self.idle_timeout:g} s (IDLE_TIMEOUT)".encode())

    async def _answer(self, session: Session, raw: str | bytes, peer: str) -> bytes | None:
        """The answer to one message (an error for a refused one: the session goes on);
        None for ``close``."""
        try:
            message = protocol.parse_message(raw)
            if message.type == protocol.CLOSE:
                return None
            if message.type == protocol.STATE:
                return protocol.state(session.state())
            if message.type == protocol.MCP:
                return orjson.dumps({"type": "mcp", "data": await self.tools.answer(session, message.data)})
            if message.type == protocol.RESET:
                return protocol.observation(await session.reset(message.data))
            return protocol.observation(await session.step(message.data))
        except Refusal as refusal:
            self.bad_input.log(f"refused {refusal.code.value}", logging.INFO,
                               "OpenEnv port: %s from %s: %s", refusal.code.value, peer, refusal.message)
            return protocol.error(refusal)
        except Exception as exc:  # a bug of ours: answer, log (with a traceback), go on
            return protocol.error(self._bug(exc, peer))

    def _bug(self, exc: Exception, peer: str) -> Refusal:
        self.bad_input.log(f"bug: {type(exc).__name__}", logging.ERROR,
                           "OpenEnv port: handling a message from %s failed", peer, exc_info=exc)
        return Refusal(Code.EXECUTION_ERROR, (
            f"the remote failed to handle this message ({type(exc).__name__}: {str(exc)[:200]}); "
            "this is a bug in the remote, please report it"))

    # HTTP endpoints ------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return _json({"status": "healthy"})

    async def _metadata(self, request: web.Request) -> web.Response:
        remote = self.remote
        return _json({
            "name": remote.env_id, "description": self.description or remote.env_id,
            "version": version.server_version(), "author": "universe-remote",
            "documentation_url": None, "readme_content": None,
            "protocols": PROTOCOLS, "mode": remote.mode,
        })

    async def _schema(self, request: web.Request) -> web.Response:
        spec = Spec.of(self.remote.describe())
        return _json({"action": spec.action_schema(), "observation": spec.observation_schema(),
                      "state": spec.state_schema()})

    async def _state(self, request: web.Request) -> web.Response:
        return _json(self.endpoint.http.state())

    async def _reset(self, request: web.Request) -> web.Response:
        return await self._http(request, lambda body: self.endpoint.http.reset(body))

    async def _step(self, request: web.Request) -> web.Response:
        async def step(body: dict[str, Any]) -> dict[str, Any]:
            extra = sorted(set(body) - {"action", "timeout_s", "request_id"})
            if "action" not in body or not isinstance(body["action"], dict) or extra:
                raise Refusal(Code.VALIDATION_ERROR, (
                    'POST /step takes {"action": {...}} (and OpenEnv\'s timeout_s, request_id), '
                    f"not {str(body)[:120]}"))
            return await self.endpoint.http.step(body["action"])
        return await self._http(request, step)

    async def _http(self, request: web.Request,
                    run: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> web.Response:
        """One POST as the HTTP session, one at a time (its seat is held for the request)."""
        try:
            raw = await self._body(request)
            try:
                body = orjson.loads(raw) if raw.strip() else {}
            except orjson.JSONDecodeError as exc:
                raise Refusal(Code.INVALID_JSON, f"Invalid JSON: {exc}") from None
            if not isinstance(body, dict):
                raise Refusal(Code.VALIDATION_ERROR, "the body is a JSON object")
            async with self._http_lock:
                out = await run(body)
        except Refusal as refusal:
            self.bad_input.log(f"refused {refusal.code.value}", logging.INFO,
                               "OpenEnv port: %s %s from %s: %s", request.method, request.path,
                               request.remote, refusal.message)
            status, data = protocol.http_error(refusal)
            return web.Response(status=status, body=data, content_type=_JSON)
        except Exception as exc:
            status, data = protocol.http_error(self._bug(exc, str(request.remote)))
            return web.Response(status=status, body=data, content_type=_JSON)
        return web.Response(body=orjson.dumps(out, option=protocol.DUMP_OPTIONS, default=str),
                            content_type=_JSON)

    async def _frame(self, request: web.Request) -> web.Response:
        """The screen as a PNG; ``/frame/{n}``: only while frame n is the newest."""
        remote = self.remote
        number = request.match_info.get("number")
        if number is not None and not (number.isascii() and number.isdigit()
                                       and len(number) <= MAX_FRAME_DIGITS):
            refusal = Refusal(Code.UNKNOWN_TYPE, (
                f"no frame {number[:20]!r}: /frame/N takes a frame's number, at most "
                f"{MAX_FRAME_DIGITS} digits 0-9 (the newest is {remote.frame}; GET /frame for it)"),
                frame=remote.frame)
            self.bad_input.log("refused: frame number", logging.INFO, "OpenEnv port: %s %s from %s: %s",
                               request.method, request.path[:60], request.remote, refusal.message)
            status, body = protocol.http_error(refusal)
            return web.Response(status=status, body=body, content_type=_JSON)
        if number is not None and int(number) != remote.frame:
            status, body = protocol.http_error(Refusal(Code.UNKNOWN_TYPE, (
                f"frame {number[:20]} is not the newest: the remote keeps only its newest frame, "
                f"{remote.frame} (GET /frame for it)"), frame=remote.frame))
            return web.Response(status=status, body=body, content_type=_JSON)
        png = frames.png_bytes(remote.screen())
        return web.Response(body=png, content_type="image/png", headers={
            "X-Frame": str(remote.frame), "X-Episode": str(remote.episode_id), "Cache-Control": "no-store",
        })

    async def _openapi(self, request: web.Request) -> web.Response:
        def op(summary: str) -> dict[str, Any]:
            return {"summary": summary, "responses": {"200": {"description": "OK"}}}
        paths = {
            "/reset": {"post": op("Reset the environment (as the HTTP session)")},
            "/step": {"post": op("Step the environment (as the HTTP session)")},
            "/state": {"get": op("The remote's state")},
            "/schema": {"get": op("JSON schemas of action, observation and state")},
            "/metadata": {"get": op("The environment, the server's version, the protocols")},
            "/health": {"get": op("Health check")},
            "/frame": {"get": op("The screen as a PNG")},
            "/mcp": {"post": op("MCP's JSON-RPC: tools/list, tools/call")},
        }
        return _json({"openapi": "3.1.0", "paths": paths, "info": {
            "title": f"universe-remote OpenEnv port ({self.remote.env_id})", "version": API_VERSION}})

    async def _body(self, request: web.Request) -> bytes:
        """A POST's body; :class:`Refusal` past MAX_MESSAGE_BYTES (``TOO_LARGE``, 413) or when
        it does not arrive within the request deadline (``TOO_SLOW``, 408)."""
        try:
            return await self.http.read_body(request)
        except web.HTTPRequestEntityTooLarge:
            raise protocol.too_large(request.content_length) from None
        except TimeoutError:
            raise Refusal(Code.TOO_SLOW, f"the request's body did not arrive within "
                          f"{self.http.deadlines.request:g} s; send it whole") from None

    async def _mcp(self, request: web.Request) -> web.Response:
        """MCP's JSON-RPC, one request a client (its seat ends with it): the computer-use tools."""
        try:
            asked = orjson.loads(await self._body(request))
        except orjson.JSONDecodeError:
            asked = None
        except Refusal as refusal:
            status, body = protocol.http_error(refusal)
            return web.Response(status=status, body=body, content_type=_JSON)
        return _json(await self.tools.answer_once(asked))


def _json(body: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(body, default=str), content_type=_JSON,
                        headers={"Cache-Control": "no-store"})
