"""A batched Atari game's frames go straight from ALE into their shared-memory slots
(runtimes/atari.py ``into``): its VNC viewers still see the frames the agent sees, drawn
into the framebuffer only when they are served."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("ale_py")

from remotes import RemoteVectorEnv, start_local  # noqa: E402 (after the importorskip)
from remotes.local import LocalRemotes  # noqa: E402
from tests.remotes.test_batched_lane import Counted  # noqa: E402
from vncdriver.client import VNCClient  # noqa: E402

GAMES = 2
STEPS = 40
FRAMESKIP = 4
#: Seconds a viewer may take to get the newest frame (a loaded machine).
WITHIN = 20.0


@pytest.fixture(scope="module")
def pong() -> Iterator[LocalRemotes]:
    """2 Pong games in one lockstep process."""
    with start_local("atari.Pong-v0", GAMES, extra_args=("--mode", "lockstep"),
                     games_per_process=GAMES) as local:
        assert len(local.processes) == 1
        yield local


def _steps(env: RemoteVectorEnv, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Reset, step up and down; the last observation and each game's frame number."""
    env.reset(seed=seed)
    for step in range(STEPS):
        obs, _, _, _, infos = env.step([[("KeyEvent", "Up", step % 8 < 4)]] * GAMES)
    assert infos["remote.connected"].all()
    return obs.copy(), np.asarray(infos["frame"])


async def _newest(viewer: VNCClient, frame: int) -> np.ndarray:
    async with asyncio.timeout(WITHIN):
        while viewer.tag is None or viewer.tag.frame < frame:
            await viewer.wait_update(viewer.updates)
    assert viewer.tag.frame == frame
    return viewer.frame()


async def test_vnc_viewers_of_a_batched_atari_game_see_the_frames_the_agent_sees(
    pong: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A viewer watching throughout and one that comes after the steps both end on the
    agent's last frame, pixel for pixel (the framebuffer drawn when served), and the
    frames moved on from the reset's."""
    counted = Counted(monkeypatch)
    env = RemoteVectorEnv(pong.addresses, mode="lockstep", frameskip=FRAMESKIP, encoding="raw")
    early = VNCClient(f"127.0.0.1::{pong.addresses[0].vnc_port}", encoding="raw", frame_tags=True)
    late = VNCClient(f"127.0.0.1::{pong.addresses[1].vnc_port}", encoding="raw", frame_tags=True)
    try:
        first, _ = await asyncio.to_thread(env.reset, seed=2)
        await early.start()
        last, frames = await asyncio.to_thread(_steps, env, 2)
        assert counted.sent >= STEPS - 2  # (in batches: else nothing here is tested)
        assert not np.array_equal(first, last)
        assert np.array_equal(await _newest(early, int(frames[0])), last[0])
        await late.start()
        assert np.array_equal(await _newest(late, int(frames[1])), last[1])
    finally:
        await asyncio.to_thread(env.close)
        await early.close()
        await late.close()
