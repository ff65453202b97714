"""Frames on demand (issue 44): a real-time agent is sent a VNC frame when a step reads
one, not every frame its remote draws, and that frame is the current one; with real
local remotes and a VNC viewer beside the agent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Final

import pytest

from remotes import RemoteVectorEnv, start_local
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
