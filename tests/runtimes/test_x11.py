"""Any X program on real TigerVNC Xvnc, served by a real remote: ``x11.<Program>-v0``.

The programs are x11-apps' (xlogo, xeyes, ...; scripts/install-system-packages installs
them). Our VNC client reads the program's pixels from Xvnc; rewards and episode ends come
over the rewarder. Every test checks that no Xvnc or X program outlives its remote.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from envserver.remote import Remote
from runtimes import registry
from tests.conftest import StartRemote
from tests.runtimes.display import alive, display_remotes
from tests.wire import WireClient
from vncdriver.client import VNCClient

try:
    from runtimes.x11 import (
        COMMAND_ENV,
        KEYS,
        PROGRAMS,
        CommandMissing,
        X11Command,
        X11Runtime,
    )
except ModuleNotFoundError as exc:  # Xvnc is not installed
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 10.0
WHITE, BLACK, RED = (255, 255, 255), (0, 0, 0), (255, 0, 0)

StartX11 = Callable[..., Awaitable[Remote]]


@pytest.fixture(autouse=True)
def _x11_family_installed() -> None:
    """Skip each test (conftest fails the skip in CI) when the family cannot load."""
    if MISSING is not None:
        pytest.skip(MISSING)
    if shutil.which("xlogo") is None:
        pytest.skip("xlogo is not installed: apt-get install x11-apps")


@pytest.fixture
async def start_x11(start_remote: StartRemote) -> AsyncIterator[StartX11]:
    """``await start_x11(env_id)``: a remote serving an X program on ports 0.

    At teardown the remotes are closed and every Xvnc and X program they ran must be gone.
    """
    async with display_remotes(start_remote, X11Runtime, "x11.XLogo-v0", "X program") as start:
        yield start


def runtime(remote: Remote) -> X11Runtime:
    assert isinstance(remote.runtime, X11Runtime)
    return remote.runtime


def program_pid(remote: Remote) -> int:
    program = runtime(remote).program
    assert program is not None and program.running
    return program.pid


def colour_share(frame: np.ndarray, colour: tuple[int, int, int]) -> float:
    return float((frame == colour).all(axis=2).mean())


async def wait_frame(vnc: VNCClient, shows: Callable[[np.ndarray], bool]) -> np.ndarray:
    """The first VNC frame for which ``shows(frame)`` holds (each update is looked at)."""
    async with asyncio.timeout(TIMEOUT):
        while not shows(frame := vnc.frame()):
            try:
                await vnc.wait_update(timeout=0.5)
            except TimeoutError:
                pass
    return frame


def xlogo_on_screen(frame: np.ndarray) -> bool:
    """xlogo fills the screen: a white window with the black X logo on it."""
    return colour_share(frame, WHITE) > 0.5 and colour_share(frame, BLACK) > 0.05


async def episode_end(agent: WireClient) -> dict[str, Any]:
    """The next ``v0.env.reward`` that ends an episode (x11 rewards are always 0)."""
    while True:
        message = await agent.recv_until("v0.env.reward")
        assert message["body"]["reward"] == 0
        if message["body"]["done"]:
            return message


# The family -------------------------------------------------------------------------------


def test_installed_programs_and_the_command_are_envs() -> None:
    ids = {env_id for env_id in registry.env_ids() if env_id.startswith("x11.")}
    expected = {f"x11.{name}-v0" for name, argv in PROGRAMS.items() if shutil.which(argv[0])}
    assert ids == expected | {"x11.Command-v0"}
    assert {"x11.XLogo-v0", "x11.XEyes-v0", "x11.XClock-v0"} <= ids  # x11-apps
    cls = registry.lookup("x11.XLogo-v0")
    assert isinstance(cls, type) and issubclass(cls, X11Runtime)
    assert cls.any_vnc_key and not cls.lockstep  # a desktop: viewers type any key
    assert (cls.width, cls.height, cls.buttons) == (1024, 768, 7) and cls.display_size == (1024, 768)
    assert cls.describe()["x11.program"] == "xlogo"
    common = {"a", "Z", "0", "9", "Left", "Right", "Up", "Down", "Return", "space",
              "BackSpace", "Escape", "Tab", "Shift_L", "Control_L", "Alt_L"}
    assert common <= set(KEYS)
    assert registry.lookup("x11.Command-v0") is X11Command


def test_lockstep_is_refused() -> None:
    with pytest.raises(ValueError, match="only in real time"):
        Remote("x11.XLogo-v0", mode="lockstep")


# Seeing the program -----------------------------------------------------------------------


async def test_vnc_shows_the_program_and_reset_restarts_it(start_x11: StartX11) -> None:
    remote = await start_x11("x11.XLogo-v0")
    assert remote.vnc.port == remote.vnc_port  # the remote serves the display itself
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}") as vnc:
        assert (vnc.width, vnc.height) == (1024, 768)
        await wait_frame(vnc, xlogo_on_screen)
        first = program_pid(remote)
        agent = await WireClient.open(remote.rewarder.port)
        reply = await agent.reset(seed=7)  # the seed is ignored; the program restarts
        assert reply["method"] == "v0.reply.env.reset"
        second = program_pid(remote)
        assert second != first and not alive(first)
        await wait_frame(vnc, xlogo_on_screen)
        await agent.close()


async def test_rewarder_actions_reach_x(start_x11: StartX11) -> None:
    if shutil.which("xdotool") is None:
        pytest.skip("xdotool is not installed: apt-get install xdotool")
    remote = await start_x11("x11.XEyes-v0" if shutil.which("xeyes") else "x11.XLogo-v0")
    agent = await WireClient.open(remote.rewarder.port)
    await agent.send("v0.agent.action", {"action": [["PointerEvent", 321, 234, 0]]})
    async with asyncio.timeout(TIMEOUT):
        while _pointer(runtime(remote)) != (321, 234):
            await remote.wait_frame()  # one frame later the event has been sent to Xvnc
    # A desktop takes every X key (F35 is not among the common KEYS); a name that is no
    # keysym is refused, and is the first error the agent hears.
    await agent.send("v0.agent.action", {"action": [["KeyEvent", "F35", True], ["KeyEvent", "F35", False]]})
    await agent.send("v0.agent.action", {"action": [["KeyEvent", "NoSuchKey", True]]})
    error = await agent.recv_until("v0.reply.error")
    assert "NoSuchKey" in error["body"]["message"], error
    await agent.close()


async def test_real_time_input_reaches_x_as_it_arrives_not_at_the_next_frame(
    start_x11: StartX11,
) -> None:
    """At 1 frame a second, a viewer's pointer move is in X long before the next frame:
    the remote forwards an X program's input as it comes (``Runtime.forwards_input``)."""
    if shutil.which("xdotool") is None:
        pytest.skip("xdotool is not installed: apt-get install xdotool")
    remote = await start_x11("x11.XLogo-v0", fps=1)
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}", encoding="raw") as viewer:
        before_any_frame = 0
        for x, y in ((101, 202), (303, 404), (505, 606)):
            frame = remote.frame
            viewer.pointer_event(x, y, 0)
            async with asyncio.timeout(TIMEOUT):
                while _pointer(runtime(remote)) != (x, y):
                    await asyncio.sleep(0.01)  # polling X for a condition, under a timeout
            before_any_frame += remote.frame == frame
        # Forwarded: in X within milliseconds, so a frame (1 s apart) rarely falls between;
        # at the next frame, as before, none would be in X before a frame.
        assert before_any_frame >= 2


