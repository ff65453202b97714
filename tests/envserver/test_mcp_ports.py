"""The MCP port's rules, as on every port: a password as ``Authorization: Bearer`` through the
remote's failed-password throttle; TLS (https://, and plain http:// told so); web pages
refused; the stdio relay with a password and a CA; lockstep steps; input recorded as the
agent's, and a recording of an MCP session that replays. Real remotes of
``builtin.Catch-v0`` (cheap to start) and the official MCP SDK's client.
"""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from benchmarks import mcp_sdk
from benchmarks.mcp_agent import Served, info_of, session
from recordings import open_recording
from recordings.format import frame_hash
from runtimes import registry
from runtimes.base import KeyEvent
from tests.envserver.test_mcp import stdio_session
from tests.tls import Certs, certs_fixture  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(180)

PASSWORD: Final = "mcp-pw"
#: Wrong passwords before the remote's throttle blocks an address (rewarder.throttle).
MAX_FAILURES: Final = 5
TIMEOUT: Final = 30.0


@pytest.fixture(scope="module")
def guarded(certs: Certs) -> Iterator[Served]:
    served = Served("builtin.Catch-v0", "--mode", "lockstep", "--password", PASSWORD,
                    "--tls-cert", str(certs.cert), "--tls-key", str(certs.key))
    yield served
    served.close()


@contextlib.asynccontextmanager
async def tls_session(url: str, ca: Path, password: str | None) -> AsyncIterator[Any]:
    async with mcp_sdk.session(url, password, str(ca)) as client:
        yield client


