"""One rewarder connection: websockets' sans-I/O ``ServerProtocol`` owned by our own
:class:`asyncio.Protocol`.

Holds :class:`ServerLink` (the bytes of one client: opening handshake, frames to
messages, keepalive pings, the write-buffer limit, the closing handshake), the two
protocols it calls — :class:`LinkOwner` with its messages
(:class:`~.server.RewarderServer`), :class:`Door` about its connection coming and going
(:class:`~.server_admission.Admission`) — and :class:`LinkLimits`.

Why not websockets' asyncio server: a lockstep step there wakes a reader task, goes
through a queue to a writer task and takes two loop iterations. Here the loop calls
:meth:`ServerLink.data_received`, the owner answers what it can at once (pings, actions,
one-slice steps), and every reply of that call leaves in one ``transport.write``
(``python -m benchmarks step_channel`` and ``rewarder_throughput`` measure it). No task
per client: keepalive and deadlines are loop timers.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Protocol

from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.streams import StreamReader

from . import connections
from .lograte import RateLimitedLog
from .ws_frames import LENGTH_16, LENGTH_64, MASK_BIT, TEXT_FIN, apply_mask, text_header

log = logging.getLogger(__name__)

#: What the ``Server`` header of every HTTP answer says.
SERVER_HEADER: Final = "universe-remote"
#: Messages of one client kept in arrival order while one of its requests is under way
#: (a reset, a long step): past this the link stops reading the socket until they are
#: served, so TCP pushes back on a client that sends without waiting for replies.
MAX_PENDING_MESSAGES: Final = 64
#: Bytes of a keepalive ping's payload (random: a stale pong cannot answer a new ping).
PING_PAYLOAD_BYTES: Final = 4
#: The second byte's length field.
_LENGTH: Final = 0x7F


#: The code of the step websockets' frame parser waits in between two frames (a look
#: for the end of the stream, before the first byte of the next frame).
_BETWEEN_FRAMES: Final = StreamReader.at_eof.__code__


def between_frames(ws: ServerProtocol) -> bool:
    """Whether websockets' parser holds no part of a frame: it waits for the first byte of
    the next one. Its buffer may be empty in the middle of a frame too (a read that ended
    right after a header: the header was taken, the payload is awaited), so this asks the
    parser itself where it waits (the innermost generator it delegates to)."""
    parser: Any = ws.parser  # (a generator: its gi_ attributes are not in typing's Generator)
    while (inner := parser.gi_yieldfrom) is not None:
        parser = inner
    return parser.gi_code is _BETWEEN_FRAMES


def _short_path_fits() -> bool:
    """Whether this websockets keeps the state the short paths read and write under the
    names they use (websockets >= 13), and its parser waits between frames where
    :func:`between_frames` looks; otherwise every frame goes through its parser."""
    probe = ServerProtocol()
    if not all(
        hasattr(probe, name) for name in ("current_size", "expect_continuation_frame", "writes")
    ) or not isinstance(getattr(probe.reader, "buffer", None), bytearray):
        return False
    try:
        return _probe_parser(probe)
    except Exception:  # (a websockets that parses differently: the long path only)
        return False


def _probe_parser(probe: ServerProtocol) -> bool:
    """:func:`between_frames` on a handshake, a frame's header and its payload."""
    probe.receive_data(
        b"GET / HTTP/1.1\r\nHost: probe\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    (request,) = probe.events_received()
    probe.send_response(probe.accept(request))  # type: ignore[arg-type]
    at_start = between_frames(probe)
    probe.receive_data(b"\x81\x85\0\0\0\0")  # the header of a 5-byte text frame
    inside = between_frames(probe)
    probe.receive_data(b"hello")
    return probe.state is State.OPEN and at_start and not inside and between_frames(probe)


#: Why connections were closed, for links made without their server's log.
_CLOSES: Final = RateLimitedLog(log)
#: Read once at import (see :func:`_short_path_fits`).
SHORT_PATH: Final = _short_path_fits()


@dataclass(frozen=True, slots=True)
class LinkLimits:
    """The limits of one connection (the server's named constants, see there)."""

    max_frame_bytes: int
    max_buffered_bytes: int
    open_timeout: float
    keepalive_interval: float
    keepalive_timeout: float
    close_timeout: float
    too_slow_code: int


class LinkOwner(Protocol):
    """What a :class:`ServerLink` hands its server: the messages (the step path)."""

    def received(self, link: ServerLink, data: str | bytes) -> None:
        """One whole message (text as str, binary as bytes) of an open link."""


class Door(Protocol):
    """What a :class:`ServerLink` tells about its connection coming and going."""

    def handshake(self, link: ServerLink, request: Request) -> Response | None:
        """A plain HTTP answer to the opening request, or None to accept the WebSocket."""

    def opened(self, link: ServerLink) -> None:
        """The WebSocket is open: admit the client or refuse it (:meth:`ServerLink.close`)."""

    def ended(self, link: ServerLink) -> None:
        """The client is gone or given up on (called once, before the socket may close)."""


class ServerLink(asyncio.Protocol):
    """The server's end of one rewarder connection; its owner's and door's per-client state too.

    Sends (:meth:`send`) never block: bytes go to the transport, and a client whose unread
    bytes pass ``max_buffered_bytes`` is closed with ``too_slow_code`` and a reason
    (asyncio's own write-buffer watermark calls :meth:`pause_writing`). Inside
    :meth:`data_received`, and inside :meth:`batch`-ed calls, sends are gathered and
    written once at the end.
    """

    def __init__(
        self, owner: LinkOwner, door: Door, limits: LinkLimits, closes: RateLimitedLog | None = None
    ) -> None:
        self.owner, self.door, self.limits = owner, door, limits
        #: Where the reason of a close this end starts goes (:meth:`_say_why`).
        self.closes = closes if closes is not None else _CLOSES
        self.loop = asyncio.get_running_loop()
        self.ws = ServerProtocol(max_size=limits.max_frame_bytes)  # no extensions: no deflate
        self.transport: asyncio.Transport | None = None
        #: The opening handshake's request, once read.
        self.request: Request | None = None
        #: Set when the socket is closed.
        self.closed: asyncio.Future[None] = self.loop.create_future()
        #: Set once the door was told (:meth:`Door.ended`): sends are dropped.
        self.ended = False
        # The server's state of this client (set when its door admits one).
        self.proto = connections.ServerConnection()
        self.admitted = False
        self.observer = False
        self.client_id = ""
        #: The player this agent holds (None for observers and refused connections).
        self.player: int | None = None
        #: Whether one of this client's requests is under way in a task.
        self.busy = False
        #: Messages that came while busy, served in order when it is done.
        self.pending: deque[str | bytes] = deque()
        #: Whether the door owes the handler a ``client_left`` once nothing is under way.
        self.left_due = False
        self.left_told = False
        #: The thread reading this link while it steps (rewarder/link_reader.py), if any.
        self.reader: Any = None
        self._batching = 0
        self._fragments: list[bytes] = []
        self._fragment_opcode: Opcode | None = None
        self._ping_payload = b""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._said = False

    def __repr__(self) -> str:
        return f"<ServerLink {self.remote_address} {self.ws.state.name}>"

    @property
    def remote_address(self) -> Any:
        return self.transport.get_extra_info("peername") if self.transport is not None else None

    @property
    def local_address(self) -> Any:
        return self.transport.get_extra_info("sockname") if self.transport is not None else None

    def buffered(self) -> int:
        """Bytes written to this client that its socket has not taken yet."""
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=self.limits.max_buffered_bytes)
        self._later("open", self.limits.open_timeout, self._open_expired)

    def data_received(self, data: bytes) -> None:
        text = self._whole_text(data)
        if text is None:
            self.ws.receive_data(data)
            exc = self.ws.parser_exc
            if exc is not None and not isinstance(exc, EOFError):  # (EOF: the client went)
                close = self.ws.close_sent
                code = f"; closed with {close.code}" if close is not None else ""
                self._say_why("protocol error", f"it broke the WebSocket protocol ({exc}){code}")
        self._batching += 1
        try:
            if text is not None:
                if not self.ended:
                    self.owner.received(self, text)
                return
            for event in self.ws.events_received():
                if isinstance(event, Frame):
                    self._frame(event)
                elif isinstance(event, Request):
                    self._handshake(event)
        except Exception:  # a bug of ours (messages' own are answered): this client only
            log.exception("serving %s failed; closing its connection", self.remote_address)
            self._end()
            self.abort()
        finally:
            self._batching -= 1
            self.flush()

    def eof_received(self) -> bool:
        self.ws.receive_eof()
        self.flush()
        return False  # the WebSocket has its own closing handshake: nothing to write after EOF

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reader is not None:  # (before asyncio closes the socket it polls)
            self.reader.stop()
        self.ws.receive_eof()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.pending.clear()
        self._end()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        """The transport holds over ``max_buffered_bytes``: this client is not reading."""
        if not self.ended:
            self.loop.call_soon(self._too_slow)

    def resume_writing(self) -> None:
        pass

    # Sending ------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """One message as a text frame; dropped once the link ended."""
        ws = self.ws
        if self.ended or ws.state is not State.OPEN:
            return
        if not SHORT_PATH or ws.expect_continuation_frame:
            ws.send_text(data)  # (with a continuation expected it raises: we never fragment)
            if not self._batching:
                self.flush()
            return
        # What ws.send_text queues, framed here: a server's frames are not masked, and
        # this one header is most of the cost of a step reply's frame there.
        ws.writes.append(text_header(len(data), masked=False) + data)
        if not self._batching:
            self.flush()

    def batch_begin(self) -> None:
        """Hold sends until the matching :meth:`batch_end` (they nest)."""
        self._batching += 1

    def batch_end(self) -> None:
        self._batching -= 1
        if not self._batching:
            self.flush()

    def flush(self) -> None:
        """Write what the WebSocket has to send in one write; half-close after the end."""
        transport = self.transport
        chunks = self.ws.data_to_send()
        if transport is None or not chunks:
            return
        eof = chunks[-1] == b""
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if data and not transport.is_closing():
            transport.write(data)
        if eof:
            if transport.can_write_eof():
                try:
                    transport.write_eof()
                except OSError:
                    transport.abort()
            else:  # TLS: no half-close
                transport.close()
        if (eof or self.ws.close_expected()) and "close" not in self._timers:
            self._later("close", self.limits.close_timeout, self._close_expired)

    def close(self, code: int, reason: str) -> None:
        """Start the closing handshake (``reason`` cut to what a close frame holds); the
        socket is cut after ``close_timeout`` if the client does not finish it."""
        if self.ws.state is State.OPEN:
            self.ws.send_close(code, reason[:120])
        self.flush()
        if "close" not in self._timers:
            self._later("close", self.limits.close_timeout, self._close_expired)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # Receiving ----------------------------------------------------------------------------

    def _whole_text(self, data: bytes) -> str | None:
        """The text of ``data`` when it is exactly one whole, valid, masked text frame of
        an open link with nothing else under way (a lockstep client's every request), read
        here with websockets' own unmasking; None leaves it all to websockets' parser
        (handshakes, control and fragmented frames, several frames or part of one, bad
        UTF-8, anything over the limit), whose state this path never touches: it runs
        only while that parser waits for the first byte of a frame (:func:`between_frames`:
        after a read that ended right after a header, the next is that frame's payload,
        however much it looks like a frame)."""
        ws = self.ws
        if (
            not SHORT_PATH or len(data) < 6 or data[0] != TEXT_FIN or ws.state is not State.OPEN
            or ws.reader.buffer or ws.current_size is not None or self._fragments
            or not between_frames(ws)
        ):
            return None
        second = data[1]
        if not second & MASK_BIT:
            return None
        size, start = second & _LENGTH, 2
        if size == LENGTH_16:
            size, start = int.from_bytes(data[2:4]), 4
            if size < LENGTH_16:
                return None
        elif size == LENGTH_64:
            return None
        if len(data) != start + 4 + size or size > self.limits.max_frame_bytes:
            return None
        try:
            return str(apply_mask(data[start + 4:], data[start:start + 4]), "utf-8")
        except UnicodeDecodeError:
            return None

    def _handshake(self, request: Request) -> None:
        self.request = request
        response = self.door.handshake(self, request)
        if response is None:
            response = self.ws.accept(request)
        response.headers["Server"] = SERVER_HEADER
        self.ws.send_response(response)
        if response.status_code != 101:
            return  # (send_response ended the stream: flush half-closes)
        self._cancel("open")
        self._later("ping", self.limits.keepalive_interval, self._ping)
        self.door.opened(self)

    def _frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode is Opcode.PONG:
            if frame.data == self._ping_payload and self._cancel("pong"):
                self._later("ping", self.limits.keepalive_interval, self._ping)
            return
        if opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
            return  # PING is answered and CLOSE echoed by the WebSocket itself
        if not frame.fin:
            if opcode is not Opcode.CONT:
                self._fragment_opcode = opcode
            self._fragments.append(bytes(frame.data))
            return
        data: bytes | bytearray | memoryview
        if opcode is Opcode.CONT:
            self._fragments.append(bytes(frame.data))
            data = b"".join(self._fragments)
            opcode, self._fragment_opcode, self._fragments = (
                self._fragment_opcode or Opcode.BINARY, None, []
            )
        else:
            data = frame.data
        if self.ended or self.ws.state is not State.OPEN:
            return
        if opcode is Opcode.BINARY:
            self.owner.received(self, bytes(data))
            return
        try:
            text = str(data, "utf-8")
        except UnicodeDecodeError as exc:
            reason = f"{exc.reason} at position {exc.start}"
            self.ws.fail(CloseCode.INVALID_DATA, reason)
            self._say_why("invalid UTF-8", f"its text message is not UTF-8 ({reason}); closed with 1007")
            self._end()
            return
        self.owner.received(self, text)

    # Timers -------------------------------------------------------------------------------

    def _later(self, name: str, delay: float, callback: Any) -> None:
        self._cancel(name)
        self._timers[name] = self.loop.call_later(delay, self._fire, name, callback)

    def _fire(self, name: str, callback: Any) -> None:
        self._timers.pop(name, None)
        callback()

    def _cancel(self, name: str) -> bool:
        timer = self._timers.pop(name, None)
        if timer is None:
            return False
        timer.cancel()
        return True

    def _open_expired(self) -> None:
        if self.ws.state is State.CONNECTING:
            self._say_why("no handshake", f"no WebSocket handshake within {self.limits.open_timeout:g} s")
            self.abort()

    def _ping(self) -> None:
        if self.ws.state is not State.OPEN:
            return
        self._ping_payload = os.urandom(PING_PAYLOAD_BYTES)
        self.ws.send_ping(self._ping_payload)
        self.flush()
        self._later("pong", self.limits.keepalive_timeout, self._no_pong)

    def _no_pong(self) -> None:
        """A client that leaves a ping unanswered is hung or gone: free its slot now."""
        if self.ws.state is not State.OPEN:
            return
        self._say_why("keepalive", "it answered no keepalive ping within "
                      f"{self.limits.keepalive_timeout:g} s (hung, stopped or gone); closed with 1011")
        self.ws.fail(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
        self.flush()
        self._end()

    def _close_expired(self) -> None:
        self.abort()

    def _too_slow(self) -> None:
        if self.ended:
            return
        reason = (
            f"client fell {self.buffered()} bytes behind (over {self.limits.max_buffered_bytes}); "
            "read faster"
        )
        self._say_why("too slow", reason)
        self._end()  # first: nothing more is queued behind the close frame
        self.close(self.limits.too_slow_code, reason)

    def _say_why(self, kind: str, reason: str) -> None:
        """Log why this end closes the connection, once, at WARNING (one line per
        ``kind`` per interval when many clients earn it: :mod:`.lograte`)."""
        if not self._said:
            self._said = True
            self.closes.log(f"closed: {kind}", logging.WARNING, "closing %s: %s", self.remote_address, reason)

    def _end(self) -> None:
        if not self.ended:
            self.ended = True
            self.door.ended(self)
