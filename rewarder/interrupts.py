"""Ctrl-C and deadlines around the blocking rewarder client's writes (:mod:`.blocking`).

A lockstep step's request must go out whole or not at all: a KeyboardInterrupt inside
``socket.sendall`` would tear the WebSocket stream for good. :func:`hold_interrupts` and
:func:`release_interrupts` swap the default SIGINT handler for one that notes the signal,
then raise it once the write is done. :func:`send_whole` writes one buffer that way, but
never waits longer than its timeout for a peer that takes no bytes (a stopped remote, a
server that only writes), and honours a Ctrl-C that comes while it waits: a write the
peer did not take whole is given up, and with it the connection (the caller drops it).
"""

from __future__ import annotations

import _signal
import select
import signal
import socket
import ssl
import threading
import time
from typing import Final

#: Seconds a request may wait for the remote to take its bytes when the caller gave no
#: timeout (a vector env's ``send_step``): the stall timeout a lockstep step waits for
#: its reply (remotes.faults.STALL_TIMEOUT); a remote that takes nothing for this long is
#: stopped or not reading, and the connection is given up.
SEND_TIMEOUT: Final = 10.0
#: Seconds a pong or a close echo may wait for the socket to take it: a remote that
#: takes not even that is not reading (its own keepalive gives a client 1.5 s), and the
#: keeper thread, which serves every idle channel, must not wait on one for long.
CONTROL_SEND_TIMEOUT: Final = 1.0
#: Seconds between two looks for a Ctrl-C held while a write waits for the peer to take
#: bytes (the signal's handler only notes it): how late Ctrl-C ends a stuck write at most.
INTERRUPT_POLL: Final = 0.05


class WriteInterrupted(KeyboardInterrupt):
    """Ctrl-C ended a write the peer had not taken whole (part of it may have gone)."""


def hold_interrupts() -> list[int] | None:
    """Hold Ctrl-C (SIGINT) back while a frame is written; :func:`release_interrupts`
    then raises it. Returns the list a held signal goes to (None: nothing held).

    ``socket.sendall`` runs the signal handlers after each ``send()``, so a
    KeyboardInterrupt can leave it with the frame fully sent, partly sent or not sent,
    and no way to tell. Writes are a few hundred bytes: holding the interrupt for them
    costs the user nothing. Only the main thread runs Python's signal handlers, and only
    the default handler is swapped (a program with its own keeps it). ``_signal`` is the
    C module under :mod:`signal`, without its enum conversions (they cost more than the write they guard);
    a plain pair of calls,
    not a context manager, since this runs on every lockstep step."""
    if threading.get_ident() != _MAIN_IDENT or _signal.getsignal(_SIGINT) is not _DEFAULT:
        return None
    caught: list[int] = []
    _signal.signal(_SIGINT, lambda number, frame: caught.append(number))
    return caught


def release_interrupts(caught: list[int] | None, raise_held: bool = True) -> None:
    """Put the default SIGINT handler back; raise the Ctrl-C held meanwhile, if any
    (``raise_held`` False: another exception is on its way already)."""
    if caught is None:
        return
    _signal.signal(_SIGINT, _DEFAULT)
    if caught and raise_held:
        raise KeyboardInterrupt


def send_whole(sock: socket.socket, data: bytes, timeout: float) -> None:
    """Write ``data`` whole, Ctrl-C held while bytes go out (:func:`hold_interrupts`).

    The usual write is one non-blocking ``send`` that takes it all. When the peer's
    buffers are full, wait for room up to ``timeout`` seconds from then. Raises
    TimeoutError past it, :class:`WriteInterrupted` on a Ctrl-C that came meanwhile,
    OSError when the connection breaks: in each case part of ``data`` may have gone out,
    so the stream is torn and the caller must drop the connection. A Ctrl-C held while a
    write went out whole is raised after it (a plain KeyboardInterrupt)."""
    caught = hold_interrupts()
    try:
        sent = _send_some(sock, data)
        if sent < len(data):
            try:
                _send_rest(sock, memoryview(data)[sent:], timeout, caught)
            except KeyboardInterrupt as exc:  # (a program's own SIGINT handler raised it)
                if isinstance(exc, WriteInterrupted):
                    raise
                raise WriteInterrupted from exc
    except BaseException:
        release_interrupts(caught, raise_held=False)
        raise
    release_interrupts(caught)


def _send_some(sock: socket.socket, data: bytes | memoryview) -> int:
    """One write that never waits; the bytes it took."""
    if isinstance(sock, ssl.SSLSocket):  # (TLS takes no flags: made non-blocking meanwhile)
        blocking = sock.getblocking()
        sock.setblocking(False)
        try:
            return sock.send(data)  # all of it or nothing (OpenSSL's writes are not partial)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return 0
        finally:
            sock.setblocking(blocking)
    try:
        return sock.send(data, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return 0


def _send_rest(sock: socket.socket, rest: memoryview, timeout: float, caught: list[int] | None) -> None:
    total = len(rest)
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    while rest:
        if caught:
            raise WriteInterrupted
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(
                f"the peer took {total - len(rest)} of the last {total} bytes in {timeout:g} s "
                "(it is stopped, or it does not read)"
            )
        # A held Ctrl-C only notes itself (and poll resumes after it): look again soon.
        wait = min(remaining, INTERRUPT_POLL) if caught is not None else remaining
        if poller.poll(wait * 1000.0):
            rest = rest[_send_some(sock, rest):]


_MAIN_IDENT: Final = threading.main_thread().ident
_SIGINT: Final = int(signal.SIGINT)
_DEFAULT: Final = signal.default_int_handler
