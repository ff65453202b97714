"""The MCP endpoint of a remote (``serve ENV --mcp-port N``): streamable HTTP at ``/mcp``.

A thin shell: the official SDK's lowlevel :class:`mcp.server.lowlevel.Server` (its
``tools/list`` and ``tools/call`` answered by :class:`.tools.Desk`) behind its
:class:`~mcp.server.streamable_http_manager.StreamableHTTPSessionManager`, served by
uvicorn's HTTP protocol on the remote's own event loop (the listener is ours, made with
``loop.create_server``, so uvicorn installs no signal handlers and never exits the
process). Each MCP session is one :class:`.tools.Client`, made when the session starts
(the SDK's per-session lifespan) and closed when it ends — a client's ``DELETE``, the
idle timeout, the port closing — which lets go of its seat.

**Password** (``serve --password``): ``Authorization: Bearer <password>`` (or the
rewarder's Basic form) on every request, checked before the SDK sees it; wrong ones
count toward the remote's failed-password throttle like on every port (HTTP 429 says
for how long). **Web pages** (an ``Origin`` header) are refused unless ``serve
--allow-origin`` names them. **TLS**: the remote's certificate (https://), through
:class:`rewarder.tls.TLSPort`, so plain http:// gets a 400 saying so. **Limits**:
MAX_SESSIONS sessions; a session idle for IDLE_TIMEOUT s is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final

import orjson

from rewarder.auth import given_password
from rewarder.lograte import RateLimitedLog
from rewarder.tls import TLSPort
from vncdriver.server import AuthGuard

from .. import version
from ..agent_port import RemoteLike
from .errors import ToolError
from .tools import Client, Desk, tool_list

log = logging.getLogger(__name__)

#: The port ``serve --mcp-port`` takes when given none.
DEFAULT_PORT: Final = 8800
#: The path MCP hosts connect to (``http://host:port/mcp``, the SDK's and hosts' default).
PATH: Final = "/mcp"
#: MCP sessions at once (one drives; the rest watch). Past it a new session gets a 503.
MAX_SESSIONS: Final = 16
#: Seconds a session may make no request before it is closed (its seat let go): long
#: enough for a model's turn, short enough that a vanished host frees the remote.
IDLE_TIMEOUT: Final = 600.0
#: Bytes of one request's body (a tool call is small; a long ``type`` text is 2000 chars).
MAX_REQUEST_BYTES: Final = 1 << 20
#: Seconds a closing port gives open connections.
SHUTDOWN_TIMEOUT: Final = 2.0
#: What the 400 to plain http:// on a TLS port says to do.
TLS_HINT: Final = "use {url} (the MCP host must trust the remote's certificate)"
SERVER_NAME: Final = "universe-remote"


def build_server(desk: Desk, peer_of: Any = None) -> Any:
    """The SDK's lowlevel server over ``desk``: one :class:`Client` per session."""
    from mcp import types
    from mcp.server.lowlevel import Server

    @contextlib.asynccontextmanager
    async def session(_: Any) -> AsyncIterator[Client]:
        client = desk.client()
        try:
            yield client
        finally:
            client.close()

    server: Any = Server(SERVER_NAME, version=version.server_version(), lifespan=session,
                         instructions=(f"The screen of the remote {desk.remote.env_id}: the computer "
                                       "tool acts on it and answers with the settled screenshot and reward."))

    @server.list_tools()
    async def list_tools() -> list[Any]:
        return [types.Tool.model_validate(tool) for tool in tool_list(desk.remote)]

    # The desk checks the arguments itself, naming what was wrong (the SDK's check runs
    # jsonschema's meta-schema check of the whole schema on every call: most of a call's time).
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        client: Client = server.request_context.lifespan_context
        try:
            content = await desk.call(client, name, arguments)
        except ToolError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], isError=True)
        return types.CallToolResult(content=[_content(types, c) for c in content], isError=False)

    return server


def _content(types: Any, item: dict[str, Any]) -> Any:
    if item["type"] == "image":
        return types.ImageContent.model_validate(item)
    return types.TextContent.model_validate(item)


