"""``RemoteVectorEnv``: many remotes as one gymnasium ``VectorEnv``, on one event loop.

All sessions run on the process's single loop thread (no thread or process per remote).
Stepping sends every remote its events, waits once for the shared frame boundary, and
gathers every newest frame and reward.

Autoreset: gymnasium's ``NEXT_STEP`` mode. A remote starts its next episode by itself
when one ends (as Universe's did), so the step after ``terminated``/``truncated`` for
env *i* does not send env *i*'s action: it returns the first frame of the new episode
with reward 0.

A remote that drops returns ``truncated=True`` with ``info["remote.error"]``; while it is
away its slot repeats its last frame with reward 0 and ``info["remote.connected"] =
False``, and it is reconnected in the background without stopping the others. When it
is back, it is reset and that step is its autoreset step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rewarder.protocol import LOCKSTEP, REALTIME

from .address import RemoteAddress
from .env import DEFAULT_FPS
from .loop import LoopThread, shared_loop
from .session import (
    RemoteSession,
    RemoteUnavailable,
    VNCOptions,
    check_stepping,
    resolve_addresses,
)
from .spaces import VNCActionSpace

log = logging.getLogger(__name__)

#: Seconds between reconnection attempts of a remote that dropped.
RECONNECT_INTERVAL: Final = 1.0


class RemoteVectorEnv(VectorEnv[np.ndarray, Any, np.ndarray]):
    """``num_envs`` remotes named by one address string (or a list of them).

    Takes :class:`~remotes.env.RemoteEnv`'s keyword arguments. All remotes must share
    one screen size (the observations are stacked).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"]}

    def __init__(
        self,
        addresses: str | Sequence[str] | Sequence[RemoteAddress],
        password: str | None = None,
        fps: float | None = None,
        *,
        env_id: str | None = None,
        encoding: str | None = None,
        quality: int | None = None,
        start_timeout: float = 30.0,
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        mode: str = REALTIME,
        frameskip: int = 1,
        loop: LoopThread | None = None,
    ) -> None:
        check_stepping(mode, frameskip)
        self.mode, self.frameskip = mode, frameskip
        remotes, address_password = resolve_addresses(addresses)
        self.num_envs = len(remotes)
        self.render_mode = render_mode
        self.env_id = env_id
        self.start_timeout = start_timeout
        self.max_episode_steps = max_episode_steps
        self._requested_fps = fps
        self._loop = loop or shared_loop()
        pw = password if password is not None else address_password
        options = VNCOptions(encoding=encoding, quality=quality)
        self.sessions = [
            RemoteSession(r, pw, vnc=options, start_timeout=start_timeout) for r in remotes
        ]
        self._loop.run(self._connect_all(), start_timeout + 5.0)
        self._configure_spaces()
        shape = self.single_observation_space.shape
        assert shape is not None
        h, w = shape[:2]
        self._frames = np.zeros((self.num_envs, h, w, 3), np.uint8)
        self._autoreset = np.zeros(self.num_envs, bool)
        self._steps = np.zeros(self.num_envs, np.int64)
        self._reconnecting: dict[int, asyncio.Future[None]] = {}
        #: Seeds for the episodes a lockstep env starts by itself (autoreset), drawn from
        #: the reset seed so a seeded run replays exactly.
        self._autoreset_seeds: list[np.random.Generator | None] = [None] * self.num_envs
        self._next_at: float | None = None
        self._closed = False
        #: What this env started and stops on close (``gymnasium.make_vec``'s local remotes).
        self.owned: Any = None

    async def _connect_all(self) -> None:
        results = await asyncio.gather(
            *(s.connect() for s in self.sessions), return_exceptions=True
        )
        failed = [(s.name, r) for s, r in zip(self.sessions, results, strict=True) if r is not None]
        if failed:
            await asyncio.gather(*(s.close() for s in self.sessions))
            names = ", ".join(name for name, _ in failed)
            raise RemoteUnavailable(
                names, f"{len(failed)} of {self.num_envs} remotes did not answer", failed[0][1]
            )

    def _configure_spaces(self) -> None:
        sizes = {s.screen_size for s in self.sessions}
        if len(sizes) != 1:
            listed = ", ".join(f"{s.name}: {w}x{h}" for s in self.sessions for w, h in [s.screen_size])
            raise ValueError(f"remotes have different screen sizes ({listed}); use one env id")
        ((width, height),) = sizes
        describe = self.sessions[0].describe_body()
        self.fps = float(self._requested_fps or describe.get("fps") or DEFAULT_FPS)
        self.single_observation_space = spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = VNCActionSpace(
            describe.get("keys", ()), width, height, int(describe.get("buttons", 1))
        )
        self.action_space = spaces.Tuple([self.single_action_space] * self.num_envs)
        self.metadata = {**self.metadata, "render_fps": self.fps}

    # gymnasium API ---------------------------------------------------------------------------

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every remote (env *i* gets ``seed + i`` when ``seed`` is an int)."""
        super().reset(seed=seed if isinstance(seed, int) or seed is None else None)
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"{len(seeds)} seeds for {self.num_envs} remotes")
        env_id = (options or {}).get("env_id", self.env_id)
        self._autoreset_seeds = [
            None if s is None else np.random.default_rng(s) for s in seeds
        ]
        episodes = self._loop.run(self._reset_all(seeds, env_id))
        if env_id:
            self._configure_spaces()
        self._autoreset[:] = False
        self._steps[:] = 0
        self._next_at = None
        infos: dict[str, Any] = {}
        for i, episode in enumerate(episodes):
            infos = self._add_info(infos, {"episode_id": episode}, i)
        return self._frames.copy(), infos

    async def _reset_all(self, seeds: list[int | None], env_id: str | None) -> list[int | None]:
        async def one(session: RemoteSession, seed: int | None) -> int | None:
            if not session.connected:
                await session.connect()
            return await session.reset(
                env_id=env_id, seed=seed, fps=self._requested_fps, mode=session.mode_request(self.mode)
            )

        episodes = await asyncio.gather(
            *(one(s, seed) for s, seed in zip(self.sessions, seeds, strict=True))
        )
        for i, session in enumerate(self.sessions):  # on the loop thread, which writes them
            self._frames[i] = session.frame()
        return episodes

    def step(
        self, actions: Sequence[Sequence[tuple[Any, ...]]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._closed:
            raise RuntimeError("step() on a closed RemoteVectorEnv")
        if len(actions) != self.num_envs:
            raise ValueError(f"{len(actions)} actions for {self.num_envs} remotes")
        space = self.single_action_space
        assert isinstance(space, VNCActionSpace)
        for i, action in enumerate(actions):
            problem = space.check(action)
            if problem is not None:
                raise ValueError(f"invalid action for remote {i} ({self.sessions[i].name}): {problem}")
        return self._loop.run(self._step([list(a) for a in actions]))

    async def _step(
        self, actions: list[list[tuple[Any, ...]]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self.mode == LOCKSTEP:
            return await self._step_lockstep(actions)
        n = self.num_envs
        for i, session in enumerate(self.sessions):
            if not self._autoreset[i] and i not in self._reconnecting and session.connected:
                session.send(actions[i])
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._next_at = (now if self._next_at is None else self._next_at) + 1.0 / self.fps
        late = now - self._next_at
        if late > 0:
            self._next_at = now
        else:
            await asyncio.sleep(-late)
            late = 0.0
        rewards = np.zeros(n, np.float64)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        infos: dict[str, Any] = {}
        for i, session in enumerate(self.sessions):
            info: dict[str, Any] = {"step.late": late}
            if i in self._reconnecting:
                info.update({"remote.connected": False, "remote.error": session.error})
                if self._reconnecting[i].done():
                    self._finish_reconnect(i, info)
            elif not session.connected:
                info.update({"remote.connected": False, "remote.error": session.error})
                truncated[i] = True
                self._reconnecting[i] = loop.create_task(self._reconnect(i))
                log.warning("remote %s dropped: %s; reconnecting", session.name, session.error)
            elif self._autoreset[i]:
                self._frames[i] = session.frame()
                self._steps[i] = 0
                info["episode_id"] = session.rewarder.episode_id if session.rewarder else None
            else:
                result = session.pop()
                self._frames[i] = session.frame()
                self._steps[i] += 1
                rewards[i] = result.reward
                terminated[i] = result.done
                limit = self.max_episode_steps
                truncated[i] = limit is not None and self._steps[i] >= limit
                info.update(result.info)
                info.update(episode_id=result.episode_id, text=list(result.text))
                info.update(session.info())
            infos = self._add_info(infos, info, i)
        self._autoreset = terminated | truncated
        return self._frames.copy(), rewards, terminated, truncated, infos

    async def _step_lockstep(
        self, actions: list[list[tuple[Any, ...]]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Every remote advances ``frameskip`` frames at once; no clock involved."""
        n = self.num_envs
        rewards = np.zeros(n, np.float64)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)

        async def one(i: int) -> dict[str, Any]:
            session = self.sessions[i]
            if self._autoreset[i]:
                if not session.connected:
                    await session.connect()
                rng = self._autoreset_seeds[i]
                seed = None if rng is None else int(rng.integers(2**31))
                episode = await session.reset(seed=seed, mode=LOCKSTEP)
                self._frames[i] = session.frame()
                self._steps[i] = 0
                return {"episode_id": episode}
            frame, reply = await session.step_lockstep(actions[i], self.frameskip)
            self._frames[i] = frame
            self._steps[i] += 1
            rewards[i], terminated[i] = reply.reward, reply.done
            limit = self.max_episode_steps
            truncated[i] = limit is not None and self._steps[i] >= limit
            return {**reply.info, "episode_id": reply.episode_id, "frame": reply.frame}

        results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
        infos: dict[str, Any] = {}
        for i, result in enumerate(results):
            if isinstance(result, BaseException):
                if not isinstance(result, RemoteUnavailable):
                    raise result
                truncated[i] = True
                result = {"remote.connected": False, "remote.error": str(result)}
            infos = self._add_info(infos, result, i)
        self._autoreset = terminated | truncated
        return self._frames.copy(), rewards, terminated, truncated, infos

    async def _reconnect(self, i: int) -> None:
        session = self.sessions[i]
        while True:
            try:
                await session.connect()
                await session.reset(env_id=self.env_id, fps=self._requested_fps)
                return
            except RemoteUnavailable as exc:
                log.info("remote %s still away: %s", session.name, exc)
                await asyncio.sleep(RECONNECT_INTERVAL)

    def _finish_reconnect(self, i: int, info: dict[str, Any]) -> None:
        del self._reconnecting[i]
        session = self.sessions[i]
        self._frames[i] = session.frame()
        self._steps[i] = 0
        info.update({"remote.connected": True, "remote.error": None, "remote.reconnected": True})
        log.info("remote %s is back", session.name)

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        return self._frames.copy() if self.render_mode == "rgb_array" else None

    def close_extras(self, **kwargs: Any) -> None:
        if self._closed:
            return
        self._closed = True
        for task in self._reconnecting.values():
            self._loop.loop.call_soon_threadsafe(task.cancel)
        try:
            self._loop.run(self._close_all(), 10)
        except (RuntimeError, TimeoutError):
            pass
        if self.owned is not None:
            self.owned.close()

    async def _close_all(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sessions), return_exceptions=True)
