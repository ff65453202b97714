"""Lockstep frames from the display (``runtimes.frame_witness``) and DevTools input in runs.

Covers, on one MiniWoB runtime in this process (real Xvnc and Chromium): each lockstep
step's frame, taken from the display once the witness shows, has exactly the pixels of a
screenshot of the page then, and the old way (screenshots) gives the same frame; the
witness is drawn on the display outside the served area and is nowhere in the page's DOM;
a real-time reset takes it off the screen; a click and a run of keys sent in one call
reach the page in order. Without a display: the witness refuses an area it lies in, and
a reset's release forgets the click history. Determinism over runs (busy loops beside)
is ``test_browser_lockstep.py``'s.
"""

from __future__ import annotations

import numpy as np
import pytest

from runtimes.base import KeyEvent, PointerEvent
from runtimes.cdp_input import InputMapper
from runtimes.frame_witness import CAPTURE_ENV, FrameWitness
from tests.runtimes.test_browser import _browser_family_installed  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("_browser_family_installed")

#: Clicks over click-checkboxes' boxes and labels (task-area pixels), then no input.
CLICKS = [(12, 62), (12, 84), (30, 62), (12, 106), (80, 150), (12, 128), (12, 62)]


async def test_display_frames_are_the_page_and_the_witness_is_not_in_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtimes import registry

    runtime = registry.lookup("miniwob.ClickCheckboxes-v0")()
    await runtime.astart()
    try:
        runtime.mode = "lockstep"
        await runtime.areset(3)
        assert runtime.cdp is not None and runtime.clock is not None
        elements = await runtime.cdp.evaluate("document.getElementsByTagName('*').length")
        area = (0, 0, runtime.width, runtime.height)
        frames = []
        for x, y in [*CLICKS, (0, 0)]:
            events = [PointerEvent(x, y, 1), PointerEvent(x, y, 0)] if x else []
            await runtime.aadvance(events, 1)
            frames.append(runtime.framebuffer.copy())
            assert np.array_equal(frames[-1], await runtime.clock.screenshot(area))
        assert len({f.tobytes() for f in frames}) > 2  # the clicks changed the page
        witness = runtime.host.witness
        assert witness is not None and witness.shown  # the frames came from the display
        assert await runtime.cdp.evaluate("document.getElementsByTagName('*').length") == elements
        assert runtime.screen is not None
        wx, wy, ww, wh = witness.rect
        on_display = runtime.screen.framebuffer[wy : wy + wh, wx : wx + ww]
        in_page = await runtime.clock.screenshot(witness.rect)
        assert not np.array_equal(on_display, in_page)  # drawn over the page, not in it

        monkeypatch.setenv(CAPTURE_ENV, "screenshot")  # the old way: the same frame
        await runtime.aadvance([], 1)
        assert np.array_equal(runtime.framebuffer, frames[-1])
        monkeypatch.delenv(CAPTURE_ENV)

        runtime.mode = "realtime"
        await runtime.areset(4)
        assert not witness.shown
    finally:
        await runtime.aclose()


async def test_a_click_and_a_run_of_keys_reach_the_field_in_order() -> None:
    from runtimes import registry

    runtime = registry.lookup("miniwob.EnterText-v0")()
    await runtime.astart()
    try:
        runtime.mode = "lockstep"
        await runtime.areset(1)
        assert runtime.cdp is not None and runtime.page_input is not None
        x, y = await runtime.cdp.evaluate(
            "(() => { const r = document.querySelector('#tt').getBoundingClientRect(); "
            "return [Math.round(r.x + r.width / 2), Math.round(r.y + r.height / 2)]; })()"
        )
        typed = [KeyEvent(k, down) for k in "Hello" for down in (True, False)]
        shift = [KeyEvent("Shift_L", True), KeyEvent("W", True), KeyEvent("W", False),
                 KeyEvent("Shift_L", False)]
        await runtime.page_input.send([PointerEvent(x, y, 1), PointerEvent(x, y, 0), *typed, *shift,
                                       KeyEvent("BackSpace", True), KeyEvent("BackSpace", False),
                                       *typed[:2]])
        assert await runtime.cdp.evaluate("document.querySelector('#tt').value") == "HelloH"
    finally:
        await runtime.aclose()


def test_the_witness_refuses_an_area_it_lies_in() -> None:
    witness = FrameWitness(None, None, (640, 480))  # type: ignore[arg-type]
    assert witness.usable_for((0, 0, 160, 210))
    assert not witness.usable_for((0, 0, 640, 480))


def test_a_release_forgets_the_click_history() -> None:
    mapper = InputMapper(now=lambda: 0.0)
    mapper.map(PointerEvent(5, 6, 1))
    mapper.map(PointerEvent(5, 6, 0))
    assert mapper.map(PointerEvent(5, 6, 1))[-1][1]["clickCount"] == 2  # a double click
    mapper.map(PointerEvent(5, 6, 0))
    mapper.release()  # a reset: the next click is a first one
    assert mapper.map(PointerEvent(5, 6, 1))[-1][1]["clickCount"] == 1
