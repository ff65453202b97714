"""Failed-password throttling, TigerVNC style: one guard for every port of a remote.

Holds :class:`AuthThrottle` (sans-I/O: a clock in, decisions out). After
:data:`MAX_FAILURES` wrong passwords from one address, that address is refused for
:data:`BLOCK_SECONDS`, doubling on each further block up to :data:`MAX_BLOCK_SECONDS`.
One throttle serves the VNC, rewarder, viewer and
dm_env_rpc ports, so a guesser gains nothing by spreading attempts over them. Each block
is logged once per address, not once per attempt.

**A right password clears nothing**: whoever shares an address (a NAT, a container
bridge, 127.0.0.1) shares its record, so a frequent user's logins must not hand a guesser
there fresh tries (clearing the count gave it ``MAX_FAILURES - 1`` guesses per login, and
clearing the escalation kept it at 10 s blocks). Time forgives instead: wrong passwords
are forgotten :data:`FAILURE_MEMORY` seconds after the last one, the escalation
:data:`ESCALATION_MEMORY` seconds after the last block ended. A user who mistypes now and
then is never blocked; one who is blocked after a burst of typos starts at 10 s again an
hour later.

**The decision is taken when a password is compared**, not when a connection opens: every
port asks just before it compares (:meth:`AuthThrottle.admit`; the rewarder asks
:meth:`~AuthThrottle.refusal` in the same synchronous step as its comparison) and reports
the outcome (:meth:`~AuthThrottle.failed` or :meth:`~AuthThrottle.succeeded`). ``admit``
refuses a blocked address (with the time left, whatever the password: a right one during
a block is refused too, never compared) and counts comparisons still under way per
address, so at most :data:`MAX_FAILURES` passwords are ever compared per block, however
many handshakes were opened before it began. (Measured before: 48 VNC handshakes opened at once from one
address, then answered, had 47 wrong passwords compared and the right 48th let in while
the address was blocked; a block was checked only as each connection opened.)

Before that a guesser tried passwords at the ports' full speed and the right one still
worked at once (tests/envserver/test_security.py, test_password_race.py; the hand-measured
rates are in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import logging
import math
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
#: Seconds after an address's last wrong password that its count is forgotten. As long as
#: the longest block, so staying under MAX_FAILURES guesses no faster than being blocked.
FAILURE_MEMORY: Final = MAX_BLOCK_SECONDS
#: Seconds after an address's last block ended that its escalation is forgotten (the next
#: block is BLOCK_SECONDS again): longer than the climb to MAX_BLOCK_SECONDS.
ESCALATION_MEMORY: Final = 3600.0
#: Addresses remembered at most; the oldest records go first past it (a flood of
#: addresses must not grow memory without bound).
MAX_TRACKED: Final = 4096


@dataclass(slots=True)
class _Record:
    failures: int = 0
    blocks: int = 0
    until: float = 0.0
    #: When the last wrong password came.
    seen: float = 0.0
    #: Comparisons :meth:`AuthThrottle.admit` let in whose outcome is not known yet.
    in_flight: int = 0


class AuthThrottle:
    """Counts wrong passwords per address and says who is blocked, and for how long.

    Call from one thread (the remote's event loop): ``admit``, then ``failed`` or
    ``succeeded`` (or ``abandoned``), around each password comparison.
    """

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        block_seconds: float = BLOCK_SECONDS,
        max_block_seconds: float = MAX_BLOCK_SECONDS,
        failure_memory: float = FAILURE_MEMORY,
        escalation_memory: float = ESCALATION_MEMORY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.block_seconds, self.max_block_seconds = block_seconds, max_block_seconds
        self.failure_memory, self.escalation_memory = failure_memory, escalation_memory
        self._clock = clock
        self._records: dict[str, _Record] = {}
        #: Passwords compared so far (``failed`` and ``succeeded`` calls), every address and
        #: port: at most ``max_failures`` wrong ones per block and address.
        self.comparisons = 0

    def blocked(self, address: str | None) -> float:
        """Seconds ``address`` stays blocked (0: it may try)."""
        record = self._records.get(address or "")
        if record is None:
            return 0.0
        return max(0.0, record.until - self._clock())

    def admit(self, address: str | None) -> str | None:
        """A password from ``address`` is about to be compared: why it may not be (the
        address is blocked, or enough comparisons to block it are under way), else None,
        and the comparison counts as under way until :meth:`failed`, :meth:`succeeded` or
        :meth:`abandoned`. Never more than ``max_failures`` comparisons per block."""
        refused = self.refusal(address)
        if refused is not None:
            return refused
        record = self._records.get(address or "")
        if record is not None:
            self._forget(record)
        if record is not None and record.failures + record.in_flight >= self.max_failures:
            return (
                f"{record.in_flight} password checks from {address} are under way; "
                "try again in a moment"
            )
        if record is None:
            record = self._remember(address or "")
        record.in_flight += 1
        return None

    def failed(self, address: str | None, where: str) -> None:
        """A wrong password from ``address`` on ``where`` (a port's name, for the log)."""
        now = self._clock()
        key = address or ""
        record = self._remember(key)
        record.in_flight = max(0, record.in_flight - 1)
        self.comparisons += 1
        self._forget(record)
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

    def succeeded(self, address: str | None) -> None:
        """A right password. It clears nothing (module docstring: an address may be shared
        with a guesser); a record left with nothing to remember is dropped."""
        key = address or ""
        self.comparisons += 1
        record = self._records.get(key)
        if record is None:
            return
        record.in_flight = max(0, record.in_flight - 1)
        self._forget(record)
        if not (record.failures or record.blocks or record.in_flight):
            del self._records[key]

    def _forget(self, record: _Record) -> None:
        """Drop what time has forgiven: wrong passwords ``failure_memory`` seconds old, the
        escalation ``escalation_memory`` seconds after the last block ended."""
        now = self._clock()
        if record.failures and now - record.seen >= self.failure_memory:
            record.failures = 0
        if record.blocks and now - record.until >= self.escalation_memory:
            record.blocks = 0

    def abandoned(self, address: str | None) -> None:
        """A comparison :meth:`admit` let in that never happened (the client left)."""
        record = self._records.get(address or "")
        if record is not None:
            record.in_flight = max(0, record.in_flight - 1)

    def refusal(self, address: str | None) -> str | None:
        """Why ``address`` may not try now (it is blocked: for how long), or None."""
        seconds = self.blocked(address)
        if seconds <= 0:
            return None
        return (
            f"too many wrong passwords from {address or 'this address'}: blocked for "
            f"{math.ceil(seconds)} s more, the right password too; try again then (check the "
            "password: UNIVERSE_REMOTE_PASSWORD on the remote)"
        )

    def _remember(self, key: str) -> _Record:
        """``key``'s record, made the newest (the oldest go first past MAX_TRACKED)."""
        record = self._records.pop(key, None) or _Record()
        self._records[key] = record
        while len(self._records) > MAX_TRACKED:
            del self._records[next(iter(self._records))]
        return record
