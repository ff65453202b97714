"""Reaching a rewarder: its address, Universe's auth header, and dialling with backoff.

Holds :func:`parse_address`, :func:`basic_auth`, :func:`dial` (attempts with capped
exponential backoff until a deadline) and the constants they use. :func:`dial` returns
the open WebSocket and the server's first message; a server that refuses us (its
``v0.connection.close`` or an HTTP 401/403) is final, and so is a TLS certificate our
context does not trust; everything else is retried.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import orjson
import websockets
from websockets.asyncio.client import ClientConnection as WebSocket, connect as ws_connect
from websockets.exceptions import InvalidHandshake, InvalidMessage, InvalidStatus, InvalidURI

from . import protocol
from .errors import ConnectTimeout, Refused, Untrusted
from .protocol import CLOSE_BUSY, CONNECTION_CLOSE
from .tls import client_context, not_tls, says_tls_only, tls_failure

log = logging.getLogger(__name__)

#: Universe's rewarder port (VNC is on 5900).
DEFAULT_PORT: Final = 15900
#: First wait between connection attempts; doubled after each failure ...
BACKOFF_START: Final = 0.05
BACKOFF_FACTOR: Final = 2.0
#: ... up to this, so a remote that comes up is found within 2 s.
BACKOFF_CAP: Final = 2.0
#: One attempt (TCP connect, WebSocket handshake, the server's first message) gives up
#: after this, so one hung attempt cannot eat the whole start timeout.
ATTEMPT_TIMEOUT: Final = 5.0
#: Seconds between attempts on a busy remote: it answers at once, and the slot of an agent
#: that died or hung frees at a moment we cannot see coming.
BUSY_RETRY: Final = 0.25
#: Seconds a probe of a port that did not speak HTTP waits for a VNC greeting.
PROBE_TIMEOUT: Final = 0.5
#: How long close() waits for the server to acknowledge the WebSocket close.
CLOSE_TIMEOUT: Final = 2.0
#: Largest server message we accept; JSON observations can be big, rewards are tiny.
MAX_SERVER_MESSAGE_BYTES: Final = 4 * 1024 * 1024
#: WebSocket close codes that mean "refused", not "try again": policy violation (our
#: server's refusals) and the application range.
_REFUSAL_CODES: Final = frozenset({1008, *range(4000, 5000)})
#: HTTP statuses of a handshake refused for good (another server's way to say no).
_REFUSAL_STATUSES: Final = frozenset({401, 403})


def parse_address(address: str, *, tls: bool = False) -> str:
    """The WebSocket URL of a rewarder at ``host``, ``host:port`` or ``ws://host:port``.

    The port defaults to :data:`DEFAULT_PORT`; ``wss://`` is accepted too, and ``tls``
    makes a bare ``host:port`` a ``wss://`` URL.
    """
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = ("wss" if tls else "ws"), address
    elif tls and scheme == "ws":
        raise ValueError(
            f"rewarder address {address!r} says ws:// (no TLS) but a TLS context was given; "
            "write wss://host:port or host:port"
        )
    if scheme not in ("ws", "wss"):
        raise ValueError(
            f"rewarder address {address!r} must be host:port or ws://host:port, not {scheme}://"
        )
    rest = rest.rstrip("/")
    if not rest or "/" in rest:
        raise ValueError(f"rewarder address {address!r} must be host:port, such as 127.0.0.1:15900")
    host, sep, port = rest.rpartition(":")
    if not sep or host.endswith(":"):  # no port, or a bare IPv6 address
        host, port = rest, str(DEFAULT_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"rewarder address {address!r} has a bad port {port!r}")
    return f"{scheme}://{host}:{int(port)}/"


def handshake_headers(
    observer: bool, password: str | None, client_id: str | None, player: int | None
) -> dict[str, str]:
    """The headers a client dials with: observer flag, Universe's auth, our client id and
    player (both clients, async and blocking)."""
    headers = {protocol.OBSERVER_HEADER: "true" if observer else "false"}
    if password is not None:
        headers["authorization"] = basic_auth(password)
    if client_id:
        headers[protocol.CLIENT_ID_HEADER] = client_id
    if player is not None:
        headers[protocol.PLAYER_HEADER] = str(player)
    return headers


def basic_auth(password: str) -> str:
    """Universe's ``Authorization`` value: the password in the username field.

    Args:
        password: the remote's password.

    Returns:
        The header's value, ``Basic ...``.
    """
    return "Basic " + base64.b64encode(f"{password}:".encode()).decode("ascii")


async def dial(
    url: str,
    headers: Mapping[str, str],
    *,
    deadline: float,
    start_timeout: float,
    name: str,
    stopped: Callable[[], bool] = lambda: False,
    tls: ssl.SSLContext | None = None,
) -> tuple[WebSocket, str | bytes]:
    """Connect with backoff until ``deadline`` (loop time): the WebSocket and the server's
    first message. ``tls``: the context a ``wss://`` URL is verified with (None:
    :func:`~.tls.client_context`'s default, $UNIVERSE_REMOTE_TLS_CA or the system's).

    Raises :class:`ConnectTimeout`, or :class:`ConnectionClosed` if the server refused us
    (that is final: no more attempts) or stayed busy (another agent's) until the deadline;
    :class:`~.errors.Untrusted` (final) for a certificate ``tls`` does not trust.
    """
    loop = asyncio.get_running_loop()
    backoff = Backoff(url, name, start_timeout)
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0 or stopped():
            raise backoff.give_up()
        backoff.attempt()
        try:
            return await _attempt(url, headers, min(remaining, ATTEMPT_TIMEOUT), name, tls)
        except Busy as exc:
            if not isinstance(backoff.last_error, Busy):
                log.info("%s: %s; retrying until the start timeout", name, exc)
            wait = backoff.failed(exc)
        except (OSError, TimeoutError, InvalidHandshake, websockets.ConnectionClosed) as exc:
            wait = backoff.failed(exc)
            log.debug("%s: attempt %d to reach %s failed: %r", name, backoff.attempts, url, exc)
            if isinstance(exc, InvalidMessage) and await _greets_as_vnc(url):
                raise Refused(
                    f"{name}: {url} is a VNC server (it greets 'RFB ...'), not a rewarder: are "
                    "the ports swapped? The address is vnc://HOST:VNC_PORT+REWARDER_PORT"
                ) from None
            if isinstance(exc, InvalidMessage) and url.startswith("ws:") and await _speaks_tls(url):
                raise Refused(_serves_tls(name, url)) from None
            if (url.startswith("wss:") and isinstance(exc, OSError)
                    and not isinstance(exc, ConnectionRefusedError | TimeoutError)
                    and await _answers_in_clear(url)):
                raise Untrusted(f"{name}: {not_tls(_where(url), 'it answers in clear')}") from None
        await asyncio.sleep(max(0.0, min(wait, deadline - loop.time())))


def _refusal(message: str | bytes) -> str | None:
    """The reason a server's first message gives if it is ``v0.connection.close``."""
    try:
        decoded = orjson.loads(message)
        if decoded.get("method") != CONNECTION_CLOSE:
            return None
        return str((decoded.get("body") or {}).get("message") or "")
    except (orjson.JSONDecodeError, AttributeError):
        return None  # the channel reports a bad first message


async def _greets_as_vnc(url: str) -> bool:
    """Whether what answers at ``url`` speaks first with an RFB greeting (a VNC port)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection(*_host_port(url))
            try:
                return (await reader.read(4)) == b"RFB "
            finally:
                writer.close()
    except (OSError, TimeoutError, ValueError):
        return False


def _host_port(url: str) -> tuple[str, int]:
    host, _, port = _where(url).rpartition(":")
    return host.strip("[]"), int(port)


async def _speaks_tls(url: str) -> bool:
    """Whether what answers at ``url`` completes a TLS handshake (unverified: this only
    chooses the error message; nothing is sent over it)."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname, probe.verify_mode = False, ssl.CERT_NONE
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            _, writer = await asyncio.open_connection(*_host_port(url), ssl=probe)
            writer.close()
            return True
    except (OSError, TimeoutError, ValueError):
        return False


async def _answers_in_clear(url: str) -> bool:
    """Whether what answers at ``url`` speaks HTTP or RFB without TLS (a plain remote)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection(*_host_port(url))
            try:
                writer.write(b"GET / HTTP/1.0\r\n\r\n")  # a VNC server greets first anyway
                return (await reader.read(5)) in (b"HTTP/", b"RFB 0")
            finally:
                writer.close()
    except (OSError, TimeoutError, ValueError):
        return False


class Busy(Exception):
    """The remote's active slot is taken: worth retrying, since an agent that died or hung
    frees it within seconds (the server drops one that stops answering its pings)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url} is busy: {reason or 'another agent holds its active slot'}")


