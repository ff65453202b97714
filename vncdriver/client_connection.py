"""The VNC client's pieces below its public API: one TCP connection, dialling, encodings.

Holds :class:`Connection` (an ``asyncio.BufferedProtocol``: the handshake, then
:class:`~.client_protocol.ClientProtocol` receiving straight into numpy buffers),
:func:`dial` (attempts with capped exponential backoff until ``start_timeout``) and its
constants, :func:`encoding_list` (what ``encoding=`` asks the server for) and
:class:`Dialling`, what a connection reads of its client. :class:`~.client.VNCClient`
owns the connection and is what callers use (it imports this module, never the other
way: it hands each connection its settings and two callbacks); its statistics are in
:mod:`.client_stats`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

from .client_protocol import ClientProtocol
from .encodings import DECODERS
from .errors import ConnectionLost, ConnectTimeout, TLSFailed
from .handshake import ClientHandshake, StartTLS
from .messages import Encoding, Subsampling, build_encodings
from .pixelformat import NATIVE

log = logging.getLogger(__name__)

#: First wait between connection attempts; multiplied by BACKOFF_FACTOR after each failure ...
BACKOFF_START: Final = 0.05
BACKOFF_FACTOR: Final = 2.0
#: ... up to this, so a server that comes up is found within a second.
BACKOFF_CAP: Final = 1.0
#: One attempt (TCP connect plus RFB handshake) gives up after this, so one hung attempt
#: cannot eat the whole start timeout.
ATTEMPT_TIMEOUT: Final = 5.0

#: Receive buffer during the handshake (the largest handshake message is ServerInit with
#: a desktop name; anything past it is handed to the protocol as trailing data).
HANDSHAKE_READ_BYTES: Final = 16 * 1024

#: ``encoding=`` names: the named encoding first, then fallbacks the server may use
#: for what it cannot send that way. CopyRect is always welcome (it costs nothing).
ENCODING_PREFERENCES: Final[dict[str, tuple[int, ...]]] = {
    "tight": (Encoding.TIGHT, Encoding.ZRLE, Encoding.COPYRECT, Encoding.RAW),
    "zrle": (Encoding.ZRLE, Encoding.TIGHT, Encoding.COPYRECT, Encoding.RAW),
    "raw": (Encoding.RAW, Encoding.COPYRECT),
}
_ENCODING_NUMBERS: Final = {
    "raw": Encoding.RAW,
    "copyrect": Encoding.COPYRECT,
    "tight": Encoding.TIGHT,
    "zrle": Encoding.ZRLE,
}


def encoding_list(
    encoding: str | Sequence[str | int] = "tight",
    *,
    quality: int | None = None,
    compress_level: int | None = None,
    fine_quality: int | None = None,
    subsample: Subsampling | int | None = None,
) -> list[int]:
    """The SetEncodings list for ``encoding`` (a name of ENCODING_PREFERENCES, or an exact
    list of names and numbers, best first) plus the JPEG/compression pseudo-encodings."""
    if isinstance(encoding, str):
        try:
            numbers: Iterable[int] = ENCODING_PREFERENCES[encoding.lower()]
        except KeyError:
            raise ValueError(
                f"unknown encoding {encoding!r}; use one of {sorted(ENCODING_PREFERENCES)} "
                "or a list of names and numbers"
            ) from None
    else:
        numbers = []
        for item in encoding:
            if isinstance(item, str):
                if item.lower() not in _ENCODING_NUMBERS:
                    raise ValueError(
                        f"unknown encoding {item!r} in {list(encoding)}; we decode "
                        f"{sorted(_ENCODING_NUMBERS)}"
                    )
                numbers.append(_ENCODING_NUMBERS[item.lower()])
            elif int(item) >= 0 and int(item) not in DECODERS:
                raise ValueError(
                    f"we cannot decode encoding {item} in {list(encoding)}; we decode "
                    f"{sorted(_ENCODING_NUMBERS)} ({sorted(DECODERS)})"
                )
            else:
                numbers.append(int(item))
    return build_encodings(
        numbers,
        quality=quality,
        compress_level=compress_level,
        fine_quality=fine_quality,
        subsample=subsample,
    )


class Dialling(Protocol):
    """What a :class:`Connection` and :func:`dial` read of the client that owns them
    (:class:`~.client.VNCClient`): where to dial, how long, and how to shake hands."""

    @property
    def address(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def unix_path(self) -> str | None: ...
    @property
    def start_timeout(self) -> float: ...
    @property
    def password(self) -> str | None: ...
    @property
    def shared(self) -> bool: ...
    @property
    def tls(self) -> ssl.SSLContext | None: ...
    @property
    def encodings(self) -> list[int]: ...


#: ``on_events(connection, protocol, events)``: the parser's events, for the client.
EventsCallback = Callable[["Connection", ClientProtocol, list[Any]], None]
#: ``on_lost(connection)``: the transport is gone.
LostCallback = Callable[["Connection"], None]


class Connection(asyncio.BufferedProtocol):
    """One TCP connection: a :class:`ClientHandshake`, then the client's protocol object.

    ``ready`` resolves to None once the handshake is done, or to the exception that ended
    it; ``lost`` resolves when the transport is gone. The parser's events go to
    ``on_events`` and the loss to ``on_lost`` (the client's own methods).
    """

    def __init__(
        self, client: Dialling, on_events: EventsCallback, on_lost: LostCallback
    ) -> None:
        loop = asyncio.get_running_loop()
        self.client = client
        self.on_events, self.on_lost = on_events, on_lost
        self.transport: asyncio.Transport | None = None
        self.handshake: ClientHandshake | None = ClientHandshake(
            password=client.password, shared=client.shared, tls=client.tls is not None
        )
        self.proto: ClientProtocol | None = None
        self.ready: asyncio.Future[BaseException | None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.error: BaseException | None = None  # what made us drop the connection
        self._handshake_buffer: memoryview | None = memoryview(bytearray(HANDSHAKE_READ_BYTES))
        self._tls_task: asyncio.Task[None] | None = None

    # asyncio.BufferedProtocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # An asyncio.Transport, or a look-alike that is no subclass (uvloop's).
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        proto = self.proto
        if proto is not None:
            return proto.get_buffer(sizehint)
        assert self._handshake_buffer is not None
        return self._handshake_buffer

    def buffer_updated(self, nbytes: int) -> None:
        proto = self.proto
        if proto is None:
            self._handshake_data(nbytes)
            return
        try:
            proto.buffer_updated(nbytes)
            events = proto.events_received()
        except Exception as exc:
            self.fail(exc)
            return
        if events:
            self.on_events(self, proto, events)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.error is None:
            self.error = exc
        if not self.ready.done():
            reason = "the server closed the connection during the RFB handshake"
            lost = ConnectionLost(self.client.address, reason)
            lost.__cause__ = self.error
            self.ready.set_result(lost)
        if not self.lost.done():
            self.lost.set_result(None)
        self.on_lost(self)

    # ----------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if data and self.transport is not None:
            self.transport.write(data)

    def fail(self, exc: BaseException) -> None:
        """Drop the connection because of ``exc``."""
        if self.error is None:
            self.error = exc
        if not self.ready.done():
            self.ready.set_result(exc)
        if self.transport is not None:
            self.transport.abort()

    def _handshake_data(self, nbytes: int) -> None:
        handshake, buffer = self.handshake, self._handshake_buffer
        assert handshake is not None and buffer is not None
        self._handshake_step(lambda: handshake.receive_data(bytes(buffer[:nbytes])))

    def _handshake_step(self, step: Callable[[], None]) -> None:
        """Move the handshake on (bytes in, or the switch to TLS done); a failure drops
        the connection, else what follows happens."""
        try:
            step()
        except Exception as exc:
            self.fail(exc)
            return
        self._handshake_progress()

    async def _start_tls(self) -> None:
        """VeNCrypt agreed: switch to TLS (verifying the server), then go on."""
        client, handshake = self.client, self.handshake
        assert client.tls is not None and handshake is not None and self.transport is not None
        try:
            tls = await asyncio.get_running_loop().start_tls(
                self.transport, self, client.tls, server_hostname=client.host,
                ssl_handshake_timeout=ATTEMPT_TIMEOUT,
            )
        except ssl.SSLError as exc:
            failed = TLSFailed(f"{client.host}:{client.port}", exc.verify_message
                               if isinstance(exc, ssl.SSLCertVerificationError)
                               else exc.reason or str(exc))
            failed.__cause__ = exc
            self.fail(failed)
            return
        except (OSError, TimeoutError) as exc:  # dropped mid-handshake: worth a retry
            lost = ConnectionLost(client.address, f"dropped during the TLS handshake ({exc})")
            lost.__cause__ = exc
            self.fail(lost)
            return
        if tls is None:
            self.fail(ConnectionLost(client.address, "closed during the TLS handshake"))
            return
        self.transport = tls
        self._handshake_step(handshake.tls_started)

    def _handshake_progress(self) -> None:
        """Write what the handshake has to say; start TLS or the protocol when it is time."""
        handshake = self.handshake
        assert handshake is not None
        try:
            self.write(handshake.data_to_send())
            if any(isinstance(e, StartTLS) for e in handshake.events_received()):
                self._tls_task = asyncio.ensure_future(self._start_tls())
            if not handshake.complete:
                return
            result = handshake.result
            assert result is not None
            proto = ClientProtocol(result, pixel_format=NATIVE, encodings=self.client.encodings)
            trailing = handshake.trailing_data()
            if trailing:
                proto.receive_data(trailing)
            early = proto.events_received()
        except Exception as exc:
            self.fail(exc)
            return
        self.proto = proto
        self.handshake = self._handshake_buffer = None
        proto.request_update(incremental=False)
        self.write(proto.data_to_send())
        if not self.ready.done():  # (done: the attempt was given up; abort() is under way)
            self.ready.set_result(None)
        if early:
            self.on_events(self, proto, early)



async def dial(
    client: Dialling, on_events: EventsCallback, on_lost: LostCallback
) -> Connection:
    """Connect ``client`` to its server, retrying with backoff until its start_timeout;
    the connection hands its events to ``on_events`` and its loss to ``on_lost``.

    Returns the :class:`Connection` once its handshake is done. Raises
    :class:`ConnectTimeout` (with the last attempt's error) when time is up, or at once
    what makes retrying pointless (AuthenticationFailed, ServerRefused, TLSFailed,
    ProtocolError).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + client.start_timeout
    delay = BACKOFF_START
    last: BaseException | None = None
    attempts = 0
    while True:
        attempts += 1
        budget = min(ATTEMPT_TIMEOUT, deadline - loop.time())
        try:
            async with asyncio.timeout(max(0.0, budget)):
                return await _attempt(client, on_events, on_lost)
        except TimeoutError:  # (an OSError too: caught first)
            # An attempt the deadline cut short says less than the error before it.
            if last is None or budget >= ATTEMPT_TIMEOUT:
                last = TimeoutError(
                    f"no RFB handshake within {max(0.0, budget):.3g} s of connecting"
                )
        except (OSError, ConnectionLost) as exc:
            last = exc
        remaining = deadline - loop.time()
        if remaining <= 0:
            where = client.unix_path or f"{client.host}:{client.port}"
            raise ConnectTimeout(where, client.start_timeout, last)
        log.debug("%s: attempt %d failed (%s); retrying", client.name, attempts, last)
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * BACKOFF_FACTOR, BACKOFF_CAP)


async def _attempt(
    client: Dialling, on_events: EventsCallback, on_lost: LostCallback
) -> Connection:
    loop = asyncio.get_running_loop()
    if client.unix_path is not None:
        transport, conn = await loop.create_unix_connection(
            lambda: Connection(client, on_events, on_lost), client.unix_path
        )
    else:
        transport, conn = await loop.create_connection(
            lambda: Connection(client, on_events, on_lost), client.host, client.port
        )
    try:
        failure = await conn.ready
    except BaseException:  # cancelled: the attempt timed out or the client was closed
        transport.abort()
        raise
    if failure is not None:
        transport.abort()
        raise failure
    return conn
