"""Chromium and MiniWoB++'s task pages: where they are and how Chromium starts.

Holds :func:`find_chromium` (and :func:`find_xvnc`), :data:`CHROMIUM_FLAGS` (with
:data:`LEAN_FLAGS`, and :func:`before_lean` for comparisons),
:func:`spawn_chromium` and :func:`devtools_port` (start it on a display, learn its
DevTools port),
:func:`html_dir` (where the installed ``miniwob`` wheel keeps its task pages),
:func:`env_id_for` (``click-test.html`` -> ``miniwob.ClickTest-v0``) and the page
expressions the runtime evaluates over DevTools (:data:`READY_EXPRESSION`,
:data:`STATE_EXPRESSION`). ``runtimes.browser`` runs the tasks; tests and benchmarks
that start a page of their own use these too.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import time
from pathlib import Path
from typing import Final

from .cdp import CDPError
from .xdisplay import XVNC_PACKAGE, XProgram, XvncDisplay, find_program, log_tail

# Programs ----------------------------------------------------------------------------------

CHROMIUM_PACKAGE: Final = "chromium"
#: Names tried, in order, for the browser; the variable below overrides them.
CHROMIUM_NAMES: Final = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Environment variable naming the browser binary to use instead.
CHROMIUM_ENV: Final = "UNIVERSE_REMOTE_CHROMIUM"
#: Features turned off: ones that call home or nag.
DISABLED_FEATURES: Final = ("Translate", "MediaRouter", "OptimizationHints")
#: Features turned off to run lean: the browser's own pages it preloads for the address
#: bar's popups (a second renderer process, though a kiosk window has no address bar),
#: and the spare renderer kept for the next site.
LEAN_DISABLED_FEATURES: Final = (
    "PreloadTopChromeWebUI", "WebUIOmniboxPopup", "WebUIOmniboxAimPopup", "AimPopup",
    "SpareRendererForSitePerProcess",
)
#: One task page needs one renderer, and no process of its own for the compositor (GPU
#: process: software compositing here), the network service (file:// pages) or the zygote
#: (no sandbox to fork into): Xvnc, the browser, its storage service and one renderer
#: where there were ten (``python -m benchmarks browser_density`` starts Chromium with
#: and without these).
LEAN_FLAGS: Final = (
    "--renderer-process-limit=1",
    "--in-process-gpu",
    "--no-zygote",
    "--enable-features=NetworkServiceInProcess2",
    "--disable-features=" + ",".join(DISABLED_FEATURES + LEAN_DISABLED_FEATURES),
)
#: Chromium flags (FIELD-NOTES): runs as root in containers (no sandbox), no GPU, nothing
#: that calls home or nags, timers at full speed though nobody "looks" at the window,
#: pixels 1:1, kiosk (no tabs, no address bar, no info bars) so the page starts at (0, 0).
#: No partial raster: with it Chromium re-rasters only the changed part of a tile, where
#: the changed parts depend on when frames were drawn (wall time, load), and an edge
#: rasterised in another pass came out one grey level apart (a button's rounded corners
#: in lockstep MiniWoB, in some runs on a busy machine); whole tiles give the same
#: pixels for the same page (tests/runtimes/test_browser_lockstep.py).
CHROMIUM_FLAGS: Final = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-partial-raster",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--disable-session-crashed-bubble",
    "--overscroll-history-navigation=0",
    "--password-store=basic",
    "--noerrdialogs",
    "--force-device-scale-factor=1",
    "--kiosk",
    "--window-position=0,0",
    *LEAN_FLAGS,
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",  # Chromium picks a free port and writes it to a file
)


def before_lean(flags: tuple[str, ...]) -> tuple[str, ...]:
    """``flags`` without :data:`LEAN_FLAGS` (with :data:`DISABLED_FEATURES` still off): how
    Chromium ran before, for benchmarks that compare."""
    kept = tuple(flag for flag in flags if flag not in LEAN_FLAGS)
    return (*kept, "--disable-features=" + ",".join(DISABLED_FEATURES))


#: Environment variable: ``restart`` makes an env switch between MiniWoB tasks start
#: Xvnc and Chromium again (the old way, for benchmarks) instead of keeping them.
SWITCH_ENV: Final = "UNIVERSE_REMOTE_BROWSER_SWITCH"
#: Seconds Chromium may take to write its DevTools port (cold starts take a few).
BROWSER_START_TIMEOUT: Final = 30.0
#: Seconds the task page may take to load and run its ``window.onload``.
PAGE_TIMEOUT: Final = 20.0

#: The page is ready for episodes: its scripts ran and ``window.onload`` showed the cover.
READY_EXPRESSION: Final = (
    "document.readyState === 'complete' && typeof core === 'object' && "
    "typeof genProblem === 'function' && core.cover_div != null && WOB_TASK_READY !== false"
)
#: What the poller reads, in this order.
STATE_EXPRESSION: Final = (
    "[WOB_DONE_GLOBAL, WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_EPISODE_ID, "
    "WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON)]"
)

def html_dir() -> Path:
    """The installed ``miniwob`` wheel's task pages (``.../miniwob/html/miniwob``).

    Found without importing the package (its import registers gymnasium envs and may
    print notices). Raises ModuleNotFoundError if the wheel is not installed.
    """
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "No module named 'miniwob' (the MiniWoB++ task pages)", name="miniwob"
        )
    directory = Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"
    if not directory.is_dir():
        raise ModuleNotFoundError(
            f"the installed miniwob has no task pages at {directory}", name="miniwob"
        )
    return directory


def env_id_for(page: str) -> str:
    """``"click-test-2.html"`` -> ``"miniwob.ClickTest2-v0"``."""
    stem = Path(page).name.removesuffix(".html")
    return "miniwob." + "".join(part[:1].upper() + part[1:] for part in stem.split("-")) + "-v0"


def find_chromium() -> str:
    """The browser binary: $UNIVERSE_REMOTE_CHROMIUM, else the first of CHROMIUM_NAMES."""
    override = os.environ.get(CHROMIUM_ENV)
    if override:
        return find_program(override, package=CHROMIUM_PACKAGE)
    return find_program(*CHROMIUM_NAMES, package=CHROMIUM_PACKAGE)


def find_xvnc() -> str:
    return find_program("Xvnc", package=XVNC_PACKAGE)


def spawn_chromium(
    display: XvncDisplay, profile: Path, url: str, width: int, height: int,
    env: dict[str, str] | None = None, chromium: str | None = None,
) -> XProgram:
    """Chromium with :data:`CHROMIUM_FLAGS` on ``display``, a ``width`` x ``height``
    window showing ``url``, its profile in ``profile`` and its temporary files (singleton
    socket, shared memory) under ``profile/tmp``, so removing the profile removes them
    all. Then :func:`devtools_port`."""
    argv = [chromium or find_chromium(), *CHROMIUM_FLAGS, f"--window-size={width},{height}",
            f"--user-data-dir={profile}", url]
    tmp = profile / "tmp"
    tmp.mkdir(exist_ok=True)
    return display.spawn(argv, name="chromium", env={"TMPDIR": str(tmp), **(env or {})})


async def devtools_port(profile: Path, browser: XProgram, timeout: float = BROWSER_START_TIMEOUT) -> int:
    """The DevTools port Chromium chose, from the ``DevToolsActivePort`` file in its
    profile; :class:`CDPError` with its log's tail when it exits first or writes none
    within ``timeout``."""
    path = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            lines = path.read_text().splitlines()
            if len(lines) >= 2 and lines[1].startswith("/devtools/"):  # written whole
                return int(lines[0])
        if not browser.running:
            raise CDPError(
                f"Chromium exited with {browser.process.returncode} at start{log_tail(browser.log)}"
            )
        if time.monotonic() > deadline:
            raise CDPError(
                f"Chromium opened no DevTools port within {timeout} s{log_tail(browser.log)}"
            )
        await asyncio.sleep(0.02)  # the file appears once; nothing to wait on but the disk
