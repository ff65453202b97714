"""RFB 3.8 messages after the handshake (RFC 6143 §7.5, §7.6), and encoding numbers.

Holds:

- :class:`Encoding` (IntEnum) and the TurboVNC pseudo-encoding helpers
  :func:`build_encodings` and :class:`EncodingPreferences` (what a SetEncodings list asks
  for), with :class:`Subsampling`;
- client -> server: :class:`SetPixelFormat` (0), :class:`SetEncodings` (2),
  :class:`FramebufferUpdateRequest` (3), :class:`KeyEvent` (4), :class:`PointerEvent` (5),
  :class:`ClientCutText` (6);
- server -> client: :class:`FramebufferUpdate` (0, the header) and :class:`RectangleHeader`,
  :class:`SetColourMapEntries` (1), :class:`Bell` (2), :class:`ServerCutText` (3).

Each message is a frozen, slotted dataclass with ``serialize() -> bytes`` and
``parse(data) -> message`` taking the whole message including its type byte.
Variable-length messages also have ``HEADER`` (a struct) and ``body_length(header)`` so
a stream parser knows how much more to read. Text is Latin-1, as RFC 6143 says.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from .errors import LimitExceeded, LocalProtocolError, ProtocolError
from .limits import MAX_COLOUR_MAP_ENTRIES, MAX_CUT_TEXT_BYTES, MAX_ENCODINGS
from .pixelformat import PixelFormat


class Encoding(enum.IntEnum):
    """Encoding and pseudo-encoding numbers (RFC 6143 §7.7, §7.8 and the RFB registry)."""

    RAW = 0
    COPYRECT = 1
    RRE = 2
    HEXTILE = 5
    ZLIB = 6
    TIGHT = 7
    ZRLE = 16
    DESKTOP_SIZE = -223
    LAST_RECT = -224
    CURSOR = -239
    #: Ours: each update starts with the frame number, episode id and server time of the
    #: pixels in it. Only our client asks for it, so ordinary viewers never see it.
    FRAME_TAG = -0x5552  # -21842, "UR"; not in the RFB registry
    # TurboVNC ranges: the first member of each; see the helpers below.
    JPEG_QUALITY_0 = -32  # .. -23: JPEG quality level 0..9
    COMPRESS_LEVEL_0 = -256  # .. -247: compression level 0..9
    FINE_QUALITY_0 = -512  # .. -412: JPEG quality 0..100
    SUBSAMPLING_0 = -768  # .. -763: chroma subsampling, see Subsampling


class Subsampling(enum.IntEnum):
    """TurboVNC's chroma subsampling pseudo-encodings, as offsets from -768."""

    S444 = 0  # "1X": no subsampling
    S420 = 1  # "4X"
    S422 = 2  # "2X"
    GRAY = 3
    S8X = 4
    S16X = 5


def quality_encoding(level: int) -> int:
    """The pseudo-encoding asking for JPEG quality level 0..9."""
    _check_range("JPEG quality level", level, 0, 9)
    return Encoding.JPEG_QUALITY_0 + level


def compress_level_encoding(level: int) -> int:
    """The pseudo-encoding asking for zlib compression level 0..9."""
    _check_range("compression level", level, 0, 9)
    return Encoding.COMPRESS_LEVEL_0 + level


def fine_quality_encoding(quality: int) -> int:
    """The TurboVNC pseudo-encoding asking for JPEG quality 0..100."""
    _check_range("fine JPEG quality", quality, 0, 100)
    return Encoding.FINE_QUALITY_0 + quality


def subsampling_encoding(subsampling: Subsampling | int) -> int:
    """The TurboVNC pseudo-encoding asking for a chroma subsampling."""
    _check_range("subsampling", int(subsampling), 0, 5)
    return Encoding.SUBSAMPLING_0 + int(subsampling)


