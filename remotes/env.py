"""``RemoteEnv``: one remote as a gymnasium env.

The observation is the remote's screen, ``uint8[H, W, 3]``; an action is a list of VNC
events (:class:`~remotes.spaces.VNCActionSpace`). Stepping is real time, like Universe's
Throttle: :meth:`RemoteEnv.step` sends the events at once, then waits for the next frame
boundary at the remote's fps, and returns the newest frame with the reward the current
episode earned since the last step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Final, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from rewarder.protocol import FRAME_INFO_KEY, LOCKSTEP, REALTIME
from vncdriver.errors import VNCError
from vncdriver.messages import FrameTag

from .address import RemoteAddress
from .loop import LoopThread, shared_loop
from .session import (
    RemoteSession,
    RemoteUnavailable,
    VNCOptions,
    check_stepping,
    resolve_addresses,
)
from .spaces import VNCActionSpace

#: The id RemoteEnv registers under (``gymnasium.make("universe-remote/Remote-v0", ...)``);
#: real-time remotes are nondeterministic by nature.
ENV_ID: Final = "universe-remote/Remote-v0"
DEFAULT_FPS: Final = 60.0
#: Seconds connecting may take on top of ``start_timeout`` before we give up waiting.
_GRACE: Final = 5.0


def _spec(kwargs: dict[str, Any]) -> EnvSpec:
    """The spec ``gymnasium.make`` needs to build this env again (``check_env`` does)."""
    return EnvSpec(
        ENV_ID,
        entry_point="remotes.env:RemoteEnv",
        nondeterministic=True,
        kwargs={k: v for k, v in kwargs.items() if v is not None},
    )




class RemoteEnv(gymnasium.Env[np.ndarray, list[tuple[Any, ...]]]):
    """A gymnasium env over one remote at ``address`` (``vnc://host:5900+15900``).

    Args:
        address: Universe's grammar; ``?password=`` may carry the password.
        password: the remote's password (overrides the address's).
        fps: steps per second (default: the remote's own fps from ``v0.env.describe``).
        env_id: ask the remote for this environment at every reset.
        encoding, quality: how VNC sends pixels (``"tight"``/``"zrle"``/``"raw"``; None:
            Raw on loopback, Tight elsewhere; quality 0-9 turns on lossy JPEG).
        start_timeout: seconds to wait for the remote to answer (connect and reconnect).
        max_episode_steps: truncate episodes after this many steps (None: never).
        mode: ``"realtime"`` (Universe's: the remote runs at its fps whatever we do) or
            ``"lockstep"`` (the remote advances only when we step: deterministic, and as
            fast as the runtime goes).
        frameskip: frames one step spans (lockstep: exactly; real time: frame periods).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": DEFAULT_FPS}

    def __init__(
        self,
        address: str | RemoteAddress = "vnc://127.0.0.1:5900+15900",
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
        remotes, address_password = resolve_addresses(address)
        if len(remotes) != 1:
            raise ValueError(
                f"RemoteEnv drives one remote and {address!r} names {len(remotes)}; "
                "use RemoteVectorEnv for several"
            )
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array'")
        self.render_mode = render_mode
        self.env_id = env_id
        self.start_timeout = start_timeout
        self.max_episode_steps = max_episode_steps
        self._requested_fps = fps
        self._loop = loop or shared_loop()
        self._session = RemoteSession(
            remotes[0],
            password if password is not None else address_password,
            vnc=VNCOptions(encoding=encoding, quality=quality),
            start_timeout=start_timeout,
        )
        self._run(self._session.connect(), start_timeout + _GRACE)
        self.spec = _spec(
            {
                "address": str(remotes[0]),
                "password": password if password is not None else address_password,
                "fps": fps,
                "env_id": env_id,
                "encoding": encoding,
                "quality": quality,
                "start_timeout": start_timeout,
                "max_episode_steps": max_episode_steps,
                "mode": mode,
                "frameskip": frameskip,
            }
        )
        self._configure_spaces()
        self._frame = self._session.frame()
        self._steps = 0
        self._next_at: float | None = None
        self._last_frame: int | None = None
        self._episode_id: int | None = None
        self._closed = False
        #: What this env started and stops on close (``gymnasium.make``'s local remotes).
        self.owned: Any = None

    # Helpers ---------------------------------------------------------------------------

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        return self._loop.run(coro, timeout)

    def _configure_spaces(self) -> None:
        width, height = self._session.screen_size
        describe = self._session.describe_body()
        self.fps = float(self._requested_fps or describe.get("fps") or DEFAULT_FPS)
        self.metadata = {**self.metadata, "render_fps": self.fps}
        self.observation_space = spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.action_space = VNCActionSpace(
            describe.get("keys", ()), width, height, int(describe.get("buttons", 1))
        )

    @property
    def session(self) -> RemoteSession:
        """The async session underneath (for diagnostics)."""
        return self._session

    # gymnasium API -----------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start a new episode (``options={"env_id": ...}`` switches environment).

        Reconnects first if the remote dropped, waiting up to ``start_timeout``.
        """
        super().reset(seed=seed)
        env_id = (options or {}).get("env_id", self.env_id)
        if not self._session.connected:
            self._run(self._session.connect(), self.start_timeout + _GRACE)
        self._episode_id = self._run(
            self._session.reset(
                env_id=env_id, seed=seed, fps=self._requested_fps, mode=self._session.mode_request(self.mode)
            )
        )
        shape = self.observation_space.shape or ()
        if self._session.screen_size != shape[1::-1] or env_id:
            self._configure_spaces()
        self._steps = 0
        self._next_at = None
        self._last_frame = None
        self._frame, info = self._run(self._snapshot())
        return self._frame, {"episode_id": self._episode_id, **info}

    def step(
        self, action: Sequence[tuple[Any, ...]]
    ) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._closed:
            raise RuntimeError("step() on a closed RemoteEnv")
        space = self.action_space
        assert isinstance(space, VNCActionSpace)
        problem = space.check(action)
        if problem is not None:
            raise ValueError(f"invalid action for remote {self._session.name}: {problem}")
        if not self._session.connected:
            return self._lost()
        if self.mode == LOCKSTEP:
            try:
                frame, reply, info, tag = self._run(self._step_lockstep(list(action)))
            except RemoteUnavailable:
                return self._lost()
            reward, done = reply.reward, reply.done
            info.update(reply.info, episode_id=reply.episode_id)
        else:
            frame, result, info, tag, late, sent_at = self._run(self._step(list(action)))
            if not self._session.connected:
                return self._lost()
            reward, done = result.reward, result.done
            info.update(result.info)
            info.update(
                episode_id=result.episode_id,
                env_state=result.env_state,
                text=list(result.text),
            )
            info["step.late"] = late
            if result.observation is not None:
                info["rewarder.observation"] = result.observation
            info.update(self._latency(tag, sent_at))
        if tag is not None:
            info["frame"] = tag.frame
        self._frame = frame
        self._steps += 1
        truncated = self.max_episode_steps is not None and self._steps >= self.max_episode_steps
        return frame, reward, done, truncated, info

    def _latency(self, tag: FrameTag | None, sent_at: float) -> dict[str, float]:
        """Latencies read from the frame tag's server time (no pixels read): how long
        after our action the shown frame was drawn, and how old it is now."""
        skew = self._session.clock_skew()
        if tag is None or skew is None:
            return {}
        drawn = tag.timestamp - skew  # the frame's time on our clock
        latency = {"latency.frame_to_agent": time.time() - drawn}
        if drawn >= sent_at:
            latency["latency.action_to_frame"] = drawn - sent_at
        return latency

    async def _step_lockstep(
        self, action: list[tuple[Any, ...]]
    ) -> tuple[np.ndarray, Any, dict[str, Any], FrameTag | None]:
        frame, reply = await self._session.step_lockstep(action, self.frameskip)
        return frame, reply, self._session.info(), self._session.tag

    async def _step(
        self, action: list[tuple[Any, ...]]
    ) -> tuple[np.ndarray, Any, dict[str, Any], FrameTag | None, float, float]:
        """Real time: send, wait for the next frame boundary, gather (on the loop thread)."""
        session = self._session
        sent_at = time.time()
        session.send(action)
        if session.frame_tags and session.tag is not None:
            late = await self._wait_frames()
        else:
            late = await self._wait_clock()
        result = session.pop()
        await session.show_frame_of(result.info.get(FRAME_INFO_KEY), 2.0 / self.fps)
        return session.frame(), result, session.info(), session.tag, late, sent_at

    async def _wait_frames(self) -> float:
        """Pace by the remote's own frame clock: return as soon as the frame ``frameskip``
        past the last one returned is in (measured: frames ~1 ms old instead of 0-16 ms by
        our own clock). Returns how late we are, in seconds."""
        vnc, tag = self._session.vnc, self._session.tag
        assert vnc is not None and tag is not None
        last = tag.frame if self._last_frame is None else self._last_frame
        target = last + self.frameskip
        if tag.frame >= target:
            late = (tag.frame - target) / self.fps
        else:
            late = 0.0
            try:
                await vnc.wait_frame(target, timeout=2 * self.frameskip / self.fps + 0.1)
            except (TimeoutError, VNCError):  # stalled or gone: step() reports a lost remote
                pass
        self._last_frame = vnc.tag.frame if vnc.tag is not None else None
        return late

    async def _wait_clock(self) -> float:
        """Pace by our own clock at ``fps`` (remotes whose VNC server sends no frame tags)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._next_at is None:
            self._next_at = now
        self._next_at += self.frameskip / self.fps
        late = now - self._next_at
        if late > 0:  # the agent took longer than a frame: do not try to catch up
            self._next_at = now
            return late
        await asyncio.sleep(-late)
        return 0.0

    async def _snapshot(self) -> tuple[np.ndarray, dict[str, Any]]:
        """The frame and diagnostics, read on the loop thread (which writes them)."""
        return self._session.frame(), self._session.info()

    def _lost(self) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The remote dropped: end the episode; the next reset reconnects."""
        error = self._session.error or "connection lost"
        info = {"remote.error": error, "remote.connected": False, "remote.name": self._session.name}
        return self._frame, 0.0, False, True, info

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        return self._frame if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._session.close(), 10)
        except (RuntimeError, TimeoutError, RemoteUnavailable):
            pass
        if self.owned is not None:
            self.owned.close()
