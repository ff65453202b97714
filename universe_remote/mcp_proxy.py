"""``universe-remote mcp ADDRESS``: a running remote's computer-use tools over stdio.

MCP hosts that launch their tools as processes (Claude Desktop, Claude Code's ``claude
mcp add``, the OpenAI Agents SDK's ``MCPServerStdio``) start this command; it is an MCP
server on stdin/stdout whose ``tools/list`` and ``tools/call`` are the remote's own,
relayed over its MCP port (``serve ENV --mcp-port``; docs/computer-use.md).

Why a relay and not a client of the rewarder and VNC: the tools — who drives, settling,
rewards, recordings, the page's structure — live in the remote once
(:mod:`envserver.computer_use`), so both transports answer alike.

**The remote may go away; the host's session does not.** The relay holds a session of
the remote's (and its event stream, so the remote knows the host is there); when the
remote stops or restarts it opens a new one on the same address as soon as the remote
answers, while the host's session with the relay goes on. A call made while the remote
is down is a tool error at once saying so; a call the remote dropped mid-way says it may
or may not have been done.

**From a warm pool** (``universe-remote mcp pool://HOST:PORT --env-id ENV_ID``, a pool
started with ``--mcp``): the relay claims a remote for its session and holds the lease
(:mod:`remotes.pool.sessions`: renewed in the background, released when the host closes
stdin), its requests carrying the lease's client id. A relay that dies frees its remote
within the pool's deadline: the pool takes it back (ending the session by that id) and
resets it. A lease that ended while the relay lives (the pool's maximum age, a renewal
that came too late) is told to the host at its next call, as a tool error naming the
lease and why; the relay then claims another remote (a new episode) and never calls the
old one again.

Both sides are plain JSON-RPC (MCP's stdio framing: a message per line; its streamable
HTTP: ``POST``/``GET``/``DELETE`` on ``/mcp``), spoken here with aiohttp: no MCP SDK, so
the relay works beside any SDK major a host has installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import ssl
import sys
from typing import Any, Final
from urllib.parse import urlsplit

import orjson

from rewarder.auth import PASSWORD_ENV

log = logging.getLogger(__name__)

#: The path of the remote's MCP endpoint.
PATH: Final = "/mcp"
#: Seconds to wait for the remote's answer to a tool call (a long ``wait`` and a settle).
CALL_TIMEOUT: Final = 120.0
#: Seconds to connect to the remote.
CONNECT_TIMEOUT: Final = 30.0
#: Seconds between two tries to reach a remote that is down (its event stream's reconnects),
#: doubling while it stays down up to MAX_RECONNECT_INTERVAL (a remote refusing the password
#: is not asked every second: its throttle would block this address). A call never waits
#: for these: it connects at once.
RECONNECT_INTERVAL: Final = 1.0
MAX_RECONNECT_INTERVAL: Final = 10.0
#: Seconds a pooled connection to the remote is reused: under the remote's shortest idle
#: deadline (1 s), so a call never goes out on a connection the remote is closing.
KEEPALIVE: Final = 0.5
#: Bytes of one line from the host (a tool call is small; MCP's own limit is generous).
MAX_LINE_BYTES: Final = 4 << 20
#: The MCP protocol versions the relay speaks to its host (the handshake's), oldest first.
PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SESSION_HEADER: Final = "Mcp-Session-Id"
METHOD_NOT_FOUND: Final = -32601
INTERNAL_ERROR: Final = -32603


def mcp_url(address: str) -> str:
    """``host:port`` or a URL (``https://host:port``; ``/mcp`` added when it has no path)."""
    if "://" not in address:
        address = f"http://{address}"
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise ValueError(f"the remote's MCP port is HOST:PORT or http(s)://HOST:PORT/mcp, not {address!r}")
    return address if parts.path not in ("", "/") else f"{parts.scheme}://{parts.netloc}{PATH}"


class Down(Exception):
    """The remote cannot be reached, or dropped a call: the message says which."""


class Refused(Exception):
    """The remote answered an HTTP error (a wrong password, a full port): not a reconnect."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RemoteLink:
    """The relay's session with the remote, opened again whenever the remote lost it."""

    def __init__(self, url: str, password: str | None = None, ca: str | None = None,
                 headers: dict[str, str] | None = None, reopen: bool = True) -> None:
        """``headers``: sent with every request besides the password's. ``reopen``: open a
        new session when the remote lost this one (False for a pooled remote: a session
        the pool ended must not come back on a remote it gave to someone else)."""
        import aiohttp

        self.url = url
        self.headers = {"Authorization": f"Bearer {password}"} if password else {}
        self.headers.update(headers or {})
        self.reopen = reopen
        self.ssl: Any = ssl.create_default_context(cafile=ca) if ca else None
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE),
            timeout=aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT, sock_read=CALL_TIMEOUT))
        self.session_id: str | None = None
        self.info: dict[str, Any] = {}
        self.tools: dict[str, Any] | None = None  # the last tools/list, for when the remote is down
        self._numbers = 0
        self._opening: asyncio.Lock = asyncio.Lock()
        self._stream: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stream
        if self.session_id is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self.http.delete(self.url, headers=self._headers(), ssl=self.ssl)
        await self.http.close()

    def _headers(self) -> dict[str, str]:
        headers = {**self.headers, "Accept": "application/json, text/event-stream"}
        if self.session_id is not None:
            headers[SESSION_HEADER] = self.session_id
        return headers

    async def open(self, lost: str | None = None) -> None:
        """A session of the remote's, new unless one is open that is not ``lost``
        (:class:`Down`, :class:`Refused`)."""
        async with self._opening:
            if self.session_id is not None and self.session_id != lost:
                return  # (another task opened one meanwhile)
            self.session_id = None
            answer, session_id = await self._post("initialize", {
                "protocolVersion": PROTOCOL_VERSIONS[-1], "capabilities": {},
                "clientInfo": {"name": "universe-remote mcp", "version": "relay"}})
            self.session_id = session_id
            self.info = answer.get("result") or {}
            with contextlib.suppress(Down, Refused):
                await self._post("notifications/initialized", None, notify=True)
                listed, _ = await self._post("tools/list", None)  # kept for while the remote is down
                if "result" in listed:
                    self.tools = listed["result"]
            if self._stream is None or self._stream.done():
                self._stream = asyncio.get_running_loop().create_task(self._hold_stream())

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """The remote's JSON-RPC answer to ``method``; a new session first when it has none or
        lost it (a restart). :class:`Down` when it cannot be reached."""
        if self.session_id is None:
            await self.open()
        used = self.session_id
        try:
            answer, _ = await self._post(method, params)
        except Refused as exc:
            if exc.status != 404 or not self.reopen:
                raise
            await self.open(lost=used)  # the remote forgot the session (restarted, lease ran out)
            answer, _ = await self._post(method, params)
        return answer

    async def _post(self, method: str, params: dict[str, Any] | None,
                    notify: bool = False) -> tuple[dict[str, Any], str | None]:
        import aiohttp

        self._numbers += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            message["id"] = self._numbers
        sent = False
        try:
            async with self.http.post(self.url, data=orjson.dumps(message), ssl=self.ssl,
                                      headers={**self._headers(), "Content-Type": "application/json"}) as r:
                sent = True
                body = await r.read()
                if r.status >= 400:
                    raise Refused(r.status, _said(r.status, body))
                if notify or r.status == 202:
                    return {}, None
                answer: dict[str, Any] = orjson.loads(body)
                return answer, r.headers.get(SESSION_HEADER)
        except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
            self.session_id = None
            raise Down(f"the remote at {self.url} is not answering ({_short(exc)}): the call was not "
                       "made; the relay connects again on the next call") from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            self.session_id = None
            what = "before answering" if sent else "while the call was sent"
            raise Down(f"the remote at {self.url} dropped the connection {what} ({_short(exc)}): it "
                       "stopped or restarted; the call may or may not have been done (state tells); "
                       "the relay connects again on the next call") from None

    async def _hold_stream(self) -> None:
        """Keep the session's event stream open (the remote's sign that the host is there);
        when the remote is lost, open a new session as soon as it answers again."""
        import aiohttp

        pause = RECONNECT_INTERVAL
        while True:
            try:
                if self.session_id is None:
                    if not self.reopen:
                        return  # (a pooled remote's session ended: the lease says why)
                    await self.open()
                async with self.http.get(self.url, headers=self._headers(), ssl=self.ssl,
                                         timeout=aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT)) as r:
                    if r.status == 404 and not self.reopen:
                        return
                    if r.status == 404:
                        await self.open(lost=r.request_info.headers.get(SESSION_HEADER))
                        continue
                    if r.status < 400:
                        pause = RECONNECT_INTERVAL  # it was up
                        async for _ in r.content.iter_any():
                            pass  # heartbeats; the tools never call the host
            except (Down, Refused, aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.debug("the remote's event stream: %s", exc)
            await asyncio.sleep(pause)  # a retry's pace, not a synchronisation
            pause = min(MAX_RECONNECT_INTERVAL, pause * 2)


class LeaseLost(Down):
    """The pool ended this session's lease: the call was not made (the message says why
    and what the relay did about it)."""


class LeasedLink:
    """The relay's session on a remote leased from a pool (``mcp pool://...``): a
    :class:`RemoteLink` to the lease's remote, moved to another remote when the lease ends
    (:class:`LeaseLost` for the call that finds it)."""

    def __init__(self, lease: Any, ca: str | None = None) -> None:
        self.lease, self.ca = lease, ca
        self.link = self._connect()
        self._moving = asyncio.Lock()

    def _connect(self) -> RemoteLink:
        from rewarder.protocol import CLIENT_ID_HEADER

        lease = self.lease
        return RemoteLink(lease.mcp_url, lease.password, self.ca,
                          headers={CLIENT_ID_HEADER: lease.client_id}, reopen=False)

    @property
    def info(self) -> dict[str, Any]:
        return self.link.info

    @property
    def tools(self) -> dict[str, Any] | None:
        return self.link.tools

    @tools.setter
    def tools(self, value: dict[str, Any] | None) -> None:
        self.link.tools = value

    async def open(self) -> None:
        await self.link.open()

    async def close(self) -> None:
        await self.link.close()
        await asyncio.to_thread(self.lease.close)

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """The remote's answer; :class:`LeaseLost` when the lease ended (before or during)."""
        held = self.lease.lease
        if self.lease.lost is None:
            try:
                return await self.link.request(method, params)
            except (Down, Refused) as exc:  # a session ended or a remote gone: the pool's doing?
                if await asyncio.to_thread(self.lease.check) is None:
                    if isinstance(exc, Refused) and exc.status == 404:
                        raise Down(f"{exc}; the lease {held} is alive: the call was not made") from None
                    raise
        await self._move(held)
        raise AssertionError("unreachable")

    async def _move(self, held: str) -> None:
        """Say the lease ended and claim another remote (once, however many calls saw it)."""
        from remotes.pool.client import PoolError

        async with self._moving:
            why, old = self.lease.lost, self.link
            if self.lease.lease != held:  # another call moved already
                raise LeaseLost(f"this session's pool lease {held} ended: the call was not made; the "
                                f"relay moved to another remote ({self.lease.address}): reset it to go on")
            with contextlib.suppress(Exception):
                await old.close()
            try:
                await asyncio.to_thread(self.lease.replace)
                self.link = self._connect()
                await self.link.open()
                then = (f"the relay claimed another remote ({self.lease.address}; a new episode): reset "
                        "it to go on")
            except (PoolError, Down, Refused) as exc:
                then = f"no other remote could be claimed yet ({exc}); the next call tries again"
            raise LeaseLost(f"this session's pool lease {held} ended ({why}): the pool took its remote "
                            f"back, and the call was not made; {then}")


def _said(status: int, body: bytes) -> str:
    """The remote's error message (its JSON-RPC error body), or what the status means."""
    said = ""
    with contextlib.suppress(Exception):
        said = str(orjson.loads(body)["error"]["message"])
    meaning = {401: "a missing or wrong password (--password)", 429: "too many wrong passwords: "
               "this address is blocked for a while", 403: "a web page's Origin"}.get(status, "")
    return f"the remote answered HTTP {status}: " + "; ".join(w for w in (meaning, said) if w)


def _short(exc: BaseException) -> str:
    return str(exc)[:200] or type(exc).__name__


class Relay:
    """The MCP server on stdio: each host request answered from the remote's."""

    def __init__(self, link: RemoteLink | LeasedLink, write: Any) -> None:
        self.link, self.write = link, write
        self.tasks: set[asyncio.Task[None]] = set()

    def received(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self.write({"jsonrpc": "2.0", "id": None,
                        "error": {"code": -32700, "message": f"Parse error: {exc}"}})
            return
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            return  # a notification (initialized, cancelled) or a response: nothing to answer
        task = asyncio.get_running_loop().create_task(self._answer(message))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, message: dict[str, Any]) -> None:
        ident, method = message["id"], message["method"]
        params = message.get("params") if isinstance(message.get("params"), dict) else None
        try:
            out = await self._result(method, params or {})
        except (Down, Refused) as exc:
            out = {"error": {"code": INTERNAL_ERROR, "message": str(exc)}}
        except Exception as exc:  # noqa: BLE001 (a bug of ours: the host is told, the relay goes on)
            log.exception("relaying %s", method)
            out = {"error": {"code": INTERNAL_ERROR, "message": f"the relay failed: {exc!r}"}}
        self.write({"jsonrpc": "2.0", "id": ident, **out})

    async def _result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        link = self.link
        if method == "initialize":
            asked = params.get("protocolVersion")
            return {"result": {
                "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
                "capabilities": {"tools": {}},
                "serverInfo": link.info.get("serverInfo") or {"name": "universe-remote", "version": ""},
                **({"instructions": link.info["instructions"]} if link.info.get("instructions") else {})}}
        if method == "ping":
            return {"result": {}}
        if method == "tools/call":
            try:
                return _answer_of(await link.request("tools/call", params))
            except Down as exc:
                return {"result": {"content": [{"type": "text", "text": str(exc)}], "isError": True}}
        if method == "tools/list":
            try:
                answer = _answer_of(await link.request("tools/list", params or None))
            except Down:
                if link.tools is None:
                    raise
                return {"result": link.tools}  # the remote's list when it was last up
            if "result" in answer:
                link.tools = answer["result"]
            return answer
        return {"error": {"code": METHOD_NOT_FOUND, "message": f"Method not found: {method[:40]!r}"}}


def _answer_of(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: answer[key] for key in ("result", "error") if key in answer}


class _Flow(asyncio.Protocol):
    """stdout's pipe: done once closed."""

    def __init__(self) -> None:
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def relay(url: str, password: str | None = None, ca: str | None = None,
                lease: Any = None) -> None:
    """Serve the remote at ``url``'s tools on stdio until stdin closes (:class:`Down`,
    :class:`Refused`: the remote could not be reached at the start); with ``lease`` (a
    :class:`remotes.pool.sessions.PoolSession`) the leased remote's, released at the end."""
    loop = asyncio.get_running_loop()
    link: RemoteLink | LeasedLink = RemoteLink(url, password, ca) if lease is None else LeasedLink(lease, ca)
    try:
        await link.open()  # a wrong address or password is said at once, not at the first call
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        out = os.fdopen(sys.stdout.fileno(), "wb", buffering=0, closefd=False)
        transport, flow = await loop.connect_write_pipe(_Flow, out)

        def write(message: dict[str, Any]) -> None:
            transport.write(orjson.dumps(message) + b"\n")

        server = Relay(link, write)
        while line := await reader.readline():
            if line.strip():
                server.received(line)
        for task in list(server.tasks):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        transport.close()  # (after what is buffered has been written)
        await flow.closed
    finally:
        await link.close()


def run(args: argparse.Namespace) -> int:
    lease = None
    try:
        if args.address.startswith(("pool://", "pool+tls://")):
            lease = _claim(args)
            url = lease.mcp_url
        else:
            url = mcp_url(args.address)
    except ValueError as exc:
        print(f"universe-remote mcp: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # (the pool's PoolError)
        print(f"universe-remote mcp: {exc}", file=sys.stderr)
        return 1
    try:
        asyncio.run(relay(url, args.password, args.ca, lease))
    except (Down, Refused) as exc:
        print(f"universe-remote mcp: {url}: {exc} (is the remote serving --mcp-port there?)", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 (the host shows stderr: say what failed)
        print(f"universe-remote mcp: {url}: {exc!r}", file=sys.stderr)
        return 1
    return 0


def _claim(args: argparse.Namespace) -> Any:
    """A pooled remote for the relay's session (``mcp pool://...``)."""
    if not args.env_id:
        raise ValueError(f"a pool ({args.address}) serves remotes by env id: give --env-id ENV_ID")
    from remotes.pool.sessions import claim_session

    return claim_session(args.address, args.env_id, mode=args.mode, needs=("mcp",), password=args.password,
                         tls_ca=args.ca)


def add_commands(sub: Any) -> None:
    what = ("relay a running remote's computer-use tools (its --mcp-port) over stdio, for MCP "
            "hosts that launch tools as processes; it reconnects when the remote restarts "
            "(docs/computer-use.md)")
    parser = sub.add_parser("mcp", help=what, description=what[0].upper() + what[1:] + ".")
    parser.add_argument("address", metavar="ADDRESS",
                        help="the remote's MCP port: HOST:PORT or http(s)://HOST:PORT/mcp; or a warm "
                        "pool, pool://HOST:PORT (started with --mcp), to lease a remote of --env-id")
    parser.add_argument("--password", default=os.environ.get(PASSWORD_ENV) or None,
                        help=f"the remote's password, or the pool's (default: ${PASSWORD_ENV})")
    parser.add_argument("--env-id", default=None, help="with pool://: the env id to lease a remote of")
    parser.add_argument("--mode", choices=["realtime", "lockstep"], default=None,
                        help="with pool://: the leased remote's mode (default: what the pool serves)")
    parser.add_argument("--ca", default=None, metavar="PEM",
                        help="the certificate (or CA) to trust for an https:// remote")
    parser.set_defaults(func=run)
