"""MiniWoB remotes served by the remote itself (issue 3): what the remote's own VNC
server brings a browser task, on real Chromium, real Xvnc and real TigerVNC.

Recorded while an agent plays and replayed frame for frame; served over TLS to TigerVNC's
``vncviewer`` whose click reaches the page; twenty resets in a row on three tasks, each
returning the new page, and a click on the first step after a reset that lands, five of
five; dm_env_rpc and the browser viewer serving the 160x210 task. The tests learn what
the page is through CDP (a screenshot, where a button is), never act through it: every
click goes through VNC, the rewarder or dm_env_rpc into X. Every test checks that no
Xvnc or Chromium process outlives its remote.
"""

from __future__ import annotations

import asyncio
import base64
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import numpy as np
import pytest
from PIL import Image

from envserver.recorder import Recorder
from envserver.remote import Remote
from recordings import Episode, open_recording
from recordings.format import DONE, frame_hash
from remotes.env import RemoteEnv
from rewarder.client import RewarderClient
from rewarder.tls import client_context
from runtimes.base import StepResult
from runtimes.replay import replay_runtime
from tests.envserver.test_viewer import RFBOverWebSocket, basic, session_websocket
from tests.runtimes.display import alive
from tests.runtimes.test_x11_remote import x_pointer
from tests.tls import Certs, certs_fixture  # noqa: F401  (the fixture)
from tests.vncdriver.test_server_peers import Viewer
from tests.vncdriver.test_vencrypt import vnc_password_file
from tests.vncdriver.xserver import XServers, require, xservers_fixture  # noqa: F401
from tests.wire import WireClient
from vncdriver.client import VNCClient

try:
    from runtimes.browser import SETTLE_TIMEOUT, TASK_AREA, MiniWoBRuntime
except ModuleNotFoundError as exc:  # miniwob, Xvnc or Chromium is not installed
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = pytest.mark.timeout(120)

#: Seconds any one wait may take (a loaded 2-core machine).
TIMEOUT: Final = 20.0
PASSWORD: Final = "s3cret-pw"
#: The instruction bar's yellow, at a pixel right of its text (the START cover is black).
QUERY_COLOUR: Final = (255, 255, 0)
#: Consecutive resets each reset test makes, and the tasks they make them on: each lays
#: out its page from the seed (click-test-2 and click-button place their buttons,
#: enter-text its field and its word).
RESETS: Final = 20
RESET_TASKS: Final = ("miniwob.ClickTest2-v0", "miniwob.ClickButton-v0", "miniwob.EnterText-v0")
#: Resets of the twenty that may take the runtime's settle timeout or more. The new
#: page is drawn and on the display in tens of milliseconds; a reset that waits out the
#: timeout missed the page's arrival (or the machine stalled: two are allowed for that).
MAX_TIMED_OUT_RESETS: Final = 2
#: Frames to wait after input for its effect on the display to reach the frames (the
#: display sends what changed within a frame or two of it).
FRAMES_AFTER_INPUT: Final = 6
#: Episodes in the first-step test: the issue saw 4 of 5 first clicks miss.
FIRST_CLICKS: Final = 5

#: Where X's cursor may cover the frame around the pointer (x, y): left, top, right,
#: bottom offsets. Measured: the arrow covers x-2..x+12, y-2..y+18, the text I-beam
#: x-4..x+3, y-9..y+10; a few pixels more each way here for the other shapes. Xvnc
#: draws the cursor into the frames the runtime reads
#: (``test_the_frames_show_the_page_not_the_x_cursor``); the other tests look past it,
#: each at what it is about.
CURSOR_BOX: Final = (-8, -12, 16, 22)

StartMiniWoB = Callable[..., Awaitable[Remote]]


@pytest.fixture(autouse=True)
def _browser_family_installed() -> None:
    """Skip each test (conftest fails the skip in CI) when the family cannot load."""
    if MISSING is not None:
        pytest.skip(MISSING)


