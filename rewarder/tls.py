"""TLS for a remote's ports: the server's context, the agent's verifying one, and what
to say when a certificate is not trusted.

Holds :class:`ServerTLS` (:func:`server_tls` builds it from a certificate and key file),
:func:`client_context`, :func:`untrusted`, :class:`TLSSetupError`, and :class:`TLSPort`, the
first protocol of every connection to a TLS port: it looks at the first byte before TLS
reads it, and answers plain HTTP (``ws://``, ``http://``) with a ``400`` saying the port
speaks TLS, as nginx does for HTTP sent to an HTTPS port. Like the password
(:mod:`.auth`), one certificate serves every port: the rewarder (``wss://``), the browser
viewer (``https://``), VNC (VeNCrypt) and dm_env_rpc (gRPC), so both sides build their
contexts here and hand the same objects to each channel (``vncdriver`` imports nothing
of this package: it only receives an :class:`ssl.SSLContext`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .lograte import RateLimitedLog

log = logging.getLogger(__name__)

CERT_ENV: Final = "UNIVERSE_REMOTE_TLS_CERT"
KEY_ENV: Final = "UNIVERSE_REMOTE_TLS_KEY"
#: The CA agents trust for TLS remotes (default: the system's trust store).
CA_ENV: Final = "UNIVERSE_REMOTE_TLS_CA"
#: Oldest TLS either end speaks: 1.0 and 1.1 are deprecated (RFC 8996).
MIN_VERSION: Final = ssl.TLSVersion.TLSv1_2
#: Certificate files larger than this are not PEM certificates (a chain is a few KB).
MAX_PEM_BYTES: Final = 1024 * 1024

_CERT_MARK: Final = b"-----BEGIN CERTIFICATE-----"
_KEY_MARK: Final = b"PRIVATE KEY-----"
_MAKE_ONE: Final = (
    "for a test, `python -m trustme` writes a CA (client.pem) and a certificate for "
    "localhost/127.0.0.1 (server.pem, server.key)"
)


class TLSSetupError(ValueError):
    """A certificate, key or CA file that cannot be used; the message names the file,
    what is wrong with it and what to do."""


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """A remote's certificate: the context the rewarder, viewer and VNC servers take,
    and the PEM bytes gRPC wants (it does not take an :class:`ssl.SSLContext`)."""

    cert: Path
    key: Path
    context: ssl.SSLContext
    cert_pem: bytes
    key_pem: bytes


def _read(path: Path, what: str, source: str) -> bytes:
    """The bytes of a PEM file; ``source`` says where its name came from."""
    try:
        if path.stat().st_size > MAX_PEM_BYTES:
            raise TLSSetupError(
                f"the TLS {what} {path} is {path.stat().st_size} bytes, not a PEM file "
                f"(over {MAX_PEM_BYTES}); pass the PEM file"
            )
        return path.read_bytes()
    except FileNotFoundError:
        raise TLSSetupError(
            f"the TLS {what} {path} does not exist: check {source}"
        ) from None
    except IsADirectoryError:
        raise TLSSetupError(f"the TLS {what} {path} is a directory; pass the PEM file in it") from None
    except PermissionError:
        raise TLSSetupError(
            f"cannot read the TLS {what} {path}: permission denied; make it readable by "
            f"the user running the remote (uid {os.getuid()})"
        ) from None
    except OSError as exc:
        raise TLSSetupError(f"cannot read the TLS {what} {path}: {exc.strerror or exc}") from None


def _encrypted_key() -> bytes:
    """``load_cert_chain``'s password callback: a remote starts unattended, never prompts."""
    raise TLSSetupError("encrypted")


