"""A remote's error exit and recovery: failures never wedge it.

Holds :class:`Recovery` (a part of :class:`envserver.remote.Remote`) and
:class:`Progress`. Anything that raises between a reset's or a step's event and its
completion (the runtime in reset, step, advance or an env switch; the frame's hand-off
to shared memory or VNC; a send) gives the requester a :class:`~envserver.orders.Refused`
and moves the remote by the state table's error exit
(:meth:`~envserver.state.RemoteState.process_error`): to ``recovering`` once something
changed, else back where it was. Recovering resets the runtime with backoff; after
:data:`MAX_RUNTIME_FAILURES` failures in a row :attr:`Remote.failed` resolves and
``serve`` exits non-zero, so a supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Final

from .orders import Refused
from .remote_base import RemoteBase, log
from .state import Event, State

#: Seconds before retrying a recovery reset that failed, doubling up to the max.
RECOVER_DELAY: Final = 0.5
MAX_RECOVER_DELAY: Final = 8.0
#: Runtime failures in a row (no good frame in between) before the remote gives up and
#: ``serve`` exits non-zero, so a supervisor restarts it instead of a dead game being served.
MAX_RUNTIME_FAILURES: Final = 5


@dataclasses.dataclass(slots=True)
class Progress:
    """How far a reset or step under way got: the state its event moved the remote to,
    what it is doing, and whether anything has changed (frames drawn, an episode begun)
    that a failure now cannot take back."""

    state: State
    what: str
    changed: bool
    #: The env a failure now is of, when not the runtime's (an env switch: the one it goes to).
    env_id: str | None = None


class Recovery(RemoteBase):
    """The error exit of resets and steps under way, and recovery from a failed runtime."""

    def _under_way_failed(self, progress: Progress, exc: BaseException) -> BaseException:
        """``exc`` raised between the event that began a reset or a step and the one that
        completes it (the runtime, a hand-off, a send): take the machine out by its error
        exit (``recovering`` once ``progress.changed``, else back) and return what to
        raise — a :class:`Refused` for the requester (caused by ``exc``), or ``exc``
        itself for a cancellation (a dm_env_rpc deadline), which takes the same exit.
        (A try/except at each site, not a context manager: cheaper on the step's path,
        ``python -m benchmarks atari_breakdown``.)"""
        if self.state is not progress.state:  # shutting down meanwhile: nothing to take out
            return exc
        if not isinstance(exc, Exception):
            log.warning("%s of %s cancelled under way (%r)", progress.what, self.env_id, exc)
            if progress.changed:
                self._fail()
            else:
                self._error_exit(changed=False)
            return exc
        failure = self._failed(progress, exc)
        failure.__cause__ = exc
        return failure

    def _failed(self, progress: Progress, exc: Exception) -> Refused:
        """``exc`` raised while ``progress`` was under way: take the error exit and say so."""
        said = exc.reason if isinstance(exc, Refused) else (
            f"{progress.env_id or self.runtime.env_id} failed in {progress.what} "
            f"({type(exc).__name__}: {exc})"
        )
        if not progress.changed:
            log.warning("%s (nothing had changed: back to %s)", said, self.mode)
            self._error_exit(changed=False)
            return Refused(f"{said}; nothing changed: send it again")
        log.error("%s", said, exc_info=exc)
        self._fail()
        return Refused(
            f"{said}; the remote is recovering: wait for describe env_state 'running', then "
            "reset"
        )

    def _runtime_failed(self, what: str, exc: Exception) -> None:
        """The runtime raised in a tick: start recovering."""
        log.error("runtime %s failed in %s: %r", self.runtime.env_id, what, exc, exc_info=exc)
        self._fail()

    def _fail(self) -> None:
        self.runtime_failures += 1
        self._error_exit(changed=True)
        if self.state is State.RECOVERING and (self._recovery is None or self._recovery.done()):
            self._recovery = asyncio.get_running_loop().create_task(self._recover())
        self.rewarder.broadcast_describe()

    def _error_exit(self, changed: bool) -> None:
        self._moved(self.machine.process_error(changed))

    async def _recover(self) -> None:
        """Reset the runtime with backoff until it works again, or give up past
        :data:`MAX_RUNTIME_FAILURES` failures in a row."""
        delay = RECOVER_DELAY
        while self.state is State.RECOVERING:
            if self.runtime_failures >= MAX_RUNTIME_FAILURES:
                reason = (
                    f"{self.runtime.env_id} failed {self.runtime_failures} times in a row "
                    "(MAX_RUNTIME_FAILURES); giving up so a supervisor can restart the remote"
                )
                log.error("%s", reason)
                self._fire(Event.SHUTDOWN)
                if self._ticker is not None:
                    self._ticker.discard(self)
                if not self.failed.done():
                    self.failed.set_result(reason)
                return
            try:
                await self._begin_episode(seed=None)
            except Exception as exc:
                self.runtime_failures += 1
                log.error("resetting %s failed (%r); again in %.1f s", self.runtime.env_id, exc,
                          delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RECOVER_DELAY)
            else:
                self._fire(Event.RECOVERED)
                self.rewarder.broadcast_describe()