@pytest.fixture
async def start_miniwob() -> AsyncIterator[StartMiniWoB]:
    """``await start_miniwob(env_id, recorder=, http_port=, dm_env_rpc_port=, **kwargs)``:
    a started MiniWoB remote on free ports, recording with ``recorder`` if given (attached
    before the first episode, as ``serve --record`` does).

    At teardown the remotes and recorders are closed (again, if the test did), and every
    Xvnc and Chromium process the remotes ran must be gone.
    """
    started: list[tuple[Remote, Recorder | None]] = []
    pids: set[int] = set()

    async def start(
        env_id: str = "miniwob.ClickTest-v0", *, recorder: Recorder | None = None,
        http_port: int | None = None, dm_env_rpc_port: int | None = None, **kwargs: Any,
    ) -> Remote:
        remote = Remote(env_id, **kwargs)
        if recorder is not None:
            recorder.attach(remote)
        started.append((remote, recorder))
        await remote.start("127.0.0.1", 0, 0, http_port=http_port,
                           dm_env_rpc_port=dm_env_rpc_port)
        pids.update(runtime(remote).pids())
        return remote

    yield start
    for remote, recorder in started:
        pids.update(runtime(remote).pids())
        await remote.close()
        if recorder is not None:
            recorder.close()
    assert pids and not [pid for pid in pids if alive(pid)], "Xvnc/Chromium left running"


def runtime(remote: Remote) -> MiniWoBRuntime:
    assert isinstance(remote.runtime, MiniWoBRuntime)
    return remote.runtime


async def screenshot(remote: Remote) -> np.ndarray:
    """What the page shows now in the task area, drawn afresh by Chromium for CDP
    (``Page.captureScreenshot``, lossless): the truth a served frame is held to."""
    cdp = runtime(remote).cdp
    assert cdp is not None
    x, y, width, height = TASK_AREA
    result = await cdp.call("Page.captureScreenshot", {
        "format": "png", "clip": {"x": x, "y": y, "width": width, "height": height, "scale": 1},
    })
    with Image.open(io.BytesIO(base64.b64decode(result["data"]))) as image:
        return np.asarray(image.convert("RGB"))


async def centre_of(remote: Remote, selector: str) -> tuple[int, int]:
    """The centre of the element ``selector`` in the served area, as the page lays it out."""
    cdp = runtime(remote).cdp
    assert cdp is not None
    found = await cdp.evaluate(
        f"""(() => {{
            const r = document.querySelector({selector!r}).getBoundingClientRect();
            return [Math.round(r.x + r.width / 2), Math.round(r.y + r.height / 2)];
        }})()"""
    )
    x, y = int(found[0]) - TASK_AREA[0], int(found[1]) - TASK_AREA[1]
    assert 0 <= x < TASK_AREA[2] and 0 <= y < TASK_AREA[3], f"{selector} at {found}"
    return x, y


async def answer_of_click_button(remote: Remote) -> tuple[int, int]:
    """click-button's right answer: the button whose label the instruction quotes."""
    cdp = runtime(remote).cdp
    assert cdp is not None
    index = await cdp.evaluate(
        """(() => {
            const target = document.getElementById('query').textContent.split('"')[1];
            return [...document.querySelectorAll('#area button')]
                .findIndex(b => b.textContent === target);
        })()"""
    )
    assert index >= 0
    return await centre_of(remote, f"#area button:nth-of-type({index + 1})")


def click(x: int, y: int) -> list[tuple[Any, ...]]:
    return [("PointerEvent", x, y, 0), ("PointerEvent", x, y, 1), ("PointerEvent", x, y, 0)]


def shows_task(frame: np.ndarray) -> bool:
    """The page with an episode running: the instruction bar is yellow at (155, 45)."""
    return tuple(frame[45, 155]) == QUERY_COLOUR


