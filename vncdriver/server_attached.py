"""Clients attached in-process: a VNC client of :class:`~.server.VNCServer` over any
byte transport (the browser viewer's WebSockets), with no TCP hop.

Holds :class:`AttachedClient`, the owner's handle, and :func:`attach_client`, which
:meth:`VNCServer.attach <vncdriver.server.VNCServer.attach>` calls. The client is a
:class:`~.server_connection.ServerConnection` like a socket client's (handshake,
encodings, dirty tiles, skipping while backed up, view-only); only its transport differs:
the owner's ``write`` and ``close`` callbacks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .server_connection import Host, ServerConnection

__all__ = ["AttachedClient", "attach_client"]


class _Callbacks:
    """An attached client's transport: the owner's ``write`` and ``close`` callbacks.

    Like an asyncio transport, closing reports the loss on the next loop iteration, so a
    client the server ends while it iterates its clients leaves between iterations.
    """

    def __init__(self, write: Callable[[bytes], None], close: Callable[[], None],
                 peer: str | None) -> None:
        self._write, self._close, self.peer = write, close, peer
        self.connection: ServerConnection | None = None
        self.closing = False
        #: The client has left the server (connection_lost ran).
        self.ended = False

    def write(self, data: bytes) -> None:
        if data and not self.closing:
            self._write(data)

    def close(self) -> None:
        """The server ends the client: it leaves, then the owner hears ``close()``."""
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self._end, True)

    def _end(self, tell_owner: bool) -> None:
        if self.ended:
            return
        self.closing = self.ended = True
        if self.connection is not None:
            self.connection.connection_lost(None)
        if tell_owner:
            self._close()

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """The owner's buffer decides: it calls :meth:`AttachedClient.pause`/``resume``."""


class AttachedClient:
    """The handle of a client attached in-process (:meth:`VNCServer.attach`).

    Call :meth:`feed` with what the client sent; :meth:`pause` when the bytes handed to
    ``write`` back up and :meth:`resume` when they drain (meanwhile the server encodes
    nothing for it, then sends the newest frame, as for a slow socket); :meth:`close`
    when the client is gone. It is a VNC client like any other: it counts against
    ``max_clients``, appears in ``connections`` and ``stats()`` under :attr:`client_id`.
    """

    def __init__(self, connection: ServerConnection, transport: _Callbacks) -> None:
        self._connection, self._transport = connection, transport
        self.client_id = connection.client_id

    @property
    def closed(self) -> bool:
        """Closed by either side: feeding it does nothing, and nothing more is written."""
        return self._transport.closing

    @property
    def close_reason(self) -> str | None:
        """Why the server closed it (bad bytes, a refusal, shutdown), if it did."""
        return self._connection.abort_reason

    @property
    def paused(self) -> bool:
        return self._connection.paused

    @property
    def ready(self) -> bool:
        """Past the RFB handshake: it gets updates."""
        return self._connection.proto is not None

    @property
    def updates(self) -> int:
        """Updates sent to it so far."""
        return self._connection.updates

    def feed(self, data: bytes) -> None:
        """Bytes the client sent; the server answers through ``write`` (or closes it)."""
        if not self.closed:
            self._connection.data_received(data)

    def pause(self) -> None:
        """Its output is backed up: stop encoding for it, let its dirty tiles accumulate."""
        self._connection.pause_writing()

    def resume(self) -> None:
        """Its output drained: send what changed since it paused, at once if it asked."""
        if self._connection.paused:
            self._connection.resume_writing()

    def close(self) -> None:
        """The client is gone: it leaves the server now (``on_disconnect``). Idempotent;
        ``close`` (the callback) is not called for it."""
        self._transport._end(tell_owner=False)


def attach_client(
    server: Host,
    client_id: int,
    write: Callable[[bytes], None],
    close: Callable[[], None],
    *,
    view_only: bool,
    lossless: bool,
    peer: str | None,
    refuse_reason: str | None,
    player: int | None,
) -> AttachedClient:
    """A pre-authenticated client of ``server`` writing through ``write`` (see
    :meth:`VNCServer.attach <vncdriver.server.VNCServer.attach>`); its handshake starts now."""
    transport = _Callbacks(write, close, peer)
    connection = ServerConnection(
        server, client_id, trusted=True, view_only=view_only, lossless=lossless,
        refuse_reason=refuse_reason, player=player,
    )
    transport.connection = connection
    connection.connection_made(transport)
    return AttachedClient(connection, transport)
