"""Which session of this process holds each remote's active slot, and this process's
rewarder client id.

Holds :func:`process_client_id` and :func:`take_slot`: a newer session of this process on
the same remote takes its active slot over (same client id: ``check_env`` builds such
second envs), and the older one learns it was replaced (``RemoteSession.replaced``)
instead of taking the slot back by reconnecting. Any thread; fork-safe.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
import weakref
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .address import RemoteAddress


class Holder(Protocol):
    """What :func:`take_slot` uses of a :class:`~remotes.session.RemoteSession` (named here
    so this module, below the session, never imports it)."""

    #: Set on the older session when a newer one of this process takes its slot over.
    replaced: bool

    @property
    def address(self) -> RemoteAddress: ...
    @property
    def player(self) -> int | None: ...

_client_ids: dict[int, str] = {}


def process_client_id() -> str:
    """This process's rewarder client id: a new env of this process takes over a remote
    an earlier env of it still holds (``check_env`` builds such second envs), while an
    agent of another process is refused as busy. New after a fork."""
    pid = os.getpid()
    if pid not in _client_ids:
        _client_ids[pid] = f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:12]}"
    return _client_ids[pid]


#: Which session of this process holds each remote's active slot (its rewarder address):
#: a newer session on the same remote takes the slot over (same client id), and the
#: older one learns it was replaced instead of taking the slot back by reconnecting.
_holders: dict[str, weakref.ReferenceType[Holder]] = {}
_holders_lock = threading.Lock()


def _after_fork() -> None:
    """In a fork's child the parent's sessions are not ours, and the lock may have been
    held at fork."""
    global _holders_lock
    _holders.clear()
    _holders_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def take_slot(session: Holder) -> None:
    """Record ``session`` as its remote's holder; mark the one it replaces."""
    key = session.address.rewarder
    if key is not None and session.player:
        key += f" player {session.player}"
    if key is None:
        return
    with _holders_lock:
        old_ref = _holders.get(key)
        old = old_ref() if old_ref is not None else None
        if old is not None and old is not session:
            old.replaced = True
        _holders[key] = weakref.ref(session)
