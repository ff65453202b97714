"""Web agents on the rewarder (docs/browser.md): the ``observe`` property, page
observations paired with frames, action strings in real time and lockstep, settling
actions, and what a remote that is not a browser says to them.

Real remotes (Chromium on Xvnc, in-process), spoken to with raw rewarder messages
(``tests.wire.WireClient``); the agent side's gymnasium view is ``tests/remotes``'.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Final

import numpy as np
import pytest

from envserver.remote import Remote
from runtimes.marks import BOX_COLOUR
from runtimes.page_clock import FRAME_MS
from tests.conftest import StartRemote
from tests.runtimes.test_browser import (  # noqa: F401 (fixtures)
    StartBrowser,
    _browser_family_installed,
    page,
    runtime,
    start_browser,
)
from tests.wire import WireClient
from vncdriver.client import VNCClient

pytestmark = pytest.mark.usefixtures("_browser_family_installed")

#: Seconds a wait for the browser may take (a loaded 2-core machine).
TIMEOUT: Final = 20.0
#: ``window.__resized``: the page's devicePixelRatio once its window is next resized (a
#: zoom resizes it).
RESIZED_JS: Final = ("window.__resized = new Promise((r) => addEventListener('resize', "
                     "() => r(devicePixelRatio), {once: true})); null")

HOSTILE = [
    "__import__('os').system('id')",
    "click(a42)",
    "click('a5').x",
    "(lambda: click('a5'))()",
    "click(f'a{5}')",
    "click('" + "a" * 9000 + "')",
    "exec('print(1)')",
]


async def observe(agent: WireClient, value: str = "elements,tree") -> None:
    await agent.send("v0.env.properties.write", {"key": "observe", "value": value})
    reply = await agent.recv_until("v0.reply.env.properties")
    assert reply["body"] == {"key": "observe", "value": value}


def observations(agent: WireClient) -> list[dict[str, Any]]:
    return [m["body"]["observation"] for m in agent.seen if m["method"] == "v0.env.observation"]


async def answer(agent: WireClient, action_id: int) -> dict[str, Any]:
    """The observation that answers the action ``action_id``."""
    while True:
        message = await agent.recv_until("v0.env.observation")
        if message["body"]["observation"].get("action_id") == action_id:
            return dict(message["body"]["observation"])


def target(observation: dict[str, Any], instruction: str) -> str:
    """The bid of the button ClickButton's instruction names, read from the structure."""
    wanted = re.search(r'"(.*)"', instruction)
    assert wanted is not None
    buttons = [e for e in observation["page"]["elements"] if e["tag"] == "button"]
    return next(e["bid"] for e in buttons if e["name"] == wanted.group(1))


async def test_observations_follow_the_page_and_action_strings_play_it(
    start_browser: StartBrowser,  # noqa: F811 (the fixture imported above)
) -> None:
    remote = await start_browser("miniwob.ClickButton-v0")
    agent = await WireClient.open(remote.rewarder.port)
    assert not [m for m in agent.seen if m["method"] == "v0.env.observation"]  # none unasked
    await observe(agent)
    reply = await agent.reset(seed=3)
    episode = reply["headers"]["episode_id"]
    first = observations(agent)[-1]  # sent before the reset's reply
    assert 0 < first["frame"] <= remote.frame  # (real time: frames go on meanwhile)
    assert first["page"]["axtree"].startswith("RootWebArea")
    assert await page(remote, "document.querySelector('[bid=a0]') === document.documentElement")
    instruction = await agent.episode_text(episode)
    bid = target(first, instruction)
    action_id = await agent.send("v0.agent.action", {"action": f"click('{bid}')", "settle": True})
    done = await answer(agent, action_id)
    assert done["last_action"].startswith(f"click('{bid}'") and done["last_action_error"] is None
    assert done["settle"]["react_s"] is not None and not done["settle"]["deadline_hit"]
    assert done["settle"]["by"] == "page-idle"  # the page said so (runtimes.settle)
    rewards = [m for m in agent.seen if m["method"] == "v0.env.reward"]
    reward = rewards[0] if rewards else await agent.recv_until("v0.env.reward")
    assert reward["body"]["reward"] > 0 and reward["body"]["done"]
    # Bad strings: an error in the observation, the connection open, the remote serving.
    for text in HOSTILE:
        action_id = await agent.send("v0.agent.action", {"action": text})
        if len(text) > 8192:  # past MAX_ACTION_STRING_CHARS: the message itself is refused
            error = await agent.recv_until("v0.reply.error")
            assert "MAX_ACTION_STRING_CHARS" in error["body"]["message"]
            continue
        refused = await answer(agent, action_id)
        assert refused["last_action_error"], text
    unknown = await answer(agent, await agent.send("v0.agent.action", {"action": "click('a999')"}))
    assert "a999" in unknown["last_action_error"]
    assert (await agent.ping())["method"] == "v0.reply.control.ping"
    await agent.close()


