"""Computer-use actions on an X11 desktop remote through MCP: Anthropic's ``type`` and
``key`` (xdotool's "ctrl+a", "Tab", "shift+Tab", "End", "Return") and OpenAI's
``keypress`` reach a real X program (Tk entries on Xvnc, ``x11.Command-v0``) as the text
and keys it was sent; the screenshot shows the text. The program writes what its entries
hold on Return, which is what the test reads.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import numpy as np
import pytest
from PIL import Image

from benchmarks.mcp_agent import Served, info_of, session
from tests.envserver.x11_program import served_program

pytestmark = pytest.mark.timeout(180)

PROGRAM: Final = Path(__file__).with_name("mcp_tk_entries.py")
#: Seconds the program may take to write its file after Return (a loaded machine).
TIMEOUT: Final = 20.0
#: Where the first entry is on the screen (the Tk window at the top left, no window manager).
FIRST_ENTRY: Final = [60, 10]


@pytest.fixture(scope="module")
def desktop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    out = tmp_path_factory.mktemp("tk") / "entries.json"
    served = served_program([sys.executable, str(PROGRAM), str(out)])
    yield served, out
    served.close()


async def _written(out: Path) -> dict[str, str]:
    async with asyncio.timeout(TIMEOUT):
        while not out.exists():
            await asyncio.sleep(0.05)  # the program writes it on Return: nothing to wait on
    data: dict[str, str] = json.loads(out.read_text())
    return data


def _pixels(result: object) -> np.ndarray:
    content = result.content[0]  # type: ignore[attr-defined]
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(content.data))))


async def test_type_and_key_reach_the_x_program(desktop: tuple[Served, Path]) -> None:
    served, out = desktop
    async with session(served.url) as client:
        before = _pixels(await client.call_tool("reset", {"seed": 0}))
        assert before.shape == (768, 1024, 3)  # XGA already: native
        info_of(await client.call_tool("computer", {"action": "left_click", "coordinate": FIRST_ENTRY}))
        out.unlink(missing_ok=True)
        for args in ({"action": "type", "text": "world"}, {"action": "key", "text": "ctrl+a"},
                     {"action": "type", "text": "Hello "}, {"action": "key", "text": "Tab"},
                     {"action": "type", "text": "two"}, {"action": "key", "text": "shift+Tab"},
                     {"action": "key", "text": "End"}, {"action": "type", "text": "!"}):
            info_of(await client.call_tool("computer", {**args, "screenshot": False}))
        typed = await client.call_tool("computer", {"action": "key", "text": "Return"})
        assert await _written(out) == {"a": "Hello world!", "b": "two", "focus": ".a"}
        after = _pixels(typed)
        assert (after[:40, :300] != before[:40, :300]).any()  # the text shows in the screenshot
        # OpenAI's names: BACKSPACE, then CTRL+A (the line's start) and a character.
        out.unlink()
        for action in ({"type": "keypress", "keys": ["BACKSPACE"]},
                       {"type": "keypress", "keys": ["CTRL", "A"]},
                       {"type": "type", "text": ">"}, {"type": "keypress", "keys": ["ENTER"]}):
            info_of(await client.call_tool("computer", {**action, "screenshot": False}))
        assert (await _written(out))["a"] == ">Hello world"
