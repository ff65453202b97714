"""A remote's game core: the runtime, its state machine, its counters and waiters, and
what moves them — resets, the lockstep step, the real-time tick, the error exit.

Holds :class:`GameCore`, the :class:`~envserver.players.Game` the seats' barrier drives
and the only writer of the remote's state (:mod:`envserver.state`), episode id and frame
counts. The other parts of a remote hold a core and name what they use of it
(:class:`envserver.recovery.Recovery`, :class:`envserver.restores.Restores`,
:class:`envserver.acting.Acting`); :class:`envserver.remote.Remote` builds them all.

- **Lockstep** (``serve --mode lockstep``, or a reset asking for it): the loop stands
  still and the active agent advances the runtime with a :class:`~envserver.orders.StepOrder`:
  exactly ``frames`` frames through :meth:`Runtime.advance`. **One way, two speeds**:
  one synchronous core — check, push inputs, advance, deliver, fire — done at once by
  :meth:`GameCore.step_now` when the step fits one slice (at most
  :data:`MAX_SLICE_SECONDS` at the last measured speed per frame, no action string, a
  runtime that advances in-process), and by :meth:`GameCore.step` around an advance in
  slices otherwise, yielding to the loop between them so pings and viewers are never held
  behind a long step. The reward goes to the stepper in its reply, and to observers.
- **Real time** (Universe's semantics): the process's ticker (:mod:`envserver.ticker`)
  calls :meth:`GameCore.tick_due` at ``fps``: one frame whether or not anyone acts, with
  the input that arrived since the last tick, served over VNC, its reward sent at most
  once, a new episode by itself after ``done`` (in a task of its own, so the other games
  of the process tick on meanwhile).
- **The error exit**: anything that raises between a reset's or a step's event and its
  completion gives the requester a :class:`~envserver.orders.Refused` and moves the
  machine by :meth:`~envserver.state.RemoteState.process_error` (:meth:`under_way_failed`):
  to ``recovering`` once something changed, else back. Entering ``recovering`` tells the
  :attr:`GameCore.fault_sinks` (the recovery part, which resets the runtime with backoff).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from rewarder.protocol import FRAME_INFO_KEY, MAX_FPS, MAX_SEED, MIN_FPS
from runtimes.base import InputEvent, Runtime, StepResult
from vncdriver.messages import FrameTag

from .inputs import REWARDER_SOURCE, Inputs
from .lockstep_frames import LockstepFrames
from .orders import LOCKSTEP, OBS_SHM, REALTIME, Refused, ResetOrder, StepOrder
from .players import Reply, address, agent_source
from .runtime_choice import check_reset, construct
from .state import Event, IllegalTransition, Progress, RemoteState, State
from .ticker import Ticker, shared_ticker

if TYPE_CHECKING:
    from rewarder.server import RewarderServer
    from vncdriver.server import VNCServer

log = logging.getLogger("envserver.remote")

#: Longest stretch a lockstep step runs the runtime without letting the event loop serve
#: others: pings, viewers and frames wait at most about this long (the target is 20 ms).
#: A step expected to fit it runs at once, in one piece (:meth:`GameCore.step_now`).
MAX_SLICE_SECONDS: Final = 0.005
#: The pause between two slices of a long lockstep step. A bare yield (``sleep(0)``) gives
#: the loop one turn, and answering a ping takes several (socket read, handler, write);
#: a short real sleep lets every chain finish (``python -m benchmarks long_step``).
SLICE_PAUSE_SECONDS: Final = 0.0005
#: How long a reset waits for an automatic reset or a recovery under way to finish.
MAX_RESET_WAIT: Final = 60.0


class GameCore:
    """One remote's runtime, state machine, counters and waiters; its episodes, steps and
    ticks. Built by :class:`envserver.remote.Remote`, which then :meth:`attach`-es the
    servers the core draws frames and sends rewards to."""

    #: The VNC server frames are served from (set by :meth:`attach`).
    vnc: VNCServer
    #: The rewarder server rewards, text and describes go to (set by :meth:`attach`).
    rewarder: RewarderServer
    #: Where a lockstep frame goes (shared memory, owed VNC updates; set by :meth:`attach`).
    lockstep_frames: LockstepFrames

    def __init__(
        self, runtime: Runtime, *, fps: float | None, mode: str,
        runtime_options: dict[str, Any], ticker: Ticker | None,
    ) -> None:
        if mode == LOCKSTEP and not runtime.lockstep:
            raise ValueError(f"{runtime.env_id} runs only in real time, not in lockstep")
        if fps is not None and not MIN_FPS <= fps <= MAX_FPS:
            raise ValueError(f"fps must be in [{MIN_FPS:g}, {MAX_FPS:g}], not {fps!r}")
        self.runtime = runtime
        #: Keyword arguments for the runtime, kept for runtimes a reset switches to.
        self.runtime_options = runtime_options
        self.fps = float(fps or runtime.fps)
        self.machine = RemoteState(mode)
        self.episode_id = 0
        #: Frames drawn since the remote started; never goes back.
        self.frame = 0
        self.episode_frame = 0
        #: Ticks that came too late to catch up (counted by the ticker).
        self.late_ticks = 0
        #: The input every source queued for the next frame.
        self.inputs = Inputs()
        #: Called with (episode id, result) after every advance, in either mode: how other
        #: front ends (the dm_env_rpc port) see rewards, text and ends as they happen.
        self.result_sinks: list[Callable[[int, StepResult], None]] = []
        #: Called with (episode id, seed, its text) once an episode's first frame is drawn
        #: (a recorder: ``envserver.recorder``).
        self.episode_sinks: list[Callable[[int, int, str | None], None]] = []
        #: Called with the player whose agent left, on either front end.
        self.leave_sinks: list[Callable[[int], None]] = []
        #: Called when a failure moved the remote to ``recovering`` (the recovery part).
        self.fault_sinks: list[Callable[[], None]] = []
        self._ticker = ticker
        self._seeds = np.random.default_rng()
        self._state_waiters: list[asyncio.Future[State]] = []  # resolved when the state moves
        self._frame_waiters: list[asyncio.Future[int]] = []
        #: Real time: the newest frame was played, not drawn (nobody read it; draw_owed).
        self._undrawn = False
        #: Frames per lockstep slice, aimed at MAX_SLICE_SECONDS from the last measured speed.
        self._slice_frames = 1
        #: Seconds per frame the last slice took (not measured yet).
        self._frame_seconds = float("inf")
        #: The runtime's ``announced_info`` values real-time clients were last sent.
        self._announced: dict[str, Any] = {}
        #: The new episode after a real-time ``done`` (its runtime may reset over I/O).
        self._next_episode: asyncio.Task[None] | None = None

    def attach(self, vnc: VNCServer, rewarder: RewarderServer) -> None:
        """Draw frames to ``vnc`` and send rewards, text and describes to ``rewarder``
        (the composition root builds them after the core: their callbacks are its parts')."""
        self.vnc, self.rewarder = vnc, rewarder
        self.lockstep_frames = LockstepFrames(
            self.serve_frame, wanted=vnc.wanted, screen=lambda: self.runtime.framebuffer
        )

    # What it is ---------------------------------------------------------------------------

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
        """The runtime's screen, the current frame drawn if it was owed (read it before
        the next frame is drawn)."""
        self.draw_owed()
        return self.runtime.framebuffer

    def draw_owed(self) -> None:
        """Draw and serve the frame played while nobody read frames (:meth:`tick_frame`):
        a VNC request or a front end's read of the screen gets the current frame."""
        if self._undrawn:
            self.runtime.draw()
            self.serve_frame()

    def serve_owed(self) -> None:
        """A VNC client asks for an update (the server's ``on_request``): the frame owed
        in real time (:meth:`draw_owed`) or in lockstep (``LockstepFrames.serve_owed``)."""
        self.draw_owed()
        self.lockstep_frames.serve_owed()

    # Lifecycle and clock ------------------------------------------------------------------

    async def start(self) -> None:
        """Start the runtime and draw the first episode's first frame."""
        await self.runtime.astart()
        self.fire(Event.RESET)
        await self.begin_episode(seed=None)
        self.fire(Event.RESET_DONE)

    def start_clock(self) -> None:
        """Tick in real time from now on (the event loop's shared ticker unless given one)."""
        if self._ticker is None:
            self._ticker = shared_ticker()
        self._clock_changed()

    def shut_down(self) -> None:
        """Closing: move to ``closing`` (once) and stop ticking."""
        if self.machine.state is not State.CLOSING:
            self.fire(Event.SHUTDOWN)
        if self._ticker is not None:
            self._ticker.discard(self)

    def tasks(self) -> list[asyncio.Task[None]]:
        """The tasks of the core's own still to cancel on close (a real-time new episode)."""
        return [self._next_episode] if self._next_episode is not None else []

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

    # The state machine --------------------------------------------------------------------

    def fire(self, event: Event) -> State:
        """Move the machine; an illegal event is the requester's :class:`Refused`."""
        try:
            state = self.machine.fire(event)
        except IllegalTransition as exc:
            raise Refused(str(exc)) from None
        if self._state_waiters:
            self._moved(state)
        return state

    def _moved(self, state: State) -> None:
        if not self._state_waiters:
            return
        waiters, self._state_waiters = self._state_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(state)

    async def settle(self) -> None:
        """Wait (bounded) until no automatic reset or recovery is under way (giving up
        moves the remote to ``closing``, which ends the wait too)."""
        deadline = time.monotonic() + MAX_RESET_WAIT
        while self.state in (State.STARTING, State.RESETTING, State.RECOVERING):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Refused(
                    f"the remote has been {self.state.value} for over {MAX_RESET_WAIT:g} s "
                    "(MAX_RESET_WAIT); try again later, or restart it"
                )
            changed = asyncio.get_running_loop().create_future()
            self._state_waiters.append(changed)
            await asyncio.wait([changed], timeout=remaining)

    # The error exit -----------------------------------------------------------------------

    def under_way_failed(self, progress: Progress, exc: BaseException) -> BaseException:
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
            self._error_exit(progress.changed)
            return exc
        said = exc.reason if isinstance(exc, Refused) else (
            f"{progress.env_id or self.runtime.env_id} failed in {progress.what} "
            f"({type(exc).__name__}: {exc})"
        )
        if not progress.changed:
            log.warning("%s (nothing had changed: back to %s)", said, self.mode)
            self._error_exit(changed=False)
            failure = Refused(f"{said}; nothing changed: send it again")
        else:
            log.error("%s", said, exc_info=exc)
            self._error_exit(changed=True)
            failure = Refused(
                f"{said}; the remote is recovering: wait for describe env_state 'running', "
                "then reset"
            )
        failure.__cause__ = exc
        return failure

    def runtime_failed(self, what: str, exc: Exception) -> None:
        """The runtime raised outside a reset or step under way (a tick): start recovering."""
        log.error("runtime %s failed in %s: %r", self.runtime.env_id, what, exc, exc_info=exc)
        self._error_exit(changed=True)

    def _error_exit(self, changed: bool) -> None:
        self._moved(self.machine.process_error(changed))
        if changed:
            for sink in self.fault_sinks:
                sink()
            self.rewarder.broadcast_describe()

    # Resets -------------------------------------------------------------------------------

    async def reset(self, order: ResetOrder, reply: Callable[..., None]) -> None:
        """A new episode (of another env, mode or fps if asked); ``reply(its id, body)``
        before the remote goes running (``body``: its first frame's number and, for
        ``obs="shm"`` in lockstep, the segment holding that frame). The front ends call it
        through the seats; :class:`Refused` says why not."""
        await self.settle()
        factory = check_reset(self.runtime, order)
        progress = Progress(self.fire(Event.RESET), "reset", changed=True)
        try:
            if factory is not None:
                self.fire(Event.ENV_SWITCH)
                # A failure now is of the env switched to, not of the one being left.
                progress.env_id = order.env_id
                progress.what = f"the switch to it from {self.runtime.env_id}"
                await self._switch_runtime(order, factory)
                progress.env_id, progress.what = None, "reset"
            if order.mode is not None and order.mode != self.mode:
                self.machine.switch_mode(order.mode)
                self._clock_changed()
            if order.fps is not None:
                self.set_fps(order.fps)
            self.episode_id = max(self.episode_id, order.episode_id or 0)
            await self.begin_episode(order.seed)
            body: dict[str, Any] = {"frame": self.frame}
            if order.obs == OBS_SHM and self.mode == LOCKSTEP:
                progress.what = "reset (handing its frame over)"
                body["shm"] = self.lockstep_frames.deliver(
                    order.obs, self.runtime.framebuffer, self.frame, self.episode_id
                )
            reply(self.episode_id, body)
            self.fire(Event.RESET_DONE)
        except BaseException as exc:
            raise self.under_way_failed(progress, exc)  # noqa: B904 (its cause is set)
        self.rewarder.broadcast_describe()

    async def _switch_runtime(self, order: ResetOrder, factory: Callable[..., Runtime]) -> None:
        runtime = construct(factory, order.env_id or "", self.runtime_options)
        if runtime.action_strings:  # the agent's observe property outlives the switch
            runtime.observe = self.runtime.observe
        # A failed start is the reset's error: recovery starts the new runtime.
        old, self.runtime = self.runtime, runtime
        if not await runtime.atake_over(old):  # (a browser keeps the old one's browser)
            await old.aclose()
            await runtime.astart()
        self.vnc.frame_ready(runtime.framebuffer)
        if order.fps is None:
            self.fps = float(runtime.fps)
            self._clock_changed()

    async def begin_episode(self, seed: int | None) -> None:
        """Move to a new episode id, tell everyone, and reset the runtime under ``seed``."""
        self.episode_id += 1
        self.rewarder.broadcast_describe()
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        else:
            seed = int(self._seeds.integers(MAX_SEED))
        self.inputs.clear()
        self.episode_frame = 0
        self.runtime.mode = self.mode
        await self.runtime.areset(seed)
        text = self.runtime.instruction()
        for episode_sink in self.episode_sinks:
            episode_sink(self.episode_id, seed, text)
        if text is not None:
            self.rewarder.broadcast_text(self.episode_id, text)
        observation = self.runtime.take_observation()  # (a page's, when asked for)
        if observation is not None:
            self.rewarder.broadcast_observation(self.episode_id, {**observation, "frame": self.frame})
        self.serve_frame()

    def branch(self, episode_frame: int) -> int:
        """A restored state is on screen: its branch's new episode id (returned), input
        cleared but what the game holds (the agent that restored holds it now, and lets go
        of it if it leaves: else a key would stay down), the episode's frame count the
        snapshot's."""
        self.episode_id += 1
        self.inputs.clear()
        keys, pointer = self.runtime.held_input()
        if keys or pointer[2]:
            self.inputs.hold(REWARDER_SOURCE, keys, pointer)
        self.episode_frame = episode_frame
        return self.episode_id

    # The lockstep step: one core, two speeds ----------------------------------------------

    def step_now(self, order: StepOrder) -> Reply | None:
        """The whole of a lockstep step at once, if it fits one slice; None having done
        nothing if it does not (an action string, a runtime that awaits its advance, a
        state that does not take a step now, or more frames than one slice holds): then
        :meth:`step`. :class:`Refused` refuses it. Not for joint steps (the seats'
        barrier gathers those: :meth:`~envserver.players.Seats.joint`)."""
        runtime = self.runtime
        if (
            order.frames > self._slice_frames or order.web is not None
            or runtime.async_advance or not self.machine.allows(Event.STEP)
        ):
            return None
        self._check_episode("episode", order.episode_id)  # (_check_step's one-player case)
        inputs = self.inputs
        events = inputs.checked(runtime, order.events)
        progress = Progress(self.fire(Event.STEP), "step", changed=False)
        try:
            taken = inputs.push_take(agent_source(order.player), events)
            progress.changed = True  # from here on frames are drawn
            into = order.into
            # A batch step's slot, or this game's own segment: the runtime may draw there.
            target = (into[0].pixels(into[1]) if into is not None
                      else self.lockstep_frames.target(order.obs, runtime.frame_shape))
            runtime.into = target
            try:
                result = self._advance_slice(order.frames, taken)
            finally:
                drawn = target is not None and runtime.into is None
                runtime.into = None
            return self._step_done(order, result, progress, drawn)
        except BaseException as exc:
            raise self.under_way_failed(progress, exc)  # noqa: B904 (its cause is set)

    async def step(self, order: StepOrder, others: Mapping[int, StepOrder] | None = None) -> Reply:
        """Lockstep: apply the events, advance exactly ``frames`` frames (in slices when
        they take long), serve the frame; ``order.player``'s reply. ``others``: the other
        seated players' orders of a joint step (player -> order), applied in the same
        frames. The front ends call it through the seats; :class:`Refused` refuses."""
        checked = self._check_step(order, others)
        progress = Progress(self.fire(Event.STEP), "step", changed=False)
        try:
            self._push(checked)
            progress.changed = True
            if order.web is not None:  # before the frames; the runtime reports it
                source = agent_source(order.player)
                await self.runtime.arun_action(
                    order.web, lambda events: self.inputs.push(source, events)
                )
            result = await self._advance_sliced(order.frames)
            return self._step_done(order, result, progress)
        except BaseException as exc:
            raise self.under_way_failed(progress, exc)  # noqa: B904 (its cause is set)

    def _check_step(
        self, order: StepOrder, others: Mapping[int, StepOrder] | None
    ) -> dict[int, list[InputEvent]]:
        """Each player's events checked as runtime input; :class:`Refused` for a stale
        episode, a bad event or an action string the runtime cannot run."""
        if not others:  # (one player's step: no dict of orders to sort)
            self._check_episode("episode", order.episode_id)
            checked = {order.player: Inputs.check_action(self.runtime, order.events)}
        else:
            checked = {}
            for who, asked in sorted({**others, order.player: order}.items()):
                self._check_episode(f"player {who} stepped episode", asked.episode_id)
                checked[who] = Inputs.check_action(self.runtime, asked.events)
        if order.web is not None and not self.runtime.action_strings:
            raise Refused(
                f"{self.runtime.env_id} takes input events, not action strings: those are "
                "for browser remotes (miniwob.*)"
            )
        return checked

    def _check_episode(self, whose: str, episode_id: int | None) -> None:
        if episode_id is not None and episode_id != self.episode_id:
            raise Refused(
                f"{whose} {episode_id} is not the current one ({self.episode_id}); "
                "step with the episode id of the last reset"
            )

    def _push(self, checked: Mapping[int, list[InputEvent]]) -> None:
        for who, events in checked.items():
            self.inputs.push(agent_source(who), events)

    def _step_done(
        self, order: StepOrder, result: StepResult, progress: Progress, drawn: bool = False
    ) -> Reply:
        """The end of every step: hand the frame over, tell observers, fire its event;
        the reply. ``drawn``: the runtime drew the frame into the batch's slot (or the
        game's own segment) itself."""
        progress.what = "step (handing its frame over)"
        shm = self.lockstep_frames.deliver(
            order.obs, None if drawn else self.runtime.framebuffer, self.frame,
            self.episode_id, order.into,
        )
        info = {**result.info, FRAME_INFO_KEY: self.frame}
        if result.reward or result.done or (result.rewards and any(result.rewards)):
            progress.what = "step (sending its reward to observers)"
            self.rewarder.broadcast_reward(
                self.episode_id, result.reward, result.done, info, observers_only=True,
                rewards=result.rewards,
            )
        self.fire(Event.EPISODE_DONE if result.done else Event.STEP_DONE)
        body = {"reward": result.reward, "done": result.done, "info": info, "frame": self.frame}
        if result.rewards is not None:
            address(result, body, order.player)
        if shm is not None:
            body["shm"] = shm
        return self.episode_id, body

    def _advance_slice(self, frames: int, events: Sequence[InputEvent]) -> StepResult:
        """Advance up to ``frames`` frames in one piece, and aim the next slice at
        :data:`MAX_SLICE_SECONDS` from the faster of this slice's and the last one's speed
        per frame: one slice the machine preempted must not send the next one-slice step
        down the sliced path."""
        started = time.perf_counter()
        result = self._advanced(self.runtime.advance(events, frames))  # (_advance, inline)
        per_frame = (time.perf_counter() - started) / max(result.frames, 1)
        fastest = min(per_frame, self._frame_seconds)
        self._frame_seconds = per_frame
        self._slice_frames = max(1, int(MAX_SLICE_SECONDS / max(fastest, 1e-7)))
        return result

    async def _advance_sliced(self, frames: int) -> StepResult:
        """Lockstep: advance ``frames`` frames in slices of about :data:`MAX_SLICE_SECONDS`,
        yielding to the event loop between them (one piece would hold pings for the whole
        step: ``python -m benchmarks long_step``)."""
        events = self.inputs.take()
        if self.runtime.async_advance:  # it awaits its I/O: the loop is free meanwhile
            return self._advanced(await self.runtime.aadvance(events, frames))
        total = StepResult(frames=0)
        remaining = frames
        while remaining > 0:
            result = self._advance_slice(min(remaining, self._slice_frames), events)
            events = []
            total.add(result)
            remaining -= result.frames
            if result.done or result.frames == 0:  # (a runtime that cannot go on: never spin)
                break
            if remaining > 0:
                await asyncio.sleep(SLICE_PAUSE_SECONDS)
        return total

    # Frames -------------------------------------------------------------------------------

    def serve_frame(self, frame: np.ndarray | None = None) -> None:
        """Serve the frame just drawn (or ``frame``, a copy of it), tagged with its
        number, episode and time. A copy (an agent steps through shared memory) is served
        without the runtime's damage: nobody would read it, and a runtime whose damage is
        not taken stops working it out."""
        tag = FrameTag(self.frame, self.episode_id, time.time())
        self._undrawn = False
        if frame is None:
            self.vnc.frame_ready(self.runtime.framebuffer, tag=tag, damage=self.runtime.take_damage())
        else:
            self.vnc.frame_ready(frame, tag=tag, damage=None)

    def _advance(self, frames: int, events: Sequence[Any]) -> StepResult:
        """Advance the runtime; count its frames; send its text/observation."""
        return self._advanced(self.runtime.advance(events, frames))

    def _advanced(self, result: StepResult) -> StepResult:
        """Count the frames the runtime advanced, tell the sinks, send its text/observation."""
        self.frame += result.frames
        self.episode_frame += result.frames
        for sink in self.result_sinks:
            sink(self.episode_id, result)
        if self._frame_waiters:
            self._frame_drawn()
        if result.text is not None:
            self.rewarder.broadcast_text(self.episode_id, result.text)
        if result.observation is not None:
            observation = result.observation
            if isinstance(observation, dict):  # which frame it describes
                observation = {**observation, "frame": self.frame}
            self.rewarder.broadcast_observation(self.episode_id, observation)
        return result

    async def wait_frame(self, after: int | None = None) -> int:
        """Wait until a frame past ``after`` (default: the current one) is drawn; its number."""
        after = self.frame if after is None else after
        while self.frame <= after:
            waiter = asyncio.get_running_loop().create_future()
            self._frame_waiters.append(waiter)
            await waiter
        return self.frame

    def _frame_drawn(self) -> None:
        if not self._frame_waiters:
            return
        waiters, self._frame_waiters = self._frame_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(self.frame)

    # Real time ----------------------------------------------------------------------------

    async def tick(self) -> None:
        """Real time: advance one frame, serve it, report its reward, restart after done.
        A tick is complete when it returns (``TICK`` leaves the remote running); what
        raises in it takes the error exit (as :meth:`tick_due` does)."""
        if self.tick_frame():
            await self._begin_next_episode()

    def tick_due(self) -> None:
        """The ticker's call (:mod:`envserver.ticker`): one real-time frame, if the remote
        is running; a new episode after ``done`` in a task of its own. Never raises: what
        the runtime raises is this game's failure alone (it recovers), and the ticker goes
        on to the next game."""
        if not self.machine.allows(Event.TICK):  # resetting, recovering, closing
            return
        try:
            if self.tick_frame():
                self._next_episode = asyncio.get_running_loop().create_task(
                    self._next_episode_task()
                )
        except Exception as exc:  # a runtime bug must not take the servers down
            if self.state is not State.CLOSING:
                self.runtime_failed("step", exc)

    async def _next_episode_task(self) -> None:
        try:
            await self._begin_next_episode()
        except Exception as exc:
            if self.state is not State.CLOSING:
                self.runtime_failed("reset", exc)

    async def _begin_next_episode(self) -> None:
        """Real time, after ``done``: the next episode, at once."""
        await self.begin_episode(seed=None)
        self.fire(Event.RESET_DONE)
        self.rewarder.broadcast_describe()

    def tick_frame(self) -> bool:
        """Real time: advance one frame, serve it, report its reward; whether the episode
        ended (the remote is then resetting: :meth:`_begin_next_episode` follows). A frame
        nobody reads (no VNC request out, nobody hearing each result) is played, not
        drawn: :meth:`draw_owed` draws it when it is asked for (issue 44)."""
        self.fire(Event.TICK)
        taken = self.inputs.take()  # (recorded as this frame's, forwarded or not)
        runtime = self.runtime
        events = () if runtime.forwards_input else taken
        if runtime.draws_on_demand and not self.result_sinks and not self.vnc.wanted():
            result = self._advanced(runtime.play(events, 1))
            self._undrawn = True
        else:
            result = self._advance(1, events)
            self.serve_frame()
        announced = {k: result.info[k] for k in self.runtime.announced_info if k in result.info}
        if (
            result.reward or result.done or (result.rewards and any(result.rewards))
            or announced != self._announced  # a life lost tells the agent, reward or not
        ):
            self._announced = announced
            info = {**result.info, FRAME_INFO_KEY: self.frame}
            self.rewarder.broadcast_reward(
                self.episode_id, result.reward, result.done, info, rewards=result.rewards
            )
        if result.done:
            self.fire(Event.EPISODE_DONE)
            return True
        return False
