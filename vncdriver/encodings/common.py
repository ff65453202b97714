"""What every encoding module shares: the decoder/encoder interfaces and numpy helpers.

Holds the :class:`DecodeTarget`, :class:`Decoder` and :class:`Encoder` protocols,
Tight's compact length (:func:`read_compact_length`, :func:`compact_length`), bit-packed
palette indices (:func:`pack_indices`, :func:`unpack_indices`), palette and run finding
(:func:`find_palette`, :func:`run_starts`) and zlib inflation that never grows past what
a rectangle can need (:func:`inflate_exact`, :func:`inflate_at_most`).
"""

from __future__ import annotations

import zlib
from collections.abc import Generator
from typing import Protocol

import numpy as np

from ..errors import LimitExceeded, ProtocolError
from ..messages import EncodingPreferences
from ..pixelformat import PixelFormat, pack_rgb
from ..streams import Parser, read_exact


class DecodeTarget(Protocol):
    """What a decoder writes into: the client protocol object provides this."""

    framebuffer: np.ndarray  # uint8[H, W, 3], updated in place
    pixel_format: PixelFormat  # the format the server sends pixels in

    def staging(self, nbytes: int) -> np.ndarray:
        """A reusable uint8[nbytes] array to receive data into (valid until the next call)."""
        ...


class Decoder(Protocol):
    """Per-connection decoder of one encoding (it may hold zlib streams)."""

    def decode(self, target: DecodeTarget, x: int, y: int, w: int, h: int) -> Parser[None]:
        """A parser reading one rectangle's data and writing it into ``target``."""
        ...


class Encoder(Protocol):
    """Per-connection encoder of one encoding (it may hold zlib streams)."""

    encoding: int
    pixel_format: PixelFormat  # the client's; the server sets it on SetPixelFormat

    def configure(self, prefs: EncodingPreferences) -> None:
        """Take settings (JPEG quality, zlib level) from the client's SetEncodings."""
        ...

    def encode(self, frame: np.ndarray, x: int, y: int, w: int, h: int, out: list[bytes]) -> int:
        """Append rectangles (headers and data) for ``frame[y:y+h, x:x+w]`` to ``out``.

        Returns how many rectangles were appended (Tight may split a large one).
        """
        ...


def read_compact_length() -> Generator[int, bytes, int]:
    """Tight's 1-3 byte length: 7 bits per byte, high bit says "more"; 22 bits at most."""
    (b,) = yield from read_exact(1)
    length = b & 0x7F
    if b & 0x80:
        (b,) = yield from read_exact(1)
        length |= (b & 0x7F) << 7
        if b & 0x80:
            (b,) = yield from read_exact(1)
            length |= b << 14
    return length


def compact_length(n: int) -> bytes:
    """Encode ``n`` (< 2**22) as Tight's compact length."""
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x400000:
        return bytes((n & 0x7F | 0x80, (n >> 7) & 0x7F | 0x80, n >> 14))
    raise ValueError(f"{n} bytes do not fit in a Tight compact length")


def index_bits(palette_size: int) -> int:
    """Bits per index for a packed palette of this size (1, 2, 4 or 8)."""
    for bits in (1, 2, 4):
        if palette_size <= 1 << bits:
            return bits
    return 8


