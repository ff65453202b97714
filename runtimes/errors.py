"""Errors of runtimes and the remote process.

    RuntimeFailure
    ├── UnknownEnvironment   no runtime has that env id
    └── BadInput             an input event the runtime cannot take (unknown key, off screen)
"""

from __future__ import annotations

from collections.abc import Sequence


class RuntimeFailure(Exception):
    """Base class of the runtime errors."""


class UnknownEnvironment(RuntimeFailure, LookupError):
    """An env id no installed runtime serves."""

    def __init__(self, env_id: str, available: Sequence[str], hint: str | None = None) -> None:
        self.env_id, self.available = env_id, list(available)
        why = f" (its family is not installed: {hint})" if hint else ""
        super().__init__(
            f"no such environment: {env_id!r}{why}; available: {', '.join(self.available)} "
            "(`universe-remote list` prints them)"
        )


class BadInput(RuntimeFailure, ValueError):
    """An input event this runtime cannot take; the message says what it accepts."""
