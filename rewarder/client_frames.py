"""The blocking client's WebSocket framing once the connection is open: sans-I/O.

Holds :class:`ClientFrames`. websockets' ``ClientProtocol`` does the handshake, control
frames (pings, close) and anything unusual; once the connection is open this class
splits the server's byte stream into frames itself, reads a whole unmasked text frame
(every reply and event a server sends) without it, and builds the client's own masked
text frames: websockets' generic parser and serializer were a measurable share of an
agent's CPU per lockstep step (``python -m benchmarks atari_lockstep``, part 1b).
websockets only ever gets whole frames, so its state stays right for what it does see.
Feed it bytes (:meth:`ClientFrames.receive`, :meth:`ClientFrames.receive_eof`); it calls
``on_message`` with each text message's bytes; the shell then sends what
``ws.data_to_send()`` holds.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Final

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State

from .ws_frames import LENGTH_16, LENGTH_64, MASK_BIT, TEXT_FIN, apply_mask, text_header

#: Bytes of WebSocket mask keys drawn from the OS at a time (four a frame).
MASK_POOL: Final = 4096
_FIN: Final = 0x80
_OPCODE: Final = 0x0F
_OP_TEXT, _OP_BINARY, _OP_CONT = 0x1, 0x2, 0x0
#: The end of the handshake's HTTP response: frames start after it.
_HEADERS_END: Final = b"\r\n\r\n"
#: WebSocket close code for a text message that is not UTF-8 (RFC 6455, 7.4.1).
_INVALID_DATA: Final = 1007
#: A frame header with a 16-bit length (:func:`~.ws_frames.text_header`'s, made inline).
_MASKED_16: Final = struct.Struct("!BBH")


class ClientFrames:
    """One connection's framing: ``ws`` (a new ``ClientProtocol``, its request sent)
    and where each text message goes (``on_message``). ``max_size``: a server frame
    longer than this is handed to websockets, which refuses it."""

    def __init__(self, ws: ClientProtocol, on_message: Callable[[bytes], None], max_size: int) -> None:
        self.ws = ws
        self.on_message = on_message
        self.max_size = max_size
        #: Once the handshake is done: this class splits frames (websockets gets whole ones).
        self.split = False
        #: Bytes of a frame not complete yet (split mode), or the handshake's last bytes.
        self._inbox = b""
        #: websockets is inside a fragmented message (its frames all go there until it ends).
        self._in_fragments = False
        self._fragments: list[bytes] = []
        self._masks, self._mask_at = b"", 0
        #: The shell failed the connection (:meth:`fail`): websockets has a close to send.
        self._failed = False

    def receive(self, data: bytes) -> bool:
        """Bytes from the server (not empty); whether websockets got any (it may then have
        something to send: pongs, a close echo)."""
        if self.split:
            return self._frames(data) or self._failed
        self._handshake_bytes(data)
        return True

    def whole_text(self, data: bytes) -> bytes | None:
        """``data``'s payload when it is one whole unfragmented, unmasked text frame and
        nothing else (a lockstep reply, read alone), taken as :meth:`receive` would take
        it; None for anything else, which the caller then hands to :meth:`receive`."""
        if not self.split or self._inbox or self._in_fragments or len(data) < 2 or data[0] != TEXT_FIN:
            return None
        length, head = data[1], 2
        if length == LENGTH_16:
            length, head = int.from_bytes(data[2:4], "big"), 4
        elif length == LENGTH_64:
            length, head = int.from_bytes(data[2:10], "big"), 10
        elif length > LENGTH_64:  # (masked: websockets fails the connection on it)
            return None
        if head + length != len(data) or length > self.max_size or self.ws.state is not State.OPEN:
            return None
        return data[head:]

    def fail_not_utf8(self, exc: UnicodeDecodeError) -> None:
        """Fail the connection for a text message read here that is not UTF-8 (1007):
        websockets sends the close and reads nothing more; :meth:`receive` then says so."""
        self.ws.fail(_INVALID_DATA, f"invalid UTF-8 in a text message: {exc.reason} at {exc.start}")
        self._failed = True

    def ending(self, url: str) -> tuple[str, int | None, bool]:
        """Why the connection (to ``url``) ended, once it is closing or closed: the
        reason, the close code, and whether the server sent the close (else this end
        closed, for a protocol error of the server's, or the socket just ended)."""
        ws = self.ws
        close = ws.close_rcvd
        if close is not None:
            said = f"{close.code} {close.reason}".rstrip()
            return f"the connection to {url} closed ({said})", close.code, True
        sent = ws.close_sent
        if sent is not None and ws.state is not State.CLOSED:
            return (f"lost the connection to {url}: the server broke the WebSocket protocol "
                    f"({ws.parser_exc or sent.reason}); closed with {sent.code}"), sent.code, False
        return f"the connection to {url} closed", None, False

    def receive_eof(self) -> None:
        """The server closed its end: half a frame kept is websockets' to judge."""
        ws = self.ws
        if self._inbox:
            ws.receive_data(self._inbox)
            self._inbox = b""
        ws.receive_eof()
        self._events()

    def text_frame(self, data: bytes) -> bytes:
        """One unfragmented text frame of ``data`` from the client, masked with a fresh key
        (RFC 6455: unpredictable, one per frame) from a pool drawn from the OS
        :data:`MASK_POOL` bytes at a time (one ``getrandom`` serves many frames)."""
        if self._mask_at >= len(self._masks):
            self._masks, self._mask_at = os.urandom(MASK_POOL), 0
        at = self._mask_at
        self._mask_at = at + 4
        mask = self._masks[at:at + 4]
        size = len(data)  # (a step's request: 126 bytes to 64 KiB, its header made here)
        head = _MASKED_16.pack(TEXT_FIN, MASK_BIT | LENGTH_16, size) if LENGTH_16 <= size < 1 << 16 \
            else text_header(size, masked=True)
        return b"".join((head, mask, apply_mask(data, mask)))

    def _handshake_bytes(self, data: bytes) -> None:
        """Bytes before split mode: websockets reads them, up to the end of the handshake
        response if it is in them; the frames after it are split here once it opened."""
        ws = self.ws
        joined = self._inbox + data
        end = joined.find(_HEADERS_END)
        if end < 0 or ws.state is not State.CONNECTING:
            self._inbox = joined[-len(_HEADERS_END):]
            ws.receive_data(data)
            self._events()
            return
        cut = end + len(_HEADERS_END) - (len(joined) - len(data))
        self._inbox = b""
        ws.receive_data(data[:cut])
        self._events()
        if ws.state is State.OPEN:
            self.split = True
            if len(data) > cut:
                self._frames(data[cut:])
        elif len(data) > cut:
            ws.receive_data(data[cut:])  # a refusal's body: websockets reads it all
            self._events()

    def _frames(self, data: bytes) -> bool:
        """Split mode: each whole unfragmented text frame read here, any other whole frame
        handed to websockets (in order), a partial one kept; whether websockets got any."""
        ws = self.ws
        buf = self._inbox + data if self._inbox else data
        size, pos, fed = len(buf), 0, False
        while size - pos >= 2:
            first, second = buf[pos], buf[pos + 1]
            length, head = second & 0x7F, 2
            if length == LENGTH_16:
                if size - pos < 4:
                    break
                length, head = int.from_bytes(buf[pos + 2:pos + 4], "big"), 4
            elif length == LENGTH_64:
                if size - pos < 10:
                    break
                length, head = int.from_bytes(buf[pos + 2:pos + 10], "big"), 10
            if second & MASK_BIT:
                head += 4  # masked: websockets fails the connection on it
            end = pos + head + length
            if length > self.max_size:  # websockets refuses it, whole or not
                ws.receive_data(buf[pos:])
                self.split, pos, fed = False, size, True
                self._events()
                break
            if end > size:
                break
            whole_text = first == TEXT_FIN and not second & MASK_BIT
            if whole_text and not self._in_fragments and ws.state is State.OPEN:
                self.on_message(buf[pos + head:end])
            else:
                opcode = first & _OPCODE
                if opcode in (_OP_TEXT, _OP_BINARY) and not first & _FIN:
                    self._in_fragments = True
                elif opcode == _OP_CONT and first & _FIN:
                    self._in_fragments = False
                ws.receive_data(buf[pos:end])
                fed = True
                self._events()
            pos = end
        self._inbox = buf[pos:] if pos < size else b""
        return fed

    def _events(self) -> None:
        """What websockets parsed: text messages handled (the handshake's response is
        read through ``ws.state`` and ``ws.handshake_exc``)."""
        for event in self.ws.events_received():
            if not isinstance(event, Frame):
                continue  # the handshake: ws.state and ws.handshake_exc say how it went
            if event.opcode is Opcode.TEXT or event.opcode is Opcode.CONT:
                self._fragments.append(bytes(event.data))
                if event.fin:
                    text, self._fragments = b"".join(self._fragments), []
                    self.on_message(text)
