"""VNC server: updates per second per client and server CPU, against the frame rate.

One remote (:class:`envserver.remote.Remote`, so the real game loop, VNC server and
rewarder) runs in a child process at 60 fps; 1, 10 or 30 of our clients
(:class:`vncdriver.client.VNCClient`, one incremental request outstanding each) share one
event loop in this process. The limit is the frame rate: a client cannot get more than
one update per *changed* frame, 60 per second when every frame changes. Scenes:

- ``catch``: builtin.Catch-v0 at 160x210, a game-like small change per frame (the ball
  and, now and then, the timer and HUD); the ball is off screen for 30 of every ~145
  frames, so the child counts the frames that really changed and that is the limit.
- ``scroll``: 1024x768 where every pixel changes every frame (a smooth scene scrolling
  by 3 rows), the worst case for diffing and encoding.

Per row: updates/s per client (mean and slowest), the ratio to the limit and to 60, the
remote's CPU per frame (``time.process_time`` of the child, which includes its numpy
threads) and per update sent, and this process's CPU per update received.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402, RUF100  (after OPENBLAS_NUM_THREADS)

from benchmarks.common import quick  # noqa: E402
from runtimes.base import InputEvent, Runtime, StepResult  # noqa: E402, RUF100

#: The remote's frame rate, and so the most updates per second a client can get.
FPS = 60.0
#: Seconds after the last client connected before measuring (TCP windows, zlib streams).
WARMUP = quick(1.0, 0.3)
#: Seconds measured per row.
MEASURE = quick(4.0, 1.0)
#: Seconds to wait for the remote child or a client to come up.
START_TIMEOUT = 30.0

#: (scene, encoding, JPEG quality or None, client counts), in the order they run.
RUNS: tuple[tuple[str, str, int | None, tuple[int, ...]], ...] = quick((
    ("catch", "-", None, (0,)),  # no client: what the game loop itself costs
    ("catch", "tight", None, (1, 10, 30)),
    ("catch", "raw", None, (1, 10, 30)),
    ("scroll", "-", None, (0,)),
    ("scroll", "raw", None, (1, 10)),
    ("scroll", "tight", 8, (1, 10)),
), (
    ("catch", "-", None, (0,)),
    ("catch", "raw", None, (1,)),
    ("scroll", "raw", None, (1,)),
))


class Scroll(Runtime):
    """1024x768, every pixel different from the last frame: a smooth scene scrolling up."""

    env_id: ClassVar[str] = "bench.Scroll-v0"
    width: ClassVar[int] = 1024
    height: ClassVar[int] = 768
    #: Rows scrolled per frame; the scene repeats every PERIOD rows.
    SPEED: ClassVar[int] = 3
    PERIOD: ClassVar[int] = 256

    def __init__(self) -> None:
        super().__init__()
        rows = self.height + self.PERIOD
        yy, xx = np.mgrid[0:rows, 0 : self.width].astype(np.float32)
        phase = yy * (2 * np.pi / self.PERIOD)
        scene = np.stack(
            [
                128 + 100 * np.sin(phase + xx / 97),
                128 + 100 * np.sin(2 * phase + xx / 151),
                (xx / 4 + 64 * np.cos(phase)) % 256,
            ],
            -1,
        )
        for i in range(24):  # sprites: flat boxes of a few colours, as games have
            x, y = (i * 173) % (self.width - 48), (i * 97) % (rows - 32)
            scene[y : y + 32, x : x + 48] = ((i * 50) % 256, (i * 90) % 256, (i * 130) % 256)
        self._scene = scene.astype(np.uint8)
        self.frame = 0

    def reset(self, seed: int | None = None) -> None:
        self.frame = 0
        self._draw()

    def step(self, events: Sequence[InputEvent]) -> StepResult:
        self.frame += 1
        self._draw()
        return StepResult()

    def _draw(self) -> None:
        top = (self.frame * self.SPEED) % self.PERIOD
        np.copyto(self.framebuffer, self._scene[top : top + self.height])


# The remote, in a child process --------------------------------------------------------------


@dataclass(frozen=True)
class RemoteSample:
    """What the child reports at one moment."""

    frames: int
    changed: int  # frames that differed from the one before
    cpu: float  # time.process_time() of the child, minus the cost of counting changes
    late_ticks: int
    sent: dict[int, int]  # updates sent, per VNC client id


def _remote_main(conn: multiprocessing.connection.Connection, scene: str) -> None:
    """Child process: serve the scene until told to stop; answer "sample" requests."""
    asyncio.run(_serve(conn, scene))


async def _serve(conn: multiprocessing.connection.Connection, scene: str) -> None:
    from envserver.remote import Remote

    remote = Remote(Scroll() if scene == "scroll" else "builtin.Catch-v0", fps=FPS)
    vnc = remote.vnc
    assert vnc is not None, "these scenes are served by our VNC server"
    changed, overhead = 0, 0.0
    previous: np.ndarray | None = None
    frame_ready = vnc.frame_ready

    def counting_frame_ready(frame: np.ndarray | None = None, tag: Any = None, **more: Any) -> None:
        nonlocal changed, overhead, previous
        started = time.process_time()
        current = vnc.frame if frame is None else frame
        if previous is None or previous.shape != current.shape:
            previous = current.copy()
            changed += 1
        elif not np.array_equal(previous, current):
            np.copyto(previous, current)
            changed += 1
        overhead += time.process_time() - started
        frame_ready(frame, tag=tag, **more)  # damage=: the runtime's changed rectangles

    vnc.frame_ready = counting_frame_ready  # type: ignore[method-assign]
    await remote.start("127.0.0.1", 0, 0)
    stop = asyncio.Event()

    def on_message() -> None:
        if conn.recv() == "sample":
            conn.send(
                RemoteSample(
                    remote.frame,
                    changed,
                    time.process_time() - overhead,
                    remote.late_ticks,
                    vnc.stats(),
                )
            )
        else:
            stop.set()

    asyncio.get_running_loop().add_reader(conn.fileno(), on_message)
    conn.send(vnc.port)
    await stop.wait()
    await remote.close()


class RemoteProcess:
    """The child running the remote; :meth:`sample` asks it for its counters."""

    def __init__(self, scene: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_remote_main, args=(child, scene), daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(START_TIMEOUT):
            self.process.kill()
            raise TimeoutError(f"the remote child did not start within {START_TIMEOUT} s")
        self.port: int = self.conn.recv()

    def sample(self) -> RemoteSample:
        self.conn.send("sample")
        if not self.conn.poll(START_TIMEOUT):
            raise TimeoutError("the remote child stopped answering")
        sample: RemoteSample = self.conn.recv()
        return sample

    def stop(self) -> None:
        self.conn.send("stop")
        self.process.join(START_TIMEOUT)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


# The clients, here ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    scene: str
    size: str
    encoding: str
    clients: int
    per_client: float  # mean updates/s
    slowest: float
    limit: float  # changed frames/s
    fps: float  # frames drawn/s
    server_ms_per_frame: float
    server_ms_per_update: float
    server_core: float  # fraction of one core
    client_ms_per_update: float
    late_ticks: int


async def measure(scene: str, encoding: str, quality: int | None, count: int) -> Row:
    from vncdriver.client import VNCClient

    remote = RemoteProcess(scene)
    clients = [
        VNCClient(
            f"127.0.0.1::{remote.port}",
            encoding=encoding,
            quality=quality,
            start_timeout=START_TIMEOUT,
            name=f"bench-{i}",
        )
        for i in range(count)
    ]
    try:
        await asyncio.gather(*(client.start() for client in clients))
        await asyncio.sleep(WARMUP)  # a benchmark's settling time, not synchronisation
        before, updates0, cpu0 = remote.sample(), [c.updates for c in clients], time.process_time()
        started = time.perf_counter()
        await asyncio.sleep(MEASURE)
        elapsed = time.perf_counter() - started
        after, updates1, cpu1 = remote.sample(), [c.updates for c in clients], time.process_time()
    finally:
        await asyncio.gather(*(client.close() for client in clients))
        remote.stop()
    rates = [(b - a) / elapsed for a, b in zip(updates0, updates1, strict=True)]
    frames = after.frames - before.frames
    sent = sum(after.sent.values()) - sum(before.sent.get(k, 0) for k in after.sent)
    received = sum(updates1) - sum(updates0)
    server_cpu = after.cpu - before.cpu
    label = encoding if quality is None else f"{encoding} q{quality}"
    size = "160x210" if scene == "catch" else f"{Scroll.width}x{Scroll.height}"
    return Row(
        scene=scene,
        size=size,
        encoding=label,
        clients=count,
        per_client=sum(rates) / len(rates) if rates else float("nan"),
        slowest=min(rates, default=float("nan")),
        limit=(after.changed - before.changed) / elapsed,
        fps=frames / elapsed,
        server_ms_per_frame=1000 * server_cpu / max(1, frames),
        server_ms_per_update=1000 * server_cpu / max(1, sent),
        server_core=server_cpu / elapsed,
        client_ms_per_update=1000 * (cpu1 - cpu0) / max(1, received),
        late_ticks=after.late_ticks - before.late_ticks,
    )


def print_header() -> None:
    print(
        f"  remote at {FPS:.0f} fps in a child process; clients in this process; "
        f"{MEASURE:.0f} s per row after {WARMUP:.0f} s warm-up; {os.cpu_count()} cores"
    )
    print(
        f"  {'scene':<16}{'encoding':<10}{'clients':>7}{'upd/s':>8}{'slowest':>9}"
        f"{'limit':>7}{'/limit':>8}{'/60':>7}{'fps':>6}{'srv ms/frame':>14}"
        f"{'srv ms/upd':>11}{'srv core':>9}{'cli ms/upd':>11}{'late':>6}"
    )


def print_row(row: Row) -> None:
    ratio = row.per_client / row.limit if row.limit else float("nan")
    if not row.clients:
        print(
            f"  {row.scene + ' ' + row.size:<16}{'-':<10}{0:>7}{'-':>8}{'-':>9}"
            f"{row.limit:>7.1f}{'-':>8}{'-':>7}{row.fps:>6.1f}{row.server_ms_per_frame:>14.2f}"
            f"{'-':>11}{row.server_core:>8.0%}{'-':>11}{row.late_ticks:>6}",
            flush=True,
        )
        return
    print(
        f"  {row.scene + ' ' + row.size:<16}{row.encoding:<10}{row.clients:>7}"
        f"{row.per_client:>8.1f}{row.slowest:>9.1f}{row.limit:>7.1f}{ratio:>8.2f}"
        f"{row.per_client / FPS:>7.2f}{row.fps:>6.1f}{row.server_ms_per_frame:>14.2f}"
        f"{row.server_ms_per_update:>11.3f}{row.server_core:>8.0%}"
        f"{row.client_ms_per_update:>11.3f}{row.late_ticks:>6}",
        flush=True,
    )


def main(argv: Sequence[str] = ()) -> None:
    """Run RUNS (or only the scenes named in ``argv``) and print one table."""
    print_header()
    for scene, encoding, quality, counts in RUNS:
        if argv and scene not in argv:
            continue
        for count in counts:
            print_row(asyncio.run(measure(scene, encoding, quality, count)))
    print(
        "  upd/s: updates per second per client (mean; slowest client); limit: frames per "
        "second that changed;\n  /limit and /60: mean upd/s over each; srv: the remote's "
        "CPU per frame drawn, per update sent, share of one core;\n  cli: this process's CPU "
        "per update received; late: ticks the game loop ran late."
    )


if __name__ == "__main__":
    main(sys.argv[1:])
