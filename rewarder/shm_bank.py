"""Frames in place: a vector's own sealed memfds, which the remotes of a batch step write into.

Holds the layout (:func:`bank_size`: every row's 64-byte header first, then the rows'
pixels one after another, so the rows are one C-contiguous ``uint8[n, height, width, 3]``),
:class:`BankBuffer` and :class:`Bank` (the agent's side: a few buffers, each handed to the
caller as the step's observations and written again only once nobody holds it), and
:class:`BankTarget` (the remote's side: an agent's buffer opened through ``/proc``,
checked, mapped for writing).

Why: with the remote's own segment (:mod:`rewarder.shm_slots`) the agent copies every
frame of every step out of it into a fresh batch: 800 KB a step at n=8, about 15 us of
CPU an env-step all told (benchmarks/RESULTS.md, session nine's bounds), and the last
process's copy sits on the step's serial part. Here the remotes' ALE draws straight into
the array the agent returns. A request names the buffer (``"into": [name, fd, inode, rows,
[row of each step]]``, rewarder/batch_messages.py); the remote opens the agent's fd through
``/proc/PID/fd/FD``, PID the socket's peer (``SO_PEERCRED`` of the Unix twin: never a pid
the request says), and maps it only when it is a memfd of that name and inode, of its own
user, big enough and sealed against shrinking (``F_SEAL_SHRINK``: a truncation can never
SIGBUS the remote); else it writes into its own segment as before and says why in the
reply (``into_error``). The agent asks only after it reached the remote's own segment
through ``/proc`` (:attr:`rewarder.shm_slots.SlotReader.reachable`: same user, same PID
namespace), so the way back works too.

A buffer is written only while a request naming it is out and, after that, only once no
object of the caller's holds it: every array made over it keeps its map alive, so the
map's reference count says whether anyone does (the caller's name, a view such as
``obs[0]``, a buffer export such as ``torch.from_numpy``; CPython's counts; elsewhere no
bank is used). A caller that keeps every observation (a replay buffer of the arrays
themselves) holds every buffer: the vector then makes fresh arrays and copies, as it
did before.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import platform
import secrets
import socket
import struct
import sys
from collections.abc import Sequence
from typing import Final

import numpy as np
import orjson

from . import shm
from .batch_messages import MAX_BANK_ROWS
from .shm import HEADER, MAGIC, PIXELS_AT

#: Buffers one bank makes at most (the step's own, the caller's last, a few more kept:
#: a frame stack of the arrays themselves holds as many as it stacks).
MAX_BUFFERS: Final = 6
#: The seals a buffer must carry for a remote to map it: it can neither shrink nor grow.
NEEDED_SEALS: Final = shm.MAP_SEAL | getattr(fcntl, "F_SEAL_GROW", 0)
#: How a buffer's name begins (after :data:`rewarder.shm.PREFIX`: a name a segment has).
BANK_PREFIX: Final = shm.PREFIX + "bank-"
#: ``SO_PEERCRED``'s reply: pid, uid, gid.
_UCRED: Final = struct.Struct("3i")
_NEVER: Final = bytes(len(MAGIC))

log = logging.getLogger(__name__)


def bank_size(rows: int, height: int, width: int) -> int:
    """Bytes of a buffer of ``rows`` frames of ``height`` x ``width``: the headers, then
    the pixels from :func:`pixels_at`."""
    return pixels_at(rows) + rows * height * width * 3


def pixels_at(rows: int) -> int:
    """Where a buffer's pixels begin: after ``rows`` headers of :data:`PIXELS_AT` bytes."""
    return rows * PIXELS_AT


