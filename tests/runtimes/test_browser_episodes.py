"""What a web agent hears from a MiniWoB remote is true of the page: the instruction is
the task's sentence only, every episode's end is reported once (under load, resets slow),
``settle.react_s`` says the screen changed when an action string changed it, ``noop``
moves page time in lockstep, full-screen resets do not wait out the settle timeout, and
the ``reward`` option pays what it says (docs/browser.md).

Real remotes (Chromium on Xvnc, in-process), spoken to with raw rewarder messages; CDP is
used to ask the page where things are and, once, to give it a timer to wait for.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
from typing import Any

import numpy as np
import pytest

from runtimes.base import StepResult
from tests.runtimes.test_browser import (  # noqa: F401 (fixtures)
    TIMEOUT,
    StartBrowser,
    _browser_family_installed,
    page,
    runtime,
    start_browser,
)
from tests.runtimes.test_browser_lockstep import busy_loops
from tests.runtimes.test_browser_web import answer, observe
from tests.wire import WireClient

try:
    from runtimes import browser
    from runtimes.browser import POLL_INTERVAL, REWARDS, SETTLE_TIMEOUT, MiniWoBRuntime
except ModuleNotFoundError:  # (the fixture above skips, naming what is missing)
    pass

pytestmark = pytest.mark.usefixtures("_browser_family_installed")

#: Episodes played to the end in real time, each end followed by the remote's own reset.
EPISODES = 4
#: Polls of the page's reward globals a reset waits before it starts the next episode
#: (as a loaded machine makes it): the window the old code reported an end twice in.
SLOW_RESET_POLLS = 3
#: Seconds between the reward poller's reads in the settled-answer test (a loaded
#: machine's late poll, made certain).
LATE_POLL = 2.0


async def first_of(agent: WireClient, method: str, episode: str) -> dict[str, Any]:
    """The first ``method`` message of ``episode``: seen already, or the next one."""
    for message in agent.seen:
        if message["method"] == method and str(message["headers"].get("episode_id")) == episode:
            return message
    return await agent.recv_until(method, episode_id=episode)


def by_id(observation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in observation["page"]["elements"] if "id" in e}


async def test_the_instruction_is_the_sentence_never_the_answer_fields(
    start_browser: StartBrowser,  # noqa: F811 (the fixture imported above)
) -> None:
    """email-inbox-forward-nl's ``core.getUtterance()`` is ``{utterance, fields}``, the
    fields being the parsed answer: an agent gets the sentence, in real time and lockstep."""
    remote = await start_browser("miniwob.EmailInboxForwardNl-v0")
    assert await page(remote, "typeof core.getUtterance()") == "object"  # the task's own
    agent = await WireClient.open(remote.rewarder.port)
    for mode in ("realtime", "lockstep"):
        episode = str((await agent.reset(seed=2, mode=mode))["headers"]["episode_id"])
        text = await agent.episode_text(episode)
        assert text == await page(remote, "core.getUtterance().utterance"), mode
        fields = await page(remote, "core.getUtterance().fields")
        assert fields and "{" not in text and "fields" not in text, text
    await agent.close()


async def test_each_episode_end_is_reported_once_and_fills_react(
    start_browser: StartBrowser,  # noqa: F811
) -> None:
    """enter-text in real time beside a busy loop, with resets as slow as on a loaded
    machine: every episode's end is reported exactly once (the old remote reported it
    again one frame into the next episode: a poll between the reset's start and the
    page's new episode read the old end), and every fill that changed the screen has a
    ``react_s`` — also one whose change was over before the action string ended."""
    remote = await start_browser("miniwob.EnterText-v0")
    rt = runtime(remote)
    revive = rt._revive_display

    async def slow_revive() -> None:
        await asyncio.sleep(SLOW_RESET_POLLS * POLL_INTERVAL)  # load, made certain
        await revive()

    rt._revive_display = slow_revive  # type: ignore[method-assign]
    ends: collections.Counter[int] = collections.Counter()

    def heard(episode: int, result: StepResult) -> None:
        if result.done:
            ends[result.info["wob.episodes"]] += 1

    remote.result_sinks.append(heard)
    began: asyncio.Queue[int] = asyncio.Queue()
    remote.episode_sinks.append(lambda episode, seed, text: began.put_nowait(episode))
    agent = await WireClient.open(remote.rewarder.port)
    await observe(agent, "elements")
    episode = str((await agent.reset(seed=1))["headers"]["episode_id"])
    reacts: list[dict[str, Any]] = []
    with busy_loops(1):
        try:
            for _ in range(EPISODES):
                word = (await agent.episode_text(episode)).split('"')[1]
                fields = by_id((await first_of(agent, "v0.env.observation", episode))["body"]["observation"])
                field, submit = fields["tt"]["bid"], fields["subbtn"]["bid"]
                for action in (f"fill('{field}', 'zz')", f"fill('{field}', {word!r})\nnoop(400)"):
                    said = await answer(agent, await agent.send(
                        "v0.agent.action", {"action": action, "settle": True}))
                    assert said["last_action_error"] is None, said
                    reacts.append(said["settle"])
                await agent.send("v0.agent.action", {"action": f"click('{submit}')"})
                reward = await agent.recv_until("v0.env.reward", episode_id=episode)
                assert reward["body"]["done"] and reward["body"]["reward"] > 0
                async with asyncio.timeout(TIMEOUT):  # the remote's own reset
                    while str(await began.get()) == episode:
                        pass
                episode = str(remote.episode_id)
            for _ in range(30):  # frames into the last new episode: where a repeat came
                await remote.wait_frame()
        except TimeoutError:  # (an end reported again ends the next episode at once)
            pytest.fail(f"an episode was lost; done reports per episode: {dict(ends)}")
    await agent.close()
    assert len(ends) == EPISODES and set(ends.values()) == {1}, f"done reports per episode: {ends}"
    assert all(s["react_s"] is not None for s in reacts), reacts
    assert all(0 <= s["react_s"] <= s["settled_s"] for s in reacts), reacts


async def test_full_screen_and_marked_resets_show_the_page_without_waiting(
    start_browser: StartBrowser,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``screen=full`` and ``marks=true`` in real time: each reset returns as soon as the
    display shows the new page, and the frames show no pointer at the screen's centre.
    The old remote waited SETTLE_TIMEOUT at every reset: the X pointer, drawn into the
    display's first frame there, never matched the page's screenshot; and with marks,
    from the second reset on, it compared the marked frame with the unmarked page."""
    caplog.set_level(logging.WARNING, "runtimes.browser")
    remote = await start_browser("miniwob.ClickTest-v0", runtime_options={"screen": "full", "marks": True})
    rt = runtime(remote)
    assert (rt.width, rt.height) == (640, 480)
    agent = await WireClient.open(remote.rewarder.port)
    seconds = []
    for seed in range(3):
        started = time.monotonic()
        await agent.reset(seed=seed)
        seconds.append(time.monotonic() - started)
    await agent.close()
    assert max(seconds) < SETTLE_TIMEOUT, seconds
    assert "did not show the new page" not in caplog.text
    assert rt.clock is not None
    shot = await rt.clock.screenshot((0, 0, 640, 480))
    # grey page where the pointer was drawn (below the task, whose marks end at row 209)
    centre = (slice(215, 280), slice(280, 360))
    assert np.array_equal(rt.framebuffer[centre], shot[centre])


