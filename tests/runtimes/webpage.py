"""A kiosk Chromium on a real Xvnc display for web-agent tests: DevTools to read the page,
our VNC client to the display for real X input (as ``DisplayRuntime.inject`` sends it).

``async with kiosk() as page``: ``page.cdp`` (our CDP client), ``page.inject(events)``
(our KeyEvent/PointerEvent as X input), ``await page.load_task("click-test", seed)``,
``await page.load_html(path)``. Every process is gone afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from runtimes.base import InputEvent, KeyEvent
from runtimes.cdp import CDPClient
from runtimes.xdisplay import XvncDisplay
from tests.runtimes.display import alive
from vncdriver.client import VNCClient

WIDTH, HEIGHT = 640, 480
#: Seconds Chromium may take to write its DevTools port, and the page to get ready.
START_TIMEOUT: Final = 30.0
TIMEOUT: Final = 10.0


@dataclass
class Kiosk:
    cdp: CDPClient
    screen: VNCClient
    display: XvncDisplay

    def inject(self, events: Sequence[InputEvent]) -> None:
        """Send ``events`` into X in one write, as the runtime's inject does."""
        self.screen.send_events(
            [("KeyEvent", e.key, e.down) if isinstance(e, KeyEvent)
             else ("PointerEvent", e.x, e.y, e.buttonmask) for e in events]
        )

    async def load_task(self, task: str, seed: int = 1) -> str:
        """Load a MiniWoB task page and start an episode; its instruction."""
        from runtimes.chromium import READY_EXPRESSION, html_dir

        await self.cdp.navigate((html_dir() / f"{task}.html").as_uri())
        await self.cdp.wait_for(READY_EXPRESSION, TIMEOUT)
        utterance = str(await self.cdp.evaluate(
            f"Math.seedrandom({seed}); core.startEpisodeReal(); core.getUtterance()"
        ))
        # The episode's page drawn (two frames) before a test's X input hit-tests it.
        await self.cdp.evaluate(
            "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))"
        )
        return utterance

    async def load_html(self, path: Path) -> None:
        await self.cdp.navigate(path.as_uri())

    async def value(self, expression: str) -> Any:
        """Ask the page (tests read results this way; they act only through X input)."""
        return await self.cdp.evaluate(expression)


@contextlib.asynccontextmanager
async def kiosk() -> AsyncIterator[Kiosk]:
    from runtimes.chromium import devtools_port, spawn_chromium

    display = XvncDisplay(WIDTH, HEIGHT, unix_socket=True)
    await display.start()
    profile = Path(tempfile.mkdtemp(prefix="web-agent-"))
    pids: list[int] = []
    try:
        program = spawn_chromium(display, profile, "about:blank", WIDTH, HEIGHT)
        port = await devtools_port(profile, program, START_TIMEOUT)
        cdp = await CDPClient.connect(port)
        screen = VNCClient(display.address, encoding="raw", name="test display")
        try:
            await screen.start()
            yield Kiosk(cdp, screen, display)
        finally:
            pids = display.pids()
            with contextlib.suppress(Exception):
                await screen.close()
            await cdp.close()
    finally:
        await display.aclose()
        shutil.rmtree(profile, ignore_errors=True)
    assert not [pid for pid in pids if alive(pid)], "Xvnc or Chromium left running"
