"""The remote process: one runtime, its game loop, and the servers that expose it.

Holds :class:`Remote`. It runs the runtime at ``fps`` in real time whether or not
anyone acts (Universe's semantics), applies the input that arrived since the last tick
at the next tick (from VNC and from ``v0.agent.action`` alike), serves each frame over
VNC, sends each tick's reward at most once, and resets on request or by itself after
``done``.

In *lockstep* mode (our extension; ``serve --mode lockstep`` or a reset asking for it)
the game loop stands still and the active client advances the runtime with
``v0.env.step``: exactly ``frames`` frames as fast as the runtime goes, then the frame is
served and the reply carries what those frames earned.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from rewarder import protocol
from rewarder.errors import BadRequest
from rewarder.protocol import FRAME_INFO_KEY
from rewarder.server import RewarderServer
from vncdriver import keysyms, messages
from vncdriver.messages import FrameTag
from vncdriver.errors import UnknownKey
from vncdriver.server import VNCServer

from runtimes import registry
from runtimes.base import InputEvent, KeyEvent, PointerEvent, Runtime, StepResult
from runtimes.errors import UnknownEnvironment

if TYPE_CHECKING:
    from .viewer import Viewer

log = logging.getLogger(__name__)

#: Input events waiting for the next tick; more means a client floods us faster than
#: any player could type, and the excess is refused with an error.
MAX_PENDING_EVENTS: Final = 4096
#: The input source of the rewarder's active client (VNC clients are ``("vnc", id)``).
REWARDER_SOURCE: Final = "rewarder"
#: Seconds before retrying a reset that failed after a runtime error, doubling up to the max.
RECOVER_DELAY: Final = 0.5
MAX_RECOVER_DELAY: Final = 10.0
#: A tick later than this many frames is not caught up (that would burst frames);
#: the clock restarts from now and the lateness is counted.
MAX_CATCH_UP_FRAMES: Final = 2


class Remote:
    """Serves one runtime over the rewarder (and, from 2/5 on, VNC).

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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Serve ``env``: an env id from the registry, or a runtime instance of your own.

        ``password`` guards both channels (VNC uses its first 8 characters);
        ``view_only_password`` lets VNC viewers watch without their input reaching the game.
        ``runtime_options`` are keyword arguments for the runtime (``{"scale": 2}``), kept
        for runtimes a reset switches to.
        """
        if mode not in protocol.MODES:
            raise ValueError(f"mode must be one of {protocol.MODES}, not {mode!r}")
        self.runtime_options = dict(runtime_options or {})
        self.runtime: Runtime = (
            self._make_runtime(env) if isinstance(env, str) else env
        )
        if mode == protocol.LOCKSTEP and not self.runtime.lockstep:
            raise ValueError(f"{self.runtime.env_id} runs only in real time, not in lockstep")
        self.fps = float(fps or self.runtime.fps)
        self.mode = mode
        self.episode_done = False
        self.episode_id = 0
        self.env_state = protocol.RESETTING
        self.frame = 0  # frames drawn since the remote started; never goes back
        self.episode_frame = 0
        self.late_ticks = 0
        self.rewarder = RewarderServer(self, password=password)
        self.password, self.view_only_password = password, view_only_password
        #: Our VNC server, or None when the runtime serves VNC itself (Xvnc).
        self.vnc: VNCServer | None = None
        if not self.runtime.external_vnc:
            self.vnc = VNCServer(
                self.runtime.framebuffer,
                name=self.runtime.env_id,
                password=password,
                view_only_password=view_only_password,
                on_input=self._vnc_input,
                on_disconnect=self._vnc_left,
            )
        self.vnc_port: int | None = None
        #: The browser viewer (``start(http_port=...)``), or None.
        self.viewer: Viewer | None = None
        self._clock = clock
        self._pending: list[InputEvent] = []
        #: What each input source (the rewarder's active client, each VNC client) holds,
        #: so that a source that leaves can be made to let go.
        self._held: dict[object, tuple[set[str], list[int]]] = {}
        self._seeds = np.random.default_rng()
        self._loop_task: asyncio.Task[None] | None = None
        self._frame_waiters: list[asyncio.Future[int]] = []
        self._realtime = asyncio.Event()  # set while the game loop should tick
        #: Resolves (with the reason) when the runtime failed past recovery.
        self.failed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    # Lifecycle ---------------------------------------------------------------------------

    async def start(
        self,
        host: str = "127.0.0.1",
        rewarder_port: int = 15900,
        vnc_port: int = 5900,
        http_port: int | None = None,
    ) -> None:
        """Bind the ports (0 picks a free one) and start the game loop.

        With ``http_port`` the remote also serves its screen to browsers (view-only noVNC
        at ``/viewer/``, :mod:`envserver.viewer`).
        """
        await self.runtime.astart(host, vnc_port, self.password, self.view_only_password)
        await self._begin_episode(seed=None)
        self.env_state = protocol.RUNNING
        self._set_mode(self.mode)
        await self.rewarder.start(host, rewarder_port)
        try:
            if self.vnc is not None:
                await self.vnc.start(host, vnc_port)
                self.vnc_port = self.vnc.port
            else:
                self.vnc_port = int(getattr(self.runtime, "vnc_port", vnc_port))
            if http_port is not None:
                from .viewer import Viewer

                self.viewer = Viewer(
                    self.vnc_port, vnc_host=host, password=self.password,
                    view_only_password=self.view_only_password,
                    describe=lambda: {**self.describe(), "episode_id": self.episode_id},
                )
                await self.viewer.start(host, http_port)
                self.rewarder.viewer_port = self.viewer.port
        except OSError:
            if self.vnc is not None:
                await self.vnc.close()
            await self.rewarder.close("the remote failed to start")
            await self.runtime.aclose()
            raise
        self._loop_task = asyncio.get_running_loop().create_task(self._game_loop())

    async def close(self, reason: str = "the remote is shutting down") -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
        await asyncio.gather(
            self.rewarder.close(reason),
            *([self.vnc.close()] if self.vnc is not None else []),
            *([self.viewer.close(reason)] if self.viewer is not None else []),
        )
        await self.runtime.aclose()

    # EnvHandler: what the rewarder server asks of us ------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "env_id": self.runtime.env_id,
            "env_state": self.env_state,
            "fps": self.fps,
            "mode": self.mode,
            "frame": self.frame,
            # Our VNC server tags updates with frame numbers (vncdriver FRAME_TAG); Xvnc doesn't.
            "frame_tags": self.vnc is not None,
            **self.runtime.describe(),
        }

    async def reset(self, request: protocol.ResetRequest, reply: Callable[[int], None]) -> None:
        if request.env_id is not None and request.env_id != self.runtime.env_id:
            await self._switch_runtime(request)
        if request.mode == protocol.LOCKSTEP and not self.runtime.lockstep:
            raise BadRequest(
                f"{self.runtime.env_id} runs only in real time (it lives outside this "
                "process); reset without mode 'lockstep'",
                request.message_id,
            )
        if request.fps is not None:
            self.fps = float(request.fps)
        if request.mode is not None:
            self._set_mode(request.mode)
        self.episode_id = max(self.episode_id, request.episode_id or 0)
        await self._begin_episode(request.seed)
        reply(self.episode_id)
        self.env_state = protocol.RUNNING
        self.rewarder.broadcast_describe()

    def step(self, request: protocol.StepRequest) -> tuple[int, dict[str, Any]]:
        """Lockstep: apply the events, advance exactly ``frames`` frames, serve the frame."""
        mid = request.message_id
        if self.mode != protocol.LOCKSTEP:
            raise BadRequest(
                "this remote runs in real time; reset with mode 'lockstep' "
                "(or serve --mode lockstep) before sending v0.env.step",
                mid,
            )
        if self.episode_done:
            raise BadRequest(f"episode {self.episode_id} is done; send v0.env.reset", mid)
        if request.episode_id is not None and request.episode_id != self.episode_id:
            raise BadRequest(
                f"episode {request.episode_id} is not the current one ({self.episode_id}); "
                "step with the episode id of the last reset",
                mid,
            )
        self.push_events(REWARDER_SOURCE, self._events_from_action(request))
        reward, info = 0.0, {}
        for _ in range(request.frames):
            result = self._advance()
            reward += result.reward
            info.update(result.info)
            if result.done:
                self.episode_done = True
                break
        self._frame_ready()
        info[FRAME_INFO_KEY] = self.frame
        if reward or self.episode_done:
            self.rewarder.broadcast_reward(
                self.episode_id, reward, self.episode_done, info, observers_only=True
            )
        body = {"reward": reward, "done": self.episode_done, "info": info, "frame": self.frame}
        return self.episode_id, body
    def action(self, request: protocol.ActionRequest) -> None:
        events = self._events_from_action(request)
        if len(self._pending) + len(events) > MAX_PENDING_EVENTS:
            raise BadRequest(
                f"more than {MAX_PENDING_EVENTS} input events are waiting for the next "
                "frame; send fewer events per frame",
                request.message_id,
            )
        self.push_events(REWARDER_SOURCE, events)

    def client_left(self, observer: bool) -> None:
        if not observer:
            self.release(REWARDER_SOURCE)

    async def _switch_runtime(self, request: protocol.ResetRequest) -> None:
        assert request.env_id is not None
        try:
            factory = registry.lookup(request.env_id)
        except UnknownEnvironment as exc:
            raise BadRequest(str(exc), request.message_id) from None
        if getattr(factory, "external_vnc", False) or self.runtime.external_vnc:
            raise BadRequest(
                f"{self.runtime.env_id} and {request.env_id} cannot share a remote (one of "
                "them serves its own display); start a remote for each",
                request.message_id,
            )
        runtime = self._make_runtime(request.env_id)
        await self.runtime.aclose()
        self.runtime = runtime
        assert self.vnc is not None
        self.vnc.frame_ready(runtime.framebuffer)
        if request.fps is None:
            self.fps = float(runtime.fps)

    def _make_runtime(self, env_id: str) -> Runtime:
        """The runtime for ``env_id`` with the options it accepts (scale only where known)."""
        factory = registry.lookup(env_id)
        accepted = getattr(factory, "options", ())
        ignored = sorted(set(self.runtime_options) - set(accepted))
        if ignored:
            log.warning("%s takes no %s; ignored", env_id, ", ".join(ignored))
        return factory(**{k: v for k, v in self.runtime_options.items() if k in accepted})

    # Input ---------------------------------------------------------------------------------

    @property
    def held_keys(self) -> set[str]:
        """Keys some source holds down now (as the runtime will see them at the next tick)."""
        return set().union(*(keys for keys, _ in self._held.values()))

    def push_events(self, source: object, events: Sequence[InputEvent]) -> None:
        """Queue checked events from ``source`` for the next tick."""
        keys, pointer = self._held.setdefault(source, (set(), [0, 0, 0]))
        for event in events:
            if isinstance(event, KeyEvent):
                (keys.add if event.down else keys.discard)(event.key)
            else:
                pointer[:] = event
        self._pending.extend(events)

    def release(self, source: object) -> None:
        """Let go of every key and button ``source`` holds (it is gone)."""
        keys, pointer = self._held.pop(source, (set(), [0, 0, 0]))
        self._pending.extend(KeyEvent(k, False) for k in sorted(keys))
        if pointer[2]:
            self._pending.append(PointerEvent(pointer[0], pointer[1], 0))

    def _vnc_input(self, client_id: int, events: Sequence[Any]) -> None:
        """VNC input: keys the runtime does not use are dropped (viewers send Shift, ...)."""
        rt = self.runtime
        checked: list[InputEvent] = []
        for event in events:
            if isinstance(event, messages.KeyEvent):
                name = keysyms.name(event.key)
                if name in rt.keys:
                    checked.append(KeyEvent(name, event.down))
            else:
                x = min(max(event.x, 0), rt.width - 1)
                y = min(max(event.y, 0), rt.height - 1)
                checked.append(PointerEvent(x, y, event.button_mask))
        if len(self._pending) + len(checked) <= MAX_PENDING_EVENTS:
            self.push_events(("vnc", client_id), checked)

    def _vnc_left(self, client_id: int) -> None:
        self.release(("vnc", client_id))

    def _events_from_action(
        self, request: protocol.ActionRequest | protocol.StepRequest
    ) -> list[InputEvent]:
        events: list[InputEvent] = []
        rt = self.runtime
        for i, event in enumerate(request.events):
            if event[0] == "KeyEvent":
                _, key, down = event
                try:
                    name = keysyms.name(key) if isinstance(key, int) else keysyms.canonical(key)
                except UnknownKey as exc:
                    raise BadRequest(f"action[{i}]: {exc}", request.message_id) from None
                if name not in rt.keys:
                    raise BadRequest(
                        f"action[{i}]: {rt.env_id} does not use key {name!r}; it takes "
                        f"{', '.join(rt.keys) or 'no keys (use PointerEvent)'}",
                        request.message_id,
                    )
                events.append(KeyEvent(name, down))
            else:
                _, x, y, mask = event
                if not (0 <= x < rt.width and 0 <= y < rt.height):
                    raise BadRequest(
                        f"action[{i}]: pointer ({x}, {y}) is off the {rt.width}x{rt.height} "
                        f"screen; x must be in 0..{rt.width - 1}, y in 0..{rt.height - 1}",
                        request.message_id,
                    )
                events.append(PointerEvent(x, y, mask))
        return events

    # The game loop --------------------------------------------------------------------------

    async def _begin_episode(self, seed: int | None) -> None:
        """Move to a new episode id, tell everyone, and reset the runtime under ``seed``."""
        self.episode_id += 1
        self.env_state = protocol.RESETTING
        self.rewarder.broadcast_describe()
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        else:
            seed = int(self._seeds.integers(2**31))
        self._pending.clear()
        self._held.clear()
        self.episode_frame = 0
        self.episode_done = False
        await self.runtime.areset(seed)
        self._frame_ready()

    def _frame_ready(self) -> None:
        """Serve the frame just drawn, tagged with its number, episode and time."""
        if self.vnc is not None:
            self.vnc.frame_ready(tag=FrameTag(self.frame, self.episode_id, time.time()))

    def _set_mode(self, mode: str) -> None:
        self.mode = mode
        if mode == protocol.REALTIME:
            self._realtime.set()
        else:
            self._realtime.clear()

    def _advance(self) -> StepResult:
        """Step the runtime one frame with the pending input; send its text/observation."""
        events, self._pending = self._pending, []
        result = self.runtime.step(events)
        self.frame += 1
        self.episode_frame += 1
        self._frame_drawn()
        if result.text is not None:
            self.rewarder.broadcast_text(self.episode_id, result.text)
        if result.observation is not None:
            self.rewarder.broadcast_observation(self.episode_id, result.observation)
        return result

    async def tick(self) -> None:
        """Real time: advance one frame, serve it, report its reward, restart after done."""
        result = self._advance()
        self._frame_ready()
        if result.reward or result.done:
            info = {**result.info, FRAME_INFO_KEY: self.frame}
            self.rewarder.broadcast_reward(self.episode_id, result.reward, result.done, info)
        if result.done:
            await self._begin_episode(seed=None)
            self.env_state = protocol.RUNNING
            self.rewarder.broadcast_describe()

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

    async def _recover(self) -> None:
        """Start a fresh episode after a runtime failure, retrying with backoff until the
        runtime comes back (a crashed browser restarting, say); clients see ``resetting``."""
        delay = RECOVER_DELAY
        while True:
            try:
                await self._begin_episode(seed=None)
            except Exception:
                log.exception("resetting %s failed; again in %.1f s", self.runtime.env_id, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RECOVER_DELAY)
            else:
                self.env_state = protocol.RUNNING
                self.rewarder.broadcast_describe()
                return

    async def _game_loop(self) -> None:
        next_at = self._clock()
        while True:
            if not self._realtime.is_set():
                await self._realtime.wait()  # lockstep: clients advance the runtime
                next_at = self._clock()
            try:
                if self.env_state == protocol.RUNNING:  # not while a reset awaits the runtime
                    await self.tick()
            except Exception:  # a runtime bug must not take the servers down silently
                log.exception("runtime %s failed in step; resetting it", self.runtime.env_id)
                await self._recover()
            period = 1.0 / self.fps
            next_at += period
            now = self._clock()
            if now - next_at > MAX_CATCH_UP_FRAMES * period:
                self.late_ticks += 1
                next_at = now
            await asyncio.sleep(max(0.0, next_at - now))