async def test_noop_moves_page_time_in_lockstep_and_rewards_pay_their_kind(
    start_browser: StartBrowser,  # noqa: F811
) -> None:
    """Lockstep with ``reward=success``: ``noop(1500)`` runs the page's timers 1.5 s on,
    at once (the old one slept 1.5 s of wall clock and the page's time stood still); a
    win then pays 1.0 where MiniWoB's discounted reward is lower, a loss 0.0."""
    remote = await start_browser("miniwob.ClickButton-v0", runtime_options={"reward": "success"})
    agent = await WireClient.open(remote.rewarder.port)
    await observe(agent, "elements")
    episode = str((await agent.reset(seed=3, mode="lockstep"))["headers"]["episode_id"])
    await page(remote, "setTimeout(() => { const late = document.createElement('button'); "
                       "late.id = 'late'; late.textContent = 'Late'; "
                       "document.getElementById('area').appendChild(late); }, 1000)")
    started = time.monotonic()
    await agent.send("v0.env.step", {"action": "noop(1500)", "frames": 1}, episode_id=episode)
    step = await agent.recv_until("v0.reply.env.step")
    took = time.monotonic() - started
    assert step["body"]["info"]["web.last_action_error"] is None
    assert took < 1.5, f"noop(1500) took {took:.2f} s of wall clock"
    after = [m for m in agent.seen if m["method"] == "v0.env.observation"][-1]["body"]["observation"]
    assert "late" in by_id(after)  # the timer ran: page time moved
    wanted = re.search(r'"(.*)"', await agent.episode_text(episode))
    assert wanted is not None
    buttons = [e for e in after["page"]["elements"] if e["tag"] == "button" and e.get("id") != "late"]
    right = next(e["bid"] for e in buttons if e["name"] == wanted.group(1))
    wrong = next(e["bid"] for e in buttons if e["name"] != wanted.group(1))
    outcomes = []
    for bid in (right, wrong):
        await agent.send("v0.env.step", {"action": f"click('{bid}')", "frames": 1}, episode_id=episode)
        outcomes.append((await agent.recv_until("v0.reply.env.step"))["body"])
        episode = str((await agent.reset(seed=3, mode="lockstep"))["headers"]["episode_id"])
    await agent.close()
    won, lost = outcomes
    assert won["done"] and won["reward"] == 1.0 and won["info"]["wob.raw_reward"] == 1.0
    assert won["info"]["wob.reward"] < 0.9  # 1.5 s of page time discounted it
    assert lost["done"] and lost["reward"] == 0.0 and lost["info"]["wob.raw_reward"] == -1.0


