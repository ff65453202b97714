"""The MCP port's sessions are leases: abandoned sessions (opened, never closed) and a
driver whose host vanished free the remote within the lease (here ``--mcp-lease 2``),
not after minutes; a full port says when to come back (``Retry-After``); watchers do
not keep a driver out; a driver can hand the seat back; idle and half-sent connections
are closed; malformed JSON and unknown methods get JSON-RPC's own errors. Real remotes
(``serve builtin.Catch-v0``), the official SDK's client and bare HTTP; the stdio relay
across a remote that restarts on the same port."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import pytest

from benchmarks import mcp_sdk
from benchmarks.mcp_agent import Served, info_of, session
from envserver.computer_use.leases import Full, Leases, check_lease
from envserver.computer_use.server import MAX_SESSIONS

pytestmark = pytest.mark.timeout(240)

#: The lease of these remotes (seconds): short, so that tests see it run out.
LEASE: Final = 2.0
#: Seconds past a deadline a loaded 2-core machine may take to act on it.
SLACK: Final = 20.0
TIMEOUT: Final = 30.0
_INIT: Final = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
_ACCEPT: Final = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def leased() -> Iterator[Served]:
    served = Served("builtin.Catch-v0", "--mode", "lockstep", "--mcp-lease", str(LEASE))
    yield served
    served.close()


async def _open(http: httpx.AsyncClient, url: str) -> httpx.Response:
    """A session opened with a bare initialize, then abandoned (no stream, no DELETE)."""
    return await http.post(url, json=_INIT, headers=_ACCEPT)


async def _until(condition: Any, seconds: float) -> float:
    """Seconds until ``await condition()`` is true (polled; AssertionError past ``seconds``)."""
    started = time.monotonic()
    while not await condition():
        assert time.monotonic() - started < seconds, f"not within {seconds} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_abandoned_sessions_end_within_the_lease_and_a_full_port_says_when(leased: Served) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http, contextlib.AsyncExitStack() as hosts:
        opened = [await _open(http, leased.url) for _ in range(MAX_SESSIONS)]
        assert all(r.status_code == 200 for r in opened), [r.text for r in opened]
        # A port full of abandoned watchers while nobody drives: a newcomer gets in and drives.
        async with session(leased.url) as driver:
            info_of(await driver.call_tool("reset", {"seed": 1}))
            # Fill the port with sessions whose hosts are there (their event streams open).
            for _ in range(MAX_SESSIONS + 1):
                full = await _open(http, leased.url)
                if full.status_code != 200:
                    break
                stream = await hosts.enter_async_context(http.stream("GET", leased.url, headers={
                    **_ACCEPT, "Mcp-Session-Id": full.headers["Mcp-Session-Id"]}))
                assert stream.status_code == 200
            # Full, and someone drives: come back when a lease can end.
            assert full.status_code == 503, full.text
            assert 1 <= int(full.headers["Retry-After"]) <= math.ceil(LEASE)
            message = full.json()["error"]["message"]
            assert f"all {MAX_SESSIONS} MCP sessions" in message and "try again in" in message
            await hosts.aclose()  # the hosts vanish: their sessions end within the lease

            async def room() -> bool:
                return (await _open(http, leased.url)).status_code == 200

            assert await _until(room, LEASE + SLACK) < LEASE + SLACK
            # The driver's session (its stream open) lives on.
            assert info_of(await driver.call_tool("state", {}))["you_drive"] is True


async def test_a_vanished_driver_frees_the_seat_within_the_lease(leased: Served) -> None:
    script = ("import asyncio, sys\n"
              "from benchmarks.mcp_agent import session, info_of\n"
              "async def main():\n"
              "    async with session(sys.argv[1]) as client:\n"
              "        info_of(await client.call_tool('reset', {'seed': 2}))\n"
              "        print('driving', flush=True)\n"
              "        await asyncio.Event().wait()\n"
              "asyncio.run(main())\n")
    host = subprocess.Popen([sys.executable, "-c", script, leased.url], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert host.stdout is not None and host.stdout.readline().strip() == "driving"
        async with session(leased.url) as other:
            refused = await other.call_tool("reset", {"seed": 3})
            assert mcp_sdk.is_error(refused) and "drives this remote" in refused.content[0].text
            host.kill()  # no DELETE: the host is simply gone
            host.wait(TIMEOUT)

            async def seated() -> bool:
                return not mcp_sdk.is_error(await other.call_tool("reset", {"seed": 3}))

            assert await _until(seated, LEASE + SLACK) < LEASE + SLACK
            assert info_of(await other.call_tool("state", {}))["you_drive"] is True
    finally:
        host.kill()
        host.wait(TIMEOUT)


async def test_a_driver_hands_the_seat_back_and_take_over_needs_a_password(leased: Served) -> None:
    async with session(leased.url) as first, session(leased.url) as second:
        info_of(await first.call_tool("reset", {"seed": 4}))
        taken = await second.call_tool("seat", {"action": "take_over"})
        assert mcp_sdk.is_error(taken) and "needs a remote with a password" in taken.content[0].text
        assert info_of(await first.call_tool("seat", {"action": "release"}))["released"] is True
        info_of(await second.call_tool("reset", {"seed": 4}))
        assert info_of(await second.call_tool("state", {}))["you_drive"] is True
        assert info_of(await first.call_tool("state", {}))["you_drive"] is False


def test_idle_and_half_sent_connections_are_closed(leased: Served) -> None:
    """(The port's connection deadlines are the lease's when it is shorter: 2 s here.)"""
    where = urlsplit(leased.url)
    idle = socket.create_connection((where.hostname, where.port), timeout=TIMEOUT)
    half = socket.create_connection((where.hostname, where.port), timeout=TIMEOUT)
    with idle, half:
        half.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10")  # and no more
        started = time.monotonic()
        assert idle.recv(1024) == b""  # closed by the remote (a timeout would raise)
        assert half.recv(1024) == b""
        assert time.monotonic() - started < TIMEOUT


async def test_malformed_json_and_unknown_methods_get_json_rpcs_errors(leased: Served) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        deep = await http.post(leased.url, content=b"[" * 10_000 + b"]" * 10_000,
                               headers={**_ACCEPT, "Content-Type": "application/json"})
        assert deep.status_code == 400 and deep.json()["error"]["code"] == -32700, deep.text
        opened = await _open(http, leased.url)
        headers = {**_ACCEPT, "Mcp-Session-Id": opened.headers["Mcp-Session-Id"]}
        unknown = await http.post(leased.url, headers=headers,
                                  json={"jsonrpc": "2.0", "id": 2, "method": "tools/fly"})
        assert unknown.json()["error"]["code"] == -32601, unknown.text
        assert "tools/fly" in unknown.json()["error"]["message"]
        assert (await http.delete(leased.url, headers=headers)).status_code == 200
        gone = await http.post(leased.url, headers=headers,
                               json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert gone.status_code == 404 and "send initialize" in gone.json()["error"]["message"]


async def test_the_relay_reconnects_across_a_remote_restart() -> None:
    first = Served("builtin.Catch-v0", "--mcp-lease", str(LEASE))  # real time: a wait takes its time
    port = urlsplit(first.url).port
    second: Served | None = None
    try:
        async with mcp_sdk.stdio_session(sys.executable, ["-m", "universe_remote", "mcp", first.url],
                                         dict(os.environ)) as relay:
            waiting = asyncio.ensure_future(relay.call_tool(
                "computer", {"action": "wait", "duration": 30, "screenshot": False}))
            async with session(first.url) as watcher:  # the wait has begun once it holds the seat

                async def in_flight() -> bool:
                    return info_of(await watcher.call_tool("state", {}))["driver"] is not None

                await _until(in_flight, TIMEOUT)
            first.process.kill()  # the remote dies mid-call (no goodbye)
            first.process.wait(TIMEOUT)
            dropped = await asyncio.wait_for(waiting, TIMEOUT / 2)  # at once, not after the wait
            assert mcp_sdk.is_error(dropped) and "may or may not have been done" in dropped.content[0].text
            started = time.monotonic()
            down = await relay.call_tool("state", {})
            assert time.monotonic() - started < TIMEOUT / 2  # at once, not the client's 60 s timeout
            assert mcp_sdk.is_error(down) and "is not answering" in down.content[0].text, down.content
            tools = {t.name for t in (await relay.list_tools()).tools}  # the list it last had
            assert "computer" in tools
            second = Served("builtin.Catch-v0", "--mode", "lockstep", "--mcp-port", str(port))
            # The same host session, a new remote behind it: the relay opened a new session there.
            state = info_of(await relay.call_tool("state", {}))
            assert state["env_id"] == "builtin.Catch-v0" and state["you_drive"] is False
            info_of(await relay.call_tool("reset", {"seed": 5}))
            assert info_of(await relay.call_tool("state", {}))["you_drive"] is True
    finally:
        first.close()
        if second is not None:
            second.close()


def test_the_lease_core_counts_time_from_the_last_sign_of_life() -> None:
    """The sans-I/O rules, on a clock of our own: in flight and streaming keep a session;
    a full port makes room from a quiet watcher only while nobody drives."""
    leases: Leases[str] = Leases(max_sessions=2, lease=10.0)
    quiet, streaming = leases.add("quiet", 0.0), leases.add("streaming", 0.0)
    leases.begin(streaming, 1.0, stream=True)
    assert leases.room(5.0, seat_free=True) is quiet  # nobody drives: the watcher whose host is gone
    full = leases.room(5.0, seat_free=False)
    assert isinstance(full, Full) and full.retry_after == 5  # quiet's lease ends at 10
    assert leases.expired(9.9) == [] and leases.expired(10.0) == [quiet]
    leases.begin(quiet, 5.0, stream=True)  # both hosts there: the one idle longest makes room
    assert leases.room(6.0, seat_free=True) is streaming
    leases.finish(quiet, 5.0, stream=True)
    leases.begin(quiet, 9.0)  # a call in flight: alive however long it takes
    assert leases.expired(100.0) == []
    leases.finish(quiet, 100.0)
    leases.finish(streaming, 100.0, stream=True)  # its host went: the lease runs from now
    assert leases.expired(109.9) == [] and set(leases.expired(110.0)) == {quiet, streaming}
    with pytest.raises(ValueError, match="an MCP lease is 1 to 3600 seconds"):
        check_lease(0.5)
