"""Sans-I/O RFB client after the handshake: server messages in, client messages out.

Holds :class:`ClientProtocol`, its events (:class:`FramebufferUpdated`,
:class:`DesktopResized`, :class:`CursorShape`; Bell, ServerCutText and
SetColourMapEntries arrive as the :mod:`~vncdriver.messages` objects) and
:class:`ClientStats`.

Made for ``asyncio.BufferedProtocol``, so pixels go from the socket straight into numpy
memory::

    buf = proto.get_buffer(-1)      # writable memoryview, never empty
    n = sock.recv_into(buf)         # asyncio does this for you
    proto.buffer_updated(n)
    for event in proto.events_received(): ...
    transport.write(proto.data_to_send())

``get_buffer`` returns a view into the staging array of the rectangle being read (Raw
pixels, Tight and ZRLE zlib data, JPEG) whenever at least :data:`DIRECT_READ_BYTES`
of it are still missing and nothing is buffered; otherwise a read-ahead buffer, so a
burst of small messages costs one ``recv`` rather than one per header. The parser owns
the framebuffer (``uint8[H, W, 3]``, updated in place), the per-connection decoders and
the counters in ``stats``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import keysyms
from .encodings import DECODERS
from .errors import LimitExceeded, LocalProtocolError, ProtocolError
from .handshake import HandshakeComplete
from .limits import (
    MAX_COLOUR_MAP_ENTRIES,
    MAX_CURSOR_SIZE,
    MAX_CUT_TEXT_BYTES,
    MAX_RECTANGLES_PER_UPDATE,
    MAX_SCREEN_HEIGHT,
    MAX_SCREEN_WIDTH,
)
from .messages import (
    Bell,
    ClientCutText,
    Encoding,
    FramebufferUpdate,
    FramebufferUpdateRequest,
    FrameTag,
    KeyEvent,
    PointerEvent,
    RectangleHeader,
    ServerCutText,
    SetColourMapEntries,
    SetEncodings,
    SetPixelFormat,
    build_encodings,
)
from .pixelformat import NATIVE, PixelFormat, pixels_to_rgb
from .streams import Parser, read_exact, read_into, read_struct

__all__ = [
    "ClientProtocol",
    "ClientStats",
    "CursorShape",
    "DesktopResized",
    "FramebufferUpdated",
]

#: Read straight into a rectangle's staging array when at least this much is missing.
DIRECT_READ_BYTES = 16 * 1024

#: Size of the read-ahead buffer for headers and small rectangles: an update that fits
#: whole (a game's few changed tiles: 4 Raw 64x64 tiles are 64 KiB) is applied from it
#: in one pass.
READ_AHEAD_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class FramebufferUpdated:
    """One FramebufferUpdate is fully applied to ``framebuffer``.

    ``rects`` lists every rectangle header in it (pseudo-encodings included), ``nbytes``
    its size on the wire and ``npixels`` the pixels it wrote.
    """

    rects: tuple[RectangleHeader, ...]
    nbytes: int
    npixels: int
    #: Which frame these pixels are, when the server sent a FRAME_TAG (our servers do,
    #: if asked).
    tag: FrameTag | None = None


@dataclass(frozen=True, slots=True)
class DesktopResized:
    """The server changed the screen size; ``framebuffer`` is a new, black array."""

    width: int
    height: int


@dataclass(frozen=True, slots=True)
class CursorShape:
    """The server sent a cursor shape (only if the Cursor pseudo-encoding was asked for)."""

    hotspot_x: int
    hotspot_y: int
    rgb: np.ndarray = field(compare=False)  # uint8[h, w, 3]
    mask: np.ndarray = field(compare=False)  # bool[h, w]: pixel is part of the cursor


@dataclass(slots=True)
class ClientStats:
    """Counters since the connection started."""

    updates: int = 0
    rectangles: int = 0
    bytes_received: int = 0
    pixels: int = 0
    rectangles_by_encoding: dict[int, int] = field(default_factory=dict)


class ClientProtocol:
    """The client side of an RFB connection once :class:`ClientHandshake` completed.

    On creation it queues SetPixelFormat (``pixel_format``; ``None`` keeps the server's)
    and SetEncodings (``encodings``, default :func:`build_encodings`); send
    ``data_to_send()`` and then ``request_update()``. The first request, and the first
    after a resize or a pixel format change, is made non-incremental automatically.
    """

    def __init__(
        self,
        handshake: HandshakeComplete,
        *,
        pixel_format: PixelFormat | None = NATIVE,
        encodings: Sequence[int] | None = None,
        max_rectangles: int = MAX_RECTANGLES_PER_UPDATE,
        max_cut_text: int = MAX_CUT_TEXT_BYTES,
    ) -> None:
        self.width, self.height = handshake.width, handshake.height
        self.name = handshake.name
        self.framebuffer = np.zeros((self.height, self.width, 3), np.uint8)
        self.stats = ClientStats()
        #: The newest frame tag the server sent (only if we asked for FRAME_TAG).
        self.frame_tag: FrameTag | None = None
        self.max_rectangles, self.max_cut_text = max_rectangles, max_cut_text
        self.pending_requests = 0
        self._decoders = {enc: cls() for enc, cls in DECODERS.items()}
        self._staging = np.empty(0, np.uint8)
        #: Rectangle headers made so far, by their fields (the fast path's; bounded).
        self._headers: dict[tuple[int, ...], RectangleHeader] = {}
        self._out: list[bytes] = []
        self._events: list[Any] = []
        self._need_full = True
        self.pixel_format = handshake.pixel_format
        if pixel_format is not None:
            self.set_pixel_format(pixel_format)
        else:
            try:
                self.pixel_format.check()
            except ProtocolError as exc:
                raise LocalProtocolError(
                    f"the server's {exc}; pass pixel_format=NATIVE to ask for one we decode"
                ) from None
        self.encodings: tuple[int, ...] = ()
        self.set_encodings(build_encodings() if encodings is None else encodings)
        # The zero-copy driver: what the parser waits for, and the read-ahead buffer.
        self._read_ahead = bytearray(READ_AHEAD_BYTES)
        self._read_ahead_view = memoryview(self._read_ahead)
        self._direct = False
        self._small = bytearray()
        self._filled = 0
        self._failed: BaseException | None = None
        self._consumed = 0  # bytes handed to the parser so far
        self._at_boundary = False  # the parser waits for a message's type byte
        self._native_format: PixelFormat | None = None
        self._native = False  # _native_format is R, G, B, X
        self._full_request: tuple[int, int, bytes] | None = None  # (w, h, its bytes)
        self._parser = self._run()
        self._need: int | memoryview = self._parser.send(None)

    # ------------------------------------------------------------ client -> server

    def set_pixel_format(self, pixel_format: PixelFormat) -> None:
        """Ask for pixels in ``pixel_format``; call it only with no update outstanding."""
        try:
            pixel_format.check()
        except ProtocolError as exc:
            raise LocalProtocolError(str(exc)) from None
        self.pixel_format = pixel_format
        self._need_full = True
        self._out.append(SetPixelFormat(pixel_format).serialize())

    def set_encodings(self, encodings: Sequence[int]) -> None:
        """Tell the server which encodings we accept, best first (see build_encodings)."""
        unknown = [e for e in encodings if e >= 0 and e not in self._decoders]
        if unknown:
            raise LocalProtocolError(
                f"we cannot decode encodings {unknown}; we decode {sorted(self._decoders)}"
            )
        self.encodings = tuple(int(e) for e in encodings)
        self._out.append(SetEncodings(self.encodings).serialize())

    def request_update(
        self,
        incremental: bool = True,
        x: int = 0,
        y: int = 0,
        width: int | None = None,
        height: int | None = None,
    ) -> None:
        """Ask for an update of the area (default: the whole screen)."""
        width = self.width - x if width is None else width
        height = self.height - y if height is None else height
        if incremental and self._need_full:
            incremental = False
        self._need_full = False
        self.pending_requests += 1
        if incremental and x == y == 0 and width == self.width and height == self.height:
            full = self._full_request  # what we send after every update: made once
            if full is None or full[:2] != (width, height):
                full = self._full_request = (
                    width, height, _REQUEST.pack(FramebufferUpdateRequest.TYPE, True, 0, 0, width, height)
                )
            self._out.append(full[2])
            return
        self._out.append(FramebufferUpdateRequest(incremental, x, y, width, height).serialize())

    def key_event(self, key: int | str, down: bool) -> None:
        """Press (``down=True``) or release a key: a keysym number or a name keysyms knows."""
        number = keysyms.keysym(key) if isinstance(key, str) else key
        self._out.append(KeyEvent(down, number).serialize())

    def pointer_event(self, x: int, y: int, buttons: int = 0) -> None:
        """Move the pointer to (x, y) with ``buttons`` (bit 0 left, 1 middle, 2 right) down."""
        x = min(max(0, x), 0xFFFF)
        y = min(max(0, y), 0xFFFF)
        self._out.append(PointerEvent(buttons & 0xFF, x, y).serialize())

    def send_events(self, events: Iterable[Sequence[Any]]) -> None:
        """Queue Universe-style actions: ``("KeyEvent", key, down)`` and ``("PointerEvent",
        x, y, buttonmask)`` tuples (lists too, as JSON gives them). All are checked first:
        a bad one raises ValueError (or UnknownKey) and none is queued."""
        checked: list[tuple[bool, int, int, int]] = []
        for i, event in enumerate(events):
            kind = event[0] if isinstance(event, tuple | list) and event else None
            if kind == "KeyEvent" and len(event) == 3:
                key = event[1]
                number = keysyms.keysym(key) if isinstance(key, str) else int(key)
                checked.append((True, number, bool(event[2]), 0))
            elif kind == "PointerEvent" and len(event) == 4:
                checked.append((False, int(event[1]), int(event[2]), int(event[3])))
            else:
                raise ValueError(
                    f"event {i} is {event!r}; events are ('KeyEvent', key, down) or "
                    "('PointerEvent', x, y, buttonmask)"
                )
        for is_key, a, b, c in checked:
            if is_key:
                self.key_event(a, bool(b))
            else:
                self.pointer_event(a, b, c)

    def cut_text(self, text: str) -> None:
        """Set the server's clipboard (Latin-1 text, as RFB requires)."""
        self._out.append(ClientCutText(text).serialize())

    def data_to_send(self) -> bytes:
        """Bytes to write to the server now (possibly empty)."""
        out = b"".join(self._out)
        self._out.clear()
        return out

    # ------------------------------------------------------------ server -> client

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A writable view to receive into; then call ``buffer_updated`` with the count."""
        if self._failed is not None:
            self._check_alive()
        need = self._need
        if isinstance(need, memoryview) and len(need) - self._filled >= DIRECT_READ_BYTES:
            self._direct = True
            return need[self._filled :]
        self._direct = False
        return self._read_ahead_view

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` arrived in the last ``get_buffer`` view; parse what they complete."""
        if self._failed is not None:
            self._check_alive()
        self.stats.bytes_received += nbytes
        try:
            if self._direct:
                self._direct = False
                self._filled += nbytes
                self._consumed += nbytes
                if self._filled == len(self._need):  # type: ignore[arg-type]
                    self._filled = 0
                    self._advance(None)
            else:
                self._pump(self._read_ahead_view[:nbytes])
        except BaseException as exc:
            self._failed = exc
            raise

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes (tests, stream-based shells): copies them through ``get_buffer``."""
        view = memoryview(data).cast("B")
        pos = 0
        while pos < len(view):
            buf = self.get_buffer(len(view) - pos)
            n = min(len(buf), len(view) - pos)
            buf[:n] = view[pos : pos + n]
            pos += n
            self.buffer_updated(n)

    def events_received(self) -> list[Any]:
        """Events since the last call, in order."""
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------ DecodeTarget

    def staging(self, nbytes: int) -> np.ndarray:
        """A reusable receive array of ``nbytes`` (decoders read rectangle data into it)."""
        if self._staging.size < nbytes:
            self._staging = np.empty(max(nbytes, 2 * self._staging.size), np.uint8)
        return self._staging[:nbytes]

    # ------------------------------------------------------------ the driver

    def _check_alive(self) -> None:
        if self._failed is not None:
            raise LocalProtocolError(f"the connection already failed ({self._failed}); close it")

    def _advance(self, value: bytes | None) -> None:
        self._need = self._parser.send(value)

    def _pump(self, data: memoryview) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self._at_boundary and not self._small and data[pos] == FramebufferUpdate.TYPE:
                used = self._whole_update(data, pos, end)
                if used:
                    pos += used
                    self._consumed += used
                    continue
            need = self._need
            if isinstance(need, int):
                if not self._small and end - pos >= need:
                    chunk = bytes(data[pos : pos + need])
                    pos += need
                    self._consumed += need
                    self._advance(chunk)
                    continue
                take = min(need - len(self._small), end - pos)
                self._small += data[pos : pos + take]
                pos += take
                self._consumed += take
                if len(self._small) == need:
                    chunk = bytes(self._small)
                    self._small.clear()
                    self._advance(chunk)
            else:
                take = min(len(need) - self._filled, end - pos)
                need[self._filled : self._filled + take] = data[pos : pos + take]
                self._filled += take
                pos += take
                self._consumed += take
                if self._filled == len(need):
                    self._filled = 0
                    self._advance(None)

    def _whole_update(self, data: memoryview, pos: int, end: int) -> int:
        """A FramebufferUpdate that lies whole in ``data[pos:end]`` and holds only Raw
        rectangles in our pixel format (and a FRAME_TAG): applied straight from the
        read-ahead buffer, without the generator parser or the staging copy. Returns the
        bytes it took, or 0 to leave the message (anything else, any doubt: errors are
        the parser's to raise) to the parser."""
        if self.pixel_format is not self._native_format:  # asked once per pixel format
            self._native_format, self._native = self.pixel_format, self.pixel_format.is_native
        if end - pos < 4 or not self._native:
            return 0
        (count,) = _UPDATE_REST.unpack_from(data, pos + 1)
        if count > self.max_rectangles:  # LastRect's 0xFFFF too
            return 0
        width, height = self.width, self.height
        tags = Encoding.FRAME_TAG in self.encodings
        at = pos + 4
        rects: list[RectangleHeader] = []
        raw: list[tuple[int, int, int, int, int]] = []
        tag = None
        pixels = 0
        headers = self._headers
        for _ in range(count):
            if end - at < _RECT_SIZE:
                return 0
            key = _RECT_HEADER.unpack_from(data, at)
            x, y, w, h, encoding = key
            at += _RECT_SIZE
            if encoding == Encoding.RAW:
                if x + w > width or y + h > height:
                    return 0
                raw.append((at, x, y, w, h))
                at += 4 * w * h
                pixels += w * h
                if at > end:
                    return 0
            elif encoding == Encoding.FRAME_TAG and tags:
                if end - at < _TAG_SIZE:
                    return 0
                tag = FrameTag(*FrameTag.FORMAT.unpack_from(data, at))
                at += _TAG_SIZE
            else:
                return 0
            header = headers.get(key)
            if header is None:  # the same tiles and sprites come back: make each once
                if len(headers) >= MAX_CACHED_HEADERS:
                    headers.clear()
                header = headers[key] = RectangleHeader(x, y, w, h, encoding)
            rects.append(header)
        framebuffer = self.framebuffer
        for start, x, y, w, h in raw:
            src = np.frombuffer(data, np.uint8, 4 * w * h, start).reshape(h, w, 4)
            out = framebuffer[y : y + h, x : x + w]
            out[..., 0] = src[..., 0]  # a copy per channel, as RawDecoder does
            out[..., 1] = src[..., 1]
            out[..., 2] = src[..., 2]
        stats = self.stats
        by_enc = stats.rectangles_by_encoding
        if raw:
            by_enc[Encoding.RAW] = by_enc.get(Encoding.RAW, 0) + len(raw)
        if len(rects) > len(raw):
            by_enc[Encoding.FRAME_TAG] = by_enc.get(Encoding.FRAME_TAG, 0) + len(rects) - len(raw)
        stats.updates += 1
        stats.rectangles += len(rects)
        stats.pixels += pixels
        self.pending_requests = max(0, self.pending_requests - 1)
        if tag is not None:
            self.frame_tag = tag
        self._events.append(FramebufferUpdated(tuple(rects), at - pos, pixels, tag))
        return at - pos

    # ------------------------------------------------------------ the parser

    def _run(self) -> Parser[None]:
        while True:
            self._at_boundary = True
            (message_type,) = yield from read_exact(1)
            self._at_boundary = False
            if message_type == FramebufferUpdate.TYPE:
                yield from self._update()
            elif message_type == SetColourMapEntries.TYPE:
                header = b"\x01" + (yield from read_exact(5))
                n = SetColourMapEntries.body_length(header, MAX_COLOUR_MAP_ENTRIES)
                body = yield from read_exact(n)
                self._events.append(SetColourMapEntries.parse(header + body))
            elif message_type == Bell.TYPE:
                self._events.append(Bell())
            elif message_type == ServerCutText.TYPE:
                header = b"\x03" + (yield from read_exact(7))
                n = ServerCutText.body_length(header, self.max_cut_text)
                body = yield from read_exact(n)
                self._events.append(ServerCutText.parse(header + body, self.max_cut_text))
            else:
                raise ProtocolError(
                    f"unknown server message type {message_type}: RFB 3.8 has 0-3, and we "
                    "asked for no extension that adds more"
                )

    def _update(self) -> Parser[None]:
        start = self._consumed - 1  # the type byte is already in
        (count,) = yield from read_struct(_UPDATE_REST)
        until_last = count == FramebufferUpdate.UNTIL_LAST_RECT and (
            Encoding.LAST_RECT in self.encodings
        )
        if not until_last and count > self.max_rectangles:
            raise LimitExceeded("FramebufferUpdate rectangle count", count, self.max_rectangles)
        rects: list[RectangleHeader] = []
        pixels = 0
        index = 0
        tag = None
        while until_last or index < count:
            index += 1
            if index > self.max_rectangles:
                raise LimitExceeded("rectangles before LastRect", index, self.max_rectangles)
            rect = RectangleHeader(*(yield from read_struct(RectangleHeader.FORMAT)))
            rects.append(rect)
            x, y, w, h, enc = rect.x, rect.y, rect.width, rect.height, rect.encoding
            by_enc = self.stats.rectangles_by_encoding
            by_enc[enc] = by_enc.get(enc, 0) + 1
            if enc == Encoding.LAST_RECT:
                break
            if enc == Encoding.DESKTOP_SIZE:
                self._resize(w, h)
                continue
            if enc == Encoding.CURSOR:
                yield from self._cursor(x, y, w, h)
                continue
            if enc == Encoding.FRAME_TAG and Encoding.FRAME_TAG in self.encodings:
                tag = FrameTag.parse((yield from read_exact(FrameTag.FORMAT.size)))
                continue
            decoder = self._decoders.get(enc)
            if decoder is None:
                raise ProtocolError(
                    f"rectangle {index} uses encoding {_encoding_name(enc)}, which we did not "
                    f"ask for (we asked for {list(self.encodings)})"
                )
            if x + w > self.width or y + h > self.height:
                raise ProtocolError(
                    f"rectangle {index} ({w}x{h} at ({x}, {y}), {_encoding_name(enc)}) is "
                    f"outside the {self.width}x{self.height} screen"
                )
            yield from decoder.decode(self, x, y, w, h)
            pixels += w * h
        self.stats.updates += 1
        self.stats.rectangles += len(rects)
        self.stats.pixels += pixels
        self.pending_requests = max(0, self.pending_requests - 1)
        if tag is not None:
            self.frame_tag = tag
        self._events.append(
            FramebufferUpdated(tuple(rects), self._consumed - start, pixels, tag)
        )

    def _resize(self, width: int, height: int) -> None:
        if width > MAX_SCREEN_WIDTH:
            raise LimitExceeded("DesktopSize width", width, MAX_SCREEN_WIDTH)
        if height > MAX_SCREEN_HEIGHT:
            raise LimitExceeded("DesktopSize height", height, MAX_SCREEN_HEIGHT)
        self.width, self.height = width, height
        self.framebuffer = np.zeros((height, width, 3), np.uint8)
        self._need_full = True
        self._events.append(DesktopResized(width, height))

    def _cursor(self, x: int, y: int, w: int, h: int) -> Parser[None]:
        if w > MAX_CURSOR_SIZE or h > MAX_CURSOR_SIZE:
            raise LimitExceeded("cursor size", max(w, h), MAX_CURSOR_SIZE)
        pf = self.pixel_format
        pixels = np.empty(w * h * pf.bytes_per_pixel, np.uint8)
        yield from read_into(pixels.data)
        row_bytes = (w + 7) // 8
        bits = np.frombuffer((yield from read_exact(row_bytes * h)), np.uint8)
        mask = np.unpackbits(bits.reshape(h, row_bytes), axis=1)[:, :w].astype(bool)
        rgb = pixels_to_rgb(pixels, pf, out=np.empty((h, w, 3), np.uint8))
        self._events.append(CursorShape(x, y, rgb, mask))


#: Rectangle headers the fast path keeps for reuse (Catch's sprites, a screen's tiles).
MAX_CACHED_HEADERS = 4096
_UPDATE_REST = struct.Struct("!xH")
_RECT_HEADER = RectangleHeader.FORMAT
_RECT_SIZE = RectangleHeader.FORMAT.size
_TAG_SIZE = FrameTag.FORMAT.size
_REQUEST = FramebufferUpdateRequest.FORMAT


def _encoding_name(number: int) -> str:
    try:
        return f"{Encoding(number).name} ({number})"
    except ValueError:
        return str(number)
