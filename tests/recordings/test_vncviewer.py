"""A person's play through TigerVNC's vncviewer on Xvfb (keys typed with xdotool) is
recorded with its key events on the frames they applied to."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envserver.recorder import Recorder
from envserver.remote import Remote
from recordings import open_recording
from runtimes.builtin import Catch
from tests.recordings.helpers import rerun
from tests.vncdriver.test_server_peers import TIMEOUT, Viewer
from tests.vncdriver.xserver import XServers, require, xservers_fixture  # noqa: F401  (the fixture)


@pytest.fixture
def viewer(xservers: XServers) -> Viewer:
    """A vncviewer on a fresh Xvfb display, started by the test."""
    require("vncviewer", "xdotool", "xwininfo", "xwd")
    return Viewer(xservers, xservers.xvfb(320, 240))


async def test_vncviewer_keys_are_recorded_on_their_frames(viewer: Viewer, tmp_path: Path) -> None:
    remote = Remote("builtin.Catch-v0")
    recorder = Recorder(tmp_path)
    recorder.attach(remote)
    await remote.start("127.0.0.1", 0, 0)
    try:
        runtime = remote.runtime
        assert isinstance(runtime, Catch)
        await viewer.start(remote.vnc_port)
        await viewer._run("xdotool", "windowfocus", "--sync", viewer.window)
        start_x = runtime.paddle_x
        await viewer._run("xdotool", "keydown", "Right")
        try:
            async with asyncio.timeout(TIMEOUT):
                while runtime.paddle_x < start_x + 9 and runtime.paddle_x < runtime.width - 20:
                    await remote.wait_frame()
        finally:
            await viewer._run("xdotool", "keyup", "Right")
        async with asyncio.timeout(TIMEOUT):
            while remote.held_keys:
                await remote.wait_frame()
        await remote.wait_frame()
    finally:
        await remote.close()
        recorder.close()
    episodes = [e for e in open_recording(tmp_path) if len(e) > 1]
    events = [(s.index, ev) for e in episodes for s in e.steps for ev in s.events]
    keys = [(ev.source.split(":")[0], ev.action()) for _, ev in events]
    assert ("vnc", ["KeyEvent", "Right", True]) in keys and ("vnc", ["KeyEvent", "Right", False]) in keys
    assert all(source == "vnc" for source, _ in keys)
    # Re-run each episode from its seed with the recorded events on their recorded steps:
    # every frame must come out as recorded (one frame late or early and the paddle differs).
    for episode in episodes:
        assert episode.meta["from_reset"] and episode.mode == "realtime"
        assert rerun(episode) == [s.hash for s in episode.steps]
    assert any(s.events for e in episodes for s in e.steps[1:])
