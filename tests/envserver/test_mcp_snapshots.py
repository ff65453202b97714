"""The MCP ``snapshot`` and ``restore`` tools, with the official MCP SDK's client on a
real lockstep ``builtin.Catch-v0`` remote: a snapshot, N actions, a restore (by token and
by exported bytes), the same N actions give the same screenshots, rewards and ends; an
observer's restore refused; a bad token, garbage bytes and a malformed call refused with
a readable tool error while the remote serves on; and an X11 remote, which cannot
snapshot, neither lists the tools nor does them, saying why.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from typing import Any, Final

import pytest

from benchmarks.mcp_agent import Served, info_of, session
from tests.envserver.x11_program import served_program

pytestmark = pytest.mark.timeout(240)

#: The actions replayed after each restore: moves and waits, one lockstep step or more each.
ACTIONS: Final = (
    {"action": "key", "text": "Left"}, {"action": "key", "text": "Left"},
    {"action": "wait", "duration": 0.1}, {"action": "key", "text": "Right"},
    {"action": "key", "text": "Left"}, {"action": "wait", "duration": 0.2},
    {"action": "key", "text": "Right"}, {"action": "key", "text": "Right"},
)


@pytest.fixture(scope="module")
def catch() -> Iterator[Served]:
    served = Served("builtin.Catch-v0", "--mode", "lockstep")
    yield served
    served.close()


def _frame(result: Any) -> bytes:
    """The decoded pixels of a tool result's screenshot."""
    import io

    import numpy as np
    from PIL import Image

    assert not result.isError, result.content[0].text
    image = result.content[0]
    assert image.type == "image"
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(image.data))).convert("RGB")).tobytes()


async def _play(client: Any) -> list[tuple[bytes, float, bool]]:
    out = []
    for action in ACTIONS:
        result = await client.call_tool("computer", action)
        info = info_of(result)
        out.append((_frame(result), info["reward"], info["done"]))
    return out


async def test_restore_replays_the_same_screens_by_token_and_by_bytes(catch: Served) -> None:
    async with session(catch.url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"snapshot", "restore"} <= set(tools)
        assert set(tools["restore"].inputSchema["properties"]) >= {"token", "state", "screenshot"}
        await client.call_tool("reset", {"seed": 7, "screenshot": False})
        await client.call_tool("computer", {"action": "key", "text": "Right"})
        snap = info_of(await client.call_tool("snapshot", {"export": True}))
        assert isinstance(snap["token"], str) and base64.b64decode(snap["state"])
        shown = _frame(await client.call_tool("computer", {"action": "screenshot"}))
        first = await _play(client)
        assert len({frame for frame, _, _ in first}) > 1  # the game moved

        by_token = await client.call_tool("restore", {"token": snap["token"]})
        assert _frame(by_token) == shown
        restored = info_of(by_token)
        assert restored["action"] == "restore" and restored["restored"]["token"] == snap["token"]
        assert restored["episode_id"] > snap["episode_id"]  # a new branch
        assert await _play(client) == first

        by_bytes = await client.call_tool("restore", {"state": snap["state"]})
        assert _frame(by_bytes) == shown
        assert await _play(client) == first


async def test_observers_and_bad_input_are_refused_and_the_remote_serves_on(catch: Served) -> None:
    async with session(catch.url) as driver, session(catch.url) as observer:
        await driver.call_tool("reset", {"seed": 3, "screenshot": False})
        token = info_of(await driver.call_tool("snapshot", {}))["token"]
        assert "state" not in info_of(await driver.call_tool("snapshot", {}))
        for name, args in (("restore", {"token": token}), ("snapshot", {})):
            refused = await observer.call_tool(name, args)
            assert refused.isError and "drives this remote" in refused.content[0].text
        for args, says in (({"token": "no-such-token"}, "no-such-token"),
                           ({"state": base64.b64encode(b"\x80\x04garbage").decode()}, "snapshot"),
                           ({"state": "not base64!"}, "base64"),
                           ({}, "exactly one"),
                           ({"token": token, "state": "AAAA"}, "exactly one")):
            bad = await driver.call_tool("restore", args)
            assert bad.isError and says in bad.content[0].text, (args, bad.content[0].text)
        assert _frame(await driver.call_tool("restore", {"token": token}))  # still serving
        assert not (await driver.call_tool("computer", {"action": "key", "text": "Left"})).isError


async def test_a_remote_that_cannot_snapshot_says_why() -> None:
    served = served_program([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        async with session(served.url) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "computer" in names and not names & {"snapshot", "restore"}
            refused = await client.call_tool("snapshot", {})
            assert refused.isError and "cannot snapshot" in refused.content[0].text
            state = json.loads((await client.call_tool("state", {})).content[-1].text)
            assert state["env_id"] == "x11.Command-v0"  # serving on
    finally:
        served.close()


async def test_a_restore_from_bytes_gives_back_the_pointer_the_game_had() -> None:
    """Exported bytes carry the game's pointer (ClickTarget's state): after a restore
    from them the tools' pointer is there again, as after a restore by token, so a click
    without coordinates clicks where it did the first time."""
    served = Served("builtin.ClickTarget-v0", "--mode", "lockstep")
    try:
        async with session(served.url) as client:
            await client.call_tool("reset", {"seed": 2, "screenshot": False})
            await client.call_tool("computer", {"action": "mouse_move", "coordinate": [40, 30]})
            where = info_of(await client.call_tool("computer", {"action": "cursor_position"}))
            snap = info_of(await client.call_tool("snapshot", {"export": True}))
            await client.call_tool("computer", {"action": "mouse_move", "coordinate": [90, 70]})
            await client.call_tool("restore", {"state": snap["state"]})
            again = info_of(await client.call_tool("computer", {"action": "cursor_position"}))
            assert again["coordinate"] == where["coordinate"] != [0, 0]
    finally:
        served.close()
