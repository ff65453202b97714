"""The remote process: one runtime, its game loop, and the servers that expose it.

Holds :class:`Remote`. It runs the runtime at ``fps`` in real time whether or not
anyone acts (Universe's semantics), applies the input that arrived since the last tick
at the next tick (from VNC and from ``v0.agent.action`` alike), serves each frame over
VNC, sends each tick's reward at most once, and resets on request or by itself after
``done``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from rewarder import protocol
from rewarder.errors import BadRequest
from rewarder.server import RewarderServer
from vncdriver import keysyms, messages
from vncdriver.errors import UnknownKey
from vncdriver.server import VNCServer

from . import registry
from .base import InputEvent, KeyEvent, PointerEvent, Runtime
from .errors import UnknownEnvironment

log = logging.getLogger(__name__)

#: Input events waiting for the next tick; more means a client floods us faster than
#: any player could type, and the excess is refused with an error.
MAX_PENDING_EVENTS: Final = 4096
#: The input source of the rewarder's active client (VNC clients are ``("vnc", id)``).
REWARDER_SOURCE: Final = "rewarder"
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Serve ``env``: an env id from the registry, or a runtime instance of your own.

        ``password`` guards both channels (VNC uses its first 8 characters);
        ``view_only_password`` lets VNC viewers watch without their input reaching the game.
        """
        self.runtime: Runtime = registry.make(env) if isinstance(env, str) else env
        self.fps = float(fps or self.runtime.fps)
        self.episode_id = 0
        self.env_state = protocol.RESETTING
        self.frame = 0  # frames drawn since the remote started; never goes back
        self.episode_frame = 0
        self.late_ticks = 0
        self.rewarder = RewarderServer(self, password=password)
        self.vnc = VNCServer(
            self.runtime.framebuffer,
            name=self.runtime.env_id,
            password=password,
            view_only_password=view_only_password,
            on_input=self._vnc_input,
            on_disconnect=self._vnc_left,
        )
        self._clock = clock
        self._pending: list[InputEvent] = []
        #: What each input source (the rewarder's active client, each VNC client) holds,
        #: so that a source that leaves can be made to let go.
        self._held: dict[object, tuple[set[str], list[int]]] = {}
        self._seeds = np.random.default_rng()
        self._loop_task: asyncio.Task[None] | None = None
        self._frame_waiters: list[asyncio.Future[int]] = []

    # Lifecycle ---------------------------------------------------------------------------

    async def start(
        self, host: str = "127.0.0.1", rewarder_port: int = 15900, vnc_port: int = 5900
    ) -> None:
        """Bind both ports (0 picks a free one) and start the game loop."""
        self._begin_episode(seed=None)
        self.env_state = protocol.RUNNING
        await self.rewarder.start(host, rewarder_port)
        try:
            await self.vnc.start(host, vnc_port)
        except OSError:
            await self.rewarder.close("the remote failed to start")
            raise
        self._loop_task = asyncio.get_running_loop().create_task(self._game_loop())

    async def close(self, reason: str = "the remote is shutting down") -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
        await asyncio.gather(self.rewarder.close(reason), self.vnc.close())
        self.runtime.close()

    # EnvHandler: what the rewarder server asks of us ------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "env_id": self.runtime.env_id,
            "env_state": self.env_state,
            "fps": self.fps,
            **self.runtime.describe(),
        }

    async def reset(self, request: protocol.ResetRequest, reply: Callable[[int], None]) -> None:
        if request.env_id is not None and request.env_id != self.runtime.env_id:
            try:
                runtime = registry.make(request.env_id)
            except UnknownEnvironment as exc:
                raise BadRequest(str(exc), request.message_id) from None
            self.runtime.close()
            self.runtime = runtime
            self.vnc.frame_ready(runtime.framebuffer)
            if request.fps is None:
                self.fps = float(runtime.fps)
        if request.fps is not None:
            self.fps = float(request.fps)
        self.episode_id = max(self.episode_id, request.episode_id or 0)
        self._begin_episode(request.seed)
        reply(self.episode_id)
        self.env_state = protocol.RUNNING
        self.rewarder.broadcast_describe()

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

    def _events_from_action(self, request: protocol.ActionRequest) -> list[InputEvent]:
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

    def _begin_episode(self, seed: int | None) -> None:
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
        self.runtime.reset(seed)
        self.vnc.frame_ready()

    def tick(self) -> None:
        """Advance the runtime one frame with the pending input and report what it earned."""
        events, self._pending = self._pending, []
        result = self.runtime.step(events)
        self.frame += 1
        self.episode_frame += 1
        self.vnc.frame_ready()
        self._frame_drawn()
        if result.text is not None:
            self.rewarder.broadcast_text(self.episode_id, result.text)
        if result.observation is not None:
            self.rewarder.broadcast_observation(self.episode_id, result.observation)
        if result.reward or result.done:
            self.rewarder.broadcast_reward(
                self.episode_id, result.reward, result.done, result.info
            )
        if result.done:
            self._begin_episode(seed=None)
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

    async def _game_loop(self) -> None:
        next_at = self._clock()
        while True:
            try:
                self.tick()
            except Exception:  # a runtime bug must not take the servers down silently
                log.exception("runtime %s failed in step; resetting it", self.runtime.env_id)
                self._begin_episode(seed=None)
                self.env_state = protocol.RUNNING
                self.rewarder.broadcast_describe()
            period = 1.0 / self.fps
            next_at += period
            now = self._clock()
            if now - next_at > MAX_CATCH_UP_FRAMES * period:
                self.late_ticks += 1
                next_at = now
            await asyncio.sleep(max(0.0, next_at - now))
