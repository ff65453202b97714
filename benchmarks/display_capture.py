"""Display capture from Xvnc: mss (XShm) vs RFB over Xvnc's Unix socket; CPU and latency.

Issue 3/7: browser and desktop remotes take the frames of the Xvnc their program draws on
and serve them from their own VNC server. One Xvnc per size (640x480, 1024x768;
``runtimes.xdisplay.XvncDisplay`` on a loopback port plus ``-rfbunixpath``) and these
readers of it, one at a time in this process:

- ``mss``: mss's XShmGetImage every 1/60 s, BGRX to RGB into a framebuffer (``grab``),
  then the changed 64x64 tiles by :class:`vncdriver.server_protocol.TileDiffer` (``diff``,
  what our VNC server does per frame). mss 10.2 refuses Xvnc (its depth 24 is listed twice
  and mss seeks the root visual in the first), so the right depth is put first for it;
- ``rfb-unix``: a minimal blocking Raw client on the Unix socket (one incremental request
  outstanding, ``recv_into`` a staging array, three channel copies); ``rfb-nocmp`` the
  same announcing compression level 1, which turns Xvnc's CompareFB off for it;
- ``vncclient``: our :class:`vncdriver.client.VNCClient`, Raw, on the Unix socket (an
  address that is a path);
- ``viewer``: today's path, nothing captured: a Tight VNCClient on Xvnc's TCP port, of
  which only Xvnc's part is the remote's; ``none``: no reader, Xvnc's baseline.

The program is ours (ctypes libX11, a child process), for a defined load: ``static``,
``sprite`` (a 48x48 noise square moves every 1/60 s: an animated page) and ``full`` (a
new full-screen noise image every 1/60 s: a scroll, a page load). CPU: this process's
``time.process_time`` and Xvnc's schedstat nanoseconds beyond ``none``'s. Latency: an
XTest key press (the same for every reader) at a random moment until the reader's
framebuffer shows the marker the program toggles; p50/p99 of TRIALS, ``sprite`` running.
``python -m benchmarks.display_capture 240`` runs Xvnc at ``-FrameRate 240``.
"""

from __future__ import annotations

import asyncio
import ctypes
import multiprocessing
import os
import random
import select
import socket
import struct
import sys
import tempfile
import time
import unittest.mock
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.common import (  # noqa: E402
    load_average,
    quick,
    ratio,
    schedstat_cpu,  # noqa: E402
    table,
)
from benchmarks.realtime_cpu import _PIXEL_FORMAT, _recv_exact  # noqa: E402

SIZES: Final = quick(((640, 480), (1024, 768)), ((640, 480),))
SCENES: Final = ("static", "sprite", "full")
PATHS: Final = ("none", "mss", "rfb-unix", "rfb-nocmp", "vncclient", "viewer")
LATENCY_PATHS: Final = ("mss", "rfb-unix", "vncclient")
FPS: Final = 60.0
#: Xvnc's updates per second per client (its default): a clock its updates wait for, so
#: RFB's action-to-pixel latency is ~1/(2 FRAME_RATE) on average; try ``... 240``.
FRAME_RATE: Final = 60
#: Seconds each (path, scene) is measured, after WARMUP seconds of the same.
MEASURE_SECONDS: Final = quick(1.0, 0.3)
WARMUP_SECONDS: Final = 0.2
#: Latency trials per path and size, each at most TRIAL_TIMEOUT seconds; a trial begins
#: a random 0 to 1/FPS s after the previous one ended (so at every phase of the frames).
TRIALS: Final = quick(200, 20)
TRIAL_TIMEOUT: Final = 0.5
#: Seconds a reader runs between looks at whether a trial is over.
LATENCY_SLICE: Final = 0.004
#: Seconds for Xvnc's socket, the program's first frame, a client's first update.
START_TIMEOUT: Final = 15.0
SPRITE: Final = 48
#: Noise images the program cycles through (the sprite's, the full screen's).
IMAGES: Final = 3
TILE: Final = 64
#: The marker the program toggles on each key press: (x, y, edge), and its two colours.
MARKER: Final = (8, 8, 32)
MARKER_COLOURS: Final = (0xE02020, 0x2040E0)
BACKGROUND: Final = 0x808080
XK_SPACE: Final = 0x20
#: The pseudo-encoding of compression level 0 (RFB: -256 + level).
COMPRESS_LEVEL_0: Final = -256
_KEY_PRESS, _EXPOSE = 2, 12  # X event types
_KEY_PRESS_MASK, _EXPOSURE_MASK = 1 << 0, 1 << 15


