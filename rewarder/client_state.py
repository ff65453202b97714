"""What either rewarder client tells about itself: :class:`ClientState`.

The asyncio client (:class:`~.client.RewarderClient`, real time) and the blocking one
(:class:`~.blocking.BlockingRewarder`, lockstep) keep the same state — the episode's
reward buffer, the last describe, why the connection ended, round trip and clock skew —
and show it through these read-only properties, so code that reads a session's rewarder
reads either.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import RewarderError
from .protocol import Describe, Observation
from .reward_buffer import RewardBuffer


class ClientState:
    """The state both rewarder clients keep, and its read-only view."""

    def __init__(self, buffer: RewardBuffer) -> None:
        #: Where rewards go (``pop``/``peek`` read it).
        self.buffer = buffer
        self._describe: Describe | None = None
        self._failure: RewarderError | None = None
        self._closed = False
        self._rtt: float | None = None
        self._skew: tuple[float, float] | None = None
        #: Called with every ``v0.env.observation`` as it is filed (where the client reads:
        #: the loop thread for the asyncio client, whoever reads the blocking one); one
        #: listener, e.g. a browser env's page tap (remotes.web).
        self.on_observation: Callable[[Observation], None] | None = None

    def heard(self, event: Observation) -> None:
        """Hand an observation to :attr:`on_observation` (the shells call this)."""
        listener = self.on_observation
        if listener is not None:
            listener(event)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def error(self) -> RewarderError | None:
        """Why the client stopped (refused, dropped, timed out), or None."""
        return self._failure

    @property
    def episode_id(self) -> int | None:
        """The episode ``pop`` reports on (None before the first reset)."""
        return self.buffer.episode_id

    @property
    def describe(self) -> Describe | None:
        """The last ``v0.env.describe`` of the current connection."""
        return self._describe

    @property
    def rtt(self) -> float | None:
        """Round trip of the latest ping, in seconds (None before the first)."""
        return self._rtt

    @property
    def clock_skew(self) -> tuple[float, float] | None:
        """Bounds ``(lo, hi)`` on server clock minus local clock, in seconds.

        Each ping bounds it by ``[reply.sent_at - received_at, reply.sent_at -
        request_sent_at]``; calibration intersects several of them.
        ``server_time - hi <= local_time <= server_time - lo``.
        """
        return self._skew
