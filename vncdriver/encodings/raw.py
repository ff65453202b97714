"""Raw encoding (0): every pixel in the client's pixel format, row by row.

Holds :class:`RawDecoder` (reads straight into the client's staging array, then one
strided copy into the framebuffer) and :class:`RawEncoder`.
"""

from __future__ import annotations

import numpy as np

from ..messages import Encoding, EncodingPreferences, RectangleHeader
from ..pixelformat import NATIVE, PixelFormat, pixels_to_rgb, rgb_to_pixels
from ..streams import Parser, read_into
from .common import DecodeTarget


class RawDecoder:
    """One object per connection like every decoder; it remembers whether the pixel
    format is R, G, B, X (ours), so a rectangle of it costs a read and three copies."""

    def __init__(self) -> None:
        self._format: PixelFormat | None = None
        self._native = False

    def decode(self, target: DecodeTarget, x: int, y: int, w: int, h: int) -> Parser[None]:
        pf = target.pixel_format
        if pf is not self._format:
            self._format, self._native = pf, pf.is_native
        if self._native:
            staging = target.staging(w * h * 4)
            yield from read_into(staging.data)
            src = staging.reshape(h, w, 4)
            out = target.framebuffer[y : y + h, x : x + w]
            # One strided copy per channel: numpy's 3-of-4 gather is several times slower.
            out[..., 0] = src[..., 0]
            out[..., 1] = src[..., 1]
            out[..., 2] = src[..., 2]
            return
        staging = target.staging(w * h * pf.bytes_per_pixel)
        yield from read_into(staging.data)
        pixels_to_rgb(staging, pf, out=target.framebuffer[y : y + h, x : x + w])


class RawEncoder:
    """Pixels as they are: the cheapest on CPU, the largest on the wire."""

    encoding = Encoding.RAW

    def __init__(self, pixel_format: PixelFormat = NATIVE) -> None:
        self.pixel_format = pixel_format
        #: R, G, B, 0 pixels for the RGBX formats (ours, TigerVNC's): the pad bytes stay 0
        #: and each rectangle is one strided copy in, one copy out.
        self._rgbx = np.zeros((0, 0, 4), np.uint8)

    @property
    def pixel_format(self) -> PixelFormat:
        return self._pixel_format

    @pixel_format.setter
    def pixel_format(self, pixel_format: PixelFormat) -> None:
        self._pixel_format = pixel_format
        self._native = pixel_format.is_native  # asked once, not per rectangle

    def configure(self, prefs: EncodingPreferences) -> None:
        """Raw has no settings."""

    def encode(self, frame: np.ndarray, x: int, y: int, w: int, h: int, out: list[bytes]) -> int:
        out.append(_HEADER.pack(x, y, w, h, Encoding.RAW))
        if self._native:
            if self._rgbx.shape[:2] != frame.shape[:2]:
                self._rgbx = np.zeros((*frame.shape[:2], 4), np.uint8)
            area = self._rgbx[y : y + h, x : x + w]
            src = frame[y : y + h, x : x + w]
            # A copy per channel: numpy's 3-into-4 scatter is slower past a few hundred
            # pixels (encode cost: python -m benchmarks vnc_server).
            area[..., 0] = src[..., 0]
            area[..., 1] = src[..., 1]
            area[..., 2] = src[..., 2]
            out.append(area.tobytes())
        else:
            out.append(rgb_to_pixels(frame[y : y + h, x : x + w], self.pixel_format).tobytes())
        return 1


_HEADER = RectangleHeader.FORMAT