# Xlib over ctypes: the program and the key presses ------------------------------------------


def _xlib() -> tuple[Any, Any]:
    """libX11 and libXtst with the prototypes used here (pointers must not be truncated)."""
    x, xtst = ctypes.CDLL("libX11.so.6"), ctypes.CDLL("libXtst.so.6")
    p, ul, i, u = ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_uint
    protos: dict[str, tuple[Any, list[Any]]] = {
        "XOpenDisplay": (p, [ctypes.c_char_p]), "XDefaultScreen": (i, [p]),
        "XRootWindow": (ul, [p, i]), "XCreateSimpleWindow": (ul, [p, ul, i, i, u, u, u, ul, ul]),
        "XSelectInput": (i, [p, ul, ctypes.c_long]), "XMapRaised": (i, [p, ul]),
        "XCreateGC": (p, [p, ul, ul, p]), "XSetForeground": (i, [p, p, ul]),
        "XFillRectangle": (i, [p, ul, p, i, i, u, u]), "XFlush": (i, [p]),
        "XPending": (i, [p]), "XNextEvent": (i, [p, p]), "XConnectionNumber": (i, [p]),
        "XSetInputFocus": (i, [p, ul, i, ul]), "XKeysymToKeycode": (ctypes.c_ubyte, [p, ul]),
        "XCloseDisplay": (i, [p]), "XDefaultVisual": (p, [p, i]),
        "XCreateImage": (p, [p, p, u, i, i, p, u, u, i, i]),
        "XPutImage": (i, [p, ul, p, p, i, i, i, i, u, u]),
    }
    for name, (restype, argtypes) in protos.items():
        getattr(x, name).restype, getattr(x, name).argtypes = restype, argtypes
    xtst.XTestFakeKeyEvent.restype, xtst.XTestFakeKeyEvent.argtypes = i, [p, u, i, ul]
    return x, xtst


