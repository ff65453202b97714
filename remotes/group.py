"""What :func:`~remotes.local.start_local` and :func:`~remotes.containers.start_docker`
return: remotes this process started, stopped on close, ``with`` exit or interpreter exit."""

from __future__ import annotations

import asyncio
import atexit
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Self

from .address import RemoteAddress, format_remotes

if TYPE_CHECKING:
    from .session import RemoteSession


class Unplaced(Exception):
    """A group's remote has no address now (a pool lease ended and no other remote could
    be claimed yet): probe nothing, ask again later."""


class RemoteGroup:
    """Started remotes; :attr:`address` is their ``vnc://...`` address string."""

    def __init__(self, addresses: Sequence[RemoteAddress], password: str | None) -> None:
        self.addresses = list(addresses)
        self.password = password
        atexit.register(self.close)

    @property
    def address(self) -> str:
        return format_remotes(self.addresses, self.password)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.addresses)

    def address_of(self, index: int) -> RemoteAddress:
        """Remote ``index``'s current address; blocking, so call it off the loop thread.

        Fixed for remotes restarted on their old ports; a group whose remotes come back
        elsewhere (:class:`~remotes.ray.RayRemotes`) asks where they are now. A
        :class:`~remotes.vector.RemoteVectorEnv` made from a group asks before each probe
        of a dropped remote.

        Args:
            index: the remote (0-based).

        Returns:
            Its address now.
        """
        return self.addresses[index]

    def follow(self, sessions: Sequence[RemoteSession]) -> None:
        """Have the sessions of an env made from this group follow its remotes
        (:func:`follow`; a pool's leases also give each session its client id).

        Args:
            sessions: the env's sessions, one per remote of the group, in order.
        """
        follow(self, sessions)

    def close(self) -> None:
        """Stop every remote (idempotent)."""
        atexit.unregister(self.close)
        self._stop()

    def _stop(self) -> None:
        raise NotImplementedError


def follow(group: RemoteGroup, sessions: Sequence[RemoteSession]) -> None:
    """Have session *i* ask ``group`` where remote *i* is now whenever it reconnects
    (``address_of`` blocks, so on a worker thread, never on the loop)."""
    for i, session in enumerate(sessions):
        session.locate = partial(asyncio.to_thread, group.address_of, i)
