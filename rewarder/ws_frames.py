"""The one kind of WebSocket frame our shells frame and read themselves: a whole,
unfragmented text frame (RFC 6455, section 5.2). Sans-I/O.

Both fast paths use it — the server's (:mod:`.server_link`: client frames are masked,
its own are not) and the blocking client's (:mod:`.client_frames`: the reverse) — and
hand every other frame to websockets. Holds :data:`TEXT_FIN`, :func:`text_header` and
websockets' :func:`apply_mask` (its C version when it was built with it).
"""

from __future__ import annotations

import struct
from typing import Final

try:  # websockets' C unmasking, when it was built with its extension
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover (a pure-Python websockets)
    from websockets.utils import apply_mask

__all__ = ["LENGTH_16", "LENGTH_64", "MASK_BIT", "TEXT_FIN", "apply_mask", "text_header"]

#: First byte of a whole text frame (FIN, no RSV bits, opcode TEXT).
TEXT_FIN: Final = 0x81
#: The second byte's mask bit (set on every client frame, never on a server's).
MASK_BIT: Final = 0x80
#: Length fields that say "the length follows in 2 (126) or 8 (127) bytes".
LENGTH_16: Final = 126
LENGTH_64: Final = 127
_HEADER_16: Final = struct.Struct("!BBH")
_HEADER_64: Final = struct.Struct("!BBQ")


def text_header(size: int, masked: bool) -> bytes:
    """The header of a whole text frame of ``size`` payload bytes (the mask key, if
    ``masked``, follows it)."""
    mask = MASK_BIT if masked else 0
    if size < LENGTH_16:
        return bytes((TEXT_FIN, mask | size))
    if size < 1 << 16:
        return _HEADER_16.pack(TEXT_FIN, mask | LENGTH_16, size)
    return _HEADER_64.pack(TEXT_FIN, mask | LENGTH_64, size)
