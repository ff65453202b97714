"""An X program remote served by the remote itself (issue 3), recorded while a person
plays it in TigerVNC's viewer: ``x11.XEyes-v0`` behind a VNC password, the mouse moved
with xdotool in the viewer's window, and the recording holds those moves as the
viewer's pointer events (``vnc:N``) and frames whose eyes follow them. Real Xvnc, real
xeyes, real TigerVNC ``vncviewer`` on Xvfb.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Final

import numpy as np
import pytest

from envserver.recorder import Recorder
from envserver.remote import Remote
from recordings import open_recording
from recordings.format import frame_hash
from runtimes.xruntime import DisplayRuntime
from tests.runtimes.display import alive
from tests.vncdriver.test_server_peers import Viewer
from tests.vncdriver.test_vencrypt import vnc_password_file
from tests.vncdriver.xserver import XServers, require, xservers_fixture  # noqa: F401

try:
    from runtimes.x11 import X11Runtime
except ModuleNotFoundError as exc:  # Xvnc is not installed
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = pytest.mark.timeout(90)

#: Seconds any one wait may take (a loaded 2-core machine).
TIMEOUT: Final = 20.0
#: VNC Authentication uses the first 8 characters of a password.
PASSWORD: Final = "eyes-pw1"
#: Where the mouse goes, in the viewer's window (= on the remote's 1024x768 screen): on
#: the black around the eyes, far right, far left, far right again, so the cursor never
#: sits on an eye. (xeyes starts looking left: the first move is one it must follow.)
MOVES: Final = (("right", 1010, 384), ("left", 12, 384), ("right", 1010, 420))
#: Pixels the pupils' centre must sit left or right of its eye's centre to count as
#: looking that way (xeyes puts them ~90 px off centre at the screen's edges).
LOOKING: Final = 40.0
#: Around the pointer, pixels X's cursor may cover (left, top, right, bottom offsets):
#: left out when finding the eyes, as Xvnc draws the cursor into the frames.
CURSOR_BOX: Final = (-16, -16, 24, 24)


@pytest.fixture(autouse=True)
def _x11_family_installed() -> None:
    """Skip each test (conftest fails the skip in CI) when the family cannot load."""
    if MISSING is not None:
        pytest.skip(MISSING)
    if shutil.which("xeyes") is None:
        pytest.skip("xeyes is not installed: apt-get install x11-apps")


@pytest.fixture
def viewer(xservers: XServers) -> Viewer:
    """A TigerVNC vncviewer on a fresh Xvfb display with room for a 1024x768 window."""
    require("vncviewer", "vncpasswd", "xdotool", "xwininfo", "xwd")
    return Viewer(xservers, xservers.xvfb(1100, 820))


def pupils(frame: np.ndarray, pointer: tuple[int, int] | None = None) -> list[float]:
    """For each eye (the left and right halves of the screen), how far its pupil's centre
    sits right of the eye's centre, in pixels (negative: left). The pupil is the black
    inside the eye's white, row by row; the cursor's box around ``pointer`` is left out."""
    white = np.all(frame > 200, axis=2)
    black = np.all(frame < 60, axis=2)
    if pointer is not None:
        x, y = pointer
        left, top, right, bottom = CURSOR_BOX
        ys = slice(max(y + top, 0), max(y + bottom, 0))
        xs = slice(max(x + left, 0), max(x + right, 0))
        white[ys, xs] = black[ys, xs] = False
    offsets = []
    half = frame.shape[1] // 2
    for start in (0, half):
        w, b = white[:, start : start + half], black[:, start : start + half]
        rows = w.any(axis=1)
        first = np.where(rows, w.argmax(axis=1), half)
        last = np.where(rows, half - 1 - w[:, ::-1].argmax(axis=1), -1)
        columns = np.arange(half)[None, :]
        inside = b & (columns > first[:, None]) & (columns < last[:, None])
        assert inside.sum() > 100 and w.sum() > 10_000, "no eye with a pupil on this frame"
        offsets.append(float(np.nonzero(inside)[1].mean() - np.nonzero(w | inside)[1].mean()))
    return offsets


def looks(frame: np.ndarray, way: str, pointer: tuple[int, int] | None = None) -> bool:
    """Both pupils are off their eyes' centres toward ``way`` ("left" or "right")."""
    sign = -1 if way == "left" else 1
    return all(sign * offset > LOOKING for offset in pupils(frame, pointer))


