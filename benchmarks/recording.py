"""Recording (serve --record): bytes per minute, CPU, and whether 60 fps holds.

1. **Codecs** on two frame streams sampled at 60 fps: Atari Pong (ALE, 160x210, with
   random paddle input) and a real browser at 1024x768 (Chromium on Xvnc through the
   remote's ``x11.Command-v0``, showing a page that types and scrolls; read by our VNC
   client). Ours (zstd level 3, each frame XOR the one before, chunks of 60) against the
   named peer, lossless FFV1 video through PyAV, and plain zstd without the XOR: bytes
   per minute and CPU per frame of each.
2. **A live remote** at 60 fps in a child process (the real game loop and VNC server),
   with and without a Recorder: CPU of the process (the writer thread included), frames
   per second held and late ticks, and bytes per minute on disk. Pong, and the worst case
   for size: 1024x768 with every pixel changing every frame (benchmarks.vnc_server's
   Scroll).
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import multiprocessing.connection
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.common import quick, ratio, table  # noqa: E402
from recordings.format import ChunkEncoder, decode_frames, read_chunks  # noqa: E402

#: Frames per second everything is sampled and served at.
FPS = 60.0
#: Seconds of each stream and each live run (short: the machine is shared).
SECONDS = quick(15.0, 1.5)
#: Seconds a live remote runs before measuring.
WARMUP = quick(3.0, 0.5)
CHUNK = 60
#: Lockstep steps each way of the last measure.
LOCKSTEP_STEPS = quick(3000, 300)


# 1. Codecs -------------------------------------------------------------------------------------


def pong_frames(count: int) -> Iterator[np.ndarray]:
    from runtimes import registry
    from runtimes.base import KeyEvent

    runtime = registry.lookup("atari.Pong-v0")()
    runtime.reset(1)
    rng = np.random.default_rng(1)
    keys = [k for k in runtime.keys if k in ("Up", "Down")] or list(runtime.keys)
    for i in range(count):
        events = [KeyEvent(str(rng.choice(keys)), bool(rng.random() < 0.6))] if i % 8 == 0 else []
        if runtime.advance(events, 1).done:
            runtime.reset(i)
        yield runtime.framebuffer


PAGE = """<!doctype html><html><body style="font: 16px serif; margin: 40px">
<h1>Reading and typing</h1><div id="bar" style="height:6px;background:#48c;width:0"></div>
<textarea id="t" style="width:900px;height:120px"></textarea><div id="text"></div>
<script>
const words = "the quick brown fox jumps over the lazy dog while a remote records every frame".split(" ");
let html = ""; for (let p = 0; p < 200; p++) { let s = "";
  for (let w = 0; w < 60; w++) s += words[(p * 7 + w * 3) % words.length] + " ";
  html += "<p>" + p + ". " + s + "</p>"; }
document.getElementById("text").innerHTML = html;
let n = 0; const t = document.getElementById("t"), bar = document.getElementById("bar");
setInterval(() => { t.value += words[n++ % words.length][0]; }, 100);
setInterval(() => { window.scrollBy(0, 160); }, 3000);
let w = 0;
(function grow() { w = (w + 2) % 1000; bar.style.width = w + "px"; requestAnimationFrame(grow); })();
</script></body></html>"""


async def _browser_capture(count: int, sink: Callable[[np.ndarray], None]) -> str:
    """Feed ``count`` frames of Chromium at 1024x768, sampled at FPS, to ``sink``."""
    from tests.recordings.helpers import serve  # the banner-reading helper
    from vncdriver.client import VNCClient

    work = Path(tempfile.mkdtemp(prefix="bench-browser-"))
    (work / "page.html").write_text(PAGE)
    os.environ["UNIVERSE_REMOTE_X11_COMMAND"] = (
        f"chromium --no-sandbox --disable-gpu --disable-background-networking "
        f"--disable-component-update --disable-sync --no-first-run --disable-quic "
        f"--user-data-dir={work / 'profile'} --window-position=0,0 --window-size=1024,768 "
        f"--kiosk file://{work / 'page.html'}"
    )
    try:
        async with serve("x11.Command-v0") as served:
            async with VNCClient(f"127.0.0.1::{served.vnc_port}") as vnc:
                async with asyncio.timeout(60):  # Chromium paints its page
                    while np.count_nonzero(vnc.framebuffer) < vnc.framebuffer.size // 4:
                        await vnc.wait_update()
                started = time.monotonic()
                for i in range(count):
                    delay = started + i / FPS - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    sink(vnc.framebuffer)
                return f"{vnc.width}x{vnc.height}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


class Measured:
    """One codec's bytes and CPU over a stream."""

    def __init__(self, name: str) -> None:
        self.name, self.bytes, self.cpu, self.frames = name, 0, 0.0, 0

    def row(self, peer: Measured | None) -> list[str]:
        per_minute = self.bytes / self.frames * FPS * 60
        return [self.name, f"{per_minute / 1e6:.3f}", f"{self.cpu / self.frames * 1e3:.3f}",
                ratio(self.bytes, peer.bytes if peer else None),
                ratio(self.cpu, peer.cpu if peer else None)]


