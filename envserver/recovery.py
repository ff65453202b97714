"""A remote's recovery: a failed runtime never wedges it.

Holds :class:`Recovery` (a part of a remote, holding its game core) and
:class:`Recoverable` (what it uses of the core). The core's error exit
(:meth:`envserver.game_core.GameCore.under_way_failed`) moves the remote to
``recovering`` when a reset, step or tick failed after something changed, and tells its
fault sinks; this part is one: it counts the failures in a row and resets the runtime
with backoff until it works again. After :data:`MAX_RUNTIME_FAILURES` failures with no
good frame in between :attr:`Recovery.failed` resolves and ``serve`` exits non-zero, so a
supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from .state import Event, State

if TYPE_CHECKING:
    from rewarder.server import RewarderServer

log = logging.getLogger("envserver.remote")

#: Seconds before retrying a recovery reset that failed, doubling up to the max.
RECOVER_DELAY: Final = 0.5
MAX_RECOVER_DELAY: Final = 8.0
#: Runtime failures in a row (no good frame in between) before the remote gives up and
#: ``serve`` exits non-zero, so a supervisor restarts it instead of a dead game being served.
MAX_RUNTIME_FAILURES: Final = 5


class Recoverable(Protocol):
    """What :class:`Recovery` uses of the game core (:class:`envserver.game_core.GameCore`)."""

    frame: int
    fault_sinks: list[Callable[[], None]]

    @property
    def state(self) -> State: ...
    @property
    def env_id(self) -> str: ...
    @property
    def rewarder(self) -> RewarderServer: ...
    def fire(self, event: Event) -> State: ...
    def shut_down(self) -> None: ...
    async def begin_episode(self, seed: int | None) -> None: ...


class Recovery:
    """Counts a core's failures in a row and resets its runtime with backoff, or gives up."""

    #: Resolves with the reason when the runtime failed past recovery (made in :meth:`start`).
    failed: asyncio.Future[str]

    def __init__(self, core: Recoverable) -> None:
        self.core = core
        #: Runtime failures in a row: a frame drawn since the last one starts again at 1.
        self.failures = 0
        self._failed_at_frame = -1
        self._task: asyncio.Task[None] | None = None
        core.fault_sinks.append(self.faulted)

    def start(self) -> None:
        """Make :attr:`failed` (on the running loop) before the core starts."""
        self.failed = asyncio.get_running_loop().create_future()

    def tasks(self) -> list[asyncio.Task[None]]:
        """The recovery under way, to cancel on close."""
        return [self._task] if self._task is not None else []

    def faulted(self) -> None:
        """The core's error exit moved it on a failure: count it; recover if it is
        ``recovering`` and no recovery is under way."""
        core = self.core
        if core.frame != self._failed_at_frame:  # a good frame since the last failure
            self.failures = 0
        self._failed_at_frame = core.frame
        self.failures += 1
        if core.state is State.RECOVERING and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        """Reset the runtime with backoff until it works again, or give up past
        :data:`MAX_RUNTIME_FAILURES` failures in a row."""
        core = self.core
        delay = RECOVER_DELAY
        while core.state is State.RECOVERING:
            if self.failures >= MAX_RUNTIME_FAILURES:
                reason = (
                    f"{core.env_id} failed {self.failures} times in a row "
                    "(MAX_RUNTIME_FAILURES); giving up so a supervisor can restart the remote"
                )
                log.error("%s", reason)
                core.shut_down()
                if not self.failed.done():
                    self.failed.set_result(reason)
                return
            try:
                await core.begin_episode(seed=None)
            except Exception as exc:
                self.failures += 1
                log.error("resetting %s failed (%r); again in %.1f s", core.env_id, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RECOVER_DELAY)
            else:
                core.fire(Event.RECOVERED)
                core.rewarder.broadcast_describe()
