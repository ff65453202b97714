"""A lockstep connection's reads on a thread of its own, blocking, not an asyncio wake per request.

Holds :func:`held_loop` (the serve process's event loop: its thread holds one lock, the
*loop lock*, whenever it runs, and lets go of it only while it waits in ``epoll`` and a
reader thread is alive),
:class:`LinkReader` (the thread that reads one rewarder connection once it steps in
lockstep) and :func:`reader_for` (whether a connection may have one).

Why: an asyncio ``Protocol`` wake costs a remote about 30 us of CPU per message against
about 9 for a thread blocked in ``poll`` (issue 40's measurements), and a lockstep agent
sends nothing but steps, each waiting for its reply. So once a connection sends a lockstep
step or a batch step answered at once, its reader thread takes over its reads: the
transport stops reading (``pause_reading``), the thread waits in ``poll`` on the socket
(and on a pipe that stops it), reads what came, and serves it under the loop lock with the
link's own code (:meth:`~.server_link.ServerLink.data_received`: the same framing, the
same requests, the same replies through the transport): the game's state is touched by
one thread at a time, and every other user of the loop (real time, VNC viewers, observers,
the other ports) is served by the loop as before, between two steps. While the thread
holds the lock the loop waits for it, as it waited for a step it ran itself; a step that
does not fit one slice runs as a task on the loop (the thread hands the socket back).

What the thread did that the loop must act on (a callback made ready, an earlier timer)
wakes the loop through its self-pipe; nothing else does, so a step costs no wake of the
loop. The thread hands the socket back to the loop (``resume_reading``) when a request
must wait in a task, when the link ends, and at EOF or a read error (the loop then reads
the end itself, and closes as it always does); the link's ``connection_lost`` stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import selectors
import threading
from typing import TYPE_CHECKING, Any, Final

from .server_link import MAX_PENDING_MESSAGES

if TYPE_CHECKING:
    from .server_link import ServerLink

log = logging.getLogger(__name__)

#: Bytes one read takes at most: a whole batch request and more (a frame longer than
#: this is read in pieces, as asyncio's own 256 KiB reads take it). Read into one buffer
#: a thread keeps: ``os.read`` of this many bytes allocates (and maps) them each time,
#: 10 us a message.
READ_BYTES: Final = 256 * 1024
#: Set ``UNIVERSE_REMOTE_LINK_READER=0`` to serve every connection from the loop
#: (the old path, for comparison: ``python -m benchmarks lockstep_peers``).
LINK_READER_ENV: Final = "UNIVERSE_REMOTE_LINK_READER"


class HeldSelector(selectors.EpollSelector):
    """The loop's selector: the loop's thread holds :attr:`lock` but while it waits.

    The loop goes first: a :class:`LinkReader` waits for :attr:`turn` while the loop
    wants the lock (:attr:`loop_wants`), so a thread stepping back to back cannot take the
    lock again and again before the woken loop gets it (``threading.Lock`` is not fair:
    without this a VNC viewer of a batched game waited up to 240 ms for an update)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.lock.acquire()  # (made by the thread that runs the loop, which holds it)
        #: Set while the loop waits in ``epoll`` (readers may take the lock).
        self.turn = threading.Event()
        #: Whether the loop is woken and waits for the lock.
        self.loop_wants = False
        #: Reader threads alive (counted under the lock): with none, the loop keeps the
        #: lock while it waits too, and a loop turn costs what asyncio's own does.
        self.readers = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if not self.readers:  # (only the loop's thread starts one: none can appear meanwhile)
            return super().select(timeout)
        self.lock.release()
        self.turn.set()
        try:
            return super().select(timeout)
        finally:
            self.loop_wants = True
            self.turn.clear()
            self.lock.acquire()
            self.loop_wants = False


class HeldLoop(asyncio.SelectorEventLoop):
    """An event loop whose thread holds :attr:`lock` whenever it runs (see the module)."""

    def __init__(self) -> None:
        self.held = HeldSelector()
        super().__init__(self.held)
        self.lock = self.held.lock


def held_loop() -> asyncio.AbstractEventLoop:
    """The serve process's loop (``asyncio.Runner(loop_factory=held_loop)``)."""
    return HeldLoop()


