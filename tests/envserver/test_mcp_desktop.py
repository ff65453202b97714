"""An X11 desktop remote of another size than XGA, and what agents use on a desktop
besides input, through MCP with the SDK's own client: ``serve x11.Command-v0 --option
screen=1920x1080`` running a Tk program (``x11_probe.py``) that reports where clicks
land, what its entry holds and what files it sees. One remote for the module.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from PIL import Image

from benchmarks.mcp_agent import Served, info_of, session
from tests.envserver.x11_program import served_program

pytestmark = pytest.mark.timeout(180)

PROGRAM: Final = Path(__file__).with_name("x11_probe.py")
#: Seconds the program may take to report (a loaded machine).
TIMEOUT: Final = 20.0
#: The entry, in screenshot pixels (the window at the top left, no window manager).
ENTRY: Final = [40, 8]


@pytest.fixture(scope="module")
def desktop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    out = tmp_path_factory.mktemp("probe") / "report.json"
    served = served_program([sys.executable, str(PROGRAM), str(out)], "--option", "screen=1920x1080")
    yield served, out
    served.close()


async def _report(out: Path) -> dict[str, Any]:
    """The program's next report (the caller removed the last one before acting)."""
    async with asyncio.timeout(TIMEOUT):
        while not out.exists():
            await asyncio.sleep(0.05)  # the program writes it when it sees the input
    data: dict[str, Any] = json.loads(out.read_text())
    return data


async def _fresh(client: Any, out: Path, **args: Any) -> Any:
    """Reset (the program starts afresh) and wait until its window is up; the reset's answer."""
    out.unlink(missing_ok=True)
    answer = await client.call_tool("reset", args)
    assert (await _report(out))["ready"]
    out.unlink()
    return answer


def _pixels(result: Any) -> np.ndarray:
    image = next(c for c in result.content if c.type == "image")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(image.data))).convert("RGB"))


async def test_a_full_hd_desktop_is_seen_at_wxga_and_clicks_land(desktop: tuple[Served, Path]) -> None:
    served, out = desktop
    async with session(served.url) as client:
        shot = _pixels(await _fresh(client, out))
        assert shot.shape == (720, 1280, 3)  # 1920x1080 scaled to WXGA's width, 16:9 kept
        state = info_of(await client.call_tool("state", {}))
        assert state["screen_size"] == [1920, 1080] and state["screenshot_size"] == [1280, 720]
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "1280x720" in (tools["computer"].description or "")
        info_of(await client.call_tool("computer", {"action": "left_click", "coordinate": [640, 360]}))
        report = await _report(out)
        assert report["screen"] == [1920, 1080]  # the X screen is the size asked for
        assert report["click"] == [960, 540]  # the screenshot's point, on the screen
        out.unlink()
        info_of(await client.call_tool("computer", {"type": "click", "x": 1279, "y": 719}))
        assert (await _report(out))["click"] == [1918, 1078]
        outside = await client.call_tool("computer", {"action": "left_click", "coordinate": [1280, 10]})
        assert outside.isError and "1280×720 screenshot" in outside.content[0].text


async def test_an_answer_carries_only_what_changed_when_asked(desktop: tuple[Served, Path]) -> None:
    served, out = desktop
    async with session(served.url) as client:
        await _fresh(client, out, screenshot=False)
        first = await client.call_tool("computer", {"action": "left_click", "coordinate": ENTRY,
                                                    "screenshot": "changed"})
        assert info_of(first)["screenshot"] == "full"  # nothing sent before: all of it
        before = _pixels(first).copy()
        assert before.shape == (720, 1280, 3)
        still = await client.call_tool("wait_until_settled", {"screenshot": "changed"})
        assert info_of(still)["screenshot"] == "unchanged"
        assert [c.type for c in still.content] == ["text"]
        typed = await client.call_tool("computer", {"action": "type", "text": "abc",
                                                    "screenshot": "changed"})
        info = info_of(typed)
        assert info["screenshot"] == "changed"
        x0, y0, x1, y1 = info["region"]
        patch = _pixels(typed)
        assert patch.shape == (y1 - y0, x1 - x0, 3)
        assert x1 <= 400 and y1 <= 40  # the entry's line, not the screen
        # The patch on the last screenshot is the screen now.
        now = _pixels(await client.call_tool("computer", {"action": "screenshot"}))
        before[y0:y1, x0:x1] = patch
        assert (before == now).all()
        default = await client.call_tool("computer", {"action": "key", "text": "BackSpace"})
        assert [c.type for c in default.content] == ["image", "text"]  # full, as always
        assert _pixels(default).shape == (720, 1280, 3) and "screenshot" not in info_of(default)
        bad = await client.call_tool("computer", {"action": "screenshot", "screenshot": "diff"})
        assert bad.isError and "changed" in bad.content[0].text