def differing(a: np.ndarray, b: np.ndarray, pointer: tuple[int, int] | None = None) -> int:
    """Pixels that differ between two frames (all of them if the shapes differ), outside
    X's cursor if it sits at ``pointer`` (see :data:`CURSOR_BOX`)."""
    if a.shape != b.shape:
        return max(a.size, b.size) // 3
    differs = (a != b).any(axis=2)
    if pointer is not None:
        x, y = pointer
        left, top, right, bottom = CURSOR_BOX
        differs[max(y + top, 0) : max(y + bottom, 0), max(x + left, 0) : max(x + right, 0)] = False
    return int(differs.sum())


def box(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int, int] | None:
    """The box (x0, y0, x1, y1) around the pixels that differ, or None."""
    ys, xs = np.nonzero((a != b).any(axis=2))
    return None if not ys.size else (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))


def mismatch(frame: np.ndarray, page: np.ndarray, previous: np.ndarray | None) -> str:
    """How a frame that should be ``page`` is not: how many pixels, where, and whether it
    is the episode before's page."""
    said = f"differs from the page in {differing(frame, page)} pixels within {box(frame, page)}"
    if previous is not None and differing(frame, previous) == 0:
        said += ": it is the previous episode's page"
    return said


def first_frames(remote: Remote) -> dict[int, np.ndarray]:
    """Each episode's first frame, copied as the remote draws it (its episode sinks run
    just before it serves the frame with the episode's first tag): what a reset returns."""
    frames: dict[int, np.ndarray] = {}

    def began(episode: int, seed: int, text: str | None) -> None:
        frames[episode] = runtime(remote).framebuffer.copy()

    remote.episode_sinks.append(began)
    return frames


def episode_ends(remote: Remote) -> dict[int, asyncio.Future[StepResult]]:
    """A future per episode id, resolved with the frame's result that ends that episode
    (the remote's result sinks hear every advance, as the dm_env_rpc port does)."""
    ends: dict[int, asyncio.Future[StepResult]] = {}
    loop = asyncio.get_running_loop()

    def heard(episode: int, result: StepResult) -> None:
        if result.done:
            future = ends.setdefault(episode, loop.create_future())
            if not future.done():
                future.set_result(result)

    remote.result_sinks.append(heard)
    return ends


async def end_of(ends: dict[int, asyncio.Future[StepResult]], episode: int) -> StepResult:
    future = ends.setdefault(episode, asyncio.get_running_loop().create_future())
    async with asyncio.timeout(TIMEOUT):
        return await future


# Recorded and replayed ---------------------------------------------------------------------


async def replayed_hashes(path: Path, episode: Episode) -> tuple[list[str], list[float]]:
    """Serve the recorded episode (``runtimes.replay``, what ``universe-remote replay``
    serves) in lockstep and step it as recorded: the hash of each frame a VNC client got,
    and each step's reward."""
    replay = Remote(replay_runtime(path, episode.number)(), mode="lockstep")
    await replay.start("127.0.0.1", 0, 0)
    try:
        async with (
            RewarderClient(f"127.0.0.1:{replay.rewarder.port}") as client,
            VNCClient(f"127.0.0.1::{replay.vnc_port}", frame_tags=True) as vnc,
        ):
            await client.reset()
            await vnc.wait_frame(replay.frame, timeout=TIMEOUT)
            hashes, rewards = [frame_hash(vnc.framebuffer)], []
            for step in episode.steps[1:]:
                reply = await client.step([], frames=step.frames)
                await vnc.wait_frame(reply.frame, timeout=TIMEOUT)
                hashes.append(frame_hash(vnc.framebuffer))
                rewards.append(reply.reward)
            assert reply.done
            return hashes, rewards
    finally:
        await replay.close()


@dataclass
class Played:
    """One episode as the agent played it."""

    source: str  # who clicked: "vnc:N" or "agent"
    events: list[tuple[Any, ...]]
    page: np.ndarray  # the page after the reset, before any input (CDP)
    pointer: tuple[int, int] | None  # where the pointer was when the episode began
    result: StepResult  # the frame that ended it