async def test_lockstep_steps_take_action_strings_and_report_them(
    start_browser: StartBrowser,  # noqa: F811
) -> None:
    remote = await start_browser("miniwob.ClickButton-v0")
    agent = await WireClient.open(remote.rewarder.port)
    await observe(agent, "elements")
    reply = await agent.reset(seed=3, mode="lockstep")
    episode = reply["headers"]["episode_id"]
    first = observations(agent)[-1]
    assert "axtree" not in first["page"] and first["page"]["elements"]  # elements only
    bid = target(first, await agent.episode_text(episode))
    await agent.send("v0.env.step", {"action": "click('nope')", "frames": 1}, episode_id=episode)
    step = await agent.recv_until("v0.reply.env.step")
    assert "nope" in step["body"]["info"]["web.last_action_error"] and not step["body"]["done"]
    after = observations(agent)[-1]  # sent before the reply: the frame it describes
    assert after["frame"] == step["body"]["frame"] and after["last_action_error"]
    await agent.send("v0.env.step", {"action": f"click('{bid}')", "frames": 1}, episode_id=episode)
    step = await agent.recv_until("v0.reply.env.step")
    assert step["body"]["info"]["web.last_action_error"] is None
    # MiniWoB's reward falls with page time: one frame of it passed (the first step's),
    # however long the wall clock took.
    assert step["body"]["done"]
    assert step["body"]["reward"] == pytest.approx(1 - FRAME_MS / 10_000, abs=1e-4)
    await agent.close()


async def test_a_game_refuses_action_strings_settling_and_observe(
    start_remote: StartRemote,
) -> None:
    remote: Remote = await start_remote("builtin.Catch-v0")
    agent = await WireClient.open(remote.rewarder.port)
    await agent.reset(seed=1)
    await agent.send("v0.agent.action", {"action": "click('a1')"})
    error = await agent.recv_until("v0.reply.error")
    assert "not action strings" in error["body"]["message"]
    await agent.send("v0.agent.action", {"action": [], "settle": True})
    error = await agent.recv_until("v0.reply.error")
    assert "cannot tell when its screen settles" in error["body"]["message"]
    await agent.send("v0.env.properties.write", {"key": "observe", "value": "tree"})
    error = await agent.recv_until("v0.reply.error")
    assert "no page to observe" in error["body"]["message"]
    await agent.close()


@pytest.mark.parametrize("mode", ["realtime", "lockstep"])
async def test_marks_draw_each_clickable_elements_box_and_bid_on_the_frame(
    start_browser: StartBrowser, mode: str,  # noqa: F811
) -> None:
    remote = await start_browser("miniwob.ClickCheckboxes-v0", runtime_options={"marks": True})
    agent = await WireClient.open(remote.rewarder.port)
    await observe(agent, "elements")
    await agent.reset(seed=2, mode=mode)
    elements = observations(agent)[-1]["page"]["elements"]
    boxes = [e["bbox"] for e in elements if e["clickable"] and e["visibility"] > 0]
    assert len(boxes) >= 3  # the checkboxes, their labels, Submit
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}", encoding="raw") as viewer:
        await viewer.wait_update(0, 10)
        frame = viewer.framebuffer.copy()
    magenta = np.all(frame == BOX_COLOUR, axis=2)
    for x, y, w, h in boxes:  # each box's outline is drawn where the element is
        left, top = round(x), round(y)
        assert magenta[top, left : left + max(1, round(w))].mean() > 0.5, (x, y, w, h)
    await agent.close()


