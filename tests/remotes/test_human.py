"""``render_mode="human"`` (``remotes.human``): a TigerVNC window on an X display (Xvfb
here) that the remote counts as a viewer, or, without a display, one line saying where to
watch. The remote runs in this process on its own thread, so the test can ask its VNC
server who is connected; waits are on the remote's frames, with timeouts."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Final, TypeVar

import gymnasium
import pytest

import remotes
from envserver.remote import Remote
from remotes import RemoteEnv
from remotes.address import RemoteAddress
from remotes.human import VIEWER, Views, password_file, viewer_command
from remotes.zoom_window import MAX_ZOOM, zoom_for

T = TypeVar("T")

#: Seconds a viewer may take to start and connect, or to leave.
VIEWER_TIMEOUT: Final = 30.0


class ThreadedRemote:
    """A remote serving on 127.0.0.1 from an event loop in its own thread."""

    def __init__(self, env_id: str, http_port: int | None, **kwargs: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.remote = Remote(env_id, **kwargs)
        self.run(self.remote.start("127.0.0.1", 0, 0, http_port))

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = VIEWER_TIMEOUT) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    @property
    def address(self) -> str:
        return f"vnc://127.0.0.1:{self.remote.vnc_port}+{self.remote.rewarder.port}"

    def viewers(self) -> int:
        """VNC clients that asked for no frame tags: people's viewers, not agents."""
        assert self.remote.vnc is not None
        return sum(c.kind == "viewer" for c in self.remote.vnc.connections.values())

    def wait_viewers(self, wanted: Callable[[int], bool]) -> int:
        async def wait() -> int:
            async with asyncio.timeout(VIEWER_TIMEOUT):
                while not wanted(count := self.viewers()):
                    await self.remote.wait_frame()  # real time: 60 a second
            return count

        return self.run(wait(), VIEWER_TIMEOUT + 5)

    def close(self) -> None:
        self.run(self.remote.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., ThreadedRemote]]:
    started: list[ThreadedRemote] = []

    def start(
        env_id: str = "builtin.Catch-v0", http_port: int | None = None, **kwargs: Any
    ) -> ThreadedRemote:
        started.append(ThreadedRemote(env_id, http_port, **kwargs))
        return started[-1]

    yield start
    for remote in started:
        remote.close()