async def _clipboard(client: Any, expected: str) -> str:
    """The clipboard's text once it is ``expected`` (a program's copy reaches the remote
    over the display's connection a moment after the key that made it), or as it is then."""
    text = None
    async with asyncio.timeout(TIMEOUT):
        while (text := info_of(await client.call_tool("clipboard", {"action": "get"}))["text"]) != expected:
            await asyncio.sleep(0.05)  # nothing to wait on through MCP: ask again
    return str(text)


async def test_clipboard_set_is_pasted_and_a_programs_copy_is_read_back(desktop: tuple[Served, Path]) -> None:
    served, out = desktop
    async with session(served.url) as client:
        await _fresh(client, out, screenshot=False)
        assert info_of(await client.call_tool("clipboard", {"action": "set", "text": "héllo"}))["chars"] == 5
        for args in ({"action": "left_click", "coordinate": ENTRY}, {"action": "key", "text": "ctrl+v"},
                     {"action": "type", "text": " world"}, {"action": "key", "text": "Return"}):
            info_of(await client.call_tool("computer", {**args, "screenshot": False}))
        assert (await _report(out))["entry"] == "héllo world"  # pasted into the Tk entry
        for keys in ("ctrl+slash", "ctrl+c"):  # Tk's select-all, then copy
            info_of(await client.call_tool("computer", {"action": "key", "text": keys, "screenshot": False}))
        assert await _clipboard(client, "héllo world") == "héllo world"  # the program's copy
        refused = await client.call_tool("clipboard", {"action": "set", "text": "日本"})
        assert refused.isError and "Latin-1" in refused.content[0].text


async def test_a_file_put_is_seen_by_the_program_and_its_file_got_back(desktop: tuple[Served, Path]) -> None:
    served, out = desktop
    async with session(served.url) as client:
        await _fresh(client, out, screenshot=False)
        put = info_of(await client.call_tool("files", {"action": "put", "path": "in.txt",
                                                       "text": "hello files"}))
        assert put["bytes"] == 11
        info_of(await client.call_tool("computer", {"action": "key", "text": "ctrl+r", "screenshot": False}))
        report = await _report(out)
        assert report["read"] == "hello files" and report["cwd"] == put["folder"]
        got = info_of(await client.call_tool("files", {"action": "get", "path": "out.txt"}))
        assert got["text"] == "HELLO FILES"  # written by the program
        binary = base64.b64encode(bytes(range(256))).decode()
        info_of(await client.call_tool("files", {"action": "put", "path": "sub/b.bin", "data": binary}))
        got = info_of(await client.call_tool("files", {"action": "get", "path": "sub/b.bin"}))
        assert got["data"] == binary
        listed = info_of(await client.call_tool("files", {"action": "list"}))["files"]
        assert [f["path"] for f in listed] == ["in.txt", "out.txt", "sub/b.bin"]
        for path in ("../escape.txt", "/etc/hostname", "sub/../../x"):
            refused = await client.call_tool("files", {"action": "get", "path": path})
            assert refused.isError and "leads out of the remote's folder" in refused.content[0].text
        await _fresh(client, out, screenshot=False)
        assert info_of(await client.call_tool("files", {"action": "list"}))["files"] == []  # a new episode
