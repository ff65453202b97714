"""The pool's HTTP port (remotes/pool/service.py) as every port of the project guards
itself: its password (Bearer or Basic), failed guesses throttled, TLS verified against
the CA; bad requests answered with what to send. No remotes: the shell alone, on a real
socket on 127.0.0.1, driven by the agent's client (remotes/pool/client.py)."""

from __future__ import annotations

import asyncio
import base64
import http.client
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from remotes.pool.client import PoolAddress, PoolClient, PoolError
from remotes.pool.service import PoolService
from rewarder.throttle import MAX_FAILURES
from tests.tls import Certs, certs_fixture, other_ca_fixture  # noqa: F401

PASSWORD = "pool-secret"


async def serve(service: PoolService, ssl_context: Any = None) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(service.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    server = site._server
    assert server is not None
    return runner, server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]


@pytest.fixture
async def guarded() -> AsyncIterator[int]:
    runner, port = await serve(PoolService([], password=PASSWORD))
    try:
        yield port
    finally:
        await runner.cleanup()


async def status(port: int, password: str | None, **kw: Any) -> dict[str, Any]:
    client = PoolClient(PoolAddress("127.0.0.1", port, **kw), password)
    return await asyncio.to_thread(client.status)


async def test_the_pool_asks_for_its_password_and_throttles_guesses(guarded: int) -> None:
    with pytest.raises(PoolError, match="401.*needs its password"):
        await status(guarded, None)
    assert (await status(guarded, PASSWORD))["kinds"] == []
    basic = base64.b64encode(f"{PASSWORD}:".encode()).decode()  # Universe's Basic form too

    def basic_status() -> int:
        conn = http.client.HTTPConnection("127.0.0.1", guarded, timeout=10)
        conn.request("GET", "/v1/status", headers={"Authorization": f"Basic {basic}"})
        return conn.getresponse().status

    assert await asyncio.to_thread(basic_status) == 200
    for _ in range(MAX_FAILURES):
        with pytest.raises(PoolError, match="401.*wrong password"):
            await status(guarded, "wrong")
    with pytest.raises(PoolError, match="429"):  # blocked: even the right one waits
        await status(guarded, PASSWORD)


async def test_bad_requests_say_what_to_send(guarded: int) -> None:
    client = PoolClient(PoolAddress("127.0.0.1", guarded), PASSWORD)
    with pytest.raises(PoolError, match='400.*"env_id"'):
        await asyncio.to_thread(client.call, "POST", "/v1/claim", {})
    with pytest.raises(PoolError, match='400.*"leases"'):
        await asyncio.to_thread(client.call, "POST", "/v1/renew", {"leases": "abc"})
    with pytest.raises(PoolError, match="400.*serves no builtin.Catch-v0.*nothing yet"):
        await asyncio.to_thread(client.claim, "builtin.Catch-v0", wait=0)
    answer = await asyncio.to_thread(client.renew, ["no-such-lease"])
    assert answer["no-such-lease"] == {"alive": False, "reason": answer["no-such-lease"]["reason"]}
    assert "no such lease" in answer["no-such-lease"]["reason"]


async def test_over_tls_the_agent_verifies_the_pools_certificate(certs: Certs, other_ca: Certs) -> None:
    runner, port = await serve(PoolService([]), certs.server().context)
    try:
        client = PoolClient(PoolAddress("127.0.0.1", port, tls=True), None, str(certs.ca))
        assert (await asyncio.to_thread(client.status))["kinds"] == []
        stranger = PoolClient(PoolAddress("127.0.0.1", port, tls=True), None, str(other_ca.ca))
        with pytest.raises(PoolError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await asyncio.to_thread(stranger.status)
    finally:
        await runner.cleanup()
