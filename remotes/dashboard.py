"""The agent's dashboard: one page about the remotes an agent drives, live.

Holds :class:`Dashboard` and :func:`encode_png`. ``universe-remote play -n 8 --dashboard``
serves it on 127.0.0.1 (``DEFAULT_PORT``)::

    /                   the page: a card per remote (screen, env id, state, steps/s,
                        episode, return) and a chart of episode returns; the cards
                        shrink to fit the window below the chart (16 at 1280x800)
    /state.json         what the page polls
    /frame/{i}          remote i's latest frame (PNG when small and Pillow is installed,
                        else JPEG; ``?format=``)

Episodes are numbered one way everywhere: a remote's first episode (in this run) is 1,
on its card and on the chart; the remote's own episode id (its count since it started)
is only in the card's tooltip.

The agent loop calls :meth:`Dashboard.record` after each step: it keeps a reference to
the observations (the env hands out copies nobody changes) and adds up a few numbers
under a lock, microseconds per step. Everything else — JSON, image encoding (in the
loop's executor) — happens only when a browser asks, on the env's event loop thread.
"""

from __future__ import annotations

import asyncio
import io
import math
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import orjson

from .loop import LoopThread, shared_loop

if TYPE_CHECKING:
    from aiohttp import web

    from .vector import RemoteVectorEnv

#: Port of ``play --dashboard`` given without a number: not one of a remote's defaults
#: (8000 OpenEnv, 8800+ MCP, 8900+ viewer), so a dashboard runs beside ``serve --mcp-port``.
DEFAULT_PORT: Final = 8700
#: Episodes per remote kept for the chart (older ones are dropped).
MAX_EPISODES: Final = 1000
#: Episodes per remote sent to the page in each poll.
PLOTTED_EPISODES: Final = 300
#: Seconds of history behind the steps/s figure.
RATE_WINDOW: Final = 2.0
#: Screens wider than this are shrunk (by an integer stride) for their card.
MAX_THUMBNAIL_WIDTH: Final = 320
#: Thumbnails up to this many pixels are PNG (lossless, zlib level 1 is cheap at this
#: size); larger ones JPEG (simplejpeg, a few ms at 1024x768).
MAX_PNG_PIXELS: Final = 320 * 320
JPEG_QUALITY: Final = 85
#: zlib level of the PNGs: 1 is the cheapest that still compresses a game's flat colours.
PNG_LEVEL: Final = 1

STATIC_DIR: Final = Path(str(resources.files("remotes") / "static"))


def _pillow() -> Any:
    """Pillow's Image module, or None (it comes with the browser and test extras)."""
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


def encode_png(rgb: np.ndarray, level: int = PNG_LEVEL) -> bytes:
    """``uint8[H, W, 3]`` as a PNG, by Pillow (ImportError without it)."""
    image = _pillow()
    if image is None:
        raise ImportError("PNG thumbnails need Pillow: pip install Pillow (JPEG needs nothing)")
    out = io.BytesIO()
    image.fromarray(np.ascontiguousarray(rgb), "RGB").save(out, "PNG", compress_level=level)
    return out.getvalue()


def encode_frame(rgb: np.ndarray, fmt: str | None = None) -> tuple[bytes, str]:
    """A thumbnail of ``rgb`` and its content type: PNG when small, else JPEG."""
    stride = max(1, math.ceil(rgb.shape[1] / MAX_THUMBNAIL_WIDTH))
    small = np.ascontiguousarray(rgb[::stride, ::stride])
    if fmt is None:
        lossless = small.shape[0] * small.shape[1] <= MAX_PNG_PIXELS and _pillow() is not None
        fmt = "png" if lossless else "jpeg"
    if fmt == "png":
        return encode_png(small), "image/png"
    import simplejpeg  # type: ignore[import-untyped]

    return simplejpeg.encode_jpeg(small, quality=JPEG_QUALITY, colorspace="RGB"), "image/jpeg"


