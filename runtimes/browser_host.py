"""A browser on a TigerVNC display: its lifecycle, a part of ``runtimes.browser``'s runtime.

Holds :class:`BrowserHost`: start Chromium on a display (kiosk mode, no window manager,
the page filling the screen from (0, 0)), the page clock, page tracker, DevTools input
and click hook installed on a blank page before the task page loads (so they run before
the task's own scripts), load the task; hand the browser to another runtime's host on an
env switch (a page load instead of starting Xvnc and Chromium again); stop it all. The
display itself is the runtime's (:class:`~runtimes.xruntime.DisplayRuntime`). The browser
keeps its one page (docs/browser.md, "Keys the browser keeps"): the browser's shortcuts
never reach it as X input (:attr:`BrowserHost.key_guard`, which the runtime's ``inject``
applies, as DevTools input does), a tab or window that opens anyway (a middle click on a
link) is closed as it appears (:class:`OnePage`), and a reset brings the zoom back to
100 %. What a task's episodes are and what web agents read and do are the other parts'
(:mod:`runtimes.browser_episodes`, :mod:`runtimes.browser_agents`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

from vncdriver.client import VNCClient

from .browser_keys import KeyGuard
from .cdp import CDPClient, CDPError
from .cdp_input import CTRL, CDPInput
from .chromium import (
    PAGE_TIMEOUT,
    READY_EXPRESSION,
    devtools_port,
    find_chromium,
    spawn_chromium,
)
from .frame_witness import WITNESS_TIMEOUT, FrameWitness, capture_way
from .page_clock import EPOCH_MS, PageClock, no_caret_blink_env
from .page_structure import install_click_hook
from .settle import InputFence
from .settle_page import PageIdle
from .xdisplay import XProgram, XvncDisplay, log_tail

log = logging.getLogger(__name__)

Rect = tuple[int, int, int, int]

SCREEN_WIDTH: Final = 640
SCREEN_HEIGHT: Final = 480
#: What Chromium shows before the task page loads: the page clock and the click hook are
#: installed first, so they run before the task's own scripts (as after an env switch).
BLANK_PAGE: Final = "about:blank"
#: Control+0 as DevTools key events: the browser's zoom back to 100 % (the one shortcut
#: the runtime itself sends; the guards keep it from everyone else).
_ZOOM_RESET: Final = tuple(
    ("Input.dispatchKeyEvent", {"type": kind, "modifiers": CTRL, "key": "0", "code": "Digit0",
                                "windowsVirtualKeyCode": 48, "nativeVirtualKeyCode": 48})
    for kind in ("rawKeyDown", "keyUp")
)


class OnePage:
    """Keeps the browser at its one page (DevTools' ``Target`` domain, on the page's own
    connection): a page target that appears (a tab, a window, DevTools' own window) is
    closed at once and ours brought to the front; :meth:`restore` does it again and
    puts the zoom back, for a reset. Tabs opened by clicks (a middle click or Control+click
    on a link) come this way: no key filter sees them."""

    def __init__(self, cdp: CDPClient) -> None:
        self.cdp = cdp
        self.page_id = cdp.url.rsplit("/", 1)[-1]
        #: Targets closed so far (tests and logs).
        self.closed = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def install(self) -> None:
        self.cdp.on("Target.targetCreated", self._created)
        await self.cdp.call("Target.setDiscoverTargets", {"discover": True})

    def _created(self, params: dict[str, Any]) -> None:
        info = params.get("targetInfo") or {}
        if info.get("type") == "page" and info.get("targetId") not in (None, self.page_id):
            task = asyncio.get_running_loop().create_task(self._close([str(info["targetId"])]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _close(self, ids: list[str]) -> None:
        for target in ids:
            log.warning("the browser opened another page (%s); closing it", target)
            with contextlib.suppress(CDPError):  # (gone already)
                await self.cdp.call("Target.closeTarget", {"targetId": target})
            self.closed += 1
        with contextlib.suppress(CDPError):
            await self.cdp.call("Target.activateTarget", {"targetId": self.page_id})

    async def restore(self) -> bool:
        """Close any other page and put the zoom back to 100 %; False when the zoom
        stays (the caller starts the browser again)."""
        infos = (await self.cdp.call("Target.getTargets")).get("targetInfos", [])
        others = [str(t["targetId"]) for t in infos
                  if t.get("type") == "page" and t.get("targetId") != self.page_id]
        if others:
            await self._close(others)
        if await self.cdp.evaluate("window.devicePixelRatio") == 1:
            return True
        log.warning("the page is zoomed; setting the zoom back to 100 %")
        await self.cdp.call_many(list(_ZOOM_RESET))
        return bool(await self.cdp.evaluate("window.devicePixelRatio") == 1)


class BrowserHost:
    """Chromium on an X display, showing one task page: the browser's process and profile,
    its DevTools connection and what is installed in its page (clock, tracker, input, one
    page, the frame witness), owned here and written only here. The runtime holds one
    (:attr:`runtimes.browser.MiniWoBRuntime.host`) and, at an env switch, the new runtime's
    host takes the old one's browser (:meth:`take_from`)."""

    def __init__(self) -> None:
        self.browser: XProgram | None = None
        self.cdp: CDPClient | None = None
        #: The page's clock (lockstep) and its DevTools input (lockstep's input).
        self.clock: PageClock | None = None
        self.page_input: CDPInput | None = None
        #: The page's tracker (runtimes.settle_page): when the page is idle.
        self.page_idle: PageIdle | None = None
        #: Takes the browser's shortcuts out of the X input (runtimes.browser_keys).
        self.key_guard = KeyGuard()
        #: Closes other pages as they open; a reset's zoom and page check.
        self.one_page: OnePage | None = None
        #: Lockstep's frames from the display (made at the first lockstep frame).
        self.witness: FrameWitness | None = None
        self._paused = False  # the clock is in lockstep
        self._chromium: str | None = None
        self._profile: Path | None = None

    @property
    def paused(self) -> bool:
        """The page's clock is paused: the page is in lockstep, its time moves by steps."""
        return self._paused

    @property
    def ready(self) -> bool:
        """The browser runs, its DevTools connection is up and the page's parts are in."""
        return (self.browser is not None and self.browser.running and self.cdp is not None
                and self.cdp.connected and self.clock is not None and self.page_input is not None)

    # Lifecycle -----------------------------------------------------------------------------

    def find_chromium(self) -> None:
        """Find Chromium (ProgramMissing, naming the package, before anything starts)."""
        self._chromium = find_chromium()

    async def start(self, display: XvncDisplay, fence: InputFence, url: str, page: str) -> None:
        """Start Chromium on ``display``, install the page's parts on a blank page (the
        tracker's count of input restarts ``fence``), then load the task (:meth:`load`)."""
        chromium = self._chromium or find_chromium()
        self._profile = Path(tempfile.mkdtemp(prefix="universe-chromium-"))
        env = no_caret_blink_env(self._profile / "config")
        self.browser = spawn_chromium(display, self._profile, BLANK_PAGE, SCREEN_WIDTH,
                                      SCREEN_HEIGHT, env=env, chromium=chromium)
        port = await devtools_port(self._profile, self.browser)
        self.cdp = await CDPClient.connect(port)
        self.one_page = OnePage(self.cdp)
        await self.one_page.install()
        clock = self.clock = PageClock(self.cdp)
        await clock.install()
        self.page_idle = PageIdle(self.cdp)  # after the clock: it wraps the clock's timers
        fence.restart(await self.page_idle.install())
        self.page_input = CDPInput(
            self.cdp, now=lambda: clock.state.now if clock.state else 0.0,
            after_wheel=clock.rendered,
        )
        await self.page_input.unbuffered()
        await install_click_hook(self.cdp)  # script-added click listeners count as clickable
        # The page is focused whatever X says: X focus follows the pointer here and comes
        # and goes with the window's mapping; a text field's caret (and focus/blur
        # handlers) then depended on when, and two lockstep runs drew different frames.
        await self.cdp.call("Emulation.setFocusEmulationEnabled", {"enabled": True})
        await self.load(url, page)

    async def load(self, url: str, page: str) -> None:
        """Load the task page (``page`` its file name, for errors), the page clock and
        the click hook running before its own scripts; return once it is ready."""
        assert self.cdp is not None and self.browser is not None
        try:
            await self.cdp.navigate(url, PAGE_TIMEOUT)
            await self.cdp.wait_for(READY_EXPRESSION, PAGE_TIMEOUT)
        except CDPError as exc:
            raise CDPError(f"{page} did not get ready: {exc}{log_tail(self.browser.log)}") from None
        self._paused = False  # a new document: its clock starts in real time

    async def keep_task(self, url: str) -> bool:
        """Load the task page again if the browser left it; whether it had to."""
        assert self.cdp is not None
        if await self.cdp.evaluate(
            f"(() => {{ try {{ return {READY_EXPRESSION}; }} catch (e) {{ return false; }} }})()"
        ):
            return False
        await self.cdp.navigate(url, PAGE_TIMEOUT)
        await self.cdp.wait_for(READY_EXPRESSION, PAGE_TIMEOUT)
        self._paused = False  # a new document: its clock starts in real time
        return True

    async def restore(self) -> bool:
        """Close other pages and put the zoom back (:meth:`OnePage.restore`); False
        when the zoom stays (the caller starts the browser again)."""
        return self.one_page is None or await self.one_page.restore()

    def take_from(self, old: BrowserHost) -> None:
        """An env switch: hold ``old``'s browser and all it installed (all at once, no
        await between), and leave ``old`` holding nothing of it."""
        self.browser, self.cdp, self.clock, self.page_input = old.browser, old.cdp, old.clock, old.page_input
        self.page_idle, self.key_guard, self.one_page, self.witness = (
            old.page_idle, old.key_guard, old.one_page, old.witness)
        self._profile, self._chromium, self._paused = old._profile, old._chromium, old._paused
        old.browser = old.cdp = old.clock = old.page_input = None
        old.page_idle = old.one_page = old.witness = None
        old._profile, old._paused, old.key_guard = None, False, KeyGuard()

    async def switch(self, url: str, page: str) -> None:
        """After :meth:`take_from`: the old task's witness hidden, the keys and buttons
        it held released, and this task's page loaded."""
        assert self.page_input is not None
        if self.witness is not None:
            await self.witness.hide()
        await self.page_input.release()
        await self.load(url, page)

    async def stop(self, stop_program: Callable[[XProgram], Awaitable[None]]) -> None:
        """Close DevTools, stop the browser (through ``stop_program``, the display's) and
        remove its profile."""
        self.page_idle = self.one_page = None
        if self.cdp is not None:
            await self.cdp.close()
            self.cdp = None
        if self.browser is not None:
            browser, self.browser = self.browser, None
            await stop_program(browser)
        if self._profile is not None:
            await asyncio.to_thread(shutil.rmtree, self._profile, True)
            self._profile = None

    def close(self) -> None:
        """Synchronous last resort (the display's programs were killed): the profile."""
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    # Page time -----------------------------------------------------------------------------

    async def pause(self) -> None:
        """Lockstep: the page's time paused at the epoch, restarted; nothing held."""
        assert self.clock is not None and self.page_input is not None
        await self.clock.pause(at_ms=EPOCH_MS, restart=True)
        await self.page_input.release()
        self._paused = True

    async def resume(self) -> bool:
        """Real time: the page's own clock back; whether it was paused."""
        if not self._paused:
            return False
        assert self.clock is not None
        await self.clock.resume()
        self._paused = False
        return True

    # Lockstep frames -----------------------------------------------------------------------

    async def display_frame(
        self, screen: VNCClient | None, display_size: tuple[int, int], area: Rect, env_id: str
    ) -> np.ndarray | None:
        """The step's frame from the display, once it shows the page as it is now
        (:mod:`runtimes.frame_witness`); None when it cannot (the whole screen served,
        the old way asked for, the display stalled)."""
        assert self.cdp is not None
        witness = self.witness
        if screen is None or capture_way() != "display":
            return None
        if witness is None or witness.cdp is not self.cdp or witness.screen is not screen:
            witness = self.witness = FrameWitness(self.cdp, screen, display_size)
        if not witness.usable_for(area):
            return None
        shot = await witness.capture(area)
        if shot is None:
            log.warning("%s: the display did not show the step's frame within %g s; taking "
                        "screenshots", env_id, WITNESS_TIMEOUT)
        return shot

    async def hide_witness(self) -> None:
        """Real time: lockstep's witness is no part of it."""
        if self.witness is not None:
            await self.witness.hide()
