"""Lockstep frames from the X display, once the display shows the page as it is now.

Holds :class:`FrameWitness` and its limits, :func:`agreed_screenshot` (the old way, kept
where the witness cannot serve) and :func:`capture_way`. Chromium's ``Page.captureScreenshot`` asks
the compositor for a new frame and waits several frame periods for it; a lockstep step
took one screenshot, and a second (or more) whenever the page had changed, until two
agreed. The remote already receives every frame Chromium presents on its Xvnc display
(``runtimes.xruntime``), so the frame is there for the taking — once we know that the
frame on the display is one drawn after the step's last change.

The witness says when. After the step, a small rectangle outside the served area gets a
colour of its own (a counter), drawn by DevTools' overlay (``Overlay.highlightRect``):
not in the page's DOM, so no script, observer, hit test or page walk sees it. Chromium
draws the overlay in the page's own frames, so the first frame on the display that
shows the new colour was drawn after everything the step did to the page, and the served
area of that frame is the step's frame. A page frozen in lockstep changes no pixel of its
own between steps (timers, animation frames and animations wait for the page clock; the
caret does not blink), so that frame is the page's alone, as the two agreeing screenshots
were: ``tests/runtimes/test_browser_lockstep.py`` checks the same seed gives the same
frames beside busy loops, and ``python -m benchmarks browser_lockstep`` compares the
display's frames with screenshots and times both ways.

The witness must lie outside the served area (it would show in the frame): a runtime
serving the whole screen keeps screenshots.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Final

import numpy as np

from vncdriver.client import VNCClient

from .cdp import CDPClient
from .page_clock import PageClock

#: The witness's size in pixels, and its distance from the screen's bottom-right corner
#: (Chromium's kiosk window leaves the screen's last row and column black).
WITNESS_SIZE: Final = 4
WITNESS_INSET: Final = 8
#: Colours the counter runs through before it wraps (24-bit RGB).
COLOURS: Final = 1 << 24
#: Screenshots a step may take of a changed page until two agree (the old way).
MAX_SCREENSHOTS: Final = 4
#: Seconds to wait for the display to show the witness: past it (the display stalled, a
#: window covers the page) the caller takes a screenshot instead.
WITNESS_TIMEOUT: Final = 2.0

Rect = tuple[int, int, int, int]

#: Colours are counted across every witness of the process: a page that takes over
#: another's display (an env switch), or a browser started again, never finds its
#: first colour already there.
_counter = itertools.count(1)


class FrameWitness:
    """The witness of one page (``cdp``) on one display (``screen``, our RFB connection
    to it). :meth:`capture` a frame after each lockstep step; :meth:`hide` before real
    time. Calls must not overlap."""

    def __init__(self, cdp: CDPClient, screen: VNCClient, screen_size: tuple[int, int]) -> None:
        self.cdp, self.screen = cdp, screen
        width, height = screen_size
        x = width - WITNESS_INSET - WITNESS_SIZE
        y = height - WITNESS_INSET - WITNESS_SIZE
        #: Where the witness is drawn on the screen (x, y, width, height).
        self.rect: Rect = (x, y, WITNESS_SIZE, WITNESS_SIZE)
        self._enabled = False
        self.shown = False

    def usable_for(self, area: Rect) -> bool:
        """Whether the witness lies outside the served ``area`` (x, y, width, height)."""
        x, y, w, h = area
        wx, wy, ww, wh = self.rect
        return wx >= x + w or wy >= y + h or wx + ww <= x or wy + wh <= y

    async def capture(self, area: Rect, timeout: float = WITNESS_TIMEOUT) -> np.ndarray | None:
        """The served ``area`` of the first display frame drawn after this call began (a
        copy); None when the display did not show it within ``timeout`` seconds."""
        if not self._enabled:  # (the overlay needs the DOM domain)
            await self.cdp.call("DOM.enable")
            await self.cdp.call("Overlay.enable")
            self._enabled = True
        count = next(_counter) % COLOURS
        colour = ((count >> 16) & 255, (count >> 8) & 255, count & 255)
        x, y, w, h = self.rect
        await self.cdp.call("Overlay.highlightRect", {
            "x": x, "y": y, "width": w, "height": h,
            "color": {"r": colour[0], "g": colour[1], "b": colour[2], "a": 1},
        })
        self.shown = True
        deadline = time.monotonic() + timeout
        probe = (y + h // 2, x + w // 2)
        screen = self.screen
        while True:
            seen = screen.updates
            if tuple(screen.framebuffer[probe].tolist()) == colour:
                ax, ay, aw, ah = area
                return screen.framebuffer[ay : ay + ah, ax : ax + aw].copy()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                await screen.wait_update(seen, remaining)
            except TimeoutError:
                return None

    async def hide(self) -> None:
        """Take the witness off the screen (real time has no use for it)."""
        if self.shown:
            self.shown = False
            await self.cdp.call("Overlay.hideHighlight")


#: Environment variable choosing how lockstep frames are taken: ``display`` (the
#: default: the witness above) or ``screenshot`` (the old way: Chromium's screenshots
#: until two agree), for benchmarks that compare the two in one run.
CAPTURE_ENV: Final = "UNIVERSE_REMOTE_LOCKSTEP_CAPTURE"
CAPTURES: Final = ("display", "screenshot")


def capture_way() -> str:
    """The way :data:`CAPTURE_ENV` names (``display`` when unset); ValueError for others."""
    way = os.environ.get(CAPTURE_ENV) or CAPTURES[0]
    if way not in CAPTURES:
        raise ValueError(f"{CAPTURE_ENV} must be one of {', '.join(CAPTURES)}, not {way!r}")
    return way


async def agreed_screenshot(
    clock: PageClock, area: Rect, previous: np.ndarray | None
) -> np.ndarray:
    """The page's ``area`` as Chromium draws it for screenshots, taken until two agree
    (or one agrees with ``previous``, the last frame): the first may catch Chromium's
    raster mid-way, and the frame must be the page's alone. (Shots that agreed could
    still differ between runs by a grey level at an edge while Chromium rasterised
    partial tiles: ``runtimes.chromium.CHROMIUM_FLAGS`` turns that off.)"""
    shot = await clock.screenshot(area)
    for _ in range(MAX_SCREENSHOTS - 1):
        if previous is not None and np.array_equal(shot, previous):
            break
        previous, shot = shot, await clock.screenshot(area)
    return shot