def _pointer(rt: X11Runtime) -> tuple[int, int]:
    assert rt.display is not None
    out = subprocess.run(
        ["xdotool", "getmouselocation", "--shell"], env=rt.display.env, capture_output=True,
        text=True, check=True, timeout=5,
    ).stdout
    values = dict(line.split("=", 1) for line in out.split())
    return int(values["X"]), int(values["Y"])


# Any command ------------------------------------------------------------------------------


async def test_command_runs_the_program_in_the_variable(
    start_x11: StartX11, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(COMMAND_ENV, "xlogo -fg red -geometry 400x300+0+0")
    remote = await start_x11("x11.Command-v0")
    assert runtime(remote).argv == ("xlogo", "-fg", "red", "-geometry", "400x300+0+0")
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}") as vnc:
        frame = await wait_frame(vnc, lambda f: colour_share(f[:300, :400], RED) > 0.05)
    assert colour_share(frame[:300, :400], WHITE) > 0.3  # its window, at the top left
    assert colour_share(frame[310:, 410:], BLACK) > 0.99  # Xvnc's bare root elsewhere


def test_command_unset_or_missing_is_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COMMAND_ENV, raising=False)
    with pytest.raises(CommandMissing, match=f"{COMMAND_ENV}, which is not set"):
        registry.make("x11.Command-v0")
    monkeypatch.setenv(COMMAND_ENV, "no-such-x-program --flag")
    with pytest.raises(CommandMissing, match="'no-such-x-program', which is not an executable"):
        registry.make("x11.Command-v0")
    monkeypatch.setenv(COMMAND_ENV, "xlogo 'unbalanced")
    with pytest.raises(CommandMissing, match="not a valid command"):
        registry.make("x11.Command-v0")


