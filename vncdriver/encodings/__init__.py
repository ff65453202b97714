"""Rectangle encodings: one module each, dispatched through two tables.

Holds :data:`DECODERS` (encoding -> decoder class: Raw, CopyRect, Tight, ZRLE) and
:data:`ENCODERS` (encoding -> encoder class: Raw, Tight, ZRLE), plus :func:`decode_bytes`
which runs a decoder over a complete ``bytes`` payload (tests, tools).

Both sides make one object per class per connection: Tight and ZRLE continue zlib
streams from rectangle to rectangle. Pseudo-encodings (DesktopSize, LastRect, Cursor)
carry no pixels and are handled by the client's parser itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ProtocolError
from ..messages import Encoding
from ..pixelformat import NATIVE, PixelFormat
from ..streams import BytesFeeder
from .common import Decoder, DecodeTarget, Encoder
from .copyrect import CopyRectDecoder
from .raw import RawDecoder, RawEncoder
from .tight import TightDecoder, TightEncoder
from .zrle import ZRLEDecoder, ZRLEEncoder

__all__ = [
    "DECODERS",
    "ENCODERS",
    "DecodeTarget",
    "Decoder",
    "Encoder",
    "decode_bytes",
]

DECODERS: dict[int, Any] = {
    Encoding.RAW: RawDecoder,
    Encoding.COPYRECT: CopyRectDecoder,
    Encoding.TIGHT: TightDecoder,
    Encoding.ZRLE: ZRLEDecoder,
}

ENCODERS: dict[int, Any] = {
    Encoding.RAW: RawEncoder,
    Encoding.TIGHT: TightEncoder,
    Encoding.ZRLE: ZRLEEncoder,
}


class _ArrayTarget:
    def __init__(self, framebuffer: np.ndarray, pixel_format: PixelFormat) -> None:
        self.framebuffer = framebuffer
        self.pixel_format = pixel_format

    def staging(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, np.uint8)


def decode_bytes(
    decoder: Decoder,
    data: bytes,
    framebuffer: np.ndarray,
    x: int,
    y: int,
    w: int,
    h: int,
    pixel_format: PixelFormat = NATIVE,
) -> int:
    """Decode one rectangle's complete data into ``framebuffer``; return bytes consumed."""
    feeder = BytesFeeder(decoder.decode(_ArrayTarget(framebuffer, pixel_format), x, y, w, h))
    feeder.feed(data)
    if not feeder.done:
        raise ProtocolError(f"rectangle data ended early after {len(data)} bytes")
    return len(data) - len(feeder.trailing)
