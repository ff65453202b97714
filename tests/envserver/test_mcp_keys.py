"""Every key name of docs/computer-use.md's key table, through the MCP ``computer`` tool
on an X11 desktop remote (the official SDK's client), reaches a real X program as the
keysym it names: a Tk window on Xvnc (``x11.Command-v0``) reports each KeyPress's keysym
over a socket, as xev would print it. xdotool's names go as Anthropic's ``key``, OpenAI's
as ``keypress``.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from benchmarks.mcp_agent import Served, info_of, session
from envserver.computer_use import keys
from tests.envserver.x11_program import served_program
from vncdriver import keysyms
from vncdriver.errors import UnknownKey

pytestmark = pytest.mark.timeout(180)

ROOT: Final = Path(__file__).parents[2]
PROGRAM: Final = Path(__file__).with_name("mcp_tk_keys.py")
#: Seconds the X program may take to report a key (a loaded machine).
TIMEOUT: Final = 20.0
#: Inside the Tk window (at the top left; no window manager), to give it the focus.
INSIDE: Final = [100, 100]


def doc_keys() -> tuple[list[str], list[list[str]]]:
    """The key table of docs/computer-use.md: xdotool's key strings, OpenAI's key lists
    (``F1``–``F12`` is twelve names)."""
    text = (ROOT / "docs" / "computer-use.md").read_text()
    table = text[text.index("| keys | xdotool"):]
    table = table[:table.index("\n\n")]
    xdotool: list[str] = []
    openai: list[list[str]] = []
    for row in table.splitlines()[2:]:
        _, _, xcell, ocell, _ = row.split("|")
        xdotool += _names(xcell)
        openai += [json.loads(n) if n.startswith("[") else [n] for n in _names(ocell)]
    return xdotool, openai


def _names(cell: str) -> list[str]:
    names: list[str] = []
    for span in re.findall(r"`([^`]+)`(?:–`([^`]+)`)?", cell):
        first, last = span
        if last:  # a range: F1–F12, KP_0–KP_9
            stem = first.rstrip("0123456789")
            names += [f"{stem}{i}" for i in range(int(first[len(stem):]), int(last[len(stem):]) + 1)]
        else:
            names.append(first)
    return names


def _pressed(names: list[str]) -> list[int]:
    """The keysyms a combination presses, in order (``ctrl+shift+t`` presses ``T``)."""
    return [keysyms.keysym(str(name)) for _, name, down in keys.combo_events(names) if down]


@pytest.fixture(scope="module")
def desktop() -> Iterator[tuple[Served, socket.socket]]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    served = served_program([sys.executable, str(PROGRAM), str(port)])
    yield served, listener
    served.close()
    listener.close()


def test_the_table_has_the_keys_people_press() -> None:
    xdotool, openai = doc_keys()
    assert {"F1", "F12", "KP_0", "KP_9", "alt+F4", "super", "Print", "Menu"} <= set(xdotool)
    assert {"CMD", "META", "WIN", "CAPSLOCK", "F5"} <= {k for ks in openai for k in ks}


async def test_every_documented_key_reaches_the_x_program(desktop: tuple[Served, socket.socket]) -> None:
    served, listener = desktop
    xdotool, openai = doc_keys()
    # (computer arguments, the keysyms the program must see pressed, in order)
    plans: list[tuple[dict[str, Any], list[int]]] = []
    for text in xdotool:
        combos = keys.xdotool_keys(text)
        plans.append(({"action": "key", "text": text}, [k for c in combos for k in _pressed(c)]))
    for names in openai:
        plans.append(({"type": "keypress", "keys": names}, _pressed(keys.openai_keys(names))))
    # OpenAI's back button is Alt+Left on a desktop (docs/computer-use.md).
    plans.append(({"type": "click", "x": INSIDE[0], "y": INSIDE[1], "button": "back"},
                  _pressed(["Alt_L", "Left"])))
    # A lock toggles: press each lock key twice, last, so no other key sees it on.
    locks = {keysyms.keysym(k) for k in ("Caps_Lock", "Num_Lock")}
    plans.sort(key=lambda plan: bool(locks & set(plan[1])))
    plans += [plan for plan in plans if locks & set(plan[1])]

    connected: asyncio.Queue[asyncio.StreamReader] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await connected.put(reader)

    server = await asyncio.start_server(on_connect, sock=listener)
    async with server, session(served.url) as client:
        async with asyncio.timeout(TIMEOUT):  # the program of the remote's first episode
            reader = await connected.get()
        info_of(await client.call_tool("computer", {"action": "left_click", "coordinate": INSIDE}))
        refused: list[str] = []
        for args, want in plans:
            result = await client.call_tool("computer", {**args, "screenshot": False, "settle": False})
            if result.isError:
                refused.append(f"{args}: {result.content[0].text}")
                continue
            seen = await _until_pressed(reader, want)
            assert _subsequence(want, seen), f"{args}: X saw {_names_of(seen)}, not {_names_of(want)}"
        assert not refused, "\n".join(refused)


async def _until_pressed(reader: asyncio.StreamReader, want: list[int]) -> list[int]:
    """The keysyms the program reports until it has seen ``want`` pressed (or the timeout)."""
    seen: list[int] = []
    try:
        async with asyncio.timeout(TIMEOUT):
            while not _subsequence(want, seen):
                line = await reader.readline()
                if not line:
                    break  # the program is gone
                seen.append(_number(line.decode().strip()))
    except TimeoutError:
        pass
    return seen


def _number(name: str) -> int:
    """A reported keysym's number (-1 for one X has no name for: Tk's "??")."""
    try:
        return keysyms.keysym(name)
    except UnknownKey:
        return -1


def _names_of(numbers: list[int]) -> list[str]:
    return [keysyms.name(n) for n in numbers]


def _subsequence(want: list[int], seen: list[int]) -> bool:
    """Whether ``want`` is pressed in order within ``seen`` (Xvnc may add a Shift it
    needs for a keysym, as for "A")."""
    it = iter(seen)
    return all(k in it for k in want)
