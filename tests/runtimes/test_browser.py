"""MiniWoB++ in real Chromium on real TigerVNC Xvnc, served by a real remote.

The agent sees and clicks through VNC (our client against Xvnc) and hears rewards over
the rewarder; CDP is used only to ask the page where things are. Every test checks that
no Xvnc or Chromium process outlives its remote.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from envserver.remote import Remote
from remotes.env import RemoteEnv
from runtimes import registry
from runtimes.xdisplay import XvncDisplay
from tests.conftest import StartRemote
from tests.runtimes.display import alive, display_remotes
from tests.wire import WireClient
from vncdriver.client import VNCClient
from vncdriver.errors import AuthenticationFailed

try:
    from runtimes.browser import KEYS, TASK_AREA, MiniWoBRuntime, env_id_for, html_dir
except ModuleNotFoundError as exc:  # miniwob, Xvnc or Chromium is not installed
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _browser_family_installed() -> None:
    """Skip each test (conftest fails the skip in CI) when the family cannot load."""
    if MISSING is not None:
        pytest.skip(MISSING)

#: MiniWoB's instruction bar (``#query``, yellow) and the task's white area below it.
QUERY_COLOUR = (255, 255, 0)
AREA_TOP = 50
TIMEOUT = 10.0

StartBrowser = Callable[..., Awaitable[Remote]]


@pytest.fixture
async def start_browser(start_remote: StartRemote) -> AsyncIterator[StartBrowser]:
    """``await start_browser(env_id)``: a remote serving a MiniWoB task on ports 0.

    At teardown the remotes are closed and every Xvnc and Chromium process they started
    must be gone.
    """
    async with display_remotes(start_remote, MiniWoBRuntime, "miniwob.ClickTest-v0", "Chromium") as start:
        yield start


def runtime(remote: Remote) -> MiniWoBRuntime:
    assert isinstance(remote.runtime, MiniWoBRuntime)
    return remote.runtime


async def page(remote: Remote, expression: str) -> Any:
    """Ask the task page (CDP); the tests use it to know where things are, never to act."""
    cdp = runtime(remote).cdp
    assert cdp is not None
    return await cdp.evaluate(expression)


def click(x: int, y: int) -> list[tuple[Any, ...]]:
    return [("PointerEvent", x, y, 0), ("PointerEvent", x, y, 1), ("PointerEvent", x, y, 0)]


def shows_task(frame: np.ndarray) -> bool:
    """The page is on screen with an episode running (the START cover is black)."""
    return tuple(frame[45, 155]) == QUERY_COLOUR  # below and right of the text


def button_centre(frame: np.ndarray) -> tuple[int, int] | None:
    """Centre of the non-white pixels in the task area below the instruction bar."""
    x0, y0, w, h = TASK_AREA
    area = frame[y0 + AREA_TOP : y0 + h, x0 : x0 + w]
    ys, xs = np.nonzero((area < 250).any(axis=2))
    if ys.size < 100:
        return None
    return int(xs.mean()) + x0, int(ys.mean()) + y0 + AREA_TOP


async def find_button(vnc: VNCClient, remote: Remote) -> tuple[int, int]:
    """The button's centre found in the VNC pixels; checked against the live page (a frame
    from before the reset may still be the newest for a moment)."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            frame = vnc.frame()
            centre = button_centre(frame) if shows_task(frame) else None
            if centre is not None and await page(
                remote, f"document.elementFromPoint({centre[0]}, {centre[1]}).id === 'subbtn'"
            ):
                return centre
            try:
                await vnc.wait_update(timeout=0.2)
            except TimeoutError:
                pass


async def reward_of(agent: WireClient, episode: str) -> dict[str, Any]:
    message = await agent.recv_until("v0.env.reward", episode_id=episode)
    return message["body"]


# The family -------------------------------------------------------------------------------


