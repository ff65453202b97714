"""Settling on a real page (Chromium on Xvnc): the page says when it is idle.

One MiniWoB runtime for the module (Chromium and Xvnc started once). DevTools only sets
the stage — a square over the task whose click handler changes it now, later, or never
— and the click goes in as real X input, as an agent's does. What is asserted is why a
wait ended (``by``) and what the settled frame shows, never how fast it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from runtimes.base import PointerEvent
from runtimes.settle import BY_PAGE, BY_QUIET, QUIET_SECONDS

try:
    from runtimes.browser import RUNTIMES, MiniWoBRuntime
except ModuleNotFoundError as exc:  # miniwob, Xvnc or Chromium is not installed
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]

#: The square: where it is on the screen (inside the served task area) and its colours.
SQUARE = (20, 60, 120, 120)
RED, BLUE, GREEN = (255, 0, 0), (0, 0, 255), (0, 160, 0)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runtime() -> AsyncIterator[MiniWoBRuntime]:
    if MISSING is not None:
        pytest.skip(MISSING)  # (conftest fails the skip in CI)
    rt = RUNTIMES["miniwob.ClickTest-v0"]()
    await rt.astart()
    try:
        await rt.areset(1)
        yield rt
    finally:
        await rt.aclose()


async def stage(rt: MiniWoBRuntime, handler: str) -> None:
    """A red square over the task; a click on it runs ``handler`` (``el`` is the square).
    Returns once the display shows it (the frame taken)."""
    x, y, w, h = SQUARE
    assert rt.cdp is not None
    await rt.cdp.evaluate(f"""(() => {{
        document.getElementById('settle-square')?.remove();
        const el = document.createElement('div');
        el.id = 'settle-square';
        el.style.cssText = 'position:fixed;left:{x}px;top:{y}px;width:{w}px;height:{h}px;' +
                           'z-index:99999;background:rgb{RED}';
        el.addEventListener('click', () => {{ {handler} }});
        document.body.appendChild(el);
        return 0;
    }})()""")
    rt.settle_watch()  # (its own wait: the square is drawn and still)
    await rt.asettle()
    assert colour(rt) == RED


def colour(rt: MiniWoBRuntime) -> tuple[int, int, int]:
    """The square's colour in the runtime's frame (the served, settled screen)."""
    x, y, w, h = SQUARE
    return tuple(int(v) for v in rt.framebuffer[y + h // 2, x + w // 2])  # type: ignore[return-value]


async def click_and_settle(rt: MiniWoBRuntime) -> dict[str, object]:
    x, y, w, h = SQUARE
    cx, cy = x + w // 2, y + h // 2
    rt.settle_watch()
    rt.inject([PointerEvent(cx, cy, 0), PointerEvent(cx, cy, 1), PointerEvent(cx, cy, 0)])
    return await rt.asettle()


async def test_an_idle_page_settles_by_saying_so(runtime: MiniWoBRuntime) -> None:
    """A click whose handler paints at once: the page has handled it and has nothing
    pending, so the wait ends by the page, not by the quiet window, on the new colour."""
    await stage(runtime, f"el.style.background = 'rgb{BLUE}';")
    settle = await click_and_settle(runtime)
    assert settle["by"] == BY_PAGE, settle
    assert settle["react_s"] is not None and not settle["deadline_hit"]
    assert colour(runtime) == BLUE


async def test_a_timer_due_after_the_quiet_window_is_waited_for(runtime: MiniWoBRuntime) -> None:
    """The click changes nothing at once and sets ``setTimeout(..., 400)``, which paints:
    the old quiet window (0.3 s) ended before it; the page's pending timer holds the wait
    until the change is on the screen."""
    await stage(runtime, f"setTimeout(() => {{ el.style.background = 'rgb{BLUE}'; }}, 400);")
    settle = await click_and_settle(runtime)
    assert colour(runtime) == BLUE, settle
    assert settle["by"] == BY_PAGE and settle["react_s"] is not None
    assert settle["react_s"] >= QUIET_SECONDS  # (the change came after the old window)


async def test_a_timer_set_before_the_wait_and_a_transition_are_waited_for(
    runtime: MiniWoBRuntime,
) -> None:
    """No input at all: a timer the page set earlier (due in 0.4 s) starts a 0.3 s CSS
    transition; the settled frame shows where the transition ends."""
    await stage(runtime, "")
    assert runtime.cdp is not None
    await runtime.cdp.evaluate(f"""(() => {{
        const el = document.getElementById('settle-square');
        el.style.transition = 'background-color 0.3s linear';
        setTimeout(() => {{ el.style.backgroundColor = 'rgb{GREEN}'; }}, 400);
        return 0;
    }})()""")
    runtime.settle_watch()
    settle = await runtime.asettle()
    assert colour(runtime) == GREEN, settle
    assert settle["by"] == BY_PAGE


async def test_a_page_busy_with_no_end_falls_back_to_the_quiet_window(
    runtime: MiniWoBRuntime,
) -> None:
    """A loop of animation frames that draws nothing: the page cannot say when it ends,
    so the screen's stillness decides (the quiet window)."""
    await stage(runtime, f"el.style.background = 'rgb{BLUE}';")
    assert runtime.cdp is not None
    await runtime.cdp.evaluate(
        "(() => { window.settleLoop = true; const f = () => { if (window.settleLoop) "
        "requestAnimationFrame(f); }; f(); return 0; })()"
    )
    try:
        settle = await click_and_settle(runtime)
    finally:
        await runtime.cdp.evaluate("window.settleLoop = false")
    assert settle["by"] == BY_QUIET, settle
    assert settle["settled_s"] >= QUIET_SECONDS  # type: ignore[operator]
    assert colour(runtime) == BLUE
