"""The MCP endpoint on a MiniWoB remote, with the official MCP SDK's client over
streamable HTTP and over stdio (``universe-remote mcp URL``): the tools and their
schemas; a scripted computer-use agent that speaks only Anthropic's ``computer`` actions
(coordinates from the page's structure, in screenshot pixels) solving MiniWoB tasks, and
the same agent through OpenAI's action objects; one driver, a second client refused as
driver and watching; one agent across the rewarder and MCP; errors a model reads. One
real remote (``universe-remote serve``, Chromium on Xvnc) for the module.

The full run (14 tasks x 5 seeds, both providers' actions) is ``python -m benchmarks
mcp_agent``; here one seed of 10 tasks, which CI can afford.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import pytest
from PIL import Image

from benchmarks import mcp_sdk
from benchmarks.mcp_agent import TASKS, Served, info_of, play, session
from envserver.computer_use import actions
from rewarder.client import RewarderClient
from rewarder.errors import ConnectionClosed
from tests.optional import need_env

pytestmark = pytest.mark.timeout(300)

#: Seconds any one wait may take (a loaded 2-core machine).
TIMEOUT: Final = 30.0
#: Tasks the CI run plays with Anthropic's actions (one seed each), and with OpenAI's.
CI_TASKS: Final = TASKS[:10]
OPENAI_TASKS: Final = ("click-button", "enter-text")


@pytest.fixture(scope="module")
def remote() -> Iterator[Served]:
    need_env("miniwob.ClickTest-v0")
    served = Served("miniwob.ClickTest-v0")
    yield served
    served.close()


@contextlib.asynccontextmanager
async def stdio_session(url: str, *extra: str) -> AsyncIterator[Any]:
    """The MCP host's way: ``universe-remote mcp URL`` launched as a process, over stdio."""
    async with mcp_sdk.stdio_session(sys.executable, ["-m", "universe_remote", "mcp", url, *extra],
                                     dict(os.environ)) as client:
        yield client


async def test_tools_list_shows_the_schemas(remote: Served) -> None:
    async with session(remote.url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"computer", "reset", "state", "wait_until_settled", "seat", "page",
                          "browser_action"}
    schema = mcp_sdk.input_schema(tools["computer"])["properties"]
    assert schema["action"]["enum"] == list(actions.ANTHROPIC_ACTIONS)
    assert {"zoom", "left_click_drag", "hold_key", "triple_click"} <= set(schema["action"]["enum"])
    assert schema["type"]["enum"] == list(actions.OPENAI_ACTIONS)
    assert {"coordinate", "region", "scroll_direction", "scroll_amount", "keys", "path"} <= set(schema)
    assert "160x210" in (tools["computer"].description or "")  # MiniWoB's task: native size


async def test_a_computer_use_agent_solves_miniwob_tasks_with_anthropic_actions(remote: Served) -> None:
    async with session(remote.url) as client:
        played = {task: await play(client, task, seed=0) for task in CI_TASKS}
    won = [task for task, p in played.items() if p.won]
    assert len(won) >= 9, {task: (p.won, p.actions, p.errors) for task, p in played.items()}


async def test_the_same_agent_with_openai_actions_over_stdio(remote: Served) -> None:
    async with stdio_session(remote.url) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert "computer" in tools
        played = {task: await play(client, task, seed=1, style="openai") for task in OPENAI_TASKS}
    assert all(p.won for p in played.values()), {t: (p.won, p.errors) for t, p in played.items()}


async def test_an_action_answers_with_the_settled_screenshot_and_the_reward(remote: Served) -> None:
    async with session(remote.url) as client:
        reset = await client.call_tool("reset", {"seed": 3, "env_id": "miniwob.ClickTest-v0"})
        image, text = reset.content
        assert image.type == "image" and mcp_sdk.mime_type(image) == "image/png"
        assert Image.open(io.BytesIO(base64.b64decode(image.data))).size == (160, 210)
        assert json.loads(text.text)["instruction"] == "Click the button."
        page = info_of(await client.call_tool("page", {}))
        assert "button 'Click Me!'" in page["tree"]
        button = next(e for e in page["elements"] if e["role"] == "button")
        clicked = await client.call_tool("computer", {"action": "left_click", "coordinate": button["point"],
                                                      "format": "jpeg"})
        assert mcp_sdk.mime_type(clicked.content[0]) == "image/jpeg"
        info = info_of(clicked)
        assert info["done"] is True and info["reward"] > 0 and info["settle"]["settled_s"] > 0
        assert info["ended_episode"]["return"] == info["reward"]
        state = info_of(await client.call_tool("state", {}))
        assert state["reward"] == 0 and state["done"] is False  # told already
        assert state["you_drive"] is True and state["screenshot_size"] == [160, 210]
        where = info_of(await client.call_tool("computer", {"action": "cursor_position"}))
        assert where["coordinate"] == button["point"]
        quiet = await client.call_tool("computer", {"action": "mouse_move", "coordinate": [5, 5],
                                                    "screenshot": False, "settle": False})
        assert [c.type for c in quiet.content] == ["text"]
        zoomed = await client.call_tool("computer", {"action": "zoom", "region": [0, 0, 80, 105]})
        assert Image.open(io.BytesIO(base64.b64decode(zoomed.content[0].data))).size == (160, 210)
        settled = info_of(await client.call_tool("wait_until_settled", {"max_ms": 5000, "screenshot": False}))
        assert "settle" in settled