@pytest.fixture
def display(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An Xvfb display, as $DISPLAY: Xvfb writes its number to a pipe once it is ready."""
    if shutil.which("Xvfb") is None or shutil.which(VIEWER) is None or shutil.which("xdotool") is None:
        pytest.skip("needs Xvfb, xdotool and TigerVNC's vncviewer (scripts/install-system-packages)")
    read, write = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", "800x600x24", "-nolisten", "tcp"],
        pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.close(write)
    try:
        with os.fdopen(read) as ready:
            number = ready.readline().strip()  # blocks until Xvfb listens
        assert number.isdigit(), "Xvfb did not start"
        monkeypatch.setenv("DISPLAY", f":{number}")
        yield f":{number}"
    finally:
        xvfb.terminate()
        xvfb.wait(10)


def test_a_window_opens_once_connects_as_a_viewer_and_closes_with_the_env(
    serve: Callable[..., ThreadedRemote], display: str
) -> None:
    remote = serve(password="hunter22")
    env = RemoteEnv(remote.address, password="hunter22", render_mode="human")
    try:
        assert remote.viewers() == 0
        assert env.render() is None
        views = env.owned
        assert isinstance(views, Views) and len(views.processes) == 1 and views.printed == []
        assert remote.wait_viewers(lambda n: n >= 1) == 1  # the window, past the password
        env.render()
        assert env.owned is views and len(views.processes) == 1  # opened once
        process = views.processes[0]
        assert "remotes.zoom_window" in process.args
        assert f"127.0.0.1::{remote.remote.vnc_port}" in process.args
        assert not any("hunter22" in arg for arg in process.args)  # in its environment only
        # The 160x210 game opens zoomed (2x on this 800x600 screen; 3x on a laptop's),
        # where TigerVNC showed it at 1x.
        zoom = zoom_for(160, 210, (800, 600))
        assert zoom == 2
        assert window_size(display, f"127.0.0.1:{remote.remote.vnc_port}") == (160 * zoom, 210 * zoom)
        obs, *_ = env.step([])
        assert obs.shape == (210, 160, 3)  # the agent goes on beside the viewer
    finally:
        env.close()
    assert process.poll() is not None
    assert remote.wait_viewers(lambda n: n == 0) == 0


def window_size(display: str, name: str) -> tuple[int, int]:
    """The size of the first visible window whose title has ``name`` (waits for it)."""
    env = {**os.environ, "DISPLAY": display}
    found = subprocess.run(["xdotool", "search", "--sync", "--onlyvisible", "--name", name], env=env,
                           capture_output=True, text=True, timeout=VIEWER_TIMEOUT, check=True)
    geometry = subprocess.run(["xdotool", "getwindowgeometry", found.stdout.split()[0]], env=env,
                              capture_output=True, text=True, timeout=VIEWER_TIMEOUT, check=True)
    width, height = re.search(r"Geometry: (\d+)x(\d+)", geometry.stdout).groups()  # type: ignore[union-attr]
    return int(width), int(height)


def test_small_screens_are_zoomed_to_an_integer_size_that_fits() -> None:
    assert zoom_for(160, 210) == 3  # a game: about 640 px, as on a laptop
    assert zoom_for(160, 210, (800, 600)) == 2  # no taller than 90% of the display
    assert zoom_for(1280, 800) == 1 and zoom_for(1280, 800, (800, 600)) == 1  # never below 1x
    assert zoom_for(40, 30) == MAX_ZOOM
    assert zoom_for(0, 0) == 1


def test_tigervnc_s_window_has_no_f8_notice_over_the_game() -> None:
    """Without Tk the window is TigerVNC's: its menu key is off, so its "Press F8 to open
    the context menu" notice (a third of a 160x210 game for 5 s) is not drawn."""
    command = viewer_command(RemoteAddress("127.0.0.1", 5900, 15900))
    assert "-MenuKey=" in command and "-ViewOnly" in command and command[-1] == "127.0.0.1::5900"


def test_without_a_display_the_browser_viewer_s_address_is_printed_once(
    serve: Callable[..., ThreadedRemote], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    remote = serve(http_port=0)
    assert remote.remote.viewer is not None
    url = f"http://127.0.0.1:{remote.remote.viewer.port}/viewer/"
    env = RemoteEnv(remote.address, render_mode="human")
    try:
        env.render()
        env.render()
        views = env.owned
        assert isinstance(views, Views) and views.processes == []
    finally:
        env.close()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"in a browser: {url}"), lines
    with urllib.request.urlopen(url, timeout=10) as page:  # the page a person opens
        assert page.status == 200


def test_a_remote_without_a_browser_viewer_gets_the_vncviewer_line(
    serve: Callable[..., ThreadedRemote], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    remote = serve()
    env = RemoteEnv(remote.address, render_mode="human")
    try:
        env.render()
    finally:
        env.close()
    (line,) = capsys.readouterr().out.splitlines()
    assert "vncviewer -ViewOnly -Shared" in line and f"127.0.0.1::{remote.remote.vnc_port}" in line
    assert "--http-port" in line


def test_make_opens_the_window_and_close_stops_it_before_the_remote(display: str) -> None:
    env = gymnasium.make("universe-remote/builtin.Catch-v0", render_mode="human")
    views = env.unwrapped.owned
    try:
        assert isinstance(views, Views) and len(views.processes) == 1  # opened by make
        local = views.then
        assert isinstance(local, remotes.LocalRemotes)
        vnc_port = env.unwrapped.remote.name.split(":")[1].split("+")[0]
        assert f"127.0.0.1::{vnc_port}" in views.processes[0].args
        env.reset(seed=0)
        env.step(1)
    finally:
        env.close()
    assert views.processes[0].poll() is not None
    assert all(p.poll() is not None for p in local.processes)


def test_make_vec_prints_each_remote_s_browser_viewer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """make_vec's remotes are served with a browser viewer, for a machine without a window."""
    monkeypatch.delenv("DISPLAY", raising=False)
    envs = gymnasium.make_vec("universe-remote/builtin.Catch-v0", num_envs=2, render_mode="human")
    try:
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 2 and all("/viewer/" in line for line in lines), lines
        assert envs.render() is None and capsys.readouterr().out == ""
    finally:
        envs.close()


def test_the_password_file_is_tigervnc_s() -> None:
    if shutil.which("vncpasswd") is None:
        pytest.skip("needs TigerVNC's vncpasswd (scripts/install-system-packages)")
    for password in ("hunter22", "pw", "longer-than-eight"):
        made = subprocess.run(["vncpasswd", "-f"], input=f"{password}\n".encode(), capture_output=True,
                              check=True, timeout=10).stdout
        assert password_file(password) == made


def test_other_render_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="'rgb_array' or 'human'"):
        RemoteEnv("vnc://127.0.0.1:1+2", render_mode="ansi")
    with pytest.raises(ValueError, match="'rgb_array' or 'human'"):
        remotes.RemoteVectorEnv("vnc://127.0.0.1:1+2", render_mode="ansi")
