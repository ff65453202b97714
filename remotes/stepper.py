"""The stepping core: n remotes stepped together, on the loop thread.

Holds :class:`Stepper` (what both gymnasium envs drive: ``RemoteEnv`` is a one-wide
view of it, ``RemoteVectorEnv`` an n-wide one), :class:`Batch` (what a reset or step
hands the agent's thread) and the limits that decide when a remote is late, stalled or
gone. Every method of :class:`Stepper` is a coroutine for the loop thread; the envs run
them with :meth:`~remotes.loop.LoopThread.run` and get a :class:`Batch` back, built of
fresh objects the loop never touches again (the rule is in :mod:`remotes.loop`).

**Real time.** A step sends each remote its events, then waits until each remote's VNC
shows the frame ``frameskip`` past the one it returned last — the remote's own frame
clock, read from the frame tags our VNC server sends — and returns the newest frames
with the rewards each episode earned since the last step. A remote that misses that
frame by :data:`WAIT_SLACK_FRAMES` periods is not waited for (it returns its newest
frame, and is waited for again once it moves). Remotes that send no tags (Xvnc) are
paced by our own clock at ``fps``.

**Episodes.** gymnasium's autoreset: the step after ``terminated``/``truncated`` for a
remote (``NEXT_STEP``), or the same step (``SAME_STEP``), returns the new episode's
first frame — checked by its tag to belong to the new episode — with reward 0. In real
time the remote starts that episode by itself after ``done``; after a truncation (the
step limit) and in lockstep the step sends a reset.

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
import enum
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from rewarder.errors import RewarderError
from rewarder.protocol import FRAME_INFO_KEY, LOCKSTEP
from rewarder.reward_buffer import ARTIFICIAL_DONE, DISCONNECTED, EpisodeResult
from vncdriver.errors import VNCError
from vncdriver.messages import FrameTag, RectangleHeader

from .session import RESET_TIMEOUT, RemoteSession, RemoteState, RemoteUnavailable, answers

log = logging.getLogger(__name__)

#: Steps per second when neither the caller nor the remote's describe says.
DEFAULT_FPS: Final = 60.0
#: Frame periods a real-time step waits past a remote's target frame before it returns
#: that remote's newest frame: one period absorbs a busy machine's jitter without
#: letting one slow remote halve everyone's step rate.
WAIT_SLACK_FRAMES: Final = 1
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
#: Seconds between the describes our remotes send even when idle (``envserver``'s
#: HEARTBEAT_INTERVAL; remotes/ may not import envserver).
REMOTE_HEARTBEAT: Final = 5.0
#: A remote without frame tags (Xvnc) shows progress only by messages: it is stalled
#: when its rewarder has been silent for two heartbeats and a second.
TAGLESS_STALL_SECONDS: Final = 2 * REMOTE_HEARTBEAT + 1.0
#: Seconds a real-time step waits for the frame a reward names (rewarder and VNC travel
#: separately), in frame periods.
PAIRING_FRAMES: Final = 2


class Phase(enum.Enum):
    """Where a remote's slot is between two steps."""

    #: Stepping an episode.
    RUNNING = "running"
    #: The remote ended the episode (real time: it starts the next by itself).
    ENDED = "ended"
    #: We ended it (step limit) or the remote waits for a reset (lockstep): reset next.
    NEEDS_RESET = "needs reset"
    #: Dropped, stalled or replaced: reconnecting in the background.
    AWAY = "away"


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


