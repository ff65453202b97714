"""CopyRect encoding (1): "copy this rectangle from (src_x, src_y) of your framebuffer".

Holds :class:`CopyRectDecoder`. We do not encode CopyRect (our server has no notion of
moved windows), but Xvnc sends it when windows move or scroll.
"""

from __future__ import annotations

import struct

from ..errors import ProtocolError
from ..streams import Parser, read_struct
from .common import DecodeTarget

_SOURCE = struct.Struct("!HH")


class CopyRectDecoder:
    """Copies inside the framebuffer; numpy handles overlapping source and destination."""

    def decode(self, target: DecodeTarget, x: int, y: int, w: int, h: int) -> Parser[None]:
        sx, sy = yield from read_struct(_SOURCE)
        fb = target.framebuffer
        height, width = fb.shape[:2]
        if sx + w > width or sy + h > height:
            raise ProtocolError(
                f"CopyRect source {w}x{h} at ({sx}, {sy}) is outside the {width}x{height} screen"
            )
        fb[y : y + h, x : x + w] = fb[sy : sy + h, sx : sx + w]
