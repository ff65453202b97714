"""The stepping core: n remotes stepped together.

Holds :class:`Stepper`, what every gymnasium env drives (``RemoteEnv`` is a one-wide
view of it, ``RemoteVectorEnv`` an n-wide one, ``RemoteParallelEnv`` one slot per
player), and re-exports :class:`~remotes.lane.Batch` (what a reset or step hands the
agent's thread: fresh objects nobody touches again). A stepper composes a
:class:`~remotes.lane.Lane` (the slots, settings and batch) and the strategies that work
on it, each given what it uses: :class:`~remotes.lockstep.LockstepSteps` (lockstep, in
the agent's thread), :class:`~remotes.realtime.RealtimeSteps` (real time, on the loop
thread), :class:`~remotes.faults.Faults` (what happens when a remote fails) and
:class:`~remotes.web.WebSteps` (pages and action strings). Its methods are called from
the agent's thread (the thread rule is in :mod:`remotes.loop`).

**Episodes.** gymnasium's autoreset: the step after ``terminated``/``truncated`` for a
remote (``NEXT_STEP``), or the same step (``SAME_STEP``), returns the new episode's
first frame — checked by its tag to belong to the new episode — with reward 0. In real
time the remote starts that episode by itself after ``done``; after a truncation (the
step limit) and in lockstep the step sends a reset. A step never returns a frame of
another episode than the one its info names: an episode's last step returns its last
frame if it was still shown, else the newest one of it the env saw. Every reset and step
gives ``info["instruction"]``, the latest text of the episode its info names (slot.py).

**Faults.** A remote whose connection drops, whose frames stop advancing for
``stall_timeout`` seconds, or whose active slot another env of this process took,
ends its episode: that step returns ``truncated=True`` with ``info["remote.error"]``
saying why, and the rewards it had sent. It is reconnected in the background: probed
every :data:`RECONNECT_POLL` seconds, connected and reset as soon as it greets — in
lockstep by the step that finds it greeting, in the agent's thread — (never when it was
replaced: ``reset()`` takes it back). If it is back by the next step, that
step is its autoreset step (``info["remote.reconnected"]``); if not, its slot idles —
its last frame, reward 0, ``info["remote.connected"] = False`` — and the step that
finds it back returns ``truncated=True`` (``info["remote.back"]``) to end the idle
stretch, so the step after is an ordinary autoreset step. A remote whose frames have
not advanced for ``stall_frames`` frame periods is flagged ``info["remote.stalled"]``
before that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rewarder.protocol import LOCKSTEP

from .arrivals import Arrivals
from .faults import RECONNECT_POLL, STALL_FRAMES, STALL_TIMEOUT, Faults
from .lane import DEFAULT_FPS, Batch, Lane
from .lockstep import LockstepSteps
from .loop import LoopThread, shared_loop
from .options import EnvOptions
from .realtime import PAIRING_FRAMES, WAIT_SLACK_FRAMES, RealtimeSteps
from .session import RemoteSession, RemoteSnapshot
from .slot import Slot
from .slot_state import Phase, SlotEvent
from .web import WebSteps

__all__ = [
    "DEFAULT_FPS", "PAIRING_FRAMES", "RECONNECT_POLL", "STALL_FRAMES", "STALL_TIMEOUT",
    "WAIT_SLACK_FRAMES", "Batch", "Stepper",
]


class Stepper:
    """Steps ``sessions`` together as ``options`` say (:class:`~remotes.options.EnvOptions`;
    ``fps`` None: the first remote's describe), from the agent's thread: lockstep there,
    real time on ``loop``'s thread."""

    def __init__(
        self, sessions: Sequence[RemoteSession], options: EnvOptions, loop: LoopThread | None = None
    ) -> None:
        self.lane = lane = Lane(sessions, options, loop or shared_loop())
        self.faults = Faults(lane)
        #: Page observations, action strings, settling steps (remotes.web), if asked for.
        self.web = WebSteps(lane) if options.web else None
        if self.web is not None:
            lane.annotate = self.web.annotate
        self._lockstep = LockstepSteps(lane, self.faults, self.web)
        self._realtime = RealtimeSteps(lane, self.faults, self.web)

    @property
    def options(self) -> EnvOptions:
        return self.lane.options

    @property
    def sessions(self) -> list[RemoteSession]:
        return self.lane.sessions

    @property
    def slots(self) -> list[Slot]:
        return self.lane.slots

    @property
    def loop(self) -> LoopThread:
        """The loop thread the sockets of real-time steps, VNC clients and probes live on."""
        return self.lane.loop

    @property
    def num(self) -> int:
        return self.lane.num

    @property
    def fps(self) -> float:
        return self.lane.fps

    @property
    def mode(self) -> str:
        return self.lane.mode

    @property
    def frames(self) -> np.ndarray | None:
        return self.lane.frames

    @property
    def closed(self) -> bool:
        return self.lane.closed

    # Connecting ---------------------------------------------------------------------------

    def connect(self, timeout: float) -> tuple[RemoteSnapshot, ...]:
        """Connect every remote (lockstep: from this thread; real time: on the loop
        thread, giving up after ``timeout``); raise :class:`RemoteUnavailable` naming
        those that did not answer (after closing the others)."""
        if self.mode != LOCKSTEP:
            return self.loop.run(self._realtime.connect(), timeout)
        self._lockstep.connect()
        try:
            self.lane.configure()
        except ValueError:
            self._lockstep.close()
            raise
        for slot in self.slots:
            slot.baseline(event=SlotEvent.CONNECT)
        return self.lane.states()

    async def snapshot(self) -> tuple[RemoteSnapshot, ...]:
        """Snapshots of every remote, as a coroutine (for ``LoopThread.run``)."""
        return self.lane.states()

    def close(self, timeout: float) -> None:
        """Stop reconnecting and close every session (idempotent; lockstep sessions from
        this thread, real-time ones on the loop thread, giving up after ``timeout``)."""
        self.lane.closed = True  # a flag: steps and resets refuse from now on
        if self.mode != LOCKSTEP:
            self.loop.run(self._realtime.close(), timeout)
            return
        for slot in self.slots:
            probe, slot.reconnect = slot.reconnect, None
            if probe is not None:
                probe.cancel()  # a concurrent future: cancels its task on the loop
        self._lockstep.close()

    # Episodes and steps --------------------------------------------------------------------

    def reset(
        self, seeds: Sequence[int | None], env_id: str | None = None
    ) -> tuple[Batch, tuple[RemoteSnapshot, ...]]:
        """Start a new episode on every remote (switching to ``env_id`` if given),
        reconnecting those that are away first (waiting up to ``start_timeout``).
        Lockstep runs in this thread, real time on the loop thread."""
        self._check_open()
        if self.mode != LOCKSTEP:
            return self.loop.run(self._realtime.reset(seeds, env_id))
        if self.web is not None:
            self.web.answers.clear()  # an interrupted step's
        infos = self._lockstep.reset(seeds, env_id)
        n = self.num
        no = np.zeros(n, bool)
        batch = self.lane.finish(np.zeros(n), no, no.copy(), infos, copy=False)
        return batch, self.lane.states()

    def step(
        self, actions: Sequence[Sequence[Any]], same_step: bool = False,
        active: Sequence[bool] | None = None,
    ) -> Batch:
        """One step of every remote (``actions[i]`` for remote i); see the module
        docstrings of :mod:`remotes.lockstep` and :mod:`remotes.realtime`.

        ``same_step``: a remote whose episode ends in this step is reset in it too.
        ``active`` (lockstep): only the remotes marked True step (the others are left as
        they are, their episodes ended or not: a PettingZoo game over waits for reset).
        """
        lane = self.lane  # (flat: this runs every step)
        if lane.closed:
            raise RuntimeError("the env is closed")
        if lane.mode == LOCKSTEP:
            return self._lockstep.step(actions, same_step, active)
        if active is not None:
            raise ValueError("active= is for lockstep steps")
        return self.loop.run(self._realtime.step(actions, same_step))

    def step_send(self, actions: Sequence[Sequence[Any]], same_step: bool = False) -> Any:
        """Lockstep: a step's first half, every request sent (:meth:`step_finish` ends it)."""
        self._check_open()
        if self.mode != LOCKSTEP:
            raise ValueError("step_async() needs lockstep (mode='lockstep'): in real time a step "
                             "waits for frames that come whether or not anyone asks")
        return self._lockstep.send(actions, same_step, None)

    def arrivals(self, batch_size: int) -> Arrivals:
        """Lockstep: ``send``/``recv`` returning ``batch_size`` results each (remotes.arrivals)."""
        self._check_lockstep("send/recv with batch_size")
        return Arrivals(self._lockstep, batch_size)

    def step_finish(self, sent: Any) -> Batch:
        """Lockstep: the replies of :meth:`step_send`'s requests read, the batch made."""
        self._check_open()
        return self._lockstep.finish(sent)

    def save_state(self, index: int, export: bool = False) -> Any:
        """Lockstep: remote ``index``'s :class:`~rewarder.snapshot_messages.SnapshotReply`."""
        self._check_lockstep("snapshots")
        channel = self.sessions[index].lockstep_channel
        if channel is None:
            raise RuntimeError(f"{self.sessions[index].name} is not connected")
        return channel.snapshot(export)

    def check_running(self, index: int, what: str) -> None:
        """Lockstep: ValueError unless remote ``index`` is running its episode. After its
        end (or its loss) the next step starts a new one (autoreset) and drops its
        action: a state of the ended episode would not replay what comes next."""
        self._check_lockstep("snapshots")
        phase = self.slots[index].phase
        if phase is not Phase.RUNNING:
            how = "was cut off (its remote is away)" if phase is Phase.AWAY else "ended"
            raise ValueError(
                f"{what} {how} in the last step, and the next step starts a new one "
                "(autoreset): a state taken now would not replay that; clone before the end "
                "or after that step"
            )

    def restore_states(self, states: dict[int, tuple[str | None, bytes | None]]) -> dict[int, dict[str, Any]]:
        """Lockstep: restore remotes by index (token or bytes); their infos, frames in
        :attr:`frames` (remotes.lockstep)."""
        self._check_lockstep("restores")
        return self._lockstep.restore(states)

    def _check_lockstep(self, what: str) -> None:
        self._check_open()
        if self.mode != LOCKSTEP:
            raise ValueError(
                f"{what} from a gymnasium env need lockstep (mode='lockstep'): in real time "
                "the remote moves on meanwhile; use RewarderClient.snapshot/restore there"
            )

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the env is closed")