async def test_a_recorded_miniwob_remote_replays_frame_for_frame(
    start_miniwob: StartMiniWoB, tmp_path: Path
) -> None:
    """An agent plays three episodes of click-test-2 (the right button over VNC, the
    right button over the rewarder, the wrong one over VNC); each is on disk with the
    page's pixels from its first frame on, its clicks as their sources' events and its
    reward, and a replay serves every recorded frame again, hash for hash."""
    rec = tmp_path / "rec"
    recorder = Recorder(rec)
    remote = await start_miniwob("miniwob.ClickTest2-v0", recorder=recorder)
    ends = episode_ends(remote)
    agent = await WireClient.open(remote.rewarder.port)
    played: dict[int, Played] = {}
    pointer: tuple[int, int] | None = None
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}", frame_tags=True) as vnc:
        assert vnc.framebuffer.shape == (210, 160, 3)
        vnc_source = f"vnc:{next(iter(remote.vnc.connections))}"
        for seed, by, button in ((1, "vnc", "#subbtn"), (2, "agent", "#subbtn"),
                                 (3, "vnc", "#subbtn2")):
            number = int((await agent.reset(seed=seed))["headers"]["episode_id"])
            page_now = await screenshot(remote)  # the new page, before any input
            target = await centre_of(remote, button)
            events = click(*target)
            if by == "vnc":
                vnc.send_events(events)
            else:
                await agent.send("v0.agent.action", {"action": [list(e) for e in events]})
            source = vnc_source if by == "vnc" else "agent"
            played[seed] = Played(source, events, page_now, pointer, await end_of(ends, number))
            pointer = target
    await agent.close()
    # MiniWoB's reward shrinks with the time taken; its raw reward is the answer's.
    assert [played[s].result.info["wob.raw_reward"] for s in (1, 2, 3)] == [1.0, 1.0, -1.0]
    assert played[1].result.reward > 0 and played[2].result.reward > 0
    assert played[3].result.reward < 0
    await remote.close()
    recorder.close()  # every episode written, to its end.json
    episodes = {e.seed: e for e in open_recording(rec) if e.seed in played}
    assert sorted(episodes) == [1, 2, 3]

    for seed, how in played.items():
        episode = episodes[seed]
        assert episode.env_id == "miniwob.ClickTest2-v0" and episode.mode == "realtime"
        assert episode.status == DONE and episode.complete
        assert episode.total_reward == how.result.reward
        assert episode.steps[-1].done and episode.steps[-1].reward == how.result.reward
        frames = list(episode.frames())
        assert len(frames) == len(episode) > 1
        assert [frame_hash(f) for f in frames] == [s.hash for s in episode.steps]
        # The recorded pixels are the task's 160x210: the new page from the first frame.
        assert frames[0].shape == (210, 160, 3) and shows_task(frames[0])
        assert differing(frames[0], how.page, pointer=how.pointer) == 0, (
            f"seed {seed}: the first recorded frame {mismatch(frames[0], how.page, None)}"
        )
        # The click, as sent, by whom it was sent, in the steps it applied to.
        recorded = [(e.source, tuple(e.action())) for s in episode.steps for e in s.events]
        assert recorded == [(how.source, e) for e in how.events], f"seed {seed}"

        hashes, rewards = await replayed_hashes(rec, episode)
        assert hashes == [s.hash for s in episode.steps], f"seed {seed}: replayed frames differ"
        assert rewards == [s.reward for s in episode.steps[1:]]
        assert sum(rewards) == how.result.reward
    # The three pages differ: the seeds laid them out.
    pages = [played[s].page for s in (1, 2, 3)]
    assert differing(pages[0], pages[1]) and differing(pages[1], pages[2])


# TigerVNC over TLS -------------------------------------------------------------------------


@pytest.fixture
def viewer(xservers: XServers) -> Viewer:
    """A TigerVNC vncviewer on a fresh Xvfb display, started by the test."""
    require("vncviewer", "vncpasswd", "xdotool", "xwininfo", "xwd")
    return Viewer(xservers, xservers.xvfb(320, 240))


