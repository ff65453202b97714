"""People in the browser viewer (issue 29, item 8): a page opened with the control
password (``serve --control-password``) or a player's password of a multi-player remote
plays, and ``--record`` records what it sends; the full password stays view only; and
the screen is scaled sharp (a whole multiple, nearest neighbour) with a smooth option.

Real peers: the remote, noVNC in a headed Chromium on Xvfb, X input by xdotool.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import aiohttp
import numpy as np

from envserver.recorder import Recorder
from envserver.remote import Remote
from envserver.viewer_auth import CONTROL, PLAY, VIEW, ViewerAuth
from recordings import open_recording
from tests.envserver.test_viewer import (  # noqa: F401 (fixtures)
    PASSWORD,
    Chromium,
    StartRemote,
    _press_keys_in_page,
    browser,
    canvas_origin,
    needs_novnc,
    start_remote,
    wait_for_image,
    wait_until,
    xvfb,
)
from tests.vncdriver.xserver import XDisplay, XServers

#: The password that plays (serve --control-password).
CONTROL_PASSWORD: Final = "ctl-pw"
ROOT: Final = Path(__file__).resolve().parents[2]


def spy_on_players(remote: Remote) -> list[tuple[int, Any]]:
    """(player, event) of every input event the remote's VNC server hands it from now on."""
    seen: list[tuple[int, Any]] = []
    assert remote.vnc is not None
    server, original = remote.vnc, remote.vnc.on_input

    def on_input(client_id: int, events: Any) -> None:
        seen.extend((server.player_of(client_id), e) for e in events)
        original(client_id, events)

    server.on_input = on_input
    return seen


def page_url(remote: Remote, password: str, query: str = "") -> str:
    assert remote.viewer is not None
    return f"http://127.0.0.1:{remote.viewer.port}/viewer/?password={password}{query}"


async def connected(page: Chromium) -> None:
    await wait_until(lambda: page.evaluate("window.viewer && window.viewer.state === 'connected'"),
                     "noVNC to connect")


def test_the_control_and_player_passwords_have_roles_of_their_own() -> None:
    auth = ViewerAuth(PASSWORD, "watch-pw")
    auth.allow_control(CONTROL_PASSWORD, {0: PASSWORD, 1: "right-pw"})
    assert auth.player_passwords == {1: "right-pw"}  # player 0's is --password
    for given, role in ((PASSWORD, CONTROL), ("watch-pw", VIEW), (CONTROL_PASSWORD, PLAY),
                        ("right-pw", "player-1"), ("nope", None)):
        request = type("R", (), {"headers": {}, "query": {"password": given}})()
        assert auth._password_role(request) == role  # type: ignore[arg-type]
    for role in (PLAY, "player-1"):
        assert auth.token_role(auth.token(role)) == role
    assert auth.token_role(auth.token("player-x")) is None


@needs_novnc
async def test_a_page_opened_with_the_control_password_plays_and_is_recorded(
    tmp_path: Path, browser: Callable[[str], Awaitable[Chromium]],  # noqa: F811
    xvfb: tuple[XServers, XDisplay],  # noqa: F811
) -> None:
    xs, display = xvfb
    remote = Remote("builtin.Catch-v0", password=PASSWORD)
    recorder = Recorder(tmp_path / "demos")
    recorder.attach(remote)
    await remote.start("127.0.0.1", 0, 0, http_port=0)
    try:
        assert remote.viewer is not None
        remote.viewer.allow_control(CONTROL_PASSWORD)
        seen = spy_on_players(remote)
        page = await browser(page_url(remote, CONTROL_PASSWORD))
        await connected(page)
        assert await page.evaluate("window.viewer.rfb.viewOnly") is False
        assert "you play" in await page.evaluate("window.viewer.detail")
        await _press_keys_in_page(page, xs, display, remote, "#screen canvas")
        assert any(getattr(e, "key", None) == 0xFF51 and e.down for _, e in seen), seen
        assert {player for player, _ in seen} == {0}
    finally:
        await remote.close()
        recorder.close()
    sources = {ev.source for e in open_recording(tmp_path / "demos") for s in e.steps for ev in s.events}
    assert any(s.startswith("viewer:") for s in sources), sources


