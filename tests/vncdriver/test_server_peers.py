"""Our VNC server (``vncdriver.server``) against VNC clients nobody here wrote.

- vncdotool (a child process: Twisted runs its own reactor) captures the screen with the
  encodings it decodes, Raw and ZRLE, in our native pixel format and in ones it asks for
  with SetPixelFormat; it is also the peer for wrong and view-only passwords.
- TigerVNC's ``vncviewer`` on an Xvfb display: its window, read back with ``xwd``, must
  show our frame, pixel for pixel for Raw, ZRLE and lossless Tight, close to it for
  Tight JPEG and 8-bit colour; and a remote running Catch, which it can steer.
- asyncvnc (Raw) and asyncvnc2 (ZRLE), test-only GPL peers: full and incremental
  screenshots, and keys that reach ``on_input``.

Waits are on conditions (a capture returning, a window appearing, a screenshot matching,
a frame being drawn), each under a timeout, never on time alone.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncvnc
import asyncvnc2
import numpy as np
import pytest
from PIL import Image

from runtimes.builtin import CATCH_PADDLE_HEIGHT, CATCH_PADDLE_Y, Catch
from tests.vncdriver.xserver import (  # noqa: F401  (xservers_fixture is the fixture)
    XDisplay,
    XServers,
    read_xwd,
    require,
    xservers_fixture,
)
from vncdriver.client import connect as vnc_connect
from vncdriver.errors import AuthenticationFailed
from vncdriver.messages import Encoding, KeyEvent
from vncdriver.pixelformat import PixelFormat
from vncdriver.server import VNCServer

#: asyncvnc does VNC Authentication with cryptography's deprecated single-key TripleDES.
pytestmark = pytest.mark.filterwarnings("ignore:.*TripleDES")

#: Seconds any one wait may take; a peer that needs longer is broken, not slow.
TIMEOUT = 15.0
#: Xvfb screen: room for every frame here with the viewer window at its corner.
SCREEN = (640, 480)
#: keysym of Right, as every peer sends it.
XK_RIGHT = 0xFF53


def scene(height: int, width: int, seed: int) -> np.ndarray:
    """A frame that takes every encoder path: a flat band (fill / solid tiles), blocks of
    a few colours (palette), two-colour stripes (Tight's mono), gradient under noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    frame = np.stack(
        [xx * 255 // max(1, width - 1), yy * 255 // max(1, height - 1), (xx * yy) % 256], -1
    )
    frame = ((frame + rng.integers(0, 48, (height, width, 3))) % 256).astype(np.uint8)
    band = height // 5
    frame[:band] = rng.integers(0, 256, 3, dtype=np.uint8)
    palette = rng.integers(0, 256, (5, 3), dtype=np.uint8)
    blocks = rng.integers(0, 5, (-(-band // 4), -(-width // 4)))
    frame[band : 2 * band] = palette[np.repeat(np.repeat(blocks, 4, 0), 4, 1)[:band, :width]]
    two = rng.integers(0, 256, (2, 3), dtype=np.uint8)
    frame[2 * band : 3 * band] = two[(xx[:band] // 3 + yy[:band] // 2) % 2]
    return frame


class InputLog:
    """``on_input`` for a VNCServer: every event with the id of the client that sent it."""

    def __init__(self) -> None:
        self.events: list[tuple[int, KeyEvent | Any]] = []

    def __call__(self, client_id: int, events: Any) -> None:
        self.events.extend((client_id, e) for e in events)

    def keys(self) -> list[tuple[bool, int]]:
        return [(e.down, e.key) for _, e in self.events if isinstance(e, KeyEvent)]


@pytest.fixture(name="serve")
async def serve_fixture() -> AsyncIterator[Callable[..., Awaitable[VNCServer]]]:
    """``await serve(frame, **kwargs)``: a started VNCServer on a free port, closed after."""
    servers: list[VNCServer] = []

    async def start(frame: np.ndarray, **kwargs: object) -> VNCServer:
        server = VNCServer(frame, **kwargs)  # type: ignore[arg-type]
        await server.start("127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


# vncdotool ---------------------------------------------------------------------------------

#: Runs in a child process: ``python -c VNCDOTOOL <json sessions>``. Each session connects
#: with the encoding and pixel format it names, runs its steps (key, keydown, capture) and
#: reports the rectangle encodings it decoded, or the error that stopped it.
VNCDOTOOL = r"""
import json, struct, sys
from vncdotool import api, rfb
from vncdotool.client import BGR16, PF2IM, VNCDoToolClient, VNCDoToolFactory

FORMATS = {"bgrx": rfb.PixelFormat(32, 24, False, True, 255, 255, 255, 16, 8, 0), "bgr16": BGR16}
results = []
for session in json.loads(sys.argv[1]):
    seen = []

    class Client(VNCDoToolClient):
        encoding = getattr(rfb.Encoding, session.get("encoding", "RAW"))

        def setImageMode(self):
            pf = FORMATS.get(session.get("pixel_format"))
            if pf is None:
                return super().setImageMode()
            self.setPixelFormat(pf)
            self._image_mode = PF2IM[pf]

        def _handleRectangle(self, block):
            seen.append(struct.unpack("!HHHHi", block)[4])
            return super()._handleRectangle(block)

    class Factory(VNCDoToolFactory):
        protocol = Client

    result = {"done": [], "encodings": seen}
    try:
        client = api.connect(session["server"], password=session.get("password"),
                             factory_class=Factory, timeout=10)
        for kind, arg in session["steps"]:
            {"key": client.keyPress, "keydown": client.keyDown,
             "capture": client.captureScreen}[kind](arg)
            result["done"].append(kind)
        client.disconnect()
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    results.append(result)
api.shutdown()
print(json.dumps(results))
"""


async def vncdotool(*sessions: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the sessions one after the other in one vncdotool child process."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-W",
        "ignore",
        "-c",
        VNCDOTOOL,
        json.dumps(sessions),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(TIMEOUT * len(sessions)):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode(errors="replace")
    return json.loads(out.splitlines()[-1])


def read_png(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


@pytest.mark.parametrize(
    ("encoding", "pixel_format", "size"),
    [
        ("RAW", "native", (240, 320)),
        ("RAW", "native", (97, 173)),
        ("ZRLE", "native", (240, 320)),
        ("ZRLE", "native", (97, 173)),
        ("RAW", "bgrx", (97, 173)),
        ("ZRLE", "bgrx", (240, 320)),
    ],
)
async def test_vncdotool_capture_is_pixel_exact(
    serve, tmp_path, encoding, pixel_format, size
) -> None:  # type: ignore[no-untyped-def]
    frame = scene(size[0], size[1], seed=size[1])
    server = await serve(frame)
    png = tmp_path / "capture.png"
    (result,) = await vncdotool(
        {
            "server": f"127.0.0.1::{server.port}",
            "encoding": encoding,
            "pixel_format": pixel_format,
            "steps": [["capture", str(png)]],
        }
    )
    assert "error" not in result, result
    assert set(result["encodings"]) == {getattr(Encoding, encoding)}
    assert np.array_equal(read_png(png), frame)


async def test_vncdotool_in_16_bit_colour(serve, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """RGB565 keeps 5-6-5 bits of each channel (we round); those bits must be right.

    Raw only: vncdotool's ZRLE decoder reads 3-byte CPIXELs whatever the pixel format.
    """
    frame = scene(97, 173, seed=3)
    server = await serve(frame)
    png = tmp_path / "capture.png"
    (result,) = await vncdotool(
        {
            "server": f"127.0.0.1::{server.port}",
            "encoding": "RAW",
            "pixel_format": "bgr16",
            "steps": [["capture", str(png)]],
        }
    )
    assert "error" not in result, result
    rgb565 = PixelFormat(16, 16, False, True, 31, 63, 31, 11, 5, 0)
    assert np.array_equal(narrowed(read_png(png), rgb565), narrowed(frame, rgb565))


async def test_vncdotool_keys_reach_on_input(serve, tmp_path) -> None:  # type: ignore[no-untyped-def]
    inputs = InputLog()
    server = await serve(scene(48, 64, seed=1), on_input=inputs)
    (result,) = await vncdotool(
        {
            "server": f"127.0.0.1::{server.port}",
            "steps": [["key", "right"], ["capture", str(tmp_path / "after.png")]],
        }
    )
    assert "error" not in result, result
    assert inputs.keys() == [(True, XK_RIGHT), (False, XK_RIGHT)]


# Passwords ---------------------------------------------------------------------------------


async def test_wrong_password_is_refused_with_a_reason_and_others_stay(serve, tmp_path) -> None:  # type: ignore[no-untyped-def]
    frame = scene(60, 80, seed=2)
    inputs = InputLog()
    server = await serve(frame, password="secret1", view_only_password="watcher1", on_input=inputs)
    address = f"127.0.0.1::{server.port}"
    async with asyncvnc.connect("127.0.0.1", server.port, password="secret1") as player:
        first = await player.screenshot()
        assert np.array_equal(first[..., :3], frame)

        wrong, watcher, full = await vncdotool(
            {
                "server": address,
                "password": "nope",
                "steps": [["capture", str(tmp_path / "x.png")]],
            },
            {
                "server": address,
                "password": "watcher1",
                "steps": [["key", "right"], ["capture", str(tmp_path / "watcher.png")]],
            },
            {
                "server": address,
                "password": "secret1",
                "steps": [["key", "right"], ["capture", str(tmp_path / "full.png")]],
            },
        )
        assert wrong["error"] == "AuthenticationError: authentication failed"
        with pytest.raises(AuthenticationFailed, match="authentication failed"):
            await vnc_connect(address, password="nope", start_timeout=TIMEOUT)
        with pytest.raises(PermissionError):
            async with asyncvnc.connect("127.0.0.1", server.port, password="nope"):
                pass

        # View-only: the screen arrives, the key does not; the full password's key does.
        assert "error" not in watcher and "error" not in full, (watcher, full)
        assert np.array_equal(read_png(tmp_path / "watcher.png"), frame)
        assert np.array_equal(read_png(tmp_path / "full.png"), frame)
        assert inputs.keys() == [(True, XK_RIGHT), (False, XK_RIGHT)]
        assert len({client_id for client_id, _ in inputs.events}) == 1

        # The first client was served all along.
        frame[:10, :10] = 255 - frame[:10, :10]
        server.frame_ready()
        player.video.refresh()
        async with asyncio.timeout(TIMEOUT):
            await player.read()
        assert np.array_equal(player.video.as_rgba()[..., :3], frame)


async def test_view_only_viewer_cannot_move_the_paddle(start_remote, tmp_path) -> None:  # type: ignore[no-untyped-def]
    remote = await start_remote(
        "builtin.Catch-v0", password="player1", view_only_password="watcher1"
    )
    runtime = remote.runtime
    assert isinstance(runtime, Catch)
    (watcher,) = await vncdotool(
        {
            "server": f"127.0.0.1::{remote.vnc_port}",
            "password": "watcher1",
            "steps": [["keydown", "right"], ["capture", str(tmp_path / "game.png")]],
        }
    )
    assert "error" not in watcher, watcher
    shot = read_png(tmp_path / "game.png")
    assert shot.shape == runtime.framebuffer.shape
    assert np.mean(shot == runtime.framebuffer) > 0.97  # the game, a few frames on
    for _ in range(2):  # input applies at the next tick
        await remote.wait_frame()
    assert runtime.held == set() and remote.held_keys == set()

    async with asyncvnc.connect("127.0.0.1", remote.vnc_port, password="player1") as player:
        start_x = runtime.paddle_x
        with player.keyboard.hold("Right"):
            await player.drain()
            async with asyncio.timeout(TIMEOUT):
                while runtime.paddle_x <= start_x:
                    await remote.wait_frame()


# asyncvnc and asyncvnc2 --------------------------------------------------------------------


@pytest.mark.parametrize("peer", [asyncvnc, asyncvnc2], ids=["asyncvnc-raw", "asyncvnc2-zrle"])
@pytest.mark.parametrize("size", [(240, 320), (97, 173)])
async def test_asyncvnc_screenshots_and_keys(serve, peer, size) -> None:  # type: ignore[no-untyped-def]
    frame = scene(size[0], size[1], seed=7)
    inputs = InputLog()
    server = await serve(frame, on_input=inputs)
    async with peer.connect("127.0.0.1", server.port) as client:
        client.keyboard.press("Right")
        async with asyncio.timeout(TIMEOUT):
            shot = await client.screenshot()
        assert np.array_equal(shot[..., :3], frame)
        assert inputs.keys() == [(True, XK_RIGHT), (False, XK_RIGHT)]
        expected = Encoding.RAW if peer is asyncvnc else Encoding.ZRLE
        assert [c.proto.encoding for c in server.connections.values()] == [expected]

        # An incremental update: a sprite across tile edges, and a flat patch.
        frame[50:70, 60:70] = 255 - frame[50:70, 60:70]
        frame[-8:, -9:] = (1, 2, 3)
        server.frame_ready()
        client.video.refresh()  # incremental: it has a picture already
        async with asyncio.timeout(TIMEOUT):
            await client.read()
        assert np.array_equal(client.video.as_rgba()[..., :3], frame)


# TigerVNC vncviewer ------------------------------------------------------------------------


class Viewer:
    """A TigerVNC ``vncviewer`` on an X display, and what its window shows."""

    def __init__(self, xs: XServers, display: XDisplay) -> None:
        self.xs, self.display = xs, display
        self.window = ""
        self.geometry = (0, 0, 0, 0)  # x, y, width, height on the screen

    async def start(self, port: int, *options: str, security: str = "None") -> None:
        await self.xs.spawn(
            self.display,
            "vncviewer",
            f"127.0.0.1::{port}",
            "-SecurityTypes",
            security,
            "-Shared=1",
            "-ReconnectOnError=0",
            "-AlertOnFatalError=0",
            "-RemoteResize=0",
            "-FullScreen=0",
            "-MenuKey=",
            *options,  # no MenuKey: no "Press F8" overlay
        )
        out = await self._run("xdotool", "search", "--sync", "--onlyvisible", "--name", "TigerVNC")
        self.window = out.split()[0].decode()
        info = (await self._run("xwininfo", "-id", self.window)).decode()
        fields = {
            k: int(v)
            for k, v in re.findall(r"(Absolute upper-left [XY]|Width|Height):\s+(-?\d+)", info)
        }
        self.geometry = (
            fields["Absolute upper-left X"],
            fields["Absolute upper-left Y"],
            fields["Width"],
            fields["Height"],
        )

    async def shows(self, matches: Callable[[np.ndarray], bool]) -> np.ndarray:
        """Take screenshots until the window's pixels satisfy ``matches``; the last one."""
        x, y, w, h = self.geometry
        async with asyncio.timeout(TIMEOUT):
            while True:
                shot = read_xwd(await self._run("xwd", "-root", "-silent"))[y : y + h, x : x + w]
                if matches(shot):
                    return shot

    async def _run(self, *argv: str) -> bytes:
        require(argv[0])
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=self.display.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(TIMEOUT):
                out, err = await process.communicate()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, f"{argv}: {err.decode(errors='replace')}"
        return out


@pytest.fixture(name="viewer")
def viewer_fixture(xservers: XServers) -> Viewer:
    """A Viewer on a fresh Xvfb display, started by the test (``xservers`` ends both)."""
    require("vncviewer", "xdotool", "xwininfo", "xwd")
    return Viewer(xservers, xservers.xvfb(*SCREEN))


#: 256 colours (rgb332): a 1-byte pixel format, converted by our encoders.
LOW_COLOUR = ("-FullColor=0", "-LowColorLevel", "2")


def mean_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(int) - b.astype(int)).mean()) if a.shape == b.shape else 255.0


def narrowed(rgb: np.ndarray, pixel_format: PixelFormat) -> np.ndarray:
    """Each channel cut to the client's bits the way we round (8 bits -> 0..max)."""
    tops = (pixel_format.red_max, pixel_format.green_max, pixel_format.blue_max)
    return np.stack(
        [(rgb[..., i].astype(int) * top + 127) // 255 for i, top in enumerate(tops)], -1
    )


@pytest.mark.parametrize(
    ("options", "encoding", "fidelity"),
    [
        (["-PreferredEncoding", "ZRLE"], Encoding.ZRLE, "exact"),
        (["-PreferredEncoding", "Tight", "-NoJPEG=1"], Encoding.TIGHT, "exact"),
        (["-PreferredEncoding", "Raw"], Encoding.RAW, "exact"),
        (["-PreferredEncoding", "Tight", "-QualityLevel", "8"], Encoding.TIGHT, "jpeg"),
        (["-PreferredEncoding", "ZRLE", *LOW_COLOUR, "-AutoSelect=0"], Encoding.ZRLE, "8-bit"),
        (["-PreferredEncoding", "Tight", *LOW_COLOUR, "-AutoSelect=0"], Encoding.TIGHT, "8-bit"),
    ],
    ids=["zrle", "tight-lossless", "raw", "tight-jpeg", "zrle-8bit", "tight-8bit"],
)
async def test_vncviewer_shows_the_frame(serve, viewer, options, encoding, fidelity) -> None:  # type: ignore[no-untyped-def]
    frame = scene(240, 320, seed=11)
    server = await serve(frame)
    await viewer.start(server.port, *options)
    assert viewer.geometry[2:] == (320, 240)
    (connection,) = server.connections.values()
    assert connection.proto is not None

    def right(shot: np.ndarray) -> bool:
        if fidelity == "exact":
            return np.array_equal(shot, frame)
        if fidelity == "jpeg":  # TigerVNC's level 8 is libjpeg quality 92
            return mean_error(shot, frame) < 6 and not np.array_equal(shot, frame)
        # 8-bit colour: what survives of each channel must be the right bits.
        pf = connection.proto.pixel_format
        return pf.bits_per_pixel == 8 and np.array_equal(narrowed(shot, pf), narrowed(frame, pf))

    await viewer.shows(right)
    assert connection.proto.encoding == encoding

    # Then only a part changes: the viewer applies the incremental update.
    frame[100:140, 30:290] = scene(40, 260, seed=12)
    server.frame_ready()
    await viewer.shows(right)


async def test_vncviewer_turning_full_colour_on_gets_every_pixel_again(serve, viewer) -> None:  # type: ignore[no-untyped-def]
    """Starting in 8-bit colour, the viewer measures the link after an update and asks for
    full colour (SetPixelFormat, then an incremental request): the whole screen must come
    again in the new format, not only the part that changed."""
    frame = scene(240, 320, seed=13)
    server = await serve(frame)
    await viewer.start(server.port, "-PreferredEncoding", "Tight", "-NoJPEG=1", *LOW_COLOUR)
    (connection,) = server.connections.values()
    assert connection.proto is not None and connection.proto.pixel_format.bits_per_pixel == 8
    frame[:8, :8] = 255 - frame[:8, :8]  # an update for the viewer to measure the link by
    server.frame_ready()
    await viewer.shows(lambda shot: np.array_equal(shot, frame))
    assert connection.proto.pixel_format.bits_per_pixel == 32


async def test_vncviewer_watches_and_steers_catch(start_remote, viewer) -> None:  # type: ignore[no-untyped-def]
    remote = await start_remote("builtin.Catch-v0")
    runtime = remote.runtime
    assert isinstance(runtime, Catch)
    await viewer.start(remote.vnc_port)  # TigerVNC's defaults: Tight with JPEG, 24 bits
    assert viewer.geometry[2:] == (160, 210)
    paddle = slice(CATCH_PADDLE_Y, CATCH_PADDLE_Y + CATCH_PADDLE_HEIGHT)

    def game_on_screen(shot: np.ndarray) -> bool:
        # Few colours: lossless even with JPEG on. The ball moves on between the frame and
        # the screenshot, the paddle only when a key is held.
        return np.mean(shot == runtime.framebuffer) > 0.97 and np.array_equal(
            shot[paddle], runtime.framebuffer[paddle]
        )

    await viewer.shows(game_on_screen)
    start_x = runtime.paddle_x
    await viewer._run("xdotool", "windowfocus", "--sync", viewer.window)
    await viewer._run("xdotool", "keydown", "Right")
    try:
        async with asyncio.timeout(TIMEOUT):
            while runtime.paddle_x < start_x + 9:
                await remote.wait_frame()
    finally:
        await viewer._run("xdotool", "keyup", "Right")
    async with asyncio.timeout(TIMEOUT):
        while remote.held_keys:
            await remote.wait_frame()
    await viewer.shows(game_on_screen)  # the paddle where the game has it now
