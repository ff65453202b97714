"""The byte layout of a runtime's snapshot: named fixed-size fields, read back one by one.

Holds :class:`StateLayout` (a ``struct`` format with a name per field: pack a dict, read
a dict, every read checked for its length first) and :func:`pack_rng` /
:func:`unpack_rng` for numpy's PCG64 generator, so a restored game draws the same
numbers next. Never pickle: these bytes may come from a client (docs/snapshots.md), and
reading them can only fill numbers in, never run code.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from .errors import BadSnapshot

#: PCG64's 128-bit state and increment, as two 16-byte big-endian numbers, then whether a
#: 32-bit half is buffered and that half.
RNG_FORMAT: Final = "16s16s?I"
_RNG_FIELDS: Final = ("rng_state", "rng_inc", "rng_has_uint32", "rng_uinteger")


class StateLayout:
    """A snapshot's fields in order: ``(name, struct code)`` pairs, big-endian, after a
    4-byte ``magic`` and a 2-byte layout ``version`` that say whose bytes these are."""

    def __init__(self, magic: bytes, version: int, fields: tuple[tuple[str, str], ...]) -> None:
        if len(magic) != 4:
            raise ValueError("a layout's magic is 4 bytes")
        self.magic, self.version = magic, version
        self.names = tuple(name for name, _ in fields)
        self.struct = struct.Struct("!4sH" + "".join(code for _, code in fields))

    @property
    def size(self) -> int:
        """Bytes of every state of this layout."""
        return self.struct.size

    def pack(self, values: Mapping[str, Any]) -> bytes:
        return self.struct.pack(self.magic, self.version, *(values[name] for name in self.names))

    def unpack(self, data: bytes, what: str) -> dict[str, Any]:
        """The fields of ``data``; :class:`BadSnapshot` naming what is wrong if it is not
        a state of this layout (``what``: whose state, for the message)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise BadSnapshot(f"a {what} state is bytes, not {type(data).__name__}")
        if len(data) != self.size:
            raise BadSnapshot(f"a {what} state is {self.size} bytes, not {len(data)}")
        magic, version, *values = self.struct.unpack(bytes(data))
        if magic != self.magic:
            raise BadSnapshot(f"these bytes are not a {what} state (magic {magic!r}, not {self.magic!r})")
        if version != self.version:
            raise BadSnapshot(f"a {what} state of layout {version}; this runtime reads layout {self.version}")
        return dict(zip(self.names, values, strict=True))


def rng_fields() -> tuple[tuple[str, str], ...]:
    """The fields :func:`pack_rng` fills, to splice into a layout."""
    codes = ("16s", "16s", "?", "I")
    return tuple(zip(_RNG_FIELDS, codes, strict=True))


def pack_rng(rng: np.random.Generator) -> dict[str, Any]:
    """The generator's whole state as layout fields."""
    state = rng.bit_generator.state
    if state["bit_generator"] != "PCG64":
        raise TypeError(f"only PCG64 generators are saved, not {state['bit_generator']}")
    inner = state["state"]
    return {
        "rng_state": int(inner["state"]).to_bytes(16, "big"),
        "rng_inc": int(inner["inc"]).to_bytes(16, "big"),
        "rng_has_uint32": bool(state["has_uint32"]),
        "rng_uinteger": int(state["uinteger"]),
    }


def unpack_rng(fields: Mapping[str, Any]) -> np.random.Generator:
    """A PCG64 generator in the state ``fields`` hold; :class:`BadSnapshot` if no PCG64
    could be (its increment is always odd)."""
    inc = int.from_bytes(fields["rng_inc"], "big")
    if inc % 2 == 0:
        raise BadSnapshot("the random generator's increment must be odd: not a PCG64 state")
    bit_generator = np.random.PCG64()
    bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int.from_bytes(fields["rng_state"], "big"), "inc": inc},
        "has_uint32": int(fields["rng_has_uint32"]),
        "uinteger": int(fields["rng_uinteger"]),
    }
    return np.random.Generator(bit_generator)


def check_range(what: str, value: float, low: float, high: float) -> None:
    """:class:`BadSnapshot` unless ``low <= value <= high`` (NaN fails too)."""
    if not low <= value <= high:
        raise BadSnapshot(f"{what} must be in [{low:g}, {high:g}], not {value!r}")