async def test_tigervnc_mouse_moves_are_recorded_and_the_eyes_follow(
    viewer: Viewer, tmp_path: Path
) -> None:
    remote = Remote("x11.XEyes-v0", password=PASSWORD)
    recorder = Recorder(tmp_path / "rec")
    recorder.attach(remote)
    await remote.start("127.0.0.1", 0, 0)
    runtime = remote.runtime
    assert isinstance(runtime, X11Runtime)
    pids = runtime.pids()
    live: list[tuple[str, int, str]] = []  # (way, frame number, hash) the remote served
    try:
        assert runtime.display is not None and remote.vnc_port is not None
        passwd = vnc_password_file(tmp_path, PASSWORD)
        await viewer.start(remote.vnc_port, "-passwd", str(passwd), security="VncAuth")
        assert viewer.geometry[2:] == (1024, 768)
        ((client_id, connection),) = remote.vnc.connections.items()
        assert connection.kind == "viewer"
        await wake(viewer, remote)
        for way, x, y in MOVES:
            await viewer._run("xdotool", "mousemove", "--window", viewer.window, str(x), str(y))
            async with asyncio.timeout(TIMEOUT):  # the viewer's event went into X
                while await x_pointer(runtime) != (x, y):
                    await remote.wait_frame()
                while not looks(runtime.framebuffer, way, (x, y)):  # xeyes redrew
                    await remote.wait_frame()
            live.append((way, remote.frame, frame_hash(runtime.framebuffer)))
    finally:
        await remote.close()
        recorder.close()
    assert not [pid for pid in pids if alive(pid)], "Xvnc/xeyes left running"

    (episode,) = [e for e in open_recording(tmp_path / "rec") if len(e) > 1]
    assert episode.env_id == "x11.XEyes-v0" and episode.mode == "realtime"
    events = [(step, e) for step in episode.steps for e in step.events]
    assert events and {e.source for _, e in events} == {f"vnc:{client_id}"}
    assert {e.kind for _, e in events} == {"PointerEvent"}
    moved_to = [e.args[:2] for _, e in events]
    assert [(x, y) for _, x, y in MOVES if (x, y) in moved_to] == [(x, y) for _, x, y in MOVES]

    # The recorded frames: as served, and the eyes look where the mouse went.
    frames = dict(zip((s.frame for s in episode.steps), episode.frames(), strict=True))
    steps = {s.frame: s for s in episode.steps}
    for (way, number, served), (_, x, y) in zip(live, MOVES, strict=True):
        assert steps[number].hash == served, f"frame {number} was not recorded as served"
        assert looks(frames[number], way, (x, y)), f"frame {number}: pupils at {pupils(frames[number])}"
    # Before the mouse moved the eyes did not look right: the first move changed them.
    first = episode.steps[0].frame
    assert not looks(frames[first], "right"), f"first frame: pupils at {pupils(frames[first])}"
    # Each move is recorded before the frame that shows it.
    for (way, number, _), (_, x, y) in zip(live, MOVES, strict=True):
        applied = next(s.frame for s, e in events if e.args[:2] == (x, y))
        assert applied <= number, f"the move {way} to ({x}, {y}) came after frame {number}"


async def wake(viewer: Viewer, remote: Remote) -> None:
    """Focus the viewer and move its pointer by a pixel, until the remote's X pointer is
    where the viewer's is. (Measured: TigerVNC on Xvfb sends no pointer event for
    xdotool's absolute moves until one relative move has reached it; then every move.)"""
    assert isinstance(remote.runtime, X11Runtime)
    await viewer._run("xdotool", "windowfocus", "--sync", viewer.window)
    await viewer._run("xdotool", "mousemove_relative", "--", "1", "0")
    out = (await viewer._run("xdotool", "getmouselocation", "--shell")).decode()
    values = dict(line.split("=", 1) for line in out.split())
    x0, y0 = viewer.geometry[:2]
    there = (int(values["X"]) - x0, int(values["Y"]) - y0)
    async with asyncio.timeout(TIMEOUT):
        while await x_pointer(remote.runtime) != there:
            await remote.wait_frame()


async def x_pointer(runtime: DisplayRuntime) -> tuple[int, int]:
    """Where X's pointer is on a runtime's display (xdotool asks the X server)."""
    assert runtime.display is not None
    process = await asyncio.create_subprocess_exec(
        "xdotool", "getmouselocation", "--shell", env=runtime.display.env,
        stdout=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(TIMEOUT):
        out, _ = await process.communicate()
    assert process.returncode == 0, "xdotool getmouselocation failed"
    values = dict(line.split("=", 1) for line in out.decode().split())
    return int(values["X"]), int(values["Y"])