class BankBuffer:
    """One sealed memfd of ``rows`` frames, mapped for the agent (see the module)."""

    def __init__(self, rows: int, height: int, width: int) -> None:
        self.rows, self.height, self.width = rows, height, width
        self.name = f"{BANK_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        self.fd, self._map = shm.create_sealed(self.name, bank_size(rows, height, width))
        self.inode = os.fstat(self.fd).st_ino
        #: A request's steps are out naming this buffer (written by remotes until answered).
        self.in_flight = False
        #: Not handed out again: a request naming it went unanswered (a remote may still
        #: write); :meth:`Bank.settle` drops it once nothing is out.
        self.retired = False
        #: Per tuple of rows a process's games take: its request's ``into`` (JSON).
        self.asks: dict[tuple[int, ...], bytes] = {}
        #: The map's reference count when only this object holds it.
        self._alone = sys.getrefcount(self._map)

    def free(self) -> bool:
        """Whether a step may write into it now: nothing out, nobody holding an array of it."""
        return not (self.in_flight or self.retired) and sys.getrefcount(self._map) == self._alone

    def batch(self) -> np.ndarray:
        """Its rows as a new ``uint8[rows, height, width, 3]`` array (one per step: the
        caller's, which keeps the map alive while it lives)."""
        return np.ndarray((self.rows, self.height, self.width, 3), np.uint8, self._map, pixels_at(self.rows))

    def ask(self, rows: tuple[int, ...]) -> bytes:
        """A request's ``into`` (its JSON) for steps whose frames go to ``rows``."""
        asked = self.asks.get(rows)
        if asked is None:
            asked = self.asks[rows] = orjson.dumps([self.name, self.fd, self.inode, self.rows, rows])
        return asked

    def holds(self, rows: Sequence[int], numbers: Sequence[int], episodes: Sequence[int]) -> bool:
        """Whether row ``rows[j]`` holds frame ``numbers[j]`` of episode ``episodes[j]``: a
        remote wrote it in this step (an older frame of the row has another number or
        episode)."""
        unpack, at, shape = HEADER.unpack_from, PIXELS_AT, (self.height, self.width)
        for row, number, episode in zip(rows, numbers, episodes, strict=True):
            magic, held, held_episode, height, width = unpack(self._map, row * at)
            if held != number or held_episode != episode or magic != MAGIC or (height, width) != shape:
                return False
        return True

    def read_rows(self, batch: np.ndarray, rows: Sequence[int]) -> list[tuple[int, int] | None]:
        """As :meth:`rewarder.shm_slots.SlotReader.read_rows`: each row's (frame number,
        episode id), None where no frame was written; the pixels copied into ``batch``'s
        rows only when ``batch`` is not this buffer's own memory."""
        ours = self.batch()
        if batch.shape != ours.shape or batch.dtype != ours.dtype:
            raise ValueError(f"frame buffer {self.name} holds {len(ours)} {self.width}x{self.height} "
                             f"frames, not {batch.dtype}{list(batch.shape)}; {shm.VNC_INSTEAD}")
        same = batch.__array_interface__["data"][0] == ours.__array_interface__["data"][0]
        out: list[tuple[int, int] | None] = []
        for row in rows:
            magic, number, episode, height, width = HEADER.unpack_from(self._map, row * PIXELS_AT)
            if magic == MAGIC and (height, width) == (self.height, self.width):
                out.append((number, episode))
                if not same:
                    np.copyto(batch[row], ours[row])
            elif magic == _NEVER:
                out.append(None)
            else:
                raise ValueError(f"row {row} of frame buffer {self.name} holds no {self.width}x"
                                 f"{self.height} frame; {shm.VNC_INSTEAD}")
        return out

    def close(self) -> None:
        """Let go of the map (once no array of it lives: else the collector does) and the fd."""
        if not self._map.closed:
            with contextlib.suppress(BufferError):
                self._map.close()
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


