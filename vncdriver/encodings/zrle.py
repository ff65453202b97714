"""ZRLE encoding (16): 64x64 tiles inside one zlib stream per connection (RFC 6143 §7.7.6).

Holds :class:`ZRLEDecoder` and :class:`ZRLEEncoder`. Each rectangle is a u32 length and
zlib data; inflated, it holds tiles left to right, top to bottom, each starting with a
subencoding byte: 0 raw CPIXELs, 1 solid, 2-16 packed palette (1, 2 or 4 bits per
index, rows padded to bytes), 128 plain RLE, 130-255 palette RLE. Run lengths are
bytes of 255 ended by one below 255, summing to length - 1.

Decoding RLE tiles walks the runs in Python (one step per run, never per pixel of a
run); everything else is numpy. The encoder finds runs with numpy diff and palettes via
np.unique, estimates each subencoding's size and writes the smallest.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from ..errors import LimitExceeded, ProtocolError
from ..limits import MAX_ZRLE_DATA_BYTES
from ..messages import Encoding, EncodingPreferences, RectangleHeader
from ..pixelformat import (
    NATIVE,
    PixelFormat,
    cpixels_to_rgb,
    pack_rgb,
    rgb_to_cpixels,
    unpack_rgb,
)
from ..streams import Parser, read_into, read_struct
from .common import (
    DecodeTarget,
    apply_palette,
    find_palette,
    index_bits,
    inflate_at_most,
    pack_indices,
    packed_row_bytes,
    run_starts,
    unpack_indices,
    zlib_error,
)

TILE = 64
RAW, SOLID, PLAIN_RLE = 0, 1, 128
_U32 = struct.Struct("!I")

DEFAULT_ZLIB_LEVEL = 1


def _tiles(w: int, h: int):  # type: ignore[no-untyped-def]
    for ty in range(0, h, TILE):
        for tx in range(0, w, TILE):
            yield tx, ty, min(TILE, w - tx), min(TILE, h - ty)


class ZRLEDecoder:
    """Per-connection: the one zlib stream every ZRLE rectangle continues."""

    def __init__(self) -> None:
        self._stream = zlib.decompressobj()

    def decode(self, target: DecodeTarget, x: int, y: int, w: int, h: int) -> Parser[None]:
        (length,) = yield from read_struct(_U32)
        if length > MAX_ZRLE_DATA_BYTES:
            raise LimitExceeded("ZRLE data length", length, MAX_ZRLE_DATA_BYTES)
        staging = target.staging(length)
        yield from read_into(staging.data)
        pf = target.pixel_format
        cp = pf.cpixel_bytes[1]
        ntiles = -(-w // TILE) * -(-h // TILE)
        bound = ntiles * (1 + 127 * cp) + w * h * (cp + 1)  # no valid rectangle inflates more
        try:
            data = inflate_at_most(self._stream, staging.data, bound, "ZRLE data")
        except zlib.error as exc:
            raise zlib_error("ZRLE", exc) from None
        fb = target.framebuffer
        pos = 0
        for tx, ty, tw, th in _tiles(w, h):
            out = fb[y + ty : y + ty + th, x + tx : x + tx + tw]
            pos = _decode_tile(data, pos, out, pf, cp)
        if pos != len(data):
            raise ProtocolError(f"ZRLE data for {w}x{h} has {len(data) - pos} bytes past its tiles")


def _take(data: bytes, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(data):
        raise ProtocolError(f"ZRLE data ends inside {what} ({len(data)} bytes, needed {end})")
    return end


def _decode_tile(data: bytes, pos: int, out: np.ndarray, pf: PixelFormat, cp: int) -> int:
    th, tw = out.shape[:2]
    n = th * tw
    end = _take(data, pos, 1, "a tile's subencoding")
    sub = data[pos]
    pos = end
    if sub == RAW:
        end = _take(data, pos, n * cp, "a raw tile")
        cpixels_to_rgb(np.frombuffer(data, np.uint8, n * cp, pos), pf, out=out)
        return end
    if sub == SOLID:
        end = _take(data, pos, cp, "a solid tile")
        out[...] = cpixels_to_rgb(np.frombuffer(data, np.uint8, cp, pos), pf)[0]
        return end
    if 2 <= sub <= 16 or sub >= 130:
        size = sub if sub <= 16 else sub - 128
        end = _take(data, pos, size * cp, "a tile palette")
        palette = cpixels_to_rgb(np.frombuffer(data, np.uint8, size * cp, pos), pf)
        pos = end
        if sub <= 16:
            bits = index_bits(size)
            nbytes = th * packed_row_bytes(tw, bits)
            end = _take(data, pos, nbytes, "a packed palette tile")
            indices = unpack_indices(np.frombuffer(data, np.uint8, nbytes, pos), bits, th, tw)
            apply_palette(out, palette, indices)
            return end
        return _palette_rle(data, pos, out, palette, n)
    if sub == PLAIN_RLE:
        return _plain_rle(data, pos, out, pf, cp, n)
    raise ProtocolError(f"ZRLE tile subencoding {sub} is not defined (17-127 and 129 are unused)")


def _run_length(data: bytes, pos: int) -> tuple[int, int]:
    """Read a run length (255s ended by a byte < 255); return (length, new pos)."""
    length = 1
    size = len(data)
    while True:
        if pos >= size:
            raise ProtocolError("ZRLE data ends inside a run length")
        b = data[pos]
        pos += 1
        length += b
        if b != 255:
            return length, pos


def _palette_rle(data: bytes, pos: int, out: np.ndarray, palette: np.ndarray, n: int) -> int:
    indices: list[int] = []
    lengths: list[int] = []
    done = 0
    size = len(data)
    while done < n:
        if pos >= size:
            raise ProtocolError("ZRLE data ends inside a palette RLE tile")
        b = data[pos]
        pos += 1
        if b & 0x80:
            length, pos = _run_length(data, pos)
        else:
            length = 1
        indices.append(b & 0x7F)
        lengths.append(length)
        done += length
    if done != n:
        raise ProtocolError(f"ZRLE palette RLE runs cover {done} pixels of a {n}-pixel tile")
    idx = np.array(indices)
    if idx.size and idx.max() >= len(palette):
        raise ProtocolError(
            f"ZRLE palette RLE index {idx.max()} is past the {len(palette)}-colour palette"
        )
    apply_palette(out, palette, np.repeat(idx, lengths))
    return pos


def _plain_rle(data: bytes, pos: int, out: np.ndarray, pf: PixelFormat, cp: int, n: int) -> int:
    starts: list[int] = []
    lengths: list[int] = []
    done = 0
    while done < n:
        _take(data, pos, cp, "a plain RLE tile")
        starts.append(pos)
        length, pos = _run_length(data, pos + cp)
        lengths.append(length)
        done += length
    if done != n:
        raise ProtocolError(f"ZRLE plain RLE runs cover {done} pixels of a {n}-pixel tile")
    raw = np.frombuffer(data, np.uint8)
    offsets = np.array(starts)[:, None] + np.arange(cp)
    colours = cpixels_to_rgb(raw[offsets].reshape(-1), pf)
    out[...] = np.repeat(colours, lengths, axis=0).reshape(out.shape)
    return pos


class ZRLEEncoder:
    """Per-connection: the one zlib stream all our ZRLE rectangles continue."""

    encoding = Encoding.ZRLE

    def __init__(
        self, pixel_format: PixelFormat = NATIVE, compress_level: int | None = None
    ) -> None:
        self.pixel_format = pixel_format
        self._level = DEFAULT_ZLIB_LEVEL if compress_level is None else compress_level
        self._stream = zlib.compressobj(self._level)
        self._used = False

    def configure(self, prefs: EncodingPreferences) -> None:
        """Take the client's compression level, until the first rectangle.

        ZRLE's stream can never be reset, so later changes of level are ignored.
        """
        level = DEFAULT_ZLIB_LEVEL if prefs.compress_level is None else prefs.compress_level
        if not self._used and level != self._level:
            self._level = level
            self._stream = zlib.compressobj(level)

    def encode(self, frame: np.ndarray, x: int, y: int, w: int, h: int, out: list[bytes]) -> int:
        region = frame[y : y + h, x : x + w]
        pf = self.pixel_format
        cpixels = rgb_to_cpixels(region, pf)
        packed = pack_rgb(region)
        parts: list[bytes] = []
        for tx, ty, tw, th in _tiles(w, h):
            parts.append(
                _encode_tile(
                    packed[ty : ty + th, tx : tx + tw], cpixels[ty : ty + th, tx : tx + tw], pf
                )
            )
        self._used = True
        compressed = self._stream.compress(b"".join(parts)) + self._stream.flush(zlib.Z_SYNC_FLUSH)
        out.append(RectangleHeader(x, y, w, h, Encoding.ZRLE).serialize())
        out.append(_U32.pack(len(compressed)))
        out.append(compressed)
        return 1


def _run_bytes(lengths: np.ndarray) -> np.ndarray:
    """How many bytes each run length takes."""
    return (lengths - 1) // 255 + 1


def _write_runs(buf: np.ndarray, ends: np.ndarray, lengths: np.ndarray) -> None:
    """Fill run lengths whose last byte sits at ``ends``; buf is pre-filled with 255."""
    buf[ends] = (lengths - 1) % 255


def _encode_tile(packed: np.ndarray, cpixels: np.ndarray, pf: PixelFormat) -> bytes:
    th, tw = packed.shape
    n = th * tw
    cp = cpixels.shape[-1]
    flat = packed.reshape(-1)
    flat_cp = cpixels.reshape(n, cp)
    starts = run_starts(flat)
    if starts.size == 1:
        return bytes((SOLID,)) + bytes(flat_cp[0].tobytes())
    lengths = np.diff(np.append(starts, n))
    run_bytes = _run_bytes(lengths)
    sizes = {RAW: n * cp, PLAIN_RLE: int(starts.size * cp + run_bytes.sum())}
    found = find_palette(flat, 127)
    if found is not None:
        colours, indices = found
        k = colours.size
        palette_bytes = k * cp
        sizes[128 + k] = palette_bytes + int(np.where(lengths == 1, 1, 1 + run_bytes).sum())
        if k <= 16:
            sizes[k] = palette_bytes + th * packed_row_bytes(tw, index_bits(k))
    best = min(sizes, key=lambda s: (sizes[s], s))
    if best == RAW:
        return bytes((RAW,)) + np.ascontiguousarray(flat_cp).tobytes()
    if best == PLAIN_RLE:
        buf = np.full(sizes[PLAIN_RLE], 255, np.uint8)
        each = cp + run_bytes
        offsets = np.concatenate(([0], np.cumsum(each)[:-1]))
        buf[offsets[:, None] + np.arange(cp)] = flat_cp[starts]
        _write_runs(buf, offsets + each - 1, lengths)
        return bytes((PLAIN_RLE,)) + buf.tobytes()
    palette_cp = rgb_to_cpixels(unpack_rgb(colours), pf).tobytes()
    if best <= 16:
        grid = indices.reshape(th, tw)
        return bytes((best,)) + palette_cp + pack_indices(grid, index_bits(best))
    single = lengths == 1
    each = np.where(single, 1, 1 + run_bytes)
    offsets = np.concatenate(([0], np.cumsum(each)[:-1]))
    buf = np.full(int(each.sum()), 255, np.uint8)
    buf[offsets] = indices[starts] | np.where(single, 0, 0x80).astype(np.uint8)
    multi = ~single
    _write_runs(buf, (offsets + each - 1)[multi], lengths[multi])
    return bytes((best,)) + palette_cp + buf.tobytes()
