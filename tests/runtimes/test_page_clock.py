"""Lockstep time in real Chromium on a real Xvnc display (runtimes.page_clock, cdp_input).

Each test starts Xvnc and a kiosk Chromium as the MiniWoB runtime does (its flags, page
at (0, 0), scale 1), with the caret's blinking off (``no_caret_blink_env``), and drives
the page over the DevTools protocol: input through ``CDPInput``, time through
``PageClock``, pixels through ``PageClock.screenshot``. Wall time is let pass on purpose
in a few tests (that is what they measure: the page must not see it), never to wait for
something to happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

from runtimes.base import InputEvent, KeyEvent, PointerEvent
from runtimes.cdp import CDPClient, CDPError
from runtimes.cdp_input import WHEEL_PIXELS, CDPInput, InputMapper
from runtimes.chromium import devtools_port
from runtimes.page_clock import (
    EPOCH_MS,
    FRAME_MS,
    ClockMissing,
    PageClock,
    StepTiming,
    measure,
    no_caret_blink_env,
)
from runtimes.xdisplay import XvncDisplay
from tests.runtimes.display import alive

try:
    from runtimes.browser import TASK_AREA
    from runtimes.chromium import CHROMIUM_FLAGS, find_chromium, html_dir
except ModuleNotFoundError as exc:  # miniwob, Xvnc or Chromium is not installed
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = pytest.mark.timeout(120)

WIDTH, HEIGHT = 640, 480
SCREEN: Final = (0, 0, WIDTH, HEIGHT)
#: Seconds Chromium may take to write its DevTools port.
START_TIMEOUT: Final = 30.0
#: MiniWoB's reward globals, read after each step.
OUTCOME: Final = "[WOB_DONE_GLOBAL, WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_EPISODE_ID]"


@pytest.fixture(autouse=True)
def _browser_installed() -> None:
    if MISSING is not None:
        pytest.skip(MISSING)


@dataclass
class Page:
    cdp: CDPClient
    clock: PageClock
    input: CDPInput
    display: XvncDisplay

    async def load(self, page: str) -> None:
        await self.cdp.navigate((html_dir() / page).as_uri())
        await self.cdp.wait_for("typeof core === 'object' && core.cover_div != null")


@contextlib.asynccontextmanager
async def browser(
    *, clock: bool = True, blink: bool = False, flags: Sequence[str] = ()
) -> AsyncIterator[Page]:
    """Xvnc plus Chromium (the runtime's flags and ``flags``) on about:blank, with the
    clock installed for the documents it loads (in real time); every process is gone
    afterwards."""
    display = XvncDisplay(WIDTH, HEIGHT)
    await display.start()
    profile = Path(tempfile.mkdtemp(prefix="page-clock-"))
    pids: list[int] = []
    try:
        (profile / "tmp").mkdir()
        env = {"TMPDIR": str(profile / "tmp")}
        if not blink:
            env.update(no_caret_blink_env(profile / "config"))
        argv = [find_chromium(), *CHROMIUM_FLAGS, *flags, f"--window-size={WIDTH},{HEIGHT}",
                f"--user-data-dir={profile}", "about:blank"]
        program = display.spawn(argv, name="chromium", env=env)
        port = await devtools_port(profile, program)
        cdp = await CDPClient.connect(port)
        try:
            clock_ = PageClock(cdp)
            # Double clicks are judged by page time; wheel scrolling lands by the next frame.
            cdp_input = CDPInput(
                cdp, now=lambda: clock_.state.now if clock_.state else 0.0,
                after_wheel=clock_.rendered,
            )
            page = Page(cdp, clock_, cdp_input, display)
            await page.input.unbuffered()
            if clock:
                await page.clock.install()
            yield page
        finally:
            pids = display.pids()
            await cdp.close()
    finally:
        await display.aclose()
        shutil.rmtree(profile, ignore_errors=True)
    assert not [pid for pid in pids if alive(pid)], "Xvnc or Chromium left running"


def digest(pixels: np.ndarray) -> str:
    return hashlib.sha256(pixels.tobytes()).hexdigest()[:16]


def click(x: int, y: int) -> list[InputEvent]:
    return [PointerEvent(x, y, 0), PointerEvent(x, y, 1), PointerEvent(x, y, 0)]


def type_text(text: str) -> list[InputEvent]:
    events: list[InputEvent] = []
    for char in text:
        events += [KeyEvent(char, True), KeyEvent(char, False)]
    return events


async def centre(page: Page, selector: str) -> tuple[int, int]:
    """Where an element is (reading the page; the tests act only through CDPInput)."""
    x, y = await page.cdp.evaluate(
        f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect(); "
        "return [Math.round(r.x + r.width / 2), Math.round(r.y + r.height / 2)]; })()"
    )
    return int(x), int(y)


# The clock -----------------------------------------------------------------------------------


async def test_page_time_stands_still_in_lockstep_and_moves_by_exactly_the_advance() -> None:
    async with browser() as page:
        await page.load("click-test.html")
        state = await page.clock.pause(at_ms=EPOCH_MS)
        assert state.lockstep and state.date == EPOCH_MS
        await page.cdp.evaluate(
            "window.fired = []; setTimeout(() => fired.push(Date.now()), 50); "
            "window.ticks = 0; setInterval(() => ticks++, 20); "
            "window.frames = []; (function f(t) { frames.push(t); requestAnimationFrame(f); })(0); 0"
        )
        perf = await page.cdp.evaluate("performance.now()")
        wall = time.monotonic()
        await asyncio.sleep(0.3)  # wall time passes: the page must not see it
        assert time.monotonic() - wall >= 0.3
        seen = await page.cdp.evaluate(
            "[Date.now(), performance.now(), fired.length, ticks, frames.length, "
            "new Date().getTime(), Date.parse(Date())]"
        )
        assert seen == [EPOCH_MS, perf, 0, 0, 1, EPOCH_MS, EPOCH_MS]

        state = await page.clock.advance(49)
        assert state.date == EPOCH_MS + 49 and state.now == perf + 49
        assert await page.cdp.evaluate("[fired.length, ticks]") == [0, 2]
        await page.clock.advance(1)
        assert await page.cdp.evaluate("[fired, ticks]") == [[EPOCH_MS + 50], 2]
        await page.clock.advance(1000 - 50)
        ticks, frames = await page.cdp.evaluate("[ticks, frames.slice(1)]")
        assert ticks == 50
        # 60 frames a second of page time, each stamped with its page time.
        assert len(frames) == 60
        assert frames == pytest.approx([perf + FRAME_MS * (i + 1) for i in range(60)])
        assert (await page.clock.read()).now == perf + 1000


async def test_miniwob_time_limit_waits_for_the_agent_in_lockstep() -> None:
    """The episode's limit (made 300 ms here; 10 s in the tasks) counts page time: wall
    time past it ends nothing; page time at it ends the episode with -1."""
    async with browser() as page:
        await page.load("click-test.html")
        await page.cdp.evaluate("core.EPISODE_MAX_TIME = 300")
        await page.clock.pause()
        await page.cdp.evaluate("Math.seedrandom(1); core.startEpisodeReal(); 0")
        wall = time.monotonic()
        await asyncio.sleep(0.5)  # wall time past the limit
        assert time.monotonic() - wall > 0.3
        assert await page.cdp.evaluate(OUTCOME) == [False, 0, 0, 0]
        await page.clock.advance(299.5)
        assert (await page.cdp.evaluate(OUTCOME))[0] is False
        await page.clock.advance(0.5)
        done, reward, raw, episodes = await page.cdp.evaluate(OUTCOME)
        assert (done, reward, raw, episodes) == (True, -1, -1, 1)
        assert await page.cdp.evaluate("WOB_REWARD_REASON") == "timed out"


async def test_a_fast_answer_pays_what_page_time_says() -> None:
    """MiniWoB scales rewards by the time taken: in lockstep that is page time, exact."""
    async with browser() as page:
        await page.load("click-test.html")
        await page.clock.pause()
        await page.cdp.evaluate("Math.seedrandom(2); core.startEpisodeReal(); 0")
        await page.clock.advance(2500)
        await page.input.send(click(*await centre(page, "#subbtn")))
        done, reward, raw, _ = await page.cdp.evaluate(OUTCOME)
        assert done and raw == 1 and reward == pytest.approx(1 - 2500 / 10000)


async def test_resume_gives_real_time_back() -> None:
    async with browser() as page:
        await page.load("click-test.html")
        await page.clock.pause()
        await page.cdp.evaluate("window.fired = 0; setTimeout(() => fired++, 30); 0")
        await page.clock.advance(10)
        before = (await page.clock.read()).now
        state = await page.clock.resume()
        assert not state.lockstep and state.now >= before
        await page.cdp.wait_for("fired === 1", timeout=5)  # the rest of its 30 ms, on the wall clock
        now = await page.cdp.evaluate("[Date.now(), performance.now()]")
        assert abs(now[0] - time.time() * 1000) < 5000  # the real date again
        assert now[1] >= before
        with pytest.raises(CDPError, match="lockstep"):
            await page.clock.advance(10)


async def test_a_page_without_the_clock_is_named_and_can_take_it_late() -> None:
    async with browser(clock=False) as page:
        await page.load("click-test.html")
        with pytest.raises(ClockMissing, match="install"):
            await page.clock.pause()
        # A timer set on the browser's own clock, before ours came, can still be cleared.
        await page.cdp.evaluate(
            "window.early = 0; window.timer = setTimeout(() => early++, 100); "
            "window.ticker = setTimeout(() => early += 10, 100); 0"
        )
        await page.clock.install()  # current=True: into the loaded document too
        await page.cdp.evaluate("clearTimeout(timer); 0")
        await page.cdp.wait_for("early === 10", timeout=5)  # the one not cleared fired
        assert await page.cdp.evaluate("early") == 10
        assert (await page.clock.pause()).lockstep


async def test_css_animations_move_with_page_time_only(tmp_path: Path) -> None:
    html = tmp_path / "anim.html"
    html.write_text(
        "<style>body{margin:0} #bar{width:0;height:20px;background:#00f;"
        "transition:width 1s linear} #bar.on{width:200px}"
        "#spin{width:20px;height:20px;background:#f00;animation:move 2s linear infinite}"
        "@keyframes move{from{margin-left:0}to{margin-left:100px}}</style>"
        "<div id=bar></div><div id=spin></div>"
    )
    async with browser() as page:
        await page.cdp.navigate(html.as_uri())
        await page.clock.pause()
        await page.clock.advance(FRAME_MS)
        await page.cdp.evaluate("document.getElementById('bar').classList.add('on'); 0")
        await page.clock.advance(FRAME_MS)  # the frame that holds the new transition at 0
        frames = [await page.clock.screenshot((0, 0, 320, 40))]
        await asyncio.sleep(0.3)  # wall time: nothing may move
        frames.append(await page.clock.screenshot((0, 0, 320, 40)))
        assert digest(frames[0]) == digest(frames[1])
        await page.clock.advance(500)
        width = await page.cdp.evaluate("document.getElementById('bar').getBoundingClientRect().width")
        assert width == pytest.approx(100, abs=2)
        await page.clock.advance(600)
        width = await page.cdp.evaluate("document.getElementById('bar').getBoundingClientRect().width")
        assert width == 200
        page_pixels = await page.clock.screenshot((0, 0, 320, 40))
        blue = (page_pixels[10] == (0, 0, 255)).all(axis=1)
        assert 198 <= int(blue.sum()) <= 202, int(blue.sum())
        assert digest(page_pixels) != digest(frames[0])


async def test_the_caret_is_drawn_and_holds_still() -> None:
    async with browser() as page:
        await page.load("enter-text.html")
        await page.clock.pause()
        await page.cdp.evaluate("Math.seedrandom(1); core.startEpisodeReal(); 0")
        await page.clock.advance(FRAME_MS)
        blurred = await page.clock.screenshot(TASK_AREA)
        await page.input.send(click(*await centre(page, "#tt")))
        await page.clock.advance(FRAME_MS)
        shots = []
        for _ in range(8):  # 1.2 s of wall time: two blinks of a blinking caret
            shots.append(digest(await page.clock.screenshot(TASK_AREA)))
            await asyncio.sleep(0.15)
        assert len(set(shots)) == 1
        assert shots[0] != digest(blurred)  # the caret (and focus ring) is on screen


# Determinism ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    frames: list[str]
    outcomes: list[list[Any]]
    utterance: str


async def play(page_name: str, seed: int, steps: Sequence[Sequence[InputEvent]]) -> Run:
    """A fresh browser, the task with ``seed`` in lockstep, one advance of a frame and one
    screenshot of the whole screen (task and MiniWoB's panel with its countdown) per step."""
    async with browser() as page:
        await page.load(page_name)
        await page.clock.pause()
        utterance = await page.cdp.evaluate(
            f"(() => {{ Math.seedrandom({seed}); core.startEpisodeReal(); "
            "return core.getUtterance(); })()"
        )
        frames, outcomes = [], []
        for i, events in enumerate(steps):
            await page.input.send(events)
            await page.clock.advance(FRAME_MS if i % 4 else 1000)  # the countdown moves too
            frames.append(digest(await page.clock.screenshot(SCREEN)))
            outcomes.append(await page.cdp.evaluate(OUTCOME))
        return Run(frames, outcomes, str(utterance))


#: Per task: fixed actions. click-test's button, a click-button answer slot, and
#: enter-text's field, typing (with Shift and BackSpace) and its submit button.
WANDER: Final[list[list[InputEvent]]] = [[PointerEvent(40 + 10 * i, 90 + 12 * i, 0)] for i in range(4)]
TASKS: Final[dict[str, list[list[InputEvent]]]] = {
    "click-test.html": [[PointerEvent(20, 60, 0)], [], *WANDER, click(80, 120), []],
    "click-button.html": [[], click(30, 80), [], [PointerEvent(90, 150, 0)], click(60, 110), []],
    "enter-text.html": [
        click(80, 90), type_text("ab"), [KeyEvent("Shift_L", True)], type_text("C"),
        [KeyEvent("Shift_L", False)], type_text("x"), [KeyEvent("BackSpace", True),
        KeyEvent("BackSpace", False)], [], click(40, 130), [],
    ],
}


@pytest.mark.parametrize("page_name", sorted(TASKS))
async def test_same_seed_and_actions_give_the_same_frames_and_rewards(page_name: str) -> None:
    steps = TASKS[page_name]
    first = await play(page_name, 7, steps)
    again = await play(page_name, 7, steps)
    assert again.utterance == first.utterance
    assert again.frames == first.frames
    assert again.outcomes == first.outcomes
    assert len(set(first.frames)) > 2  # the steps changed the screen
    other = await play(page_name, 8, steps)
    assert other.frames != first.frames


async def test_a_click_ends_the_episode_with_the_same_reward_every_run() -> None:
    """A run that earns a reward (the button found on a probe run), twice, identical."""
    async with browser() as page:
        await page.load("click-test.html")
        await page.clock.pause()
        await page.cdp.evaluate("Math.seedrandom(5); core.startEpisodeReal(); 0")
        button = await centre(page, "#subbtn")
    steps: list[list[InputEvent]] = [[], [PointerEvent(*button, 0)], [], click(*button), []]
    runs = [await play("click-test.html", 5, steps) for _ in range(2)]
    assert runs[0] == runs[1]
    done, reward, raw, episodes = runs[0].outcomes[3]
    assert done and raw == 1 and episodes == 1
    assert reward == pytest.approx(1 - int(1000 + 2 * FRAME_MS) / 10000)  # Date: whole ms


# Input ---------------------------------------------------------------------------------------


async def test_typing_shortcuts_double_click_and_enter() -> None:
    async with browser() as page:
        await page.load("enter-text.html")
        await page.clock.pause()
        await page.cdp.evaluate("Math.seedrandom(3); core.startEpisodeReal(); 0")
        field = await centre(page, "#tt")
        await page.input.send(click(*field) + type_text("Hi there, ~{ok}!"))
        assert await page.cdp.evaluate("document.getElementById('tt').value") == "Hi there, ~{ok}!"
        await page.input.send([KeyEvent("Control_L", True), KeyEvent("a", True),
                               KeyEvent("a", False), KeyEvent("Control_L", False)])
        await page.input.send(type_text("new"))
        assert await page.cdp.evaluate("document.getElementById('tt').value") == "new"
        await page.input.send([KeyEvent("Left", True), KeyEvent("Left", False)] + type_text("X")
                              + [KeyEvent("Home", True), KeyEvent("Home", False),
                                 KeyEvent("Delete", True), KeyEvent("Delete", False)])
        assert await page.cdp.evaluate("document.getElementById('tt').value") == "eXw"
        # A double click within DOUBLE_CLICK_MS of page time selects the word.
        await page.input.send([KeyEvent("End", True), KeyEvent("End", False)] + type_text(" word"))
        x, y = field
        await page.input.send(click(x - 40, y))
        await page.clock.advance(100)
        await page.input.send(click(x - 40, y))
        selected = await page.cdp.evaluate(
            "(() => { const t = document.getElementById('tt'); "
            "return t.value.slice(t.selectionStart, t.selectionEnd); })()"
        )
        assert selected == "eXw"
        # Return reaches the page as Enter with its keypress.
        await page.cdp.evaluate(
            "window.keys = []; document.getElementById('tt').addEventListener('keypress', "
            "e => keys.push(e.key + ':' + e.keyCode)); 0"
        )
        await page.input.send([KeyEvent("Return", True), KeyEvent("Return", False)])
        assert await page.cdp.evaluate("keys") == ["Enter:13"]


async def test_wheel_scrolls_as_far_as_an_x_wheel_notch(tmp_path: Path) -> None:
    html = tmp_path / "long.html"
    html.write_text("<body style='margin:0'><div style='height:5000px'>long</div></body>")
    async with browser() as page:
        await page.cdp.navigate(html.as_uri())
        await page.clock.pause()
        await page.input.send([PointerEvent(100, 100, 0), PointerEvent(100, 100, 16),
                               PointerEvent(100, 100, 0)])
        # Scrolled when send() returns (it waits for Chromium's next frame), in one go: no
        # smooth-scrolling animation over the wall clock.
        assert await page.cdp.evaluate("window.scrollY") == WHEEL_PIXELS
        await page.clock.screenshot((0, 0, 10, 10))
        assert await page.cdp.evaluate("window.scrollY") == WHEEL_PIXELS
        await page.input.send([PointerEvent(100, 100, 8), PointerEvent(100, 100, 0)])
        assert await page.cdp.evaluate("window.scrollY") == 0
        # The same notch through X (xdotool: button 5 is wheel down) ends as far down,
        # animated over the wall clock.
        subprocess.run(["xdotool", "mousemove", "100", "100", "click", "5"],
                       env=page.display.env, check=True, timeout=10)
        await page.cdp.wait_for(f"window.scrollY >= {WHEEL_PIXELS}", timeout=5)
        await page.clock.screenshot((0, 0, 10, 10))  # a frame later: still there, no further
        assert await page.cdp.evaluate("window.scrollY") == WHEEL_PIXELS


def test_mapper_keeps_buttons_and_modifiers() -> None:
    mapper = InputMapper(now=lambda: 0.0)
    assert [c[1]["type"] for c in mapper.map(PointerEvent(5, 6, 1))] == ["mouseMoved", "mousePressed"]
    assert mapper.map(PointerEvent(5, 6, 1)) == []  # nothing changed
    (method, moved), = mapper.map(PointerEvent(7, 6, 1))  # a drag: left held while moving
    assert (method, moved["type"], moved["button"], moved["buttons"]) == (
        "Input.dispatchMouseEvent", "mouseMoved", "left", 1)
    mapper.map(KeyEvent("Shift_R", True))
    released = mapper.map(PointerEvent(7, 6, 0))[0][1]
    assert (released["type"], released["modifiers"], released["buttons"]) == ("mouseReleased", 8, 0)
    down = mapper.map(KeyEvent("exclam", True))[0][1]
    assert (down["key"], down["code"], down["windowsVirtualKeyCode"], down["text"]) == (
        "!", "Digit1", 49, "!")
    with pytest.raises(ValueError, match="no DevTools key"):
        mapper.map(KeyEvent("F13", True))
    assert {c[1]["type"] for c in mapper.release()} == {"keyUp"}


# Events of the DevTools connection -------------------------------------------------------------


async def test_cdp_events_reach_listeners_and_waiters() -> None:
    async with browser(clock=False) as page:
        heard: list[str] = []
        stop = page.cdp.on("Runtime.consoleAPICalled",
                           lambda params: heard.append(params["args"][0]["value"]))
        await page.cdp.call("Runtime.enable")
        following = page.cdp.next_event("Runtime.consoleAPICalled")
        await page.cdp.evaluate("console.log('one'); 0")
        assert (await asyncio.wait_for(following, 10))["args"][0]["value"] == "one"
        await page.cdp.wait_for("true")
        async with asyncio.timeout(10):
            while heard != ["one"]:
                await asyncio.sleep(0.01)
        stop()
        await page.cdp.evaluate("console.log('two'); 0")
        last = page.cdp.next_event("Runtime.consoleAPICalled")
        await page.cdp.evaluate("console.log('three'); 0")
        assert (await asyncio.wait_for(last, 10))["args"][0]["value"] == "three"
        assert heard == ["one"]


# Speed -----------------------------------------------------------------------------------------


async def measure_task(page_name: str, steps: int = 60, flags: Sequence[str] = ()) -> StepTiming:
    """Lockstep steps per second on a MiniWoB task: the pointer wanders over the task, a
    click every 10 steps, a frame of page time and a screenshot of the task per step."""
    async with browser(flags=flags) as page:
        await page.load(page_name)
        await page.clock.pause()
        await page.cdp.evaluate("Math.seedrandom(1); core.startEpisodeReal(); 0")

        async def act(i: int) -> None:
            x, y = 10 + (i * 7) % 140, 60 + (i * 11) % 140
            await page.input.send(click(x, y) if i % 10 == 9 else [PointerEvent(x, y, 0)])

        return await measure(page.clock, act, steps=steps, clip=TASK_AREA)


async def test_lockstep_speed_on_three_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    lines = []
    for page_name in ("click-test.html", "click-button.html", "enter-text.html"):
        timing = await measure_task(page_name)
        lines.append(timing.line(page_name))
        assert timing.steps_per_second > 2  # loose: a loaded 2-core machine
    with capsys.disabled():
        print("\n" + "\n".join(lines))


@pytest.mark.parametrize("page_name", ["click-button.html", "enter-text.html"])
async def test_episodes_replayed_in_one_page_draw_the_same_task(page_name: str) -> None:
    """As the runtime plays them: one page, a reset (pause at EPOCH_MS, seed, start) per
    episode. The task area repeats; MiniWoB's panel keeps its history, so it is left out."""
    steps = TASKS[page_name]
    async with browser() as page:
        await page.load(page_name)
        runs = []
        for _ in range(2):
            await page.clock.pause(at_ms=EPOCH_MS)
            await page.cdp.evaluate("Math.seedrandom(7); core.startEpisodeReal(); 0")
            frames = []
            for events in steps:
                await page.input.send(events)
                await page.clock.advance(FRAME_MS)
                frames.append(digest(await page.clock.screenshot(TASK_AREA)))
            runs.append((frames, await page.cdp.evaluate("[WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL]")))
            await page.input.release()
        assert runs[0] == runs[1]