class Bank:
    """A vector's buffers (at most :data:`MAX_BUFFERS`), handed out while free."""

    def __init__(self) -> None:
        self.buffers: list[BankBuffer] = []
        #: Why frames are not written in place (None: they may be).
        self.off: str | None = None if platform.python_implementation() == "CPython" else (
            "frames in place need CPython's reference counts")
        #: Steps whose frames were written in place (tests and benchmarks read it).
        self.used = 0

    def take(self, rows: int, height: int, width: int) -> BankBuffer | None:
        """A free buffer of that shape (made when none is and fewer than the most are),
        marked in flight; None: the step makes a fresh array. Free buffers of another
        shape (a reset switched the env) go."""
        if self.off is not None or rows > MAX_BANK_ROWS:
            return None
        shape, found = (rows, height, width), None
        for buffer in self.buffers[:]:  # (one pass: a step's own cost)
            if not buffer.free():
                continue
            if (buffer.rows, buffer.height, buffer.width) != shape:
                self.buffers.remove(buffer)
                buffer.close()
            elif found is None:
                found = buffer
        if found is not None:
            found.in_flight = True
            return found
        if sum(not b.retired for b in self.buffers) >= MAX_BUFFERS:
            return None
        try:
            buffer = BankBuffer(rows, height, width)
        except OSError as exc:
            self.stop(f"no sealed memfd for the frames ({exc})")
            return None
        self.buffers.append(buffer)
        buffer.in_flight = True
        return buffer

    def handed(self, buffer: BankBuffer) -> None:
        """``buffer``'s step is answered and handed to the caller: nothing is out on it."""
        buffer.in_flight = False
        self.used += 1

    def named(self, name: str) -> BankBuffer | None:
        """The buffer a reply names, if it is one of ours."""
        return next((b for b in self.buffers if b.name == name), None)

    def settle(self) -> None:
        """Nothing is out any more (every request answered or its connection gone): no
        buffer is in flight, and the retired ones go (their maps with the caller's last
        array of them)."""
        for buffer in self.buffers:
            buffer.in_flight = False
            if buffer.retired:
                buffer.close()
        self.buffers = [buffer for buffer in self.buffers if not buffer.retired]

    def stop(self, why: str) -> None:
        """Write no more frames in place (said once, at INFO: the old way works)."""
        if self.off is None:
            self.off = why
            log.info("frames copied out of each remote's segment, not written in place: %s", why)

    def close(self) -> None:
        for buffer in self.buffers:
            buffer.close()
        self.buffers.clear()


def peer_pid(sock: socket.socket | None) -> int | None:
    """The pid of the process at the other end of a Unix socket (``SO_PEERCRED``: the
    kernel's word, not the request's); None for any other socket."""
    if sock is None or sock.family != socket.AF_UNIX or not hasattr(socket, "SO_PEERCRED"):
        return None
    pid, _, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return pid if pid > 0 else None


class BankTarget:
    """The remote's side: the agent's buffer ``into`` names (``(name, fd, inode, rows)``),
    opened through ``/proc/PID/fd/FD`` of the socket's peer ``pid`` and mapped for
    writing once checked (see the module); OSError or ValueError say why not. The
    interface of :class:`rewarder.shm_slots.SlotSegment` a batch step writes through,
    its slots the buffer's rows."""

    def __init__(self, pid: int, name: str, fd: int, inode: int, rows: int, height: int, width: int) -> None:
        if not name.startswith(BANK_PREFIX):
            raise ValueError(f"{name!r} is not a frame buffer's name")
        self.name, self.inode, self.rows, self.height, self.width = name, inode, rows, height, width
        ours, st, kind = shm.open_held(pid, fd, name, writable=True)  # (of this user, that memfd)
        try:
            if st.st_ino != inode or kind == "file":
                raise ValueError(f"fd {fd} of the agent (pid {pid}) is not frame buffer {name} of this user")
            if kind != "sealed" or fcntl.fcntl(ours, fcntl.F_GET_SEALS) & NEEDED_SEALS != NEEDED_SEALS:
                raise ValueError(f"frame buffer {name} is not sealed against shrinking and growing")
            size = bank_size(rows, height, width)
            if st.st_size < size:
                raise ValueError(f"frame buffer {name} has {st.st_size} bytes, not the {size} "
                                 f"of {rows} {width}x{height} frames")
            self._map = mmap.mmap(ours, size)
        finally:
            os.close(ours)
        self._pixels = np.ndarray((rows, height, width, 3), np.uint8, self._map, pixels_at(rows))

    def fits(self, rows: int, height: int, width: int) -> bool:
        return (rows, height, width) == (self.rows, self.height, self.width)

    def pixels(self, row: int) -> np.ndarray:
        """Row ``row``'s pixels, for a runtime to draw into."""
        return self._pixels[row]

    def write(self, row: int, frame: np.ndarray | None, number: int, episode_id: int) -> None:
        """Put ``frame`` into ``row`` (None: it is there, drawn into :meth:`pixels`), then
        the header that names it."""
        if frame is not None:
            np.copyto(self._pixels[row], frame)
        HEADER.pack_into(self._map, row * PIXELS_AT, MAGIC, number, episode_id, self.height, self.width)

    def close(self) -> None:
        if not self._map.closed:
            self._pixels = self._pixels[:0]
            with contextlib.suppress(BufferError):
                self._map.close()