@needs_novnc
async def test_the_full_password_stays_view_only_beside_a_control_password(
    start_remote: StartRemote, browser: Callable[[str], Awaitable[Chromium]],  # noqa: F811
) -> None:
    remote = await start_remote(password=PASSWORD, http_port=0)
    assert remote.viewer is not None
    remote.viewer.allow_control(CONTROL_PASSWORD)
    page = await browser(page_url(remote, PASSWORD))
    await connected(page)
    assert await page.evaluate("window.viewer.rfb.viewOnly") is True
    assert "view only" in await page.evaluate("window.viewer.detail")


@needs_novnc
async def test_a_duel_players_password_plays_that_player(
    start_remote: StartRemote, browser: Callable[[str], Awaitable[Chromium]],  # noqa: F811
    xvfb: tuple[XServers, XDisplay],  # noqa: F811
) -> None:
    xs, display = xvfb
    remote = await start_remote("builtin.Duel-v0", password=PASSWORD,
                                player_passwords={1: "right-pw"}, http_port=0)
    seen = spy_on_players(remote)
    page = await browser(page_url(remote, "right-pw"))
    await connected(page)
    assert await page.evaluate("window.viewer.session.player") == 1
    await _press_keys_in_page(page, xs, display, remote, "#screen canvas")
    assert seen and {player for player, _ in seen} == {1}, seen


@needs_novnc
async def test_sharp_scaling_shows_each_pixel_as_a_square_and_smooth_fits_the_window(
    start_remote: StartRemote, browser: Callable[[str], Awaitable[Chromium]],  # noqa: F811
    xvfb: tuple[XServers, XDisplay],  # noqa: F811
) -> None:
    xs, display = xvfb
    remote = await start_remote(mode="lockstep", password=PASSWORD, http_port=0)  # a still frame
    page = await browser(page_url(remote, PASSWORD, "&quality=lossless"))
    await connected(page)
    # Catch is 160x210 in an 800x600 window: twice its size fits, three times does not.
    await wait_until(lambda: page.evaluate("window.viewer.factor === 2"), "the sharp factor")
    width = "document.querySelector('#screen canvas').getBoundingClientRect().width"
    await wait_until(lambda: page.evaluate(f"{width} === 320"), "the screen at twice its size")
    rendering = "getComputedStyle(document.querySelector('#screen canvas')).imageRendering"
    assert await page.evaluate(rendering) == "pixelated"
    frame = remote.runtime.framebuffer.copy()
    assert frame.std() > 0
    doubled = np.repeat(np.repeat(frame, 2, axis=0), 2, axis=1)  # nearest neighbour, exactly
    await wait_for_image(xs, display, doubled, await canvas_origin(page, "#screen canvas"))
    await page.evaluate("document.getElementById('scale').click(); true")  # -> smooth
    await wait_until(lambda: page.evaluate(f"{width} > 320"), "the screen to fill the window")
    assert await page.evaluate(rendering) != "pixelated"
    assert await page.evaluate("window.viewer.scale") == "smooth"


async def test_serve_control_password_opens_the_viewer_with_input() -> None:
    serve = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0", "--vnc-port", "0",
         "--rewarder-port", "0", "--password", PASSWORD, "--http-port", "0",
         "--control-password", CONTROL_PASSWORD],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert serve.stdout is not None
        banner = ""
        for line in serve.stdout:
            banner += line
            if "Ctrl-C to stop" in line:
                break
        match = re.search(r"viewer\s+(http://127\.0\.0\.1:\d+/viewer/)\s+\((.*)\)", banner)
        assert match is not None, banner
        assert "--control-password" in match[2]
        async with aiohttp.ClientSession() as http:
            for password, view_only in ((CONTROL_PASSWORD, False), (PASSWORD, True)):
                async with http.get(f"{match[1]}session", params={"password": password}) as r:
                    body = await r.json()
                assert body["view_only"] is view_only
    finally:
        serve.terminate()
        serve.communicate(timeout=60)
    refused = subprocess.run(
        [sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0",
         "--control-password", CONTROL_PASSWORD], cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert refused.returncode == 2 and "add --http-port" in refused.stderr