async def test_bad_arguments_get_a_tool_error_a_model_can_read(remote: Served) -> None:
    async with session(remote.url) as client:
        for args, words in (
            ({"action": "left_click", "coordinate": [1400, 20]},
             "coordinate [1400, 20] is outside the 160×210 screenshot"),
            ({"action": "key", "text": "ctrl+nosuchkey"}, "unknown key 'nosuchkey'"),
            ({"action": "key", "text": "F13"}, "does not use key 'F13'"),
            ({"type": "click", "x": 10, "y": 10, "button": "back"},
             "button 'back' would move the browser's history (Alt+Left) away from the task's page"),
            ({"action": "fly"}, "unknown action 'fly': one of key, hold_key"),
            ({"action": "screenshot", "colour": 1}, "computer takes no argument 'colour'; it takes action,"),
        ):
            result = await client.call_tool("computer", args)
            assert mcp_sdk.is_error(result) and words in result.content[0].text, result.content[0].text
        failed = info_of(await client.call_tool("browser_action", {"action": "click('a999')"}))
        assert failed["last_action_error"]
        assert not mcp_sdk.is_error(await client.call_tool("state", {}))  # the session goes on


async def test_a_second_client_is_refused_as_driver_and_can_watch(remote: Served) -> None:
    async with session(remote.url) as agent:
        info_of(await agent.call_tool("reset", {"seed": 2, "env_id": "miniwob.ClickTest-v0"}))
        async with session(remote.url) as other:
            refused = await other.call_tool("computer", {"action": "left_click", "coordinate": [10, 10]})
            assert mcp_sdk.is_error(refused)
            assert "an MCP client (MCP session" in refused.content[0].text
            assert "drives this remote; one agent at a time" in refused.content[0].text
            assert mcp_sdk.is_error(await other.call_tool("reset", {"seed": 1}))
            shot = await other.call_tool("computer", {"action": "screenshot"})
            assert not mcp_sdk.is_error(shot) and shot.content[0].type == "image"
            state = info_of(await other.call_tool("state", {}))
            assert state["you_drive"] is False and state["driver"].startswith("an MCP client")
            # One agent across the front ends: the rewarder refuses an agent meanwhile.
            rewarder = RewarderClient("127.0.0.1:" + remote.address.split("?")[0].rpartition("+")[2],
                                      start_timeout=0.5)
            with pytest.raises(ConnectionClosed, match="busy: an MCP client"):
                await rewarder.start()
    # The agent's session ended: its seat is free for the next client.
    async with session(remote.url) as third:
        async with asyncio.timeout(TIMEOUT):
            while mcp_sdk.is_error(await third.call_tool("reset", {"seed": 1})):
                await asyncio.sleep(0.05)  # the server ends the closed session's lifespan
        assert info_of(await third.call_tool("state", {}))["you_drive"] is True


async def test_the_agent_on_a_lockstep_remote() -> None:
    """Each action is a lockstep step of a frame (the page's clock paused between them)."""
    need_env("miniwob.ClickButton-v0")
    served = Served("miniwob.ClickButton-v0", "--mode", "lockstep")
    try:
        async with session(served.url) as client:
            played = {task: await play(client, task, seed=2) for task in ("click-button", "enter-text")}
            state = info_of(await client.call_tool("state", {}))
    finally:
        served.close()
    assert all(p.won for p in played.values()), {t: (p.won, p.errors) for t, p in played.items()}
    assert state["mode"] == "lockstep" and state["settle"]["how"].startswith("lockstep")