async def test_tigervnc_over_tls_sees_the_task_and_its_click_reaches_the_page(
    start_miniwob: StartMiniWoB, viewer: Viewer, certs: Certs, tmp_path: Path
) -> None:
    """``vncviewer -SecurityTypes X509Vnc -X509CA ca.pem`` with the password: the remote
    counts it as a viewer over TLS, it shows the task's exact pixels, and a click in its
    window (xdotool) ends the episode with the page's reward."""
    remote = await start_miniwob("miniwob.ClickTest-v0", password=PASSWORD, tls=certs.server())
    assert remote.vnc_port is not None
    ends = episode_ends(remote)
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}", password=PASSWORD,
                              tls=client_context(certs.ca), start_timeout=TIMEOUT) as agent:
        episode = await agent.reset(seed=4)  # a fresh episode: its 10 s limit is far off
    passwd = vnc_password_file(tmp_path, PASSWORD)
    await viewer.start(remote.vnc_port, "-X509CA", str(certs.ca), "-passwd", str(passwd),
                       "-AutoSelect=0", "-FullColor=1", "-NoJPEG=1", security="X509Vnc")
    assert viewer.geometry[2:] == (160, 210)  # the task, not the 640x480 screen
    (connection,) = remote.vnc.connections.values()
    assert connection.kind == "viewer"
    assert connection.transport is not None
    assert connection.transport.get_extra_info("ssl_object") is not None
    page_now = await screenshot(remote)
    await viewer.shows(lambda shot: differing(shot, page_now) == 0)

    x, y = await centre_of(remote, "#subbtn")
    await viewer._run("xdotool", "mousemove", "--window", viewer.window, str(x), str(y),
                      "click", "1")
    result = await end_of(ends, episode)
    assert result.reward > 0 and result.info["wob.raw_reward"] == 1.0


# Resets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", RESET_TASKS)
async def test_twenty_resets_each_return_the_new_page(
    start_miniwob: StartMiniWoB, env_id: str
) -> None:
    """Twenty resets with twenty seeds, no input: each reset's frame (the one the remote
    serves with the episode's first tag) and the agent's observation
    (``RemoteEnv.reset``) are the page as Chromium draws it right after, pixel for pixel.
    The seeds change the layout, so a frame of the episode before would differ; and the
    resets do not wait out a timeout."""
    remote = await start_miniwob(env_id)
    firsts = first_frames(remote)
    address = f"vnc://127.0.0.1:{remote.vnc_port}+{remote.rewarder.port}"
    env = await asyncio.to_thread(RemoteEnv, address)
    seconds: list[float] = []
    stale: list[str] = []
    previous: np.ndarray | None = None
    changed = 0
    try:
        for i in range(RESETS):
            seed = 100 + i
            started = time.monotonic()
            obs, _ = await asyncio.to_thread(env.reset, seed=seed)
            seconds.append(time.monotonic() - started)
            page_now = await screenshot(remote)
            served = firsts[remote.episode_id]
            assert obs.shape == (210, 160, 3)
            for what, frame in (("the reset's frame", served), ("obs", obs)):
                if differing(frame, page_now):
                    stale.append(f"reset {i} (seed {seed}): {what} {mismatch(frame, page_now, previous)}")
            if previous is not None:
                changed += differing(page_now, previous) > 0
            previous = page_now
    finally:
        await asyncio.to_thread(env.close)
    resets = {said.split(":")[0] for said in stale}
    assert not stale, f"{env_id}: {len(resets)} of {RESETS} resets: " + "; ".join(stale)
    assert changed >= RESETS - 3, f"only {changed} of {RESETS - 1} seeds changed the page"
    waited = [s for s in seconds if s >= SETTLE_TIMEOUT]
    assert len(waited) <= MAX_TIMED_OUT_RESETS, (
        f"{env_id}: {len(waited)} of {RESETS} resets took the settle timeout "
        f"({SETTLE_TIMEOUT} s) or more: {[round(s, 3) for s in seconds]} s"
    )


