"""The thread that keeps idle blocking rewarder connections alive.

Holds :func:`watch`, :func:`forget` and the thread behind them. A lockstep agent talks to
its remote only when it steps; between steps (a learner's update can take minutes) its
connection still gets the remote's WebSocket pings, one a second, and the remote drops a
client that leaves one unanswered for ``KEEPALIVE_TIMEOUT`` (1.5 s). Every
:data:`KEEP_INTERVAL` this thread asks each watched connection that nobody is using to
read what arrived (its ``serve_idle``, :class:`Idle`; :class:`~.blocking.BlockingRewarder`
is the one kind: websockets' protocol queues the pongs, describes and rewards are
filed). A connection in use is skipped: its user reads it.

So the remote tells a thinking agent from a hung one by its process, not its main
thread: a process that runs (this thread included) answers; a stopped or hung process
(SIGSTOP, a deadlock holding the GIL, a dead machine) does not, and loses its seat.

One thread per process, started on first use; a forked child starts its own (the parent's
connections are not the child's to serve).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Final, Protocol

#: Seconds between two rounds of the keeper: well under the remote's keepalive timeout
#: (1.5 s after a ping), so a ping waits at most this long for its pong.
KEEP_INTERVAL: Final = 0.25


class Idle(Protocol):
    """What the keeper calls on a watched connection (the blocking channel imports this
    module, never the other way)."""

    def serve_idle(self) -> None:
        """If nobody uses the connection, read what arrived; never wait for its lock."""


class _Keeper:
    def __init__(self) -> None:
        self.channels: weakref.WeakSet[Idle] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def watch(self, channel: Idle) -> None:
        with self.lock:
            self.channels.add(channel)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="universe-remote-keepalive", daemon=True
                )
                self.thread.start()

    def forget(self, channel: Idle) -> None:
        with self.lock:
            self.channels.discard(channel)

    def _run(self) -> None:
        while not self.wake.wait(KEEP_INTERVAL):
            with self.lock:
                channels = list(self.channels)
            for channel in channels:
                channel.serve_idle()
            del channels


_keeper = _Keeper()


def watch(channel: Idle) -> None:
    """Keep ``channel`` alive while it is idle (until :func:`forget`)."""
    _keeper.watch(channel)


def forget(channel: Idle) -> None:
    _keeper.forget(channel)


def _after_fork() -> None:
    """In a child: the parent's keeper thread does not exist here, its lock may have been
    held at fork, and its connections are the parent's: start over."""
    global _keeper
    _keeper = _Keeper()


os.register_at_fork(after_in_child=_after_fork)
