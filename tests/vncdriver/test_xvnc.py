"""Our VNC client against servers nobody here wrote: TigerVNC's Xvnc, and x11vnc on Xvfb.

Known pixels go on the X display with ``xwud`` (an XWD image we generate, shown at a
known place: no window manager, no border), and the X server's own picture
(``xwd -root``) is the second witness. Input is checked with ``xev``: its window logs
the key, button and motion events the X server delivered, which we parse and wait for.
Every wait is on a condition (an update, an xev line) with a timeout; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
import pytest

from vncdriver.client import VNCClient, connect
from vncdriver.errors import AuthenticationFailed, ConnectionLost

from .xserver import XDisplay, XServers, xservers_fixture  # noqa: F401 (the fixture)

#: Generous bound for one condition to come true (they take milliseconds here).
WAIT = 10.0


def pattern_image(h: int = 120, w: int = 170, seed: int = 0) -> np.ndarray:
    """Content each encoder treats differently: noise, solid blocks, few colours, gradient."""
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)  # full colour (zlib / raw)
    img[: h // 3, : w // 2] = (200, 30, 90)  # solid
    palette = rng.integers(0, 256, (5, 3), dtype=np.uint8)
    blocks = palette[rng.integers(0, 5, (h // 3 // 4 + 1, w // 2 // 6 + 1))]
    img[: h // 3, w // 2 :] = np.repeat(np.repeat(blocks, 4, 0), 6, 1)[: h // 3, : w - w // 2]
    yy, xx = np.mgrid[0 : h - 2 * h // 3, 0:w]
    img[2 * h // 3 :] = np.stack([xx % 256, (yy * 3) % 256, (xx + yy) % 256], -1)
    return img


def smooth_image(h: int = 120, w: int = 170) -> np.ndarray:
    """Photo-like content (JPEG's case): smooth gradients."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(xx / 23.0)
    g = 128 + 100 * np.cos(yy / 17.0)
    b = 128 + 60 * np.sin((xx + yy) / 31.0)
    return np.stack([r, g, b], -1).astype(np.uint8)


async def until(client: VNCClient, condition: Callable[[], bool], timeout: float = WAIT) -> None:
    """Wait for updates until ``condition()`` holds (checked after each update)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await client.wait_update()


def shows(client: VNCClient, image: np.ndarray, x: int, y: int) -> Callable[[], bool]:
    h, w = image.shape[:2]
    return lambda: bool(np.array_equal(client.framebuffer[y : y + h, x : x + w], image))


@pytest.fixture
async def xvnc(xservers: XServers) -> XDisplay:
    return await xservers.xvnc(320, 240)


# Pixels ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encodings", "expected"),
    [(["raw"], "RAW"), (["tight"], "TIGHT"), (["zrle"], "ZRLE")],
    ids=["raw", "tight", "zrle"],
)
async def test_lossless_pixels_are_exact(
    xservers: XServers,
    xvnc: XDisplay,
    encodings: list[str],
    expected: str,
) -> None:
    async with VNCClient(xvnc.vnc_address, encoding=encodings) as client:
        assert (client.width, client.height) == (320, 240)
        await client.wait_update(0, timeout=WAIT)  # the first, full update
        image = pattern_image()
        xservers.show_image(xvnc, image, 13, 7)  # odd offsets: not tile aligned
        await until(client, shows(client, image, 13, 7))
        # The whole screen, not just the window, matches the X server's own picture.
        np.testing.assert_array_equal(client.frame(), xservers.screenshot(xvnc))

        # A second image over part of the first: an incremental update.
        second = pattern_image(60, 90, seed=1)
        xservers.show_image(xvnc, second, 101, 77)
        await until(client, shows(client, second, 101, 77))
        np.testing.assert_array_equal(client.frame(), xservers.screenshot(xvnc))
        by_encoding = client.stats.rectangles_by_encoding
        assert by_encoding.get(expected, 0) > 0
        assert set(by_encoding) <= {expected, "RAW", "LAST_RECT"}, by_encoding


async def test_tight_jpeg_is_close(xservers: XServers, xvnc: XDisplay) -> None:
    async with VNCClient(xvnc.vnc_address, encoding=["tight"], quality=6) as client:
        await client.wait_update(0, timeout=WAIT)
        image = smooth_image()
        xservers.show_image(xvnc, image, 20, 30)

        def close_enough() -> bool:
            region = client.framebuffer[30:150, 20:190].astype(np.int16)
            return float(np.abs(region - image).mean()) < 4.0

        await until(client, close_enough)
        region = client.frame()[30:150, 20:190].astype(np.int16)
        error = np.abs(region - image)
        assert error.mean() > 0, "no loss at all: the server did not use JPEG"
        assert np.percentile(error, 99) < 32
        assert client.stats.rectangles_by_encoding.get("TIGHT", 0) > 0


async def test_window_move_arrives_as_copyrect(xservers: XServers, xvnc: XDisplay) -> None:
    async with VNCClient(xvnc.vnc_address, encoding=["zrle", "copyrect"]) as client:
        image = pattern_image()
        xservers.show_image(xvnc, image, 0, 0)
        await until(client, shows(client, image, 0, 0))
        xservers.check_output(
            xvnc, "xdotool", "search", "--class", "xwud", "windowmove", "140", "110"
        )
        await until(client, shows(client, image[:130, :180], 140, 110))
        np.testing.assert_array_equal(client.frame(), xservers.screenshot(xvnc))
        assert client.stats.rectangles_by_encoding.get("COPYRECT", 0) > 0


async def test_many_clients_connect_at_once(xservers: XServers, xvnc: XDisplay) -> None:
    """Xvnc's listen backlog is 5: the rest are refused and must retry with backoff."""
    image = pattern_image()
    xservers.show_image(xvnc, image, 0, 0)
    clients = [
        VNCClient(xvnc.vnc_address, encoding=enc, name=f"client {i}")
        for i, enc in enumerate(["tight", "zrle", "raw"] * 4)
    ]
    try:
        await asyncio.gather(*(c.start() for c in clients))
        await asyncio.gather(*(until(c, shows(c, image, 0, 0)) for c in clients))
    finally:
        await asyncio.gather(*(c.close() for c in clients))


# Input -----------------------------------------------------------------------------------


async def test_pointer_and_keys_reach_x_programs(xservers: XServers, xvnc: XDisplay) -> None:
    """xev logs what the X server delivers to its window; with no window manager the
    keyboard focus follows the pointer, so the pointer goes into the window first."""
    events = await xservers.xev(xvnc, 200, 100, 100, 80)
    async with VNCClient(xvnc.vnc_address) as client:
        # Entering the window: EnterNotify, sometimes MotionNotify too.
        client.pointer_event(230, 130)
        await events.wait_for(lambda e: e.root == (230, 130) and e.type.endswith("Notify"))
        # A move inside it: always MotionNotify.
        client.pointer_event(231, 131)
        await events.wait_for(lambda e: e.type == "MotionNotify" and e.root == (231, 131))
        client.pointer_event(231, 131, 1)
        press = await events.wait_for(lambda e: e.type == "ButtonPress")
        assert (press.button, press.root) == (1, (231, 131))
        client.pointer_event(231, 131, 0)
        await events.wait_for(lambda e: e.type == "ButtonRelease" and e.button == 1)
        client.pointer_event(240, 140, 4)  # right button
        await events.wait_for(lambda e: e.type == "ButtonPress" and e.button == 3)
        client.pointer_event(240, 140, 0)

        mark = len(events.events)
        client.key_event("a", True)
        client.key_event("a", False)
        key = await events.wait_for(lambda e: e.type == "KeyPress", start=mark)
        assert key.keysym == "a"
        await events.wait_for(lambda e: e.type == "KeyRelease" and e.keysym == "a", start=mark)

        # Universe's action vocabulary, in one write.
        mark = len(events.events)
        client.send_events(
            [
                ("KeyEvent", "Return", True),
                ("KeyEvent", "Return", False),
                ["KeyEvent", "ArrowLeft", True],  # a browser alias, as JSON gives it
                ("KeyEvent", "ArrowLeft", False),
                ("KeyEvent", 0x7A, True),  # a keysym number: z
                ("KeyEvent", 0x7A, False),
                ("PointerEvent", 250, 150, 0),
            ]
        )
        await events.wait_for(
            lambda e: e.type == "MotionNotify" and e.root == (250, 150), start=mark
        )
        pressed = [e.keysym for e in events.events[mark:] if e.type == "KeyPress"]
        assert pressed == ["Return", "Left", "z"]
        with pytest.raises(ValueError, match="PointerEvent"):
            client.send_events([("KeyEvent", "a", True), ("Click", 1, 2)])


# Passwords -------------------------------------------------------------------------------


async def test_password(xservers: XServers) -> None:
    display = await xservers.xvnc(160, 120, password="s3cret!")
    async with VNCClient(display.vnc_address, password="s3cret!") as client:
        await client.wait_update(0, timeout=WAIT)
        assert client.frame().shape == (120, 160, 3)

    started = time.monotonic()
    with pytest.raises(AuthenticationFailed) as failed:
        await connect(display.vnc_address, password="wrong", start_timeout=30)
    assert time.monotonic() - started < 5, "a wrong password must not be retried"
    assert failed.value.reason  # TigerVNC's own words
    assert "authentication" in str(failed.value).lower()

    with pytest.raises(AuthenticationFailed, match="none was given"):
        await connect(display.vnc_address)


# x11vnc ----------------------------------------------------------------------------------


@pytest.mark.parametrize("encodings", [["raw"], ["tight"], ["zrle"]], ids=str)
async def test_x11vnc_on_xvfb(xservers: XServers, encodings: list[str]) -> None:
    display = xservers.xvfb(320, 240)
    # No cursor drawn into the picture; short update deferral, so tests stay quick.
    xservers.x11vnc(display, args=["-nocursor", "-defer", "5", "-wait", "5"])
    image = pattern_image()
    xservers.show_image(display, image, 33, 44)
    async with VNCClient(display.vnc_address, encoding=encodings) as client:
        await until(client, shows(client, image, 33, 44))
        np.testing.assert_array_equal(client.frame(), xservers.screenshot(display))
        assert client.stats.rectangles_by_encoding.get(encodings[0].upper(), 0) > 0


async def test_xvnc_exit_is_reported(xservers: XServers, xvnc: XDisplay) -> None:
    client = await connect(xvnc.vnc_address)
    try:
        await client.wait_update(0, timeout=WAIT)
        waiter = asyncio.ensure_future(client.wait_update(timeout=WAIT))
        xvnc.process.kill()
        with pytest.raises(ConnectionLost):
            await waiter
        assert not client.connected
        assert isinstance(client.error, ConnectionLost)
        with pytest.raises(ConnectionLost):
            client.key_event("a", True)
    finally:
        await client.close()