def codecs(
    frames: Iterator[np.ndarray] | None, capture: Callable[..., Any] | None, count: int
) -> list[Measured]:
    """Ours as frames come (keeping its output), then FFV1 and plain zstd over the same
    frames decoded from ours."""
    import zstandard

    ours = Measured("ours: zstd-3 + XOR, chunks of 60")
    kept: list[bytes] = []
    encoder: ChunkEncoder | None = None
    index = 0

    def add(frame: np.ndarray) -> None:
        nonlocal encoder, index
        started = time.process_time()
        if encoder is None:
            encoder = ChunkEncoder(frame.shape)  # type: ignore[arg-type]
        encoder.add(index, frame.copy(), b"{}")
        index += 1
        if encoder.count >= CHUNK:
            kept.append(encoder.finish())
        ours.cpu += time.process_time() - started

    if frames is not None:
        for frame in frames:
            add(frame)
    else:
        assert capture is not None
        capture(count, add)
    assert encoder is not None
    kept.append(encoder.finish())
    ours.bytes, ours.frames = sum(len(k) for k in kept), index
    shape = encoder.shape

    def replayed() -> Iterator[np.ndarray]:
        previous = None
        for chunk in read_chunks(b"".join(kept)):
            for frame in decode_frames(chunk, shape, previous):
                previous = frame
                yield frame

    plain = Measured("zstd-3 without XOR")
    zstd = zstandard.ZstdCompressor(level=3)
    pieces: list[np.ndarray] = []
    for frame in replayed():
        pieces.append(frame)
        if len(pieces) == CHUNK:
            started = time.process_time()
            plain.bytes += len(zstd.compress(np.concatenate(pieces).data))
            plain.cpu += time.process_time() - started
            pieces = []
        plain.frames += 1
    if pieces:
        plain.bytes += len(zstd.compress(np.concatenate(pieces).data))
    ffv1 = Measured("peer: FFV1 (PyAV, mkv)")
    try:
        import av
    except ImportError:
        return [ours, plain]
    out = io.BytesIO()
    with av.open(out, "w", format="matroska") as container:
        stream = container.add_stream("ffv1", rate=int(FPS))
        stream.width, stream.height, stream.pix_fmt = shape[1], shape[0], "bgr0"
        for frame in replayed():
            started = time.process_time()
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
            ffv1.cpu += time.process_time() - started
            ffv1.frames += 1
        for packet in stream.encode():
            container.mux(packet)
    ffv1.bytes = len(out.getvalue())
    return [ours, ffv1, plain]


def print_codecs(title: str, rows: list[Measured]) -> None:
    print(f"  {title}")
    peer = next((r for r in rows if r.name.startswith("peer")), None)
    table(["codec", "MB/min", "CPU ms/frame", "bytes vs peer", "CPU vs peer"],
          [r.row(peer) for r in rows])


# 2. A live remote ------------------------------------------------------------------------------


def _live_main(conn: multiprocessing.connection.Connection, env: str, record: str | None) -> None:
    asyncio.run(_live(conn, env, record))


async def _live(conn: multiprocessing.connection.Connection, env: str, record: str | None) -> None:
    from envserver.recorder import Recorder
    from envserver.remote import Remote

    if env == "scroll":
        from benchmarks.vnc_server import Scroll

        remote = Remote(Scroll(), fps=FPS)
    else:
        remote = Remote(env, fps=FPS)
    recorder = Recorder(record) if record else None
    if recorder is not None:
        recorder.attach(remote)
    await remote.start("127.0.0.1", 0, 0)
    await asyncio.sleep(WARMUP)
    frame0, late0, cpu0, t0 = remote.frame, remote.late_ticks, time.process_time(), time.monotonic()
    await asyncio.sleep(SECONDS)
    frames, late = remote.frame - frame0, remote.late_ticks - late0
    cpu, elapsed = time.process_time() - cpu0, time.monotonic() - t0
    dropped = recorder.writer.dropped if recorder is not None else 0
    await remote.close()
    if recorder is not None:
        recorder.close()
    conn.send((frames / elapsed, late, cpu / elapsed, dropped, elapsed))