#: Strings the grammar accepts whose arguments are out of any screen's or number's range,
#: browser commands, and key combinations in a row (the second's witness move once went
#: to where the first's left the pointer: no event, a 5 s wait): each is answered at once,
#: with an error or None, and the page takes the next click.
EDGES = [
    ("mouse_click(-1e308, 1e308)", "outside the screen"),
    ("mouse_drag_and_drop(5, 5, 1e9, 5)", "outside the screen"),
    ("mouse_move(160, 0)", "outside the screen"),
    ("scroll(0, " + "9" * 400 + ")", "must be a finite number"),
    ("keyboard_press('Shift+')", "not a key combination"),
    ("keyboard_press('Control++')", "a command to the browser"),
    ("keyboard_press('Shift++')", None),
    ("keyboard_press('+')", None),
    ("keyboard_press('Shift++')", None),
]


@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
async def test_out_of_range_action_strings_are_answered_and_the_page_still_takes_input(
    start_browser: StartBrowser, mode: str,  # noqa: F811
) -> None:
    remote = await start_browser("miniwob.ClickButton-v0")
    agent = await WireClient.open(remote.rewarder.port)
    await observe(agent, "elements")
    reply = await agent.reset(seed=3, mode=mode)
    episode = reply["headers"]["episode_id"]
    bid = target(observations(agent)[-1], await agent.episode_text(episode))
    for text, error in EDGES:
        if mode == "lockstep":
            await agent.send("v0.env.step", {"action": text, "frames": 1}, episode_id=episode)
            step = await agent.recv_until("v0.reply.env.step", timeout=4.0)  # < SEEN_TIMEOUT
            got = step["body"]["info"]["web.last_action_error"]
            assert not step["body"]["done"], text
        else:
            got = (await answer(agent, await agent.send("v0.agent.action", {"action": text})))[
                "last_action_error"]
        assert (got is None) if error is None else (error in (got or "")), (text, got)
    if mode == "lockstep":
        await agent.send("v0.env.step", {"action": f"click('{bid}')", "frames": 1}, episode_id=episode)
        step = await agent.recv_until("v0.reply.env.step")
        assert step["body"]["info"]["web.last_action_error"] is None
        assert step["body"]["done"] and step["body"]["reward"] > 0
    else:
        done = await answer(agent, await agent.send("v0.agent.action", {"action": f"click('{bid}')"}))
        assert done["last_action_error"] is None
        ends = [m for m in agent.seen if m["method"] == "v0.env.reward" and m["body"]["done"]]
        reward = ends[0] if ends else await agent.recv_until("v0.env.reward")
        assert reward["body"]["reward"] > 0 and reward["body"]["done"]
    assert (await agent.ping())["method"] == "v0.reply.control.ping"
    await agent.close()


async def test_a_reset_brings_back_one_page_at_100_percent_whatever_happened(
    start_browser: StartBrowser,  # noqa: F811 (the fixture imported above)
) -> None:
    """What no key filter sees: a tab the page opens is closed as it appears, and a zoom
    (sent here straight through DevTools, past the guards) is undone by the next reset,
    whose frame is the seed's as before."""
    remote = await start_browser("miniwob.ClickTest-v0")
    agent = await WireClient.open(remote.rewarder.port)
    await agent.reset(seed=3)
    browser = runtime(remote)
    cdp = browser.cdp
    assert cdp is not None
    first = browser.framebuffer.copy()

    async def pages() -> list[str]:
        infos = (await cdp.call("Target.getTargets"))["targetInfos"]
        return [t["targetId"] for t in infos if t["type"] == "page"]

    ours = await pages()
    closed = cdp.next_event("Target.targetDestroyed")
    opened = (await cdp.call("Target.createTarget", {"url": "about:blank"}))["targetId"]  # a middle click
    assert (await asyncio.wait_for(closed, TIMEOUT))["targetId"] == opened
    await page(remote, RESIZED_JS)  # listening before the keys
    for kind in ("rawKeyDown", "keyUp"):  # Control+plus, as from a key no guard saw
        await cdp.call("Input.dispatchKeyEvent", {"type": kind, "modifiers": 2, "key": "=", "code": "Equal",
                                                  "windowsVirtualKeyCode": 187, "nativeVirtualKeyCode": 187})
    assert await asyncio.wait_for(page(remote, "window.__resized"), TIMEOUT) != 1  # zoomed
    await agent.reset(seed=3)
    assert await page(remote, "window.devicePixelRatio") == 1 and await pages() == ours
    assert np.array_equal(browser.framebuffer, first)
