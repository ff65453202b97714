"""The bytes of a blocking rewarder channel: :class:`BlockingSocket`, the base of
:class:`~.blocking.BlockingRewarder`.

Holds the socket, its framing (:class:`~.client_frames.ClientFrames`) and the
connection's sans-I/O state, and only moves bytes: a request's frame out whole (Ctrl-C
held meanwhile, :mod:`.interrupts`), what arrived read and filed (each reply kept by
message id until taken, a refusal raised as :class:`~.errors.RemoteError` to whoever
takes it), and the connection's loss noted once, with why. Dialling, the handshake and
the requests (reset, step, batch step, ping...) are the subclass's (:mod:`.blocking`).
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from typing import Any, Final

import orjson
from websockets.client import ClientProtocol
from websockets.protocol import State

from . import keeper
from .client_frames import ClientFrames
from .client_state import Answer, ClientState, Closing
from .connections import ClientConnection
from .dial import Busy
from .errors import ConnectionClosed, ProtocolError, Refused, RemoteError, SendTimeout
from .interrupts import CONTROL_SEND_TIMEOUT, SEND_TIMEOUT, WriteInterrupted, send_whole
from .protocol import CLOSE_BUSY, JSON_NUMBERS, ErrorReply
from .reward_buffer import RewardBuffer

#: Bytes one read takes from the socket: a step reply is a few hundred bytes, a describe
#: a few KB; the server sends nothing large unasked. Under glibc's mmap threshold (128
#: KiB): ``recv`` allocates its whole size first, and a larger buffer is mapped and
#: unmapped at every read (9.7 us a read against 0.64 at 64 KiB, hand-measured).
READ_BYTES: Final = 64 * 1024
#: Seconds one blocking read of :meth:`BlockingSocket.take_raw` waits for bytes before
#: its caller looks at its deadline again (as a lockstep step's poll slices its wait).
READ_SLICE: Final = 0.1
_READ_SLICE_TIMEVAL: Final = struct.pack("@ll", 0, int(READ_SLICE * 1_000_000))
#: WebSocket close codes that mean "refused", not "try again" (as :mod:`.dial` reads them).
REFUSAL_CODES: Final = frozenset({1008, *range(4000, 5000)})


class BlockingSocket(ClientState):
    """One rewarder connection's socket and the replies read from it (see the module)."""

    def __init__(self, url: str, name: str) -> None:
        ClientState.__init__(self, RewardBuffer())
        self.url, self.name = url, name
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._ws: ClientProtocol | None = None
        self._proto: ClientConnection | None = None
        #: The connection's framing (:mod:`.client_frames`), once its handshake began.
        self._frames: ClientFrames | None = None
        self._poller: Any = None
        #: The reason of a ``v0.connection.close`` that came first (a refusal).
        self._refused: str | None = None
        #: Replies read but not yet taken, by message id: (event, local time it arrived).
        self._replies: dict[Any, tuple[Any, float]] = {}
        #: Requests sent whose reply nobody took yet, by message id: method.
        self.outstanding: dict[Any, str] = {}
        #: Monotonic time of the last call (the keeper serves only channels left idle).
        self.used_at = time.monotonic()
        #: The socket whose blocking reads time out after READ_SLICE (:meth:`take_raw`).
        self._timed: socket.socket | None = None

    def serve_idle(self) -> None:
        """The keeper's call: if nobody uses the channel, read what arrived (answering
        pings, filing describes and rewards). Never waits for the lock."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._sock is not None:
                self._read_ready()
        except (ConnectionClosed, OSError, ProtocolError):
            pass
        finally:
            self._lock.release()

    def holds_reply(self, message_id: Any) -> bool:
        """Whether the reply to ``message_id`` was read already (by the keeper, say) and
        waits to be taken: a look that neither reads nor waits.

        Args:
            message_id: the request's id.

        Returns:
            True when :meth:`~.blocking.BlockingRewarder.take_reply` would return it now
            without reading.
        """
        return message_id in self._replies

    def _need_proto(self) -> ClientConnection:
        if self._failure is not None:
            raise self._gone()
        if self._proto is None or self._sock is None:
            raise ConnectionClosed(f"{self.name}: not connected to {self.url}")
        self.used_at = time.monotonic()
        return self._proto

    def _call(self, method: str, request: tuple[int, bytes], timeout: float) -> tuple[Any, float]:
        message_id, data = request
        deadline = time.monotonic() + timeout
        self.outstanding[message_id] = method
        self._send(data, timeout)
        return self._wait_event(message_id, deadline)  # type: ignore[no-any-return]

    def _wait_event(self, message_id: Any, deadline: float) -> tuple[Any, float]:
        while message_id not in self._replies:
            self._read_some(deadline)
        method = self.outstanding.pop(message_id, "request")
        event, at = self._replies.pop(message_id)
        if isinstance(event, ErrorReply):
            raise RemoteError(event.message, method)
        return event, at

    def _pop_reply(self, message_id: Any) -> Any:
        entry = self._replies.pop(message_id, None)
        if entry is None:
            return None
        method = self.outstanding.pop(message_id, "request")
        event = entry[0]
        if isinstance(event, ErrorReply):
            raise RemoteError(event.message, method)
        return event

    def _send(self, data: bytes, timeout: float = SEND_TIMEOUT) -> None:
        ws, sock = self._ws, self._sock
        if ws is None or sock is None:
            raise ConnectionClosed(f"{self.name}: not connected to {self.url}")
        if ws.state is not State.OPEN:
            if ws.state is State.CLOSING and self._frames is not None:  # the remote said
                reason, code, _ = self._frames.ending(self.url)  # goodbye (the keeper read it)
                self._lost(reason, code)
                raise self._gone()
            ws.send_text(data)  # websockets says what is wrong
            self._flush(timeout=timeout)
            return
        frames = self._frames
        assert frames is not None
        self._flush(frames.text_frame(data), timeout)

    def _flush(self, frame: bytes | None = None, timeout: float = CONTROL_SEND_TIMEOUT) -> None:
        """Send what the WebSocket protocol queued (pongs, a close echo), then ``frame``,
        waiting at most ``timeout`` s for the remote to take it (Ctrl-C ends the wait):
        a write not taken whole tears the stream, so the connection is lost then."""
        ws, sock = self._ws, self._sock
        assert ws is not None and sock is not None
        chunks = ws.data_to_send()
        if frame is not None:
            chunks.append(frame)
        elif not chunks:
            return
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)  # (b"": the EOF marker)
        if not data:
            return
        try:
            send_whole(sock, data, timeout)  # never half a frame, unless the connection goes
        except TimeoutError as exc:
            self._lost(f"lost the connection to {self.url}: {exc}")
            raise SendTimeout(f"{self.name}: {self._failure}") from None
        except OSError as exc:
            self._lost(f"lost the connection to {self.url}: it broke while sending ({exc!r})")
            raise ConnectionClosed(f"{self.name}: {self._failure}") from None
        except WriteInterrupted:  # Ctrl-C while the remote took nothing: a frame may be half out
            self._lost(f"lost the connection to {self.url}: a write to it was interrupted")
            raise

    def _read_some(self, deadline: float) -> None:
        """Wait (until ``deadline``) for bytes, then handle them."""
        sock = self._sock
        if sock is None:
            raise self._gone()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{self.name}: no reply from {self.url} in time")
        pending = sock.pending() if isinstance(sock, ssl.SSLSocket) else 0
        if not pending and not self._poller.poll(remaining * 1000.0):
            raise TimeoutError(f"{self.name}: no reply from {self.url} in time")
        self._receive(sock)

    def _read_ready(self, ready: bool = False) -> None:
        """Handle whatever the socket holds now, without waiting (``ready``: a poll just
        said it holds something)."""
        sock = self._sock
        while sock is not None:
            if not ready:
                pending = sock.pending() if isinstance(sock, ssl.SSLSocket) else 0
                if not pending and not self._poller.poll(0):
                    return
            if not self._receive(sock):
                return  # a short read took all there was: no second look needed
            sock, ready = self._sock, False

    def _receive(self, sock: socket.socket) -> bool:
        """Read once and handle what came; whether more may be waiting already (a full
        read, or TLS, whose records may hold more than one read took)."""
        data = self._recv(sock)
        return data is not None and self._handle(sock, data)

    def _recv(self, sock: socket.socket) -> bytes | None:
        """One read (None: TLS has no whole record yet); a broken connection is lost."""
        try:
            return sock.recv(READ_BYTES)
        except ssl.SSLWantReadError:
            return None
        except OSError as exc:
            self._lost(f"lost the connection to {self.url}: it dropped ({exc})")
            raise self._gone() from None

    def _handle(self, sock: socket.socket, data: bytes) -> bool:
        """What one read took (b"": the end), handled; whether more may be waiting."""
        more = len(data) >= READ_BYTES or isinstance(sock, ssl.SSLSocket)
        ws, frames = self._ws, self._frames
        assert ws is not None and frames is not None
        if not data:
            frames.receive_eof()  # half a frame, then the end: websockets says what broke
        elif not frames.receive(data):
            return more  # only text frames: websockets has nothing to answer or close
        self._flush_quietly()  # pongs, close echoes
        state = ws.state
        if state is State.CLOSING or state is State.CLOSED or not data:
            # The server closed, or broke the protocol (we closed): that is the end now,
            # not when the server gets round to closing the socket (maybe never).
            reason, code, told = frames.ending(self.url)
            refused, self._refused = self._refused, None
            self._lost(reason, code)
            if refused is not None:
                if code == CLOSE_BUSY:
                    raise Busy(self.url, refused)
                if not told or code in REFUSAL_CODES:
                    raise Refused(f"{self.name}: {self.url} refused the connection: {refused}")
            if ws.handshake_exc is not None and state is not State.OPEN:
                raise ws.handshake_exc
            raise self._gone()
        return more

    def take_raw(self, message_id: int, method: str,
                 wait: bool = False) -> tuple[dict[str, Any], bytes] | None:
        """The reply to request ``message_id``, a ``method`` message (``v0.reply.batch.step``),
        as its JSON object and its bytes, when the socket's next bytes are that reply's one
        whole text frame, nothing else: taken (counted, its request no longer outstanding)
        with one read and one parse. Anything else is read and filed as
        :meth:`~.blocking.BlockingRewarder.take_reply` reads it (None then:
        :meth:`holds_reply` says whether the reply came). :meth:`untake` files a reply
        taken here the usual way after all (the caller's checks of it failed).

        Args:
            message_id: the request's id.
            method: the reply's method.
            wait: wait up to :data:`READ_SLICE` for bytes (one blocking read: no poll
                first); else a poll just said the socket has some.

        Returns:
            ``(message, bytes)``, or None.

        Raises:
            TimeoutError: ``wait``, and nothing came within :data:`READ_SLICE`.
        """
        with self._lock:
            self.used_at = time.monotonic()
            sock, frames = self._sock, self._frames
            held = message_id in self._replies
            if held or sock is None or frames is None or type(sock) is not socket.socket:
                if held:
                    return None
                if wait:
                    self._read_some(self.used_at + READ_SLICE)
                else:
                    self._read_ready(True)
                return None
            if not wait:
                data = self._recv(sock)
            else:
                if self._timed is not sock:  # (the kernel's own timeout on each blocking read)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _READ_SLICE_TIMEVAL)
                    self._timed = sock
                try:
                    data = sock.recv(READ_BYTES)
                except BlockingIOError:
                    raise TimeoutError(f"{self.name}: no reply from {self.url} yet") from None
                except OSError as exc:
                    self._lost(f"lost the connection to {self.url}: it dropped ({exc})")
                    raise self._gone() from None
            assert data is not None  # (not TLS)
            text = frames.whole_text(data)
            if text is None:
                if self._handle(sock, data):
                    self._read_ready()
                return None
            try:
                message = orjson.loads(text)
            except orjson.JSONDecodeError:
                message = None
            if type(message) is dict and message.get("method") == method:
                headers = message.get("headers")
                if (type(headers) is dict and type(message.get("body")) is dict
                        and type(headers.get("parent_message_id")) is int
                        and headers["parent_message_id"] == message_id
                        and message_id in self.outstanding
                        and type(headers.get("sent_at")) in JSON_NUMBERS):
                    del self.outstanding[message_id]
                    self._messages += 1
                    return message, text
            self._message(text)
            return None

    def untake(self, message_id: int, method: str, text: bytes) -> None:
        """A reply :meth:`take_raw` gave (``text``, the reply to ``message_id``, a request
        of ``method``) handled the usual way after all: filed for ``take_reply``.

        Args:
            message_id: the request's id.
            method: the request's method.
            text: the reply's bytes.
        """
        with self._lock:
            self.outstanding[message_id] = method
            self._messages -= 1
            if self._proto is not None:
                self._message(text)

    def _flush_quietly(self) -> None:
        try:
            self._flush()
        except ConnectionClosed:
            pass

    def _message(self, text: bytes) -> None:
        reply = self.receive_step(text, self.outstanding)  # most messages: one step's reply
        if reply is not None:
            self._replies[reply.parent_message_id] = (reply, time.time())
            return
        proto = self._proto
        assert proto is not None
        try:
            decoded = text.decode()
        except UnicodeDecodeError as exc:  # the server's fault: the connection ends, saying so
            assert self._frames is not None
            self._frames.fail_not_utf8(exc)
            return
        result = self.receive(proto, decoded, self.outstanding.__contains__)
        if type(result) is Answer:
            self._replies[result.message_id] = (result.event, time.time())  # type: ignore[union-attr]
        elif type(result) is Closing and result.refusal:  # type: ignore[union-attr]
            self._refused = result.reason  # type: ignore[union-attr]

    def _gone(self) -> ConnectionClosed:
        """Why the connection is gone, to raise (its close code kept)."""
        failure = self._failure
        if failure is None:
            return ConnectionClosed(f"{self.name}: not connected to {self.url}")
        code = failure.code if isinstance(failure, ConnectionClosed) else None
        return ConnectionClosed(f"{self.name}: {failure}", code)

    def _lost(self, reason: str, code: int | None = None) -> None:
        """The connection is gone: close the socket, end the running episode."""
        sock, self._sock = self._sock, None
        had = self._proto is not None and self._describe is not None
        self._ws = self._proto = self._poller = self._frames = None
        self._failure = ConnectionClosed(reason, code)
        self._describe = None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        if had:
            self.buffer.disconnected()
        keeper.forget(self)

    def _abort(self) -> None:
        sock, self._sock, self._ws, self._proto = self._sock, None, None, None
        self._poller = self._frames = None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

