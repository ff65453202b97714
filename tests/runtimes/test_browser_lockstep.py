"""MiniWoB in lockstep, through real remotes (``serve``, Chromium, Xvnc) and gymnasium.

Covers: two runs with one seed and the same actions give identical frames (hashes) and
rewards on three tasks, and another seed gives other frames; the frames are the task's
160x210 pixels and change when clicks land; page time is the page clock's (a step of k
frames moves ``Date.now()`` by exactly k/60 s, whatever the wall clock did); a real-time
reset after lockstep gives the page its own clock back. The page clock itself (timers,
animations, MiniWoB's 10 s limit in page time) is ``test_page_clock.py``'s.
"""

from __future__ import annotations

import hashlib

import gymnasium
import pytest

import remotes  # noqa: F401 (registers the ids)
from rewarder.client import RewarderClient
from runtimes.page_clock import EPOCH_MS, FRAME_MS
from tests.runtimes.test_browser import (  # noqa: F401 (fixtures)
    StartBrowser,
    _browser_family_installed,
    page,
    start_browser,
)

pytestmark = pytest.mark.usefixtures("_browser_family_installed")

#: Tasks whose page reacts to clicks anywhere on a grid sweep (focus, ticks, wrong buttons).
TASKS = ("miniwob.ClickButton-v0", "miniwob.EnterText-v0", "miniwob.ClickCheckboxes-v0")
#: A sweep over the click grid (0 is the no-op), and then some waiting.
ACTIONS = [*range(1, 337, 9), 0, 0, 0]


def run(env_id: str, seed: int) -> tuple[list[str], list[float]]:
    """Frame hashes (the reset's, then every step's) and rewards of one run."""
    env = gymnasium.make(f"universe-remote/{env_id}", mode="lockstep", frameskip=1)
    try:
        obs, _ = env.reset(seed=seed)
        assert obs.shape == (210, 160, 3) and obs.std() > 0  # the task, drawn
        hashes, rewards = [hashlib.sha256(obs.tobytes()).hexdigest()], []
        for action in ACTIONS:
            obs, reward, terminated, truncated, info = env.step(action)
            assert "remote.error" not in info, info
            hashes.append(hashlib.sha256(obs.tobytes()).hexdigest())
            rewards.append(float(reward))
            if terminated or truncated:
                break
    finally:
        env.close()
    return hashes, rewards


@pytest.mark.parametrize("env_id", TASKS)
def test_one_seed_and_the_same_actions_give_the_same_frames_and_rewards(env_id: str) -> None:
    first, again, other = run(env_id, 7), run(env_id, 7), run(env_id, 8)
    assert first == again
    assert len(set(first[0])) > 1  # the clicks changed the page: not a still screen
    assert other[0] != first[0]


async def test_page_time_moves_only_with_steps_and_real_time_gives_it_back(
    start_browser: StartBrowser,  # noqa: F811 (the fixture imported above)
) -> None:
    remote = await start_browser("miniwob.ClickTest-v0")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=1, mode="lockstep")
        assert await page(remote, "Date.now()") == EPOCH_MS  # every episode starts here
        await client.ping()  # wall time passes; page time does not
        assert await page(remote, "Date.now()") == EPOCH_MS
        reply = await client.step([], frames=30)
        assert reply.frame == remote.frame and not reply.done
        assert await page(remote, "Date.now()") == pytest.approx(EPOCH_MS + 30 * FRAME_MS)
        await client.reset(seed=1, mode="realtime")
        first = await page(remote, "Date.now()")
        await remote.wait_frame(remote.frame + 3)  # real frames pass: so does page time
        assert await page(remote, "Date.now()") > first