def _post(url: str, ca: Path, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    return httpx.post(url, json=body, verify=ssl.create_default_context(cafile=str(ca)), timeout=TIMEOUT,
                      headers={"Accept": "application/json, text/event-stream", **(headers or {})})


async def test_tls_password_and_lockstep_steps(guarded: Served, certs: Certs) -> None:
    assert guarded.url.startswith("https://")
    async with tls_session(guarded.url, certs.ca, PASSWORD) as client:
        before = info_of(await client.call_tool("reset", {"seed": 1, "screenshot": False}))
        frame = info_of(await client.call_tool("state", {}))["frame"]
        stepped = info_of(await client.call_tool("computer", {"action": "key", "text": "Left"}))
        assert stepped["settle"]["how"].startswith("lockstep")
        assert info_of(await client.call_tool("state", {}))["frame"] == frame + 1  # one step of a frame
        waited = await client.call_tool("computer", {"action": "wait", "duration": 0.5, "screenshot": False})
        assert info_of(await client.call_tool("state", {}))["frame"] == frame + 1 + 30  # Catch's 60 fps
        assert not waited.isError and before["episode_id"] >= 1
    plain = httpx.post(guarded.url.replace("https://", "http://"), json={}, timeout=TIMEOUT)
    assert plain.status_code == 400 and "https://" in plain.text


async def test_with_the_password_a_client_takes_the_seat_over(guarded: Served, certs: Certs) -> None:
    """A host that lost its session's seat (or a stuck agent) is replaced without waiting."""
    async with tls_session(guarded.url, certs.ca, PASSWORD) as stuck, \
            tls_session(guarded.url, certs.ca, PASSWORD) as rescuer:
        info_of(await stuck.call_tool("reset", {"seed": 2, "screenshot": False}))
        assert mcp_sdk.is_error(await rescuer.call_tool("reset", {"seed": 2}))
        assert info_of(await rescuer.call_tool("seat", {"action": "take_over"}))["you_drive"] is True
        info_of(await rescuer.call_tool("computer", {"action": "key", "text": "Left", "screenshot": False}))
        refused = await stuck.call_tool("computer", {"action": "key", "text": "Left"})
        assert mcp_sdk.is_error(refused) and "drives this remote" in refused.content[0].text
        assert info_of(await stuck.call_tool("state", {}))["you_drive"] is False


async def test_the_stdio_relay_takes_the_password_and_the_ca(guarded: Served, certs: Certs) -> None:
    async with stdio_session(guarded.url, "--password", PASSWORD, "--ca", str(certs.ca)) as client:
        assert "computer" in {t.name for t in (await client.list_tools()).tools}
        assert info_of(await client.call_tool("state", {}))["env_id"] == "builtin.Catch-v0"
    refused = subprocess.run(
        [sys.executable, "-m", "universe_remote", "mcp", guarded.url, "--password", "nope",
         "--ca", str(certs.ca)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT)
    assert refused.returncode == 1 and "HTTP 401: a missing or wrong password" in refused.stderr


def test_web_pages_are_refused(guarded: Served, certs: Certs) -> None:
    page = _post(guarded.url, certs.ca, {"Origin": "https://example.org",
                                         "Authorization": f"Bearer {PASSWORD}"})
    assert page.status_code == 403 and "--allow-origin https://example.org" in page.text


def test_wrong_passwords_are_refused_and_throttled(guarded: Served, certs: Certs) -> None:
    # (Last in the module: it blocks 127.0.0.1 on this remote.)
    missing = _post(guarded.url, certs.ca)
    assert missing.status_code == 401 and "Authorization: Bearer" in missing.text
    assert _post(guarded.url, certs.ca, {"Authorization": "Bearer nope"}).json()["error"]["message"] == \
        "wrong password for this remote"
    assert _post(guarded.url, certs.ca, {"Authorization": f"Bearer {PASSWORD}"}).status_code == 200
    for _ in range(MAX_FAILURES):
        _post(guarded.url, certs.ca, {"Authorization": "Bearer nope"})
    blocked = _post(guarded.url, certs.ca, {"Authorization": f"Bearer {PASSWORD}"})
    assert blocked.status_code == 429 and "blocked for" in blocked.text


async def test_an_mcp_session_is_recorded_as_the_agent_and_replays(tmp_path: Path) -> None:
    served = Served("builtin.Catch-v0", "--mode", "lockstep", "--record", str(tmp_path))
    try:
        async with session(served.url) as client:
            info_of(await client.call_tool("reset", {"seed": 7, "screenshot": False}))
            for key in ("Left", "Left", "Right", "Left"):
                args = {"action": "key", "text": key, "screenshot": False}
                info_of(await client.call_tool("computer", args))
            await client.call_tool("computer", {"action": "wait", "duration": 0.2, "screenshot": False})
            info_of(await client.call_tool("reset", {"seed": 8, "screenshot": False}))  # the episode ends
    finally:
        served.close()
    episode = next(e for e in open_recording(tmp_path).episodes if e.seed == 7)
    events = [e for step in episode.steps for e in step.events]
    assert [(e.source, e.args) for e in events[:2]] == [("agent", ("Left", True)), ("agent", ("Left", False))]
    # Replays: the same seed and the recorded events give the recorded frames.
    runtime = registry.make("builtin.Catch-v0")
    runtime.reset(episode.seed)
    for step in episode.steps[1:]:
        runtime.advance([KeyEvent(*e.args) for e in step.events], step.frames)
        assert frame_hash(runtime.framebuffer) == step.hash, step.index
    assert len(episode.steps) >= 6


async def test_openenv_mcp_messages_reach_the_same_tools() -> None:
    import orjson
    import websockets
    from openenv.core.generic_client import GenericEnvClient

    from tests.envserver.test_openenv import Served as OpenEnvServed

    served = OpenEnvServed("builtin.Catch-v0", "--mode", "lockstep")
    try:
        async with websockets.connect(served.url.replace("http", "ws") + "/ws") as ws:
            async def rpc(method: str, **params: Any) -> dict[str, Any]:
                await ws.send(orjson.dumps({"type": "mcp", "data": {
                    "jsonrpc": "2.0", "id": 1, "method": method, "params": params}}).decode())
                answer = orjson.loads(await ws.recv())
                assert answer["type"] == "mcp", answer
                data: dict[str, Any] = answer["data"]
                return data

            listed = await rpc("tools/list")
            assert {"computer", "reset", "state"} <= {t["name"] for t in listed["result"]["tools"]}
            called = (await rpc("tools/call", name="computer", arguments={"action": "key", "text": "Left"}))
            assert called["result"]["isError"] is False
            assert [c["type"] for c in called["result"]["content"]] == ["image", "text"]
            bad = await rpc("tools/call", name="computer", arguments={"action": "left_click",
                                                                       "coordinate": [999, 1]})
            assert bad["result"]["isError"] and "outside the" in bad["result"]["content"][0]["text"]
            # It drives: an OpenEnv agent is refused meanwhile, as a second MCP client.
            async with GenericEnvClient(base_url=served.url) as env:
                with pytest.raises(RuntimeError, match="an OpenEnv MCP client .* drives this remote"):
                    await env.reset()
            posted = httpx.post(served.url + "/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                                           "params": {"name": "reset", "arguments": {}}},
                                timeout=TIMEOUT).json()
            assert posted["id"] == 7 and posted["result"]["isError"]
            assert "drives this remote" in posted["result"]["content"][0]["text"]
        # The session closed: its seat is free.
        state = httpx.post(served.url + "/mcp", json={"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                                                      "params": {"name": "reset", "arguments": {"seed": 1}}},
                           timeout=TIMEOUT).json()
        assert state["result"]["isError"] is False
    finally:
        served.close()


async def test_a_real_time_game_answers_at_its_next_frame() -> None:
    served = Served("builtin.Catch-v0")
    try:
        async with session(served.url) as client:
            info_of(await client.call_tool("reset", {"seed": 3, "screenshot": False}))
            frame = info_of(await client.call_tool("state", {}))["frame"]
            pressed = info_of(await client.call_tool("computer", {"action": "key", "text": "Left"}))
            assert pressed["settle"]["how"] == "the next frame"
            assert info_of(await client.call_tool("state", {}))["frame"] > frame
            refused = await client.call_tool("computer", {"action": "type", "text": "hello"})
            assert refused.isError and "does not use key 'h'" in refused.content[0].text
    finally:
        served.close()