async def test_a_click_on_the_first_step_after_a_reset_lands(start_miniwob: StartMiniWoB) -> None:
    """Five episodes of click-button: the reset's frame and observation show the page
    (whose answer button CDP locates), the answer is clicked on the very first step, and
    every episode ends with a positive reward."""
    remote = await start_miniwob("miniwob.ClickButton-v0")
    firsts = first_frames(remote)
    address = f"vnc://127.0.0.1:{remote.vnc_port}+{remote.rewarder.port}"
    env = await asyncio.to_thread(RemoteEnv, address)
    rewards: list[float] = []
    pointer: tuple[int, int] | None = None  # X's pointer: where the last click left it
    try:
        for seed in range(200, 200 + FIRST_CLICKS):
            obs, _ = await asyncio.to_thread(env.reset, seed=seed)
            target = await answer_of_click_button(remote)
            page_now = await screenshot(remote)
            for what, frame in (("the reset's frame", firsts[remote.episode_id]), ("obs", obs)):
                assert differing(frame, page_now, pointer=pointer) == 0, (
                    f"seed {seed}: {what} {mismatch(frame, page_now, None)}"
                )
            obs, reward, terminated, truncated, _ = await asyncio.to_thread(env.step, click(*target))
            pointer = target
            total = float(reward)
            deadline = time.monotonic() + TIMEOUT
            while not (terminated or truncated) and time.monotonic() < deadline:
                obs, reward, terminated, truncated, _ = await asyncio.to_thread(env.step, [])
                total += float(reward)
            assert terminated, f"seed {seed}: the episode did not end"
            rewards.append(total)
    finally:
        await asyncio.to_thread(env.close)
    # A right answer earns 1 less the time taken (a little, here); a wrong one -1.
    assert all(r > 0 for r in rewards), f"first clicks earned {rewards}"


async def test_the_frames_show_the_page_not_the_x_cursor(start_miniwob: StartMiniWoB) -> None:
    """A pointer moved over the task leaves the frames as the page draws them (as
    MiniWoB's own screenshots are), and the same seed gives the same first frame
    wherever the episode before left the pointer: what an agent sees is the page."""
    remote = await start_miniwob("miniwob.ClickTest-v0")
    firsts = first_frames(remote)
    agent = await WireClient.open(remote.rewarder.port)
    episode = int((await agent.reset(seed=1))["headers"]["episode_id"])
    untouched = firsts[episode]
    assert differing(untouched, await screenshot(remote)) == 0
    cdp = runtime(remote).cdp
    assert cdp is not None
    x, y = 40, 60
    assert await cdp.evaluate(f"document.elementFromPoint({x}, {y}).id") == "area"  # nothing
    await agent.send("v0.agent.action", {"action": [["PointerEvent", x, y, 0]]})
    async with asyncio.timeout(TIMEOUT):  # the event went into X
        while await x_pointer(runtime(remote)) != (x, y):
            await remote.wait_frame()
    for _ in range(FRAMES_AFTER_INPUT):  # and what the display sent after it was taken
        await remote.wait_frame()
    page_now = await screenshot(remote)
    served = runtime(remote).framebuffer.copy()
    again = int((await agent.reset(seed=1))["headers"]["episode_id"])
    await agent.close()
    assert differing(served, page_now) == 0, (
        f"with the pointer at ({x}, {y}) the frame {mismatch(served, page_now, None)}"
    )
    assert differing(firsts[again], untouched) == 0, (
        f"seed 1's first frame differs the second time in {differing(firsts[again], untouched)} "
        f"pixels within {box(firsts[again], untouched)}"
    )


# dm_env_rpc and the browser viewer ---------------------------------------------------------


