"""Settling on a real X program (xcalc on Xvnc): its damage timing sets the quiet window.

One xcalc for the module. Its buttons are clicked as an agent would (real X input); what
is asserted is that the windows shrank from the fixed one once the program's reactions
were seen, and that a settled frame is the screen as it stays (the frame a much longer
wait shows) — never how fast a wait was.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio

from runtimes.base import PointerEvent
from runtimes.settle import BY_QUIET, MIN_REACTIONS, QUIET_SECONDS

try:
    from runtimes.x11 import RUNTIMES, X11Runtime
except ModuleNotFoundError as exc:  # Xvnc is not installed
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]

#: Centres of xcalc's digit buttons 7, 8, 9, 4, 5, 6 on its 1024x768 window (five columns
#: of 200 px from x 20, rows of 58 px from y 122), and seconds of the long look.
DIGITS = [(312, 557), (511, 557), (711, 557), (312, 616), (511, 616), (711, 616)]
LONG_LOOK = 1.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def xcalc() -> AsyncIterator[X11Runtime]:
    if MISSING is not None:
        pytest.skip(MISSING)  # (conftest fails the skip in CI)
    if shutil.which("xcalc") is None:
        pytest.skip("xcalc is not installed: apt-get install x11-apps")
    rt = RUNTIMES["x11.XCalc-v0"]()
    await rt.astart()
    try:
        await rt.areset(0)
        yield rt
    finally:
        await rt.aclose()


async def click_and_settle(rt: X11Runtime, x: int, y: int) -> dict[str, object]:
    rt.settle_watch()
    rt.inject([PointerEvent(x, y, 0), PointerEvent(x, y, 1), PointerEvent(x, y, 0)])
    return await rt.asettle()


async def test_an_x_programs_quiet_window_is_learned_and_its_frames_are_final(
    xcalc: X11Runtime,
) -> None:
    assert xcalc.timing.quiet_window() == QUIET_SECONDS  # nothing seen yet: the fixed one
    wrong = 0
    for i in range(MIN_REACTIONS + 4):
        x, y = DIGITS[i % len(DIGITS)]
        settle = await click_and_settle(xcalc, x, y)
        assert settle["by"] == BY_QUIET and settle["react_s"] is not None, settle
        settled = xcalc.framebuffer.copy()
        await asyncio.sleep(LONG_LOOK)  # (a look at the screen much later, not a sync)
        xcalc.capture()
        wrong += not np.array_equal(settled, xcalc.framebuffer)
    assert xcalc.timing.learned
    assert xcalc.timing.quiet_window() < QUIET_SECONDS
    assert wrong == 0
