"""The remote process: one runtime, its game loop, and the servers that expose it.

Holds :class:`Remote`, the composition root of a remote. Its state lives in one place,
:class:`envserver.state.RemoteState`; every method here fires the machine's events and
acts on what comes out.

- **Real time** (Universe's semantics): the process's ticker (:mod:`envserver.ticker`,
  one timer per fps for every game of the process) advances the runtime one frame per
  tick at ``fps`` whether or not anyone acts, applies the input that arrived since the last
  tick (from VNC and ``v0.agent.action`` alike), serves each frame over VNC, sends each
  tick's reward at most once, and resets by itself after ``done`` (in a task of its own,
  so the other games of the process tick on meanwhile).
- **Lockstep** (``serve --mode lockstep``, or a reset asking for it): the loop stands
  still and the active client advances the runtime with ``v0.env.step``: exactly
  ``frames`` frames through :meth:`Runtime.advance`, in slices of at most
  :data:`MAX_SLICE_SECONDS` so pings and viewers are never held behind a long step. The
  reward goes to the stepper in its reply, and to observers as ``v0.env.reward``.
- **Failures** never wedge it: anything that raises between a reset's or a step's event
  and its completion (the runtime in reset, step, advance or an env switch; the frame's
  hand-off to shared memory or VNC; a send) gives the requester a ``v0.reply.error`` and
  moves the remote to ``recovering`` (or back to ``running`` if nothing changed yet),
  where it resets the runtime with backoff; after :data:`MAX_RUNTIME_FAILURES` failures
  in a row :attr:`Remote.failed` resolves and ``serve`` exits non-zero.
- **Front ends** step and reset through :class:`~envserver.players.Seats`, the barrier
  of multi-player lockstep, which calls :meth:`Remote.step` and :meth:`Remote.reset` once
  per (joint) request; the rewarder's view is :class:`RewarderFront`, which also reads a
  reset without ``mode`` (all Universe's client sends) as asking for real time.
- **Heartbeat**: a ``v0.env.describe`` at least every :data:`HEARTBEAT_INTERVAL` seconds,
  so a client can tell an idle remote from a stalled one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from rewarder import protocol
from rewarder.errors import BadRequest
from rewarder.lograte import RateLimitedLog
from rewarder.protocol import FRAME_INFO_KEY, HEARTBEAT_INTERVAL
from rewarder.server import PLAYER, RewarderServer
from runtimes import registry
from runtimes.base import Runtime, StepResult
from vncdriver.messages import FrameTag
from vncdriver.server import MAX_VIEWERS, VNCServer

from .front_ends import start_dm_env_rpc, start_viewer
from .inputs import REWARDER_SOURCE, Inputs
from .lockstep_frames import LockstepFrames
from .players import Reply, Seats, address, agent_source, check_passwords, source_player
from .properties import Properties, PropertyError, remote_properties
from .runtime_choice import check_reset, construct
from .state import Event, IllegalTransition, RemoteState, State
from .throttle import AuthThrottle
from .ticker import MAX_CATCH_UP_FRAMES, Ticker, shared_ticker
from .version import PROTOCOLS, server_version

if TYPE_CHECKING:
    from rewarder.tls import ServerTLS

    from .dmrpc.server import DmEnvRpcServer
    from .viewer import Viewer

log = logging.getLogger(__name__)

#: Read once: describes go out every few seconds to every client.
SERVER_VERSION: Final = server_version()

#: Seconds before retrying a recovery reset that failed, doubling up to the max.
RECOVER_DELAY: Final = 0.5
MAX_RECOVER_DELAY: Final = 8.0
#: Runtime failures in a row (no good frame in between) before the remote gives up and
#: ``serve`` exits non-zero, so a supervisor restarts it instead of a dead game being served.
MAX_RUNTIME_FAILURES: Final = 5
#: What the ``observe`` property may ask a browser remote for (docs/browser.md).
OBSERVATIONS: Final = frozenset({"elements", "tree"})
__all__ = ["MAX_CATCH_UP_FRAMES", "MAX_RUNTIME_FAILURES", "Remote", "RewarderFront"]
#: Longest stretch a lockstep step runs the runtime without letting the event loop serve
#: others: pings, viewers and frames wait at most about this long (the target is 20 ms).
MAX_SLICE_SECONDS: Final = 0.005
#: The pause between two slices of a long lockstep step. A bare yield (``sleep(0)``) gives
#: the loop one turn, and answering a ping takes several (socket read, handler, write):
#: measured, pings still waited ~50 ms. A short real sleep lets every chain finish.
SLICE_PAUSE_SECONDS: Final = 0.0005
#: How long a reset waits for an automatic reset or a recovery under way to finish.
MAX_RESET_WAIT: Final = 60.0


@dataclasses.dataclass(slots=True)
class _Progress:
    """How far a reset or step under way got: the state its event moved the remote to,
    what it is doing, and whether anything has changed (frames drawn, an episode begun)
    that a failure now cannot take back."""

    state: State
    what: str
    changed: bool


class Remote:
    """Serves one runtime over VNC and the rewarder (and, if asked, a browser viewer).

    ``await remote.start(...)`` binds the ports and starts the game loop;
    ``await remote.close()`` tells clients why and stops.
    """

    def __init__(
        self,
        env: str | Runtime,
        *,
        fps: float | None = None,
        password: str | None = None,
        view_only_password: str | None = None,
        mode: str = protocol.REALTIME,
        runtime_options: dict[str, Any] | None = None,
        allow_origins: Sequence[str] = (),
        auth_throttle: AuthThrottle | None = None,
        max_viewers: int = MAX_VIEWERS,
        tls: ServerTLS | None = None,
        player_passwords: Mapping[int, str] | None = None,
        ticker: Ticker | None = None,
    ) -> None:
        """Serve ``env``: an env id from the registry, or a runtime instance of your own.

        ``password`` guards both channels (VNC uses its first 8 characters);
        ``view_only_password`` lets VNC viewers watch without their input reaching the game.
        ``runtime_options`` are keyword arguments for the runtime (``{"scale": 2}``), kept
        for runtimes a reset switches to. ``allow_origins`` names web pages whose
        WebSocket handshakes the rewarder accepts (any other page is refused). One
        ``auth_throttle`` (default: a new :class:`AuthThrottle`) counts wrong passwords on
        every port. ``tls`` (:func:`rewarder.tls.server_tls`) serves every port over TLS:
        ``wss://``, ``https://``, VeNCrypt, gRPC with TLS. ``player_passwords`` (a
        multi-player env): player -> the VNC password whose viewers drive that player.
        ``ticker``: the real-time clock (default: the event loop's, which every remote of
        the process shares: one wake-up per frame for all of them).
        """
        if mode not in protocol.MODES:
            raise ValueError(f"mode must be one of {protocol.MODES}, not {mode!r}")
        self.runtime_options = dict(runtime_options or {})
        self.runtime: Runtime = (
            construct(registry.lookup(env), env, self.runtime_options) if isinstance(env, str) else env
        )
        if mode == protocol.LOCKSTEP and not self.runtime.lockstep:
            raise ValueError(f"{self.runtime.env_id} runs only in real time, not in lockstep")
        if fps is not None and not protocol.MIN_FPS <= fps <= protocol.MAX_FPS:
            raise ValueError(
                f"fps must be in [{protocol.MIN_FPS:g}, {protocol.MAX_FPS:g}], not {fps!r}"
            )
        self.fps = float(fps or self.runtime.fps)
        self.machine = RemoteState(mode)
        self.episode_id = 0
        self.frame = 0  # frames drawn since the remote started; never goes back
        self.episode_frame = 0
        self.late_ticks = 0
        #: The runtime's ``announced_info`` values real-time clients were last sent.
        self._announced: dict[str, Any] = {}
        self.runtime_failures = 0  # in a row; a good frame sets it back to 0
        self.inputs = Inputs()
        self.inputs.player_of = self._player_of
        self.inputs.on_queue = self._input_queued
        self._notes = RateLimitedLog(log)  # one line per kind of trouble per interval
        player_passwords = check_passwords(
            self.runtime.env_id, self.runtime.players, player_passwords, password
        )
        #: Called with the player whose agent left, on either front end.
        self.leave_sinks: list[Callable[[int], None]] = []
        #: Who holds each player of a multi-player runtime, and the barrier in front of
        #: :meth:`step` and :meth:`reset` that the front ends go through (the remote
        #: only reads who holds what, for describe).
        self.seats = Seats(self, rewarder_holder=self._rewarder_holder)
        self.auth_throttle = auth_throttle or AuthThrottle()
        self.tls = tls
        self.rewarder = RewarderServer(
            RewarderFront(self), password=password, allow_origins=allow_origins,
            auth_guard=self.auth_throttle,
            held_by=lambda: self.held_by(), tls=tls.context if tls else None,
            players=lambda: self.runtime.players, seat_held_by=self.seats.held_elsewhere,
        )
        self.password, self.view_only_password = password, view_only_password
        #: The VNC server every runtime's screen is served from (an X program's too).
        self.vnc = VNCServer(
            self.runtime.framebuffer,
            name=self.runtime.env_id,
            password=password,
            view_only_password=view_only_password,
            on_input=self._vnc_input,
            on_disconnect=self._vnc_left,
            auth_guard=self.auth_throttle,
            max_viewers=max_viewers,
            tls=tls.context if tls is not None else None,
            player_passwords=player_passwords,
        )
        self.vnc_port: int | None = None
        #: The browser viewer (``start(http_port=...)``), or None.
        self.viewer: Viewer | None = None
        #: The dm_env_rpc port (``start(dm_env_rpc_port=...)``), or None.
        self.dm_env_rpc: DmEnvRpcServer | None = None
        #: Resolves with the reason when the runtime failed past recovery (set in start).
        self.failed: asyncio.Future[str]
        self._ticker = ticker
        self._seeds = np.random.default_rng()
        self._tasks: list[asyncio.Task[None]] = []
        self._recovery: asyncio.Task[None] | None = None
        self._acts: set[asyncio.Task[None]] = set()  # action strings, settling actions
        self._acting = asyncio.Lock()  # one at a time, in the order they came
        #: The new episode after a real-time ``done`` (its runtime may reset over I/O).
        self._next_episode: asyncio.Task[None] | None = None
        self._frame_waiters: list[asyncio.Future[int]] = []
        self._state_waiters: list[asyncio.Future[State]] = []  # resolved when the state moves
        self._slice_frames = 1  # frames per lockstep slice, adapted to MAX_SLICE_SECONDS
        #: A step's frame over VNC or through shared memory (the step's ``obs``).
        self.lockstep_frames = LockstepFrames(self._frame_ready)
        #: Called with (episode id, result) after every advance, in either mode: how other
        #: front ends (the dm_env_rpc port) see rewards, text and ends as they happen.
        self.result_sinks: list[Callable[[int, StepResult], None]] = []
        #: Called with (episode id, seed, its text) once an episode's first frame is drawn
        #: (a recorder: ``envserver.recorder``).
        self.episode_sinks: list[Callable[[int, int, str | None], None]] = []
        #: Says which agent of another front end holds the remote (None: none does); the
        #: rewarder refuses agents meanwhile.
        self.held_by: Callable[[], str | None] = lambda: None
        #: What ``v0.env.properties.*`` (and the dm_env_rpc extension) read and write.
        self.property_table = Properties(remote_properties(self))

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

    def agent(self) -> str | None:
        """Who drives the remote now: an agent on the rewarder, or one another front end
        names through :attr:`held_by` (dm_env_rpc and OpenEnv ask before theirs drive)."""
        if self.rewarder.active is not None:
            return "an agent on the rewarder port"
        return self.held_by()

    def set_observe(self, value: str) -> None:
        """Which page observations to send (``"elements,tree"``; ``""``: none)."""
        wanted = frozenset(part.strip() for part in value.split(",") if part.strip())
        unknown = wanted - OBSERVATIONS
        if unknown:
            raise ValueError(
                f"observe takes a comma list of {', '.join(sorted(OBSERVATIONS))}, not "
                f"{', '.join(sorted(unknown))}"
            )
        if wanted and not self.runtime.action_strings:
            raise ValueError(f"{self.env_id} has no page to observe (browser remotes do)")
        self.runtime.observe = wanted

    def set_fps(self, fps: float) -> None:
        """Change the real-time rate now (the game loop does not finish a sleep at the old one)."""
        if not protocol.MIN_FPS <= fps <= protocol.MAX_FPS:
            raise ValueError(f"fps must be in [{protocol.MIN_FPS:g}, {protocol.MAX_FPS:g}], not {fps!r}")
        self.fps = float(fps)
        self._clock_changed()

    @property
    def held_keys(self) -> set[str]:
        """Keys some source holds down now (as the runtime will see them at the next frame)."""
        return self.inputs.held_keys

    # Lifecycle ---------------------------------------------------------------------------

    async def start(
        self,
        host: str = "127.0.0.1",
        rewarder_port: int = 15900,
        vnc_port: int = 5900,
        http_port: int | None = None,
        dm_env_rpc_port: int | None = None,
    ) -> None:
        """Bind the ports (0 picks a free one) and start the game loop.

        With ``http_port`` the remote also serves its screen to browsers (view-only noVNC
        at ``/viewer/``, :mod:`envserver.viewer`); with ``dm_env_rpc_port``, to
        dm_env_rpc agents over gRPC (:mod:`envserver.dmrpc`, the ``dmenv`` extra).
        """
        loop = asyncio.get_running_loop()
        self.failed = loop.create_future()
        await self.runtime.astart()
        self._fire(Event.RESET)
        await self._begin_episode(seed=None)
        self._fire(Event.RESET_DONE)
        await self.rewarder.start(host, rewarder_port)
        try:
            await self.vnc.start(host, vnc_port)
            self.vnc_port = self.vnc.port
            if http_port is not None:
                self.viewer = await start_viewer(self, host, http_port)
                self.rewarder.viewer_port = self.viewer.port
            if dm_env_rpc_port is not None:
                self.dm_env_rpc = await start_dm_env_rpc(self, host, dm_env_rpc_port)
        except (OSError, ValueError):
            failures = await self._close_parts("the remote failed to start")
            for name, exc in failures:
                log.error("closing %s after a failed start failed: %r", name, exc, exc_info=exc)
            raise
        if self._ticker is None:
            self._ticker = shared_ticker()
        self._tasks = [loop.create_task(self._heartbeat())]
        self._clock_changed()

    async def close(self, reason: str = "the remote is shutting down") -> None:
        """Stop the tasks and close every part — servers, the shared-memory segment, the
        runtime (Chromium's, Xvnc's processes) — even when one of them raises; then raise
        the first such error (each is logged)."""
        if self.state is not State.CLOSING:
            self._fire(Event.SHUTDOWN)
        if self._ticker is not None:
            self._ticker.discard(self)
        tasks = [
            *self._tasks, *self._acts, *(t for t in (self._recovery, self._next_episode) if t)
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        failures = await self._close_parts(reason)
        for name, exc in failures:
            log.error("closing %s failed: %r", name, exc, exc_info=exc)
        if failures:
            raise failures[0][1]

    async def _close_parts(self, reason: str) -> list[tuple[str, BaseException]]:
        """Close the servers at once, then the segment and the runtime, whatever raises;
        the parts that raised, and what."""
        parts: list[tuple[str, Awaitable[None]]] = [
            ("the rewarder", self.rewarder.close(reason)), ("the VNC server", self.vnc.close()),
        ]
        if self.viewer is not None:
            parts.append(("the browser viewer", self.viewer.close(reason)))
        if self.dm_env_rpc is not None:
            parts.append(("the dm_env_rpc port", self.dm_env_rpc.close()))
        outcomes = await asyncio.gather(*(close for _, close in parts), return_exceptions=True)
        failures = [
            (name, outcome) for (name, _), outcome in zip(parts, outcomes, strict=True)
            if isinstance(outcome, BaseException)
        ]
        try:
            self.lockstep_frames.close()
        except Exception as exc:
            failures.append(("the shared-memory segment", exc))
        try:
            await self.runtime.aclose()
        except Exception as exc:
            failures.append((f"the runtime {self.runtime.env_id}", exc))
        self._notes.close()
        return failures

    # What the front ends drive (steps and resets through the seats' barrier) ------------

    def describe(self) -> dict[str, Any]:
        return {
            "env_id": self.runtime.env_id,
            "env_state": self.state.wire,
            "fps": self.fps,
            "mode": self.mode,
            "frame": self.frame,
            # Beyond Universe: the precise state and how the game loop keeps time.
            "remote_state": self.state.value,
            "late_ticks": self.late_ticks,
            # Our VNC server tags updates with frame numbers (vncdriver FRAME_TAG).
            "frame_tags": True,
            "server_version": SERVER_VERSION,
            "protocols": PROTOCOLS,
            "seats": self.seats.describe(),
            **self.runtime.describe(),
        }

    async def reset(self, request: protocol.ResetRequest, reply: Callable[..., None]) -> None:
        """A new episode (of another env, mode or fps if asked); ``reply(its id, body)``
        before the remote goes running (``body``: its first frame's number and, for
        ``obs="shm"`` in lockstep, the segment holding that frame). The front ends call it
        through :attr:`seats`."""
        mid = request.message_id
        await self._settle(mid)
        factory = check_reset(self.runtime, request)
        progress = _Progress(self._fire(Event.RESET, mid), "reset", changed=True)
        try:
            if factory is not None:
                self._fire(Event.ENV_SWITCH, mid)
                await self._switch_runtime(request, factory)
            if request.mode is not None and request.mode != self.mode:
                self.machine.switch_mode(request.mode)
                self._clock_changed()
            if request.fps is not None:
                self.set_fps(request.fps)
            self.episode_id = max(self.episode_id, request.episode_id or 0)
            await self._begin_episode(request.seed)
            body: dict[str, Any] = {"frame": self.frame}
            if request.obs == protocol.OBS_SHM and self.mode == protocol.LOCKSTEP:
                progress.what = "reset (handing its frame over)"
                body["shm"] = self.lockstep_frames.deliver(
                    request.obs, self.runtime.framebuffer, self.frame, self.episode_id, mid
                )
            reply(self.episode_id, body)
            self._fire(Event.RESET_DONE)
        except BaseException as exc:
            raise self._under_way_failed(progress, exc, mid)  # noqa: B904 (its cause is set)
        self.rewarder.broadcast_describe()

    async def step(
        self, request: protocol.StepRequest,
        others: Mapping[int, protocol.StepRequest] | None = None,
    ) -> Reply:
        """Lockstep: apply the events, advance exactly ``frames`` frames, serve the frame;
        the requester's (:data:`~rewarder.server.PLAYER`) reply. ``others``: the other
        seated players' requests of a joint step (player -> request), applied in the same
        frames. The front ends call it through :attr:`seats`."""
        mid = request.message_id
        player = PLAYER.get()
        requests = {**(others or {}), player: request}
        checked = {}
        for who, asked in sorted(requests.items()):
            if asked.episode_id is not None and asked.episode_id != self.episode_id:
                whose = f"player {who} stepped episode" if others else "episode"
                raise BadRequest(
                    f"{whose} {asked.episode_id} is not the current one ({self.episode_id}); "
                    "step with the episode id of the last reset",
                    mid,
                )
            checked[who] = Inputs.check_action(self.runtime, asked.events, mid)
        if request.web is not None and not self.runtime.action_strings:
            raise BadRequest(
                f"{self.runtime.env_id} takes input events, not action strings: those are "
                "for browser remotes (miniwob.*)", mid,
            )
        progress = _Progress(self._fire(Event.STEP, mid), "step", changed=False)
        try:
            for who, events in checked.items():
                self.inputs.push(agent_source(who), events)
            progress.changed = True  # from here on frames are drawn
            if request.web is not None:  # before the frames; the runtime reports it
                await self.runtime.arun_action(
                    request.web, lambda events: self.inputs.push(agent_source(player), events)
                )
            result = await self._advance_sliced(request.frames)
            progress.what = "step (handing its frame over)"
            shm = self.lockstep_frames.deliver(
                request.obs, self.runtime.framebuffer, self.frame, self.episode_id, mid
            )
            info = {**result.info, FRAME_INFO_KEY: self.frame}
            if result.reward or result.done or (result.rewards and any(result.rewards)):
                progress.what = "step (sending its reward to observers)"
                self.rewarder.broadcast_reward(
                    self.episode_id, result.reward, result.done, info, observers_only=True,
                    rewards=result.rewards,
                )
            self._fire(Event.EPISODE_DONE if result.done else Event.STEP_DONE)
        except BaseException as exc:
            raise self._under_way_failed(progress, exc, mid)  # noqa: B904 (its cause is set)
        body = {"reward": result.reward, "done": result.done, "info": info, "frame": self.frame}
        address(result, body, player)
        if shm is not None:
            body["shm"] = shm
        return self.episode_id, body

    def action(self, request: protocol.ActionRequest) -> None:
        """Real time: queue the events for the next frame; an action string, or a
        request to be told when the screen settles, runs as a task of its own whose end
        the agent hears as a ``v0.env.observation`` with ``action_id`` (docs/browser.md)."""
        runtime, source = self.runtime, agent_source(PLAYER.get())
        if request.web is not None and not runtime.action_strings:
            raise BadRequest(
                f"{runtime.env_id} takes input events, not action strings like "
                f"{request.web[:40]!r}: those are for browser remotes (miniwob.*)",
                request.message_id,
            )
        if request.settle and not runtime.settles:
            raise BadRequest(
                f"{runtime.env_id} cannot tell when its screen settles: 'settle' is for "
                "browser and desktop remotes (miniwob.*, x11.*)", request.message_id,
            )
        self.inputs.push_action(runtime, request.events, request.message_id, source)
        if request.web is not None or request.settle:
            task = asyncio.get_running_loop().create_task(self._act(request, source))
            self._acts.add(task)
            task.add_done_callback(self._acts.discard)

    async def _act(self, request: protocol.ActionRequest, source: object) -> None:
        """:meth:`act`, then tell everyone what happened, with the frame it shows (filed
        under the episode that frame belongs to: an action that ended its episode is
        answered with the next one's first page, as the real-time screen shows it)."""
        body = await self.act(request, source)
        self.rewarder.broadcast_observation(self.episode_id, body)

    async def act(self, request: protocol.ActionRequest, source: object = None) -> dict[str, Any]:
        """Real time: run an action string (its events already queued are the caller's)
        and/or wait for the screen to settle, one at a time; what happened (the
        ``v0.env.observation`` body: ``action_id``, ``frame``, ``last_action*``,
        ``settle``, the page if asked for)."""
        source = source if source is not None else agent_source(PLAYER.get())
        async with self._acting:
            runtime = self.runtime
            body: dict[str, Any] = {"action_id": request.message_id}
            try:
                if request.web is not None:
                    body.update(await runtime.arun_action(
                        request.web, lambda events: self.inputs.push(source, events)
                    ))
                if request.settle:
                    body["settle"] = await runtime.asettle()
                body.update(await runtime.aobservation())
            except Exception as exc:  # the page went away under it: the agent must hear
                self._notes.log("act", logging.WARNING, "%s: an action failed: %r", self.env_id, exc)
                body.setdefault("last_action_error", f"the remote could not run it: {exc}")
            body["frame"] = self.frame
            return body

    async def page(self, parts: frozenset[str]) -> dict[str, Any]:
        """A browser's page structure now (``parts`` of :data:`OBSERVATIONS`), whatever
        the ``observe`` property says: the body's ``page``, or {} for other runtimes."""
        if not self.runtime.action_strings:
            return {}
        return await self.runtime.aobservation(parts)

    async def properties(self, request: protocol.PropertiesRequest) -> dict[str, Any]:
        table, key = self.property_table, request.key
        try:
            if request.op == "list":
                return {"properties": table.specs()}
            if request.op == "write":
                await table.write(key, request.value)
            return {"key": key, "value": table.read(key)}
        except PropertyError as exc:
            raise BadRequest(str(exc), request.message_id) from None

    def client_left(self, observer: bool) -> None:
        if not observer:
            self.inputs.release(REWARDER_SOURCE)
            self._left(0)

    def player_left(self, player: int) -> None:
        """Player ``player``'s agent (above 0) left: let go of what it held."""
        self.inputs.release(agent_source(player))
        self._left(player)

    def _left(self, player: int) -> None:
        for sink in self.leave_sinks:
            sink(player)

    # Who drives what ----------------------------------------------------------------------

    def _player_of(self, source: object) -> int:
        """The player an input source drives (0 on single-player runtimes)."""
        if self.runtime.players == 1:
            return 0
        return source_player(source, self.vnc.player_of)

    def _rewarder_holder(self, player: int) -> str | None:
        """The rewarder client seated as ``player``, named for describe and errors."""
        client = self.rewarder.seated.get(player)
        if client is None:
            return None
        return "rewarder client" + (f" {client.client_id!r}" if client.client_id else "")

    # Resets, env switches and failures --------------------------------------------------

    async def _settle(self, message_id: Any) -> None:
        """Wait (bounded) until no automatic reset or recovery is under way."""
        deadline = time.monotonic() + MAX_RESET_WAIT
        while self.state in (State.STARTING, State.RESETTING, State.RECOVERING):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BadRequest(
                    f"the remote has been {self.state.value} for over {MAX_RESET_WAIT:g} s "
                    "(MAX_RESET_WAIT); try again later, or restart it",
                    message_id,
                )
            changed = asyncio.get_running_loop().create_future()
            self._state_waiters.append(changed)
            await asyncio.wait(
                [changed, self.failed], timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )

    async def _switch_runtime(
        self, request: protocol.ResetRequest, factory: Callable[..., Runtime]
    ) -> None:
        runtime = construct(factory, request.env_id or "", self.runtime_options)
        if runtime.action_strings:  # the agent's observe property outlives the switch
            runtime.observe = self.runtime.observe
        await self.runtime.aclose()
        self.runtime = runtime  # a failed start is the reset's error: recovery starts it
        await runtime.astart()
        self.vnc.frame_ready(runtime.framebuffer)
        if request.fps is None:
            self.fps = float(runtime.fps)
            self._clock_changed()

    def _under_way_failed(
        self, progress: _Progress, exc: BaseException, message_id: Any
    ) -> BaseException:
        """``exc`` raised between the event that began a reset or a step and the one that
        completes it (the runtime, a hand-off, a send): take the machine out by its error
        exit (:meth:`RemoteState.process_error`: ``recovering`` once ``progress.changed``,
        else back) and return what to raise — a :class:`BadRequest` for the requester
        (caused by ``exc``), or ``exc`` itself for a cancellation (a dm_env_rpc deadline),
        which takes the same exit. (A try/except at each site, not a context manager: a
        generator's ``with`` around the step's awaits measured ~10 us a step.)"""
        if self.state is not progress.state:  # shutting down meanwhile: nothing to take out
            return exc
        if not isinstance(exc, Exception):
            log.warning("%s of %s cancelled under way (%r)", progress.what, self.env_id, exc)
            if progress.changed:
                self._fail()
            else:
                self._error_exit(changed=False)
            return exc
        failure = self._failed(progress, exc, message_id)
        failure.__cause__ = exc
        return failure

    def _failed(self, progress: _Progress, exc: Exception, message_id: Any) -> BadRequest:
        """``exc`` raised while ``progress`` was under way: take the error exit and say so."""
        said = exc.message if isinstance(exc, BadRequest) else (
            f"{self.runtime.env_id} failed in {progress.what} ({type(exc).__name__}: {exc})"
        )
        if not progress.changed:
            log.warning("%s (nothing had changed: back to %s)", said, self.mode)
            self._error_exit(changed=False)
            return BadRequest(f"{said}; nothing changed: send it again", message_id)
        log.error("%s", said, exc_info=exc)
        self._fail()
        return BadRequest(
            f"{said}; the remote is recovering: wait for describe env_state 'running', then "
            "reset",
            message_id,
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

    def _fire(self, event: Event, message_id: Any = None) -> State:
        """Move the machine; an illegal event becomes a :class:`BadRequest` for the client."""
        try:
            state = self.machine.fire(event)
        except IllegalTransition as exc:
            raise BadRequest(str(exc), message_id) from None
        self._moved(state)
        return state

    def _moved(self, state: State) -> None:
        waiters, self._state_waiters = self._state_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(state)

    # Frames ------------------------------------------------------------------------------

    async def _begin_episode(self, seed: int | None) -> None:
        """Move to a new episode id, tell everyone, and reset the runtime under ``seed``."""
        self.episode_id += 1
        self.rewarder.broadcast_describe()
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        else:
            seed = int(self._seeds.integers(protocol.MAX_SEED))
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
        self._frame_ready()

    def _frame_ready(self, frame: np.ndarray | None = None) -> None:
        """Serve the frame just drawn (or ``frame``, a copy of it), tagged with its
        number, episode and time."""
        damage = self.runtime.take_damage()  # what changed since it was last taken
        self.vnc.frame_ready(
            self.runtime.framebuffer if frame is None else frame,
            tag=FrameTag(self.frame, self.episode_id, time.time()),
            damage=damage if frame is None else None,
        )

    def _advance(self, frames: int, events: Sequence[Any]) -> StepResult:
        """Advance the runtime; count its frames; send its text/observation."""
        return self._advanced(self.runtime.advance(events, frames))

    def _advanced(self, result: StepResult) -> StepResult:
        """Count the frames the runtime advanced, tell the sinks, send its text/observation."""
        self.frame += result.frames
        self.episode_frame += result.frames
        self.runtime_failures = 0
        for sink in self.result_sinks:
            sink(self.episode_id, result)
        self._frame_drawn()
        if result.text is not None:
            self.rewarder.broadcast_text(self.episode_id, result.text)
        if result.observation is not None:
            observation = result.observation
            if isinstance(observation, dict):  # which frame it describes
                observation = {**observation, "frame": self.frame}
            self.rewarder.broadcast_observation(self.episode_id, observation)
        return result

    def _input_queued(self, events: Sequence[Any]) -> None:
        """Real time: hand a runtime that forwards input (an X program) each event as it
        comes, not at the next frame: its program keeps its own time, and a frame's wait
        was most of a viewer's action -> pixel latency."""
        if self.runtime.forwards_input and self.mode == protocol.REALTIME:
            try:
                self.runtime.forward(events)
            except Exception as exc:  # the next frame finds the runtime's fault
                self._notes.log(
                    "forward", logging.WARNING, "forwarding input to %s failed: %r", self.env_id, exc
                )

    async def _advance_sliced(self, frames: int) -> StepResult:
        """Lockstep: advance ``frames`` frames in slices of about :data:`MAX_SLICE_SECONDS`,
        yielding to the event loop between them (measured: a 10,000-frame Pong step held
        pings for 0.36 s when run in one go)."""
        events = self.inputs.take()
        if self.runtime.async_advance:  # it awaits its I/O: the loop is free meanwhile
            return self._advanced(await self.runtime.aadvance(events, frames))
        total = StepResult(frames=0)
        remaining = frames
        while remaining > 0:
            n = min(remaining, self._slice_frames)
            started = time.perf_counter()
            result = self._advance(n, events)
            elapsed = time.perf_counter() - started
            events = []
            total.add(result)
            remaining -= result.frames
            # Aim the next slice at the time budget from this one's speed per frame.
            per_frame = elapsed / max(result.frames, 1)
            self._slice_frames = max(1, int(MAX_SLICE_SECONDS / max(per_frame, 1e-7)))
            if result.done:
                break
            if result.frames == 0:  # a runtime that cannot go on says done; never spin
                break
            if remaining > 0:
                await asyncio.sleep(SLICE_PAUSE_SECONDS)
        return total

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
                self._runtime_failed("step", exc)

    async def _next_episode_task(self) -> None:
        try:
            await self._begin_next_episode()
        except Exception as exc:
            if self.state is not State.CLOSING:
                self._runtime_failed("reset", exc)

    async def _begin_next_episode(self) -> None:
        """Real time, after ``done``: the next episode, at once."""
        await self._begin_episode(seed=None)
        self._fire(Event.RESET_DONE)
        self.rewarder.broadcast_describe()

    def tick_frame(self) -> bool:
        """Real time: advance one frame, serve it, report its reward; whether the episode
        ended (the remote is then resetting: :meth:`_begin_next_episode` follows)."""
        self._fire(Event.TICK)
        events = self.inputs.take()  # (recorded as this frame's, forwarded or not)
        result = self._advance(1, () if self.runtime.forwards_input else events)
        self._frame_ready()
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
            self._fire(Event.EPISODE_DONE)
            return True
        return False

    async def wait_frame(self, after: int | None = None) -> int:
        """Wait until a frame past ``after`` (default: the current one) is drawn; its number."""
        after = self.frame if after is None else after
        while self.frame <= after:
            waiter = asyncio.get_running_loop().create_future()
            self._frame_waiters.append(waiter)
            await waiter
        return self.frame

    def _frame_drawn(self) -> None:
        waiters, self._frame_waiters = self._frame_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(self.frame)

    # Input from VNC ---------------------------------------------------------------------

    def _vnc_input(self, client_id: int, events: Sequence[Any]) -> None:
        self.inputs.push_vnc(self.runtime, client_id, events)

    def _vnc_left(self, client_id: int) -> None:
        self.inputs.release(("vnc", client_id))

    # Background tasks -------------------------------------------------------------------

    def _clock_changed(self) -> None:
        """The mode or fps changed: tick at the new fps in real time, not at all in
        lockstep (the loop stands still until a reset switches back)."""
        ticker = self._ticker
        if ticker is None or self.state is State.CLOSING:  # not started, or gone
            return
        if self.mode == protocol.REALTIME:
            ticker.add(self)
        else:
            ticker.discard(self)

    async def _heartbeat(self) -> None:
        """A describe every :data:`HEARTBEAT_INTERVAL`; late ticks logged once per interval."""
        reported = self.late_ticks
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL)
            self.rewarder.broadcast_describe()
            if self.late_ticks > reported:
                log.warning(
                    "%d ticks of %s came over %d frames late in the last %g s (%d in all): "
                    "the machine is too busy for %g fps", self.late_ticks - reported,
                    self.runtime.env_id, MAX_CATCH_UP_FRAMES, HEARTBEAT_INTERVAL,
                    self.late_ticks, self.fps,
                )
                reported = self.late_ticks


class RewarderFront:
    """What the rewarder server drives (its ``EnvHandler``): the remote, with steps and
    resets through the seats' barrier (:class:`~envserver.players.Seats`).

    A reset without ``mode`` — all Universe's client ever sends — asks for real time, the
    only world Universe's clients know: on a lockstep remote it switches the remote to
    real time (logged), so such a client is served as ``docs/rewarder.md`` promises instead
    of waiting in a world that never moves. Our clients keep a lockstep remote in
    lockstep by saying so (``ClientConnection.reset`` sends the mode the remote last
    described when the caller names none).
    """

    def __init__(self, remote: Remote) -> None:
        #: One line per interval for what a client may repeat (a fuzzer does, thousands
        #: of times).
        self.notes = RateLimitedLog(log)
        self.remote = remote

    @property
    def episode_id(self) -> int:
        return self.remote.episode_id

    @episode_id.setter
    def episode_id(self, value: int) -> None:
        self.remote.episode_id = value

    def describe(self) -> dict[str, Any]:
        return self.remote.describe()

    async def reset(self, request: protocol.ResetRequest, reply: Callable[..., None]) -> None:
        remote = self.remote
        if request.mode is None and remote.mode == protocol.LOCKSTEP:
            self.notes.log(
                "reset without mode", logging.WARNING,
                "a reset without 'mode' (a Universe client's) on a lockstep remote: switching "
                "%s to real time, the only mode such a client knows (our clients reset with "
                "mode 'lockstep' to keep it)", remote.env_id,
            )
            request = dataclasses.replace(request, mode=protocol.REALTIME)
        await remote.seats.reset(request, reply)

    def action(self, request: protocol.ActionRequest) -> None:
        self.remote.action(request)

    async def step(self, request: protocol.StepRequest) -> Reply:
        return await self.remote.seats.step(request)

    async def properties(self, request: protocol.PropertiesRequest) -> dict[str, Any]:
        return await self.remote.properties(request)

    def client_left(self, observer: bool) -> None:
        self.remote.client_left(observer)

    def player_left(self, player: int) -> None:
        self.remote.player_left(player)
