"""A browser on a TigerVNC display: its lifecycle (the base of ``runtimes.browser``).

Holds :class:`BrowserOnDisplay`: start the display and Chromium on it (kiosk mode, no
window manager, the page filling the screen from (0, 0)), the page clock, page tracker,
DevTools input and click hook installed on a blank page before the task page loads (so
they run before the task's own scripts), load the task; take over another runtime's
display and browser on an env switch (a page load instead of starting Xvnc and Chromium
again); stop it all. The browser keeps its one page (docs/browser.md, "Keys the
browser keeps"): the browser's shortcuts never reach it as X input (a
:class:`~runtimes.browser_keys.KeyGuard` on :meth:`BrowserOnDisplay.inject`, as on
DevTools input), a tab or window that opens anyway (a middle click on a link) is closed
as it appears (:class:`OnePage`), and a reset brings the zoom back to 100 %. What a
task's episodes are and what web agents read and do are the subclasses'
(:mod:`runtimes.browser_agents`, :mod:`runtimes.browser`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

from .base import InputEvent, PointerEvent, Runtime
from .browser_keys import KeyGuard
from .cdp import CDPClient, CDPError
from .cdp_input import CTRL, CDPInput
from .chromium import (
    PAGE_TIMEOUT,
    READY_EXPRESSION,
    SWITCH_ENV,
    devtools_port,
    find_chromium,
    html_dir,
    spawn_chromium,
)
from .frame_witness import FrameWitness
from .page_clock import PageClock, no_caret_blink_env
from .page_structure import install_click_hook
from .settle_page import PageIdle
from .xdisplay import XProgram, log_tail
from .xruntime import DisplayRuntime

log = logging.getLogger(__name__)

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


class BrowserOnDisplay(DisplayRuntime):
    """Chromium on an X display that the remote serves, showing one task page."""

    #: The task page's file name (``click-test.html``); set per subclass.
    page: ClassVar[str]
    #: Lockstep's frames from the display (made at the first lockstep frame).
    _witness: FrameWitness | None = None

    def __init__(self) -> None:
        super().__init__()
        self.browser: XProgram | None = None
        self.cdp: CDPClient | None = None
        #: The page's clock (lockstep) and its DevTools input (lockstep's input).
        self.clock: PageClock | None = None
        self.page_input: CDPInput | None = None
        self._paused = False  # the clock is in lockstep
        #: Seconds the last :meth:`astart` took (Xvnc, Chromium, the page).
        self.startup_seconds: float | None = None
        self._chromium: str | None = None
        self._profile: Path | None = None
        #: The page's reward poller (a subclass starts it at a reset; stopped here).
        self._poller: asyncio.Task[None] | None = None
        #: Takes the browser's shortcuts out of the X input (runtimes.browser_keys).
        self.key_guard = KeyGuard()
        #: Closes other pages as they open; a reset's zoom and page check.
        self.one_page: OnePage | None = None

    @classmethod
    def url(cls) -> str:
        """``file://`` URL of the task page in the installed wheel."""
        return (html_dir() / cls.page).as_uri()

    # Lifecycle -----------------------------------------------------------------------------

    async def astart(self) -> None:
        """Start the display, Chromium on it, and load the task."""
        started = time.monotonic()
        self._chromium = find_chromium()  # fail before starting anything if it is missing
        await super().astart()
        self.startup_seconds = time.monotonic() - started
        log.info("%s started in %.2f s on %s", self.env_id, self.startup_seconds, self.display)

    async def _on_display(self) -> None:
        await self._start_browser(self._chromium)

    async def _start_display(self) -> None:
        """The display, the X pointer moved by our connection to the screen's corner:
        TigerVNC draws the pointer into the frames of a client whose last pointer event
        was elsewhere (the Cursor encoding notwithstanding), and the whole screen's
        first frame kept it at the centre, where nothing draws again."""
        self.key_guard.forget()  # a new X server holds nothing
        await super()._start_display()
        x0, y0 = self.origin
        self.inject([PointerEvent(SCREEN_WIDTH - 1 - x0, SCREEN_HEIGHT - 1 - y0, 0)])

    async def _start_browser(self, chromium: str | None = None) -> None:
        """Start Chromium on the display, then load the task page (:meth:`_load_task`)."""
        assert self.display is not None
        chromium = chromium or find_chromium()
        self._profile = Path(tempfile.mkdtemp(prefix="universe-chromium-"))
        env = no_caret_blink_env(self._profile / "config")
        self.browser = spawn_chromium(self.display, self._profile, BLANK_PAGE, SCREEN_WIDTH,
                                      SCREEN_HEIGHT, env=env, chromium=chromium)
        port = await devtools_port(self._profile, self.browser)
        self.cdp = await CDPClient.connect(port)
        self.one_page = OnePage(self.cdp)
        await self.one_page.install()
        clock = self.clock = PageClock(self.cdp)
        await clock.install()
        self.page_idle = PageIdle(self.cdp)  # after the clock: it wraps the clock's timers
        self.fence.restart(await self.page_idle.install())
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
        await self._load_task()

    async def _load_task(self) -> None:
        """Load the task page in the browser, the page clock and the click hook running
        before its own scripts; return once it is ready."""
        assert self.cdp is not None and self.browser is not None
        try:
            await self.cdp.navigate(self.url(), PAGE_TIMEOUT)
            await self.cdp.wait_for(READY_EXPRESSION, PAGE_TIMEOUT)
        except CDPError as exc:
            raise CDPError(
                f"{self.page} did not get ready: {exc}{log_tail(self.browser.log)}"
            ) from None
        self._paused = False  # a new document: its clock starts in real time

    async def atake_over(self, old: Runtime) -> bool:
        """An env switch from another task: keep ``old``'s display and browser and load
        this task's page in it (a page load, where starting Xvnc and Chromium again
        took seconds: ``python -m benchmarks browser_switch``)."""
        if not (
            os.environ.get(SWITCH_ENV) != "restart"
            and isinstance(old, BrowserOnDisplay) and old.display_size == self.display_size
            and old.display is not None and old.screen is not None and old.screen.connected
            and old.browser is not None and old.browser.running
            and old.cdp is not None and old.cdp.connected
            and old.clock is not None and old.page_input is not None
        ):
            return False
        started = time.monotonic()
        await old._stop_poller()
        # All of it at once (no await between): from here this runtime holds it all, and
        # a failure below is this runtime's to recover (its reset loads the page again).
        self.display, self.screen, self.browser, self.cdp = old.display, old.screen, old.browser, old.cdp
        self.clock, self.page_input, self._witness = old.clock, old.page_input, old._witness
        self._profile, self._chromium = old._profile, old._chromium
        self.key_guard, self.one_page, old.one_page = old.key_guard, old.one_page, None
        self.page_idle, old.page_idle = old.page_idle, None  # installed on every new document
        old.display = old.screen = old.browser = old.cdp = None
        old.clock, old.page_input, old._witness, old._profile = None, None, None, None
        self.screen.on_update = self._damaged
        self._pending = self._damage = None  # a new page: take all of it
        if self._witness is not None:
            await self._witness.hide()
        await self.page_input.release()  # keys and buttons the old task held
        await self._load_task()
        self.fence.restart()  # the new page counts its input from nought
        self.capture()
        self.startup_seconds = time.monotonic() - started
        log.info("%s took over %s's browser in %.2f s", self.env_id, old.env_id,
                 self.startup_seconds)
        return True

    def inject(self, events: Sequence[InputEvent]) -> None:
        """Real X input without the browser's shortcuts (:attr:`key_guard`): whoever sends
        it (a viewer, an agent, an action string), no key opens, closes, zooms, reloads or
        leaves the page."""
        super().inject(self.key_guard.filter(events))

    async def _stop_poller(self) -> None:
        """Stop the page's reward poller, if one runs."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None

    async def _stop_browser(self) -> None:
        self.page_idle = self.one_page = None
        if self.cdp is not None:
            await self.cdp.close()
            self.cdp = None
        if self.browser is not None:
            browser, self.browser = self.browser, None
            await self._stop_program(browser)
        if self._profile is not None:
            await asyncio.to_thread(shutil.rmtree, self._profile, True)
            self._profile = None

    async def _stop_programs(self) -> None:
        await self._stop_browser()

    async def aclose(self) -> None:
        """Stop the poller, the browser and Xvnc; remove their files. Idempotent."""
        await self._stop_poller()
        await super().aclose()

    def close(self) -> None:
        """Synchronous last resort (no event loop): kill the browser and Xvnc."""
        super().close()
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None
