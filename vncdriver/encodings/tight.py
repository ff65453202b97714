"""Tight encoding (7): fill, JPEG, or "basic" zlib over four per-connection streams.

Holds :class:`TightDecoder` (fill, JPEG, basic with copy / palette / gradient filters,
stream resets) and :class:`TightEncoder` (fill for one colour, palette for few colours,
JPEG when the client sent a quality level and the rectangle has many colours, else the
copy filter; zlib streams 0 full colour, 1 two-colour, 2 palette).

The compression-control byte (first byte of every rectangle): bits 0-3 reset zlib streams
0-3; the high nibble is 8 fill, 9 JPEG, 10 PNG (TightPNG only, refused), and below 8 a
basic rectangle: bits 4-5 the stream, bit 6 "a filter id byte follows".
Pixels are TPIXELs: three bytes R, G, B when the format is 32 bpp depth 24 with 8-bit
channels, otherwise whole pixels in the client's format.
"""

from __future__ import annotations

import zlib

import numpy as np
import simplejpeg  # type: ignore[import-untyped]

from ..errors import LimitExceeded, ProtocolError
from ..limits import MAX_TIGHT_DATA_BYTES
from ..messages import Encoding, EncodingPreferences, RectangleHeader, Subsampling
from ..pixelformat import NATIVE, PixelFormat, pack_rgb, pixels_to_rgb, rgb_to_pixels, unpack_rgb
from ..streams import Parser, read_exact, read_into
from .common import (
    DecodeTarget,
    apply_palette,
    compact_length,
    find_palette,
    inflate_exact,
    pack_indices,
    read_compact_length,
    unpack_indices,
    zlib_error,
)

FILL, JPEG, PNG = 8, 9, 10
COPY_FILTER, PALETTE_FILTER, GRADIENT_FILTER = 0, 1, 2

#: Below this many bytes Tight sends data as it is, with no zlib and no length.
MIN_TO_COMPRESS = 12

#: Encoder splits rectangles so a basic rectangle's width and area stay within these
#: (TightVNC's decoders assume rows of at most 2048 pixels).
MAX_RECT_WIDTH = 2048
MAX_RECT_PIXELS = 65536

#: With JPEG on, rectangles with more distinct colours than this go as JPEG.
JPEG_MIN_COLOURS = 64

#: JPEG quality level 0..9 -> (libjpeg quality, subsampling), as TigerVNC/TurboVNC map it.
QUALITY_LEVELS: tuple[tuple[int, Subsampling], ...] = (
    (15, Subsampling.S420),
    (29, Subsampling.S420),
    (41, Subsampling.S420),
    (42, Subsampling.S422),
    (62, Subsampling.S422),
    (77, Subsampling.S422),
    (79, Subsampling.S444),
    (86, Subsampling.S444),
    (92, Subsampling.S444),
    (100, Subsampling.S444),
)

_SIMPLEJPEG_SUBSAMPLING = {
    Subsampling.S444: "444",
    Subsampling.S422: "422",
    Subsampling.S420: "420",
    Subsampling.GRAY: "Gray",
    Subsampling.S8X: "411",
    Subsampling.S16X: "411",
}

DEFAULT_ZLIB_LEVEL = 1  # fastest; the difference to 6 is small for screen content


def tpixel_size(pf: PixelFormat) -> int:
    return 3 if _tpixel_is_rgb(pf) else pf.bytes_per_pixel


def _tpixel_is_rgb(pf: PixelFormat) -> bool:
    # TigerVNC's is888() also wants byte-aligned shifts; match it.
    return pf.is_888 and all(s % 8 == 0 for s in (pf.red_shift, pf.green_shift, pf.blue_shift))


def tpixels_to_rgb(
    data: np.ndarray | bytes,
    pf: PixelFormat,
    out: np.ndarray | None = None,
    count: int | None = None,
) -> np.ndarray:
    raw = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    if not _tpixel_is_rgb(pf):
        return pixels_to_rgb(raw, pf, out=out, count=count)
    n = raw.size // 3 if count is None else count
    if out is None:
        out = np.empty((n, 3), np.uint8)
    out[...] = raw[: n * 3].reshape(out.shape)
    return out


def rgb_to_tpixels(rgb: np.ndarray, pf: PixelFormat) -> bytes:
    if _tpixel_is_rgb(pf):
        return np.ascontiguousarray(rgb).tobytes()
    return rgb_to_pixels(rgb, pf).tobytes()


