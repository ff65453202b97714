"""The error an env raises when a remote cannot be reached or dropped.

Holds :class:`RemoteUnavailable` and which errors explain themselves (then no generic
hint is added) or are a final answer (then a connect stops waiting for the other channel).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from rewarder.errors import ConnectTimeout as RewarderConnectTimeout, Refused, RemoteError
from vncdriver.errors import (
    AuthenticationFailed,
    ConnectTimeout as VNCConnectTimeout,
    ServerRefused,
    TLSFailed,
)

from .listening import NothingListens

#: What to check when a remote does not answer (said once per error).
_HINT: Final = (
    "Is it running (universe-remote serve ...)? Check the address, the ports and the password."
)


#: Errors that carry the remote's own reason, or advice of their own (the connect timeouts
#: say what to check): the generic hint would only repeat or mislead.
_EXPLAINED: Final = (
    Refused, RemoteError, AuthenticationFailed, ServerRefused, RewarderConnectTimeout, VNCConnectTimeout,
    NothingListens,
)
#: Of those, the ones that are a final answer: the other channel need not be waited for.
FINAL_ERRORS: Final = (Refused, RemoteError, AuthenticationFailed, ServerRefused, TLSFailed)


class RemoteUnavailable(ConnectionError):
    """A remote could not be reached or dropped; the message says which and what to do."""

    def __init__(self, name: str, what: str, cause: BaseException | None = None) -> None:
        """The error's message is built from these: which remote, what, and why.

        Args:
            name: the remote (its address).
            what: what failed ("cannot connect", "reset failed").
            cause: the error underneath, if any: whether it explains itself decides whether
                the message adds the hint.
        """
        self.name, self.what, self.cause = name, what, cause
        #: With :meth:`several`: each remote's own error.
        self.errors: list[BaseException] = [self]
        hint = f" {_HINT}" if self.unexplained else ""
        super().__init__(f"remote {name}: {self.problem}.{hint}")

    @property
    def unexplained(self) -> bool:
        """Whether nothing said why (no answer, a drop): then the hint helps. A remote that
        refused (password, busy) or failed a request said why, and the hint would mislead."""
        if isinstance(self.cause, RemoteUnavailable):
            return self.cause.unexplained
        return not isinstance(self.cause, _EXPLAINED)

    @property
    def problem(self) -> str:
        """What went wrong, without the hint."""
        if self.cause is None:
            return self.what
        cause = self.cause.problem if isinstance(self.cause, RemoteUnavailable) else self.cause
        return f"{self.what}: {cause}"

    @classmethod
    def several(cls, errors: Sequence[BaseException], total: int) -> RemoteUnavailable:
        """One error for the remotes of an env that did not answer, each with its reason.

        Args:
            errors: each failed remote's error.
            total: how many remotes the env has.

        Returns:
            One error naming them all; :attr:`errors` keeps each.
        """
        names = ", ".join(getattr(e, "name", "?") for e in errors)
        reasons = "; ".join(
            e.problem if isinstance(e, RemoteUnavailable) else str(e) for e in errors
        )
        error = cls(names, f"{len(errors)} of {total} remotes did not answer ({reasons})")
        error.errors = list(errors)
        return error
