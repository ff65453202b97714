"""The MCP endpoint of a remote (``serve ENV --mcp-port N``): streamable HTTP at ``/mcp``.

The remote speaks MCP's streamable HTTP transport itself (aiohttp, on the remote's
event loop): ``POST`` a JSON-RPC message, answered as JSON; ``GET`` the session's
event stream (a heartbeat only: the tools never call the host); ``DELETE`` ends the
session. No MCP SDK runs here, so a remote serves hosts on any SDK major (the official
Python SDK's 1.x and 2.x clients, TypeScript's) and a new SDK release cannot break it;
its answers are :mod:`.jsonrpc`'s, the same as OpenEnv's MCP messages.

**Sessions are leases** (:mod:`.leases`): a session lives while it has a request in
flight or its event stream open; then ``lease`` seconds (``serve --mcp-lease``, 30 by
default) and it ends, letting go of its seat. A full port answers 503 with
``Retry-After``; while nobody drives it ends its quietest watcher instead. The driver
may hand the seat back (the ``seat`` tool, ``release``); on a remote with a password,
another session may take it over (``take_over``).

**Password** (``serve --password``): ``Authorization: Bearer <password>`` (or the
rewarder's Basic form) on every request; wrong ones count toward the remote's
failed-password throttle (HTTP 429 says for how long). **Web pages** (an ``Origin``
header) are refused unless ``serve --allow-origin`` names them. **TLS**: the remote's
certificate (https://). **Client ids**: a session opened with ``openai-client-id``
replaces open ones with that id; ``DELETE`` with the id and ``universe-remote-take-back:
true`` (a warm pool taking its remote back) ends them and retires the id (a later
``initialize`` with it is refused, 409). **Connections** that idle or whose request never finishes arriving
are closed (:mod:`envserver.http_deadlines`). The listener, TLS and those checks are
:mod:`envserver.http_port`'s, shared with the viewer and OpenEnv.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Final

import orjson
from aiohttp import web

from rewarder.lograte import RateLimitedLog
from vncdriver.server import AuthGuard

from .. import version
from ..agent_port import RemoteLike
from ..http_deadlines import IDLE_TIMEOUT as CONNECTION_IDLE, REQUEST_TIMEOUT, Deadlines
from ..http_port import (
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
from . import jsonrpc
from .leases import LEASE, Full, Lease, Leases, heartbeat
from .tools import Client, Desk

log = logging.getLogger(__name__)

#: The port ``serve --mcp-port`` takes when given none.
DEFAULT_PORT: Final = 8800
#: The path MCP hosts connect to (``http://host:port/mcp``, the SDK's and hosts' default).
PATH: Final = "/mcp"
#: MCP sessions at once (one drives; the rest watch). Past it a new session gets a 503.
MAX_SESSIONS: Final = 16
#: Bytes of one request's body (a tool call is small; a long ``type`` text is 2000 chars).
MAX_REQUEST_BYTES: Final = 1 << 20
#: Ended sessions whose reason a late request is told (the newest).
MAX_ENDED_REMEMBERED: Final = 256
#: What the 400 to plain http:// on a TLS port says to do.
TLS_HINT: Final = "use {url} (the MCP host must trust the remote's certificate)"
SERVER_NAME: Final = "universe-remote"
SESSION_HEADER: Final = "Mcp-Session-Id"
VERSION_HEADER: Final = "MCP-Protocol-Version"
_JSON: Final = "application/json"


class MCPServer:
    """MCP for one remote: ``await start(host, port)``, ``await close(reason)``."""

    def __init__(
        self,
        remote: RemoteLike,
        *,
        password: str | None = None,
        auth_guard: AuthGuard | None = None,
        tls: ssl.SSLContext | None = None,
        allow_origins: Iterable[str] = (),
        lease: float = LEASE,
    ) -> None:
        self.remote = remote
        self.desk = Desk(remote, take_over=password is not None)
        self.password, self.auth_guard, self.tls = password, auth_guard, tls
        self.allow_origins = allowed_origins(allow_origins)
        self.leases: Leases[Client] = Leases(MAX_SESSIONS, lease)
        self.http = HTTPPort("the MCP port", TLS_HINT, tls,
                             Deadlines(min(CONNECTION_IDLE, lease), min(REQUEST_TIMEOUT, lease)))
        self.deadlines = self.http.deadlines
        self.instructions = (f"The screen of the remote {remote.env_id}: the computer tool acts on it and "
                             "answers with the settled screenshot and reward.")
        self.bad_input = RateLimitedLog(log)
        self._reaper: asyncio.TimerHandle | None = None
        self._closing: str | None = None
        self._ended = asyncio.Event()  # set (and replaced) whenever a session ends
        #: Why recently ended sessions ended, for their hosts' next request (the 404 says).
        self._why_ended: OrderedDict[str, str] = OrderedDict()
        #: Client ids a pool took back here: their sessions are refused.
        self.retired = Retired()

    def held_by(self) -> str | None:
        """Which MCP client drives the remote (the other front ends ask)."""
        return self.desk.held_by()

    @property
    def port(self) -> int:
        return self.http.port

    async def start(self, host: str, port: int) -> None:
        app = web.Application(middlewares=[self.http.watch], client_max_size=MAX_REQUEST_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        await self.http.start(app, host, port)
        self._reap_later()

    async def close(self, reason: str = "the remote is shutting down") -> None:
        if self._closing is not None:
            return
        self._closing = reason
        if self._reaper is not None:
            self._reaper.cancel()
        for session in list(self.leases.sessions.values()):
            self._end(session, reason)
        await self.http.close()
        self.bad_input.close()
        log.debug("MCP port closed: %s", reason)

    # Leases -------------------------------------------------------------------------------

    def _end(self, session: Lease[Client], why: str) -> None:
        if self.leases.end(session, why):
            self._why_ended[session.id] = why
            while len(self._why_ended) > MAX_ENDED_REMEMBERED:
                self._why_ended.popitem(last=False)
            session.holder.close()
            self._ended.set()
            self._ended = asyncio.Event()
            log.info("MCP port: %s ended: %s", session.holder.name, why)

    def _reap_later(self) -> None:
        self._reaper = asyncio.get_running_loop().call_later(min(1.0, self.leases.lease / 4), self._reap)

    def _reap(self) -> None:
        for session in self.leases.expired(time.monotonic()):
            self._end(session, f"no request and no open event stream for {self.leases.lease:g} s (its lease)")
        self._reap_later()

    # Requests -----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path != PATH:
            return _error(404, jsonrpc.INVALID_REQUEST, f"no such path; MCP is at {PATH}")
        status, why = self._refusal(request)
        if status:
            self.bad_input.log(f"refused {status}", logging.INFO, "MCP port: refused %s from %s: %s",
                               request.method, request.remote, why)
            extra = {"WWW-Authenticate": 'Bearer realm="universe-remote"'} if status == 401 else {}
            return _error(status, -32001, why, extra)
        if request.method == "POST":
            return await self._post(request)
        if request.method == "GET":
            return await self._stream(request)
        if request.method == "DELETE" and SESSION_HEADER not in request.headers and taking_back(request):
            return self._take_back(client_id(request))
        if request.method == "DELETE":
            session = self.leases.get(request.headers.get(SESSION_HEADER))
            if session is None:
                return _error(404, jsonrpc.INVALID_REQUEST, _UNKNOWN_SESSION)
            self._end(session, "its host ended it (DELETE)")
            return web.Response(status=200)
        return _error(405, jsonrpc.INVALID_REQUEST, "MCP takes POST, GET and DELETE",
                      {"Allow": "POST, GET, DELETE"})

    async def _post(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self.http.read_body(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, jsonrpc.INVALID_REQUEST, f"a request is at most {MAX_REQUEST_BYTES} bytes "
                          "(MAX_REQUEST_BYTES)")
        except TimeoutError:
            return _error(408, jsonrpc.INVALID_REQUEST, f"the request's body did not arrive within "
                          f"{self.deadlines.request:g} s")
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _error(400, jsonrpc.PARSE_ERROR, f"Parse error: the body is not JSON ({str(exc)[:120]}): "
                          "send one JSON-RPC message")
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(400, jsonrpc.INVALID_REQUEST, 'one JSON-RPC 2.0 message per POST: {"jsonrpc": '
                          '"2.0", "id": 1, "method": "tools/list"}')
        ident, method = message.get("id"), message.get("method")
        if not isinstance(method, str):  # a response to a request of ours (we send none)
            return web.Response(status=202)
        session_id = request.headers.get(SESSION_HEADER)
        if session_id is None:
            if method == "initialize" and "id" in message:
                return await self._open(request, message)
            if method.startswith("notifications/"):
                return web.Response(status=202)
            code = jsonrpc.INVALID_REQUEST if method in jsonrpc.METHODS else jsonrpc.METHOD_NOT_FOUND
            return _error(400, code, f"no session: send initialize first (then its {SESSION_HEADER} "
                          f"header with every request); {method[:40]!r} is not served without one",
                          ident=ident)
        session = self.leases.get(session_id)
        if session is None:
            return _error(404, jsonrpc.INVALID_REQUEST, self._unknown(session_id), ident=ident)
        if "id" not in message:  # a notification
            session.last = time.monotonic()
            return web.Response(status=202)
        self.leases.begin(session, time.monotonic())
        try:
            if method == "initialize":
                answer = jsonrpc.result(ident, self._initialized(message))
            else:
                answer = await jsonrpc.answer(self.desk, session.holder, message)
        except Exception as exc:  # a bug of ours: the host is told, logged once per kind per interval
            self.bad_input.log(f"bug {type(exc).__name__}", logging.ERROR, "MCP port: %s failed", method,
                               exc_info=exc)
            answer = jsonrpc.error(ident, jsonrpc.INTERNAL_ERROR,
                                   f"the remote failed to answer {method[:40]}: {exc!r}"[:300])
        finally:
            self.leases.finish(session, time.monotonic())
        return web.Response(body=orjson.dumps(answer), content_type=_JSON)

    def _take_back(self, ident: str) -> web.Response:
        """A pool's take-back (``DELETE`` with the lease's client id and
        ``universe-remote-take-back: true``): that id's sessions end and it is retired."""
        if not ident:
            return _error(400, jsonrpc.INVALID_REQUEST, "a take-back names the client id (openai-client-id)")
        ended = self.leases.with_client_id(ident)
        for session in ended:
            self._end(session, TAKEN_BACK)
        self.retired.add(ident)
        return web.Response(body=orjson.dumps({"ended": len(ended)}), content_type=_JSON)

    async def _open(self, request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        """``initialize`` without a session: a new session if there is room. One with the
        ``openai-client-id`` of open sessions replaces them (as on the rewarder): how a warm
        pool takes its remote back from a session whose lease ended."""
        ident = client_id(request)
        if ident in self.retired:
            return _error(409, jsonrpc.INTERNAL_ERROR, TAKEN_BACK, ident=message.get("id"))
        for older in self.leases.with_client_id(ident):
            self._end(older, REPLACED)
        room = self.leases.room(time.monotonic(), seat_free=self.desk.seat_free(), is_driver=self.desk.driver)
        if isinstance(room, Full):
            self.bad_input.log("full", logging.INFO, "MCP port: %s", room.message)
            return _error(503, jsonrpc.INTERNAL_ERROR, room.message, {"Retry-After": str(room.retry_after)},
                          ident=message.get("id"))
        if room is not None:
            self._end(room, f"the port was full ({MAX_SESSIONS} sessions) and nobody drove: the watcher "
                            "quiet longest made room for a new session")
        client = self.desk.client(str(request.remote or ""))
        session = self.leases.add(client, time.monotonic(), ident)
        body = orjson.dumps(jsonrpc.result(message.get("id"), self._initialized(message)))
        return web.Response(body=body, content_type=_JSON, headers={SESSION_HEADER: session.id})

    def _initialized(self, message: dict[str, Any]) -> dict[str, Any]:
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        return {"protocolVersion": jsonrpc.negotiate(params.get("protocolVersion")),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": SERVER_NAME, "version": version.server_version()},
                "instructions": self.instructions}

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        """The session's event stream: a heartbeat comment until the session or the host ends."""
        session = self.leases.get(request.headers.get(SESSION_HEADER))
        if session is None:
            return _error(404 if SESSION_HEADER in request.headers else 400, jsonrpc.INVALID_REQUEST,
                          _UNKNOWN_SESSION)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache", SESSION_HEADER: session.id})
        await response.prepare(request)
        self.leases.begin(session, time.monotonic(), stream=True)
        every = heartbeat(self.leases.lease)
        try:
            while session.ended is None and self._closing is None:
                ended = self._ended
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), every)
                transport = request.transport
                if transport is None or transport.is_closing():
                    break  # the host is gone: the lease runs
                await response.write(b": heartbeat\n\n")
        except (ConnectionError, RuntimeError):
            pass  # the host is gone
        finally:
            self.leases.finish(session, time.monotonic(), stream=True)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
        return response

    def _unknown(self, session_id: str) -> str:
        """What a request to a session that is not open is told (why it ended, if known)."""
        why = self._why_ended.get(session_id)
        if why is None:
            return _UNKNOWN_SESSION
        return f"this session ended: {why}; send initialize without a session id to open a new one"

    def _refusal(self, request: web.Request) -> tuple[int, str]:
        why = origin_refusal(request, self.allow_origins)
        if why is not None:
            return 403, why
        if self.password is None:
            return 0, ""
        how = "universe-remote mcp ADDRESS --password ..., or the host's headers setting"
        refused = password_refusal(request, self.password, self.auth_guard, "the MCP port", how)
        return refused or (0, "")


_UNKNOWN_SESSION: Final = ("no such session: it ended (its host's DELETE, its lease ran out, or the remote "
                           "restarted); send initialize without a session id to open a new one")


def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None,
           ident: Any = None) -> web.Response:
    """A JSON-RPC error body (what MCP clients show) with an HTTP status."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}})
    return web.Response(status=status, body=body, content_type=_JSON, headers=headers)