def live(env: str, record: bool) -> tuple[float, int, float, int, float]:
    """(fps held, late ticks, CPU fraction, frames dropped, MB per minute on disk)."""
    directory = tempfile.mkdtemp(prefix="bench-rec-") if record else None
    context = multiprocessing.get_context("spawn")
    conn, child = context.Pipe()
    process = context.Process(target=_live_main, args=(child, env, directory), daemon=True)
    process.start()
    child.close()
    if not conn.poll(WARMUP + SECONDS + 120):
        process.kill()
        raise TimeoutError(f"the {env} remote did not report")
    fps, late, cpu, dropped, elapsed = conn.recv()
    process.join(30)
    size = 0.0
    if directory is not None:
        size = sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())
        shutil.rmtree(directory, ignore_errors=True)
        # What was written covers warm-up, measurement and shutdown at FPS.
        size = size / (WARMUP + elapsed) * 60 / 1e6
    return fps, late, cpu, dropped, size


async def _lockstep(env: str, record: bool, steps: int) -> tuple[float, int]:
    """Lockstep steps per second of one frame each, driven over the rewarder from this
    process; (steps/s, steps still queued for the writer when the agent finished)."""
    from envserver.recorder import Recorder
    from envserver.remote import Remote
    from rewarder.client import RewarderClient

    directory = tempfile.mkdtemp(prefix="bench-rec-")
    remote = Remote(env, mode="lockstep")
    recorder = Recorder(directory) if record else None
    if recorder is not None:
        recorder.attach(remote)
    await remote.start("127.0.0.1", 0, 0)
    try:
        async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
            await client.reset(seed=1)
            started = time.perf_counter()
            for _ in range(steps):
                if (await client.step([], frames=1)).done:
                    await client.reset()
            rate = steps / (time.perf_counter() - started)
            behind = recorder.writer._pending if recorder is not None else 0
    finally:
        await remote.close()
        if recorder is not None:
            recorder.close()
        shutil.rmtree(directory, ignore_errors=True)
    return rate, behind


def main(argv: list[str] | None = None) -> None:
    count = int(SECONDS * FPS)
    print_codecs(f"Atari Pong 160x210, {count} frames at {FPS:g} fps",
                 codecs(pong_frames(count), None, count))
    if shutil.which("chromium") and shutil.which("Xvnc"):
        sizes: list[str] = []

        def capture(n: int, sink: Callable[[np.ndarray], None]) -> None:
            sizes.append(asyncio.run(_browser_capture(n, sink)))

        measured = codecs(None, capture, count)
        print_codecs(f"Chromium {sizes[0]} typing and scrolling, {count} frames at {FPS:g} fps", measured)
    else:
        print("  (Chromium or Xvnc not installed: no browser stream; scripts/install-system-packages)")
    print(f"  A live remote at {FPS:g} fps for {SECONDS:g} s, with and without recording:")
    rows = []
    for env, name in (("atari.Pong-v0", "Pong 160x210"), ("scroll", "1024x768 all pixels change")):
        off = live(env, record=False)
        on = live(env, record=True)
        for label, (fps, late, cpu, dropped, size) in (("off", off), ("on", on)):
            rows.append([f"{name}, recording {label}", f"{fps:.1f}", str(late), f"{cpu * 100:.1f}%",
                         str(dropped) if label == "on" else "-", f"{size:.2f}" if label == "on" else "-",
                         ratio(cpu, off[2])])
    table(["remote", "fps held", "late ticks", "CPU", "dropped", "MB/min on disk", "CPU vs off"], rows)
    print(f"  Lockstep Pong, {LOCKSTEP_STEPS} steps of 1 frame as fast as an agent in this process "
          "sends them:")
    off_rate, _ = asyncio.run(_lockstep("atari.Pong-v0", False, LOCKSTEP_STEPS))
    on_rate, behind = asyncio.run(_lockstep("atari.Pong-v0", True, LOCKSTEP_STEPS))
    table(["recording", "steps/s", "writer behind at the end", "vs off"],
          [["off", f"{off_rate:.0f}", "-", "1.00x"],
           ["on", f"{on_rate:.0f}", f"{behind} steps", ratio(on_rate, off_rate)]])


if __name__ == "__main__":
    main(sys.argv[1:])