def pack_indices(indices: np.ndarray, bits: int) -> bytes:
    """Pack uint8 indices ``[h, w]`` at ``bits`` per pixel, rows padded to bytes, MSB first."""
    if bits == 8:
        return indices.astype(np.uint8).tobytes()
    h, w = indices.shape
    per_byte = 8 // bits
    padded_w = -(-w // per_byte) * per_byte
    padded = np.zeros((h, padded_w), np.uint8)
    padded[:, :w] = indices
    groups = padded.reshape(h, padded_w // per_byte, per_byte)
    shifts = np.arange(8 - bits, -1, -bits, dtype=np.uint8)
    packed: bytes = np.bitwise_or.reduce(groups << shifts, axis=2).astype(np.uint8).tobytes()
    return packed


def unpack_indices(data: np.ndarray | bytes, bits: int, h: int, w: int) -> np.ndarray:
    """Inverse of :func:`pack_indices`: uint8 ``[h, w]`` indices."""
    raw = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    if bits == 8:
        return raw[: h * w].reshape(h, w)
    per_byte = 8 // bits
    row_bytes = -(-w // per_byte)
    rows = raw[: h * row_bytes].reshape(h, row_bytes, 1)
    shifts = np.arange(8 - bits, -1, -bits, dtype=np.uint8)
    mask = np.uint8((1 << bits) - 1)
    return ((rows >> shifts) & mask).reshape(h, row_bytes * per_byte)[:, :w]


def apply_palette(out: np.ndarray, palette: np.ndarray, indices: np.ndarray) -> None:
    """out[...] = palette[indices], via one uint32 per colour (one gather of words, not of
    3-byte rows; decode cost: ``python -m benchmarks vnc_client``).

    Indices past the palette give black, as TigerVNC does, rather than an error.
    """
    lut = np.zeros(256, "<u4")
    lut[: len(palette)] = pack_rgb(palette)
    pixels = lut[indices]
    out[...] = pixels.view(np.uint8).reshape(*pixels.shape, 4)[..., :3].reshape(out.shape)


def packed_row_bytes(w: int, bits: int) -> int:
    return -(-w * bits // 8)


def find_palette(packed: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The sorted distinct colours of ``packed`` (flat uint32) and each pixel's index.

    None when there are more than ``limit``. Guesses the palette from a sample first, so
    noisy rectangles are rejected after sorting ~1,000 values, not all of them.
    """
    n = packed.size
    sample = packed[:: max(1, n // 1024)]
    candidates = np.unique(sample)
    if candidates.size > limit:
        return None
    indices = np.searchsorted(candidates, packed)
    np.minimum(indices, candidates.size - 1, out=indices)
    if not np.array_equal(candidates[indices], packed):
        if n > 8192 and np.unique(packed[:: n // 8192]).size > limit:
            return None  # a denser sample already has too many: skip the full sort
        candidates = np.unique(packed)
        if candidates.size > limit:
            return None
        indices = np.searchsorted(candidates, packed)
    return candidates, indices.astype(np.uint8)


def run_starts(packed: np.ndarray) -> np.ndarray:
    """Start positions of runs of equal values in flat ``packed``."""
    change = np.flatnonzero(packed[1:] != packed[:-1]) + 1
    return np.concatenate((np.zeros(1, change.dtype), change))


def inflate_exact(
    stream: zlib._Decompress, data: bytes | memoryview, expected: int, what: str
) -> bytes:
    """Inflate ``data`` into exactly ``expected`` bytes; anything else is a ProtocolError."""
    out = stream.decompress(data, expected)
    if len(out) != expected:
        raise ProtocolError(f"{what}: zlib data inflated to {len(out)} bytes, expected {expected}")
    tail = stream.unconsumed_tail
    while tail:  # only flush markers may remain: they inflate to nothing
        if stream.decompress(tail, 1):
            raise ProtocolError(f"{what}: zlib data holds more than the {expected} bytes needed")
        if stream.unconsumed_tail == tail:
            break
        tail = stream.unconsumed_tail
    return out


def inflate_at_most(
    stream: zlib._Decompress, data: bytes | memoryview, limit: int, what: str
) -> bytes:
    """Inflate ``data`` completely, refusing to produce more than ``limit`` bytes."""
    out = stream.decompress(data, limit)
    if stream.unconsumed_tail:
        raise LimitExceeded(f"{what} inflated size", limit + 1, limit)
    return out


def decompressor() -> zlib._Decompress:
    return zlib.decompressobj()


def zlib_error(what: str, exc: zlib.error) -> ProtocolError:
    return ProtocolError(f"{what}: corrupt zlib data ({exc})")
