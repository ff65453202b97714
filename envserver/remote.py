"""The remote process: one runtime, its game loop, and the servers that expose it.

Holds :class:`Remote`, the composition root of a remote: it builds the parts and the
servers (rewarder, VNC, and if asked the browser viewer and dm_env_rpc), starts and
closes them. Its state lives in one place, :class:`envserver.state.RemoteState`; the
remote's jobs live each in a module of its own (:mod:`envserver.remote_base` lists them):
episodes and the lockstep step (:mod:`envserver.episodes`), the error exit and recovery
(:mod:`envserver.recovery`), acting (:mod:`envserver.acting`), the rewarder's view
(:mod:`envserver.rewarder_front`).

- **Front ends** speak the game's language (:mod:`envserver.orders`): they step and
  reset through :class:`~envserver.players.Seats`, the barrier of multi-player lockstep,
  which calls :meth:`Remote.step` and :meth:`Remote.reset` once per (joint) order, and
  map its :class:`~envserver.orders.Refused` to their own errors.
- **Heartbeat**: a ``v0.env.describe`` at least every :data:`HEARTBEAT_INTERVAL` seconds,
  so a client can tell an idle remote from a stalled one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np

from rewarder.batch_messages import DESCRIBE_KEY as BATCH_DESCRIBE_KEY
from rewarder.lograte import RateLimitedLog
from rewarder.protocol import HEARTBEAT_INTERVAL, MAX_FPS, MIN_FPS
from rewarder.server import RewarderServer
from rewarder.throttle import AuthThrottle
from runtimes import registry
from runtimes.base import Runtime, StepResult
from vncdriver.server import MAX_VIEWERS, VNCServer

from .acting import OBSERVATIONS, Acting
from .episodes import MAX_RESET_WAIT, MAX_SLICE_SECONDS, SLICE_PAUSE_SECONDS
from .front_ends import start_dm_env_rpc, start_viewer
from .inputs import Inputs
from .lockstep_frames import LockstepFrames
from .orders import LOCKSTEP, MODES, REALTIME
from .players import Seats, check_passwords
from .properties import Properties, remote_properties
from .recovery import MAX_RECOVER_DELAY, MAX_RUNTIME_FAILURES, RECOVER_DELAY
from .remote_base import log
from .restores import Restores
from .rewarder_front import RewarderFront
from .runtime_choice import construct
from .state import Event, RemoteState, State
from .ticker import MAX_CATCH_UP_FRAMES, Ticker, shared_ticker
from .version import PROTOCOLS, server_version

if TYPE_CHECKING:
    from rewarder.tls import ServerTLS

    from .dmrpc.server import DmEnvRpcServer
    from .viewer import Viewer

#: Read once: describes go out every few seconds to every client.
SERVER_VERSION: Final = server_version()

__all__ = [
    "HEARTBEAT_INTERVAL", "MAX_CATCH_UP_FRAMES", "MAX_RECOVER_DELAY", "MAX_RESET_WAIT",
    "MAX_RUNTIME_FAILURES", "MAX_SLICE_SECONDS", "OBSERVATIONS", "RECOVER_DELAY",
    "SLICE_PAUSE_SECONDS", "Remote", "RewarderFront",
]


class Remote(Restores, Acting):
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
        mode: str = REALTIME,
        runtime_options: dict[str, Any] | None = None,
        allow_origins: Sequence[str] = (),
        auth_throttle: AuthThrottle | None = None,
        max_viewers: int = MAX_VIEWERS,
        tls: ServerTLS | None = None,
        player_passwords: Mapping[int, str] | None = None,
        ticker: Ticker | None = None,
        verify_restores: bool | None = None,
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
        the process shares: one wake-up per frame for all of them). ``verify_restores``:
        check every restore against the snapshot's digest (None: as the environment's
        ``UNIVERSE_REMOTE_VERIFY_RESTORES`` says; docs/snapshots.md).
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.runtime_options = dict(runtime_options or {})
        self.runtime: Runtime = (
            construct(registry.lookup(env), env, self.runtime_options) if isinstance(env, str) else env
        )
        if mode == LOCKSTEP and not self.runtime.lockstep:
            raise ValueError(f"{self.runtime.env_id} runs only in real time, not in lockstep")
        if fps is not None and not MIN_FPS <= fps <= MAX_FPS:
            raise ValueError(f"fps must be in [{MIN_FPS:g}, {MAX_FPS:g}], not {fps!r}")
        self.fps = float(fps or self.runtime.fps)
        self.machine = RemoteState(mode)
        self.episode_id = 0
        self.frame = 0  # frames drawn since the remote started; never goes back
        self.episode_frame = 0
        self.late_ticks = 0
        #: The runtime's ``announced_info`` values real-time clients were last sent.
        self._announced = {}
        self.runtime_failures = 0
        self.inputs = Inputs()
        self.inputs.player_of = self._player_of
        self.inputs.on_queue = self._input_queued
        self._notes = RateLimitedLog(log)  # one line per kind of trouble per interval
        self.lockstep_frames = LockstepFrames(self._frame_ready, wanted=lambda: self.vnc.wanted())
        #: The describe's ``batch`` key when this game takes batch steps with the other
        #: games of its process (set by envserver.batch.BatchGames), else None.
        self.batch_describe: dict[str, Any] | None = None
        #: The process's batch steps (envserver.batch.BatchGames), when it serves several games.
        self.batch_games: Any = None
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
        self.vnc.on_request = self.lockstep_frames.serve_owed
        self.vnc_port: int | None = None
        #: The browser viewer (``start(http_port=...)``), or None.
        self.viewer: Viewer | None = None
        #: The dm_env_rpc port (``start(dm_env_rpc_port=...)``), or None.
        self.dm_env_rpc: DmEnvRpcServer | None = None
        self._ticker = ticker
        self._seeds = np.random.default_rng()
        self._tasks: list[asyncio.Task[None]] = []
        self._recovery = None
        self._acts = set()
        self._acting = asyncio.Lock()
        self._next_episode = None
        self._frame_waiters = []
        self._state_waiters = []  # resolved when the state moves
        self._slice_frames = 1  # frames per lockstep slice, adapted to MAX_SLICE_SECONDS
        self._frame_seconds = float("inf")  # not measured yet
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
        self._init_snapshots(verify_restores)

    def agent(self) -> str | None:
        """Who drives the remote now: an agent on the rewarder, or one another front end
        names through :attr:`held_by` (dm_env_rpc and OpenEnv ask before theirs drive)."""
        if self.rewarder.active is not None:
            return "an agent on the rewarder port"
        return self.held_by()

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

    def describe(self) -> dict[str, Any]:
        """The ``v0.env.describe`` body (every front end reads it)."""
        body = {
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
        if self.batch_describe is not None:
            body[BATCH_DESCRIBE_KEY] = self.batch_describe
        return body

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




if TYPE_CHECKING:
    # mypy holds Remote to what its parts name of it: they never import it (imports flow
    # one way, docs/design.md), so these protocols are the only link, checked here.
    from .agent_port import RemoteLike
    from .front_ends import Hosting
    from .properties import Described
    from .rewarder_front import Served

    _hosting: Hosting = cast(Remote, None)
    _port: RemoteLike = cast(Remote, None)
    _described: Described = cast(Remote, None)
    _served: Served = cast(Remote, None)
