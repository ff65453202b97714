"""A batch step's frames in shared memory: one segment, one slot per game.

Holds :class:`SlotSegment` (the remote's side: ``slots`` frames, each behind its own
:data:`~rewarder.shm.HEADER`, in a ``/dev/shm`` file or a sealed memfd) and
:class:`SlotReader` (the agent's side: chosen slots copied into chosen arrays, out of a
read-only mapping of a sealed memfd, else with one ``preadv``). A ``v0.reply.batch.step``
names the segment as ``[name, height, width, stride]`` and where the remote holds it
open as ``shm_fd: [pid, fd]``; slot i starts at ``i * stride``: a 64-byte header (magic,
frame number, episode id, height, width), then the pixels.

Everything :mod:`rewarder.shm` says of a segment holds here: created 0600 with its pages
reserved, ``flock``-ed by the remote for its life (so :func:`rewarder.shm.sweep` removes
it once the remote is gone), written only while the one agent waits for the reply, and
read by the agent as an untrusted name (``O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC``, a regular
file of its own user, big enough). The agent maps only a memfd whose seals say it can
never shrink (:func:`rewarder.shm.open_held`), so a truncated file is a short read and a
sealed memfd cannot be truncated: never SIGBUS. Why a memfd, and why only when asked
(``"memfd": true`` in the request, which the agent sends once it reached a file
segment's fd through ``/proc``): :mod:`rewarder.shm`.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
import struct
from collections.abc import Sequence
from pathlib import Path
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

log = logging.getLogger(__name__)
#: Whether a reader has logged why it does not map (once a process: DEBUG, not news).
_told = False


def stride_of(height: int, width: int) -> int:
    """Bytes from one slot to the next for frames of ``height`` x ``width``."""
    size = PIXELS_AT + height * width * 3
    return -(-size // ALIGN) * ALIGN


def _sealed(size: int) -> tuple[str, int, mmap.mmap] | None:
    """A sealed memfd segment of ``size`` bytes (:func:`rewarder.shm.create_sealed`): its
    name, fd and map; None where one cannot be made (the caller makes a file)."""
    name = f"{shm.PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    try:
        return (name, *shm.create_sealed(name, size))
    except OSError as exc:
        log.debug("batch frames in a file, not a sealed memfd: %s", exc)
        return None


class SlotSegment:
    """The remote's side: ``slots`` frames of ``height`` x ``width`` in one locked file,
    or (``sealed``, where Linux allows) one sealed memfd that no file names."""

    def __init__(self, slots: int, height: int, width: int, sealed: bool = False) -> None:
        self.slots, self.height, self.width = slots, height, width
        self.stride = stride_of(height, width)
        #: Whether a sealed memfd was asked for (:meth:`fits` compares it, not the outcome).
        self.asked = sealed
        size = self.stride * slots
        self.path: Path | None = None
        made = _sealed(size) if sealed else None
        if made is not None:
            self.name, fd, self._map = made
        else:
            shm.sweep()
            fd, self.path, self._map = shm.create_mapped(size)
            self.name = self.path.name
        #: Whether the frames live in a sealed memfd (reached only through /proc).
        self.sealed = made is not None
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

    @property
    def held(self) -> list[int]:
        """Where this process holds it open, as a batch reply carries it: ``[pid, fd]``."""
        return [os.getpid(), self._fd]

    def fits(self, slots: int, height: int, width: int, sealed: bool = False) -> bool:
        return (slots <= self.slots and (height, width) == (self.height, self.width)
                and sealed == self.asked)

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
        if self.path is not None:
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
    ValueError saying what was wrong; the caller takes those frames over VNC instead.

    ``held`` (the reply's ``shm_fd``: the remote's pid and fd of the segment) is tried
    first, through ``/proc`` (:func:`rewarder.shm.open_held`): a sealed memfd is mapped
    read-only (:attr:`mapped`) and each read is memory copies; anything else there (a
    memfd that can shrink, another PID namespace's process) falls back, at DEBUG, to
    ``preadv`` of the file by its name (of a memfd without the seal: of the fd reached).
    """

    def __init__(self, name: str, height: int, width: int, stride: int,
                 held: Sequence[object] | None = None) -> None:
        self._fd = -1
        self._map: mmap.mmap | None = None
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
        self._headers = [memoryview(self._block)[i * PIXELS_AT:(i + 1) * PIXELS_AT]
                         for i in range(MAX_SLOTS)]
        #: Per slot count: the layout of that many headers, and the magics, heights and
        #: widths they must hold.
        self._runs: dict[int, tuple[struct.Struct, tuple[object, ...]]] = {}
        #: Per tuple of rows read: each row's bytes in a batch (a vector reads the same rows
        #: each step; a few tuples kept at most).
        self._cuts: dict[tuple[int, ...], list[slice]] = {}
        self._pad = bytearray(stride - PIXELS_AT - height * width * 3)
        #: The ``preadv`` buffers of each slot count, the pixels' places empty (None).
        self._templates: dict[int, list[bytearray | memoryview | None]] = {}
        #: Whether the frames are copied out of a read-only mapping of a sealed memfd.
        self.mapped = False
        #: Whether the remote's fds are reachable through ``/proc`` (its segment was
        #: reached so): the agent may ask it for a sealed memfd (``"memfd": true``).
        self.reachable = False
        #: Whether the segment is a memfd (no file names it: nothing to sweep).
        self._memfd = False
        if held is not None and len(held) == 2:
            self._open_held(held[0], held[1])
        if self._fd < 0:
            self._fd, self.size = shm.open_checked(path)  # (FrameReader's checks)

    def _open_held(self, pid: object, fd: object) -> None:
        """Reach the segment where the remote holds it (:func:`rewarder.shm.open_held`):
        a sealed memfd mapped, a memfd that can shrink kept for ``preadv``, the file only
        compared with the file of its name (:attr:`reachable`: the same one)."""
        try:
            ours, st, kind = shm.open_held(pid, fd, self.name)
        except (OSError, ValueError) as exc:
            _tell(f"frame segment {self.name} not reached through /proc ({exc}): read by name")
            return
        if kind == "file":
            try:
                self._fd, self.size = shm.open_checked(self.path)
                self.reachable = shm.same_file(self._fd, st)
            finally:
                os.close(ours)
            return
        self._fd, self.size, self._memfd, self.reachable = ours, st.st_size, True, True
        if kind != "sealed":
            _tell(f"frame segment {self.name} is a memfd that can shrink: read by copy")
            return
        slots = min(self.size // self.stride, MAX_SLOTS)
        if slots < 1:
            return  # (too small for a slot: refused at the first read, as ever)
        try:
            self._map = mmap.mmap(ours, slots * self.stride, prot=mmap.PROT_READ)
        except OSError as exc:  # (no address space left, a sandbox: read by copy)
            _tell(f"frame segment {self.name} not mapped ({exc}): read by copy")
            return
        whole = memoryview(self._map)
        pixels = self.height * self.width * 3
        self._mapped_pixels = [whole[i * self.stride + PIXELS_AT:i * self.stride + PIXELS_AT + pixels]
                               for i in range(slots)]
        self._mapped_heads = np.ndarray((slots, PIXELS_AT), np.uint8, self._map, 0, (self.stride, 1))
        self._heads = np.frombuffer(self._block, np.uint8).reshape(MAX_SLOTS, PIXELS_AT)
        self.size, self.mapped = slots * self.stride, True

    def read_into(self, dests: Sequence[np.ndarray]) -> list[tuple[int, int] | None]:
        """Copy slots 0..len(dests)-1 into ``dests`` (each a C-contiguous, writable
        ``uint8[height, width, 3]``) at once (out of the mapping, else one ``preadv``);
        each slot's (frame number, episode id), None for a slot no frame was written to yet
        (its step was refused).
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
        """Slots 0..len(pixels)-1 read (:meth:`_preadv`), each slot's pixels into its view."""
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
        """Slots 0..len(pixels)-1 read (copies out of the mapping when :attr:`mapped`,
        else one ``preadv``): headers into the block, each slot's pixels into its view;
        the slot count."""
        count = len(pixels)
        if self._fd < 0:
            raise ValueError(f"frame segment {self.name}: the reader is closed; {VNC_INSTEAD}")
        if count * self.stride > self.size or count > MAX_SLOTS:
            raise ValueError(f"frame segment {self.name} holds fewer than {count} slots; {VNC_INSTEAD}")
        if self.mapped:  # (sealed: it cannot shrink; written only while we waited)
            np.copyto(self._heads[:count], self._mapped_heads[:count])
            for view, source in zip(pixels, self._mapped_pixels, strict=False):
                view[:] = source
            return count
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
        out: list[bytearray | memoryview | None] = []
        for i in range(count):
            out += [headers[i], None]
            if self._pad and i < count - 1:
                out.append(self._pad)
        return out

    def remove_if_abandoned(self) -> bool:
        """As :meth:`rewarder.shm.OpenSegment.remove_if_abandoned`; a memfd has no file to
        remove (it goes with its last holder)."""
        return False if self._memfd else super().remove_if_abandoned()

    def close(self) -> None:
        """Let go of the mapping and the file (idempotent)."""
        done, self._map, self.mapped = self._map, None, False
        if done is not None:
            self._mapped_pixels, self._mapped_heads = [], self._heads[:0]
            with contextlib.suppress(BufferError):  # (a view still exported: GC frees it)
                done.close()
        super().close()


def _tell(why: str) -> None:
    """Say once a process, at DEBUG, why a reader does not map (the file way works)."""
    global _told
    if not _told:
        _told = True
        log.debug("%s", why)