@dataclass(slots=True, eq=False)
class _Slot:
    """One remote's stepping state (loop thread only)."""

    index: int
    session: RemoteSession
    phase: Phase = Phase.RUNNING
    #: Steps into the current episode (for ``max_episode_steps``).
    steps: int = 0
    #: What the remote's describe said at the last (re)connect or reset: its VNC updates
    #: carry frame tags; it sends heartbeats (so a silent one is stalled).
    tags: bool = False
    heartbeats: bool = False
    #: The episode that ended (ENDED): the next frame must belong to a later one.
    ended_episode: int | None = None
    #: The frame number last returned (and its episode, by its tag), and the newest
    #: frame number VNC showed.
    returned: int | None = None
    episode: int | None = None
    seen: int | None = None
    #: Loop time the frames (or, without tags, the messages) last advanced.
    progress_at: float = 0.0
    #: Without tags: VNC updates + rewarder messages at the last check.
    activity: int = -1
    #: The frame a step waits for (None: not waiting).
    target: int | None = None
    #: Whether the step waits for ``target`` (not for a remote that is behind or stalled).
    required: bool = True
    #: Whether reaching ``target`` copies the frame into the batch there and then, and the
    #: frame (and its episode) so captured: a step returns each remote's target frame
    #: even when the remote draws the next one before the slowest remote is in.
    capture: bool = False
    captured: int | None = None
    captured_episode: int | None = None
    #: Missed its target frame at the last deadline and has not moved since.
    behind: bool = False
    #: Why the slot is away, and the task bringing it back (True once it is back; False
    #: when it only closed the connection of a replaced session).
    error: str | None = None
    reconnect: asyncio.Task[bool] | None = None
    #: Steps returned while away since the loss (or since the idle stretch ended).
    away_steps: int = 0
    #: Draws the seeds of the episodes this slot starts by itself, from the reset seed.
    rng: np.random.Generator | None = None

    def next_seed(self) -> int | None:
        return None if self.rng is None else int(self.rng.integers(2**31))


