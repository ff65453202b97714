"""What every part of a remote shares: its fields, its state machine's moves, its clock.

Holds :class:`RemoteBase`. :class:`envserver.remote.Remote` is assembled from one part
per job, each a module of its own that a newcomer reads in one sitting:

- :mod:`envserver.remote` — composition and lifecycle (ports, start, close, describe);
- :mod:`envserver.episodes` — episodes: resets, the lockstep step (its synchronous core
  and the sliced wrapper for long steps), the real-time tick;
- :mod:`envserver.recovery` — the error exit and recovery with backoff;
- :mod:`envserver.acting` — input, action strings, properties, who drives what;
- :mod:`envserver.rewarder_front` — the rewarder's view of the remote (wire <-> orders).

This base declares the fields the parts read and write (set in ``Remote.__init__``) and
the few moves all of them make: fire an event of the state table (its refusal a
:class:`~envserver.orders.Refused`), wake who waits on the state, follow the clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rewarder.lograte import RateLimitedLog
from rewarder.protocol import MAX_FPS, MIN_FPS
from runtimes.base import Runtime, StepResult

from .inputs import Inputs
from .lockstep_frames import LockstepFrames
from .orders import REALTIME, Refused
from .properties import Properties
from .state import Event, IllegalTransition, RemoteState, State
from .ticker import Ticker

if TYPE_CHECKING:
    from rewarder.server import RewarderServer
    from vncdriver.server import VNCServer

    from .players import Seats

log = logging.getLogger("envserver.remote")


class RemoteBase:
    """The fields and shared moves of a remote (see the module docstring for its parts)."""

    runtime: Runtime
    runtime_options: dict[str, Any]
    fps: float
    machine: RemoteState
    episode_id: int
    #: Frames drawn since the remote started; never goes back.
    frame: int
    episode_frame: int
    late_ticks: int
    #: Runtime failures in a row; a good frame sets it back to 0.
    runtime_failures: int
    inputs: Inputs
    seats: Seats
    rewarder: RewarderServer
    vnc: VNCServer
    lockstep_frames: LockstepFrames
    property_table: Properties
    result_sinks: list[Callable[[int, StepResult], None]]
    episode_sinks: list[Callable[[int, int, str | None], None]]
    leave_sinks: list[Callable[[int], None]]
    #: Resolves with the reason when the runtime failed past recovery (set in start).
    failed: asyncio.Future[str]
    _notes: RateLimitedLog
    _ticker: Ticker | None
    _seeds: np.random.Generator
    _state_waiters: list[asyncio.Future[State]]
    _frame_waiters: list[asyncio.Future[int]]
    _recovery: asyncio.Task[None] | None

    @property
    def state(self) -> State:
        return self.machine.state

    @property
    def mode(self) -> str:
        return self.machine.mode

    @property
    def env_id(self) -> str:
        return self.runtime.env_id

    @property
    def players(self) -> int:
        return int(self.runtime.players)

    def screen(self) -> np.ndarray:
        """The runtime's screen as drawn last (read it before the next frame is drawn)."""
        return self.runtime.framebuffer

    def set_fps(self, fps: float) -> None:
        """Change the real-time rate now (the game loop does not finish a sleep at the old one)."""
        if not MIN_FPS <= fps <= MAX_FPS:
            raise ValueError(f"fps must be in [{MIN_FPS:g}, {MAX_FPS:g}], not {fps!r}")
        self.fps = float(fps)
        self._clock_changed()

    def _clock_changed(self) -> None:
        """The mode or fps changed: tick at the new fps in real time, not at all in
        lockstep (the loop stands still until a reset switches back)."""
        ticker = self._ticker
        if ticker is None or self.state is State.CLOSING:  # not started, or gone
            return
        if self.mode == REALTIME:
            ticker.add(self)
        else:
            ticker.discard(self)

    def _fire(self, event: Event) -> State:
        """Move the machine; an illegal event is the requester's :class:`Refused`."""
        try:
            state = self.machine.fire(event)
        except IllegalTransition as exc:
            raise Refused(str(exc)) from None
        self._moved(state)
        return state

    def _moved(self, state: State) -> None:
        if not self._state_waiters:
            return
        waiters, self._state_waiters = self._state_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(state)

    # Done by :class:`envserver.episodes.Episodes` (declared here for the other parts).

    async def _begin_episode(self, seed: int | None) -> None:
        """Move to a new episode id, tell everyone, and reset the runtime under ``seed``."""
        raise NotImplementedError

    def tick_due(self) -> None:
        """The ticker's call: one real-time frame (:class:`~envserver.ticker.Ticked`)."""
        raise NotImplementedError
