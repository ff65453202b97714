"""Who gets in: web pages refused by Origin, password guessing throttled on every port,
a hung agent's slot freed within seconds."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import aiohttp
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from envserver.remote import Remote
from rewarder.client import RewarderClient
from rewarder.errors import ConnectionClosed
from rewarder.server import CLOSE_TIMEOUT, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT
from rewarder.throttle import MAX_TRACKED, AuthThrottle
from tests.conftest import StartRemote
from vncdriver.client import VNCClient
from vncdriver.errors import AuthenticationFailed, ServerRefused

PASSWORD = "s3cret"
WAIT = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_throttle_blocks_after_max_failures_and_doubles() -> None:
    clock = Clock()
    throttle = AuthThrottle(max_failures=3, block_seconds=10, max_block_seconds=25, clock=clock)
    for _ in range(2):
        throttle.failed("10.0.0.1", "test")
    assert throttle.refusal("10.0.0.1") is None
    throttle.failed("10.0.0.1", "test")
    assert throttle.blocked("10.0.0.1") == 10 and "too many wrong passwords" in (
        throttle.refusal("10.0.0.1") or ""
    )
    assert throttle.refusal("10.0.0.2") is None  # per address
    clock.now += 10
    assert throttle.refusal("10.0.0.1") is None
    for _ in range(3):
        throttle.failed("10.0.0.1", "test")
    assert throttle.blocked("10.0.0.1") == 20  # doubled
    clock.now += 20
    for _ in range(3):
        throttle.failed("10.0.0.1", "test")
    assert throttle.blocked("10.0.0.1") == 25  # capped
    clock.now += 25
    throttle.succeeded("10.0.0.1")  # clears nothing: tests/envserver/test_throttle.py
    for _ in range(3):
        throttle.failed("10.0.0.1", "test")
    assert throttle.blocked("10.0.0.1") == 25


def test_throttle_decides_at_comparison_and_counts_comparisons_under_way() -> None:
    """``admit`` (asked right before a password is compared) never lets more comparisons be
    under way than would complete a block; a blocked address is refused with the time left."""
    clock = Clock()
    throttle = AuthThrottle(max_failures=3, block_seconds=10, clock=clock)
    assert [throttle.admit("10.0.0.1") for _ in range(3)] == [None] * 3
    assert "under way" in (throttle.admit("10.0.0.1") or "")  # a 4th could be a 4th guess
    assert throttle.admit("10.0.0.2") is None  # per address
    throttle.abandoned("10.0.0.1")  # one never compared: its place is free again
    assert throttle.admit("10.0.0.1") is None
    for _ in range(3):
        throttle.failed("10.0.0.1", "test")
    assert throttle.comparisons == 3
    clock.now += 2.5
    assert "blocked for 8 s more, the right password too" in (throttle.admit("10.0.0.1") or "")
    throttle.succeeded("10.0.0.2")
    assert throttle.comparisons == 4 and throttle.admit("10.0.0.2") is None


def test_throttle_memory_is_bounded() -> None:
    throttle = AuthThrottle()
    for i in range(MAX_TRACKED + 100):
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", "test")
    assert len(throttle._records) == MAX_TRACKED


async def test_web_pages_are_refused_unless_allowed(start_remote: StartRemote) -> None:
    remote = await start_remote(allow_origins=["https://lab.example"])
    url = f"ws://127.0.0.1:{remote.rewarder.port}"
    with pytest.raises(InvalidStatus) as refused:
        async with websockets.connect(url, origin="https://evil.example"):  # type: ignore[arg-type]
            pass
    response = refused.value.response
    assert response.status_code == 403
    assert b"--allow-origin https://evil.example" in response.body
    async with websockets.connect(url, origin="https://lab.example") as ws:  # type: ignore[arg-type]
        assert b"v0.env.describe" in (await ws.recv()).encode()
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:  # no Origin
        assert await client.reset() > 0


async def test_wrong_passwords_are_throttled_across_ports(start_remote: StartRemote) -> None:
    """Three wrong on VNC and two on the rewarder block the address on both, even for the
    right password; the block ends after its time."""
    remote = await start_remote(
        password=PASSWORD, auth_throttle=AuthThrottle(max_failures=5, block_seconds=1.0)
    )
    vnc = f"127.0.0.1::{remote.vnc_port}"
    rewarder = f"127.0.0.1:{remote.rewarder.port}"
    for _ in range(3):
        with pytest.raises(AuthenticationFailed):
            async with VNCClient(vnc, password="wrong", start_timeout=WAIT):
                pass
    for _ in range(2):
        with pytest.raises(ConnectionClosed, match="wrong password"):
            async with RewarderClient(rewarder, password="wrong", start_timeout=WAIT):
                pass
    with pytest.raises(ConnectionClosed, match="too many wrong passwords"):
        async with RewarderClient(rewarder, password=PASSWORD, start_timeout=WAIT):
            pass
    with pytest.raises(ServerRefused, match="too many wrong passwords"):
        async with VNCClient(vnc, password=PASSWORD, start_timeout=WAIT):
            pass
    deadline = time.monotonic() + WAIT
    while remote.auth_throttle.blocked("127.0.0.1") > 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)  # waiting out the block's own clock
    async with VNCClient(vnc, password=PASSWORD, start_timeout=WAIT) as client:
        await client.wait_update(0, timeout=WAIT)
    async with RewarderClient(rewarder, password=PASSWORD, start_timeout=WAIT) as agent:
        assert await agent.reset() > 0


async def test_the_viewer_port_counts_and_honours_the_same_throttle() -> None:
    remote = Remote("builtin.Catch-v0", password=PASSWORD, auth_throttle=AuthThrottle(max_failures=3))
    await remote.start("127.0.0.1", 0, 0, http_port=0)
    assert remote.viewer is not None
    url = f"http://127.0.0.1:{remote.viewer.port}/viewer/session"
    async with aiohttp.ClientSession() as http:
        for _ in range(3):
            async with http.get(url + "?password=wrong") as r:
                assert r.status == 401
        async with http.get(url + f"?password={PASSWORD}") as r:
            assert r.status == 429  # blocked, the right password too, and told so
    try:
        with pytest.raises(ConnectionClosed, match="too many wrong passwords"):
            async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}", password=PASSWORD,
                                      start_timeout=WAIT):
                pass
    finally:
        await remote.close()


HUNG_AGENT = textwrap.dedent(
    """
    import asyncio, sys
    from rewarder.client import RewarderClient

    async def main():
        async with RewarderClient(sys.argv[1], calibration_pings=0):
            print("connected", flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())
    """
)


async def test_a_hung_agent_frees_the_active_slot_within_5_s(start_remote: StartRemote) -> None:
    remote = await start_remote(mode="lockstep")
    address = f"127.0.0.1:{remote.rewarder.port}"
    agent = subprocess.Popen(
        [sys.executable, "-c", HUNG_AGENT, address], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert agent.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(agent.stdout.readline), WAIT)
        assert line.strip() == "connected" and remote.rewarder.active is not None
        os.kill(agent.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        while remote.rewarder.active is not None:
            assert time.monotonic() - stopped < 5.0, "the hung agent still holds the slot"
            await asyncio.sleep(0.05)
        freed = time.monotonic() - stopped
        async with RewarderClient(address, calibration_pings=0) as other:
            assert await other.reset() > 0
        assert freed <= KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT + CLOSE_TIMEOUT + 0.2, freed
    finally:
        agent.kill()
        os.kill(agent.pid, signal.SIGCONT) if agent.poll() is None else None
        agent.wait()


async def test_100_viewers_and_the_agent_all_fit(start_remote: StartRemote) -> None:
    """Measured before: of 100 viewers, 37 were refused (one cap of 64 for everyone)."""
    remote = await start_remote(mode="lockstep")
    address = f"127.0.0.1::{remote.vnc_port}"
    viewers: list[VNCClient] = []
    try:
        for _ in range(10):  # ten at a time, as viewers arrive
            clients = [VNCClient(address, encoding="raw", start_timeout=WAIT) for _ in range(10)]
            await asyncio.gather(*(c.start() for c in clients))
            viewers += clients
        async with VNCClient(address, frame_tags=True, start_timeout=WAIT) as agent:
            await agent.wait_update(0, timeout=WAIT)
            assert agent.connected and all(v.connected for v in viewers)
            assert remote.vnc is not None and len(remote.vnc.connections) == 101
    finally:
        await asyncio.gather(*(v.close() for v in viewers))


async def test_viewers_past_the_cap_go_but_an_agent_gets_in(start_remote: StartRemote) -> None:
    remote = await start_remote(mode="lockstep", max_viewers=2)
    address = f"127.0.0.1::{remote.vnc_port}"
    async with VNCClient(address, start_timeout=WAIT) as one, VNCClient(
        address, start_timeout=WAIT
    ) as two:
        third = VNCClient(address, start_timeout=WAIT)
        await third.start()  # in, until its SetEncodings says it is a viewer
        async with asyncio.timeout(WAIT):
            while third.connected:
                await asyncio.sleep(0.01)
        await third.close()
        async with VNCClient(address, frame_tags=True, start_timeout=WAIT) as agent:
            await agent.wait_update(0, timeout=WAIT)
            assert agent.connected and one.connected and two.connected


async def test_half_open_connections_have_their_own_cap_and_deadline(
    start_remote: StartRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vncdriver import server as vnc_server

    monkeypatch.setattr(vnc_server, "HANDSHAKE_TIMEOUT", 0.5)
    remote = await start_remote(mode="lockstep")
    assert remote.vnc is not None
    remote.vnc.max_handshaking = 3
    address = f"127.0.0.1::{remote.vnc_port}"
    half_open = [await asyncio.open_connection("127.0.0.1", remote.vnc_port) for _ in range(3)]
    try:
        with pytest.raises(ServerRefused, match="still shaking hands"):
            async with VNCClient(address, start_timeout=WAIT):
                pass
        for reader, _ in half_open:  # dropped at the deadline
            async with asyncio.timeout(WAIT):
                while await reader.read(1024):
                    pass
        async with VNCClient(address, start_timeout=WAIT) as client:
            await client.wait_update(0, timeout=WAIT)
    finally:
        for _, writer in half_open:
            writer.close()
