"""Frames on demand (issue 44): a real-time agent is sent a VNC frame when a step reads
one, not every frame its remote draws, and that frame is the current one; with real
local remotes and a VNC viewer beside the agent."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Final

import numpy as np
import pytest

from remotes import RemoteVectorEnv, realtime, start_local
from remotes.local import LocalRemotes
from vncdriver.client import VNCClient

#: Frames the remote draws while the agent "thinks" between two steps.
IDLE_FRAMES: Final = 20
#: Seconds any wait here may take on a loaded machine.
WAIT: Final = 20.0


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 1) as local:
        yield local


async def viewer_of(local: LocalRemotes) -> VNCClient:
    viewer = VNCClient(f"127.0.0.1::{local.addresses[0].vnc_port}", encoding="raw", frame_tags=True)
    await viewer.start()
    return viewer


async def until_frame(viewer: VNCClient, frame: int) -> int:
    """Wait until ``viewer`` shows ``frame`` or a later one; the frame it shows."""
    async with asyncio.timeout(WAIT):
        while viewer.tag is None or viewer.tag.frame < frame:
            await viewer.wait_update(viewer.updates)
    return viewer.tag.frame


async def test_an_agent_between_steps_is_sent_no_frame_then_the_current_one(catch: LocalRemotes) -> None:
    """While the agent does not step, the remote draws IDLE_FRAMES frames (a viewer sees
    them) and sends the agent none; the next step gets one update, showing a frame at
    least as new as the viewer's (before: one update per frame drawn, ~IDLE_FRAMES)."""
    viewer = await viewer_of(catch)
    env = RemoteVectorEnv(catch.address)
    try:
        await asyncio.to_thread(env.reset, seed=0)
        _, _, _, _, info = await asyncio.to_thread(env.step, [[]])
        updates, frame = int(info["vnc.updates"][0]), int(info["frame"][0])
        now = await until_frame(viewer, frame + IDLE_FRAMES)
        _, _, _, _, info = await asyncio.to_thread(env.step, [[]])
        sent = int(info["vnc.updates"][0]) - updates
        assert sent <= 2, f"{sent} VNC updates for one step after {now - frame} frames unread"
        assert int(info["frame"][0]) >= now, "the step returned an older frame than the remote showed"
        assert info["step.late"][0] > 0  # it came late, and says so
    finally:
        env.close()
        await viewer.close()


#: Steps of the asking-ahead agent counted.
AHEAD_STEPS: Final = 12


@pytest.fixture(scope="module")
def two_catches() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2, games_per_process=2) as local:
        yield local


def requests_out(env: RemoteVectorEnv) -> list[bool]:
    """Whether each remote's VNC client has an update request out now."""
    return [s.vnc is not None and s.vnc.asked_at is not None for s in env._core.sessions]


def test_an_agent_slower_than_its_remotes_asks_for_the_next_frame_as_each_step_returns(
    two_catches: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past saturation (here: every agent counts as slower than the frame clock) each
    step returns with the next frame already asked for, so the remotes draw it while
    the agent thinks; its input then asks for none: one VNC update a step, a new frame
    each step (before: no request out between steps, the next step's input asked)."""
    monkeypatch.setattr(realtime, "AHEAD_PERIODS", 0.0)
    monkeypatch.setattr(realtime, "AHEAD_THINK_PERIODS", 1e6)  # (a loaded machine's thread switches)
    env = RemoteVectorEnv(two_catches.address)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step([[], []])
        first = info["vnc.updates"].astype(int)
        frames = [info["frame"].astype(int)]
        out = []
        for _ in range(AHEAD_STEPS):
            _, _, _, _, info = env.step([[("KeyEvent", "Left", True)], [("KeyEvent", "Left", False)]])
            out.append(requests_out(env))  # (the remotes answer within a frame: most still out)
            frames.append(info["frame"].astype(int))
        sent = info["vnc.updates"].astype(int) - first
        assert any(any(o) for o in out), "no step returned with the next frame asked for"
        assert (sent <= AHEAD_STEPS + 2).all(), f"{sent} VNC updates for {AHEAD_STEPS} steps"
        assert (np.diff(np.array(frames), axis=0) >= 1).all(), "a step returned no newer frame"
        assert np.isfinite(info["step.late"]).all() and (info["step.late"] >= 0).all()
    finally:
        env.close()


def test_an_agent_that_thinks_between_steps_does_not_ask_ahead(
    two_catches: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent thinking longer than a frame between steps gets the frame asked with its
    input, the newest then, not one asked ahead and aged by its thinking."""
    monkeypatch.setattr(realtime, "AHEAD_PERIODS", 0.0)
    env = RemoteVectorEnv(two_catches.address)
    thinking = threading.Event()
    try:
        env.reset(seed=0)
        for _ in range(4):
            env.step([[], []])
            assert not any(requests_out(env)), "a thinking agent's step asked ahead"
            thinking.wait(3 / 60)  # the agent thinks three frames (load, not a wait for anything)
    finally:
        env.close()
