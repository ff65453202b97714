"""The remote process: one runtime, its game loop, and the servers that expose it.

Holds :class:`Remote`, the composition root of a remote: it builds the parts and the
servers (rewarder, VNC, and if asked the browser viewer and dm_env_rpc), starts and
closes them. Each part is an object that owns its fields and holds the game core it
works on (constructor injection), naming what it uses of it in a small protocol:

- :class:`~envserver.game_core.GameCore` (:attr:`Remote.core`) — the runtime, the state
  machine (:mod:`envserver.state`), the counters and waiters; resets, the lockstep step,
  the real-time tick and the error exit. It is the :class:`~envserver.players.Game` the
  seats drive, the only writer of the state, the episode id and the frame counts;
- :class:`~envserver.recovery.Recovery` — failures in a row, recovery with backoff, giving up;
- :class:`~envserver.restores.Restores` — snapshots and restores;
- :class:`~envserver.acting.Acting` — input, action strings, who drives what;
- :class:`~envserver.rewarder_front.RewarderFront` — the rewarder's view (wire <-> orders).

The remote keeps the public face the front ends, tests and ``serve`` use (what
:class:`~envserver.agent_port.RemoteLike` and the other protocols name), each name the
part's; it owns only the servers, the secrets, the property table and who holds the game.

- **Front ends** speak the game's language (:mod:`envserver.orders`): they step and
  reset through :class:`~envserver.players.Seats`, the barrier of multi-player lockstep,
  which calls the core's :meth:`~envserver.game_core.GameCore.step` and ``reset`` once
  per (joint) order, and map its :class:`~envserver.orders.Refused` to their own errors.
- **Heartbeat**: a ``v0.env.describe`` at least every :data:`HEARTBEAT_INTERVAL` seconds,
  so a client can tell an idle remote from a stalled one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np

from rewarder.batch_messages import DESCRIBE_KEY as BATCH_DESCRIBE_KEY
from rewarder.protocol import HEARTBEAT_INTERVAL
from rewarder.server import RewarderServer
from rewarder.throttle import AuthThrottle
from runtimes import registry
from runtimes.base import Runtime, StepResult
from vncdriver.server import MAX_VIEWERS, VNCServer

from .acting import OBSERVATIONS, Acting
from .front_ends import start_dm_env_rpc, start_viewer
from .game_core import MAX_RESET_WAIT, MAX_SLICE_SECONDS, SLICE_PAUSE_SECONDS, GameCore, log
from .inputs import Inputs
from .lockstep_frames import LockstepFrames
from .orders import MODES, REALTIME, ActOrder, ResetOrder, StepOrder
from .players import Reply, Seats, check_passwords
from .properties import Properties, remote_properties
from .recovery import MAX_RECOVER_DELAY, MAX_RUNTIME_FAILURES, RECOVER_DELAY, Recovery
from .restores import Restores
from .rewarder_front import RewarderFront
from .runtime_choice import construct
from .snapshots import SnapshotStore
from .state import RemoteState, State
from .ticker import MAX_CATCH_UP_FRAMES, Ticker
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
        options = dict(runtime_options or {})
        runtime: Runtime = (
            construct(registry.lookup(env), env, options) if isinstance(env, str) else env
        )
        #: The game core: the runtime, its state machine, counters and waiters.
        self.core = core = GameCore(
            runtime, fps=fps, mode=mode, runtime_options=options, ticker=ticker
        )
        #: Input, action strings, who drives what.
        self.acting = Acting(core)
        #: Failures in a row and recovery with backoff.
        self.recovery = Recovery(core)
        #: Snapshots and restores.
        self.restores = Restores(core, verify_restores)
        #: The describe's ``batch`` key when this game takes batch steps with the other
        #: games of its process (set by envserver.batch.BatchGames), else None.
        self.batch_describe: dict[str, Any] | None = None
        #: The process's batch steps (envserver.batch.BatchGames), when it serves several games.
        self.batch_games: Any = None
        player_passwords = check_passwords(runtime.env_id, runtime.players, player_passwords, password)
        #: Who holds each player of a multi-player runtime, and the barrier in front of
        #: the core's step and reset that the front ends go through (the remote only
        #: reads who holds what, for describe).
        self.seats = Seats(core, rewarder_holder=self.acting.rewarder_holder)
        self.auth_throttle = auth_throttle or AuthThrottle()
        self.tls = tls
        self.rewarder = RewarderServer(
            RewarderFront(self), password=password, allow_origins=allow_origins,
            auth_guard=self.auth_throttle,
            held_by=lambda: self.held_by(), tls=tls.context if tls else None,
            players=lambda: core.runtime.players, seat_held_by=self.seats.held_elsewhere,
        )
        self.password, self.view_only_password = password, view_only_password
        #: The VNC server every runtime's screen is served from (an X program's too).
        self.vnc = VNCServer(
            runtime.framebuffer,
            name=runtime.env_id,
            password=password,
            view_only_password=view_only_password,
            on_input=self.acting.vnc_input,
            on_disconnect=self.acting.vnc_left,
            auth_guard=self.auth_throttle,
            max_viewers=max_viewers,
            tls=tls.context if tls is not None else None,
            player_passwords=player_passwords,
        )
        core.attach(self.vnc, self.rewarder)
        self.vnc.on_request = core.serve_owed
        self.vnc_port: int | None = None
        #: The browser viewer (``start(http_port=...)``), or None.
        self.viewer: Viewer | None = None
        #: The dm_env_rpc port (``start(dm_env_rpc_port=...)``), or None.
        self.dm_env_rpc: DmEnvRpcServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: Says which agent of another front end holds the remote (None: none does); the
        #: rewarder refuses agents meanwhile.
        self.held_by: Callable[[], str | None] = lambda: None
        #: What ``v0.env.properties.*`` (and the dm_env_rpc extension) read and write.
        self.property_table = Properties(remote_properties(self))

    # The parts' public names (each the part's own) ----------------------------------------

    @property
    def runtime(self) -> Runtime:
        return self.core.runtime

    @property
    def runtime_options(self) -> dict[str, Any]:
        return self.core.runtime_options

    @property
    def machine(self) -> RemoteState:
        return self.core.machine

    @property
    def state(self) -> State:
        return self.core.machine.state

    @property
    def mode(self) -> str:
        return self.core.machine.mode

    @property
    def env_id(self) -> str:
        return self.core.runtime.env_id

    @property
    def players(self) -> int:
        return int(self.core.runtime.players)  # (one call: a batch step asks every game)

    @property
    def fps(self) -> float:
        return self.core.fps

    @property
    def episode_id(self) -> int:
        return self.core.episode_id

    @property
    def frame(self) -> int:
        """Frames drawn since the remote started; never goes back."""
        return self.core.frame

    @property
    def episode_frame(self) -> int:
        return self.core.episode_frame

    @property
    def late_ticks(self) -> int:
        return self.core.late_ticks

    @property
    def inputs(self) -> Inputs:
        return self.core.inputs

    @property
    def lockstep_frames(self) -> LockstepFrames:
        return self.core.lockstep_frames

    @property
    def result_sinks(self) -> list[Callable[[int, StepResult], None]]:
        return self.core.result_sinks

    @property
    def episode_sinks(self) -> list[Callable[[int, int, str | None], None]]:
        return self.core.episode_sinks

    @property
    def leave_sinks(self) -> list[Callable[[int], None]]:
        return self.core.leave_sinks

    @property
    def runtime_failures(self) -> int:
        """Runtime failures in a row (a good frame since the last one starts again at 1)."""
        return self.recovery.failures

    @property
    def failed(self) -> asyncio.Future[str]:
        """Resolves with the reason when the runtime failed past recovery (made in start)."""
        return self.recovery.failed

    @property
    def snapshots(self) -> SnapshotStore:
        return self.restores.snapshots

    @property
    def verify_restores(self) -> bool:
        return self.restores.verify_restores

    @property
    def restore_sinks(self) -> list[Callable[[int, dict[str, Any]], None]]:
        return self.restores.restore_sinks

    @property
    def held_keys(self) -> set[str]:
        return self.acting.held_keys

    def screen(self) -> np.ndarray:
        """The screen as drawn last (:meth:`GameCore.screen`)."""
        return self.core.screen()

    def set_fps(self, fps: float) -> None:
        """Change the real-time rate now (:meth:`GameCore.set_fps`)."""
        self.core.set_fps(fps)

    def set_observe(self, value: str) -> None:
        """Which page observations to send (:meth:`Acting.set_observe`)."""
        self.acting.set_observe(value)

    def step_now(self, order: StepOrder) -> Reply | None:
        """A lockstep step at once if it fits one slice (:meth:`GameCore.step_now`; the
        seats call the core itself)."""
        return self.core.step_now(order)

    async def step(self, order: StepOrder, others: Mapping[int, StepOrder] | None = None) -> Reply:
        """A lockstep step (:meth:`GameCore.step`; the front ends go through :attr:`seats`)."""
        return await self.core.step(order, others)

    async def reset(self, order: ResetOrder, reply: Callable[..., None]) -> None:
        """A new episode (:meth:`GameCore.reset`; the front ends go through :attr:`seats`)."""
        await self.core.reset(order, reply)

    async def tick(self) -> None:
        """One real-time frame, and the next episode after done (:meth:`GameCore.tick`)."""
        await self.core.tick()

    def tick_due(self) -> None:
        """The ticker's call (:meth:`GameCore.tick_due`; the ticker calls the core itself)."""
        self.core.tick_due()

    def tick_frame(self) -> bool:
        """One real-time frame; whether its episode ended (:meth:`GameCore.tick_frame`)."""
        return self.core.tick_frame()

    async def wait_frame(self, after: int | None = None) -> int:
        """Wait for a frame past ``after`` (:meth:`GameCore.wait_frame`)."""
        return await self.core.wait_frame(after)

    def action(self, order: ActOrder) -> None:
        """Real-time input for the next frame (:meth:`Acting.action`)."""
        self.acting.action(order)

    async def act(self, order: ActOrder, source: object = None) -> dict[str, Any]:
        """Run an action string and/or settle (:meth:`Acting.act`)."""
        return await self.acting.act(order, source)

    async def page(self, parts: frozenset[str]) -> dict[str, Any]:
        """A browser's page structure now (:meth:`Acting.page`)."""
        return await self.acting.page(parts)

    def client_left(self, observer: bool) -> None:
        """A rewarder client left (:meth:`Acting.client_left`)."""
        self.acting.client_left(observer)

    def player_left(self, player: int) -> None:
        """Player ``player``'s agent left (:meth:`Acting.player_left`)."""
        self.acting.player_left(player)

    async def snapshot(self, export_bytes: bool = False) -> tuple[str, int, int, bytes | None]:
        """Save the state now (:meth:`Restores.snapshot`)."""
        return await self.restores.snapshot(export_bytes)

    async def restore(self, token: str | None, data: bytes | None, obs: str,
                      reply: Callable[..., None]) -> None:
        """Go back to a saved state, as a new branch (:meth:`Restores.restore`)."""
        await self.restores.restore(token, data, obs, reply)

    async def properties(self, op: str, key: str, value: Any = None) -> dict[str, Any]:
        """List (``op`` "list"), read or write the remote's properties; the reply body.
        :class:`~envserver.properties.PropertyError` refuses."""
        table = self.property_table
        if op == "list":
            return {"properties": table.specs()}
        if op == "write":
            await table.write(key, value)
        return {"key": key, "value": table.read(key)}

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
        self.recovery.start()
        await self.core.start()
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
        self._tasks = [asyncio.get_running_loop().create_task(self._heartbeat())]
        self.core.start_clock()

    async def close(self, reason: str = "the remote is shutting down") -> None:
        """Stop the tasks and close every part — servers, the shared-memory segment, the
        runtime (Chromium's, Xvnc's processes) — even when one of them raises; then raise
        the first such error (each is logged)."""
        self.core.shut_down()
        tasks = [
            *self._tasks, *self.acting.acts, *self.recovery.tasks(), *self.core.tasks()
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
            self.core.lockstep_frames.close()
        except Exception as exc:
            failures.append(("the shared-memory segment", exc))
        runtime = self.core.runtime
        try:
            await runtime.aclose()
        except Exception as exc:
            failures.append((f"the runtime {runtime.env_id}", exc))
        self.acting.notes.close()
        return failures

    def describe(self) -> dict[str, Any]:
        """The ``v0.env.describe`` body (every front end reads it)."""
        core = self.core
        state = core.machine.state
        body = {
            "env_id": core.runtime.env_id,
            "env_state": state.wire,
            "fps": core.fps,
            "mode": core.machine.mode,
            "frame": core.frame,
            # Beyond Universe: the precise state and how the game loop keeps time.
            "remote_state": state.value,
            "late_ticks": core.late_ticks,
            # Our VNC server tags updates with frame numbers (vncdriver FRAME_TAG).
            "frame_tags": True,
            "server_version": SERVER_VERSION,
            "protocols": PROTOCOLS,
            "seats": self.seats.describe(),
            **core.runtime.describe(),
        }
        if self.batch_describe is not None:
            body[BATCH_DESCRIBE_KEY] = self.batch_describe
        return body

    async def _heartbeat(self) -> None:
        """A describe every :data:`HEARTBEAT_INTERVAL`; late ticks logged once per interval."""
        core = self.core
        reported = core.late_ticks
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL)
            self.rewarder.broadcast_describe()
            if core.late_ticks > reported:
                log.warning(
                    "%d ticks of %s came over %d frames late in the last %g s (%d in all): "
                    "the machine is too busy for %g fps", core.late_ticks - reported,
                    core.runtime.env_id, MAX_CATCH_UP_FRAMES, HEARTBEAT_INTERVAL,
                    core.late_ticks, core.fps,
                )
                reported = core.late_ticks



if TYPE_CHECKING:
    # mypy holds Remote and its core to what the parts and front ends name of them: they
    # never import either (imports flow one way, docs/design.md), so these protocols are
    # the only link, checked here.
    from .acting import Actable
    from .agent_port import RemoteLike
    from .front_ends import Hosting
    from .players import Game
    from .properties import Described
    from .recovery import Recoverable
    from .restores import Branching
    from .rewarder_front import Served
    from .ticker import Ticked

    _hosting: Hosting = cast(Remote, None)
    _port: RemoteLike = cast(Remote, None)
    _described: Described = cast(Remote, None)
    _served: Served = cast(Remote, None)
    _game: Game = cast(GameCore, None)
    _ticked: Ticked = cast(GameCore, None)
    _actable: Actable = cast(GameCore, None)
    _recoverable: Recoverable = cast(GameCore, None)
    _branching: Branching = cast(GameCore, None)