class Stepper:
    """Steps ``sessions`` together; every method runs on the loop thread.

    ``fps``: requested steps per second (None: the first remote's describe); the rest
    as :class:`~remotes.vector.RemoteVectorEnv` documents them.
    """

    def __init__(
        self,
        sessions: Sequence[RemoteSession],
        *,
        mode: str,
        frameskip: int,
        fps: float | None = None,
        env_id: str | None = None,
        max_episode_steps: int | None = None,
        start_timeout: float = 30.0,
        stall_frames: int = STALL_FRAMES,
        stall_timeout: float = STALL_TIMEOUT,
    ) -> None:
        if stall_frames < 1:
            raise ValueError(f"stall_frames must be 1 or more, not {stall_frames!r}")
        if not stall_timeout > 0:
            raise ValueError(f"stall_timeout must be positive seconds, not {stall_timeout!r}")
        self.sessions = list(sessions)
        self.mode, self.frameskip = mode, frameskip
        self.requested_fps = fps
        self.fps = float(fps or DEFAULT_FPS)
        self.env_id = env_id
        self.max_episode_steps = max_episode_steps
        self.start_timeout = start_timeout
        self.stall_frames = stall_frames
        self.stall_timeout = stall_timeout
        self.slots = [_Slot(i, s) for i, s in enumerate(self.sessions)]
        for slot in self.slots:
            slot.session.on_frame = self._frame_callback(slot)
        self._frames: np.ndarray | None = None
        #: SAME_STEP autoreset in the step under way (a slot back from away then ends
        #: its idle stretch and starts its episode in the same step).
        self._same_step = False
        #: Wall time this step's actions went out (for ``latency.action_to_frame``).
        self._sent_at = 0.0
        self._gate: asyncio.Future[None] | None = None
        self._waiting = 0
        self._next_at: float | None = None
        self._closed = False

    @property
    def num(self) -> int:
        return len(self.slots)

    # Connecting ---------------------------------------------------------------------------

    async def connect(self) -> tuple[RemoteState, ...]:
        """Connect every remote; raise :class:`RemoteUnavailable` naming those that did not
        answer (after closing the others)."""
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
            self._configure()
        except ValueError:
            await asyncio.gather(*(s.close() for s in self.sessions), return_exceptions=True)
            raise
        for slot in self.slots:
            self._baseline(slot)
        return self.states()

    def _configure(self) -> None:
        describe = self.sessions[0].describe_body()
        self.fps = float(self.requested_fps or describe.get("fps") or DEFAULT_FPS)
        sizes = {s.screen_size for s in self.sessions}
        if len(sizes) != 1:
            listed = ", ".join(f"{s.name}: {w}x{h}" for s in self.sessions for w, h in [s.screen_size])
            raise ValueError(f"remotes have different screen sizes ({listed}); use one env id")
        ((width, height),) = sizes
        if self._frames is None or self._frames.shape[1:3] != (height, width):
            self._frames = np.zeros((self.num, height, width, 3), np.uint8)

    def states(self) -> tuple[RemoteState, ...]:
        """Snapshots of every remote, for the agent's thread."""
        return tuple(s.state() for s in self.sessions)

    async def snapshot(self) -> tuple[RemoteState, ...]:
        """:meth:`states` as a coroutine (for ``LoopThread.run``)."""
        return self.states()

    async def close(self) -> None:
        """Stop reconnecting and close every session (idempotent)."""
        self._closed = True
        tasks = [s.reconnect for s in self.slots if s.reconnect is not None]
        for slot in self.slots:
            slot.reconnect = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.sessions), return_exceptions=True)

    # Frame clock ----------------------------------------------------------------------------

    def _frame_callback(
        self, slot: _Slot
    ) -> Callable[[FrameTag | None, Sequence[RectangleHeader]], None]:
        def on_frame(tag: FrameTag | None, rects: Sequence[RectangleHeader]) -> None:
            """A VNC update was applied for ``slot`` (loop thread): note progress, capture
            a target frame, open the gate when the last remote a step waits for is in."""
            if tag is None:
                return
            if tag.frame != slot.seen:
                slot.seen = tag.frame
                slot.progress_at = time.monotonic()
                slot.behind = False
            target = slot.target
            if target is not None and tag.frame >= target:
                slot.target = None
                if slot.capture:
                    self._capture(slot, tag)
                if slot.required:
                    self._waiting -= 1
                    gate = self._gate
                    if self._waiting <= 0 and gate is not None and not gate.done():
                        gate.set_result(None)

        return on_frame

    def _capture(self, slot: _Slot, tag: FrameTag) -> None:
        """Copy ``slot``'s frame into the batch now (its target frame just came in)."""
        frames, vnc = self._frames, slot.session.vnc
        if frames is None or vnc is None or tag.episode_id != slot.episode:
            return  # a frame of the next episode: the step decides (see _pair)
        buffer = vnc.framebuffer
        if buffer.shape == frames.shape[1:]:
            np.copyto(frames[slot.index], buffer)
            slot.captured, slot.captured_episode = tag.frame, tag.episode_id

    def _expect(
        self, slot: _Slot, frame: int, required: bool = True, capture: bool = False
    ) -> None:
        """Make the next :meth:`_wait` wait until ``slot`` shows ``frame`` — or, unless
        ``required`` (a remote that is behind or stalled), only while it waits for others;
        with ``capture``, the frame is copied into the batch as it comes in."""
        slot.capture = capture
        if slot.seen is not None and slot.seen >= frame:
            return
        if slot.target is None:
            slot.required = required
            if required:
                self._waiting += 1
        elif required and not slot.required:
            slot.required = True
            self._waiting += 1
        slot.target = frame

    async def _wait(self, deadline: float) -> None:
        """Wait until every required expected frame is in (every expected one, when none
        is required: a lone slow remote still paces the step), or until ``deadline``
        (monotonic time); slots still short then are marked behind."""
        if self._waiting <= 0:
            for slot in self.slots:
                if slot.target is not None:
                    slot.required = True
                    self._waiting += 1
        try:
            if self._waiting > 0:
                loop = asyncio.get_running_loop()
                gate = self._gate = loop.create_future()
                timer = loop.call_later(max(0.0, deadline - time.monotonic()), _resolve, gate)
                try:
                    await gate
                finally:
                    timer.cancel()
                    self._gate = None
        finally:  # also when the step is cancelled (an interrupt): the next starts clean
            self._waiting = 0
            for slot in self.slots:
                if slot.target is not None:
                    slot.target = None
                    slot.behind = True

    def _baseline(self, slot: _Slot) -> None:
        """A (re)connection or reset: the frame clock starts over from what VNC shows."""
        session = slot.session
        slot.tags, slot.heartbeats = session.frame_tags, session.heartbeats
        tag = session.tag
        slot.seen = slot.returned = tag.frame if tag is not None else None
        slot.episode = tag.episode_id if tag is not None else None
        slot.progress_at = time.monotonic()
        slot.activity = -1
        slot.behind = False
        slot.target = None
        slot.steps = 0
        slot.phase = Phase.RUNNING
        slot.ended_episode = None

    # Resetting ------------------------------------------------------------------------------

    async def reset(
        self, seeds: Sequence[int | None], env_id: str | None = None
    ) -> tuple[Batch, tuple[RemoteState, ...]]:
        """Start a new episode on every remote (switching to ``env_id`` if given),
        reconnecting those that are away first (waiting up to ``start_timeout``)."""
        self._check_open()
        self._next_at = None
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
        self._configure()  # a reset may switch the env (env_id here or the stepper's)
        frames = self._frames
        assert frames is not None
        infos = []
        for slot, episode in zip(self.slots, results, strict=True):
            self._copy_frame(slot)
            info: dict[str, Any] = {"episode_id": episode}
            if slot.returned is not None:
                info["frame"] = slot.returned
            infos.append(info)
        n = self.num
        batch = Batch(frames.copy(), np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), tuple(infos))
        return batch, self.states()

    async def _reset_slot(
        self, slot: _Slot, seed: int | None, env_id: str | None, explicit: bool
    ) -> int | None:
        """Reset one remote (an explicit reset reconnects it first if it is away)."""
        session = slot.session
        if explicit:
            slot.rng = None if seed is None else np.random.default_rng(seed)
            if slot.phase is Phase.AWAY or not session.connected or session.replaced:
                await self._come_back(slot)
        episode = await session.reset(
            env_id=env_id or self.env_id, seed=seed, fps=self.requested_fps,
            mode=session.mode_request(self.mode),
        )
        self._baseline(slot)
        slot.error = None
        return episode

    async def _come_back(self, slot: _Slot) -> None:
        """Wait (up to ``start_timeout``) for an away slot's reconnection, or connect it."""
        task, slot.reconnect = slot.reconnect, None
        if task is not None and not task.done():
            try:
                async with asyncio.timeout(self.start_timeout):
                    await asyncio.shield(task)
            except TimeoutError:
                slot.reconnect = task  # it goes on trying
                raise RemoteUnavailable(
                    slot.session.name,
                    f"did not come back within start_timeout={self.start_timeout:g} s "
                    f"(last error: {slot.error})",
                ) from None
        session = slot.session
        if not _came_back(task) or not session.connected or session.replaced:
            await session.connect()

    # Stepping ------------------------------------------------------------------------------

    async def step(self, actions: Sequence[Sequence[Any]], same_step: bool = False) -> Batch:
        """One step of every remote (``actions[i]`` for remote i); see the module docstring.

        ``same_step``: a remote whose episode ends in this step is reset in it too.
        """
        self._check_open()
        n = self.num
        rewards = np.zeros(n, np.float64)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        self._same_step = same_step
        self._sent_at = time.time()
        if self.mode == LOCKSTEP:
            await self._step_lockstep(actions, rewards, terminated, truncated, infos)
        else:
            await self._step_realtime(actions, rewards, terminated, truncated, infos)
        frames = self._frames
        assert frames is not None
        final: dict[int, tuple[np.ndarray, dict[str, Any]]] = {}
        if same_step:
            ended = [s for s in self.slots if terminated[s.index] or truncated[s.index]]
            if ended:
                for slot in ended:
                    final[slot.index] = (frames[slot.index].copy(), infos[slot.index])
                self._same_step = False  # the autoresets below start the new episodes
                resets = await self._autoresets(ended, None)
                for slot in ended:
                    infos[slot.index] = resets[slot.index]
        return Batch(frames.copy(), rewards, terminated, truncated, tuple(infos), final)

    async def _autoresets(
        self, slots: list[_Slot], truncated: np.ndarray | None
    ) -> dict[int, dict[str, Any]]:
        """The autoreset of each slot (an episode ended, or it is away), concurrently; a
        slot whose reset fails goes away (and is ``truncated`` if given)."""
        out: dict[int, dict[str, Any]] = {}
        pending: dict[int, Coroutine[Any, Any, dict[str, Any]]] = {}
        for slot in slots:
            if slot.phase is Phase.AWAY:
                out[slot.index] = self._away(slot, truncated)
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
                out[index] = self._lose(self.slots[index], _reason(result), None, truncated)
            else:
                out[index] = result
        return out

    async def _autoreset(self, slot: _Slot) -> dict[str, Any]:
        """Start the slot's next episode and return its info; the frame is copied in."""
        if slot.phase is Phase.ENDED and self.mode != LOCKSTEP:
            episode = await self._next_episode(slot)
            self._baseline(slot)
        else:
            episode = await self._reset_slot(slot, slot.next_seed(), None, False)
        self._copy_frame(slot)
        info: dict[str, Any] = {"episode_id": episode, "remote.connected": True}
        if slot.returned is not None:
            info["frame"] = slot.returned
        return info

    async def _next_episode(self, slot: _Slot) -> int | None:
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
                    return tag.episode_id
                episode = None
                if rewarder is not None:
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
        running: list[_Slot] = []
        starting: list[_Slot] = []
        lost: list[tuple[_Slot, str]] = []
        late = np.zeros(self.num)
        clock = False
        for slot in self.slots:
            i = slot.index
            if slot.phase is Phase.AWAY:
                infos[i] = self._away(slot, truncated)
                continue
            reason = self._lost_reason(slot, now)
            if reason is not None:
                lost.append((slot, reason))
                continue
            if slot.phase is not Phase.RUNNING:
                starting.append(slot)
                continue
            try:
                slot.session.send(actions[i])
            except (VNCError, OSError) as exc:
                lost.append((slot, _reason(exc)))
                continue
            running.append(slot)
            slot.captured = None
            if slot.tags and slot.seen is not None:
                base = slot.returned if slot.returned is not None else slot.seen
                target = base + self.frameskip
                if slot.seen >= target:
                    late[i] = (slot.seen - target) / self.fps
                    tag = slot.session.tag
                    if slot.seen == target and tag is not None:
                        self._capture(slot, tag)  # in just now: this one, not a later one
                else:
                    required = not slot.behind and not self._stalled(slot, now)
                    self._expect(slot, target, required, capture=True)
            else:
                clock = True
        for slot, reason in lost:  # after the healthy remotes got their actions
            infos[slot.index] = await self._lose_draining(slot, reason, rewards, terminated, truncated)
        if clock:
            late_clock = await self._tick(now)
            for slot in running:
                if not slot.tags:
                    late[slot.index] = late_clock
        starts: dict[int, dict[str, Any]] = {}
        deadline = now + (self.frameskip + WAIT_SLACK_FRAMES) * period
        if starting:
            _, starts = await asyncio.gather(
                self._wait(deadline), self._autoresets(starting, truncated)
            )
        else:
            await self._wait(deadline)
        for slot in starting:
            infos[slot.index] = starts[slot.index]
        self._collect(running, rewards, terminated, truncated, infos, late)
        await self._pair(running, infos)

    def _collect(
        self, running: list[_Slot], rewards: np.ndarray, terminated: np.ndarray,
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
                infos[i] = self._lose(slot, reason, rewards, truncated, terminated, result)
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
            info["step.late"] = float(late[i])
            info["remote.connected"] = True
            info["remote.stalled"] = self._stalled(slot, now)
            if result.observation is not None:
                info["rewarder.observation"] = result.observation
            info.update(session.info())
            infos[i] = info
            if result.done:
                slot.phase = Phase.ENDED
                slot.ended_episode = result.episode_id
            elif truncated[i]:
                slot.phase = Phase.NEEDS_RESET

    async def _pair(self, running: list[_Slot], infos: list[dict[str, Any]]) -> None:
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
                    self._expect(slot, frame)
                    waiting = waiting or slot.target is not None
        if waiting:
            await self._wait(time.monotonic() + PAIRING_FRAMES / self.fps)
        frames = self._frames
        assert frames is not None
        for slot in running:
            info = infos[slot.index]
            tag = slot.session.tag
            ended = slot.ended_episode if slot.phase is Phase.ENDED else None
            episode = ended if ended is not None else info.get("episode_id")
            if slot.captured is not None and ended is None:
                slot.returned = slot.captured  # copied in as it came (_capture)
            elif tag is None or episode is None or tag.episode_id <= episode:
                self._copy_frame(slot)
            elif slot.captured is not None:
                slot.returned = slot.captured  # of this episode (_capture checks)
            # else VNC shows the next episode while this one's end is in flight or just
            # in: the frame returned last (of this episode) stays
            slot.captured = None
            if slot.returned is not None:
                info["frame"] = slot.returned
            info.update(self._latency(slot))

    def _copy_frame(self, slot: _Slot) -> None:
        """The slot's newest frame into the batch (its tag noted as returned)."""
        frames = self._frames
        assert frames is not None
        session = slot.session
        vnc = session.vnc
        if vnc is not None:
            tag = vnc.tag
            buffer = vnc.framebuffer
            if buffer.shape == frames.shape[1:]:
                np.copyto(frames[slot.index], buffer)
            if tag is not None:
                slot.returned, slot.episode = tag.frame, tag.episode_id
                if slot.seen is None or tag.frame > slot.seen:
                    slot.seen = tag.frame
        elif session.rewarder is not None:
            frames[slot.index] = 0

    def _latency(self, slot: _Slot) -> dict[str, float]:
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

    async def _step_lockstep(
        self, actions: Sequence[Sequence[Any]], rewards: np.ndarray, terminated: np.ndarray,
        truncated: np.ndarray, infos: list[dict[str, Any]],
    ) -> None:
        """Every remote advances ``frameskip`` frames; no clock involved."""
        now = time.monotonic()
        work: list[tuple[_Slot, Coroutine[Any, Any, Any]]] = []
        starting: list[_Slot] = []
        for slot in self.slots:
            i = slot.index
            if slot.phase is Phase.AWAY:
                infos[i] = self._away(slot, truncated)
                continue
            reason = self._lost_reason(slot, now)
            if reason is not None:
                infos[i] = self._lose(slot, reason, rewards, truncated)
                continue
            if slot.phase is Phase.RUNNING:
                work.append((slot, slot.session.advance(actions[i], self.frameskip, self.stall_timeout)))
            else:
                starting.append(slot)
        if starting:
            starts = self._autoresets(starting, truncated)
            if work:
                together = await asyncio.gather(
                    starts, *(c for _, c in work), return_exceptions=True
                )
                started, replies = together[0], together[1:]
            else:
                started, replies = await starts, []
            if isinstance(started, BaseException):
                raise started
            for slot in starting:
                infos[slot.index] = started[slot.index]
        elif len(work) == 1:  # no task for the common one-wide case
            try:
                replies = [await work[0][1]]
            except Exception as exc:  # noqa: BLE001 - sorted out below
                replies = [exc]
        else:
            replies = await asyncio.gather(*(c for _, c in work), return_exceptions=True)
        for (slot, _), reply in zip(work, replies, strict=True):
            i = slot.index
            if isinstance(reply, BaseException):
                if not isinstance(reply, Exception):
                    raise reply
                if not isinstance(reply, RemoteUnavailable | TimeoutError):
                    raise reply  # a RemoteError: the remote refused the step, say why
                infos[i] = self._lose(slot, _reason(reply, self.stall_timeout), rewards, truncated)
                continue
            self._copy_frame(slot)
            rewards[i], terminated[i] = reply.reward, reply.done
            slot.steps += 1
            limit = self.max_episode_steps
            truncated[i] = limit is not None and slot.steps >= limit and not reply.done
            info = {**reply.info, "episode_id": reply.episode_id, "frame": reply.frame,
                    "remote.connected": True}
            info.update(slot.session.info())
            infos[i] = info
            if reply.done or truncated[i]:
                slot.phase = Phase.NEEDS_RESET

    # Faults ---------------------------------------------------------------------------------

    def _stalled(self, slot: _Slot, now: float) -> bool:
        """No new frame for ``stall_frames`` periods (without tags: no message for
        :data:`TAGLESS_STALL_SECONDS`, and only from remotes that send heartbeats)."""
        return now - self._progress(slot, now) > self._stall_after(slot)

    def _stall_after(self, slot: _Slot) -> float:
        if slot.tags:
            return self.stall_frames / self.fps
        return TAGLESS_STALL_SECONDS

    def _progress(self, slot: _Slot, now: float) -> float:
        """When the slot last showed life (frames, or without tags, any message)."""
        session = slot.session
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

    def _lost_reason(self, slot: _Slot, now: float) -> str | None:
        """Why the slot cannot step any more, or None."""
        session = slot.session
        if session.replaced:
            return (
                "another env of this process connected to this remote and took its active "
                "slot (one agent per remote); this env's reset() takes it back"
            )
        if not session.connected:
            return session.error or "connection lost"
        silent = now - self._progress(slot, now)
        if silent > max(self.stall_timeout, self._stall_after(slot)):
            return (
                f"stalled: no new frame for {silent:.1f} s (stall_timeout={self.stall_timeout:g} s); "
                "the remote is hung, stopped or starved of CPU; reconnecting"
            )
        return None

    async def _lose_draining(
        self, slot: _Slot, reason: str, rewards: np.ndarray, terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> dict[str, Any]:
        """:meth:`_lose`, after letting a dying remote's rewarder deliver what it sent."""
        session = slot.session
        rewarder, vnc = session.rewarder, session.vnc
        if rewarder is not None and rewarder.connected and vnc is not None and not vnc.connected:
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while rewarder.connected and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        return self._lose(slot, reason, rewards, truncated, terminated)

    def _lose(
        self, slot: _Slot, reason: str, rewards: np.ndarray | None, truncated: np.ndarray | None,
        terminated: np.ndarray | None = None, result: EpisodeResult | None = None,
    ) -> dict[str, Any]:
        """End the slot's episode here (its last rewards included: ``result``, or popped
        now) and start bringing the remote back; the info of this step."""
        i, session = slot.index, slot.session
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
        if self.mode != LOCKSTEP:
            info["remote.stalled"] = reason.startswith("stalled")
        log.warning("remote %s: %s", session.name, reason)
        slot.phase = Phase.AWAY
        slot.error = reason
        slot.away_steps = 0
        slot.target = None
        if not self._closed:
            slot.reconnect = asyncio.get_running_loop().create_task(
                self._reconnect(slot), name=f"reconnect {session.name}"
            )
        return info

    def _away(self, slot: _Slot, truncated: np.ndarray | None) -> dict[str, Any]:
        """A step of a slot that is away: idle, or back (see the module docstring)."""
        back = _came_back(slot.reconnect)
        if back and slot.away_steps == 0 and not self._same_step:
            slot.reconnect = None
            self._baseline(slot)
            self._copy_frame(slot)
            info: dict[str, Any] = {
                "episode_id": slot.session.rewarder.episode_id if slot.session.rewarder else None,
                "remote.connected": True, "remote.reconnected": True,
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
        if self.mode != LOCKSTEP:
            info["remote.stalled"] = False
        return info

    async def _reconnect(self, slot: _Slot) -> bool:
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
                if await answers(session.address):
                    try:
                        async with asyncio.timeout(RECONNECT_ATTEMPT_TIMEOUT):
                            await session.connect(start_timeout=RECONNECT_ATTEMPT_TIMEOUT)
                            self._check_size(session)
                            await session.reset(
                                env_id=self.env_id, seed=slot.next_seed(), fps=self.requested_fps,
                                mode=session.mode_request(self.mode),
                            )
                        return True
                    except (RemoteUnavailable, TimeoutError, ValueError) as exc:
                        slot.error = f"reconnecting: {_reason(exc)}"
                        log.info("remote %s: %s", session.name, slot.error)
                        await session.close()
                await asyncio.sleep(RECONNECT_POLL)
        finally:
            await asyncio.gather(closing, return_exceptions=True)

    def _check_size(self, session: RemoteSession) -> None:
        frames = self._frames
        width, height = session.screen_size
        if frames is not None and frames.shape[1:3] != (height, width):
            raise ValueError(
                f"the screen is now {width}x{height}, not {frames.shape[2]}x{frames.shape[1]}: "
                "the remote serves another env; make a new env for it"
            )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the env is closed")


def _came_back(task: asyncio.Task[bool] | None) -> bool:
    """Whether a slot's reconnect task brought its remote back."""
    return (
        task is not None and task.done() and not task.cancelled()
        and task.exception() is None and task.result()
    )


def _reason(exc: BaseException, timeout: float | None = None) -> str:
    if isinstance(exc, TimeoutError) and timeout is not None:
        return f"stalled: no reply within stall_timeout={timeout:g} s; reconnecting"
    return str(exc) or type(exc).__name__


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
