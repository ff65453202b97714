"""A remote with a certificate serves every port over TLS, and nothing in clear: the
rewarder (wss://, and its Universe viewer redirect to https://), the viewer (https://),
VNC (VeNCrypt) and dm_env_rpc (gRPC with TLS). In-process, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from envserver.remote import Remote
from rewarder.client import RewarderClient
from rewarder.errors import Refused
from rewarder.tls import client_context
from tests.tls import Certs, certs_fixture  # noqa: F401
from vncdriver.client import VNCClient
from vncdriver.errors import ProtocolError

PASSWORD = "s3cret"
TIMEOUT = 10.0


@pytest.fixture
async def tls_remote(certs: Certs) -> AsyncIterator[Remote]:
    remote = Remote("builtin.Catch-v0", password=PASSWORD, tls=certs.server())
    grpc = pytest.importorskip("grpc", reason="dm_env_rpc needs the dmenv extra")
    await remote.start("127.0.0.1", 0, 0, http_port=0, dm_env_rpc_port=0)
    remote.grpc = grpc  # type: ignore[attr-defined]
    yield remote
    await remote.close()


async def test_every_port_serves_tls_only(tls_remote: Remote, certs: Certs) -> None:
    remote = tls_remote
    ca = client_context(certs.ca)
    # rewarder
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}", password=PASSWORD, tls=ca,
                              observer=True, start_timeout=TIMEOUT) as client:
        assert client.url.startswith("wss://") and client.describe.env_id == "builtin.Catch-v0"
    with pytest.raises(Refused, match="serves TLS"):
        async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}", password=PASSWORD,
                                  observer=True, start_timeout=TIMEOUT):
            pass
    # The plain client left no link that never connected (one would be kept while the
    # remote serves, and waited for 2 x CLOSE_TIMEOUT when it stops).
    assert all(link.transport is not None for link in remote.rewarder.links)
    # viewer, and Universe's viewer URL on the rewarder port redirecting to it
    assert remote.viewer is not None
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca)) as https:
        async with https.get(f"https://127.0.0.1:{remote.viewer.port}/viewer/?password={PASSWORD}") as r:
            assert r.status in (200, 503)  # 503: the page says noVNC is missing
        async with https.get(f"https://127.0.0.1:{remote.rewarder.port}/viewer/",
                             allow_redirects=False) as r:
            assert r.headers["Location"] == f"https://127.0.0.1:{remote.viewer.port}/viewer/"
    # VNC: VeNCrypt, verified
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}", password=PASSWORD,
                         start_timeout=TIMEOUT, tls=ca) as vnc:
        await vnc.wait_update(timeout=TIMEOUT)
        assert vnc.desktop_name == "builtin.Catch-v0"
        assert vnc.updates > 0 and vnc.frame().shape == (210, 160, 3)
    with pytest.raises(ProtocolError, match="serves TLS only"):  # and nothing in clear
        async with VNCClient(f"127.0.0.1::{remote.vnc_port}", password=PASSWORD,
                             start_timeout=TIMEOUT):
            pass
    # dm_env_rpc: gRPC with TLS (blocking grpc calls off the loop that serves them)
    grpc: Any = remote.grpc  # type: ignore[attr-defined]
    assert remote.dm_env_rpc is not None
    target = f"127.0.0.1:{remote.dm_env_rpc.port}"

    def ready(channel: Any) -> bool:
        try:
            grpc.channel_ready_future(channel).result(2.0)
            return True
        except grpc.FutureTimeoutError:
            return False
        finally:
            channel.close()

    secure = grpc.secure_channel(target, grpc.ssl_channel_credentials(certs.ca.read_bytes()))
    assert await asyncio.to_thread(ready, secure)
    assert not await asyncio.to_thread(ready, grpc.insecure_channel(target))


async def test_plain_http_to_the_https_viewer_gets_a_400_saying_it_speaks_https(
    tls_remote: Remote, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    viewer = tls_remote.viewer
    assert viewer is not None
    caplog.set_level(logging.WARNING, "rewarder.tls")
    reader, writer = await asyncio.open_connection("127.0.0.1", viewer.port)
    try:
        writer.write(b"GET /viewer/?password=x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), TIMEOUT)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert body.decode().startswith(
        f"this port speaks https:// (TLS), not plain http://: open https://127.0.0.1:{viewer.port}/viewer/"
    )
    [line] = [r.getMessage() for r in caplog.records if r.name == "rewarder.tls"]
    assert "plain HTTP ('GET /viewer/?password=x HTTP/1.1')" in line and "the viewer port" in line
    # https:// as before, the bridge's WebSocket too: the remote's VNC greets through it.
    ca = client_context(certs.ca)
    base = f"https://127.0.0.1:{viewer.port}/viewer/"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca)) as https:
        async with https.get(f"{base}session?password={PASSWORD}") as r:
            assert r.status == 200
            bridge = (await r.json())["websocket"]
        async with https.ws_connect(base.replace("https:", "wss:") + bridge) as ws:
            greeting = await ws.receive_bytes(timeout=TIMEOUT)
            assert greeting.startswith(b"RFB 003.00")
