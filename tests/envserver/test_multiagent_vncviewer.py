"""Two people, two TigerVNC viewers, one Duel: each viewer's password names its player,
and the keys typed in each (xdotool on its own Xvfb) move that player's paddle only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runtimes.duel import Duel
from tests.conftest import StartRemote
from tests.vncdriver.test_server_peers import TIMEOUT, Viewer
from tests.vncdriver.test_vencrypt import vnc_password_file
from tests.vncdriver.xserver import XServers, require, xservers_fixture  # noqa: F401  (the fixture)

LEFT_PASSWORD = "left-pw1"
RIGHT_PASSWORD = "right-pw"
#: Pixels a paddle must move for the test to call it moved (3 frames of Up or Down).
MOVED = 9


@pytest.fixture
def viewers(xservers: XServers) -> tuple[Viewer, Viewer]:
    require("vncviewer", "vncpasswd", "xdotool", "xwininfo", "xwd")
    return Viewer(xservers, xservers.xvfb(320, 240)), Viewer(xservers, xservers.xvfb(320, 240))


async def hold(viewer: Viewer, key: str, remote, until) -> None:  # type: ignore[no-untyped-def]
    """Hold ``key`` in ``viewer`` until ``until()``; let go; wait until nothing is held."""
    await viewer._run("xdotool", "windowfocus", "--sync", viewer.window)
    await viewer._run("xdotool", "keydown", key)
    try:
        async with asyncio.timeout(TIMEOUT):
            while not until():
                await remote.wait_frame()
    finally:
        await viewer._run("xdotool", "keyup", key)
    async with asyncio.timeout(TIMEOUT):
        while remote.held_keys:
            await remote.wait_frame()


async def test_two_vncviewers_move_their_own_paddles(
    start_remote: StartRemote, viewers: tuple[Viewer, Viewer], tmp_path: Path
) -> None:
    remote = await start_remote(
        "builtin.Duel-v0", password=LEFT_PASSWORD, player_passwords={1: RIGHT_PASSWORD}
    )
    game = remote.runtime
    assert isinstance(game, Duel)
    left, right = viewers
    (tmp_path / "left").mkdir()
    (tmp_path / "right").mkdir()
    for viewer, password, where in ((left, LEFT_PASSWORD, "left"), (right, RIGHT_PASSWORD, "right")):
        passwd = vnc_password_file(tmp_path / where, password)
        await viewer.start(remote.vnc_port, "-passwd", str(passwd), security="VncAuth")
    assert remote.vnc is not None
    assert sorted(remote.vnc.player_of(i) for i in remote.vnc.connections) == [0, 1]

    start = list(game.paddle_y)
    await hold(right, "Up", remote, lambda: game.paddle_y[1] <= start[1] - MOVED)
    assert game.paddle_y[0] == start[0]  # the right viewer's Up moved player 1 only

    moved = list(game.paddle_y)
    await hold(left, "Down", remote, lambda: game.paddle_y[0] >= moved[0] + MOVED)
    assert game.paddle_y[1] == moved[1]  # the left viewer's Down moved player 0 only