def test_every_task_page_of_the_wheel_is_an_env() -> None:
    pages = sorted(p.name for p in html_dir().glob("*.html"))
    ids = [env_id for env_id in registry.env_ids() if env_id.startswith("miniwob.")]
    assert len(pages) >= 100 and len(ids) == len(pages)
    assert env_id_for("click-test.html") == "miniwob.ClickTest-v0"
    assert env_id_for("click-tab-2-hard.html") == "miniwob.ClickTab2Hard-v0"
    cls = registry.lookup("miniwob.ClickTest-v0")
    assert isinstance(cls, type) and issubclass(cls, MiniWoBRuntime)
    assert (cls.width, cls.height) == (160, 210) and cls.display_size == (640, 480)
    assert cls.describe()["task_area"] == list(TASK_AREA)
    full = cls(screen="full")
    assert isinstance(full, cls) and (full.width, full.height) == full.framebuffer.shape[1::-1] == (640, 480)
    assert type(full).describe()["screen"] == "full" and cls.describe()["screen"] == "task"
    with pytest.raises(ValueError, match="screen must be one of task, full"):
        cls(screen="wide")
    assert {"a", "A", "space", "Return", "BackSpace", "Control_L"} <= set(KEYS)


# Playing through VNC ----------------------------------------------------------------------


async def test_click_through_vnc_earns_a_positive_reward(start_browser: StartBrowser) -> None:
    remote = await start_browser("miniwob.ClickTest-v0")
    assert remote.vnc.port == remote.vnc_port  # the remote serves the page itself
    agent = await WireClient.open(remote.rewarder.port)
    episode = (await agent.reset(seed=3))["headers"]["episode_id"]
    assert await agent.episode_text(episode) == "Click the button."
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}") as vnc:
        assert (vnc.width, vnc.height) == (160, 210)  # the task, not the grey around it
        x, y = await find_button(vnc, remote)
        vnc.send_events(click(x, y))
        body = await reward_of(agent, episode)
    assert body["reward"] > 0 and body["done"]
    assert body["info"]["wob.raw_reward"] == 1.0
    await agent.close()


async def test_wrong_button_ends_the_episode_and_resets_start_fresh(
    start_browser: StartBrowser,
) -> None:
    remote = await start_browser("miniwob.ClickButton-v0")
    agent = await WireClient.open(remote.rewarder.port)
    texts: dict[int, str] = {}
    wrong = None
    for seed in range(1, 20):  # a seed whose page has a button that is not the answer
        episode = (await agent.reset(seed=seed))["headers"]["episode_id"]
        texts[seed] = await agent.episode_text(episode)
        wrong = await page(
            remote,
            """(() => {
                const target = document.getElementById('query').textContent.split('"')[1];
                for (const b of document.querySelectorAll('#area button')) {
                    if (b.textContent !== target) {
                        const r = b.getBoundingClientRect();
                        return [Math.round(r.x + r.width / 2), Math.round(r.y + r.height / 2)];
                    }
                }
                return null;
            })()""",
        )
        if wrong is not None:
            break
    assert wrong is not None, f"no seed gave a wrong button: {texts}"
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}") as vnc:
        vnc.send_events(click(*wrong))
        body = await reward_of(agent, episode)
    assert body["reward"] <= 0 and body["done"]
    assert body["info"]["wob.raw_reward"] == -1.0

    # A reset: a new episode id, a new instruction; the same seed gives the same task.
    seeds = sorted(texts)
    first = seeds[0]
    other = next(
        (s for s in range(first + 1, first + 40) if s not in texts), first + 1
    )
    reply = await agent.reset(seed=other)
    other_episode = reply["headers"]["episode_id"]
    assert int(other_episode) > int(episode)
    other_text = await agent.episode_text(other_episode)
    again = (await agent.reset(seed=first))["headers"]["episode_id"]
    again_text = await agent.episode_text(again)
    assert again_text == texts[first]
    assert len({*texts.values(), other_text}) > 1  # instructions change with the seed
    assert await page(remote, "WOB_DONE_GLOBAL") is False  # the episode runs
    await agent.close()


async def test_rewarder_actions_and_the_time_limit(start_browser: StartBrowser) -> None:
    """``v0.agent.action`` clicks reach the page through X; a timed-out episode pays -1."""
    remote = await start_browser("miniwob.ClickTest-v0")
    agent = await WireClient.open(remote.rewarder.port)
    episode = (await agent.reset(seed=5))["headers"]["episode_id"]
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}") as vnc:
        x, y = await find_button(vnc, remote)
    await agent.send("v0.agent.action", {"action": [list(e) for e in click(x, y)]})
    body = await reward_of(agent, episode)
    assert body["reward"] > 0 and body["done"]

    await page(remote, "core.EPISODE_MAX_TIME = 300")  # the task's own limit, made short
    episode = (await agent.reset(seed=6))["headers"]["episode_id"]
    body = await reward_of(agent, episode)
    assert (body["reward"], body["done"], body["info"]["wob.reason"]) == (-1, True, "timed out")
    await agent.close()


