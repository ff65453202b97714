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
    """Raw needs no state; one object per connection like every decoder."""

    def decode(self, target: DecodeTarget, x: int, y: int, w: int, h: int) -> Parser[None]:
        pf = target.pixel_format
        staging = target.staging(w * h * pf.bytes_per_pixel)
        yield from read_into(staging.data)
        pixels_to_rgb(staging, pf, out=target.framebuffer[y : y + h, x : x + w])


class RawEncoder:
    """Pixels as they are: the cheapest on CPU, the largest on the wire."""

    encoding = Encoding.RAW

    def __init__(self, pixel_format: PixelFormat = NATIVE) -> None:
        self.pixel_format = pixel_format

    def configure(self, prefs: EncodingPreferences) -> None:
        """Raw has no settings."""

    def encode(self, frame: np.ndarray, x: int, y: int, w: int, h: int, out: list[bytes]) -> int:
        out.append(RectangleHeader(x, y, w, h, Encoding.RAW).serialize())
        out.append(rgb_to_pixels(frame[y : y + h, x : x + w], self.pixel_format).tobytes())
        return 1