def test_the_reward_option_names_each_kind_and_refuses_others() -> None:
    """``raw`` pays MiniWoB's undiscounted reward, ``discounted`` (the default) the
    time-discounted one; anything else is refused naming the kinds."""
    assert REWARDS == ("discounted", "raw", "success")
    paid = {kind: MiniWoBRuntime(reward=kind).episodes.payment(0.85, 1.0, None, 4)[0] for kind in REWARDS}
    assert paid == {"discounted": 0.85, "raw": 1.0, "success": 1.0}
    assert MiniWoBRuntime().reward == "discounted"
    assert MiniWoBRuntime(reward="raw").episodes.payment(-1.0, -1.0, "timed out", 5)[0] == -1.0
    with pytest.raises(ValueError, match="discounted, raw, success"):
        MiniWoBRuntime(reward="binary")


async def test_a_settled_action_that_ends_the_episode_is_answered_after_its_end(
    start_browser: StartBrowser,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """click-test in real time, the reward poller as late as on a loaded machine: the
    settled answer to the winning click comes after the end is reported, so an agent
    that reads done from the answer (MCP's computer tool does) sees it. The old answer
    came as soon as the page was idle, before the poller's next read: the agent saw
    done only on its next call, with the next episode's page."""
    monkeypatch.setattr(browser, "POLL_INTERVAL", LATE_POLL)
    remote = await start_browser("miniwob.ClickTest-v0")
    agent = await WireClient.open(remote.rewarder.port)
    await observe(agent, "elements")
    for seed in range(2):
        episode = str((await agent.reset(seed=seed))["headers"]["episode_id"])
        page = (await first_of(agent, "v0.env.observation", episode))["body"]["observation"]["page"]
        button = next(e["bid"] for e in page["elements"] if e["role"] == "button")
        said = await answer(agent, await agent.send(
            "v0.agent.action", {"action": f"click('{button}')", "settle": True}))
        assert said["last_action_error"] is None, said
        ends = [m for m in agent.seen if m["method"] == "v0.env.reward" and m["body"]["done"]
                and str(m["headers"].get("episode_id")) == episode]
        assert ends and ends[0]["body"]["reward"] > 0, "the answer came before the episode's end"
    await agent.close()
