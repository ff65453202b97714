"""A desktop agents can read: a GTK 3 program's accessible elements on an X11 remote
(``--option accessibility=true``: AT-SPI on the display, read with jeepney) through MCP
with the SDK's own client, and clicks by element id that the program sees.

The program (``gtk_probe.py``) runs with Debian's python3 (python3-gi, gir1.2-gtk-3.0,
which scripts/install-system-packages installs); the test is skipped where they are not.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from benchmarks.mcp_agent import Served, info_of, session
from tests.envserver.x11_program import served_program

pytestmark = pytest.mark.timeout(180)

PROGRAM: Final = Path(__file__).with_name("gtk_probe.py")
#: Debian's python3, which has python3-gi (the project's venv does not).
SYSTEM_PYTHON: Final = "/usr/bin/python3"
#: Seconds the program may take to show its window or report a click (a loaded machine).
TIMEOUT: Final = 30.0


def _missing() -> str | None:
    try:
        import jeepney  # noqa: F401
    except ModuleNotFoundError:
        return "jeepney is not installed: pip install '.[desktop]'"
    if shutil.which("dbus-daemon") is None or not Path("/usr/libexec/at-spi-bus-launcher").exists():
        return "AT-SPI is not installed: apt-get install at-spi2-core dbus-daemon"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import gi; gi.require_version('Gtk', '3.0')"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        return "GTK 3 for Debian's python3 is not installed: apt-get install python3-gi gir1.2-gtk-3.0"
    return None


@pytest.fixture(scope="module")
def desktop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    if (why := _missing()) is not None:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("gtk") / "report.json"
    served = served_program([SYSTEM_PYTHON, str(PROGRAM), str(out)], "--option", "accessibility=true")
    yield served, out
    served.close()


async def _tree_with(client: Any, role: str, name: str) -> dict[str, Any]:
    """The tree once the program has put an element ``role`` named ``name`` on it (a
    program joins the accessibility bus a moment after its window shows)."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            tree = info_of(await client.call_tool("desktop_tree", {}))
            if any(e["role"] == role and e["name"] == name for e in tree["elements"]):
                return tree
            await asyncio.sleep(0.1)  # nothing to wait on through MCP: ask again


async def _report(out: Path) -> dict[str, Any]:
    async with asyncio.timeout(TIMEOUT):
        while not out.exists():
            await asyncio.sleep(0.05)  # the program writes it when its button is clicked
    data: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return data


def _find(tree: dict[str, Any], role: str, name: str = "") -> dict[str, Any]:
    return next(e for e in tree["elements"] if e["role"] == role and (not name or e["name"] == name))


async def test_a_gtk_programs_tree_and_clicks_by_element_id(desktop: tuple[Served, Path]) -> None:
    served, out = desktop
    async with session(served.url) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"desktop_tree", "desktop_action"} <= tools
        await client.call_tool("reset", {"screenshot": False})
        tree = await _tree_with(client, "push button", "Press me")
        frame, button = _find(tree, "frame", "Probe"), _find(tree, "push button", "Press me")
        check, entry = _find(tree, "check box", "Agree"), _find(tree, "text")
        assert entry["value"] == "some text" and "editable" in entry["states"]
        assert "checked" not in check["states"] and "focusable" in button["states"]
        x, y, w, h = button["bbox"]
        px, py = button["point"]
        assert w > 20 and h > 10 and x <= px < x + w and y <= py < y + h
        assert tree["screenshot_size"] == [1024, 768]  # XGA: screen pixels as they are
        fx, fy, fw, fh = frame["bbox"]
        assert fx <= x and fy <= y and x + w <= fx + fw and y + h <= fy + fh  # inside its window
        assert "[" + button["id"] + "] push button 'Press me'" in tree["tree"]
        out.unlink(missing_ok=True)
        clicked = await client.call_tool("desktop_action", {"element": button["id"]})
        assert [c.type for c in clicked.content] == ["image", "text"]  # answers as computer does
        assert await _report(out) == {"clicks": 1, "entry": "some text", "agree": False}
        info_of(await client.call_tool("desktop_action", {"element": check["id"], "screenshot": False}))
        info_of(await client.call_tool("desktop_action", {"element": button["id"], "action": "click"}))
        assert await _report(out) == {"clicks": 2, "entry": "some text", "agree": True}
        again = info_of(await client.call_tool("desktop_tree", {}))
        assert "checked" in _find(again, "check box", "Agree")["states"]
        assert _find(again, "check box", "Agree")["id"] == check["id"]  # ids last
        unknown = await client.call_tool("desktop_action", {"element": "e99999"})
        assert unknown.isError and "no element 'e99999'" in unknown.content[0].text