@dataclass
class _Remote:
    """What the page shows about one remote."""

    name: str
    env_id: str | None
    state: str = "starting"
    error: str | None = None
    steps: int = 0
    episode_id: Any = None
    episode_return: float = 0.0
    episode_steps: int = 0
    episodes: int = 0
    #: (episode number from 1, return, steps) of each finished episode.
    returns: deque[tuple[int, float, int]] = field(default_factory=lambda: deque(maxlen=MAX_EPISODES))

    def row(self, rate: float) -> dict[str, Any]:
        recent = [r for _, r, _ in list(self.returns)[-20:]]
        return {
            "name": self.name,
            "env_id": self.env_id,
            "state": self.state,
            "error": self.error,
            "steps": self.steps,
            "fps": round(rate, 1),
            "episode": self.episodes + 1,  # the one under way, numbered as on the chart
            "episode_id": self.episode_id,
            "episode_return": self.episode_return,
            "episode_steps": self.episode_steps,
            "episodes": self.episodes,
            "mean_return": sum(recent) / len(recent) if recent else None,
            "returns": list(self.returns)[-PLOTTED_EPISODES:],
        }


class Dashboard:
    """Serves the page for ``names`` remotes; feed it with :meth:`record`.

    ``url = dashboard.start(port)`` serves on the loop thread (0 picks a free port);
    :meth:`close` stops. :meth:`for_env` names the remotes of a :class:`RemoteVectorEnv`.
    """

    def __init__(
        self,
        names: Sequence[str],
        env_ids: Sequence[str | None] | None = None,
        *,
        target_fps: float | None = None,
        loop: LoopThread | None = None,
        title: str = "universe-remote",
    ) -> None:
        env_ids = list(env_ids) if env_ids is not None else [None] * len(names)
        self.remotes = [_Remote(name, env_id) for name, env_id in zip(names, env_ids, strict=True)]
        self.target_fps = target_fps
        self.title = title
        self.steps = 0
        self._loop = loop or shared_loop()
        self._lock = threading.Lock()
        self._frames: np.ndarray | None = None
        self._frame_step = 0
        self._rates: list[deque[tuple[float, int]]] = [deque() for _ in names]
        self._encoded: dict[tuple[int, str | None], tuple[int, bytes, str]] = {}
        self._runner: web.AppRunner | None = None
        self.started = time.monotonic()

    @classmethod
    def for_env(cls, env: RemoteVectorEnv, **kwargs: Any) -> Dashboard:
        """A dashboard for every remote of ``env``, on ``env``'s loop."""
        names = env.names  # snapshots: session state stays on the loop thread
        env_ids = [d.get("env_id") or env.env_id for d in env.describes]
        return cls(names, env_ids, target_fps=env.fps, loop=env.loop, **kwargs)

    # Fed by the agent loop (any thread) -------------------------------------------------

    def record(
        self,
        observations: np.ndarray,
        rewards: np.ndarray | Sequence[float] | None = None,
        terminated: np.ndarray | Sequence[bool] | None = None,
        truncated: np.ndarray | Sequence[bool] | None = None,
        infos: Mapping[str, Any] | None = None,
    ) -> None:
        """One step of every remote (or the frames of a reset, with rewards None).

        Keeps a reference to ``observations``: do not change the array afterwards
        (gymnasium envs here return a fresh copy each step).
        """
        now = time.monotonic()
        infos = infos or {}
        connected = _info(infos, "remote.connected")
        errors = _info(infos, "remote.error")
        episode_ids = _info(infos, "episode_id")
        names = _info(infos, "remote.name")  # a remote that came back elsewhere (Ray)
        with self._lock:
            self._frames = observations
            self._frame_step += 1
            if rewards is None:  # a reset
                for remote in self.remotes:
                    remote.state, remote.episode_return, remote.episode_steps = "running", 0.0, 0
                return
            self.steps += 1
            for i, remote in enumerate(self.remotes):
                if names is not None and names[1][i]:
                    remote.name = str(names[0][i])
                if episode_ids is not None and episode_ids[1][i]:
                    remote.episode_id = episode_ids[0][i]
                if connected is not None and connected[1][i] and not connected[0][i]:
                    remote.state = "reconnecting"
                    remote.error = str(errors[0][i]) if errors is not None and errors[1][i] else None
                    continue
                if remote.state != "running":
                    remote.state, remote.error = "running", None
                remote.steps += 1
                remote.episode_return += float(rewards[i])
                remote.episode_steps += 1
                if (terminated is not None and terminated[i]) or (truncated is not None and truncated[i]):
                    remote.episodes += 1
                    remote.returns.append((remote.episodes, remote.episode_return, remote.episode_steps))
                    remote.episode_return, remote.episode_steps = 0.0, 0
                    remote.state = "resetting"
                rates = self._rates[i]
                rates.append((now, remote.steps))
                while len(rates) > 2 and now - rates[1][0] > RATE_WINDOW:
                    rates.popleft()

    # Read by the page (the loop thread) ----------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """What ``/state.json`` serves."""
        now = time.monotonic()
        with self._lock:
            rows = []
            for remote, rates in zip(self.remotes, self._rates, strict=True):
                rate = 0.0
                if len(rates) >= 2 and now - rates[-1][0] < RATE_WINDOW:
                    (t0, s0), (t1, s1) = rates[0], rates[-1]
                    rate = (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0
                rows.append(remote.row(rate))
            return {
                "title": self.title,
                "steps": self.steps,
                "seconds": now - self.started,
                "target_fps": self.target_fps,
                "frame": self._frame_step,
                "remotes": rows,
            }

    def frame(self, index: int) -> tuple[int, np.ndarray | None]:
        """(frame counter, remote ``index``'s latest frame or None)."""
        with self._lock:
            frames = self._frames
            step = self._frame_step
        return step, None if frames is None else frames[index]

    # Serving -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._runner is not None, "call start() first"
        return int(self._runner.addresses[0][1])

    def start(self, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> str:
        """Serve on ``host:port`` from the loop thread; the page's URL."""
        self._loop.run(self._start(host, port), timeout=30)
        return f"http://{host}:{self.port}/"

    def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            try:
                self._loop.run(runner.cleanup(), timeout=10)
            except (RuntimeError, TimeoutError):
                pass

    async def _start(self, host: str, port: int) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/state.json", self._state)
        app.router.add_get("/frame/{index:\\d+}", self._frame)
        app.router.add_static("/static/", STATIC_DIR)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner

    async def _page(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        return web.FileResponse(STATIC_DIR / "dashboard.html", headers={"Cache-Control": "no-store"})

    async def _state(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(
            body=orjson.dumps(self.snapshot(), default=str, option=orjson.OPT_SERIALIZE_NUMPY),
            content_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def _frame(self, request: web.Request) -> web.Response:
        from aiohttp import web

        index = int(request.match_info["index"])
        if index >= len(self.remotes):
            raise web.HTTPNotFound(text=f"there are {len(self.remotes)} remotes (0..{len(self.remotes) - 1})")
        fmt = request.query.get("format")
        if fmt not in (None, "png", "jpeg"):
            raise web.HTTPBadRequest(text="format must be png or jpeg")
        if fmt == "png" and _pillow() is None:
            raise web.HTTPBadRequest(text="format=png needs Pillow here (pip install Pillow); jpeg works")
        step, frame = self.frame(index)
        if frame is None:
            raise web.HTTPServiceUnavailable(text="no frame yet: the agent has not reset its env")
        cached = self._encoded.get((index, fmt))
        if cached is None or cached[0] != step:
            loop = asyncio.get_running_loop()
            data, content_type = await loop.run_in_executor(None, encode_frame, frame, fmt)
            cached = self._encoded[(index, fmt)] = (step, data, content_type)
        return web.Response(
            body=cached[1], content_type=cached[2], headers={"Cache-Control": "no-store"}
        )


def _info(infos: Mapping[str, Any], key: str) -> tuple[Any, Any] | None:
    """(values, mask) of a gymnasium vector info key, or None."""
    if key not in infos:
        return None
    values = infos[key]
    mask = infos.get(f"_{key}", np.ones(len(values), bool))
    return values, mask