async def test_a_dead_browser_ends_the_episode_and_comes_back(start_browser: StartBrowser) -> None:
    remote = await start_browser("miniwob.ClickTest-v0")
    agent = await WireClient.open(remote.rewarder.port)
    episode = (await agent.reset(seed=1))["headers"]["episode_id"]
    browser = runtime(remote).browser
    assert browser is not None
    os.kill(browser.pid, signal.SIGKILL)
    body = await reward_of(agent, episode)
    assert body["done"] and body["reward"] == 0 and "browser.error" in body["info"]
    # The remote resets by itself; the new episode runs in a new browser.
    text = await agent.recv_until("v0.env.text", episode_id=str(int(episode) + 1))
    assert text["body"]["text"] == "Click the button."
    assert runtime(remote).browser is not None and runtime(remote).browser is not browser
    assert await page(remote, "WOB_DONE_GLOBAL") is False
    await agent.close()


async def test_remote_env_plays_the_page_unchanged(start_browser: StartBrowser) -> None:
    remote = await start_browser("miniwob.ClickTest-v0")
    address = f"vnc://127.0.0.1:{remote.vnc_port}+{remote.rewarder.port}"

    def play() -> tuple[np.ndarray, list[float], list[str]]:
        env = RemoteEnv(address)
        try:
            obs, info = env.reset(seed=11)
            assert info["text"] == ["Click the button."]  # the instruction, from reset()
            assert obs.shape == (210, 160, 3) and obs.dtype == np.uint8
            assert obs in env.observation_space
            rewards: list[float] = []
            texts: list[str] = []
            deadline = time.monotonic() + TIMEOUT
            while not rewards and time.monotonic() < deadline:
                # A click on a stale frame's button lands on empty page: nothing happens.
                centre = button_centre(obs) if shows_task(obs) else None
                action = click(*centre) if centre else []
                obs, reward, terminated, _, info = env.step(action)
                texts += info["text"]
                if terminated:
                    rewards.append(float(reward))
            return obs, rewards, texts
        finally:
            env.close()

    obs, rewards, texts = await asyncio.to_thread(play)
    assert rewards and rewards[0] > 0
    assert "Click the button." in texts
    assert obs.shape == (210, 160, 3)


# Xvnc ------------------------------------------------------------------------------------


async def test_xvnc_passwords_view_only_and_taken_ports() -> None:
    display = XvncDisplay(64, 48, password="secret12", view_only_password="watch123")
    await display.start()
    try:
        assert display.display and display.port
        async with (
            VNCClient(display.address, password="secret12") as full,
            VNCClient(display.address, password="watch123") as viewer,
        ):
                viewer.pointer_event(40, 30)
                await asyncio.sleep(0.2)  # give Xvnc time to (not) apply it
                assert _pointer(display) != (40, 30)
                full.pointer_event(40, 30)
                async with asyncio.timeout(TIMEOUT):
                    while _pointer(display) != (40, 30):
                        await asyncio.sleep(0.02)
        with pytest.raises(AuthenticationFailed):
            await VNCClient(display.address, password="wrong!!!", start_timeout=5).start()
        taken = XvncDisplay(64, 48, port=display.port)
        with pytest.raises(OSError) as excinfo:
            await taken.start()
        assert excinfo.value.errno == errno.EADDRINUSE
        assert taken.process is not None and taken.process.poll() is not None
    finally:
        pids = display.pids()
        await display.aclose()
    assert not [pid for pid in pids if alive(pid)]


def _pointer(display: XvncDisplay) -> tuple[int, int]:
    out = subprocess.run(
        ["xdotool", "getmouselocation", "--shell"], env=display.env, capture_output=True,
        text=True, check=True, timeout=5,
    ).stdout
    values = dict(line.split("=", 1) for line in out.split())
    return int(values["X"]), int(values["Y"])


# Missing programs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "package"),
    [
        ({"PATH": "/nonexistent"}, "tigervnc-standalone-server"),
        ({"UNIVERSE_REMOTE_CHROMIUM": "/nonexistent/chromium"}, "chromium"),
    ],
)
def test_serve_names_the_debian_package_that_is_missing(env: dict[str, str], package: str) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "universe_remote", "serve", "miniwob.ClickTest-v0",
         "--vnc-port", "0", "--rewarder-port", "0"],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=30, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"apt-get install {package}" in result.stderr
    assert time.monotonic() - started < 15

