"""A batch step's frames in shared memory: one segment, one slot per game.

Holds :class:`SlotSegment` (the remote's side: a ``/dev/shm`` file of ``slots`` frames,
each behind its own :data:`~rewarder.shm.HEADER`) and :class:`SlotReader` (the agent's
side: chosen slots copied into chosen arrays with one ``preadv``). A
``v0.reply.batch.step`` names the segment as ``[name, height, width, stride]``; slot i
starts at ``i * stride``: a 64-byte header (magic, frame number, episode id, height,
width), then the pixels.

Everything :mod:`rewarder.shm` says of a segment holds here: created 0600 with its pages
reserved, ``flock``-ed by the remote for its life (so :func:`rewarder.shm.sweep` removes
it once the remote is gone), written only while the one agent waits for the reply, and
read by the agent without mapping it (``O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC``, a regular file
of its own user, big enough), so a truncated file is a short read, never SIGBUS.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Sequence
from typing import Final

import numpy as np

from . import shm
from .protocol import MAX_GAMES_PER_PROCESS
from .shm import HEADER, MAGIC, MAX_SIDE, PIXELS_AT, VNC_INSTEAD

#: Slots one segment may hold: a process serves at most this many games.
MAX_SLOTS: Final = MAX_GAMES_PER_PROCESS
#: Slots start on multiples of this (aligned for numpy's copies, as a frame's pixels are).
ALIGN: Final = 64
#: The magic of a slot no frame was written to yet (zero bytes).
_NEVER: Final = bytes(len(MAGIC))


def stride_of(height: int, width: int) -> int:
    """Bytes from one slot to the next for frames of ``height`` x ``width``."""
    size = PIXELS_AT + height * width * 3
    return -(-size // ALIGN) * ALIGN


class SlotSegment:
    """The remote's side: ``slots`` frames of ``height`` x ``width`` in one locked file."""

    def __init__(self, slots: int, height: int, width: int) -> None:
        shm.sweep()
        self.slots, self.height, self.width = slots, height, width
        self.stride = stride_of(height, width)
        size = self.stride * slots
        fd, self.path, self._map = shm.create_mapped(size)
        self.name = self.path.name
        self._fd = fd
        pixels = height * width * 3
        self._pixels = [
            np.frombuffer(self._map, np.uint8, pixels, i * self.stride + PIXELS_AT).reshape(height, width, 3)
            for i in range(slots)
        ]

    @property
    def reply(self) -> list[str | int]:
        """What a batch reply carries: ``[name, height, width, stride]``."""
        return [self.name, self.height, self.width, self.stride]

    def fits(self, slots: int, height: int, width: int) -> bool:
        return slots <= self.slots and (height, width) == (self.height, self.width)

    def write(self, slot: int, frame: np.ndarray | None, number: int, episode_id: int) -> None:
        """Put ``frame`` into ``slot`` (None: it is there, drawn into :meth:`pixels`),
        then the header that names it."""
        if frame is not None:
            np.copyto(self._pixels[slot], frame)
        HEADER.pack_into(self._map, slot * self.stride, MAGIC, number, episode_id, self.height, self.width)

    def pixels(self, slot: int) -> np.ndarray:
        """``slot``'s pixels, ``uint8[height, width, 3]``, for a runtime to draw into."""
        return self._pixels[slot]

    def close(self) -> None:
        """Remove the file and let go of its lock (idempotent)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if not self._map.closed:
            self._pixels = []
            with contextlib.suppress(BufferError):
                self._map.close()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class SlotReader(shm.OpenSegment):
    """The agent's side of a :class:`SlotSegment` a reply names, opened once (its name is
    not trusted: :class:`rewarder.shm.FrameReader`'s checks). Failures are OSError or
    ValueError saying what was wrong; the caller takes those frames over VNC instead."""

    def __init__(self, name: str, height: int, width: int, stride: int) -> None:
        self._fd = -1
        path = shm.segment_path(name)
        if not (0 < height <= MAX_SIDE and 0 < width <= MAX_SIDE) or stride != stride_of(height, width):
            raise ValueError(f"frame segment {name}: [{height}, {width}, {stride}] are not a "
                             f"screen's height, width and slot stride; {VNC_INSTEAD}")
        self.name, self.height, self.width, self.stride = name, height, width, stride
        #: What a reply names this segment by: ``(name, height, width, stride)``.
        self.key = (name, height, width, stride)
        self.path = path
        #: Every slot's header, read into one block (:meth:`read_plain` unpacks them at once).
        self._block = bytearray(PIXELS_AT * MAX_SLOTS)
        self._headers: list[memoryview] = []
        #: Per slot count: the layout of that many headers, and the magics, heights and
        #: widths they must hold.
        self._runs: dict[int, tuple[struct.Struct, tuple[object, ...]]] = {}
        #: Per tuple of rows read: each row's bytes in a batch (a vector reads the same rows
        #: each step; a few tuples kept at most).
        self._cuts: dict[tuple[int, ...], list[slice]] = {}
        self._pad = bytearray(stride - PIXELS_AT - height * width * 3)
        #: The ``preadv`` buffers of each slot count, the pixels' places empty (None).
        self._templates: dict[int, list[bytearray | memoryview | None]] = {}
        self._fd, self.size = shm.open_checked(path)  # (FrameReader's checks)

    def read_into(self, dests: Sequence[np.ndarray]) -> list[tuple[int, int] | None]:
        """Copy slots 0..len(dests)-1 into ``dests`` (each a C-contiguous, writable
        ``uint8[height, width, 3]``) with one ``preadv``; each slot's (frame number,
        episode id), None for a slot no frame was written to yet (its step was refused).
        ``dests`` may be partly written when it raises."""
        shape = (self.height, self.width, 3)
        for dest in dests:
            if dest.shape != shape or dest.dtype != np.uint8 or not dest.flags.c_contiguous:
                raise ValueError(f"frame segment {self.name} holds {self.width}x{self.height} "
                                 f"frames, not {dest.dtype}{list(dest.shape)}; {VNC_INSTEAD}")
        return self._read([dest.data.cast("B") for dest in dests])

    def read_rows(self, batch: np.ndarray, rows: Sequence[int]) -> list[tuple[int, int] | None]:
        """:meth:`read_into` rows ``rows`` of ``batch`` (a C-contiguous, writable
        ``uint8[n, height, width, 3]``), slot j into row ``rows[j]``: the batch checked
        once, not a row at a time (a vector step reads every process's slots so)."""
        if (batch.shape[1:] != (self.height, self.width, 3) or batch.dtype != np.uint8
                or not batch.flags.c_contiguous):
            raise ValueError(f"frame segment {self.name} holds {self.width}x{self.height} "
                             f"frames, not rows of {batch.dtype}{list(batch.shape)}; {VNC_INSTEAD}")
        view = batch.data.cast("B")  # (C-contiguous: a flat view of every row)
        size = self.height * self.width * 3
        return self._read([view[row * size:(row + 1) * size] for row in rows])

    def read_plain(self, batch: np.ndarray, rows: tuple[int, ...], numbers: Sequence[int],
                   episodes: Sequence[int]) -> bool:
        """:meth:`read_rows`, saying only whether slot j held frame ``numbers[j]`` of
        episode ``episodes[j]`` (every header checked at once: a vector's steady step,
        which goes the general way, reading again, when not)."""
        if (batch.shape[1:] != (self.height, self.width, 3) or batch.dtype != np.uint8
                or not batch.flags.c_contiguous):
            raise ValueError(f"frame segment {self.name} holds {self.width}x{self.height} "
                             f"frames, not rows of {batch.dtype}{list(batch.shape)}; {VNC_INSTEAD}")
        cuts = self._cuts.get(rows)
        if cuts is None:
            if len(self._cuts) >= MAX_SLOTS:
                self._cuts.clear()
            size = self.height * self.width * 3
            cuts = self._cuts[rows] = [slice(row * size, (row + 1) * size) for row in rows]
        count = self._preadv(list(map(batch.data.cast("B").__getitem__, cuts)))
        run = self._runs.get(count)
        if run is None:
            run = self._runs[count] = (
                struct.Struct("<" + f"8sqqII{PIXELS_AT - HEADER.size}x" * count),
                (MAGIC,) * count + (self.height,) * count + (self.width,) * count)
        layout, fixed = run
        held = layout.unpack_from(self._block)
        return (held[1::5] == tuple(numbers) and held[2::5] == tuple(episodes)
                and held[0::5] + held[3::5] + held[4::5] == fixed)

    def _read(self, pixels: list[memoryview]) -> list[tuple[int, int] | None]:
        """One ``preadv`` of slots 0..len(pixels)-1, each slot's pixels into its view."""
        count = self._preadv(pixels)
        out: list[tuple[int, int] | None] = []
        unpack, height, width = HEADER.unpack_from, self.height, self.width
        for header in self._headers[:count]:
            magic, number, episode, h, w = unpack(header)
            if magic == MAGIC and h == height and w == width:
                out.append((number, episode))
            elif magic == _NEVER:  # never written
                out.append(None)
            else:
                raise ValueError(f"slot {len(out)} of frame segment {self.name} holds no {width}x"
                                 f"{height} frame; {VNC_INSTEAD}")
        return out

    def _preadv(self, pixels: list[memoryview]) -> int:
        """One ``preadv`` of slots 0..len(pixels)-1: headers into the block, each slot's
        pixels into its view; the slot count."""
        count = len(pixels)
        if self._fd < 0:
            raise ValueError(f"frame segment {self.name}: the reader is closed; {VNC_INSTEAD}")
        if count * self.stride > self.size or count > MAX_SLOTS:
            raise ValueError(f"frame segment {self.name} holds fewer than {count} slots; {VNC_INSTEAD}")
        template = self._templates.get(count)
        if template is None:
            template = self._templates[count] = self._template(count)
        buffers = template.copy()
        buffers[1::3 if self._pad else 2] = pixels  # (each slot: its header, its pixels, the pad)
        want = count * self.stride - len(self._pad)
        got = os.preadv(self._fd, buffers, 0)  # type: ignore[arg-type]  # (every None replaced)
        if got < want:
            raise ValueError(f"frame segment {self.name} is truncated ({got} bytes of {want}); {VNC_INSTEAD}")
        return count

    def _template(self, count: int) -> list[bytearray | memoryview | None]:
        """The buffers of a read of ``count`` slots: each slot's header, its pixels (None
        here, the caller's view in each read), the pad to the next slot but after the last."""
        headers = self._headers
        while len(headers) < count:
            at = len(headers) * PIXELS_AT
            headers.append(memoryview(self._block)[at:at + PIXELS_AT])
        out: list[bytearray | memoryview | None] = []
        for i in range(count):
            out += [headers[i], None]
            if self._pad and i < count - 1:
                out.append(self._pad)
        return out