@dataclass(slots=True)
class Backoff:
    """How both client shells dial, sans I/O: after each failed attempt :meth:`failed`
    says how long to wait (:data:`BUSY_RETRY` while the remote is busy, else from
    :data:`BACKOFF_START` by :data:`BACKOFF_FACTOR` up to :data:`BACKOFF_CAP`); past the
    deadline :meth:`give_up` is the error to raise."""

    url: str
    name: str
    start_timeout: float
    delay: float = BACKOFF_START
    attempts: int = 0
    last_error: BaseException | None = None

    def attempt(self) -> None:
        """An attempt starts."""
        self.attempts += 1

    def failed(self, exc: BaseException) -> float:
        """The attempt failed with ``exc``: seconds to wait before the next."""
        self.last_error = exc
        if isinstance(exc, Busy):
            return BUSY_RETRY
        wait, self.delay = self.delay, min(self.delay * BACKOFF_FACTOR, BACKOFF_CAP)
        return wait

    def give_up(self) -> Refused | ConnectTimeout:
        """The error once the deadline passed: the remote stayed busy, or nothing answered."""
        if isinstance(self.last_error, Busy):
            return Refused(f"{self.name}: {self.last_error} (retried for start_timeout="
                           f"{self.start_timeout:g} s)")
        port = self.url.rstrip("/").rpartition(":")[2]
        return ConnectTimeout(
            f"{self.name}: no rewarder answered at {self.url} within {self.start_timeout:g} s "
            f"({self.attempts} attempts; last error: {self.last_error!r}). Check that the "
            f"remote is running and reachable, and that port {port} is its rewarder port "
            f"({DEFAULT_PORT} by default; VNC is usually on 5900)"
        )


