"""The viewer's and OpenEnv's connection deadlines (the MCP port's are tested in
test_mcp_leases.py): a connection that sends nothing and one whose request never finishes
arriving (its head, or a POST's body) are closed within the deadline, while an open
WebSocket session is not cut. Each port runs in this process on a real remote, with the
deadlines shortened the way ``serve`` reads them (:mod:`envserver.http_deadlines`'
constants), and is driven over raw sockets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Final

import aiohttp
import orjson
import pytest

from envserver import http_deadlines
from envserver.openenv.server import OpenEnvServer
from envserver.viewer import Viewer
from tests.conftest import StartRemote

pytestmark = pytest.mark.timeout(120)

#: The deadlines under test (seconds; the product's are 30 and 10).
DEADLINE: Final = 1.0
#: Seconds a loaded 2-core machine may take past a deadline to act on it.
TIMEOUT: Final = 20.0
_HALF_HEAD: Final = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"  # and no more
_HALF_BODY: Final = b"POST /step HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 40\r\n\r\n{\"act"


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_deadlines, "IDLE_TIMEOUT", DEADLINE)
    monkeypatch.setattr(http_deadlines, "REQUEST_TIMEOUT", DEADLINE)


@pytest.fixture
async def viewer(short: None) -> AsyncIterator[Viewer]:
    served = Viewer(5900)  # no VNC needed: no bridge is opened
    await served.start("127.0.0.1", 0)
    yield served
    await served.close()


@pytest.fixture
async def openenv(short: None, start_remote: StartRemote) -> AsyncIterator[OpenEnvServer]:
    served = OpenEnvServer(await start_remote("builtin.Catch-v0", mode="lockstep"))
    await served.start("127.0.0.1", 0)
    yield served
    await served.close()


async def _answers(port: int, *sent: bytes) -> list[bytes]:
    """What the port sends each connection (given its bytes) until it closes it."""
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in sent]
    try:
        for (_, writer), data in zip(connections, sent, strict=True):
            writer.write(data)
        async with asyncio.timeout(TIMEOUT):  # past it: a connection was never closed
            return list(await asyncio.gather(*(reader.read() for reader, _ in connections)))
    finally:
        for _, writer in connections:
            writer.close()


async def test_the_viewer_closes_idle_and_half_sent_connections(viewer: Viewer) -> None:
    started = time.monotonic()
    assert await _answers(viewer.port, b"", _HALF_HEAD.replace(b"/health", b"/viewer/status")) == [b"", b""]
    assert DEADLINE <= time.monotonic() - started < TIMEOUT


async def test_openenv_closes_idle_and_half_sent_connections_but_not_a_session(
    openenv: OpenEnvServer,
) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(f"ws://127.0.0.1:{openenv.port}/ws") as ws:
        idle, half_head, half_body = await _answers(openenv.port, b"", _HALF_HEAD, _HALF_BODY)
        assert idle == half_head == b""
        assert half_body.startswith(b"HTTP/1.1 408 "), half_body[:200]
        assert b'"code":"TOO_SLOW"' in half_body and b"did not arrive within 1 s" in half_body
        # The session, quiet for longer than the deadlines, was not cut: it is being answered.
        await ws.send_str(orjson.dumps({"type": "state", "data": {}}).decode())
        answer = await ws.receive_json(timeout=TIMEOUT)
        assert answer["type"] == "state", answer
