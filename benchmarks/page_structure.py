"""Page structure for web agents: cost per observation, our DOM walk vs DevTools snapshots vs Playwright.

One kiosk Chromium on an Xvnc display (the MiniWoB runtime's flags), five MiniWoB task
pages (an episode started with seed 1) and a generated page of ~:data:`LARGE_ELEMENTS`
elements. On each page, :data:`ROUNDS` observations per way, the ways interleaved:

- **walk**: ``runtimes.page_structure.observe`` — one ``Runtime.evaluate`` of a script
  that walks the DOM (bids, boxes, hit-tested visibility, roles and names), over our
  CDP client; then building the ``v0.env.observation`` body and the text tree
  (``+ body``).
- **snapshot**: ``runtimes.page_snapshot.observe_snapshot`` — BrowserGym's way: a
  bid/visibility script, ``DOMSnapshot.captureSnapshot`` and
  ``Accessibility.getFullAXTree``, over our CDP client.
- **pw walk**, **pw snapshot**: the same two through Playwright attached to the same
  browser with ``connect_over_cdp`` (``page.evaluate``; a ``CDPSession``), when the
  ``playwright`` wheel is installed (it needs no browser download to attach);
  **pw aria**: Playwright's own ``aria_snapshot()`` of the body (its accessibility
  tree as YAML, no bids, no boxes), for scale.

Medians and 90th percentiles in ms; elements described, and the body's bytes.
``python -m benchmarks page_structure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import orjson  # noqa: E402

from benchmarks.common import quick, table  # noqa: E402
from runtimes.cdp import CDPClient  # noqa: E402
from runtimes.page_snapshot import (  # noqa: E402
    SNAPSHOT_PARAMS,
    bids_expression,
    build,
    observe_snapshot,
)
from runtimes.page_structure import (  # noqa: E402
    install_click_hook,
    observe,
    parse_walk,
    walk_expression,
)
from runtimes.xdisplay import XvncDisplay  # noqa: E402

#: Task pages measured, each with an episode of seed 1.
TASKS: Final = quick(("click-test", "click-checkboxes", "book-flight", "email-inbox", "social-media"),
                     ("click-test", "book-flight"))
#: Elements of the generated large page, and observations per way and page.
LARGE_ELEMENTS: Final = quick(5000, 1000)
ROUNDS: Final = quick(30, 3)
WARMUP: Final = quick(3, 1)
WIDTH, HEIGHT = 640, 480
#: Seconds Chromium may take to write its DevTools port.
START_TIMEOUT: Final = 30.0


def large_page(elements: int = LARGE_ELEMENTS, seed: int = 0) -> str:
    """An HTML page of about ``elements`` elements: cards of text, links, text fields,
    checkboxes, buttons, lists and selects, taller than the screen."""
    rnd = random.Random(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()

    def w(k: int = 3) -> str:
        return " ".join(rnd.choice(words) for _ in range(k))

    parts = ["<!DOCTYPE html><html><head><title>Large page</title><style>"
             ".row{display:flex;gap:4px}.card{border:1px solid #ccc;margin:2px}</style></head>"
             "<body><h1>Large page</h1><form>"]
    count, i = 5, 0
    while count < elements:
        parts.append(
            f"<div class='card'><div class='row'><span>{w()}</span><a href='#r{i}'>{w(2)}</a>"
            f"<input type='text' placeholder='{w(1)}'><label><input type='checkbox'> {w(1)}</label>"
            f"<button type='button' onclick='this.textContent=\"ok\"'>{w(1)}</button></div>"
            f"<ul><li>{w()}</li><li><b>{w(1)}</b> {w()}</li></ul>"
            f"<select><option>{w(1)}</option><option>{w(1)}</option></select></div>"
        )
        count, i = count + 15, i + 1
    parts.append("</form></body></html>")
    return "".join(parts)


@contextlib.asynccontextmanager
async def kiosk() -> AsyncIterator[tuple[CDPClient, int]]:
    """Xvnc and a kiosk Chromium as the MiniWoB runtime starts them
    (:func:`runtimes.chromium.spawn_chromium`); our CDP client and the DevTools port."""
    from runtimes.chromium import devtools_port, spawn_chromium

    display = XvncDisplay(WIDTH, HEIGHT)
    await display.start()
    profile = Path(tempfile.mkdtemp(prefix="page-structure-"))
    try:
        program = spawn_chromium(display, profile, "about:blank", WIDTH, HEIGHT)
        port = await devtools_port(profile, program, START_TIMEOUT)
        cdp = await CDPClient.connect(port)
        try:
            yield cdp, port
        finally:
            await cdp.close()
    finally:
        await display.aclose()
        shutil.rmtree(profile, ignore_errors=True)


async def load_task(cdp: CDPClient, task: str, seed: int = 1) -> None:
    from runtimes.chromium import READY_EXPRESSION, html_dir

    await cdp.navigate((html_dir() / f"{task}.html").as_uri())
    await cdp.wait_for(READY_EXPRESSION)
    await cdp.evaluate(f"Math.seedrandom({seed}); core.startEpisodeReal(); 0")


Way = Callable[[], Awaitable[Any]]


async def _playwright(port: int) -> tuple[Any, Any, float] | None:
    """Playwright attached to the browser: (playwright, page, seconds to attach)."""
    try:
        from playwright.async_api import async_playwright
    except ModuleNotFoundError:
        return None
    started = time.perf_counter()
    manager = async_playwright()
    pw = await manager.start()
    browser = await pw.chromium.connect_over_cdp(f"http://127.0.0.1:{port}")
    page = browser.contexts[0].pages[0]
    return manager, page, time.perf_counter() - started


def _ms(values: list[float], q: float) -> str:
    values = sorted(values)
    return f"{values[min(len(values) - 1, int(q * len(values)))] * 1e3:.1f}"


async def measure_page(ways: dict[str, Way], rounds: int = ROUNDS) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(WARMUP + rounds):
        for name, way in ways.items():
            started = time.perf_counter()
            await way()
            if i >= WARMUP:
                times[name].append(time.perf_counter() - started)
    return times


def ways(cdp: CDPClient, attached: tuple[Any, Any, float] | None, session: Any) -> dict[str, Way]:
    """The ways of observing one page, by name."""

    async def walk() -> None:
        await observe(cdp)

    async def walk_body() -> None:
        orjson.dumps((await observe(cdp)).observation())

    async def snapshot() -> None:
        await observe_snapshot(cdp)

    out: dict[str, Way] = {"walk": walk, "walk + body": walk_body, "snapshot": snapshot}
    if attached is None:
        return out
    page = attached[1]
    expression, bids = walk_expression(), bids_expression()

    async def pw_walk() -> None:
        parse_walk(await page.evaluate(expression), (0, 0))

    async def pw_snapshot() -> None:
        seen = await page.evaluate(bids)
        snap = await session.send("DOMSnapshot.captureSnapshot", SNAPSHOT_PARAMS)
        build(seen, snap, await session.send("Accessibility.getFullAXTree"))

    async def pw_aria() -> None:
        await page.locator("body").aria_snapshot()

    return {**out, "pw walk": pw_walk, "pw snapshot": pw_snapshot, "pw aria": pw_aria}


def _driver_rss() -> float:
    """MB of resident memory of Playwright's driver processes (children of ours)."""
    total = 0
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"playwright" in cmdline and b"run-driver" in cmdline:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
    return total / 1024