def _serves_tls(name: str, url: str) -> str:
    return (
        f"{name}: {_where(url)} serves TLS (a remote served with --tls-cert): use wss:// or "
        "vnc+tls://HOST:VNC_PORT+REWARDER_PORT, with tls_ca= if its CA is not in the "
        "system's trust store"
    )


def _where(url: str) -> str:
    """``host:port`` of a rewarder URL."""
    return url.split("://", 1)[-1].rstrip("/")


async def _attempt(
    url: str, headers: Mapping[str, str], timeout: float, name: str,
    tls: ssl.SSLContext | None = None,
) -> tuple[WebSocket, str | bytes]:
    """One connection attempt, up to and including the server's first message."""
    ws: WebSocket | None = None
    try:
        async with asyncio.timeout(timeout):
            try:
                ws = await ws_connect(
                    url,
                    additional_headers=dict(headers),
                    compression=None,
                    proxy=None,  # remotes are reached directly, never via $HTTP_PROXY
                    open_timeout=None,
                    close_timeout=CLOSE_TIMEOUT,
                    max_size=MAX_SERVER_MESSAGE_BYTES,
                    ssl=(tls or client_context()) if url.startswith("wss:") else None,
                )
            except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
                raise  # the peer hung up mid-handshake: retried like a reset connection
            except ssl.SSLError as exc:
                raise Untrusted(f"{name}: {tls_failure(_where(url), exc)}") from None
            except InvalidStatus as exc:
                status = exc.response.status_code
                if url.startswith("ws:") and says_tls_only(status, exc.response.body, "wss"):
                    raise Refused(_serves_tls(name, url)) from None
                if status in _REFUSAL_STATUSES:
                    body = exc.response.body.decode(errors="replace").strip()
                    raise Refused(
                        f"{name}: {url} refused the connection "
                        f"(HTTP {status}){': ' + body if body else ''}"
                    ) from None
                raise
            except InvalidURI as exc:
                raise Refused(f"{name}: bad rewarder URL: {exc}") from None
            try:
                first = await ws.recv()
                refusal = _refusal(first)
                if refusal is not None:
                    # Our server says why before its close code: busy is worth a retry.
                    await ws.wait_closed()
                    if ws.close_code == CLOSE_BUSY:
                        raise Busy(url, refusal)
            except websockets.ConnectionClosed as exc:
                rcvd = exc.rcvd
                if rcvd is not None and rcvd.code == CLOSE_BUSY:
                    raise Busy(url, rcvd.reason) from None
                if rcvd is not None and rcvd.code in _REFUSAL_CODES:
                    raise Refused(
                        f"{name}: {url} refused the connection: "
                        f"{rcvd.reason or f'close code {rcvd.code}'}"
                    ) from None
                raise
    except BaseException:
        if ws is not None:
            ws.transport.abort()
        raise
    return ws, first
