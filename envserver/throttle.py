"""Failed-password throttling, TigerVNC style: one guard for every port of a remote.

Holds :class:`AuthThrottle` (sans-I/O: a clock in, decisions out). After
:data:`MAX_FAILURES` wrong passwords from one address, that address is refused for
:data:`BLOCK_SECONDS`, doubling on each further block up to :data:`MAX_BLOCK_SECONDS`;
a right password clears the count. One throttle serves the VNC, rewarder and viewer
ports, so a guesser gains nothing by spreading attempts over them. Each block is logged
once per address, not once per attempt.

Measured before: 1,324 wrong VNC passwords/s and 822/s on the rewarder, and the right
one still worked 1 ms later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

log = logging.getLogger(__name__)

#: Wrong passwords from one address before it is blocked (TigerVNC: 5).
MAX_FAILURES: Final = 5
#: First block; doubles with each block that follows ...
BLOCK_SECONDS: Final = 10.0
#: ... up to this.
MAX_BLOCK_SECONDS: Final = 600.0
#: Addresses remembered at most; the oldest records go first past it (a flood of
#: addresses must not grow memory without bound).
MAX_TRACKED: Final = 4096


@dataclass(slots=True)
class _Record:
    failures: int = 0
    blocks: int = 0
    until: float = 0.0
    seen: float = 0.0


class AuthThrottle:
    """Counts wrong passwords per address and says who is blocked, and for how long."""

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        block_seconds: float = BLOCK_SECONDS,
        max_block_seconds: float = MAX_BLOCK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.block_seconds, self.max_block_seconds = block_seconds, max_block_seconds
        self._clock = clock
        self._records: dict[str, _Record] = {}

    def blocked(self, address: str | None) -> float:
        """Seconds ``address`` stays blocked (0: it may try)."""
        record = self._records.get(address or "")
        if record is None:
            return 0.0
        return max(0.0, record.until - self._clock())

    def failed(self, address: str | None, where: str) -> None:
        """A wrong password from ``address`` on ``where`` (a port's name, for the log)."""
        now = self._clock()
        key = address or ""
        record = self._records.pop(key, None) or _Record()
        self._records[key] = record  # newest last: the oldest go first past MAX_TRACKED
        record.seen = now
        record.failures += 1
        if record.failures >= self.max_failures:
            seconds = min(self.block_seconds * 2**record.blocks, self.max_block_seconds)
            record.blocks += 1
            record.failures = 0
            record.until = now + seconds
            log.warning(
                "%s: %d wrong passwords (last on %s); refusing it for %g s (MAX_FAILURES, "
                "BLOCK_SECONDS)", key or "an unknown address", self.max_failures, where, seconds,
            )
        while len(self._records) > MAX_TRACKED:
            del self._records[next(iter(self._records))]

    def succeeded(self, address: str | None) -> None:
        """A right password: the address starts afresh (a block already running stays)."""
        record = self._records.get(address or "")
        if record is not None and record.until <= self._clock():
            del self._records[address or ""]

    def refusal(self, address: str | None) -> str | None:
        """Why ``address`` may not try now, or None."""
        seconds = self.blocked(address)
        if seconds <= 0:
            return None
        return (
            f"too many wrong passwords from {address}; try again in {seconds:.0f} s "
            "(check the password: UNIVERSE_REMOTE_PASSWORD on the remote)"
        )