def _program(display: str, width: int, height: int, pipe: Connection) -> None:
    """The X program: draws the scene the pipe names at FPS, toggles the marker on keys.

    Exits when the pipe sends None or closes (and with the benchmark: a daemon process).
    """
    x, _ = _xlib()
    dpy = x.XOpenDisplay(display.encode())
    if not dpy:
        raise RuntimeError(f"cannot open X display {display}")
    win = x.XCreateSimpleWindow(dpy, x.XRootWindow(dpy, x.XDefaultScreen(dpy)), 0, 0,
                                width, height, 0, 0, BACKGROUND)
    x.XSelectInput(dpy, win, _KEY_PRESS_MASK | _EXPOSURE_MASK)
    x.XMapRaised(dpy, win)
    gc, event = x.XCreateGC(dpy, win, 0, None), ctypes.create_string_buffer(192)

    def fill(colour: int, left: int, top: int, w: int, h: int) -> None:
        x.XSetForeground(dpy, gc, colour)
        x.XFillRectangle(dpy, win, gc, left, top, w, h)

    rng, visual = np.random.default_rng(0), x.XDefaultVisual(dpy, x.XDefaultScreen(dpy))
    pixels: list[np.ndarray] = []  # the images' memory, alive as long as the images

    def noise(w: int, h: int) -> Any:  # an XImage of random pixels (no solid areas)
        pixels.append(rng.integers(0, 256, (h, w, 4), dtype=np.uint8))
        return x.XCreateImage(dpy, visual, 24, 2, 0, pixels[-1].ctypes.data, w, h, 32, 0)

    sprites = [noise(SPRITE, SPRITE) for _ in range(IMAGES)]
    screens = [noise(width, height) for _ in range(IMAGES)]
    scene, toggles, n, sprite_at, ready = "static", 0, 0, (0, 0), False
    due, fd = time.monotonic(), x.XConnectionNumber(dpy)
    while True:
        readable, _, _ = select.select([fd, pipe], [], [], max(0.0, due - time.monotonic()))
        while x.XPending(dpy):
            x.XNextEvent(dpy, event)
            kind = ctypes.c_int.from_buffer(event).value
            if kind == _EXPOSE and not ready:  # mapped: take the keyboard, say so once
                x.XSetInputFocus(dpy, win, 2, 0)  # RevertToParent, CurrentTime
                pipe.send("ready")
                ready = True
            if kind == _KEY_PRESS:
                toggles += 1
                fill(MARKER_COLOURS[toggles % 2], MARKER[0], MARKER[1], MARKER[2], MARKER[2])
            x.XFlush(dpy)
        if pipe in readable:
            try:
                message = pipe.recv()
            except EOFError:
                message = None
            if message is None:
                break
            scene = message
            fill(BACKGROUND, 0, 0, width, height)
            fill(MARKER_COLOURS[toggles % 2], MARKER[0], MARKER[1], MARKER[2], MARKER[2])
            x.XFlush(dpy)
            pipe.send(scene)
        if time.monotonic() >= due:
            n += 1
            if scene == "sprite":
                fill(BACKGROUND, *sprite_at, SPRITE, SPRITE)
                span = width - SPRITE
                left = (n * 4) % (2 * span)
                sprite_at = (min(left, 2 * span - left), 64 + (n // 4) % (height - 64 - SPRITE))
                x.XPutImage(dpy, win, gc, sprites[n % IMAGES], 0, 0, *sprite_at, SPRITE, SPRITE)
            elif scene == "full":
                x.XPutImage(dpy, win, gc, screens[n % IMAGES], 0, 0, 0, 0, width, height)
            x.XFlush(dpy)
            due = max(due + 1 / FPS, time.monotonic() - 1 / FPS)  # no catch-up burst
    x.XCloseDisplay(dpy)


def _key_press(x: Any, xtst: Any, dpy: Any) -> None:
    """Press and release space with XTest (every reader's trials alike)."""
    code = x.XKeysymToKeycode(dpy, XK_SPACE)
    xtst.XTestFakeKeyEvent(dpy, code, 1, 0)
    xtst.XTestFakeKeyEvent(dpy, code, 0, 0)
    x.XFlush(dpy)


# The capturers: each reads frames until a deadline and calls ``seen()`` after each new one --


class _Mss:
    """mss XShmGetImage at FPS into an RGB framebuffer, changed tiles found by TileDiffer."""

    def __init__(self, display: str, width: int, height: int) -> None:
        import mss
        from mss.linux import xcb

        from vncdriver.server_protocol import TileDiffer

        original = xcb.screen_allowed_depths

        def root_visual_first(screen: xcb.Screen) -> list[xcb.Depth]:
            def holds_root(depth: xcb.Depth) -> bool:
                return any(v.visual_id == screen.root_visual for v in xcb.depth_visuals(depth))
            return sorted(original(screen), key=lambda depth: not holds_root(depth))

        with unittest.mock.patch.object(xcb, "screen_allowed_depths", root_visual_first):
            self.sct = mss.MSS(display=display)
        self.monitor = {"left": 0, "top": 0, "width": width, "height": height}
        self.framebuffer = np.zeros((height, width, 3), np.uint8)
        self.previous = self.framebuffer.copy()
        self.differ = TileDiffer(TILE)
        self.stages = [0.0, 0.0]  # CPU seconds: grab + convert, diff
        self.due = time.perf_counter()  # the next grab: every 1/FPS s across run() calls

    def run(self, until: float, seen: Callable[[], None]) -> int:
        frames = 0
        while True:
            if self.due > until:  # no grab before then: wait for the deadline itself
                time.sleep(max(0.0, until - time.perf_counter()))
                return frames
            time.sleep(max(0.0, self.due - time.perf_counter()))
            self.due = max(self.due + 1 / FPS, time.perf_counter() - 1 / FPS)  # no catch-up
            c0 = time.process_time()
            raw = np.frombuffer(self.sct.grab(self.monitor).raw, np.uint8).reshape(
                *self.framebuffer.shape[:2], 4)
            for channel in range(3):  # BGRX to RGB
                self.framebuffer[..., channel] = raw[..., 2 - channel]
            c1 = time.process_time()
            changed = bool(self.differ.mask(self.previous, self.framebuffer).any())
            if changed:
                np.copyto(self.previous, self.framebuffer)
            self.stages[0] += c1 - c0
            self.stages[1] += time.process_time() - c1
            if changed:
                frames += 1
                seen()

    def close(self) -> None:
        self.sct.close()


class _RawUnix:
    """A minimal blocking Raw RFB client over Xvnc's Unix socket."""

    def __init__(self, path: str, compress_level: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(START_TIMEOUT)  # no read waits longer; updates arrive whole
        self.sock.connect(path)
        head = memoryview(small := bytearray(64))
        _recv_exact(self.sock, head[:12])  # "RFB 003.008\n"
        self.sock.sendall(b"RFB 003.008\n")
        _recv_exact(self.sock, head[:1])
        _recv_exact(self.sock, head[: small[0]])  # security types: we take None (1)
        self.sock.sendall(b"\x01")
        _recv_exact(self.sock, head[:4])  # SecurityResult OK
        self.sock.sendall(b"\x01")  # ClientInit, shared
        _recv_exact(self.sock, head[:24])
        width, height, name_length = struct.unpack("!HH16xI", small[:24])
        _recv_exact(self.sock, memoryview(bytearray(name_length)))
        encodings = [0] if compress_level is None else [0, COMPRESS_LEVEL_0 + compress_level]
        self.sock.sendall(b"\x00\x00\x00\x00" + _PIXEL_FORMAT
                          + struct.pack(f"!BxH{len(encodings)}i", 2, len(encodings), *encodings))
        self.small, self.width, self.height = small, width, height
        self.framebuffer = np.zeros((height, width, 3), np.uint8)
        self.staging = np.empty(width * height * 4, np.uint8)
        self.stages = [0.0, 0.0]  # not split: reading and copying is one stage
        self._request(incremental=False)
        self.run(time.perf_counter() + START_TIMEOUT, lambda: None, limit=1)

    def _request(self, incremental: bool) -> None:
        self.sock.sendall(struct.pack("!B?HHHH", 3, incremental, 0, 0, self.width, self.height))

    def run(self, until: float, seen: Callable[[], None], limit: int = 1 << 30) -> int:
        frames, head = 0, memoryview(self.small)
        while frames < limit:
            left = until - time.perf_counter()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return frames
            _recv_exact(self.sock, head[:4])
            if self.small[0] != 0:
                raise RuntimeError(f"server message {self.small[0]}: not an update")
            (count,) = struct.unpack_from("!xxH", self.small)
            for _ in range(count):
                _recv_exact(self.sock, head[:12])
                x, y, w, h, encoding = struct.unpack_from("!HHHHi", self.small)
                if encoding != 0:
                    raise RuntimeError(f"encoding {encoding}: we asked for Raw only")
                pixels = self.staging[: w * h * 4]
                _recv_exact(self.sock, pixels.data)
                rgbx, area = pixels.reshape(h, w, 4), self.framebuffer[y : y + h, x : x + w]
                for channel in range(3):
                    area[..., channel] = rgbx[..., channel]
            self._request(incremental=True)
            frames += 1
            seen()
        return frames

    def close(self) -> None:
        self.sock.close()


class _Client:
    """Our VNCClient behind the blocking ``run`` of the others, on an event loop of its own
    (``address`` None: nobody reads Xvnc, the ``none`` baseline)."""

    def __init__(self, address: str | None, encoding: str = "raw") -> None:
        from vncdriver.client import VNCClient

        self.loop, self.stages = asyncio.new_event_loop(), [0.0, 0.0]
        self.client = None if address is None else VNCClient(address, encoding=encoding)
        if self.client is not None:
            self.loop.run_until_complete(self.client.start())
            self.loop.run_until_complete(self.client.wait_update(0, timeout=START_TIMEOUT))

    @property
    def framebuffer(self) -> np.ndarray:
        assert self.client is not None
        return self.client.framebuffer

    def run(self, until: float, seen: Callable[[], None]) -> int:
        frames = 0

        def on_update(*_: object) -> None:
            nonlocal frames
            frames += 1
            seen()

        if self.client is not None:
            self.client.on_update = on_update
        self.loop.run_until_complete(asyncio.sleep(max(0.0, until - time.perf_counter())))
        return frames

    def close(self) -> None:
        if self.client is not None:
            self.loop.run_until_complete(self.client.close())
        self.loop.close()


def _marker_is(framebuffer: np.ndarray, colour: int) -> bool:
    rgb = (colour >> 16) & 255, (colour >> 8) & 255, colour & 255
    return tuple(int(v) for v in framebuffer[MARKER[1] + 4, MARKER[0] + 4]) == rgb


def _answer(pipe: Connection, expected: str) -> None:
    """Wait for the X program to say ``expected`` (it is ready, it drew a scene)."""
    if not pipe.poll(START_TIMEOUT) or pipe.recv() != expected:
        raise RuntimeError(f"the X program did not answer {expected!r} in {START_TIMEOUT} s")


class Bench:
    """One size: Xvnc, the program, and the measurements of every path on them."""

    def __init__(self, width: int, height: int, frame_rate: int = FRAME_RATE) -> None:
        self.width, self.height, self.frame_rate = width, height, frame_rate
        self.cpu: dict[tuple[str, str], dict[str, float]] = {}
        self.latency: dict[str, list[float]] = {}
        self.path = self.display = self.tcp = self.mss_status = ""
        self.xvnc = 0

    def run(self) -> None:
        from runtimes.xdisplay import XvncDisplay
        with tempfile.TemporaryDirectory(prefix="capture-") as directory:
            self.path = str(Path(directory) / "rfb.sock")
            frame_rate = self.frame_rate
            display = XvncDisplay(self.width, self.height, host="127.0.0.1", port=0,
                                  args=("-rfbunixpath", self.path, "-FrameRate", str(frame_rate)))
            asyncio.run(display.start())
            assert display.process is not None and display.display is not None
            self.xvnc, self.display, self.tcp = (
                display.process.pid, display.display, display.address)
            pipe, child = multiprocessing.Pipe()
            program = multiprocessing.Process(
                target=_program, args=(self.display, self.width, self.height, child), daemon=True)
            try:
                deadline = time.monotonic() + START_TIMEOUT
                while not os.path.exists(self.path):  # Xvnc makes it as it starts
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"Xvnc made no socket {self.path}")
                    time.sleep(0.01)
                program.start()
                _answer(pipe, "ready")
                for scene in SCENES:
                    pipe.send(scene)
                    _answer(pipe, scene)
                    for path in PATHS:
                        self.cpu[path, scene] = self._measure(path)
                pipe.send("sprite")
                _answer(pipe, "sprite")
                x, xtst = _xlib()
                dpy = x.XOpenDisplay(self.display.encode())
                for path in LATENCY_PATHS:
                    self.latency[path] = self._latency(path, lambda: _key_press(x, xtst, dpy))
                x.XCloseDisplay(dpy)
            finally:
                pipe.send(None)
                if program.pid is not None:
                    program.join(START_TIMEOUT)
                display.stop()

    def _open(self, path: str) -> Any:
        """The capturer of ``path``: a ``run(until, seen) -> new frames`` with a framebuffer."""
        if path == "mss":
            return _Mss(self.display, self.width, self.height)
        if path.startswith("rfb"):
            return _RawUnix(self.path, 1 if path == "rfb-nocmp" else None)
        if path == "vncclient":
            return _Client(self.path)
        return _Client(self.tcp, "tight") if path == "viewer" else _Client(None)

    def _measure(self, path: str) -> dict[str, float]:
        """CPU seconds of this process and of Xvnc, and new frames, over MEASURE_SECONDS."""
        capture = self._open(path)
        capture.run(time.perf_counter() + WARMUP_SECONDS, lambda: None)
        capture.stages = stages = [0.0, 0.0]
        cpu0, xvnc0 = time.process_time(), schedstat_cpu(self.xvnc)
        frames = capture.run(time.perf_counter() + MEASURE_SECONDS, lambda: None)
        cpu, xvnc = time.process_time() - cpu0, schedstat_cpu(self.xvnc) - xvnc0
        if isinstance(capture, _Mss):
            self.mss_status = "; ".join(capture.sct.performance_status)
        capture.close()
        return {"frames": frames, "cpu": cpu, "xvnc": xvnc, "grab": stages[0], "diff": stages[1]}

    def _latency(self, path: str, press: Callable[[], None]) -> list[float]:
        """Seconds from a key press to the marker's new colour in the capturer's frame."""
        rng, samples, capture = random.Random(1), [], self._open(path)
        capture.run(time.perf_counter() + WARMUP_SECONDS, lambda: None)
        colour = next(c for c in MARKER_COLOURS if not _marker_is(capture.framebuffer, c))
        for _ in range(TRIALS):
            # A random part of a frame (frames keep flowing), then the key.
            capture.run(time.perf_counter() + rng.uniform(0, 1 / FPS), lambda: None)
            t0, done = time.perf_counter(), list[float]()
            press()

            def seen(want: int = colour, done: list[float] = done) -> None:
                if not done and _marker_is(capture.framebuffer, want):
                    done.append(time.perf_counter())

            end = t0 + TRIAL_TIMEOUT
            while not done and time.perf_counter() < end:
                capture.run(min(end, time.perf_counter() + LATENCY_SLICE), seen)
            samples.append((done[0] if done else time.perf_counter()) - t0)
            colour = MARKER_COLOURS[1 - MARKER_COLOURS.index(colour)]
        capture.close()
        return samples


# Reporting ----------------------------------------------------------------------------------


def _remote(bench: Bench, path: str, scene: str, diff: bool = True) -> tuple[float, float]:
    """(remote CPU ms per second, per new frame): the reader's CPU (not the viewer's: that
    is the agent's; mss's without its diff if not ``diff``) plus Xvnc's over ``none``'s."""
    row, base = bench.cpu[path, scene], bench.cpu["none", scene]
    own = 0.0 if path == "viewer" else row["cpu"] - (0.0 if diff else row["diff"])
    seconds = own + max(0.0, row["xvnc"] - base["xvnc"])
    per_frame = 1e3 * seconds / row["frames"] if row["frames"] else float("nan")
    return 1e3 * seconds / MEASURE_SECONDS, per_frame


def _pct(samples: list[float], q: float) -> float:
    return 1e3 * sorted(samples)[min(len(samples) - 1, int(q * len(samples)))]


def report(bench: Bench) -> None:
    print(f"\n {bench.width}x{bench.height}, Xvnc -FrameRate {bench.frame_rate}: "
          f"{MEASURE_SECONDS} s per scene and path; "
          f"mss: {bench.mss_status or '?'}")
    rows = []
    for scene in SCENES:
        for path in PATHS:
            row, base = bench.cpu[path, scene], bench.cpu["none", scene]
            per_second, per_frame = _remote(bench, path, scene)
            frames, mss = row["frames"] or float("nan"), path == "mss" and row["frames"]
            rows.append([
                f"{scene} {path}", f"{row['frames'] / MEASURE_SECONDS:.0f}",
                *[f"{1e3 * v / MEASURE_SECONDS:.1f}"
                  for v in (row["cpu"], row["xvnc"], max(0.0, row["xvnc"] - base["xvnc"]))],
                f"{per_second:.1f}", "-" if not row["frames"] else f"{per_frame:.3f}",
                f"{1e3 * row['grab'] / frames:.3f}" if mss else "-",
                f"{1e3 * row['diff'] / frames:.3f}" if mss else "-",
            ])
    table(["scene path", "new/s", "proc ms/s", "Xvnc ms/s", "Xvnc+ ms/s", "remote ms/s",
           "remote ms/frame", "grab ms/fr", "diff ms/fr"], rows)
    print("  proc: this process (for 'viewer' the agent's, not the remote's); Xvnc+: over "
          "'none'; remote = proc + Xvnc+; ms/s = thousandths of a core")
    table(["latency (sprite running)", "p50 ms", "p99 ms", "max ms", "timeouts"], [
        [path, f"{_pct(s, 0.5):.1f}", f"{_pct(s, 0.99):.1f}", f"{1e3 * max(s):.1f}",
         str(sum(x >= TRIAL_TIMEOUT for x in s))] for path, s in bench.latency.items()])
    ratios = [("mss", "rfb-unix", True), ("mss", "rfb-unix", False), ("mss", "vncclient", True)]
    table(["ratio (a)/(b)", "sprite ms/frame", "full ms/frame", "static ms/s", "latency p50",
           "p99"], [[
        f"mss{'' if diff else ' w/o diff'} / {b}",
        *[ratio(_remote(bench, a, s, diff)[1], _remote(bench, b, s)[1]) for s in SCENES[1:]],
        ratio(_remote(bench, a, "static", diff)[0], _remote(bench, b, "static")[0]),
        *[ratio(_pct(bench.latency[a], q), _pct(bench.latency[b], q)) for q in (0.5, 0.99)],
    ] for a, b, diff in ratios])
    mss, rfb = _remote(bench, "mss", "sprite")[1], _remote(bench, "rfb-unix", "sprite")[1]
    bare = _remote(bench, "mss", "sprite", diff=False)[1]
    still_mss, still_rfb = _remote(bench, "mss", "static")[0], _remote(bench, "rfb-unix", "static")[0]
    full_mss, full_rfb = _remote(bench, "mss", "full")[1], _remote(bench, "rfb-unix", "full")[1]
    winner = "RFB over the Unix socket" if rfb + still_rfb / FPS < mss + still_mss / FPS else "mss"
    print(f"  better: {winner}. Remote CPU per sprite frame {rfb:.3f} ms (RFB) vs {mss:.3f} ms "
          f"(mss; {bare:.3f} without the diff), {still_rfb:.1f} vs {still_mss:.1f} ms/s on a still "
          "screen (mss grabs and diffs every 1/60 s changed or not; Xvnc tracks damage and "
          f"sends only changes); full-screen changes {full_rfb:.3f} vs {full_mss:.3f} ms/frame "
          f"(XShmGetImage is one copy in Xvnc; Raw is a copy, a write and a read); latency p50 "
          f"{_pct(bench.latency['rfb-unix'], 0.5):.1f} vs {_pct(bench.latency['mss'], 0.5):.1f} ms")


def main(frame_rate: int = FRAME_RATE) -> None:
    print("  load average before: " + load_average())
    try:
        import mss  # noqa: F401
    except ImportError:
        print("  mss is not installed (pip install mss): display_capture skipped")
        return
    for width, height in SIZES:
        bench = Bench(width, height, frame_rate)
        bench.run()
        report(bench)
    print("  load average after: " + load_average())


if __name__ == "__main__":  # python -m benchmarks.display_capture [XVNC_FRAME_RATE]
    main(*[int(arg) for arg in sys.argv[1:2]])
