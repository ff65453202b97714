"""Ctrl-C held back while the blocking rewarder client writes a frame (:mod:`.blocking`).

A lockstep step's request must go out whole or not at all: a KeyboardInterrupt inside
``socket.sendall`` would tear the WebSocket stream for good. These two calls swap the
default SIGINT handler for one that notes the signal, then raise it once the write is done.
"""

from __future__ import annotations

import _signal
import signal
import threading
from typing import Final


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


_MAIN_IDENT: Final = threading.main_thread().ident
_SIGINT: Final = int(signal.SIGINT)
_DEFAULT: Final = signal.default_int_handler