class TightDecoder:
    """Per-connection: holds the four zlib streams the server's rectangles continue."""

    def __init__(self) -> None:
        self._streams: list[zlib._Decompress | None] = [None] * 4

    def decode(self, target: DecodeTarget, x: int, y: int, w: int, h: int) -> Parser[None]:
        (control,) = yield from read_exact(1)
        for i in range(4):
            if control & (1 << i):
                self._streams[i] = None
        kind = control >> 4
        pf = target.pixel_format
        out = target.framebuffer[y : y + h, x : x + w]
        tsize = tpixel_size(pf)
        if kind == FILL:
            colour = tpixels_to_rgb((yield from read_exact(tsize)), pf)
            out[...] = colour[0]
        elif kind == JPEG:
            data = yield from _read_sized(target, "Tight JPEG")
            try:
                # The size the JPEG claims, before decoding: a few MB of JPEG can ask for
                # gigabytes of pixels.
                height, width, *_ = simplejpeg.decode_jpeg_header(data)
            except ValueError as exc:
                raise ProtocolError(
                    f"Tight JPEG for {w}x{h} at ({x}, {y}) is corrupt: {exc}"
                ) from None
            if (height, width) != (h, w):
                raise ProtocolError(
                    f"Tight JPEG is {width}x{height}, the rectangle {w}x{h}; not decoded"
                )
            try:
                image = simplejpeg.decode_jpeg(data, colorspace="RGB")
            except ValueError as exc:
                raise ProtocolError(
                    f"Tight JPEG for {w}x{h} at ({x}, {y}) is corrupt: {exc}"
                ) from None
            if image.shape != (h, w, 3):
                raise ProtocolError(
                    f"Tight JPEG is {image.shape[1]}x{image.shape[0]}, the rectangle {w}x{h}"
                )
            out[...] = image
        elif kind > JPEG:
            name = "PNG (TightPNG only)" if kind == PNG else "unknown"
            raise ProtocolError(
                f"Tight compression type {kind} ({name}) in control 0x{control:02x}"
            )
        else:
            yield from self._basic(target, control, out, tsize)

    def _basic(
        self, target: DecodeTarget, control: int, out: np.ndarray, tsize: int
    ) -> Parser[None]:
        pf = target.pixel_format
        h, w = out.shape[:2]
        stream_id = (control >> 4) & 3
        filter_id = COPY_FILTER
        if control & 0x40:
            (filter_id,) = yield from read_exact(1)
        palette = None
        if filter_id == PALETTE_FILTER:
            (n,) = yield from read_exact(1)
            n += 1
            palette = tpixels_to_rgb((yield from read_exact(n * tsize)), pf)
            bits = 1 if n == 2 else 8
            size = h * (-(-w * bits // 8))
        elif filter_id in (COPY_FILTER, GRADIENT_FILTER):
            size = h * w * tsize
        else:
            raise ProtocolError(
                f"Tight filter id {filter_id} is not copy (0), palette (1) or gradient (2)"
            )

        if size < MIN_TO_COMPRESS:
            data: bytes | np.ndarray = yield from read_exact(size)
        else:
            compressed = yield from _read_sized(target, "Tight zlib data")
            stream = self._streams[stream_id]
            if stream is None:
                stream = self._streams[stream_id] = zlib.decompressobj()
            try:
                data = inflate_exact(stream, compressed.data, size, f"Tight stream {stream_id}")
            except zlib.error as exc:
                raise zlib_error(f"Tight stream {stream_id}", exc) from None

        if palette is not None:
            apply_palette(out, palette, unpack_indices(data, bits, h, w))
        elif filter_id == COPY_FILTER:
            tpixels_to_rgb(data, pf, out=out, count=h * w)
        else:
            out[...] = _ungradient(data, pf, h, w)


def _read_sized(target: DecodeTarget, what: str) -> Parser[np.ndarray]:
    """Compact length, then that many bytes straight into the staging array."""
    length = yield from read_compact_length()
    if length > MAX_TIGHT_DATA_BYTES:
        raise LimitExceeded(f"{what} length", length, MAX_TIGHT_DATA_BYTES)
    staging = target.staging(length)
    yield from read_into(staging.data)
    return staging


def _ungradient(data: bytes | np.ndarray, pf: PixelFormat, h: int, w: int) -> np.ndarray:
    """Undo the gradient filter: each pixel was sent minus clamp(left + up - upleft).

    Every pixel depends on its left and upper neighbours, so we sweep anti-diagonals
    (h + w - 1 vectorised steps) instead of visiting pixels one by one.
    """
    raw = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
    if _tpixel_is_rgb(pf):
        diff = raw.reshape(h, w, 3).astype(np.int32)
        maxes = np.array([255, 255, 255], np.int32)
    else:
        values = raw[: h * w * pf.bytes_per_pixel].view(pf.dtype).reshape(h, w).astype(np.int32)
        maxes = np.array([pf.red_max, pf.green_max, pf.blue_max], np.int32)
        shifts = np.array([pf.red_shift, pf.green_shift, pf.blue_shift], np.int32)
        diff = (values[..., None] >> shifts) & maxes
    p = np.zeros((h + 1, w + 1, 3), np.int32)
    for s in range(h + w - 1):
        i = np.arange(max(0, s - w + 1), min(h - 1, s) + 1)
        j = s - i
        pred = p[i + 1, j] + p[i, j + 1] - p[i, j]
        np.clip(pred, 0, maxes, out=pred)
        p[i + 1, j + 1] = (pred + diff[i, j]) & maxes
    comps = p[1:, 1:]
    if _tpixel_is_rgb(pf):
        return comps.astype(np.uint8)
    values = (comps[..., 0] << pf.red_shift) | (comps[..., 1] << pf.green_shift)
    values |= comps[..., 2] << pf.blue_shift
    return pixels_to_rgb(
        values.astype(pf.dtype).view(np.uint8).reshape(-1), pf, out=np.empty((h, w, 3), np.uint8)
    )


class TightEncoder:
    """Per-connection: holds the zlib streams its rectangles continue.

    ``quality`` (0..9) or ``fine_quality`` (0..100) turns JPEG on; ``subsampling``
    overrides the level's default; ``compress_level`` is the zlib level (0..9).
    """

    encoding = Encoding.TIGHT

    def __init__(
        self,
        pixel_format: PixelFormat = NATIVE,
        quality: int | None = None,
        compress_level: int | None = None,
        fine_quality: int | None = None,
        subsampling: Subsampling | None = None,
    ) -> None:
        self.pixel_format = pixel_format
        self._streams: list[zlib._Compress | None] = [None] * 4
        self.quality = quality
        self.fine_quality = fine_quality
        self.subsampling = subsampling
        self.compress_level = compress_level

    def configure(self, prefs: EncodingPreferences) -> None:
        """Take JPEG and zlib settings from the client's latest SetEncodings."""
        self.quality, self.fine_quality = prefs.quality, prefs.fine_quality
        self.subsampling = prefs.subsampling
        if prefs.compress_level != self.compress_level:
            self.compress_level = prefs.compress_level
            self._streams = [None] * 4  # new streams at the new level, reset on next use

    @property
    def jpeg_settings(self) -> tuple[int, str] | None:
        """(libjpeg quality, simplejpeg subsampling), or None when JPEG is off."""
        if self.quality is None and self.fine_quality is None:
            return None
        if self.pixel_format.bits_per_pixel < 16:
            return None
        level_quality, level_sub = QUALITY_LEVELS[self.quality if self.quality is not None else 8]
        quality = self.fine_quality if self.fine_quality is not None else level_quality
        sub = self.subsampling if self.subsampling is not None else level_sub
        return max(1, quality), _SIMPLEJPEG_SUBSAMPLING[sub]

    def encode(self, frame: np.ndarray, x: int, y: int, w: int, h: int, out: list[bytes]) -> int:
        count = 0
        for cx in range(x, x + w, MAX_RECT_WIDTH):
            cw = min(MAX_RECT_WIDTH, x + w - cx)
            rows = max(1, MAX_RECT_PIXELS // cw)
            for cy in range(y, y + h, rows):
                ch = min(rows, y + h - cy)
                out.append(RectangleHeader(cx, cy, cw, ch, Encoding.TIGHT).serialize())
                out.append(self._encode_one(frame[cy : cy + ch, cx : cx + cw]))
                count += 1
        return count

    def _encode_one(self, rgb: np.ndarray) -> bytes:
        pf = self.pixel_format
        h, w = rgb.shape[:2]
        packed = pack_rgb(rgb).reshape(-1)
        if (packed == packed[0]).all():
            return bytes((FILL << 4,)) + rgb_to_tpixels(rgb[:1, 0], pf)
        jpeg = self.jpeg_settings
        found = find_palette(packed, JPEG_MIN_COLOURS if jpeg else 256)
        if found is None and jpeg is not None:
            quality, sub = jpeg
            data = simplejpeg.encode_jpeg(
                np.ascontiguousarray(rgb), quality=quality, colorspace="RGB", colorsubsampling=sub
            )
            return bytes((JPEG << 4,)) + compact_length(len(data)) + bytes(data)
        if found is None:
            return self._basic(0, None, rgb_to_tpixels(rgb, pf))
        colours, indices = found
        palette = rgb_to_tpixels(unpack_rgb(colours), pf)
        header = bytes((PALETTE_FILTER, colours.size - 1)) + palette
        if colours.size == 2:
            return self._basic(1, header, pack_indices(indices.reshape(h, w), 1))
        return self._basic(2, header, indices.tobytes())

    def _basic(self, stream_id: int, filter_header: bytes | None, data: bytes) -> bytes:
        control = stream_id << 4
        if filter_header is not None:
            control |= 0x40
        else:
            filter_header = b""
        if len(data) < MIN_TO_COMPRESS:
            return bytes((control,)) + filter_header + data
        stream = self._streams[stream_id]
        if stream is None:
            level = DEFAULT_ZLIB_LEVEL if self.compress_level is None else self.compress_level
            stream = self._streams[stream_id] = zlib.compressobj(level)
            control |= 1 << stream_id  # the client starts a fresh stream too
        compressed = stream.compress(data) + stream.flush(zlib.Z_SYNC_FLUSH)
        return bytes((control,)) + filter_header + compact_length(len(compressed)) + compressed
