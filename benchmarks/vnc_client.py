"""VNC client decode: new frames/s and client CPU per frame, ours vs asyncvnc and vncdotool.

A :class:`vncdriver.server.VNCServer` in its own process draws a scene at 60 fps; each
client runs alone in a fresh process that connects, waits for its first frame, then
reads for DURATION seconds while ``time.process_time()`` measures its CPU (all threads,
so vncdotool's Twisted reactor counts). The server and the clients are different
processes, so the figures are the client's own cost.

Scenes: ``sprite`` (game-like: a still background with a 16x16 sprite moving every
frame) and ``full`` (every pixel changes every frame: noise, the worst case), at 160x210
(Atari) and 1024x768. The server writes a frame counter into pixel (0, 0); a client counts
a *new frame* when that counter changes, because peers re-fetch whole frames (asyncvnc's
``screenshot()`` always asks for a non-incremental update) and re-fetches are not news.

Clients, each used its best documented way:

- ours: :class:`vncdriver.client.VNCClient` with Raw (the same stream the peers read),
  Tight and ZRLE (lossless), counting in ``on_update``;
- asyncvnc: ``video.refresh()`` + ``read()`` (incremental after the first frame; it asks
  only for zlib, which our server lacks, so it gets Raw), and ``screenshot()`` (its
  one-call API: a full non-incremental frame each time);
- vncdotool: ``api.connect`` + ``refreshScreen(incremental=True)`` (Raw).

Ratios are CPU per new frame of the peer divided by ours (how many times cheaper ours is)
and new frames per second of ours divided by the peer's.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from benchmarks.common import quick  # noqa: E402

#: Screen sizes: Atari's 160x210 and a desktop's 1024x768 (width, height).
SIZES = quick([(160, 210), (1024, 768)], [(160, 210)])
SCENES = quick(["sprite", "full"], ["sprite"])
#: Frames per second the server draws (Universe's real-time rate).
FPS = 60
#: Seconds each client is measured for; with process start-up a run takes ~3.5 s and
#: the whole benchmark (24 runs) about 90 s.
DURATION = quick(2.5, 1.0)
#: Seconds a client has to connect and receive its first frame.
CONNECT_TIMEOUT = 20.0
SPRITE = 16
CLIENTS = ["ours-raw", "ours-tight", "ours-zrle", "asyncvnc", "asyncvnc-screenshot", "vncdotool"]
#: The rows the ratios compare against (ours, with the stream the peers get, and default).
OURS = ["ours-raw", "ours-tight"]
PEERS = ["asyncvnc", "asyncvnc-screenshot", "vncdotool"]


@dataclass(frozen=True)
class Result:
    frames: int  # new frames seen while measuring
    fetches: int  # updates or screenshots read (>= frames for re-fetching peers)
    cpu: float  # process CPU seconds while measuring
    wall: float  # seconds measured

    @property
    def fps(self) -> float:
        return self.frames / self.wall if self.wall else 0.0

    @property
    def cpu_per_frame_ms(self) -> float:
        return 1000 * self.cpu / self.frames if self.frames else float("inf")


# The server process -----------------------------------------------------------------------


class Scene:
    """Draws frame ``n`` of a scene into ``frame`` in place, counter in pixel (0, 0)."""

    def __init__(self, kind: str, width: int, height: int) -> None:
        rng = np.random.default_rng(0)
        self.kind, self.width, self.height = kind, width, height
        if kind == "sprite":
            # A game-like background: a few flat colours in horizontal bands.
            palette = rng.integers(0, 256, (6, 3), dtype=np.uint8)
            bands = np.arange(height) * 6 // height
            self.background = np.ascontiguousarray(
                np.broadcast_to(palette[bands][:, None, :], (height, width, 3))
            )
            self.sprite = rng.integers(0, 256, (SPRITE, SPRITE, 3), dtype=np.uint8)
            self.frame = self.background.copy()
            self._at: tuple[int, int] | None = None
        else:
            self.frames = [
                rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(3)
            ]
            self.frame = self.frames[0].copy()

    def draw(self, n: int) -> None:
        if self.kind == "sprite":
            if self._at is not None:
                y, x = self._at
                self.frame[y : y + SPRITE, x : x + SPRITE] = self.background[
                    y : y + SPRITE, x : x + SPRITE
                ]
            span_x, span_y = self.width - SPRITE, self.height - SPRITE
            x = (n * 2) % (2 * span_x)
            x = x if x < span_x else 2 * span_x - x
            y = (n // 3) % span_y
            self.frame[y : y + SPRITE, x : x + SPRITE] = self.sprite
            self._at = (y, x)
        else:
            np.copyto(self.frame, self.frames[n % len(self.frames)])
        self.frame[0, 0] = (n & 0xFF, (n >> 8) & 0xFF, (n >> 16) & 0xFF)


def _serve(kind: str, width: int, height: int, fps: float, pipe: Connection) -> None:
    asyncio.run(_serve_async(kind, width, height, fps, pipe))


async def _serve_async(kind: str, width: int, height: int, fps: float, pipe: Connection) -> None:
    from vncdriver.server import VNCServer

    scene = Scene(kind, width, height)
    server = VNCServer(scene.frame, name=f"bench {kind} {width}x{height}")
    await server.start("127.0.0.1", 0)
    pipe.send(server.port)
    loop = asyncio.get_running_loop()
    n, due = 0, loop.time()
    while True:  # until the parent terminates us
        n += 1
        scene.draw(n)
        server.frame_ready()
        due += 1 / fps
        now = loop.time()
        due = max(due, now)  # fell behind: do not catch up with a burst
        await asyncio.sleep(due - now)


# The client processes ---------------------------------------------------------------------


def _counter(pixel: Any) -> int:
    return int(pixel[0]) | int(pixel[1]) << 8 | int(pixel[2]) << 16


class _Meter:
    def __init__(self) -> None:
        self.frames = self.fetches = 0
        self.last = -1
        self.cpu0 = self.t0 = 0.0

    def start(self, pixel: Any) -> None:
        self.last = _counter(pixel)
        self.frames = self.fetches = 0
        self.cpu0, self.t0 = time.process_time(), time.perf_counter()

    def see(self, pixel: Any) -> None:
        self.fetches += 1
        counter = _counter(pixel)
        if counter != self.last:
            self.frames += 1
            self.last = counter

    def result(self) -> Result:
        cpu, wall = time.process_time() - self.cpu0, time.perf_counter() - self.t0
        return Result(self.frames, self.fetches, cpu, wall)


async def _ours(port: int, encoding: str) -> Result:
    from vncdriver.client import VNCClient

    meter = _Meter()
    measuring = False

    def on_update(client: VNCClient, update: object) -> None:
        if measuring:
            meter.see(client.framebuffer[0, 0])

    async with VNCClient(f"127.0.0.1::{port}", encoding=encoding, on_update=on_update) as client:
        await client.wait_update(0, timeout=CONNECT_TIMEOUT)
        meter.start(client.framebuffer[0, 0])
        measuring = True
        await asyncio.sleep(DURATION)
        return meter.result()


async def _asyncvnc(port: int, screenshot: bool) -> Result:
    import asyncvnc

    meter = _Meter()
    async with asyncvnc.connect("127.0.0.1", port) as client:
        pixels = await asyncio.wait_for(client.screenshot(), CONNECT_TIMEOUT)
        meter.start(pixels[0, 0])
        end = time.perf_counter() + DURATION
        while time.perf_counter() < end:
            if screenshot:
                pixels = await client.screenshot()
            else:
                client.video.refresh()
                while await client.read() is not asyncvnc.UpdateType.VIDEO:
                    pass
                pixels = client.video.as_rgba()
            meter.see(pixels[0, 0])
        return meter.result()


def _vncdotool(port: int) -> Result:
    from vncdotool import api

    meter = _Meter()
    client = api.connect(f"127.0.0.1::{port}", timeout=CONNECT_TIMEOUT)
    try:
        protocol = client.refreshScreen(False)
        meter.start(protocol.screen.getpixel((0, 0)))
        end = time.perf_counter() + DURATION
        while time.perf_counter() < end:
            protocol = client.refreshScreen(True)
            meter.see(protocol.screen.getpixel((0, 0)))
        return meter.result()
    finally:
        client.disconnect()
        api.shutdown()


RUNNERS: dict[str, Callable[[int], Result]] = {
    "ours-raw": lambda port: asyncio.run(_ours(port, "raw")),
    "ours-tight": lambda port: asyncio.run(_ours(port, "tight")),
    "ours-zrle": lambda port: asyncio.run(_ours(port, "zrle")),
    "asyncvnc": lambda port: asyncio.run(_asyncvnc(port, screenshot=False)),
    "asyncvnc-screenshot": lambda port: asyncio.run(_asyncvnc(port, screenshot=True)),
    "vncdotool": _vncdotool,
}


def _client(kind: str, port: int, pipe: Connection) -> None:
    try:
        pipe.send(RUNNERS[kind](port))
    except BaseException as exc:  # noqa: BLE001 (reported to the parent, which must not hang)
        pipe.send(f"{type(exc).__name__}: {exc}")


# The parent ----------------------------------------------------------------------------------


def _run_client(ctx: Any, kind: str, port: int) -> Result | str:
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_client, args=(kind, port, child), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(DURATION + CONNECT_TIMEOUT + 10):
            return "timed out"
        return parent.recv()  # type: ignore[no-any-return]
    except EOFError:
        return f"client process died ({process.exitcode})"
    finally:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()


def measure(
    scenes: list[str] = SCENES,
    sizes: list[tuple[int, int]] = SIZES,
    clients: list[str] = CLIENTS,
    fps: float = FPS,
    report: Callable[[str], None] = print,
) -> dict[tuple[str, int, int, str], Result | str]:
    """Run every client against every scene and size; returns results by (scene, w, h, client)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # children inherit it
    ctx = multiprocessing.get_context("spawn")
    results: dict[tuple[str, int, int, str], Result | str] = {}
    for width, height in sizes:
        for scene in scenes:
            parent, child = ctx.Pipe(duplex=False)
            server = ctx.Process(
                target=_serve, args=(scene, width, height, fps, child), daemon=True
            )
            server.start()
            child.close()
            try:
                if not parent.poll(CONNECT_TIMEOUT):
                    raise RuntimeError("the benchmark server did not start")
                port = parent.recv()
                for kind in clients:
                    result = _run_client(ctx, kind, port)
                    results[(scene, width, height, kind)] = result
                    report(_row(scene, width, height, kind, result))
            finally:
                server.terminate()
                server.join()
    return results


