"""Lockstep frames through shared memory, for an agent on the remote's own machine.

Holds :class:`FrameSegment` (the remote's side: a file in ``/dev/shm`` it writes each
stepped frame into) and :class:`FrameView` (the agent's side: the same file mapped
read-only). A step request asks for it with ``"obs": "shm"``; the reply names the
segment (``"shm": [name, height, width]``), and only those few bytes cross the socket.

Why a file and not :mod:`multiprocessing.shared_memory`: Python 3.11's resource tracker
unlinks a segment when any process that merely attached to it exits, and warns about
"leaks" it does not own. A plain file under ``/dev/shm`` (tmpfs) with ``mmap`` is the same
memory without that.

The segment's header says which frame it holds (``HEADER``: magic, frame number, episode
id, height, width); the agent checks the frame number against the reply, so a segment
that is not the one the reply meant (another machine with the same path, a remote that
restarted) is never read as the step's frame. Writes happen only between a step request
and its reply, while the one stepping agent waits, so the agent never sees a torn frame.

The file is created mode 0600 (the remote's user; root reads it too), removed when the
remote closes, and files of remotes that died without closing are swept by the next
remote that creates one.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import struct
from pathlib import Path
from typing import Final

import numpy as np

#: Where segments live (tmpfs on Linux); absent elsewhere, and then nobody asks for shm.
SHM_DIR: Final = Path("/dev/shm")
PREFIX: Final = "universe-remote-frame-"
MAGIC: Final = b"URFRAME1"
#: magic, frame number, episode id, height, width.
HEADER: Final = struct.Struct("<8sqqII")
#: Pixels start here (a multiple of 64: aligned for numpy's copies).
PIXELS_AT: Final = 64


def available() -> bool:
    """Shared memory frames are possible on this machine."""
    return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK | os.X_OK)


class FrameSegment:
    """The remote's side: one file sized for frames of ``height`` x ``width``."""

    def __init__(self, height: int, width: int) -> None:
        _sweep()
        self.height, self.width = height, width
        self.name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        self.path = SHM_DIR / self.name
        size = PIXELS_AT + height * width * 3
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._pixels = np.frombuffer(self._map, np.uint8, height * width * 3, PIXELS_AT).reshape(
            height, width, 3
        )

    @property
    def reply(self) -> list[str | int]:
        """What a step reply carries: ``[name, height, width]``."""
        return [self.name, self.height, self.width]

    def write(self, frame: np.ndarray, number: int, episode_id: int) -> None:
        """Put ``frame`` (``uint8[height, width, 3]``) in, then the header that names it."""
        np.copyto(self._pixels, frame)
        HEADER.pack_into(self._map, 0, MAGIC, number, episode_id, self.height, self.width)

    def close(self) -> None:
        """Remove the file (idempotent); an agent that still maps it keeps its pages."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if not self._map.closed:
            del self._pixels
            with contextlib.suppress(BufferError):  # a view still exported: GC frees it
                self._map.close()


class FrameView:
    """The agent's side: a segment named in a step reply, mapped read-only.

    Raises OSError (FileNotFoundError: another machine; PermissionError: another user)
    or ValueError (not a frame segment) from the constructor: the caller falls back to
    frames over VNC.
    """

    def __init__(self, name: str, height: int, width: int) -> None:
        if not name.startswith(PREFIX) or "/" in name or name in (".", ".."):
            raise ValueError(f"{name!r} is not a frame segment name")
        self.name, self.height, self.width = name, height, width
        with open(SHM_DIR / name, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        if len(self._map) < PIXELS_AT + height * width * 3:
            self._map.close()
            raise ValueError(f"frame segment {name} is smaller than a {width}x{height} frame")
        self.pixels = np.frombuffer(self._map, np.uint8, height * width * 3, PIXELS_AT).reshape(
            height, width, 3
        )

    def header(self) -> tuple[int, int]:
        """The frame number and episode id the segment holds now."""
        magic, number, episode, height, width = HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or (height, width) != (self.height, self.width):
            raise ValueError(f"frame segment {self.name} holds no {self.width}x{self.height} frame")
        return number, episode

    def close(self) -> None:
        del self.pixels
        with contextlib.suppress(BufferError):
            self._map.close()


def _sweep() -> None:
    """Remove the segments of remotes that are gone (killed before they could)."""
    with contextlib.suppress(OSError):
        for path in SHM_DIR.glob(f"{PREFIX}*"):
            pid = path.name[len(PREFIX) :].partition("-")[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
