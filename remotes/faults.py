"""What the stepping core does when a remote fails: stalls, drops, replacements, and
bringing it back.

Holds the limits (:data:`STALL_FRAMES`, :data:`STALL_TIMEOUT`, :data:`RECONNECT_POLL`,
...) and :class:`Faults`, the stepping core's collaborator that decides
a remote is lost, ends its episode with the reason, idles its slot and reconnects it in
the background (the module docstring of :mod:`remotes.stepper` says what an agent
sees). Real time on the loop thread; lockstep in the stepping thread, where a lost
remote is closed, while the loop thread only probes it until it answers
(:meth:`Faults.reconnect_later`) and the step that finds it answering connects it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from rewarder.protocol import HEARTBEAT_INTERVAL, LOCKSTEP
from rewarder.reward_buffer import ARTIFICIAL_DONE, DISCONNECTED, EpisodeResult

from .group import Unplaced
from .listening import answers
from .session import RemoteSession, RemoteUnavailable
from .slot import Slot
from .slot_state import Phase, SlotEvent, fire

if TYPE_CHECKING:
    from .lane_view import LaneView as Lane

log = logging.getLogger(__name__)

#: Frame periods without a new frame before a step flags ``info["remote.stalled"]``: a
#: busy remote skips a frame or two (it catches up at most 2), never half a second.
STALL_FRAMES: Final = 30
#: Seconds without a new frame before the episode is truncated and the remote
#: reconnected: a hung, stopped or starved remote, not a hiccup (a runtime reset or a
#: loaded machine stays far below). Lockstep: seconds a step may wait for its reply.
STALL_TIMEOUT: Final = 10.0
#: Seconds between probes of a dropped remote: it is reconnected within about this much
#: of greeting again (the goal is 1 s).
RECONNECT_POLL: Final = 0.1
#: Seconds one reconnection (both channels, clock calibration, reset) may take once the
#: remote greets; past it, probing resumes.
RECONNECT_ATTEMPT_TIMEOUT: Final = 10.0
#: Seconds a step whose VNC connection dropped waits for the rewarder's to drop too, so
#: the rewards the remote sent before it died are read and returned, not lost.
DRAIN_TIMEOUT: Final = 0.25
#: A remote without frame tags (Xvnc) shows progress only by messages: it is stalled
#: when its rewarder has been silent for two heartbeats and a second.
TAGLESS_STALL_SECONDS: Final = 2 * HEARTBEAT_INTERVAL + 1.0


class Faults:
    """Fault handling for ``lane``'s slots: whether a remote is lost, ending its episode
    with the reason, idling its slot and bringing it back. It reads the lane's settings
    and copies frames into its batch; the steps ask it at each step."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane

    async def come_back(self, slot: Slot) -> None:
        """Real time: wait (up to ``start_timeout``) for an away slot's reconnection, or
        connect it (lockstep: remotes.lockstep's ``come_back``)."""
        task, slot.reconnect = slot.reconnect, None
        assert not isinstance(task, Future), "a lockstep slot comes back in the stepping thread"
        if task is not None and not task.done():
            try:
                async with asyncio.timeout(self.lane.start_timeout):
                    await asyncio.shield(task)
            except TimeoutError:
                slot.reconnect = task  # it goes on trying
                raise RemoteUnavailable(
                    slot.session.name,
                    f"did not come back within start_timeout={self.lane.start_timeout:g} s "
                    f"(last error: {slot.error})",
                ) from None
        session = slot.session
        if not came_back(task) or not session.connected or session.replaced:
            if not await relocate(session):
                raise RemoteUnavailable(session.name, f"has no remote to connect to ({slot.error})")
            await session.connect()

    def stalled(self, slot: Slot, now: float) -> bool:
        """No new frame for ``stall_frames`` periods (without tags: no message for
        :data:`TAGLESS_STALL_SECONDS`, and only from remotes that send heartbeats)."""
        return now - self._progress(slot, now) > self._stall_after(slot)

    def _stall_after(self, slot: Slot) -> float:
        if slot.tags:
            return self.lane.stall_frames / self.lane.fps
        return TAGLESS_STALL_SECONDS

    def _progress(self, slot: Slot, now: float) -> float:
        """When the slot last showed life (frames, or without tags, any message)."""
        session = slot.session
        vnc = session.vnc
        if slot.tags and vnc is not None and vnc.on_demand:
            # frames come when a step asks: silence counts only while a request is out
            asked = vnc.asked_at
            return now if asked is None else max(slot.progress_at, asked)
        if not slot.tags:
            if not slot.heartbeats:
                return now  # a foreign remote: a still screen is no sign of trouble
            vnc, rewarder = session.vnc, session.rewarder
            activity = (vnc.updates if vnc is not None else 0) + (
                rewarder.stats.messages if rewarder is not None else 0
            )
            if activity != slot.activity:
                slot.activity = activity
                slot.progress_at = now
        return slot.progress_at

    def lost_reason(self, slot: Slot, now: float) -> str | None:
        """Why the slot cannot step any more, or None."""
        session = slot.session
        if session.replaced:
            return (
                "another env of this process connected to this remote and took its active "
                "slot (one agent per remote); this env's reset() takes it back"
            )
        if not session.connected:
            return session.error or "connection lost"
        if self.lane.mode == LOCKSTEP:
            return None  # each step's reply has its own deadline (remotes.lockstep)
        silent = now - self._progress(slot, now)
        if silent > max(self.lane.stall_timeout, self._stall_after(slot)):
            return (
                f"stalled: no new frame for {silent:.1f} s (stall_timeout={self.lane.stall_timeout:g} s); "
                "the remote is hung, stopped or starved of CPU; reconnecting"
            )
        return None

    async def lose_draining(
        self, slot: Slot, reason: str, rewards: np.ndarray, terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> dict[str, Any]:
        """:meth:`_lose`, after letting a dying remote's rewarder deliver what it sent."""
        session = slot.session
        rewarder, vnc = session.rewarder, session.vnc
        if rewarder is not None and rewarder.connected and vnc is not None and not vnc.connected:
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while rewarder.connected and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        return self.lose(slot, reason, rewards, truncated, terminated)

    def lose(
        self, slot: Slot, reason: str, rewards: np.ndarray | None, truncated: np.ndarray | None,
        terminated: np.ndarray | None = None, result: EpisodeResult | None = None,
    ) -> dict[str, Any]:
        """End the slot's episode here (its last rewards included: ``result``, or popped
        now) and start bringing the remote back; the info of this step."""
        i, session = slot.index, slot.session
        if session.on_lost is not None:
            reason = session.on_lost(reason)
        if result is None and slot.phase is Phase.RUNNING:
            result = session.pop()
        info: dict[str, Any] = dict(result.info) if result is not None else {}
        if result is not None:
            if rewards is not None:
                rewards[i] = result.reward
            done = result.done and not info.get(ARTIFICIAL_DONE) and not info.get(DISCONNECTED)
            if terminated is not None and done:
                terminated[i] = True
            elif truncated is not None:
                truncated[i] = True
            info["episode_id"] = result.episode_id
        elif truncated is not None:
            truncated[i] = True
        info.update({"remote.connected": False, "remote.error": reason, "remote.name": session.name})
        if self.lane.mode != LOCKSTEP:
            info["remote.stalled"] = reason.startswith("stalled")
        log.warning("remote %s: %s", session.name, reason)
        fire(slot, SlotEvent.LOST)
        slot.error = reason
        slot.away_steps = 0
        slot.target = None
        slot.pending = slot.reply = None
        if session.lockstep:  # in the stepping thread: closed here, probed on the loop
            session.close_here(self.lane.loop, wait=False)
            if not self.lane.closed:
                self.reconnect_later(slot)
        elif not self.lane.closed:
            slot.reconnect = asyncio.get_running_loop().create_task(
                self._reconnect(slot), name=f"reconnect {session.name}"
            )
        return info

    def reconnect_later(self, slot: Slot) -> None:
        """Lockstep: probe the slot's remote on the loop thread until it answers (or was
        replaced); the step that finds it answering connects it (remotes.lockstep)."""
        slot.reconnect = self.lane.loop.submit(self._probe(slot))

    def answering(self, slot: Slot) -> bool:
        """Lockstep: whether the probe of an away slot's remote found it answering."""
        return came_back(slot.reconnect)

    async def _probe(self, slot: Slot) -> bool:
        """Every :data:`RECONNECT_POLL` s, whether the remote greets (where it is now);
        False at once for a session another env replaced (its ``reset()`` takes it back)."""
        session = slot.session
        while not session.replaced:
            if await relocate(session) and await answers(session.address):
                return True
            await asyncio.sleep(RECONNECT_POLL)
        return False

    def away(self, slot: Slot, truncated: np.ndarray | None) -> dict[str, Any]:
        """A step of a slot that is away: idle, or back (see the module docstring)."""
        back = came_back(slot.reconnect)
        if back and slot.away_steps == 0 and not self.lane.same_step:
            slot.reconnect = None
            slot.baseline(event=SlotEvent.BACK)
            self.lane.copy_frame(slot)
            info: dict[str, Any] = {
                "episode_id": slot.session.rewarder.episode_id if slot.session.rewarder else None,
                "remote.connected": True, "remote.reconnected": True, "remote.name": slot.session.name,
            }
            if slot.returned is not None:
                info["frame"] = slot.returned
            log.info("remote %s is back", slot.session.name)
            return info
        if back:
            slot.away_steps = 0
            if truncated is not None:
                truncated[slot.index] = True
            return {"remote.connected": False, "remote.back": True}
        slot.away_steps += 1
        info = {"remote.connected": False, "remote.error": slot.error}
        if self.lane.mode != LOCKSTEP:
            info["remote.stalled"] = False
        return info

    async def _reconnect(self, slot: Slot) -> bool:
        """Close the lost connection, then probe every :data:`RECONNECT_POLL` s; once the
        remote greets, connect and reset it (its frame clock starts over). True once back;
        False at once for a session another env replaced (its ``reset()`` takes it back)."""
        session = slot.session
        if session.replaced:
            await session.close()
            return False
        # Closing a stalled remote's rewarder waits for a close handshake it never gets:
        # let that run alongside the probes (close() drops the clients at once).
        closing = asyncio.get_running_loop().create_task(session.close())
        try:
            while True:
                if await relocate(session) and await answers(session.address):
                    try:
                        async with asyncio.timeout(RECONNECT_ATTEMPT_TIMEOUT):
                            await session.connect(start_timeout=RECONNECT_ATTEMPT_TIMEOUT)
                            self.check_size(session)
                            await session.reset(
                                env_id=self.lane.env_id, seed=slot.next_seed(), fps=self.lane.requested_fps,
                                mode=session.mode_request(self.lane.mode),
                            )
                        return True
                    except (RemoteUnavailable, TimeoutError, ValueError) as exc:
                        slot.error = f"reconnecting: {error_text(exc)}"
                        log.info("remote %s: %s", session.name, slot.error)
                        await session.close()
                await asyncio.sleep(RECONNECT_POLL)
        finally:
            await asyncio.gather(closing, return_exceptions=True)

    def check_size(self, session: RemoteSession) -> None:
        """Refuse (ValueError) a remote that came back with another screen size."""
        frames = self.lane.frames
        width, height = session.screen_size
        if frames is not None and frames.shape[1:3] != (height, width):
            raise ValueError(
                f"the screen is now {width}x{height}, not {frames.shape[2]}x{frames.shape[1]}: "
                "the remote serves another env; make a new env for it"
            )


async def relocate(session: RemoteSession) -> bool:
    """Point a dropped session at where its remote is now, if it can move (a restarted
    Ray actor serves on another node or other ports, a pool lease was replaced); a failed
    answer keeps the old one. False when the remote has no place now
    (:class:`~remotes.group.Unplaced`: its pool lease ended): then dial nothing."""
    if session.locate is None:
        return True
    try:
        address = await session.locate()
    except Unplaced as exc:
        log.info("remote %s: %s", session.name, exc)
        return False
    except Exception as exc:  # the group could not say (yet): probe the old address
        log.debug("remote %s: where is it now? %s", session.name, exc)
        return True
    if address != session.address:
        log.info("remote %s is now at %s", session.name, address)
        session.move(address)
    return True


def came_back(task: asyncio.Task[bool] | Future[bool] | None) -> bool:
    """Whether a slot's reconnect task brought its remote back."""
    return (
        task is not None and task.done() and not task.cancelled()
        and task.exception() is None and task.result()
    )


def error_text(exc: BaseException, timeout: float | None = None) -> str:
    """A lost step's ``info["remote.error"]``: what happened, once (``remote.name`` and
    the log line name the remote; the connect-time hint would mislead mid-episode)."""
    if isinstance(exc, TimeoutError) and timeout is not None:
        return f"stalled: no reply within stall_timeout={timeout:g} s; reconnecting"
    if isinstance(exc, RemoteUnavailable):
        return exc.problem
    return str(exc) or type(exc).__name__
