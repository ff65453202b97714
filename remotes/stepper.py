"""The stepping core: n remotes stepped together.

Holds :class:`Stepper` (what every gymnasium env drives: ``RemoteEnv`` is a one-wide
view of it, ``RemoteVectorEnv`` an n-wide one, ``RemoteParallelEnv`` one slot per
player), :class:`Batch` (what a reset or step hands the agent's thread) and the step's
timing limits; a remote's stepping state and the frame clock are in :mod:`remotes.slot`,
lockstep steps in :mod:`remotes.lockstep`, what happens when a remote fails in
:mod:`remotes.faults` (:class:`~remotes.faults.Faults`, a collaborator). :meth:`Stepper.step`
is called from the agent's thread: a lockstep step runs there, a real-time step on the
loop thread; resets, connecting and closing are coroutines the envs run on the loop
thread with :meth:`~remotes.loop.LoopThread.run`. A :class:`Batch` is built of fresh
objects nobody touches again (the thread rule is in :mod:`remotes.loop`).

**Real time.** A step sends each remote its events, then waits until each remote's VNC
shows the frame ``frameskip`` past the one it returned last — the remote's own frame
clock, read from the frame tags our VNC server sends (:class:`~remotes.slot.FrameGate`)
— and returns that frame of each remote, copied as it comes in (waiting for the slowest
remote skips no other remote's frame), with the rewards each episode earned since the
last step (a reward waits briefly for the frame that earned it). A remote that misses its
frame by :data:`WAIT_SLACK_FRAMES` periods returns its newest frame and holds no step up
until it moves again. An agent that comes late gets the newest frames
(``info["step.late"]``). Remotes that send no tags (Xvnc) are paced by our clock at fps.

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
every :data:`RECONNECT_POLL` seconds, connected and reset as soon as it greets (never
when it was replaced: ``reset()`` takes it back). If it is back by the next step, that
step is its autoreset step (``info["remote.reconnected"]``); if not, its slot idles —
its last frame, reward 0, ``info["remote.connected"] = False`` — and the step that
finds it back returns ``truncated=True`` (``info["remote.back"]``) to end the idle
stretch, so the step after is an ordinary autoreset step. A remote whose frames have
not advanced for ``stall_frames`` frame periods is flagged ``info["remote.stalled"]``
before that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import numpy as np

from rewarder.client import RewarderClient
from rewarder.errors import RewarderError
from rewarder.protocol import FRAME_INFO_KEY, LOCKSTEP
from rewarder.reward_buffer import ARTIFICIAL_DONE, DISCONNECTED
from vncdriver.errors import VNCError

from .faults import (
    RECONNECT_POLL,
    STALL_FRAMES,
    STALL_TIMEOUT,
    Faults,
    error_text,
)
from .lockstep import LockstepSteps
from .loop import LoopThread, shared_loop
from .options import EnvOptions
from .session import RESET_TIMEOUT, RemoteSession, RemoteSnapshot, RemoteUnavailable
from .slot import FrameGate, Phase, Slot, instruct
from .web import WebSteps

__all__ = [
    "DEFAULT_FPS", "PAIRING_FRAMES", "RECONNECT_POLL", "STALL_FRAMES", "STALL_TIMEOUT",
    "WAIT_SLACK_FRAMES", "Batch", "Stepper",
]

log = logging.getLogger(__name__)

#: Steps per second when neither the caller nor the remote's describe says.
DEFAULT_FPS: Final = 60.0
#: Frame periods a real-time step waits past a remote's target frame before it returns
#: that remote's newest frame: one period absorbs a busy machine's jitter without
#: letting one slow remote halve everyone's step rate.
WAIT_SLACK_FRAMES: Final = 1
#: Seconds a real-time step waits for the frame a reward names (rewarder and VNC travel
#: separately), in frame periods.
PAIRING_FRAMES: Final = 2


@dataclass(frozen=True, slots=True)
class Batch:
    """What one reset or step hands the agent's thread: fresh objects, its own.

    ``infos`` has one dict per remote. With ``SAME_STEP`` autoreset, ``final`` holds, for
    each remote whose episode ended in this step, ``(final observation, final info)``.
    """

    obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: tuple[dict[str, Any], ...]
    final: dict[int, tuple[np.ndarray, dict[str, Any]]] = field(default_factory=dict)


class Stepper:
    """Steps ``sessions`` together as ``options`` say (:class:`~remotes.options.EnvOptions`;
    ``fps`` None: the first remote's describe). :meth:`step` is called from the agent's
    thread; the coroutines run on ``loop``'s thread."""

    def __init__(
        self, sessions: Sequence[RemoteSession], options: EnvOptions, loop: LoopThread | None = None
    ) -> None:
        self.options = options
        self.sessions = list(sessions)
        self.mode, self.frameskip = options.mode, options.frameskip
        self.requested_fps = options.fps
        self.fps = float(options.fps or DEFAULT_FPS)
        self.env_id = options.env_id
        self.max_episode_steps = options.max_episode_steps
        self.start_timeout = options.start_timeout
        self.stall_frames = options.stall_frames
        self.stall_timeout = options.stall_timeout
        self.slots = [Slot(i, s) for i, s in enumerate(self.sessions)]
        self._gate = FrameGate(self.slots, hooks=self.mode != LOCKSTEP)
        #: The loop thread the sockets of real-time steps, resets and reconnects live on.
        self.loop = loop or shared_loop()
        self._lockstep = LockstepSteps(self)
        self.faults = Faults(self)
        #: Page observations, action strings, settling steps (remotes.web), if asked for.
        self.web = WebSteps(self) if options.web else None
        #: SAME_STEP autoreset in the step under way (a slot back from away then ends
        #: its idle stretch and starts its episode in the same step).
        self.same_step = False
        #: Wall time this step's actions went out (for ``latency.action_to_frame``).
        self._sent_at = 0.0
        self._next_at: float | None = None
        self.closed = False

    @property
    def num(self) -> int:
        return len(self.slots)

    @property
    def frames(self) -> np.ndarray | None:
        """The batch under construction (``[n, H, W, 3]``; the gate copies target frames
        into it as they come)."""
        return self._gate.frames

    @frames.setter
    def frames(self, frames: np.ndarray | None) -> None:
        self._gate.frames = frames

    # Connecting ---------------------------------------------------------------------------

    def connect(self, timeout: float) -> tuple[RemoteSnapshot, ...]:
        """From the agent's thread: connect every remote (lockstep: from this thread;
        real time: on the loop thread, giving up after ``timeout``); raise
        :class:`RemoteUnavailable` naming those that did not answer (after closing the
        others)."""
        if self.mode != LOCKSTEP:
            return self.loop.run(self._connect(), timeout)
        self._lockstep.connect()
        try:
            self.configure()
        except ValueError:
            self._lockstep.close()
            raise
        for slot in self.slots:
            slot.baseline()
        return self.states()

    async def _connect(self) -> tuple[RemoteSnapshot, ...]:
        results = await asyncio.gather(
            *(s.connect() for s in self.sessions), return_exceptions=True
        )
        failed = [(s, r) for s, r in zip(self.sessions, results, strict=True) if r is not None]
        if failed:
            await asyncio.gather(*(s.close() for s in self.sessions), return_exceptions=True)
            for _, error in failed:
                if not isinstance(error, Exception):
                    raise error  # a cancellation or an interrupt, as it came
            if len(failed) == 1 and self.num == 1:
                raise failed[0][1]
            raise RemoteUnavailable.several([e for _, e in failed], self.num)
        try:
            self.configure()
        except ValueError:
            await asyncio.gather(*(s.close() for s in self.sessions), return_exceptions=True)
            raise
        for slot in self.slots:
            slot.baseline()
        return self.states()

    def configure(self) -> None:
        """The fps and the batch's shape, from the remotes' describes (after a connect or
        a reset, which may switch the env)."""
        describe = self.sessions[0].describe_body()
        self.fps = float(self.requested_fps or describe.get("fps") or DEFAULT_FPS)
        sizes = {s.screen_size for s in self.sessions}
        if len(sizes) != 1:
            listed = ", ".join(f"{s.name}: {w}x{h}" for s in self.sessions for w, h in [s.screen_size])
            raise ValueError(f"remotes have different screen sizes ({listed}); use one env id")
        ((width, height),) = sizes
        if self.frames is None or self.frames.shape[1:3] != (height, width):
            self.frames = np.zeros((self.num, height, width, 3), np.uint8)

    def states(self) -> tuple[RemoteSnapshot, ...]:
        """Snapshots of every remote, for the agent's thread."""
        return tuple(s.state() for s in self.sessions)

    async def snapshot(self) -> tuple[RemoteSnapshot, ...]:
        """:meth:`states` as a coroutine (for ``LoopThread.run``)."""
        return self.states()

    def close(self, timeout: float) -> None:
        """From the agent's thread: stop reconnecting and close every session
        (idempotent; lockstep sessions from this thread, real-time ones on the loop
        thread, giving up after ``timeout``)."""
        self.closed = True
        probes = [s.reconnect for s in self.slots if s.reconnect is not None]
        for slot in self.slots:
            slot.reconnect = None
        if self.mode == LOCKSTEP:
            for probe in probes:
                probe.cancel()  # a concurrent future: cancels its task on the loop
            self._lockstep.close()
        else:
            self.loop.run(self._close(probes), timeout)

    async def _close(self, tasks: list[Any]) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.sessions), return_exceptions=True)

    # Resetting ------------------------------------------------------------------------------

    def reset(
        self, seeds: Sequence[int | None], env_id: str | None = None
    ) -> tuple[Batch, tuple[RemoteSnapshot, ...]]:
        """From the agent's thread: start a new episode on every remote (switching to
        ``env_id`` if given), reconnecting those that are away first (waiting up to
        ``start_timeout``). Lockstep runs in this thread, real time on the loop thread."""
        self._check_open()
        self._next_at = None
        if self.web is not None:
            self.web.answers.clear()  # an interrupted step's
        if self.mode != LOCKSTEP:
            return self.loop.run(self._reset(seeds, env_id))
        infos = self._lockstep.reset(seeds, env_id)
        self.instruct(infos)
        frames = self.frames
        assert frames is not None
        n = self.num
        batch = Batch(frames, np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), tuple(infos))
        return batch, self.states()

    async def _reset(
        self, seeds: Sequence[int | None], env_id: str | None = None
    ) -> tuple[Batch, tuple[RemoteSnapshot, ...]]:
        pairs = zip(self.slots, seeds, strict=True)
        results = await asyncio.gather(
            *(self._reset_slot(slot, seed, env_id, True) for slot, seed in pairs),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            for error in failed:
                if not isinstance(error, Exception):
                    raise error
            raise failed[0]
        self.configure()  # a reset may switch the env (env_id here or the stepper's)
        frames = self.frames
        assert frames is not None
        infos = []
        for slot, episode in zip(self.slots, results, strict=True):
            self.copy_frame(slot)
            info: dict[str, Any] = {"episode_id": episode}
            if slot.returned is not None:
                info["frame"] = slot.returned
            rewarder = slot.session.rewarder
            if rewarder is not None:  # the instruction a task sent with its reset
                info["text"] = list(rewarder.peek().text)
            infos.append(info)
        self.instruct(infos)
        n = self.num
        batch = Batch(frames.copy(), np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), tuple(infos))
        return batch, self.states()

    async def _reset_slot(
        self, slot: Slot, seed: int | None, env_id: str | None, explicit: bool
    ) -> int | None:
        """Real time: reset one remote (an explicit reset reconnects it first if away)."""
        session = slot.session
        if explicit:
            slot.rng = None if seed is None else np.random.default_rng(seed)
            if slot.phase is Phase.AWAY or not session.connected or session.replaced:
                await self.faults.come_back(slot)
        if self.web is not None:
            await self.web.before_reset(slot, explicit)
        reset = partial(session.reset, env_id=env_id or self.env_id, seed=seed,
                        fps=self.requested_fps, mode=session.mode_request(self.mode))
        episode = await reset()
        if self.web is not None and await self.web.after_reset(slot, episode):
            episode = await reset()  # a new env, observing now: its first page (remotes.web)
        slot.baseline(episode)  # its text came before the reply: the instruction is in
        slot.error = None
        return episode

    # Stepping ------------------------------------------------------------------------------

    def step(
        self, actions: Sequence[Sequence[Any]], same_step: bool = False,
        active: Sequence[bool] | None = None,
    ) -> Batch:
        """One step of every remote (``actions[i]`` for remote i), from the agent's
        thread; see the module docstring. Lockstep runs in this thread
        (:mod:`remotes.lockstep`), real time on the loop thread.

        ``same_step``: a remote whose episode ends in this step is reset in it too.
        ``active`` (lockstep): only the remotes marked True step (the others are left as
        they are, their episodes ended or not: a PettingZoo game over waits for reset).
        """
        self._check_open()
        if self.mode == LOCKSTEP:
            return self._lockstep.step(actions, same_step, active)
        if active is not None:
            raise ValueError("active= is for lockstep steps")
        return self.loop.run(self._step_realtime_batch(actions, same_step))

    def outcome(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """A step's rewards, terminated, truncated and infos, to fill in."""
        n = self.num
        return np.zeros(n, np.float64), np.zeros(n, bool), np.zeros(n, bool), [{} for _ in range(n)]

    async def _step_realtime_batch(self, actions: Sequence[Sequence[Any]], same_step: bool) -> Batch:
        rewards, terminated, truncated, infos = self.outcome()
        self.same_step = same_step
        self._sent_at = time.time()
        await self._step_realtime(actions, rewards, terminated, truncated, infos)
        return await self._finish(rewards, terminated, truncated, infos, same_step)

    def finish(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        infos: list[dict[str, Any]], final: dict[int, tuple[np.ndarray, dict[str, Any]]] | None = None,
    ) -> Batch:
        """A lockstep step's batch: :attr:`frames` is this step's own array, never written
        again (a lockstep step makes a new one each step), handed over without a copy."""
        self.instruct(infos)
        frames = self.frames
        assert frames is not None
        return Batch(frames, rewards, terminated, truncated, tuple(infos), final or {})

    async def _finish(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        infos: list[dict[str, Any]], same_step: bool,
    ) -> Batch:
        """The step's batch; with ``same_step``, each ended episode's next one started."""
        frames = self.frames
        assert frames is not None
        final: dict[int, tuple[np.ndarray, dict[str, Any]]] = {}
        self.instruct(infos)  # the ended episodes' final infos get theirs
        if same_step:
            ended = [s for s in self.slots if terminated[s.index] or truncated[s.index]]
            if ended:
                for slot in ended:
                    final[slot.index] = (frames[slot.index].copy(), infos[slot.index])
                self.same_step = False  # the autoresets below start the new episodes
                resets = await self._autoresets(ended, None)
                for slot in ended:
                    infos[slot.index] = resets[slot.index]
                self.instruct(infos)
        return Batch(frames.copy(), rewards, terminated, truncated, tuple(infos), final)

    async def _autoresets(
        self, slots: list[Slot], truncated: np.ndarray | None
    ) -> dict[int, dict[str, Any]]:
        """The autoreset of each slot (an episode ended, or it is away), concurrently; a
        slot whose reset fails goes away (and is ``truncated`` if given)."""
        out: dict[int, dict[str, Any]] = {}
        pending: dict[int, Coroutine[Any, Any, dict[str, Any]]] = {}
        for slot in slots:
            if slot.phase is Phase.AWAY:
                out[slot.index] = self.faults.away(slot, truncated)
            else:
                pending[slot.index] = self._autoreset(slot)
        if len(pending) == 1:  # no task for the common case
            ((index, coro),) = pending.items()
            try:
                results: list[Any] = [await coro]
            except Exception as exc:  # noqa: BLE001 - the slot goes away below
                results = [exc]
        elif pending:
            results = await asyncio.gather(*pending.values(), return_exceptions=True)
        else:
            results = []
        for index, result in zip(pending, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                out[index] = self.faults.lose(self.slots[index], error_text(result), None, truncated)
            else:
                out[index] = result
        return out

    async def _autoreset(self, slot: Slot) -> dict[str, Any]:
        """Start the slot's next episode and return its info; the frame is copied in."""
        if slot.phase is Phase.ENDED:
            episode = await self._next_episode(slot)
            slot.baseline(episode)
            if self.web is not None:
                await self.web.after_reset(slot, episode)
        else:
            episode = await self._reset_slot(slot, slot.next_seed(), None, False)
        self.copy_frame(slot)
        info: dict[str, Any] = {"episode_id": episode, "remote.connected": True}
        if slot.returned is not None:
            info["frame"] = slot.returned
        return info

    async def _next_episode(self, slot: Slot) -> int | None:
        """Real time: wait until the remote shows the episode it started by itself after
        ``slot.ended_episode`` (by the frame tag; without tags, by the describe and the
        next VNC update). Returns its id."""
        session, ended = slot.session, slot.ended_episode
        vnc, rewarder = session.vnc, session.rewarder
        try:
            async with asyncio.timeout(RESET_TIMEOUT):
                if vnc is not None and session.frame_tags and ended is not None:
                    while (tag := vnc.tag) is None or tag.episode_id <= ended:
                        await vnc.wait_update(vnc.updates)
                    if slot.instructs and isinstance(rewarder, RewarderClient):
                        # The text went out before the frame, over the other channel; the
                        # describe saying the episode runs follows it on the rewarder's.
                        await rewarder.wait_for_state("running", episode_id=tag.episode_id)
                    return tag.episode_id
                episode = None
                if isinstance(rewarder, RewarderClient):  # real time: never a blocking one
                    after = None if ended is None else ended + 1
                    describe = await rewarder.wait_for_state("running", episode_id=after)
                    episode = describe.episode_id
                if vnc is not None:
                    try:
                        await vnc.wait_update(vnc.updates, timeout=PAIRING_FRAMES / self.fps)
                    except TimeoutError:
                        pass  # Xvnc sends nothing for a screen that did not change
                return episode
        except TimeoutError as exc:
            raise RemoteUnavailable(
                session.name, f"started no new episode within {RESET_TIMEOUT:g} s", exc
            ) from exc
        except (RewarderError, VNCError, OSError) as exc:
            raise RemoteUnavailable(session.name, "lost while starting its next episode", exc) from exc

    async def _step_realtime(
        self, actions: Sequence[Sequence[Any]], rewards: np.ndarray, terminated: np.ndarray,
        truncated: np.ndarray, infos: list[dict[str, Any]],
    ) -> None:
        now = time.monotonic()
        period = 1.0 / self.fps
        running: list[Slot] = []
        answered: list[Slot] = []  # the web way (remotes.web): their answer names the frame
        starting: list[Slot] = []
        lost: list[tuple[Slot, str]] = []
        late = np.zeros(self.num)
        clock = False
        for slot in self.slots:
            i = slot.index
            if slot.phase is Phase.AWAY:
                infos[i] = self.faults.away(slot, truncated)
                continue
            reason = self.faults.lost_reason(slot, now)
            if reason is not None:
                lost.append((slot, reason))
                continue
            if slot.phase is not Phase.RUNNING:
                starting.append(slot)
                continue
            web = self.web is not None and self.web.answered(actions[i])
            try:
                if self.web is not None and web:
                    await self.web.send(slot, actions[i])
                else:
                    slot.session.send(actions[i])
            except (VNCError, OSError, RewarderError) as exc:
                lost.append((slot, error_text(exc)))
                continue
            running.append(slot)
            slot.captured = None
            if web:
                answered.append(slot)
            elif slot.tags and slot.seen is not None:
                base = slot.returned if slot.returned is not None else slot.seen
                target = base + self.frameskip
                if slot.seen >= target:
                    late[i] = (slot.seen - target) / self.fps
                    tag = slot.session.tag
                    if slot.seen == target and tag is not None:
                        self._gate.capture(slot, tag)  # in just now: this one, not a later one
                else:
                    required = not slot.behind and not self.faults.stalled(slot, now)
                    self._gate.expect(slot, target, required, capture=True)
            else:
                clock = True
        for slot, reason in lost:  # after the healthy remotes got their actions
            infos[slot.index] = await self.faults.lose_draining(slot, reason, rewards, terminated, truncated)
        if clock:
            late_clock = await self._tick(now)
            for slot in running:
                if not slot.tags:
                    late[slot.index] = late_clock
        starts: dict[int, dict[str, Any]] = {}
        deadline = now + (self.frameskip + WAIT_SLACK_FRAMES) * period
        if starting:
            _, starts = await asyncio.gather(
                self._gate.wait(deadline), self._autoresets(starting, truncated)
            )
        else:
            await self._gate.wait(deadline)
        for slot in starting:
            infos[slot.index] = starts[slot.index]
        if self.web is not None and answered:
            await self.web.wait(answered, self._gate)
        self._collect(running, rewards, terminated, truncated, infos, late)
        await self._pair(running, infos)

    def _collect(
        self, running: list[Slot], rewards: np.ndarray, terminated: np.ndarray,
        truncated: np.ndarray, infos: list[dict[str, Any]], late: np.ndarray,
    ) -> None:
        """Pop each running slot's rewards; its frame is copied by :meth:`_pair`."""
        now = time.monotonic()
        for slot in list(running):
            i, session = slot.index, slot.session
            result = session.pop()
            if result.info.get(DISCONNECTED) or not session.connected:
                running.remove(slot)  # it dropped while we waited: a loss, with these rewards
                reason = session.error or "connection lost"
                infos[i] = self.faults.lose(slot, reason, rewards, truncated, terminated, result)
                continue
            info = result.info
            artificial = bool(info.get(ARTIFICIAL_DONE))
            rewards[i] = result.reward
            terminated[i] = result.done and not artificial
            slot.steps += 1
            limit = self.max_episode_steps
            truncated[i] = artificial or (limit is not None and slot.steps >= limit)
            info["episode_id"] = result.episode_id
            info["env_state"] = result.env_state
            info["text"] = list(result.text)
            slot.heard(result.text)
            info["step.late"] = float(late[i])
            info["remote.connected"] = True
            info["remote.stalled"] = self.faults.stalled(slot, now)
            if result.observation is not None:
                info["rewarder.observation"] = result.observation
            info.update(session.info())
            infos[i] = info
            if result.done:
                slot.phase = Phase.ENDED
                slot.ended_episode = result.episode_id
            elif truncated[i]:
                slot.phase = Phase.NEEDS_RESET

    async def _pair(self, running: list[Slot], infos: list[dict[str, Any]]) -> None:
        """Settle each running slot's frame: the target frame captured as it came in;
        or, when its newest reward names a later frame, that frame (waited for briefly: a
        reward is returned with the frame that earned it); or the newest frame. For an
        episode that ended, a frame of that episode, never of the next: the newest if VNC
        still shows it, else the one captured in this step, else the one returned last.
        (Keeping every episode's last frame would mean copying every update: measured,
        32 remotes stepped 28% slower.)"""
        waiting = False
        for slot in running:
            frame = infos[slot.index].get(FRAME_INFO_KEY)
            have = slot.captured if slot.captured is not None else slot.seen
            if isinstance(frame, int) and slot.tags and (have is None or frame > have):
                if slot.phase is not Phase.ENDED:
                    slot.captured = None  # a newer frame earned the reward: return that one
                if not slot.behind:
                    self._gate.expect(slot, frame)
                    waiting = waiting or slot.target is not None
        if waiting:
            await self._gate.wait(time.monotonic() + PAIRING_FRAMES / self.fps)
        frames = self.frames
        assert frames is not None
        for slot in running:
            info = infos[slot.index]
            tag = slot.session.tag
            ended = slot.ended_episode if slot.phase is Phase.ENDED else None
            episode = ended if ended is not None else info.get("episode_id")
            if slot.captured is not None and ended is None:
                slot.returned = slot.captured  # copied in as it came (_capture)
            elif tag is None or episode is None or tag.episode_id <= episode:
                self.copy_frame(slot)
            elif slot.captured is not None:
                slot.returned = slot.captured  # of this episode (_capture checks)
            # else VNC shows the next episode while this one's end is in flight or just
            # in: the frame returned last (of this episode) stays
            slot.captured = None
            if slot.returned is not None:
                info["frame"] = slot.returned
            info.update(self._latency(slot))

    def instruct(self, infos: list[dict[str, Any]]) -> None:
        """Each info's instruction, and its page and last action (remotes.web)."""
        instruct(self.slots, infos)
        if self.web is not None:
            self.web.annotate(infos)

    def copy_frame(self, slot: Slot) -> None:
        """The slot's newest frame into the batch (its tag noted as returned)."""
        frames = self.frames
        assert frames is not None
        session = slot.session
        vnc = session.vnc
        number: int | None = None
        if vnc is not None:
            pixels, tag = vnc.framebuffer, vnc.tag
            if tag is not None:
                number, episode = tag.frame, tag.episode_id
        else:
            if session.rewarder is not None:
                frames[slot.index] = 0
            return
        if pixels.shape == frames.shape[1:]:
            np.copyto(frames[slot.index], pixels)
        if number is not None:
            slot.returned, slot.episode = number, episode
            if slot.seen is None or number > slot.seen:
                slot.seen = number

    def _latency(self, slot: Slot) -> dict[str, float]:
        """Latencies read from the frame tag's server time (no pixels read): how long
        after this step's action the returned frame was drawn, and how old it is now."""
        session = slot.session
        tag, skew = session.tag, session.clock_skew()
        if tag is None or skew is None:
            return {}
        drawn = tag.timestamp - skew  # the frame's time on our clock
        latency = {"latency.frame_to_agent": time.time() - drawn}
        if drawn >= self._sent_at:
            latency["latency.action_to_frame"] = drawn - self._sent_at
        return latency

    async def _tick(self, started: float) -> float:
        """Pace by our own clock at fps (remotes without frame tags); how late we are."""
        period = self.frameskip / self.fps
        self._next_at = (started if self._next_at is None else self._next_at) + period
        late = started - self._next_at
        if late > 0:  # the agent took longer than a step: do not try to catch up
            self._next_at = started
            return late
        await asyncio.sleep(-late)
        return 0.0

    # Faults ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the env is closed")


