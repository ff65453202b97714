"""Named limits on what a VNC peer may make us parse or allocate.

Every length read from the wire is checked against one of these before we allocate or
wait for that many bytes; going past one raises :class:`~vncdriver.errors.LimitExceeded`.
The protocol classes take each as a keyword argument to override it.
"""

from __future__ import annotations

#: More rectangles than this in one update is a runaway server (a 4K screen in 64x64
#: tiles is 2,040 rectangles).
MAX_RECTANGLES_PER_UPDATE = 10_000

#: Wider than this needs a framebuffer we will not allocate (8192x8192x3 is 192 MiB).
MAX_SCREEN_WIDTH = 8192

#: Taller than this: same reason as the width.
MAX_SCREEN_HEIGHT = 8192

#: Clipboard text larger than this is not a clipboard an agent needs.
MAX_CUT_TEXT_BYTES = 1 << 20

#: Failure reasons are one sentence; a longer one is garbage or an attack.
MAX_REASON_BYTES = 4096

#: Desktop names are a title bar; a longer one is garbage.
MAX_NAME_BYTES = 4096

#: Real clients list a dozen encodings and pseudo-encodings; 256 leaves room for all.
MAX_ENCODINGS = 256

#: Colour maps we meet are 8 bpp (256 entries); 4096 still allows 12-bit maps.
MAX_COLOUR_MAP_ENTRIES = 4096

#: Tight's compact length cannot say more than 2**22 - 1 bytes anyway.
MAX_TIGHT_DATA_BYTES = (1 << 22) - 1

#: One ZRLE rectangle's zlib data; a full 4K screen of noise compresses to ~33 MiB.
MAX_ZRLE_DATA_BYTES = 64 << 20

#: Cursor shapes are icons; a 1024x1024 cursor is already absurd.
MAX_CURSOR_SIZE = 1024