def _row(scene: str, width: int, height: int, kind: str, result: Result | str) -> str:
    where = f"{scene:<7} {width}x{height:<5}"
    if isinstance(result, str):
        return f"{where} {kind:<20} failed: {result}"
    # A client that is mostly idle yet misses frames waits for the server's encoder.
    bound = "  server-bound" if result.fps < 0.9 * FPS and result.cpu < 0.5 * result.wall else ""
    return (
        f"{where} {kind:<20} {result.fps:7.1f} {result.cpu_per_frame_ms:9.3f} "
        f"{result.fetches / result.wall:9.1f} {100 * result.cpu / result.wall:6.0f}%{bound}"
    )


def ratios(results: dict[tuple[str, int, int, str], Result | str]) -> list[str]:
    """Lines comparing each of OURS with each peer: CPU per frame and frames per second."""
    lines = []
    combos = sorted({key[:3] for key in results}, key=lambda k: (k[1] * k[2], k[0]))
    for scene, width, height in combos:
        for ours in OURS:
            mine = results.get((scene, width, height, ours))
            if not isinstance(mine, Result):
                continue
            parts = []
            for peer in PEERS:
                theirs = results.get((scene, width, height, peer))
                if isinstance(theirs, Result) and theirs.frames and mine.frames:
                    cpu = theirs.cpu_per_frame_ms / mine.cpu_per_frame_ms
                    speed = mine.fps / theirs.fps if theirs.fps else float("inf")
                    parts.append(f"{peer} cpu {cpu:4.1f}x fps {speed:3.1f}x")
            if parts:
                lines.append(f"{scene:<7} {width}x{height:<5} {ours:<11} vs " + "; ".join(parts))
    return lines


def main() -> None:
    print(
        f"server: our VNCServer at {FPS} fps in its own process; each client alone in a "
        f"fresh process, measured {DURATION} s"
    )
    print(
        f"{'scene':<7} {'size':<10}{'client':<20} {'new fps':>7} {'cpu ms/fr':>9} "
        f"{'fetch/s':>9} {'cpu':>6}"
    )
    results = measure(report=lambda line: print(line, flush=True))
    print(
        "\nours vs peers: cpu = the peer's CPU per new frame / ours (> 1: ours is cheaper), "
        "fps = our new frames per second / the peer's"
    )
    for line in ratios(results):
        print(line)


if __name__ == "__main__":
    main()
