"""The agent's dashboard: its bookkeeping, its endpoints, ``play --dashboard`` against real
local remotes, and the page in a headed Chromium showing the exact frame the remote served."""

from __future__ import annotations

import io
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import orjson
import pytest
from PIL import Image

from remotes.dashboard import DEFAULT_PORT, MAX_THUMBNAIL_WIDTH, Dashboard, encode_frame, encode_png
from remotes.local import start_local
from remotes.loop import LoopThread
from remotes.play import play
from remotes.vector import RemoteVectorEnv
from tests.envserver.test_viewer import (  # noqa: F401 (fixtures)
    Chromium,
    browser,
    canvas_origin,
    find_image,
    wait_until,
    xvfb,
)
from tests.vncdriver.xserver import XDisplay, XServers

TIMEOUT = 20.0


def get(url: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def wait_for(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    """Poll ``condition`` (from a plain thread) until truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return value


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("dashboard-test")
    yield thread
    thread.close()


# Images ---------------------------------------------------------------------------------------


def test_png_is_lossless() -> None:
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (210, 160, 3), np.uint8)
    assert np.array_equal(decode(encode_png(frame)), frame)
    data, kind = encode_frame(frame)
    assert kind == "image/png" and np.array_equal(decode(data), frame)


def test_large_frames_shrink_and_big_thumbnails_turn_jpeg() -> None:
    frame = np.zeros((768, 1024, 3), np.uint8)
    frame[:, 512:] = (250, 40, 10)
    data, kind = encode_frame(frame)
    assert kind == "image/png" and np.array_equal(decode(data), frame[::4, ::4])  # every 4th pixel
    data, kind = encode_frame(frame, "jpeg")
    image = decode(data)
    assert kind == "image/jpeg" and image.shape == (192, 256, 3)
    assert image.shape[1] <= MAX_THUMBNAIL_WIDTH
    assert np.abs(image[:, 140:].astype(int) - (250, 40, 10)).max() < 12
    tall = np.zeros((400, 300, 3), np.uint8)  # 120,000 pixels after shrinking: JPEG
    assert encode_frame(tall)[1] == "image/jpeg"


# Bookkeeping ------------------------------------------------------------------------------------


def step(board: Dashboard, rewards: list[float], done: list[bool] | None = None,
         infos: dict[str, Any] | None = None) -> None:
    n = len(rewards)
    frames = np.zeros((n, 4, 4, 3), np.uint8)
    board.record(frames, np.array(rewards), np.array(done or [False] * n), np.zeros(n, bool),
                 infos or {})


def test_returns_states_and_rates() -> None:
    board = Dashboard(["a", "b", "c"], ["builtin.Catch-v0"] * 3, target_fps=60)
    assert board.snapshot()["remotes"][0]["state"] == "starting"
    board.record(np.zeros((3, 4, 4, 3), np.uint8))  # reset
    step(board, [1, 0, -1])
    step(board, [1, 0.5, 0], [True, False, False])
    disconnected = {
        "remote.connected": np.array([True, True, False]),
        "_remote.connected": np.array([False, False, True]),
        "remote.error": np.array([None, None, "connection lost"], object),
        "_remote.error": np.array([False, False, True]),
        "episode_id": np.array([4, 7, 0]),
        "_episode_id": np.array([True, True, False]),
    }
    step(board, [-2, 1, 5], infos=disconnected)
    snap = board.snapshot()
    a, b, c = snap["remotes"]
    assert snap["steps"] == 3 and snap["target_fps"] == 60
    assert a["returns"] == [(1, 2.0, 2)] and a["episodes"] == 1 and a["episode_return"] == -2.0
    assert a["episode"] == 2 and b["episode"] == 1  # the one under way, numbered as on the chart
    assert a["mean_return"] == 2.0 and a["episode_id"] == 4 and a["state"] == "running"
    assert b["returns"] == [] and b["episode_return"] == 1.5 and b["steps"] == 3
    assert c["state"] == "reconnecting" and c["error"] == "connection lost" and c["steps"] == 2
    assert c["episode_return"] == -1.0  # nothing counted while away
    assert a["fps"] > 0
    orjson.dumps(snap, option=orjson.OPT_SERIALIZE_NUMPY)


def test_record_costs_microseconds() -> None:
    """The agent loop pays for the dashboard only this: no copies, no encoding."""
    n = 8
    board = Dashboard([str(i) for i in range(n)])
    frames = np.zeros((n, 768, 1024, 3), np.uint8)
    rewards, done = np.zeros(n), np.zeros(n, bool)
    infos = {"episode_id": np.arange(n), "_episode_id": np.ones(n, bool)}
    started = time.perf_counter()
    for _ in range(2000):
        board.record(frames, rewards, done, done, infos)
    per_step = (time.perf_counter() - started) / 2000
    assert per_step < 500e-6, f"record() took {per_step * 1e6:.0f} µs per step of {n} remotes"


# Endpoints ----------------------------------------------------------------------------------------


def test_endpoints(loop: LoopThread) -> None:
    board = Dashboard(["x:1+2", "y:3+4"], ["builtin.Catch-v0", None], loop=loop)
    url = board.start(0)
    try:
        status, kind, body = get(url)
        assert status == 200 and b"dashboard.js" in body
        assert get(url + "frame/0")[0] == 503  # before the first reset
        frames = np.random.default_rng(1).integers(0, 256, (2, 210, 160, 3), np.uint8)
        board.record(frames)
        status, kind, body = get(url + "frame/1")
        assert (status, kind) == (200, "image/png") and np.array_equal(decode(body), frames[1])
        status, kind, body = get(url + "frame/0?format=jpeg")
        assert (status, kind) == (200, "image/jpeg") and decode(body).shape == (210, 160, 3)
        assert get(url + "frame/2")[0] == 404 and get(url + "frame/0?format=gif")[0] == 400
        status, kind, body = get(url + "state.json")
        state = orjson.loads(body)
        assert kind == "application/json" and [r["name"] for r in state["remotes"]] == ["x:1+2", "y:3+4"]
        assert get(url + "static/dashboard.js")[0] == 200
    finally:
        board.close()
    with pytest.raises(OSError):
        get(url)


# With real remotes --------------------------------------------------------------------------------


class Lines(io.StringIO):
    """``play``'s output, readable from another thread as it comes."""

    def find(self, prefix: str) -> str | None:
        lines = self.getvalue().splitlines()
        return next((line for line in lines if line.startswith(prefix)), None)


#: Share of its fps a game keeps while the dashboard serves frames: loose enough for a
#: loaded 2-core machine (make bench beside the suite), far above a game the dashboard
#: would stall.
KEEPS_PACE = 0.5


def test_play_serves_the_dashboard_without_slowing_down() -> None:
    out = Lines()
    result: dict[str, Any] = {}

    def run() -> None:
        result.update(play("builtin.Catch-v0", n=2, seconds=8.0, dashboard=0, out=out))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        url = wait_for(lambda: out.find("dashboard: "), "play to print the dashboard's URL", 30)
        url = url.split()[-1]
        assert get(url)[0] == 200

        def warmed_up() -> dict[str, Any] | None:
            state = orjson.loads(get(url + "state.json")[2])
            return state if state["steps"] >= 120 else None

        state = wait_for(warmed_up, "120 steps")
        # A watcher pulls both screens 4 times a second, as the page does, while we check.
        for _ in range(8):
            for i in range(2):
                status, kind, body = get(url + f"frame/{i}")
                assert (status, kind) == (200, "image/png") and decode(body).shape == (210, 160, 3)
            time.sleep(0.125)  # pacing the watcher, not synchronisation
        state = orjson.loads(get(url + "state.json")[2])
        for remote in state["remotes"]:
            assert remote["env_id"] == "builtin.Catch-v0" and remote["state"] in ("running", "resetting")
            assert remote["fps"] >= KEEPS_PACE * state["target_fps"], remote
    finally:
        thread.join(30)
    assert not thread.is_alive() and result["steps"] > 0
    with pytest.raises(OSError):
        get(url)  # closed with the run


def test_busy_port_is_a_clear_error(loop: LoopThread) -> None:
    board = Dashboard(["a"], loop=loop)
    url = board.start(0)
    try:
        with pytest.raises(ValueError, match=f"dashboard on port {board.port}.*--dashboard"):
            play("builtin.Catch-v0", n=1, steps=1, dashboard=board.port, out=io.StringIO())
    finally:
        board.close()
    assert url


async def test_chromium_shows_the_frame_the_remote_served(
    browser: Callable[[str], Awaitable[Chromium]], xvfb: tuple[XServers, XDisplay],  # noqa: F811
) -> None:
    xs, display = xvfb
    with start_local("builtin.Catch-v0", 1) as remotes:
        env = RemoteVectorEnv(remotes.address)
        board = Dashboard.for_env(env)
        try:
            observations, _ = env.reset(seed=3)
            board.record(observations)  # the agent stops here: the frame stays
            frame = observations[0]
            assert frame.std() > 0
            # An episode ends, so the chart has a line to draw.
            board.record(observations, np.array([1.0]), np.array([True]), np.array([False]), {})
            url = board.start(0)
            page = await browser(url + "?zoom=1")
            await wait_until(lambda: page.evaluate("window.dashboard.frames[0] >= 1"),
                             "the page to show remote 0's frame")
            assert await page.evaluate("document.querySelectorAll('#chart path').length") == 1
            assert "builtin.Catch-v0" in await page.evaluate("document.getElementById('remote-0').innerText")
            near = await canvas_origin(page, "#remote-0 img")
            found: tuple[int, int] | None = None

            def shows() -> bool:
                nonlocal found
                found = find_image(xs.screenshot(display), frame, near)
                return found is not None

            await wait_until(shows, "the remote's frame pixel for pixel on the X screen")
        finally:
            board.close()
            env.close()
    assert found is not None


def test_the_dashboard_s_default_port_is_no_remote_s() -> None:
    """``play --dashboard`` beside ``serve --mcp-port`` (or the viewer, or OpenEnv) on one
    machine: its default port is none of the ports a remote takes by default or floats to."""
    from envserver.ports import FLOAT_RANGE, HTTP_BASE, MCP_BASE
    from universe_remote.cli import build_parser

    remote_defaults = {8000, *range(MCP_BASE, MCP_BASE + FLOAT_RANGE),
                       *range(HTTP_BASE, HTTP_BASE + FLOAT_RANGE)}
    assert DEFAULT_PORT not in remote_defaults
    played = build_parser().parse_args(["play", "builtin.Catch-v0", "--dashboard"])
    assert played.dashboard == DEFAULT_PORT