async def run() -> None:
    async with kiosk() as (cdp, port):
        await install_click_hook(cdp)
        attached = await _playwright(port)
        if attached is None:
            print("  (Playwright not installed: pip install playwright; its ways are skipped)")
        else:
            print(f"  Playwright attached over CDP in {attached[2] * 1e3:.0f} ms; its driver "
                  f"(Node.js) holds {_driver_rss():.0f} MB")
        rows, header = [], ["page"]
        directory = Path(tempfile.mkdtemp(prefix="large-page-"))
        try:
            large = directory / "large.html"
            large.write_text(large_page())
            for name in [*TASKS, f"large ({LARGE_ELEMENTS})"]:
                if name in TASKS:
                    await load_task(cdp, name)
                else:
                    await cdp.navigate(large.as_uri())
                session = None
                if attached is not None:
                    session = await attached[1].context.new_cdp_session(attached[1])
                measured = ways(cdp, attached, session)
                times = await measure_page(measured)
                structure = await observe(cdp)
                body = orjson.dumps(structure.observation())
                header = ["page", "elements", "body KiB", "tree KiB", *(f"{w} ms" for w in measured)]
                rows.append([
                    name, str(len(structure.elements) + structure.omitted), f"{len(body) / 1024:.0f}",
                    f"{len(structure.text().encode()) / 1024:.1f}",
                    *(f"{_ms(times[w], 0.5)} / {_ms(times[w], 0.9)}" for w in measured),
                ])
        finally:
            shutil.rmtree(directory, ignore_errors=True)
            if attached is not None:
                await attached[0].__aexit__(None, None, None)
        print("  median / p90 ms per observation")
        table(header, rows)


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
