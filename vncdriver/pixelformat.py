"""RFB pixel formats and vectorised conversions between pixel bytes and RGB arrays.

Holds :class:`PixelFormat` (the 16-byte PIXEL_FORMAT structure), :data:`NATIVE` (the
format our server offers and our client asks for), :func:`pixels_to_rgb` and
:func:`rgb_to_pixels` (numpy, any true-colour format of 8, 16 or 32 bits per pixel) and
the compact-pixel helpers Tight (TPIXEL) and ZRLE (CPIXEL) need.

``NATIVE`` is 32 bpp, depth 24, little endian, red at bit 0, green at 8, blue at 16: a
pixel is the bytes R, G, B, X in memory, so ``buf.reshape(h, w, 4)[..., :3]`` is already
RGB and decoding a Raw rectangle is one strided copy.
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass

import numpy as np

from .errors import ProtocolError

__all__ = [
    "NATIVE",
    "PixelFormat",
    "cpixels_to_rgb",
    "pack_rgb",
    "pixels_to_rgb",
    "rgb_to_cpixels",
    "rgb_to_pixels",
    "unpack_rgb",
]

_STRUCT = struct.Struct("!BB??HHHBBB3x")


@dataclass(frozen=True, slots=True)
class PixelFormat:
    """RFC 6143 §7.4 PIXEL_FORMAT. Defaults are :data:`NATIVE`."""

    bits_per_pixel: int = 32
    depth: int = 24
    big_endian: bool = False
    true_colour: bool = True
    red_max: int = 255
    green_max: int = 255
    blue_max: int = 255
    red_shift: int = 0
    green_shift: int = 8
    blue_shift: int = 16

    SIZE = 16

    @classmethod
    def parse(cls, data: bytes) -> PixelFormat:
        """Read the 16-byte wire form (flags are true for any non-zero byte)."""
        if len(data) != cls.SIZE:
            raise ProtocolError(f"PIXEL_FORMAT is 16 bytes, got {len(data)}")
        return cls(*_STRUCT.unpack(data))

    def serialize(self) -> bytes:
        return _STRUCT.pack(
            self.bits_per_pixel,
            self.depth,
            self.big_endian,
            self.true_colour,
            self.red_max,
            self.green_max,
            self.blue_max,
            self.red_shift,
            self.green_shift,
            self.blue_shift,
        )

    @property
    def bytes_per_pixel(self) -> int:
        return self.bits_per_pixel // 8

    def check(self) -> None:
        """Raise ProtocolError unless we can encode and decode this format.

        We only do true colour at 8, 16 or 32 bpp, with each max of the form 2**n - 1 and
        every channel inside the pixel: that is all RFB allows except colour maps.
        """
        problems = []
        if not self.true_colour:
            problems.append("it must be true colour (colour maps are not supported)")
        if self.bits_per_pixel not in (8, 16, 32):
            problems.append(f"bits-per-pixel must be 8, 16 or 32, not {self.bits_per_pixel}")
        if not 1 <= self.depth <= self.bits_per_pixel:
            problems.append(f"depth {self.depth} must be 1..{self.bits_per_pixel}")
        for colour, mx, shift in self._channels():
            if mx < 1 or mx & (mx + 1):
                problems.append(f"{colour}-max {mx} must be 2**n - 1 and at least 1")
            elif (mx << shift) >> self.bits_per_pixel:
                problems.append(
                    f"{colour} (max {mx}, shift {shift}) does not fit in {self.bits_per_pixel} bits"
                )
        if problems:
            raise ProtocolError(f"unusable pixel format {self.describe()}: " + "; ".join(problems))

    def describe(self) -> str:
        """A short human form, e.g. ``32bpp depth 24 LE true-colour R255<<0 G255<<8 B255<<16``."""
        return (
            f"{self.bits_per_pixel}bpp depth {self.depth} {'BE' if self.big_endian else 'LE'} "
            f"{'true-colour' if self.true_colour else 'colour-mapped'} "
            f"R{self.red_max}<<{self.red_shift} G{self.green_max}<<{self.green_shift} "
            f"B{self.blue_max}<<{self.blue_shift}"
        )

    def _channels(self) -> tuple[tuple[str, int, int], ...]:
        return (
            ("red", self.red_max, self.red_shift),
            ("green", self.green_max, self.green_shift),
            ("blue", self.blue_max, self.blue_shift),
        )

    @property
    def is_native(self) -> bool:
        """True for the layout where the first three bytes of each pixel are R, G, B."""
        return _is_rgbx(self)

    @property
    def is_888(self) -> bool:
        """True when Tight sends 3-byte TPIXELs (R, G, B) instead of full pixels."""
        return (
            self.true_colour
            and self.bits_per_pixel == 32
            and self.depth == 24
            and self.red_max == self.green_max == self.blue_max == 255
        )

    @property
    def cpixel_bytes(self) -> tuple[int, int]:
        """ZRLE's CPIXEL as ``(first byte, size)`` within a pixel's bytes in memory.

        RFC 6143 §7.7.6: 32 bpp true colour pixels whose channels all fit in the least (or
        most) significant three bytes travel as just those three bytes.
        """
        bpp = self.bytes_per_pixel
        if self.true_colour and self.bits_per_pixel == 32 and self.depth <= 24:
            mask = 0
            for _colour, mx, shift in self._channels():
                mask |= mx << shift
            if mask < 1 << 24:
                return (1 if self.big_endian else 0), 3
            if mask & 0xFF == 0:
                return (0 if self.big_endian else 1), 3
        return 0, bpp

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of one whole pixel value in this format's byte order."""
        order = ">" if self.big_endian else "<"
        return np.dtype({8: "u1", 16: f"{order}u2", 32: f"{order}u4"}[self.bits_per_pixel])