class _ClosedStreamNoise(logging.Filter):
    """Drops the SDK's traceback for a session ended under its open GET stream (a client's
    DELETE, the port closing: the python-sdk's issue #2150), which is no fault of anyone."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (record.getMessage() == "Error in standalone SSE writer"
                    and type(error).__name__ == "ClosedResourceError")


_NOISE: Final = _ClosedStreamNoise()


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
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.remote = remote
        self.desk = Desk(remote)
        self.password, self.auth_guard, self.tls = password, auth_guard, tls
        self.allow_origins = frozenset(o.rstrip("/").lower() for o in allow_origins)
        # Answers as plain JSON, not an SSE stream per call: a tool call is one request and
        # one response (nothing streams meanwhile), at a fraction of the round trip.
        self.manager = StreamableHTTPSessionManager(
            build_server(self.desk), session_idle_timeout=idle_timeout, json_response=True,
            max_sessions=MAX_SESSIONS, max_request_body_size=MAX_REQUEST_BYTES)
        self.bad_input = RateLimitedLog(log)
        logging.getLogger("mcp.server.streamable_http").addFilter(_NOISE)  # (once: one object)
        self.tls_port: TLSPort | None = None
        self._listener: asyncio.Server | None = None
        self._state: Any = None
        self._running: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def held_by(self) -> str | None:
        """Which MCP client drives the remote (the other front ends ask)."""
        return self.desk.held_by()

    @property
    def port(self) -> int:
        assert self._listener is not None, "call start() first"
        return int(self._listener.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        import uvicorn
        from uvicorn.server import ServerState

        started = asyncio.get_running_loop().create_future()
        self._running = asyncio.get_running_loop().create_task(self._run_manager(started))
        await started
        config = uvicorn.Config(
            self._asgi, interface="asgi3", lifespan="off", access_log=False, log_level="warning",
            http="h11", ws="none", proxy_headers=False, server_header=False)
        config.load()
        self._state = state = ServerState()

        def protocol() -> asyncio.Protocol:
            made: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=state, app_state={})
            return made

        factory: Any = protocol
        if self.tls is not None:
            self.tls_port = TLSPort(self.tls, scheme="https", where="the MCP port", hint=TLS_HINT)
            factory = self.tls_port.factory(protocol)
        try:
            self._listener = await asyncio.get_running_loop().create_server(factory, host, port)
        except OSError:
            await self.close("the port could not be bound")
            raise

    async def _run_manager(self, started: asyncio.Future[None]) -> None:
        """The session manager's task group lives in this task, from start to close."""
        async with self.manager.run():
            started.set_result(None)
            await self._stop.wait()

    async def close(self, reason: str = "the remote is shutting down") -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        if self._state is not None:
            for connection in list(self._state.connections):
                connection.shutdown()
        if self._running is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._running, SHUTDOWN_TIMEOUT)
        if self.tls_port is not None:
            self.tls_port.close()
        self.bad_input.close()
        log.debug("MCP port closed: %s", reason)

    # The ASGI app: the guard, then the SDK ---------------------------------------------------

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        peer = (scope.get("client") or ("?", 0))[0]
        if scope.get("path") != PATH:
            return await _respond(send, 404, f"no such path; MCP is at {PATH}")
        status, why = self._refusal(headers, peer)
        if status:
            self.bad_input.log(f"refused {status}", logging.INFO, "MCP port: refused %s from %s: %s",
                               scope.get("method"), peer, why)
            extra = [(b"www-authenticate", b'Bearer realm="universe-remote"')] if status == 401 else []
            return await _respond(send, status, why, extra)
        await self.manager.handle_request(scope, receive, send)

    def _refusal(self, headers: dict[str, str], peer: str) -> tuple[int, str]:
        origin = headers.get("origin")
        if origin is not None and origin.rstrip("/").lower() not in self.allow_origins:
            return 403, (f"this port does not serve web pages (Origin: {origin[:200]}): any site open in "
                         f"a browser here could drive the remote; serve with --allow-origin {origin[:200]} "
                         "to allow it")
        if self.password is None:
            return 0, ""
        guard = self.auth_guard
        given = given_password(headers.get("authorization"))
        blocked = guard.admit(peer) if guard is not None else None
        if blocked is not None:
            return 429, blocked
        if given is None:
            if guard is not None:
                guard.abandoned(peer)
            return 401, ("this remote needs a password: send the header 'Authorization: Bearer "
                         "<password>' (universe-remote mcp ADDRESS --password ..., or the host's "
                         "headers setting)")
        if not hmac.compare_digest(given.encode(), self.password.encode()):
            if guard is not None:
                guard.failed(peer, "the MCP port")
            return 401, "wrong password for this remote"
        if guard is not None:
            guard.succeeded(peer)
        return 0, ""


async def _respond(
    send: Any, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A JSON-RPC error body (what MCP clients show) with an HTTP status."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": message}})
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