def _check_range(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise LocalProtocolError(f"{what} must be {low}..{high}, not {value}")


#: What our client asks for unless told otherwise, best first.
DEFAULT_ENCODINGS: tuple[int, ...] = (
    Encoding.TIGHT,
    Encoding.ZRLE,
    Encoding.COPYRECT,
    Encoding.RAW,
)


def build_encodings(
    encodings: Iterable[int] = DEFAULT_ENCODINGS,
    quality: int | None = None,
    compress_level: int | None = None,
    fine_quality: int | None = None,
    subsample: Subsampling | int | None = None,
    pseudo: Iterable[int] = (Encoding.DESKTOP_SIZE, Encoding.LAST_RECT),
) -> list[int]:
    """The SetEncodings list: real encodings in preference order, then pseudo-encodings.

    ``quality`` (0..9) turns on Tight JPEG; ``fine_quality`` (0..100) and ``subsample``
    refine it on TurboVNC-style servers (others ignore them).
    """
    result = [int(e) for e in encodings]
    if quality is not None:
        result.append(quality_encoding(quality))
    if fine_quality is not None:
        result.append(fine_quality_encoding(fine_quality))
    if subsample is not None:
        result.append(subsampling_encoding(subsample))
    if compress_level is not None:
        result.append(compress_level_encoding(compress_level))
    result.extend(int(p) for p in pseudo)
    return result


@dataclass(frozen=True, slots=True)
class EncodingPreferences:
    """What a client's SetEncodings list means for a server. The first mention wins."""

    encodings: tuple[int, ...] = ()  # real encodings (>= 0), the client's order
    quality: int | None = None  # 0..9, None: no JPEG
    compress_level: int | None = None
    fine_quality: int | None = None
    subsampling: Subsampling | None = None
    pseudo: frozenset[int] = frozenset()  # DesktopSize, LastRect, Cursor, ... as listed

    @classmethod
    def from_list(cls, encodings: Sequence[int]) -> EncodingPreferences:
        real: list[int] = []
        found: dict[str, int] = {}
        pseudo: set[int] = set()
        for e in encodings:
            if e >= 0:
                if e not in real:
                    real.append(e)
            elif -32 <= e <= -23:
                found.setdefault("quality", e + 32)
            elif -256 <= e <= -247:
                found.setdefault("compress_level", e + 256)
            elif -512 <= e <= -412:
                found.setdefault("fine_quality", e + 512)
            elif -768 <= e <= -763:
                found.setdefault("subsampling", e + 768)
            else:
                pseudo.add(e)
        sub = found.get("subsampling")
        return cls(
            encodings=tuple(real),
            quality=found.get("quality"),
            compress_level=found.get("compress_level"),
            fine_quality=found.get("fine_quality"),
            subsampling=None if sub is None else Subsampling(sub),
            pseudo=frozenset(pseudo),
        )

    @property
    def desktop_size(self) -> bool:
        return Encoding.DESKTOP_SIZE in self.pseudo

    @property
    def last_rect(self) -> bool:
        return Encoding.LAST_RECT in self.pseudo

    @property
    def frame_tag(self) -> bool:
        return Encoding.FRAME_TAG in self.pseudo

    def first_of(self, supported: Iterable[int]) -> int:
        """The client's most preferred encoding among ``supported``; Raw when none is."""
        ours = set(supported)
        return next((e for e in self.encodings if e in ours), Encoding.RAW)


def _check_type(name: str, data: bytes, expected: int) -> None:
    if not data or data[0] != expected:
        got = data[0] if data else "nothing"
        raise ProtocolError(f"{name} starts with message type {expected}, got {got}")


def _check_size(name: str, data: bytes, size: int) -> None:
    if len(data) != size:
        raise ProtocolError(f"{name} is {size} bytes, got {len(data)}")


def _latin1(text: str, what: str) -> bytes:
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(
            f"{what} must be Latin-1 text (RFC 6143 §7.5.6); {exc.reason} at {exc.start}"
        ) from None


# ---------------------------------------------------------------- client -> server


@dataclass(frozen=True, slots=True)
class SetPixelFormat:
    """Client asks for updates in ``pixel_format`` from now on."""

    pixel_format: PixelFormat
    TYPE: ClassVar[int] = 0
    SIZE: ClassVar[int] = 20

    @classmethod
    def parse(cls, data: bytes) -> SetPixelFormat:
        _check_type("SetPixelFormat", data, cls.TYPE)
        _check_size("SetPixelFormat", data, cls.SIZE)
        return cls(PixelFormat.parse(bytes(data[4:20])))

    def serialize(self) -> bytes:
        return b"\x00\x00\x00\x00" + self.pixel_format.serialize()


@dataclass(frozen=True, slots=True)
class SetEncodings:
    """Client lists the encodings it accepts, best first, pseudo-encodings mixed in."""

    encodings: tuple[int, ...]
    TYPE: ClassVar[int] = 2
    HEADER: ClassVar[struct.Struct] = struct.Struct("!BxH")

    @classmethod
    def body_length(cls, header: bytes, max_encodings: int = MAX_ENCODINGS) -> int:
        (_t, count) = cls.HEADER.unpack(header)
        if count > max_encodings:
            raise LimitExceeded("SetEncodings count", count, max_encodings)
        return 4 * int(count)

    @classmethod
    def parse(cls, data: bytes, max_encodings: int = MAX_ENCODINGS) -> SetEncodings:
        _check_type("SetEncodings", data, cls.TYPE)
        if len(data) < 4:
            raise ProtocolError(f"SetEncodings header is 4 bytes, got {len(data)}")
        length = cls.body_length(bytes(data[:4]), max_encodings)
        _check_size("SetEncodings", data, 4 + length)
        return cls(struct.unpack(f"!{length // 4}i", data[4:]))

    def serialize(self) -> bytes:
        if len(self.encodings) > 0xFFFF:
            raise LocalProtocolError(f"{len(self.encodings)} encodings do not fit in 16 bits")
        n = len(self.encodings)
        return self.HEADER.pack(self.TYPE, n) + struct.pack(f"!{n}i", *self.encodings)


@dataclass(frozen=True, slots=True)
class FramebufferUpdateRequest:
    """Client asks for the area (x, y, width, height); incremental: changes only."""

    incremental: bool
    x: int
    y: int
    width: int
    height: int
    TYPE: ClassVar[int] = 3
    FORMAT: ClassVar[struct.Struct] = struct.Struct("!B?HHHH")

    @classmethod
    def parse(cls, data: bytes) -> FramebufferUpdateRequest:
        _check_type("FramebufferUpdateRequest", data, cls.TYPE)
        _check_size("FramebufferUpdateRequest", data, cls.FORMAT.size)
        _t, inc, x, y, w, h = cls.FORMAT.unpack(data)
        return cls(inc, x, y, w, h)

    def serialize(self) -> bytes:
        return self.FORMAT.pack(
            self.TYPE, self.incremental, self.x, self.y, self.width, self.height
        )


@dataclass(frozen=True, slots=True)
class KeyEvent:
    """A key (X keysym) went down or up."""

    down: bool
    key: int
    TYPE: ClassVar[int] = 4
    FORMAT: ClassVar[struct.Struct] = struct.Struct("!B?2xI")

    @classmethod
    def parse(cls, data: bytes) -> KeyEvent:
        _check_type("KeyEvent", data, cls.TYPE)
        _check_size("KeyEvent", data, cls.FORMAT.size)
        _t, down, key = cls.FORMAT.unpack(data)
        return cls(down, key)

    def serialize(self) -> bytes:
        return self.FORMAT.pack(self.TYPE, self.down, self.key)


@dataclass(frozen=True, slots=True)
class PointerEvent:
    """The pointer is at (x, y) with buttons 1..8 down per bit 0..7 of ``button_mask``."""

    button_mask: int
    x: int
    y: int
    TYPE: ClassVar[int] = 5
    FORMAT: ClassVar[struct.Struct] = struct.Struct("!BBHH")

    @classmethod
    def parse(cls, data: bytes) -> PointerEvent:
        _check_type("PointerEvent", data, cls.TYPE)
        _check_size("PointerEvent", data, cls.FORMAT.size)
        _t, mask, x, y = cls.FORMAT.unpack(data)
        return cls(mask, x, y)

    def serialize(self) -> bytes:
        return self.FORMAT.pack(self.TYPE, self.button_mask, self.x, self.y)


@dataclass(frozen=True, slots=True)
class _CutText:
    """Shared layout of ClientCutText and ServerCutText: type, 3 pad, u32 length, Latin-1."""

    text: str
    TYPE: ClassVar[int] = -1
    HEADER: ClassVar[struct.Struct] = struct.Struct("!B3xI")

    @classmethod
    def body_length(cls, header: bytes, max_bytes: int = MAX_CUT_TEXT_BYTES) -> int:
        (_t, length) = cls.HEADER.unpack(header)
        if length > max_bytes:
            raise LimitExceeded(f"{cls.__name__} length", length, max_bytes)
        return int(length)

    @classmethod
    def parse(cls, data: bytes, max_bytes: int = MAX_CUT_TEXT_BYTES):  # type: ignore[no-untyped-def]
        _check_type(cls.__name__, data, cls.TYPE)
        if len(data) < 8:
            raise ProtocolError(f"{cls.__name__} header is 8 bytes, got {len(data)}")
        length = cls.body_length(bytes(data[:8]), max_bytes)
        _check_size(cls.__name__, data, 8 + length)
        return cls(bytes(data[8:]).decode("latin-1"))

    def serialize(self) -> bytes:
        body = _latin1(self.text, f"{type(self).__name__} text")
        return self.HEADER.pack(self.TYPE, len(body)) + body


@dataclass(frozen=True, slots=True)
class ClientCutText(_CutText):
    """The client's clipboard changed to ``text``."""

    TYPE: ClassVar[int] = 6


# ---------------------------------------------------------------- server -> client


@dataclass(frozen=True, slots=True)
class FramebufferUpdate:
    """Header of an update: ``count`` rectangles follow (0xFFFF: until LastRect)."""

    count: int
    TYPE: ClassVar[int] = 0
    FORMAT: ClassVar[struct.Struct] = struct.Struct("!BxH")
    UNTIL_LAST_RECT: ClassVar[int] = 0xFFFF

    @classmethod
    def parse(cls, data: bytes) -> FramebufferUpdate:
        _check_type("FramebufferUpdate", data, cls.TYPE)
        _check_size("FramebufferUpdate", data, cls.FORMAT.size)
        return cls(cls.FORMAT.unpack(data)[1])

    def serialize(self) -> bytes:
        return self.FORMAT.pack(self.TYPE, self.count)


@dataclass(frozen=True, slots=True)
class RectangleHeader:
    """One rectangle's header; its encoding's data follows."""

    x: int
    y: int
    width: int
    height: int
    encoding: int
    FORMAT: ClassVar[struct.Struct] = struct.Struct("!HHHHi")

    @classmethod
    def parse(cls, data: bytes) -> RectangleHeader:
        _check_size("rectangle header", data, cls.FORMAT.size)
        return cls(*cls.FORMAT.unpack(data))

    def serialize(self) -> bytes:
        return self.FORMAT.pack(self.x, self.y, self.width, self.height, self.encoding)


@dataclass(frozen=True, slots=True)
class SetColourMapEntries:
    """Colour map entries ``first, first+1, ...`` become ``colours`` (16-bit R, G, B)."""

    first_colour: int
    colours: tuple[tuple[int, int, int], ...] = field(default=())
    TYPE: ClassVar[int] = 1
    HEADER: ClassVar[struct.Struct] = struct.Struct("!BxHH")

    @classmethod
    def body_length(cls, header: bytes, max_entries: int = MAX_COLOUR_MAP_ENTRIES) -> int:
        _t, _first, count = cls.HEADER.unpack(header)
        if count > max_entries:
            raise LimitExceeded("SetColourMapEntries count", count, max_entries)
        return 6 * int(count)

    @classmethod
    def parse(cls, data: bytes, max_entries: int = MAX_COLOUR_MAP_ENTRIES) -> SetColourMapEntries:
        _check_type("SetColourMapEntries", data, cls.TYPE)
        if len(data) < 6:
            raise ProtocolError(f"SetColourMapEntries header is 6 bytes, got {len(data)}")
        length = cls.body_length(bytes(data[:6]), max_entries)
        _check_size("SetColourMapEntries", data, 6 + length)
        first = cls.HEADER.unpack(data[:6])[1]
        values = struct.unpack(f"!{length // 2}H", data[6:])
        return cls(first, tuple(zip(values[0::3], values[1::3], values[2::3], strict=True)))

    def serialize(self) -> bytes:
        flat = [v for rgb in self.colours for v in rgb]
        return self.HEADER.pack(self.TYPE, self.first_colour, len(self.colours)) + struct.pack(
            f"!{len(flat)}H", *flat
        )


@dataclass(frozen=True, slots=True)
class Bell:
    """Ring the bell."""

    TYPE: ClassVar[int] = 2

    @classmethod
    def parse(cls, data: bytes) -> Bell:
        _check_type("Bell", data, cls.TYPE)
        _check_size("Bell", data, 1)
        return cls()

    def serialize(self) -> bytes:
        return b"\x02"


@dataclass(frozen=True, slots=True)
class ServerCutText(_CutText):
    """The server's clipboard changed to ``text``."""

    TYPE: ClassVar[int] = 3


#: Client messages by type byte, for the server's parser.
CLIENT_MESSAGES: dict[int, type] = {
    m.TYPE: m
    for m in (
        SetPixelFormat,
        SetEncodings,
        FramebufferUpdateRequest,
        KeyEvent,
        PointerEvent,
        ClientCutText,
    )
}

#: Server messages by type byte, for the client's parser.
SERVER_MESSAGES: dict[int, type] = {
    m.TYPE: m for m in (FramebufferUpdate, SetColourMapEntries, Bell, ServerCutText)
}


@dataclass(frozen=True, slots=True)
class FrameTag:
    """The payload of a FRAME_TAG pseudo-rectangle: which frame the update's pixels show.

    ``frame`` counts frames the remote drew since it started, ``episode_id`` is the
    rewarder's episode, ``timestamp`` the server's UNIX time when the frame was drawn.
    """

    frame: int
    episode_id: int
    timestamp: float
    FORMAT: ClassVar[struct.Struct] = struct.Struct("!QQd")

    @classmethod
    def parse(cls, data: bytes) -> FrameTag:
        _check_size("FrameTag", data, cls.FORMAT.size)
        return cls(*cls.FORMAT.unpack(data))

    def serialize(self) -> bytes:
        """The whole pseudo-rectangle: header (0, 0, 0x0, FRAME_TAG) and payload."""
        return RectangleHeader(0, 0, 0, 0, Encoding.FRAME_TAG).serialize() + self.FORMAT.pack(
            self.frame, self.episode_id, self.timestamp
        )