#: The format our server offers and our client asks for (see the module docstring).
NATIVE = PixelFormat()


@functools.lru_cache(maxsize=64)
def _is_rgbx(pf: PixelFormat) -> bool:
    """True when the bytes of each pixel in memory are R, G, B, X."""
    if not pf.true_colour or pf.bits_per_pixel != 32 or not pf.red_max == pf.green_max == 255:
        return False
    if pf.blue_max != 255:
        return False
    shifts = (pf.red_shift, pf.green_shift, pf.blue_shift)
    return shifts == ((24, 16, 8) if pf.big_endian else (0, 8, 16))


@functools.lru_cache(maxsize=64)
def _widen_lut(mx: int) -> np.ndarray:
    """Channel value 0..mx -> 0..255, rounded."""
    values = np.arange(mx + 1, dtype=np.uint32)
    return ((values * 255 + mx // 2) // mx).astype(np.uint8)


@functools.lru_cache(maxsize=64)
def _narrow_lut(mx: int) -> np.ndarray:
    """Channel value 0..255 -> 0..mx, rounded."""
    values = np.arange(256, dtype=np.uint32)
    return (values * mx + 127) // 255


def pixels_to_rgb(
    data: np.ndarray | bytes | bytearray | memoryview,
    pf: PixelFormat,
    out: np.ndarray | None = None,
    count: int | None = None,
) -> np.ndarray:
    """Decode pixels in format ``pf`` into RGB.

    ``data`` holds whole pixels (bytes or a uint8 array). With ``out`` (a uint8 array whose
    last axis is 3, e.g. a framebuffer slice) the pixels are written there in place and
    ``out`` is returned; without it a new ``uint8[count, 3]`` array comes back.
    """
    raw = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    bpp = pf.bytes_per_pixel
    n = raw.size // bpp if count is None else count
    if out is None:
        out = np.empty((n, 3), np.uint8)
    shape = out.shape
    if raw.size < n * bpp or math.prod(shape[:-1]) != n:
        raise ValueError(f"{raw.size} bytes do not hold {n} pixels of {bpp} bytes for {shape}")
    if _is_rgbx(pf):
        src = raw[: n * 4].reshape(*shape[:-1], 4)
        # One strided copy per channel, not one copy of the [..., :3] view: numpy's 3-of-4
        # gather is a slow inner loop (decode cost: python -m benchmarks vnc_client).
        for c in range(3):
            out[..., c] = src[..., c]
        return out
    values = raw[: n * bpp].view(pf.dtype).reshape(shape[:-1])
    for i, (_colour, mx, shift) in enumerate(pf._channels()):
        channel = (values >> shift) & mx
        out[..., i] = channel if mx == 255 else _widen_lut(mx)[channel]
    return out


def rgb_to_pixels(rgb: np.ndarray, pf: PixelFormat) -> np.ndarray:
    """Encode a uint8 ``[..., 3]`` RGB array as pixels: a uint8 ``[..., bytes_per_pixel]`` array."""
    shape = rgb.shape[:-1]
    if _is_rgbx(pf):
        px = np.zeros((*shape, 4), np.uint8)
        for c in range(3):  # a copy per channel: numpy's px[..., :3] = rgb scatters slowly
            px[..., c] = rgb[..., c]
        return px
    values = np.zeros(shape, np.uint32)
    for i, (_colour, mx, shift) in enumerate(pf._channels()):
        channel = rgb[..., i].astype(np.uint32) if mx == 255 else _narrow_lut(mx)[rgb[..., i]]
        values |= channel << np.uint32(shift)
    return values.astype(pf.dtype).view(np.uint8).reshape(*shape, pf.bytes_per_pixel)


def rgb_to_cpixels(rgb: np.ndarray, pf: PixelFormat) -> np.ndarray:
    """Encode RGB as ZRLE CPIXELs: uint8 ``[..., cpixel size]``."""
    first, size = pf.cpixel_bytes
    px = rgb_to_pixels(rgb, pf)
    return px if size == pf.bytes_per_pixel else px[..., first : first + size]


def cpixels_to_rgb(data: np.ndarray, pf: PixelFormat, out: np.ndarray | None = None) -> np.ndarray:
    """Decode ZRLE CPIXELs (uint8 ``[n * size]`` or ``[..., size]``) into RGB."""
    first, size = pf.cpixel_bytes
    flat = data.reshape(-1)
    n = flat.size // size
    if size == pf.bytes_per_pixel:
        return pixels_to_rgb(flat, pf, out=out, count=n)
    if out is None:
        out = np.empty((n, 3), np.uint8)
    if _is_rgbx(pf):  # CPIXEL is exactly R, G, B
        out[...] = flat.reshape(*out.shape[:-1], 3)
        return out
    full = np.zeros((n, 4), np.uint8)
    full[:, first : first + 3] = flat.reshape(n, 3)
    return pixels_to_rgb(full.reshape(-1), pf, out=out, count=n)


def pack_rgb(rgb: np.ndarray) -> np.ndarray:
    """RGB ``[..., 3]`` -> uint32 ``[...]`` (r | g << 8 | b << 16): one number per colour.

    Lets np.unique, np.diff and comparisons treat a pixel as one value.
    """
    r = rgb[..., 0].astype(np.uint32)
    r |= rgb[..., 1].astype(np.uint32) << np.uint32(8)
    r |= rgb[..., 2].astype(np.uint32) << np.uint32(16)
    return r


def unpack_rgb(packed: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_rgb`."""
    return packed.astype("<u4").view(np.uint8).reshape(*packed.shape, 4)[..., :3]