def _loop_mark(loop: Any) -> tuple[int, Any]:
    """What the loop would wake for: its ready callbacks and its earliest timer."""
    scheduled = loop._scheduled
    return len(loop._ready), scheduled[0] if scheduled else None


def reader_for(link: ServerLink) -> LinkReader | None:
    """A reader thread for ``link`` if its loop is a :class:`HeldLoop` whose ready queue
    and timers :func:`_loop_mark` can read (CPython's), it has none yet, and its bytes are
    a plain socket's (not TLS's); else None."""
    if link.reader is not None or os.environ.get(LINK_READER_ENV, "1") == "0":
        return None
    loop = link.loop
    transport = link.transport
    if not isinstance(loop, HeldLoop) or transport is None or transport.is_closing():
        return None
    if not (hasattr(loop, "_ready") and hasattr(loop, "_scheduled")):  # (another asyncio)
        return None
    if any(transport.get_extra_info(key) is not None for key in ("sslcontext", "ssl_object")):
        return None  # (TLS: its socket's bytes are the TLS layer's to read)
    sock = transport.get_extra_info("socket")
    if sock is None or not hasattr(transport, "pause_reading"):
        return None
    return LinkReader(link, loop, sock.fileno())


class LinkReader:
    """The thread that reads one link's socket while it steps (the module says why)."""

    def __init__(self, link: ServerLink, loop: HeldLoop, fd: int) -> None:
        self.link, self.loop, self.fd = link, loop, fd
        self.lock = loop.lock
        #: Set (under the loop lock) to end the thread: the link's socket is closing.
        self.stopped = False
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._buffer = bytearray(READ_BYTES)
        self._view = memoryview(self._buffer)
        self.thread = threading.Thread(target=self._run, name=f"rewarder-reader-{fd}", daemon=True)

    def start(self) -> None:
        """Take the link's reads off the loop (called on the loop's thread)."""
        assert self.link.transport is not None
        self.link.reader = self
        self.link.transport.pause_reading()
        self.loop.held.readers += 1
        self.thread.start()

    def stop(self) -> None:
        """End the thread (under the loop lock: the loop's thread, or this one)."""
        if self.stopped:
            return
        self.stopped = True
        if self.link.reader is self:
            self.link.reader = None
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _run(self) -> None:
        asyncio.events._set_running_loop(self.loop)  # (the link's code asks for its loop)
        held = self.loop.held
        try:
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            poller.register(self._wake_r, select.POLLIN)
            while True:
                try:
                    poller.poll()
                except InterruptedError:  # (PEP 475 retries; kept for clarity)
                    continue
                if held.loop_wants:  # the loop's turn first (HeldSelector)
                    held.turn.wait()
                with self.lock:
                    if self.stopped:
                        return
                    before = _loop_mark(self.loop)
                    try:
                        going = self._serve()
                    except Exception:  # a bug of ours: the loop takes the socket back
                        log.exception("the reader thread of %s failed", self.link.remote_address)
                        going = False
                    if not going:
                        self._hand_back()
                    ready, head = _loop_mark(self.loop)
                    if ready != before[0] or head is not before[1]:
                        self.loop.call_soon_threadsafe(_nothing)
                    if not going:
                        return
        finally:
            with self.lock:
                held.readers -= 1
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _serve(self) -> bool:
        """Read what came and serve it; whether the thread goes on reading."""
        link = self.link
        try:
            size = os.readv(self.fd, (self._buffer,))
        except (BlockingIOError, InterruptedError):
            return True  # (nothing after all)
        except OSError:
            return False  # (a reset: the loop reads the error and closes)
        if not size:
            return False  # EOF: the loop reads it and closes
        link.data_received(bytes(self._view[:size]))
        return not (link.busy or link.ended or link.transport is None or link.transport.is_closing())

    def _hand_back(self) -> None:
        """The loop reads this link again (unless it is closing)."""
        stopped = self.stopped
        self.stopped = True
        link = self.link
        if link.reader is self:
            link.reader = None
        transport = link.transport
        if (not stopped and transport is not None and not transport.is_closing()
                and len(link.pending) < MAX_PENDING_MESSAGES):  # (else the task's end resumes)
            transport.resume_reading()


def _nothing() -> None:
    """What wakes the loop: it then runs what the reader thread made ready."""