async def test_dm_env_rpc_sees_the_task_and_clicks_it(start_miniwob: StartMiniWoB) -> None:
    """``serve --dm-env-rpc-port`` on a MiniWoB remote: JoinWorld's specs and each step's
    RGB are the 160x210 task; a click sent as a step's pointer and buttons ends the
    episode with the page's reward."""
    grpc = pytest.importorskip("grpc", reason="dm_env_rpc needs the dmenv extra")
    from dm_env_rpc.v1 import connection as dm_connection, dm_env_rpc_pb2, tensor_utils

    remote = await start_miniwob("miniwob.ClickTest-v0", dm_env_rpc_port=0)
    assert remote.dm_env_rpc is not None
    target = f"127.0.0.1:{remote.dm_env_rpc.port}"

    def connect() -> Any:
        channel = grpc.insecure_channel(target)
        grpc.channel_ready_future(channel).result(TIMEOUT)
        return dm_connection.Connection(channel)

    connection = await asyncio.to_thread(connect)
    send = lambda request: asyncio.to_thread(connection.send, request)  # noqa: E731
    try:
        settings = {"mode": "realtime", "seed": 9}
        world = (await send(dm_env_rpc_pb2.CreateWorldRequest(
            settings={k: tensor_utils.pack_tensor(v) for k, v in settings.items()}
        ))).world_name
        specs = (await send(dm_env_rpc_pb2.JoinWorldRequest(world_name=world))).specs
        observations = {s.name: uid for uid, s in specs.observations.items()}
        actions = {s.name: uid for uid, s in specs.actions.items()}
        assert list(specs.observations[observations["RGB"]].shape) == [210, 160, 3]
        wanted = [observations["RGB"], observations["reward"]]

        async def step(**act: Any) -> tuple[Any, np.ndarray, float]:
            response = await send(dm_env_rpc_pb2.StepRequest(
                actions={actions[k]: tensor_utils.pack_tensor(v) for k, v in act.items()},
                requested_observations=wanted,
            ))
            rgb = tensor_utils.unpack_tensor(response.observations[observations["RGB"]])
            reward = float(tensor_utils.unpack_tensor(response.observations[observations["reward"]]))
            return response.state, rgb, reward

        state, rgb, _ = await step()  # the sequence's first step: its first screen
        assert state == dm_env_rpc_pb2.EnvironmentStateType.RUNNING
        assert rgb.shape == (210, 160, 3) and shows_task(rgb)
        assert differing(rgb, await screenshot(remote)) == 0
        x, y = await centre_of(remote, "#subbtn")
        await step(pointer=np.array([x, y], np.int32), buttons=np.uint8(1))
        state, _, total = await step(buttons=np.uint8(0))
        deadline = time.monotonic() + TIMEOUT
        while state == dm_env_rpc_pb2.EnvironmentStateType.RUNNING and time.monotonic() < deadline:
            state, _, reward = await step()
            total += reward
        assert state == dm_env_rpc_pb2.EnvironmentStateType.TERMINATED
        assert total > 0
        await send(dm_env_rpc_pb2.LeaveWorldRequest())
        await send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))
    finally:
        await asyncio.to_thread(connection.close)


async def test_the_browser_viewer_serves_the_task(start_miniwob: StartMiniWoB) -> None:
    """``serve --http-port``: the viewer's session describes a 160x210 screen, and its
    WebSocket bridge serves the task's pixels."""
    remote = await start_miniwob("miniwob.ClickTest-v0", http_port=0, password=PASSWORD)
    assert remote.viewer is not None
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{remote.viewer.port}/viewer/session",
                            headers=basic(PASSWORD)) as r:
            assert r.status == 200
            session = await r.json()
        assert session["env_id"] == "miniwob.ClickTest-v0"
        assert (session["width"], session["height"]) == (160, 210)
        rfb = await RFBOverWebSocket.open(http, await session_websocket(http, remote.viewer, PASSWORD))
        try:
            frame = await rfb.frame()
        finally:
            await rfb.close()
    assert frame.shape == (210, 160, 3) and shows_task(frame)
    assert differing(frame, await screenshot(remote)) == 0