def server_tls(cert: str | os.PathLike[str], key: str | os.PathLike[str]) -> ServerTLS:
    """Load ``cert`` (PEM, the server's certificate first, then any intermediates) and
    its private ``key``, once, for every port; TLS 1.2 or newer.

    Raises :class:`TLSSetupError` saying which file is missing, unreadable, not PEM,
    encrypted, or not the key of that certificate.
    """
    cert_path, key_path = Path(cert).expanduser(), Path(key).expanduser()
    cert_pem = _read(cert_path, "certificate", f"--tls-cert or ${CERT_ENV}")
    key_pem = _read(key_path, "key", f"--tls-key or ${KEY_ENV}")
    if _CERT_MARK not in cert_pem:
        swapped = _KEY_MARK in cert_pem
        hint = " (it holds a private key: are --tls-cert and --tls-key swapped?)" if swapped else ""
        raise TLSSetupError(
            f"the TLS certificate {cert_path} holds no PEM certificate "
            f"('-----BEGIN CERTIFICATE-----'){hint}; {_MAKE_ONE}"
        )
    if _KEY_MARK not in key_pem:
        raise TLSSetupError(
            f"the TLS key {key_path} holds no PEM private key ('-----BEGIN ... PRIVATE "
            f"KEY-----'); pass the key the certificate {cert_path} was issued for"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MIN_VERSION
    # No TLS 1.3 session tickets: TigerVNC's viewer (1.12) stalls about every other time
    # when a ticket and the first VNC bytes (the challenge) arrive in one read (measured:
    # 4 in 6 connections hung until our handshake deadline). Nothing here resumes sessions.
    context.num_tickets = 0
    try:
        context.load_cert_chain(cert_path, key_path, password=_encrypted_key)
    except TLSSetupError:
        raise TLSSetupError(
            f"the TLS key {key_path} is encrypted and a remote starts without a prompt: "
            f"decrypt it (openssl pkey -in {key_path} -out plain.key) and keep it readable "
            "only by the remote's user"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TLSSetupError(
                f"the TLS key {key_path} is not the key of the certificate {cert_path}: "
                "pass the key the certificate was issued for"
            ) from None
        raise TLSSetupError(
            f"cannot load the TLS certificate {cert_path} with the key {key_path}: "
            f"{exc.reason or exc}; both must be PEM"
        ) from None
    return ServerTLS(cert_path, key_path, context, cert_pem, key_pem)


def pinned_context(cert: str | os.PathLike[str]) -> ssl.SSLContext:
    """A context that trusts exactly the certificate in ``cert`` (the server's own file),
    whatever the name dialled: how a remote's own health check (the Docker image's
    HEALTHCHECK) reaches it on 127.0.0.1 when it serves TLS with a certificate for
    another name, and from a CA the container does not hold."""
    path = Path(cert).expanduser()
    pem = _read(path, "certificate", f"--tls-cert or ${CERT_ENV}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = MIN_VERSION
    context.check_hostname = False  # the pin is the check: only this certificate passes
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a leaf is its own anchor
    try:
        context.load_verify_locations(cadata=pem.decode("ascii", errors="replace"))
    except ssl.SSLError as exc:
        raise TLSSetupError(f"cannot load the TLS certificate {path}: {exc.reason or exc}") from None
    return context


def client_context(ca: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """A context that verifies the remote's certificate and name: against ``ca`` (a PEM
    file of CA certificates), else $UNIVERSE_REMOTE_TLS_CA, else the system's trust store.

    Raises :class:`TLSSetupError` for a CA file that cannot be used.
    """
    chosen = ca if ca is not None else os.environ.get(CA_ENV) or None
    context = ssl.create_default_context()
    context.minimum_version = MIN_VERSION
    if chosen is None:
        return context
    path = Path(chosen).expanduser()
    pem = _read(path, "CA file", f"tls_ca= (--tls-ca) or ${CA_ENV}")
    if _CERT_MARK not in pem:
        raise TLSSetupError(
            f"the TLS CA file {path} holds no PEM certificate: pass the CA certificate that "
            f"issued the remote's (tls_ca= or ${CA_ENV})"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and host name
    context.minimum_version = MIN_VERSION
    try:
        context.load_verify_locations(cadata=pem.decode("ascii", errors="replace"))
    except ssl.SSLError as exc:
        raise TLSSetupError(f"cannot load the TLS CA file {path}: {exc.reason or exc}") from None
    return context


def verification_error(exc: BaseException | None) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind ``exc`` (its causes and contexts
    included), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


#: OpenSSL's reasons when what answered a TLS client speaks something else (plain
#: HTTP, RFB): a remote served without a certificate.
_NOT_TLS: Final = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                             "HTTP_REQUEST", "UNKNOWN_PROTOCOL"})


def tls_failure(where: str, exc: ssl.SSLError) -> str:
    """What to tell an agent whose TLS handshake with ``where`` (H:P) failed."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return untrusted(where, exc)
    if exc.reason in _NOT_TLS:
        return not_tls(where, exc.reason)
    return f"the TLS handshake with {where} failed: {exc.reason or exc}"


def not_tls(where: str, why: str) -> str:
    """What to tell an agent that asked ``where`` (H:P) for TLS and got none."""
    return (
        f"{where} does not speak TLS ({why}): is it a remote served without --tls-cert? "
        "Then its address is vnc://, not vnc+tls://"
    )


def untrusted(where: str, exc: ssl.SSLCertVerificationError) -> str:
    """What to tell an agent whose client refused the certificate of ``where`` (H:P)."""
    why = exc.verify_message or exc.reason or str(exc)
    return (
        f"certificate of {where} not trusted ({why}): pass tls_ca=CA.pem (the CA that "
        f"issued it) or set ${CA_ENV}"
    )


# Plain HTTP sent to a TLS port ----------------------------------------------------------------

#: Seconds a connection to a TLS port may take to send its first byte (then the TLS
#: handshake has its own deadline), and a plain HTTP request its head.
FIRST_BYTES_TIMEOUT: Final = 10.0
#: Bytes of a plain HTTP request's head read before the 400 goes out (closing a socket
#: with unread bytes resets it, which can take the answer with it); a longer head is
#: answered there.
MAX_PLAIN_HEAD_BYTES: Final = 8192
#: How the 400 to plain HTTP on a TLS port begins; our clients recognise it.
PLAIN_HTTP_REFUSAL: Final = "this port speaks {scheme}:// (TLS)"
#: The first byte of a TLS connection: the ClientHello's record type, handshake (22).
_TLS_RECORD: Final = 0x16
#: First bytes of an HTTP request: a method (GET, POST, ...) is upper-case letters.
_HTTP_METHOD_START: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def says_tls_only(status: int, body: bytes | bytearray, scheme: str) -> bool:
    """Whether an HTTP answer is :class:`TLSPort`'s to plain HTTP on a ``scheme`` port."""
    prefix = PLAIN_HTTP_REFUSAL.format(scheme=scheme).encode()
    return status == 400 and bytes(body[: len(prefix)]) == prefix


class TLSPort:
    """A port that speaks TLS only, as :func:`asyncio.loop.create_server` with ``ssl=``
    would serve it, except that plain HTTP gets an answer instead of a silent close.

    :meth:`protocol` stands in for each new connection's protocol (websockets'
    ``ServerConnection``, aiohttp's request handler), which it makes only once TLS is up
    (a connection that never gets there never had one: nothing of it waits to be closed,
    or is kept, by whoever made it): it reads nothing until the client's first byte is
    there, peeks at it (``MSG_PEEK``), and then

    - ``0x16`` (a TLS handshake record): hands the connection to TLS
      (:meth:`asyncio.loop.start_tls`), and to the wrapped protocol once TLS is up;
    - an upper-case letter (``GET ...``: ``ws://`` or ``http://`` to this port): reads the
      request's head and answers ``400`` with :data:`PLAIN_HTTP_REFUSAL` and ``hint``,
      logging one line per :data:`~.lograte.LOG_INTERVAL` (counted);
    - anything else: closes it (TLS would wait for the rest of a record that is none).

    ``scheme`` is what the port speaks (``wss``, ``https``), ``where`` names it in the log.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        *,
        scheme: str,
        hint: str,
        where: str,
        handshake_timeout: float | None = FIRST_BYTES_TIMEOUT,
        shutdown_timeout: float | None = None,
        logger: logging.Logger = log,
    ) -> None:
        self.context, self.scheme, self.hint, self.where = context, scheme, hint, where
        self.handshake_timeout, self.shutdown_timeout = handshake_timeout, shutdown_timeout
        self.log = RateLimitedLog(logger)
        #: Connections whose first byte has not decided their way yet.
        self.pending: set[_FirstBytes] = set()
        #: Plain HTTP requests answered with the 400.
        self.plain_answered = 0

    def protocol(self, make_inner: Callable[[], asyncio.Protocol]) -> asyncio.Protocol:
        """The protocol asyncio gets for a new connection; ``make_inner()``'s gets it once
        TLS is up, made then."""
        return _FirstBytes(self, make_inner)

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A ``protocol_factory`` for :meth:`asyncio.loop.create_server` (without ``ssl=``)."""
        return lambda: self.protocol(inner)

    def answer(self, local: tuple[str, int] | None) -> bytes:
        """The ``400`` for a plain HTTP request that came in on ``local`` (our address)."""
        host, port = local if local is not None else ("HOST", "PORT")
        host = f"[{host}]" if ":" in str(host) else host
        body = (
            f"{PLAIN_HTTP_REFUSAL.format(scheme=self.scheme)}, not plain "
            f"{'ws' if self.scheme == 'wss' else 'http'}://: "
            f"{self.hint.format(url=f'{self.scheme}://{host}:{port}/')}\n"
        ).encode()
        return (
            b"HTTP/1.1 400 Bad Request\r\nServer: universe-remote\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )

    def close(self) -> None:
        """Drop the connections still undecided (at shutdown) and report held-back lines."""
        for first in list(self.pending):
            first.transport.abort()
        self.log.close()


class _FirstBytes(asyncio.Protocol):
    """A connection to a :class:`TLSPort` until its first byte says what it speaks."""

    def __init__(self, port: TLSPort, make_inner: Callable[[], asyncio.Protocol]) -> None:
        self.port, self.make_inner = port, make_inner
        self.head = bytearray()
        self.head_read: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.pause_reading()  # before asyncio's first read: the bytes stay in the socket
        self.port.pending.add(self)
        self.task = asyncio.get_running_loop().create_task(self._route())

    def connection_lost(self, exc: Exception | None) -> None:  # before TLS took over
        self.port.pending.discard(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def data_received(self, data: bytes) -> None:  # a plain HTTP request's head
        self.head += data
        if b"\r\n\r\n" in self.head or len(self.head) >= MAX_PLAIN_HEAD_BYTES:
            self._head_done()

    def eof_received(self) -> bool:
        self._head_done()
        return True  # keep the connection to write the answer

    def _head_done(self) -> None:
        self.transport.pause_reading()
        if self.head_read is not None and not self.head_read.done():
            self.head_read.set_result(None)

    async def _route(self) -> None:
        transport, port = self.transport, self.port
        try:
            try:
                async with asyncio.timeout(FIRST_BYTES_TIMEOUT):
                    first = await _peek(transport)
            except (TimeoutError, OSError):
                transport.abort()
                return
            if not first:
                transport.close()  # gone before it said anything
                return
            if first[0] in _HTTP_METHOD_START:
                await self._answer_plain()
                return
            if first[0] != _TLS_RECORD:
                transport.abort()
                port.log.log(
                    "neither TLS nor HTTP", logging.WARNING,
                    "a connection to %s began with %r, neither TLS nor HTTP: closed",
                    port.where, first[:8],
                )
                return
            loop = asyncio.get_running_loop()
            # Until TLS is up its events go to a stand-in: start_tls tells the protocol
            # it is given of a failed handshake (connection_lost) although it never said
            # connection_made, which websockets' connection cannot take.
            early = _UntilTLS()
            try:
                tls = await loop.start_tls(
                    transport, early, port.context, server_side=True,
                    ssl_handshake_timeout=port.handshake_timeout,
                    ssl_shutdown_timeout=port.shutdown_timeout,
                )
            except (OSError, TimeoutError) as exc:  # (start_tls closed the connection)
                log.debug("TLS handshake on %s failed: %r", port.where, exc)
                return
            if tls is None:  # (asyncio's typing allows it; a server-side start_tls has one)
                transport.close()
                return
            early.hand_over(tls, self.make_inner())
        finally:
            port.pending.discard(self)

    async def _answer_plain(self) -> None:
        transport, port = self.transport, self.port
        self.head_read = asyncio.get_running_loop().create_future()
        transport.resume_reading()
        try:
            async with asyncio.timeout(FIRST_BYTES_TIMEOUT):
                await self.head_read
        except TimeoutError:
            pass
        transport.write(port.answer(transport.get_extra_info("sockname")))
        transport.close()  # once the answer is out
        port.plain_answered += 1
        line = bytes(self.head).split(b"\r\n", 1)[0][:100].decode("ascii", "replace")
        peer = transport.get_extra_info("peername")
        port.log.log(
            "plain HTTP", logging.WARNING,
            "plain HTTP (%r) from %s to %s, which speaks %s:// (TLS): answered 400",
            line, peer[0] if peer else "?", port.where, port.scheme,
        )


class _UntilTLS(asyncio.Protocol):
    """What a TLS connection's protocol is while its handshake runs: it keeps what
    arrives with the handshake's end (the client's first bytes may) for the real one."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.eof = False
        self.lost = False
        self.lost_exc: Exception | None = None

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def eof_received(self) -> bool:
        self.eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost, self.lost_exc = True, exc

    def hand_over(self, transport: asyncio.BaseTransport, inner: asyncio.Protocol) -> None:
        """Make ``inner`` the protocol of the TLS ``transport`` and give it what came."""
        transport.set_protocol(inner)
        inner.connection_made(transport)
        for data in self.data:
            inner.data_received(data)
        if self.eof and not inner.eof_received():
            transport.close()
        if self.lost:
            inner.connection_lost(self.lost_exc)


async def _peek(transport: asyncio.Transport) -> bytes:
    """The first bytes waiting on ``transport``'s socket, left there for whoever reads
    next (TLS); b"" when the client closed. ``transport`` must not be reading."""
    loop = asyncio.get_running_loop()
    raw = transport.get_extra_info("socket")
    # A duplicate of the descriptor: asyncio refuses readers on a transport's own.
    dup = socket.socket(fileno=os.dup(raw.fileno()))
    try:
        dup.setblocking(False)
        while True:
            try:
                return dup.recv(16, socket.MSG_PEEK)
            except BlockingIOError:
                pass
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(dup.fileno(), _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(dup.fileno())
    finally:
        dup.close()


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
