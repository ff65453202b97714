"""Lockstep frames through shared memory, for an agent on the remote's own machine.

Holds :class:`FrameSegment` (the remote's side: a file in ``/dev/shm`` it writes each
stepped frame into) and :class:`FrameReader` (the agent's side: the same file, each frame
copied out of it with one ``preadv``). A step request asks for it with ``"obs": "shm"``;
the reply names the segment (``"shm": [name, height, width]``), and only those few bytes
cross the socket.

Why a file and not :mod:`multiprocessing.shared_memory`: Python 3.11's resource tracker
unlinks a segment when any process that merely attached to it exits, and warns about
"leaks" it does not own. A plain file under ``/dev/shm`` (tmpfs) is the same memory
without that.

The segment's header says which frame it holds (``HEADER``: magic, frame number, episode
id, height, width); the agent checks the frame number against the reply, so a segment
that is not the one the reply meant (another machine with the same path, a remote that
restarted) is never read as the step's frame. Writes happen only between a step request
and its reply, while the one stepping agent waits, and the agent copies the frame out in
one read before its next request, so it never sees a torn frame.

The agent does not trust the name a reply carries: :class:`FrameReader` refuses symbolic
links, FIFOs (without blocking on them), anything but a regular file of its own user and
files too small for the frame, and maps no file, so a file truncated under it cannot kill
it with SIGBUS. Each refusal is an OSError or ValueError, and frames go over VNC instead.

The agent maps only what cannot shrink: a batch's segment (:mod:`rewarder.shm_slots`)
may instead be a sealed memfd (:func:`create_sealed`: ``F_SEAL_SHRINK | F_SEAL_GROW |
F_SEAL_SEAL``, which the kernel enforces on every holder, the remote too), which the
agent opens through the remote's ``/proc/PID/fd/FD`` (:func:`open_held`) and maps
read-only once it has seen the seal: copying out of a mapping costs the agent less than
one ``preadv`` of the same slots (benchmarks/RESULTS.md, 2026-12-06 session five). A
tmpfs file cannot be sealed (its seals are fixed at ``F_SEAL_SEAL``), and a memfd cannot
be linked into ``/dev/shm`` (another mount: EXDEV), so one memory cannot be both: a
segment is a file (reachable by name from any PID namespace that shares ``/dev/shm``,
swept by its lock) or a memfd (reachable only through ``/proc`` by a process that may
inspect the remote, i.e. of its user and PID namespace; it needs no sweeping: it goes
with the last fd or mapping). The remote makes a memfd only for an agent that asks for
one, and an agent asks only after it has reached a file segment's fd through ``/proc``
(the same file by device and inode), so an older agent, one in another PID namespace
(``docker --ipc=host``) or off Linux keeps the file.

The file is created mode 0600 (the remote's user) with its pages reserved
(``posix_fallocate``: on a full tmpfs creation is an OSError, where a sparse file would
SIGBUS the remote at its first write) and removed when the remote closes. Whether its
remote is alive is told by a lock, not a pid: the remote holds an ``flock`` on the file
for the segment's life, and the kernel drops it when the process is gone, however it
went. :func:`sweep` removes every segment whose lock it can take; ``serve`` sweeps when
it starts, a remote again before it makes a segment, and an agent whose remote dropped
removes the one it was reading (:meth:`FrameReader.remove_if_abandoned`). A pid would be
wrong across PID namespaces sharing ``/dev/shm`` (``docker --ipc=host``) and after pid
reuse; the pid in a segment's name is only for a person reading ``/dev/shm``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import secrets
import stat
import struct
from pathlib import Path
from typing import Final, Self

import numpy as np

#: Where segments live (tmpfs on Linux); absent elsewhere, and then nobody asks for shm.
SHM_DIR: Final = Path("/dev/shm")
PREFIX: Final = "universe-remote-frame-"
MAGIC: Final = b"URFRAME1"
#: magic, frame number, episode id, height, width.
HEADER: Final = struct.Struct("<8sqqII")
#: Pixels start here (a multiple of 64: aligned for numpy's copies).
PIXELS_AT: Final = 64
#: The longest side a reply may name (the agent allocates frames of the size it names).
MAX_SIDE: Final = 16384
#: How every refusal of :class:`FrameReader` ends.
VNC_INSTEAD: Final = "frames go over VNC instead"


def available() -> bool:
    """Shared memory frames are possible on this machine."""
    return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK | os.X_OK)


class FrameSegment:
    """The remote's side: one file sized for frames of ``height`` x ``width``, its pages
    reserved (creation raises OSError when the tmpfs is full) and locked (``flock``) by
    this process until :meth:`close` or its end, so that :func:`sweep` leaves it alone."""

    def __init__(self, height: int, width: int) -> None:
        sweep()
        self.height, self.width = height, width
        size = PIXELS_AT + height * width * 3
        fd, self.path, self._map = create_mapped(size)
        self.name = self.path.name
        #: Kept open, with its lock, for the segment's life: the lock says we live.
        self._fd = fd
        self._pixels = np.frombuffer(self._map, np.uint8, height * width * 3, PIXELS_AT).reshape(
            height, width, 3
        )

    @property
    def reply(self) -> list[str | int]:
        """What a step reply carries: ``[name, height, width]``."""
        return [self.name, self.height, self.width]

    @property
    def shape(self) -> tuple[int, int, int]:
        """The frames it holds: ``(height, width, 3)``."""
        return (self.height, self.width, 3)

    @property
    def pixels(self) -> np.ndarray:
        """Its frame's pixels, ``uint8[height, width, 3]``, for a runtime to draw into."""
        return self._pixels

    def write(self, frame: np.ndarray | None, number: int, episode_id: int) -> None:
        """Put ``frame`` (``uint8[height, width, 3]``; None: it is there, drawn into
        :attr:`pixels`) in, then the header that names it."""
        if frame is not None:
            np.copyto(self._pixels, frame)
        HEADER.pack_into(self._map, 0, MAGIC, number, episode_id, self.height, self.width)

    def close(self) -> None:
        """Remove the file and let go of its lock (idempotent); an agent that has it open
        keeps reading its last frame."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if not self._map.closed:
            del self._pixels
            with contextlib.suppress(BufferError):  # a view still exported: GC frees it
                self._map.close()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


#: The seals of a batch segment made as a memfd (:func:`create_sealed`): fixed in size
#: for good, so a mapping of it can never SIGBUS (0 off Linux, where none is made).
SEALS: Final = (getattr(fcntl, "F_SEAL_SHRINK", 0) | getattr(fcntl, "F_SEAL_GROW", 0)
                | getattr(fcntl, "F_SEAL_SEAL", 0))
#: The seal without which an agent never maps a segment: what stops a truncation under it.
MAP_SEAL: Final = getattr(fcntl, "F_SEAL_SHRINK", 0)
#: Where a process's open fds are reachable (to processes that may inspect it).
PROC_FD: Final = "/proc/{pid}/fd/{fd}"
#: Bounds of a pid and an fd number a reply may name (Linux's pid_max and fd numbers are
#: below these).
MAX_PID: Final = 1 << 22
MAX_FD: Final = 1 << 30


def create_sealed(name: str, size: int) -> tuple[int, mmap.mmap]:
    """A memfd named ``name`` (as ``/proc/*/fd`` shows it) of ``size`` bytes, its pages
    reserved (a full memory is ENOSPC here, not SIGBUS at a write), sealed with
    :data:`SEALS` and mapped for writing: its fd and the map. OSError where memfds or
    seals are missing (off Linux, an old kernel, a sandbox): the caller makes a file."""
    if not SEALS or not hasattr(os, "memfd_create"):
        raise OSError(errno.ENOSYS, "sealed memfds are Linux's")
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.posix_fallocate(fd, 0, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        return fd, mmap.mmap(fd, size)
    except BaseException:
        os.close(fd)
        raise


def open_held(pid: object, fd: object, name: str, writable: bool = False) -> tuple[int, os.stat_result, str]:
    """Open read-only (``writable``: for writing too) the segment ``name`` as process
    ``pid`` holds it open (fd ``fd``, both from a reply or a request, untrusted): our fd,
    its stat and its kind: ``"sealed"`` (a memfd of that name that cannot shrink: safe to
    map), ``"memfd"`` (one that can: read it by copy) or ``"file"`` (the ``/dev/shm`` file
    of that name, by the path it shows). An OSError (another PID namespace, no ``/proc``,
    a process we may not inspect) or a ValueError (another file, not a regular one,
    another user's) otherwise. The agent reaches a remote's segment so, and a remote an
    agent's frame buffer (:mod:`rewarder.shm_bank`)."""
    path = segment_path(name)
    if not (type(pid) is int and 0 < pid < MAX_PID and type(fd) is int and 0 <= fd < MAX_FD):
        raise ValueError(f"frame segment {name}: [{pid!r}, {fd!r}] is not a pid and an fd")
    link = PROC_FD.format(pid=pid, fd=fd)
    before = os.stat(link)  # (before opening: opening a device or a FIFO may do something)
    if not stat.S_ISREG(before.st_mode) or before.st_uid != os.geteuid():
        raise ValueError(f"fd {fd} of process {pid} is not a regular file of this user")
    access = os.O_RDWR if writable else os.O_RDONLY
    ours = os.open(link, access | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(ours)
        if not same_file(ours, before) or st.st_uid != os.geteuid():
            raise ValueError(f"fd {fd} of process {pid} changed while it was opened")
        target = os.readlink(PROC_FD.format(pid="self", fd=ours))  # (ours: it cannot change)
        if target == str(path):
            return ours, st, "file"
        if target != f"/memfd:{name} (deleted)":
            raise ValueError(f"fd {fd} of process {pid} is {target!r}, not frame segment {name}")
        try:
            seals = fcntl.fcntl(ours, fcntl.F_GET_SEALS)
        except OSError:
            seals = 0
        return ours, st, "sealed" if MAP_SEAL and seals & MAP_SEAL else "memfd"
    except BaseException:
        os.close(ours)
        raise


def same_file(fd: int, st: os.stat_result) -> bool:
    """``fd`` is open on the file ``st`` describes (device and inode)."""
    now = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def segment_path(name: str) -> Path:
    """Where the segment a reply names lives, once the name is one a segment can have (it
    comes over a socket: no path, no NUL, our prefix)."""
    if (not isinstance(name, str) or not name.startswith(PREFIX) or "/" in name
            or "\0" in name or name in (".", "..")):
        raise ValueError(f"{name!r} is not a frame segment name; {VNC_INSTEAD}")
    return SHM_DIR / name


def open_checked(path: Path) -> tuple[int, int]:
    """Open an untrusted segment for reading (:class:`FrameReader` says how and why): its
    fd and size, once it is a regular file of this process's user."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        what = ("is a symbolic link, which a segment never is" if exc.errno == errno.ELOOP
                else f"cannot be opened ({exc.strerror})")
        raise OSError(exc.errno, f"frame segment {path} {what}; {VNC_INSTEAD}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(
                f"frame segment {path} is {_kind(st.st_mode)}, not a regular file; {VNC_INSTEAD}"
            )
        if st.st_uid != os.geteuid():
            raise PermissionError(
                errno.EACCES,
                f"frame segment {path} belongs to uid {st.st_uid}, not to this process's user "
                f"(uid {os.geteuid()}); {VNC_INSTEAD}",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


class OpenSegment:
    """A segment an agent opened to read (its ``path`` and ``_fd``, -1 once closed): what
    :class:`FrameReader` and ``shm_slots.SlotReader`` share of its life."""

    path: Path
    _fd: int

    def remove_if_abandoned(self) -> bool:
        """Remove the segment if its remote is gone (no process holds its lock), as the
        agent does when the connection to that remote closed; whether it was removed. A
        living remote's segment, or a file that is no longer the one of that name, stays."""
        if self._fd < 0:
            return False
        return _remove_if_unlocked(self._fd, self.path)

    def close(self) -> None:
        """Close the file (idempotent)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class FrameReader(OpenSegment):
    """The agent's side: the segment a step reply names, opened once, each frame read by
    copy.

    The reply comes over a socket, so the file it names is not trusted: it is opened with
    ``O_NOFOLLOW`` (a symbolic link is refused), ``O_NONBLOCK`` (a FIFO of that name
    cannot hang :func:`os.open`) and ``O_CLOEXEC``, and must then be a regular file of
    this process's user (root included: a root agent reads only root's segments), big
    enough for a ``width`` x ``height`` frame. Nothing is mapped: :meth:`read_into` copies
    header and pixels out with one ``preadv``, so a file truncated meanwhile gives a short
    read (ValueError), never SIGBUS, and the frame the caller holds never changes under it.

    Every failure is an OSError (FileNotFoundError: another machine or a container's own
    /dev/shm; PermissionError: another user) or a ValueError (not a frame segment, too
    small, not the frame asked for), saying what was wrong: the caller takes frames over
    VNC instead.
    """

    def __init__(self, name: str, height: int, width: int) -> None:
        self._fd = -1
        path = segment_path(name)
        if not (0 < height <= MAX_SIDE and 0 < width <= MAX_SIDE):
            raise ValueError(
                f"frame segment {name}: a {width}x{height} frame is not a screen (each side "
                f"1..{MAX_SIDE}); {VNC_INSTEAD}"
            )
        self.name, self.height, self.width, self.path = name, height, width, path
        #: Header and pixels: what one read needs.
        self.size = PIXELS_AT + height * width * 3
        self._header = bytearray(PIXELS_AT)
        fd, size = open_checked(path)
        if size < self.size:
            os.close(fd)
            raise ValueError(self._truncated(size))
        self._fd = fd

    def read_into(self, dest: np.ndarray) -> tuple[int, int]:
        """Copy the frame the segment holds into ``dest`` (C-contiguous, writable
        ``uint8[height, width, 3]``: a row of a batch array will do); returns its frame
        number and episode id. ``dest`` may be partly written when it raises."""
        if self._fd < 0:
            raise ValueError(f"frame segment {self.name}: the reader is closed; {VNC_INSTEAD}")
        shape = (self.height, self.width, 3)
        if (dest.shape != shape or dest.dtype != np.uint8 or not dest.flags.c_contiguous
                or not dest.flags.writeable):
            raise ValueError(
                f"frame segment {self.name} holds {self.width}x{self.height} frames; they "
                f"cannot be read into a {'' if dest.flags.writeable else 'read-only '}"
                f"{dest.dtype}{list(dest.shape)} array"
                f"{'' if dest.flags.c_contiguous else ' (not C-contiguous)'}; {VNC_INSTEAD}"
            )
        got = os.preadv(self._fd, [self._header, dest.data.cast("B")], 0)
        if got < self.size:
            raise ValueError(self._truncated(got))
        magic, number, episode, height, width = HEADER.unpack_from(self._header, 0)
        if magic != MAGIC:
            raise ValueError(
                f"frame segment {self.name} does not start with {MAGIC!r}: not a frame segment; "
                f"{VNC_INSTEAD}"
            )
        if (height, width) != (self.height, self.width):
            raise ValueError(
                f"frame segment {self.name} holds a {width}x{height} frame, the reply named "
                f"{self.width}x{self.height}; {VNC_INSTEAD}"
            )
        return number, episode


    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _truncated(self, size: int) -> str:
        return (
            f"frame segment {self.name} is truncated: {size} bytes, a {self.width}x{self.height} "
            f"frame needs {self.size}; {VNC_INSTEAD}"
        )


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for an error message."""
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return f"of file type {stat.S_IFMT(mode):#o}"

def sweep() -> list[Path]:
    """Remove the segments no remote holds (their remotes are gone, killed before they
    could remove them); the paths removed. Segments of living remotes, whatever their PID
    namespace, and files this process may not open are left alone."""
    try:
        paths = list(SHM_DIR.glob(f"{PREFIX}*"))
    except OSError:
        return []
    removed = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:  # gone meanwhile, another user's, a symbolic link
            continue
        try:
            if _remove_if_unlocked(fd, path):
                removed.append(path)
        finally:
            os.close(fd)
    return removed


#: Names tried before creating a segment gives up (each try loses only to a sweeper that
#: opened the new file in the instant before its lock was taken).
_CREATE_TRIES: Final = 8


def _create_locked() -> tuple[int, Path]:
    """A new segment file, locked by this process: its fd and path."""
    for _ in range(_CREATE_TRIES):
        path = SHM_DIR / f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _names(path, os.fstat(fd)):
                return fd, path
        except BlockingIOError:  # a sweeper holds it, and will remove it
            pass
        except BaseException:
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)
            raise
        os.close(fd)  # swept as it was made: another name
    raise OSError(errno.EAGAIN, f"could not create a frame segment in {SHM_DIR} "
                  f"({_CREATE_TRIES} files were swept as they were made)")


def create_mapped(size: int) -> tuple[int, Path, mmap.mmap]:
    """A new locked segment of ``size`` bytes (:func:`_create_locked`), its pages reserved
    now (a full tmpfs is ENOSPC here, not SIGBUS at a write) and mapped: its fd (keep it
    open: the lock says its maker lives), its path and the map."""
    fd, path = _create_locked()
    try:
        os.posix_fallocate(fd, 0, size)
        return fd, path, mmap.mmap(fd, size)
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
        raise


def _remove_if_unlocked(fd: int, path: Path) -> bool:
    """Remove ``path`` (open as ``fd``) if it is a regular file no process holds a lock on,
    and still the file of that name; whether it was removed."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its remote holds it: alive
            return False
        try:
            if not _names(path, st):
                return False
            path.unlink()
            return True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        return False


def _names(path: Path, st: os.stat_result) -> bool:
    """``path`` is (still) the file ``st`` describes."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
