"""The dashboard's page in a headed Chromium at 1280x800 (issue 29, item 9): every card in
the window below the chart, episodes numbered one way on the cards and on the chart (the
first episode is 1), and one titled y axis with round ticks; and its PNGs are Pillow's."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

import numpy as np
import pytest
from PIL import Image

from remotes.dashboard import Dashboard, encode_png
from remotes.loop import LoopThread
from tests.envserver.test_viewer import Chromium, browser, wait_until  # noqa: F401 (fixtures)
from tests.vncdriver.xserver import XDisplay, XServers, require

#: The screen the issue measured: a laptop's browser window.
SCREEN: Final = (1280, 800)


@pytest.fixture(scope="module")
def xvfb() -> Iterator[tuple[XServers, XDisplay]]:
    """An X screen of :data:`SCREEN` (overrides test_viewer's 800x600 for ``browser``)."""
    require("Xvfb", "xwd", "xdotool")
    with XServers() as xs:
        yield xs, xs.xvfb(*SCREEN)


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("dashboard-page-test")
    yield thread
    thread.close()


def feed(board: Dashboard, count: int, episodes: int) -> None:
    """Catch-sized frames, then ``episodes`` episodes of 3 steps ended on remote 0 (returns
    +1, -1, +1, ...), so its card and the chart have something to number."""
    frames = np.random.default_rng(0).integers(0, 256, (count, 210, 160, 3), np.uint8)
    board.record(frames)
    for episode in range(episodes):
        for step in range(3):
            rewards = np.zeros(count)
            rewards[0] = (1 if episode % 2 == 0 else -1) if step == 2 else 0
            ended = np.zeros(count, bool)
            ended[0] = step == 2
            board.record(frames, rewards, ended, np.zeros(count, bool), {})


def texts(selector: str) -> str:
    """JavaScript: the text of every element ``selector`` matches."""
    return f"[...document.querySelectorAll({selector!r})].map(t => t.textContent)"


@pytest.mark.parametrize("count", [8, 16])
async def test_every_card_fits_the_window_below_the_chart(
    count: int, loop: LoopThread, browser: Callable[[str], Awaitable[Chromium]],  # noqa: F811
) -> None:
    board = Dashboard([f"127.0.0.1:{5900 + i}+{15900 + i}" for i in range(count)],
                      ["builtin.Catch-v0"] * count, target_fps=60, loop=loop)
    feed(board, count, episodes=2)
    url = board.start(0)
    try:
        page = await browser(url)
        await wait_until(lambda: page.evaluate(f"Object.keys(window.dashboard.frames).length === {count}"),
                         f"the page to show all {count} screens")
        await wait_until(lambda: page.evaluate("window.dashboard.screenWidth > 0"), "the cards' layout")
        inner = await page.evaluate("[window.innerWidth, window.innerHeight]")
        assert inner[1] >= SCREEN[1] - 40, inner  # the window is the screen (app mode, no WM)
        bottoms = await page.evaluate(
            "[...document.querySelectorAll('.card')].map(c => c.getBoundingClientRect().bottom)")
        assert len(bottoms) == count and max(bottoms) <= inner[1], (bottoms, inner)
        chart = await page.evaluate("document.getElementById('chart-box').getBoundingClientRect().bottom")
        tops = await page.evaluate(
            "[...document.querySelectorAll('.card')].map(c => c.getBoundingClientRect().top)")
        assert min(tops) >= chart
        # Readable screens: no smaller than the page's floor.
        assert await page.evaluate("window.dashboard.screenWidth") >= 64
    finally:
        board.close()


#: JavaScript: for each card, the text elements cut short (their text wider than their
#: box) or reaching past the card's right edge: the title, the state badge, the address,
#: the steps line.
CUT_TEXT: Final = """[...document.querySelectorAll('.card')].flatMap(card => {
  const right = card.getBoundingClientRect().right + 0.5;
  return [...card.querySelectorAll('.label, .pill, .meta div')].filter(
    t => t.scrollWidth > t.clientWidth + 0.5 || t.getBoundingClientRect().right > right
  ).map(t => `${card.id}: ${t.className || 'meta'} ${JSON.stringify(t.textContent)}`);
})"""


async def test_the_card_titles_badges_addresses_and_steps_fit_their_cards_at_8_remotes(
    loop: LoopThread, browser: Callable[[str], Awaitable[Chromium]],  # noqa: F811
) -> None:
    """8 remotes in a 1280x800 window (issue 34): no card cuts its title, its state badge,
    its address or its steps (they were cut short by the card's width)."""
    count = 8
    board = Dashboard([f"127.0.0.1:{5900 + i}+{15900 + i}" for i in range(count)],
                      ["builtin.Catch-v0"] * count, target_fps=60, loop=loop)
    feed(board, count, episodes=400)  # four-digit step counts, as a minute of play gives
    url = board.start(0)
    try:
        page = await browser(url)
        await wait_until(lambda: page.evaluate(f"Object.keys(window.dashboard.frames).length === {count}"),
                         f"the page to show all {count} screens")
        await wait_until(lambda: page.evaluate("window.dashboard.screenWidth > 0"), "the cards' layout")
        assert await page.evaluate("document.querySelectorAll('.card .pill').length") == count
        assert await page.evaluate(CUT_TEXT) == []
        # What an ellipsis would cut is in the element's tooltip.
        titles = await page.evaluate("[...document.querySelectorAll('.card .address')].map(a => a.title)")
        assert titles[7] == "127.0.0.1:5907+15907", titles
    finally:
        board.close()


async def test_episodes_are_numbered_one_way_and_the_chart_has_one_titled_y_axis(
    loop: LoopThread, browser: Callable[[str], Awaitable[Chromium]],  # noqa: F811
) -> None:
    board = Dashboard(["a:1+2", "b:3+4"], ["builtin.Catch-v0"] * 2, loop=loop)
    feed(board, 2, episodes=3)
    url = board.start(0)
    try:
        page = await browser(url)
        await wait_until(lambda: page.evaluate("document.querySelectorAll('#chart path').length === 1"),
                         "the chart of remote 0's episodes")
        card = await page.evaluate("document.querySelector('#remote-0 .episode').textContent")
        assert card.startswith("episode 4 ·"), card  # three ended: the fourth is under way
        assert "id" not in card  # the remote's own id is in the tooltip only
        xticks = await page.evaluate(texts("#chart .xtick"))
        assert xticks[0] == "1" and xticks[-1] == "3" and "0" not in xticks, xticks
        axes = await page.evaluate(texts("#chart .axis"))
        assert sorted(axes) == ["episode", "return"]
        yticks = await page.evaluate(texts("#chart .ytick"))
        assert "0" in yticks and len(yticks) >= 3 and len(set(yticks)) == len(yticks), yticks
    finally:
        board.close()


def test_png_thumbnails_are_pillows_and_lossless() -> None:
    frame = np.random.default_rng(1).integers(0, 256, (210, 160, 3), np.uint8)
    data = encode_png(frame)
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG" and np.array_equal(np.asarray(image.convert("RGB")), frame)
