"""Real-time steps, resets and connections on the loop thread: the stepping core's other
lane (lockstep's is :mod:`remotes.lockstep`).

Holds :class:`RealtimeSteps` and the real-time step's timing limits. Every coroutine
here runs on the loop thread, where the sessions' VNC and rewarder clients live; the
:class:`~remotes.stepper.Stepper` hands them over with ``LoopThread.run``.

**Real time.** A step sends each remote its events, then waits until each remote's VNC
shows the frame ``frameskip`` past the one it returned last — the remote's own frame
clock, read from the frame tags our VNC server sends (:class:`~remotes.slot.FrameGate`)
— and returns that frame of each remote, copied as it comes in (waiting for the slowest
remote skips no other remote's frame), with the rewards each episode earned since the
last step (a reward waits briefly for the frame that earned it). A remote that misses its
frame by :data:`WAIT_SLACK_FRAMES` periods returns its newest frame and holds no step up
until it moves again. An agent that comes late gets the newest frames
(``info["step.late"]``). Remotes that send no tags (Xvnc) are paced by our clock at fps.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import Any, Final

import numpy as np

from rewarder.errors import RewarderError
from rewarder.protocol import FRAME_INFO_KEY
from rewarder.reward_buffer import ARTIFICIAL_DONE, DISCONNECTED
from vncdriver.errors import VNCError

from .faults import Faults, error_text
from .lane import Batch, Lane
from .session import RESET_TIMEOUT, RemoteSnapshot, RemoteUnavailable
from .slot import Slot
from .slot_state import Phase, SlotEvent, fire
from .web import WebSteps

#: Frame periods a real-time step waits past a remote's target frame before it returns
#: that remote's newest frame: one period absorbs a busy machine's jitter without
#: letting one slow remote halve everyone's step rate.
WAIT_SLACK_FRAMES: Final = 1
#: Seconds a real-time step waits for the frame a reward names (rewarder and VNC travel
#: separately), in frame periods.
PAIRING_FRAMES: Final = 2


class RealtimeSteps:
    """Real-time connects, resets and steps of ``lane``'s slots (loop thread only), with
    ``faults`` deciding losses and ``web`` the page side (if the env has one)."""

    def __init__(self, lane: Lane, faults: Faults, web: WebSteps | None) -> None:
        self.lane, self.faults, self.web = lane, faults, web
        #: Wall time this step's actions went out (for ``latency.action_to_frame``).
        self._sent_at = 0.0
        #: When the next step is due, pacing by our clock (remotes without frame tags).
        self.next_at: float | None = None

    async def connect(self) -> tuple[RemoteSnapshot, ...]:
        results = await asyncio.gather(
            *(s.connect() for s in self.lane.sessions), return_exceptions=True
        )
        failed = [(s, r) for s, r in zip(self.lane.sessions, results, strict=True) if r is not None]
        if failed:
            await asyncio.gather(*(s.close() for s in self.lane.sessions), return_exceptions=True)
            for _, error in failed:
                if not isinstance(error, Exception):
                    raise error  # a cancellation or an interrupt, as it came
            if len(failed) == 1 and self.lane.num == 1:
                raise failed[0][1]
            raise RemoteUnavailable.several([e for _, e in failed], self.lane.num)
        try:
            self.lane.configure()
        except ValueError:
            await asyncio.gather(*(s.close() for s in self.lane.sessions), return_exceptions=True)
            raise
        for slot in self.lane.slots:
            slot.baseline(event=SlotEvent.CONNECT)
        return self.lane.states()

    async def close(self) -> None:
        """Stop reconnecting and close every session."""
        self.lane.closed = True
        tasks = [s.reconnect for s in self.lane.slots if isinstance(s.reconnect, asyncio.Task)]
        for slot in self.lane.slots:
            slot.reconnect = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.lane.sessions), return_exceptions=True)

    async def reset(
        self, seeds: Sequence[int | None], env_id: str | None = None
    ) -> tuple[Batch, tuple[RemoteSnapshot, ...]]:
        """Start a new episode on every remote (see ``Stepper.reset``)."""
        self.next_at = None
        if self.web is not None:
            self.web.answers.clear()  # an interrupted step's
        pairs = zip(self.lane.slots, seeds, strict=True)
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
        self.lane.configure()  # a reset may switch the env (env_id here or the stepper's)
        frames = self.lane.frames
        assert frames is not None
        infos = []
        for slot, episode in zip(self.lane.slots, results, strict=True):
            self.lane.copy_frame(slot)
            info: dict[str, Any] = {"episode_id": episode}
            if slot.returned is not None:
                info["frame"] = slot.returned
            rewarder = slot.session.rewarder
            if rewarder is not None:  # the instruction a task sent with its reset
                info["text"] = list(rewarder.peek().text)
            infos.append(info)
        self.lane.instruct(infos)
        n = self.lane.num
        no = np.zeros(n, bool)
        batch = Batch(self.lane.outputs.copy(frames), np.zeros(n), no, no.copy(), tuple(infos))
        return batch, self.lane.states()

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
        reset = partial(session.reset, env_id=env_id or self.lane.env_id, seed=seed,
                        fps=self.lane.requested_fps, mode=session.mode_request(self.lane.mode))
        episode = await reset()
        if self.web is not None and await self.web.after_reset(slot, episode):
            episode = await reset()  # a new env, observing now: its first page (remotes.web)
        slot.baseline(episode)  # its text came before the reply: the instruction is in
        slot.error = None
        return episode

    async def step(self, actions: Sequence[Sequence[Any]], same_step: bool) -> Batch:
        rewards, terminated, truncated, infos = self.lane.outcome()
        self.lane.same_step = same_step
        self._sent_at = time.time()
        await self._step_realtime(actions, rewards, terminated, truncated, infos)
        return await self._finish(rewards, terminated, truncated, infos, same_step)

    async def _finish(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        infos: list[dict[str, Any]], same_step: bool,
    ) -> Batch:
        """The step's batch; with ``same_step``, each ended episode's next one started."""
        frames = self.lane.frames
        assert frames is not None
        final: dict[int, tuple[np.ndarray, dict[str, Any]]] = {}
        self.lane.instruct(infos)  # the ended episodes' final infos get theirs
        if same_step:
            ended = [s for s in self.lane.slots if terminated[s.index] or truncated[s.index]]
            if ended:
                for slot in ended:
                    final[slot.index] = (frames[slot.index].copy(), infos[slot.index])
                self.lane.same_step = False  # the autoresets below start the new episodes
                resets = await self._autoresets(ended, None)
                for slot in ended:
                    infos[slot.index] = resets[slot.index]
                self.lane.instruct(infos)
        return Batch(self.lane.outputs.copy(frames), rewards, terminated, truncated, tuple(infos), final)

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
                out[index] = self.faults.lose(self.lane.slots[index], error_text(result), None, truncated)
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
        self.lane.copy_frame(slot)
        info: dict[str, Any] = {"episode_id": episode, "remote.connected": True}
        if slot.returned is not None:
            info["frame"] = slot.returned
        return info

    async def _next_episode(self, slot: Slot) -> int | None:
        """Real time: wait until the remote shows the episode it started by itself after
        ``slot.ended_episode`` (by the frame tag; without tags, by the describe and the
        next VNC update). Returns its id."""
        session, ended = slot.session, slot.ended_episode
        vnc, rewarder = session.vnc, session.realtime_channel
        try:
            async with asyncio.timeout(RESET_TIMEOUT):
                if vnc is not None and session.frame_tags and ended is not None:
                    while (tag := vnc.tag) is None or tag.episode_id <= ended:
                        await vnc.wait_update(vnc.updates)
                    if slot.instructs and rewarder is not None:
                        # The text went out before the frame, over the other channel; the
                        # describe saying the episode runs follows it on the rewarder's.
                        await rewarder.wait_for_state("running", episode_id=tag.episode_id)
                    return tag.episode_id
                episode = None
                if rewarder is not None:
                    after = None if ended is None else ended + 1
                    describe = await rewarder.wait_for_state("running", episode_id=after)
                    episode = describe.episode_id
                if vnc is not None:
                    try:
                        await vnc.wait_update(vnc.updates, timeout=PAIRING_FRAMES / self.lane.fps)
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
        period = 1.0 / self.lane.fps
        running: list[Slot] = []
        answered: list[Slot] = []  # the web way (remotes.web): their answer names the frame
        starting: list[Slot] = []
        lost: list[tuple[Slot, str]] = []
        late = np.zeros(self.lane.num)
        asked: list[tuple[Slot, int]] = []  # on demand: the frame each was asked for
        clock = False
        for slot in self.lane.slots:
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
                target = base + self.lane.frameskip
                if slot.seen >= target:
                    late[i] = (slot.seen - target) / self.lane.fps
                    tag = slot.session.tag
                    if slot.seen == target and tag is not None:
                        self.lane.gate.capture(slot, tag)  # in just now: this one, not a later one
                else:
                    required = not slot.behind and not self.faults.stalled(slot, now)
                    self.lane.gate.expect(slot, target, required, capture=True)
                    if slot.session.on_demand:
                        asked.append((slot, target))
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
        deadline = now + (self.lane.frameskip + WAIT_SLACK_FRAMES) * period
        if starting:
            _, starts = await asyncio.gather(
                self.lane.gate.wait(deadline), self._autoresets(starting, truncated)
            )
        else:
            await self.lane.gate.wait(deadline)
        for slot in starting:
            infos[slot.index] = starts[slot.index]
        for slot, target in asked:  # on demand the newest frame comes when asked: how late
            if slot.captured is not None and slot.captured > target:
                late[slot.index] = (slot.captured - target) / self.lane.fps
        if self.web is not None and answered:
            await self.web.wait(answered, self.lane.gate)
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
            limit = self.lane.max_episode_steps
            truncated[i] = artificial or (limit is not None and slot.steps >= limit)
            info["episode_id"] = result.episode_id
            info["env_state"] = result.env_state
            info["text"] = list(result.text)
            slot.heard(result.text)
            info["step.late"] = float(late[i])
            info["remote.connected"] = True
            info["remote.stalled"] = self.faults.stalled(slot, now)
            if result.observation is not None:  # the latest, until a newer one: the agent's copy
                info["rewarder.observation"] = copy.deepcopy(result.observation)
            info.update(session.info())
            infos[i] = info
            if result.done:
                fire(slot, SlotEvent.EPISODE_END)
                slot.ended_episode = result.episode_id
            elif truncated[i]:
                fire(slot, SlotEvent.NEED_RESET)

    async def _pair(self, running: list[Slot], infos: list[dict[str, Any]]) -> None:
        """Settle each running slot's frame: the target frame captured as it came in;
        or, when its newest reward names a later frame, that frame (waited for briefly: a
        reward is returned with the frame that earned it); or the newest frame. For an
        episode that ended, a frame of that episode, never of the next: the newest if VNC
        still shows it, else the one captured in this step, else the one returned last.
        (Keeping every episode's last frame would mean copying every update, which slows
        the real-time vector step; hand-measured with 32 remotes: benchmarks/RESULTS.md.)"""
        waiting = False
        for slot in running:
            frame = infos[slot.index].get(FRAME_INFO_KEY)
            have = slot.captured if slot.captured is not None else slot.seen
            if isinstance(frame, int) and slot.tags and (have is None or frame > have):
                if slot.phase is not Phase.ENDED:
                    slot.captured = None  # a newer frame earned the reward: return that one
                if not slot.behind:
                    self.lane.gate.expect(slot, frame)
                    waiting = waiting or slot.target is not None
        if waiting:
            await self.lane.gate.wait(time.monotonic() + PAIRING_FRAMES / self.lane.fps)
        frames = self.lane.frames
        assert frames is not None
        for slot in running:
            info = infos[slot.index]
            tag = slot.session.tag
            ended = slot.ended_episode if slot.phase is Phase.ENDED else None
            episode = ended if ended is not None else info.get("episode_id")
            if slot.captured is not None and ended is None:
                slot.returned = slot.captured  # copied in as it came (_capture)
            elif tag is None or episode is None or tag.episode_id <= episode:
                self.lane.copy_frame(slot)
            elif slot.captured is not None:
                slot.returned = slot.captured  # of this episode (_capture checks)
            # else VNC shows the next episode while this one's end is in flight or just
            # in: the frame returned last (of this episode) stays
            slot.captured = None
            if slot.returned is not None:
                info["frame"] = slot.returned
            info.update(self._latency(slot))

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
        period = self.lane.frameskip / self.lane.fps
        self.next_at = (started if self.next_at is None else self.next_at) + period
        late = started - self.next_at
        if late > 0:  # the agent took longer than a step: do not try to catch up
            self.next_at = started
            return late
        await asyncio.sleep(-late)
        return 0.0

