"""An env switch between MiniWoB tasks keeps the browser and loads the new task's page.

Covers: a reset to another ``miniwob.*`` id on one remote keeps its Chromium and Xvnc
(the same processes), serves the new task's instruction and page, and does it well
within a loose bound; in lockstep, the task switched to gives the same frames and rewards
for a seed and actions as a remote started on it. Frames from the display
(``runtimes.frame_witness``) are what ``test_browser_lockstep.py`` checks for
determinism; this file checks they are the ones a fresh remote gives.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium
import pytest

import remotes  # noqa: F401 (registers the ids)
from tests.runtimes.test_browser import (  # noqa: F401 (fixtures)
    StartBrowser,
    _browser_family_installed,
    page,
    runtime,
    start_browser,
)
from tests.runtimes.test_browser_lockstep import episode
from tests.wire import WireClient

pytestmark = pytest.mark.usefixtures("_browser_family_installed")

#: Seconds a switch may take on a loaded 2-core machine (about 0.3 s when quiet; starting
#: Xvnc and Chromium again took 2-3 s).
SWITCH_BOUND = 5.0


async def test_a_switch_keeps_the_browser_and_serves_the_new_task(
    start_browser: StartBrowser,  # noqa: F811 (the fixture imported above)
) -> None:
    remote = await start_browser("miniwob.ClickTest-v0")
    before = runtime(remote)
    browser, display = before.browser, before.display
    agent = await WireClient.open(remote.rewarder.port)
    first = (await agent.reset(seed=1))["headers"]["episode_id"]
    assert await agent.episode_text(first) == "Click the button."

    started = time.monotonic()
    reply = await agent.reset(env_id="miniwob.ClickButton-v0", seed=3)
    took = time.monotonic() - started
    assert reply["method"] == "v0.reply.env.reset", reply
    text = await agent.episode_text(reply["headers"]["episode_id"])
    after = runtime(remote)
    assert after is not before and after.env_id == "miniwob.ClickButton-v0"
    assert after.browser is browser and after.display is display  # kept, not started again
    assert browser is not None and browser.running
    assert await page(remote, "location.pathname.split('/').pop()") == "click-button.html"
    assert text == await page(remote, "core.getUtterance()") and "button" in text
    assert await page(remote, "WOB_DONE_GLOBAL") is False  # its episode runs
    assert took < SWITCH_BOUND

    back = await agent.reset(env_id="miniwob.ClickTest-v0", seed=1)  # and back again
    assert await agent.episode_text(back["headers"]["episode_id"]) == "Click the button."
    assert runtime(remote).browser is browser
    await agent.close()


class SwitchTo(gymnasium.Wrapper):  # type: ignore[type-arg]
    """Every reset to ``env_id`` (an env's own resets go back to the id it was made with)."""

    def __init__(self, env: gymnasium.Env, env_id: str) -> None:  # type: ignore[type-arg]
        super().__init__(env)
        self.env_id = env_id

    def reset(self, **kwargs: Any) -> Any:
        return self.env.reset(**kwargs, options={"env_id": self.env_id})


def test_a_switched_task_steps_as_a_fresh_one_in_lockstep() -> None:
    fresh = gymnasium.make("universe-remote/miniwob.ClickButton-v0", mode="lockstep", frameskip=1)
    try:
        expected = episode(fresh, 7)
    finally:
        fresh.close()
    env = gymnasium.make("universe-remote/miniwob.ClickTest-v0", mode="lockstep", frameskip=1)
    try:
        env.reset(seed=1)
        env.step(1)
        assert episode(SwitchTo(env, "miniwob.ClickButton-v0"), 7) == expected
    finally:
        env.close()
