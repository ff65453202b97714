"""What :func:`~remotes.local.start_local` and :func:`~remotes.containers.start_docker`
return: remotes this process started, stopped on close, ``with`` exit or interpreter exit."""

from __future__ import annotations

import atexit
from collections.abc import Sequence
from typing import Any, Self

from .address import RemoteAddress, format_remotes


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

    def close(self) -> None:
        """Stop every remote (idempotent)."""
        atexit.unregister(self.close)
        self._stop()

    def _stop(self) -> None:
        raise NotImplementedError
