"""Frames as OpenEnv observations carry them, sans I/O: a screen (``uint8[H, W, 3]``) in
the form a session asked for.

``png`` (the default): ``data:image/png;base64,...``, lossless, the form a vision-language
model's chat message takes as it is, and small for screens of few colours; ``raw``: the
bytes themselves in base64 (``np.frombuffer(base64.b64decode(s), np.uint8).reshape(shape)``);
``list``: a flat list of integers, as OpenEnv's own Atari environment sends its ``screen``
(for clients that insist: a number per byte of the screen, far more JSON than raw's
base64; docs/openenv.md has the bytes); ``none``: no pixels (text-only agents; the
observation still says the frame's number).

The PNG is written here with ``zlib`` (no imaging library at run time): one IDAT of
unfiltered rows (PNG's filter 0; *Up* made a Pong frame larger and slower: RESULTS.md).
``benchmarks/openenv_port.py`` measures each form's bytes, writing and reading
(docs/openenv.md has the figures).
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any, Final

import numpy as np

PNG: Final = "png"
RAW: Final = "raw"
LIST: Final = "list"
NONE: Final = "none"
#: The forms a session may ask for (reset's ``screen``), the default first.
FORMATS: Final = (PNG, RAW, LIST, NONE)
DEFAULT_FORMAT: Final = PNG
#: zlib's level for PNG: level 1 costs about half of zlib's default 6 for a frame twice the
#: size, still far under raw (``python -m benchmarks openenv_port``; RESULTS.md).
PNG_LEVEL: Final = 1
#: What a PNG observation begins with (a data URI, as browsers and chat APIs take images).
PNG_PREFIX: Final = "data:image/png;base64,"

_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(screen: np.ndarray, level: int = PNG_LEVEL) -> bytes:
    """``screen`` (``uint8[H, W, 3]``, RGB) as a PNG file."""
    height, width = screen.shape[:2]
    rows = np.zeros((height, width * 3 + 1), np.uint8)  # each row: its filter byte (0), its pixels
    rows[:, 1:] = np.asarray(screen, dtype=np.uint8).reshape(height, width * 3)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"".join((
        _SIGNATURE, _chunk(b"IHDR", header),
        _chunk(b"IDAT", zlib.compress(rows.tobytes(), level)), _chunk(b"IEND", b""),
    ))


def encode(screen: np.ndarray, form: str) -> Any:
    """The observation's ``screen`` in ``form`` (one of :data:`FORMATS`)."""
    if form == PNG:
        return PNG_PREFIX + base64.b64encode(png_bytes(screen)).decode("ascii")
    if form == RAW:
        return base64.b64encode(np.ascontiguousarray(screen, dtype=np.uint8).tobytes()).decode("ascii")
    if form == LIST:
        return np.ascontiguousarray(screen).reshape(-1)  # orjson writes it as a flat list
    if form == NONE:
        return None
    raise ValueError(f"screen must be one of {list(FORMATS)}, not {form!r}")


def decode(value: Any, form: str, shape: tuple[int, ...]) -> np.ndarray:
    """An observation's ``screen`` back as ``uint8[H, W, 3]`` (a client's side; tests and
    the benchmark use it). PNG needs Pillow."""
    if form == PNG:
        import io

        from PIL import Image

        data = base64.b64decode(str(value).removeprefix(PNG_PREFIX))
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    if form == RAW:
        return np.frombuffer(base64.b64decode(value), np.uint8).reshape(shape)
    if form == LIST:
        return np.asarray(value, np.uint8).reshape(shape)
    raise ValueError(f"a {form!r} observation has no pixels to decode")
