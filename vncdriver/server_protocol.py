"""Sans-I/O RFB server after the handshake: client messages in, updates out.

Holds :class:`ServerProtocol` (one per client connection), the names of what clients of
one frame share (:data:`SharedEncodings`) and :data:`MAX_EXACT_RECTS`. The tile differ
and rectangle geometry it uses are in :mod:`.tiles` (re-exported here).

The asyncio shell owns one ServerProtocol per client and, per new frame, diffs once for
all clients::

    mask = differ.mask(previous_frame, frame)              # once per frame (tiles.py)
    for proto in clients:
        proto.mark_dirty_tiles(mask)
        if proto.update_wanted:
            proto.send_update(frame)                        # latest frame, never a backlog
            transport.write(proto.data_to_send())

and on input ``proto.receive_data(data)``; ``events_received()`` gives the messages it
parsed (:class:`~vncdriver.messages.KeyEvent`, PointerEvent, ClientCutText — dropped for
view-only clients — plus SetPixelFormat, SetEncodings and FramebufferUpdateRequest for
information; after a request, check ``update_wanted``).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .encodings import ENCODERS
from .errors import LocalProtocolError, ProtocolError
from .handshake import HandshakeComplete
from .limits import MAX_CUT_TEXT_BYTES, MAX_ENCODINGS, MAX_SCREEN_HEIGHT, MAX_SCREEN_WIDTH
from .messages import (
    Bell,
    ClientCutText,
    Encoding,
    EncodingPreferences,
    FramebufferUpdate,
    FramebufferUpdateRequest,
    FrameTag,
    KeyEvent,
    PointerEvent,
    RectangleHeader,
    ServerCutText,
    SetEncodings,
    SetPixelFormat,
)
from .streams import BytesFeeder, Parser, read_exact
from .tiles import (
    MERGE_SLACK_PIXELS,
    TILE,
    Rect,
    TileDiffer,
    changed_tile_mask,
    changed_tiles,
    clip_rect,
    merge_rects,
    rects_to_tile_mask,
    rows_to_rects,
    tile_mask_to_rects,
)

__all__ = [
    "MAX_EXACT_RECTS",
    "MERGE_SLACK_PIXELS",  # re-exported from .tiles, as are the names below it
    "TILE",
    "Rect",
    "ServerProtocol",
    "SharedEncodings",
    "TileDiffer",
    "changed_tile_mask",
    "changed_tiles",
    "merge_rects",
    "rects_to_tile_mask",
    "tile_mask_to_rects",
]

#: Encodings whose bytes for a rectangle depend only on its pixels and the pixel format
#: (no stream state), so clients of one frame can share them.
STATELESS_ENCODINGS = frozenset({Encoding.RAW})
#: (encoding, pixel format, x, y, w, h) -> (the encoded chunks, rectangles they hold)
SharedEncodings = dict[tuple[Any, ...], tuple[list[bytes], int]]

#: The bodies (after the type byte) of the messages :meth:`ServerProtocol._parse_frequent`
#: reads itself, and the whole messages' sizes.
_REQUEST_BODY = struct.Struct("!?HHHH")
_KEY_BODY = struct.Struct("!?2xI")
_POINTER_BODY = struct.Struct("!BHH")
_REQUEST_SIZE = FramebufferUpdateRequest.FORMAT.size
_KEY_SIZE = KeyEvent.FORMAT.size
_POINTER_SIZE = PointerEvent.FORMAT.size

#: Exact damage (:meth:`ServerProtocol.mark_damage`) a client's next update may hold, in
#: rectangles: past it, or after a frame the server compared, it gets whole dirty tiles.
MAX_EXACT_RECTS = 32


class ServerProtocol:
    """The server side of one RFB connection once :class:`ServerHandshake` completed.

    Tracks what the client asked for (pixel format, encodings, the outstanding update
    request) and which tiles changed since it last got them. ``encodings`` limits what we
    may send (default: every encoder we have); Raw is always allowed.
    """

    def __init__(
        self,
        handshake: HandshakeComplete,
        *,
        encodings: Iterable[int] | None = None,
        max_encodings: int = MAX_ENCODINGS,
        max_cut_text: int = MAX_CUT_TEXT_BYTES,
        lossless: bool = False,
    ) -> None:
        self.width, self.height = handshake.width, handshake.height
        #: Ignore the client's JPEG quality levels: exact pixels, whatever it asks.
        self.lossless = lossless
        self.pixel_format = handshake.pixel_format
        self.view_only = handshake.view_only
        self._offered = set(ENCODERS if encodings is None else encodings) | {Encoding.RAW}
        self.preferences = EncodingPreferences()
        self.max_encodings, self.max_cut_text = max_encodings, max_cut_text
        self._encoders: dict[int, Any] = {}
        self._largest = (self.width, self.height)  # requests up to this are clipped, not refused
        self._request: tuple[bool, int, int, int, int] | None = None  # incremental, x0, y0, x1, y1
        self._dirty = np.ones(self._tile_shape(), bool)
        #: The exact rectangles changed since the last whole-screen update, when every
        #: frame since came with its damage (None: send the dirty tiles).
        self._exact: list[Rect] | None = None
        self._resize_pending = False
        self._encodings_received = False
        self._tag: FrameTag | None = None
        self._tag_bytes: bytes | None = None  # the tag's pseudo-rectangle, made once
        self._tag_pending = False
        self._out: list[bytes] = []
        self._events: list[Any] = []
        self._at_boundary = False  # the parser waits for a message's type byte
        self._feeder = BytesFeeder(self._run())

    @property
    def preferences(self) -> EncodingPreferences:
        """What the client's SetEncodings asked for."""
        return self._preferences

    @preferences.setter
    def preferences(self, preferences: EncodingPreferences) -> None:
        self._preferences = preferences
        # Read for every update: worked out once per SetEncodings.
        self._encoding = preferences.first_of(self._offered)
        self._wants_tags = preferences.frame_tag

    # ------------------------------------------------------------ client -> server

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes from the client; then read ``events_received`` and ``update_wanted``."""
        feeder = self._feeder
        if self._at_boundary and not feeder.buffered and feeder.failed is None:
            try:
                data = self._parse_frequent(data)
            except ProtocolError as exc:
                feeder.failed = exc
                raise
            if not data:
                return
        feeder.feed(data)

    def _parse_frequent(self, data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
        """Parse the whole FramebufferUpdateRequest, KeyEvent and PointerEvent messages at
        the start of ``data`` (what an agent sends every frame) without the generator
        parser; return the rest, for it. Same checks, same events."""
        pos, end = 0, len(data)
        events = self._events
        while pos < end:
            kind = data[pos]
            if kind == FramebufferUpdateRequest.TYPE and end - pos >= _REQUEST_SIZE:
                request = FramebufferUpdateRequest(*_REQUEST_BODY.unpack_from(data, pos + 1))
                self._add_request(request)
                events.append(request)
                pos += _REQUEST_SIZE
            elif kind == KeyEvent.TYPE and end - pos >= _KEY_SIZE:
                if not self.view_only:
                    events.append(KeyEvent(*_KEY_BODY.unpack_from(data, pos + 1)))
                pos += _KEY_SIZE
            elif kind == PointerEvent.TYPE and end - pos >= _POINTER_SIZE:
                if not self.view_only:
                    events.append(PointerEvent(*_POINTER_BODY.unpack_from(data, pos + 1)))
                pos += _POINTER_SIZE
            else:
                break
        return data[pos:] if pos else data

    def events_received(self) -> list[Any]:
        """Messages parsed since the last call, in order."""
        events, self._events = self._events, []
        return events

    def data_to_send(self) -> bytes:
        """Bytes to write to the client now (possibly empty)."""
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        return out

    @property
    def encoding(self) -> int:
        """The encoding updates use now: the client's favourite among ours, else Raw."""
        return self._encoding

    def _run(self) -> Parser[None]:
        while True:
            self._at_boundary = True
            (message_type,) = yield from read_exact(1)
            self._at_boundary = False
            head = bytes((message_type,))
            if message_type == SetPixelFormat.TYPE:
                msg: Any = SetPixelFormat.parse(head + (yield from read_exact(19)))
                try:
                    msg.pixel_format.check()
                except ProtocolError as exc:
                    raise ProtocolError(f"SetPixelFormat: {exc}") from None
                self.pixel_format = msg.pixel_format
                for encoder in self._encoders.values():
                    encoder.pixel_format = msg.pixel_format
                self._events.append(msg)
            elif message_type == SetEncodings.TYPE:
                header = head + (yield from read_exact(3))
                body = yield from read_exact(SetEncodings.body_length(header, self.max_encodings))
                msg = SetEncodings.parse(header + body, self.max_encodings)
                self.preferences = EncodingPreferences.from_list(msg.encodings)
                if self.lossless:
                    self.preferences = dataclasses.replace(
                        self.preferences, quality=None, fine_quality=None
                    )
                self._encodings_received = True
                if self._resize_pending and not self.preferences.desktop_size:
                    raise ProtocolError(
                        f"the screen is now {self.width}x{self.height} and this client does "
                        "not accept DesktopSize (pseudo-encoding -223): it must reconnect"
                    )
                for encoder in self._encoders.values():
                    encoder.configure(self.preferences)
                self._events.append(msg)
            elif message_type == FramebufferUpdateRequest.TYPE:
                msg = FramebufferUpdateRequest.parse(head + (yield from read_exact(9)))
                self._add_request(msg)
                self._events.append(msg)
            elif message_type == KeyEvent.TYPE:
                msg = KeyEvent.parse(head + (yield from read_exact(7)))
                if not self.view_only:
                    self._events.append(msg)
            elif message_type == PointerEvent.TYPE:
                msg = PointerEvent.parse(head + (yield from read_exact(5)))
                if not self.view_only:
                    self._events.append(msg)
            elif message_type == ClientCutText.TYPE:
                header = head + (yield from read_exact(7))
                body = yield from read_exact(ClientCutText.body_length(header, self.max_cut_text))
                msg = ClientCutText.parse(header + body, self.max_cut_text)
                if not self.view_only:
                    self._events.append(msg)
            else:
                raise ProtocolError(
                    f"unknown client message type {message_type}: RFB 3.8 clients send 0 and "
                    "2-6, and we announced no extension"
                )

    def _add_request(self, req: FramebufferUpdateRequest) -> None:
        x0, y0, x1, y1 = req.x, req.y, req.x + req.width, req.y + req.height
        if x1 > self.width or y1 > self.height:
            if x1 > self._largest[0] or y1 > self._largest[1]:
                raise ProtocolError(
                    f"FramebufferUpdateRequest for {req.width}x{req.height} at ({req.x}, "
                    f"{req.y}) is outside the {self.width}x{self.height} screen"
                )
            # Sent before the client saw our DesktopSize: serve the part still on screen.
            x1, y1 = min(x1, self.width), min(y1, self.height)
            x0, y0 = min(x0, x1), min(y0, y1)
        if self._request is not None:  # several requests before we answered: merge them
            inc, a0, b0, a1, b1 = self._request
            req_inc = inc and req.incremental
            x0, y0, x1, y1 = min(x0, a0), min(y0, b0), max(x1, a1), max(y1, b1)
        else:
            req_inc = req.incremental
        self._request = (req_inc, x0, y0, x1, y1)

    # ------------------------------------------------------------ server -> client

    def mark_dirty(self, rects: Iterable[Rect]) -> None:
        """Note areas that changed since the client last got them (sent as whole tiles)."""
        self._exact = None
        self._mark(rects)

    def _mark(self, rects: Iterable[Rect]) -> None:
        dirty = self._dirty
        for x, y, w, h in rects:
            if w > 0 and h > 0:
                dirty[y // TILE : -(-(y + h) // TILE), x // TILE : -(-(x + w) // TILE)] = True

    def mark_damage(self, rects: Sequence[Rect]) -> None:
        """Note exactly what changed, as the runtime reported it (rectangles inside the
        screen): the next whole-screen update sends those rectangles (merged where they
        touch), not the tiles around them — a Catch frame's ball and paddle are ~500
        bytes of Raw, their tiles ~12 KiB. Dirty tiles are kept too, for requests of a
        part of the screen and for when the damage grows past :data:`MAX_EXACT_RECTS`."""
        self._mark(rects)
        exact = self._exact
        if exact is not None:
            if len(exact) + len(rects) > MAX_EXACT_RECTS:
                self._exact = None
            else:
                exact.extend(rects)

    def mark_dirty_tiles(self, mask: np.ndarray) -> None:
        """Note the changed tiles of a :func:`changed_tile_mask` of the whole screen (what
        the server computes once per frame for every client: no rectangles in between)."""
        self._exact = None
        if mask.shape == self._dirty.shape:
            np.logical_or(self._dirty, mask, out=self._dirty)
        else:  # a mask of another screen size: resend everything rather than guess
            self.mark_all_dirty()

    def mark_all_dirty(self) -> None:
        self._exact = None
        self._dirty[...] = True

    def set_frame_tag(self, tag: FrameTag) -> None:
        """The frame that is current now; a client that asked for FRAME_TAG gets an update
        for every new tag, even one whose pixels did not change."""
        if tag is not self._tag and self._wants_tags and tag != self._tag:
            self._tag = tag
            self._tag_bytes = None
            self._tag_pending = True

    @property
    def requested(self) -> bool:
        """True while the client has an update request we have not answered."""
        return self._request is not None

    @property
    def update_wanted(self) -> bool:
        """True when the client has a request outstanding that we have something for."""
        if self._request is None:
            return False
        incremental, x0, y0, x1, y1 = self._request
        if not incremental or self._resize_pending or self._tag_pending:
            return True
        return bool(self._dirty_in(x0, y0, x1, y1).any())

    def send_update(self, frame: np.ndarray, shared: SharedEncodings | None = None) -> int:
        """Answer the outstanding request from ``frame`` if there is anything to send.

        ``shared`` lets clients of one frame share what stateless encodings (Raw) made of
        the same rectangle in the same pixel format: pass the same dict to every client
        until the frame changes, then a new one.

        Sends the changed tiles inside the requested area (all of it for a
        non-incremental request, DesktopSize first after a resize) and clears them.
        Returns the number of rectangles queued, 0 when nothing was sent.
        """
        request = self._request
        if request is None:
            return 0
        incremental, x0, y0, x1, y1 = request
        prefix: list[bytes] = []
        if self._resize_pending:
            prefix.append(
                RectangleHeader(0, 0, self.width, self.height, Encoding.DESKTOP_SIZE).serialize()
            )
            self._resize_pending = False
            incremental, x0, y0, x1, y1 = False, 0, 0, self.width, self.height
        rects: list[Rect]
        whole = x0 == 0 and y0 == 0 and x1 == self.width and y1 == self.height
        exact = self._exact
        if incremental and whole and exact is not None:
            if not exact and not self._tag_pending:
                return 0  # nothing changed and no new frame to name
            rects = merge_rects(exact)
        elif incremental:
            # The dirty tiles as lists: a 4x3 or 16x12 mask is cheaper in plain Python
            # than in a numpy call per row.
            sub = self._dirty_in(x0, y0, x1, y1).tolist()
            if not self._tag_pending and not any(map(any, sub)):
                return 0  # nothing changed in the area and no new frame to name
            ox, oy = x0 // TILE * TILE, y0 // TILE * TILE
            rects = rows_to_rects(sub, x1 - ox, y1 - oy, TILE)
            if ox or oy or x0 % TILE or y0 % TILE:
                rects = [clip_rect((x + ox, y + oy, w, h), x0, y0, x1, y1) for x, y, w, h in rects]
        else:
            rects = [(x0, y0, x1 - x0, y1 - y0)] if x1 > x0 and y1 > y0 else []
        if self._tag is not None and self._wants_tags:
            if self._tag_bytes is None:
                self._tag_bytes = self._tag.serialize()
            prefix.append(self._tag_bytes)
            self._tag_pending = False
        self._clear_dirty(x0, y0, x1, y1)
        self._exact = [] if whole else None  # a part sent: what is left is in the tiles
        self._request = None
        return self.send_rects(frame, rects, prefix=prefix, shared=shared)

    def send_rects(
        self,
        frame: np.ndarray,
        rects: Iterable[Rect],
        prefix: Iterable[bytes] = (),
        shared: SharedEncodings | None = None,
    ) -> int:
        """Queue one FramebufferUpdate with ``rects`` of ``frame`` in the chosen encoding.

        Unconditional: it ignores requests and dirty tiles (``send_update`` is the usual
        entry). ``prefix`` holds already-serialized pseudo-rectangles to put first.
        """
        if frame.shape[:2] != (self.height, self.width) or frame.dtype != np.uint8:
            raise LocalProtocolError(
                f"frame is {frame.shape} {frame.dtype}; this client's screen is "
                f"uint8[{self.height}, {self.width}, 3] (call resize() first)"
            )
        encoding = self._encoding
        encoder = self._encoders.get(encoding) or self._encoder(encoding)
        if encoding not in STATELESS_ENCODINGS:
            shared = None  # zlib streams continue per connection: nothing to share
        body = list(prefix)
        count = len(body)
        for x, y, w, h in rects:
            if w <= 0 or h <= 0:
                continue
            if x < 0 or y < 0 or x + w > self.width or y + h > self.height:
                raise LocalProtocolError(
                    f"rectangle {w}x{h} at ({x}, {y}) is outside the "
                    f"{self.width}x{self.height} screen"
                )
            if shared is None:
                count += encoder.encode(frame, x, y, w, h, body)
                continue
            key = (encoding, self.pixel_format, x, y, w, h)
            entry = shared.get(key)
            if entry is None:
                chunks: list[bytes] = []
                entry = shared[key] = (chunks, encoder.encode(frame, x, y, w, h, chunks))
            body.extend(entry[0])
            count += entry[1]
        if count > 0xFFFE:
            raise LocalProtocolError(f"{count} rectangles do not fit in one FramebufferUpdate")
        self._out.append(FramebufferUpdate.FORMAT.pack(FramebufferUpdate.TYPE, count))
        self._out.extend(body)
        return count

    def resize(self, width: int, height: int) -> bool:
        """The screen is now width x height; the next update starts with DesktopSize.

        Returns False if the client said it does not accept DesktopSize: the shell should
        close the connection. Before the client's first SetEncodings we cannot know; then
        a later SetEncodings without DesktopSize makes ``receive_data`` raise.
        """
        if not (0 < width <= MAX_SCREEN_WIDTH and 0 < height <= MAX_SCREEN_HEIGHT):
            raise LocalProtocolError(
                f"screen size {width}x{height} is outside 1x1..{MAX_SCREEN_WIDTH}x"
                f"{MAX_SCREEN_HEIGHT}"
            )
        if (width, height) == (self.width, self.height):
            return True
        self.width, self.height = width, height
        self._largest = (max(self._largest[0], width), max(self._largest[1], height))
        self._dirty = np.ones(self._tile_shape(), bool)
        self._exact = None
        self._resize_pending = True
        return self.preferences.desktop_size or not self._encodings_received

    def bell(self) -> None:
        self._out.append(Bell().serialize())

    def cut_text(self, text: str) -> None:
        """Tell the client our clipboard changed (Latin-1 text)."""
        self._out.append(ServerCutText(text).serialize())

    # ------------------------------------------------------------ helpers

    def _tile_shape(self) -> tuple[int, int]:
        return -(-self.height // TILE), -(-self.width // TILE)

    def _dirty_in(self, x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
        return self._dirty[y0 // TILE : -(-y1 // TILE), x0 // TILE : -(-x1 // TILE)]

    def _clear_dirty(self, x0: int, y0: int, x1: int, y1: int) -> None:
        """Clear the tiles the area covers completely (a partly covered tile stays dirty)."""
        tx0, ty0 = -(-x0 // TILE), -(-y0 // TILE)
        tx1 = x1 // TILE if x1 < self.width else -(-x1 // TILE)
        ty1 = y1 // TILE if y1 < self.height else -(-y1 // TILE)
        self._dirty[ty0:ty1, tx0:tx1] = False

    def _encoder(self, encoding: int) -> Any:
        encoder = self._encoders.get(encoding)
        if encoder is None:
            encoder = ENCODERS[encoding](pixel_format=self.pixel_format)
            encoder.configure(self.preferences)
            self._encoders[encoding] = encoder
        return encoder