def test_serve_without_the_command_says_what_to_set() -> None:
    env = {k: v for k, v in os.environ.items() if k != COMMAND_ENV}
    result = subprocess.run(
        [sys.executable, "-m", "universe_remote", "serve", "x11.Command-v0",
         "--vnc-port", "0", "--rewarder-port", "0"],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"${COMMAND_ENV}, which is not set" in result.stderr
    assert "universe-remote serve x11.Command-v0" in result.stderr  # an example to copy


# The program exits ------------------------------------------------------------------------


async def test_a_killed_program_ends_the_episode_and_restarts(start_x11: StartX11) -> None:
    remote = await start_x11("x11.XLogo-v0")
    agent = await WireClient.open(remote.rewarder.port)
    episode = (await agent.reset())["headers"]["episode_id"]
    killed = program_pid(remote)
    os.kill(killed, signal.SIGKILL)
    message = await episode_end(agent)
    assert message["headers"]["episode_id"] == episode
    assert message["body"]["info"]["x11.exit_code"] == -signal.SIGKILL
    await remote.wait_frame()  # the remote reset before drawing this frame
    assert remote.episode_id == int(episode) + 1
    assert program_pid(remote) != killed
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}") as vnc:
        await wait_frame(vnc, xlogo_on_screen)
    await agent.close()


async def test_the_exit_code_of_a_command(
    start_x11: StartX11, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sh -c 'xlogo; exit 3'``: when xlogo goes, the shell exits 3, and the episode ends."""
    monkeypatch.setenv(COMMAND_ENV, "sh -c 'xlogo; exit 3'")
    remote = await start_x11("x11.Command-v0")
    agent = await WireClient.open(remote.rewarder.port)
    episode = (await agent.reset())["headers"]["episode_id"]
    rt = runtime(remote)
    shell = program_pid(remote)
    async with asyncio.timeout(TIMEOUT):  # the shell forks xlogo as it starts
        while not (xlogo := [pid for pid in rt.pids() if _comm(pid) == "xlogo"]):
            await remote.wait_frame()
    os.kill(xlogo[0], signal.SIGTERM)
    message = await episode_end(agent)
    assert message["headers"]["episode_id"] == episode
    assert message["body"]["info"]["x11.exit_code"] == 3
    await remote.wait_frame()
    assert program_pid(remote) != shell
    await agent.close()


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


async def test_a_program_that_keeps_exiting_does_not_spin(
    start_x11: StartX11, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(COMMAND_ENV, "sh -c 'exit 3'")
    remote = await start_x11("x11.Command-v0")
    agent = await WireClient.open(remote.rewarder.port, observer=True)
    for _ in range(3):
        message = await episode_end(agent)
        assert message["body"]["info"]["x11.exit_code"] == 3
    # Restarts pause 0, 0.25, 0.5, 1 s...: a handful of episodes, not one per frame.
    assert remote.episode_id <= 6
    await agent.close()


def test_screen_option_sizes_the_runtime_and_bad_sizes_say_what_to_write() -> None:
    runtime = X11Command.__new__(X11Command, screen="1280x800")
    assert (runtime.width, runtime.height, runtime.display_size) == (1280, 800, (1280, 800))
    assert type(runtime).__new__(type(runtime), screen="1024x768").__class__ is X11Command
    from runtimes.x11 import parse_screen

    for bad, said in (("big", "WIDTHxHEIGHT"), ("100x100", "not within 320x240 to 3840x2160"),
                      ("8000x600", "not within")):
        with pytest.raises(ValueError, match=said):
            parse_screen(bad)
