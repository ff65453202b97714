"""The browser viewer: its RFB filter (sans-I/O), auth, the WebSocket-to-VNC bridges (the
in-process one, attached to a VNCServer, and the TCP one for Xvnc), and noVNC in a real,
headed Chromium on Xvfb showing the remote's exact pixels.

Also holds the helpers the dashboard's tests reuse: :class:`Chromium` (a headed Chromium
driven over the DevTools protocol) and :func:`find_image` (where a frame sits in a
screenshot).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import websockets
from aiohttp.test_utils import make_mocked_request

from envserver import viewer as viewer_module, viewer_auth
from envserver.attached import HIGH_WATER, AttachedBridge
from envserver.remote import Remote
from envserver.viewer import (
    EXTENSION_ENCODINGS,
    MAX_VIEWERS,
    ClientFilter,
    Viewer,
    credentials,
    find_novnc,
)
from rewarder.throttle import AuthThrottle
from tests.conftest import StartRemote
from tests.vncdriver.xserver import XDisplay, XServers, require, xservers_fixture  # noqa: F401
from vncdriver.client_protocol import ClientProtocol, FramebufferUpdated
from vncdriver.errors import ProtocolError, ServerRefused
from vncdriver.handshake import ClientHandshake, SecurityType
from vncdriver.messages import (
    ClientCutText,
    Encoding,
    FramebufferUpdateRequest,
    KeyEvent,
    PointerEvent,
    SetEncodings,
    SetPixelFormat,
    build_encodings,
)
from vncdriver.pixelformat import NATIVE
from vncdriver.server import VNCServer

PASSWORD = "secret"
#: How long any condition in these tests may take before the test fails.
TIMEOUT = 20.0
POLL = 0.05  # interval of condition polls (a condition with a deadline, not synchronisation)

needs_novnc = pytest.mark.skipif(
    find_novnc() is None, reason="noVNC not installed: apt-get install novnc"
)


@pytest.fixture
async def start_remote() -> AsyncIterator[StartRemote]:
    """conftest's ``start_remote``, plus ``http_port=`` (the viewer's port; 0 = free)."""
    started: list[Remote] = []

    async def start(env_id: str = "builtin.Catch-v0", http_port: int | None = None,
                    **kwargs: Any) -> Remote:
        remote = Remote(env_id, **kwargs)
        await remote.start("127.0.0.1", 0, 0, http_port=http_port)
        started.append(remote)
        return remote

    yield start
    for remote in started:
        await remote.close()


async def wait_until(
    condition: Callable[[], Any | Awaitable[Any]], what: str, timeout: float = TIMEOUT
) -> Any:
    """Poll ``condition`` until it is truthy (returned); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(POLL)


# ClientFilter: bytes in, bytes out ----------------------------------------------------------


def test_filter_passes_view_messages_byte_for_byte_and_drops_input() -> None:
    view = [
        SetPixelFormat(NATIVE).serialize(),
        FramebufferUpdateRequest(False, 0, 0, 160, 210).serialize(),
        FramebufferUpdateRequest(True, 0, 0, 160, 210).serialize(),
    ]
    inputs = [
        KeyEvent(True, 0xFF51).serialize(),
        PointerEvent(1, 10, 20).serialize(),
        ClientCutText("hello").serialize(),
    ]
    stream = view[0] + inputs[0] + view[1] + inputs[1] + inputs[2] + view[2]
    f = ClientFilter(view_only=True)
    for i in range(len(stream)):  # one byte at a time: framing must not depend on chunks
        f.receive_data(stream[i : i + 1])
    assert f.data_to_send() == b"".join(view)
    assert f.dropped == 3

    control = ClientFilter(view_only=False)
    control.receive_data(stream)
    assert control.data_to_send() == stream and control.dropped == 0


def test_filter_strips_extension_and_jpeg_encodings() -> None:
    asked = (7, -260, 5, 0, -26, -256 + 2, -223, -224, -258, -308, -309, -312, -313,
             -307, -1063131698, -239, -500)
    f = ClientFilter(view_only=True)
    f.receive_data(SetEncodings(asked).serialize())
    kept = SetEncodings.parse(f.data_to_send()).encodings
    assert kept == tuple(e for e in asked if e not in EXTENSION_ENCODINGS)
    assert -26 in kept and -500 in kept  # JPEG stays unless asked for lossless

    lossless = ClientFilter(view_only=True, lossless=True)
    lossless.receive_data(SetEncodings(asked).serialize())
    assert SetEncodings.parse(lossless.data_to_send()).encodings == (
        7, -260, 5, 0, -254, -223, -224, -307, -239,
    )


@pytest.mark.parametrize("kind", [248, 150, 251, 255, 1, 7])
def test_filter_fails_closed_on_messages_it_cannot_frame(kind: int) -> None:
    f = ClientFilter(view_only=True)
    with pytest.raises(ProtocolError, match=f"type {kind}"):
        f.receive_data(bytes([kind]) + b"\0" * 16)
    assert f.data_to_send() == b""


def test_find_novnc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_novnc(tmp_path) is None
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "rfb.js").write_text("export default class RFB {}")
    assert find_novnc(tmp_path) == tmp_path.resolve()
    monkeypatch.setenv(viewer_module.NOVNC_ENV, str(tmp_path))
    assert find_novnc() == tmp_path.resolve()


# HTTP: auth, pages --------------------------------------------------------------------------


def basic(user: str, password: str = "") -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_password_guards_page_session_and_bridge(
    start_remote: StartRemote, http: aiohttp.ClientSession
) -> None:
    remote = await start_remote(  # 8 wrong tries below: more than the throttle allows
        password=PASSWORD, view_only_password="watcher", http_port=0,
        auth_throttle=AuthThrottle(max_failures=100),
    )
    assert remote.viewer is not None
    base = f"http://127.0.0.1:{remote.viewer.port}"
    for path in ("/viewer/", "/viewer/session", "/viewer/status", "/viewer/websockify"):
        for headers in ({}, basic("wrong"), basic("x", "wrong")):
            async with http.get(base + path, headers=headers) as r:
                assert r.status == 401, (path, headers)
                assert r.headers["WWW-Authenticate"].startswith("Basic realm=")
                assert "password" in await r.text()
    # Universe's place for the password is the user name; browsers prompt for both fields.
    for headers, query in ((basic(PASSWORD), ""), (basic("anyone", PASSWORD), ""),
                           ({}, f"?password={PASSWORD}")):
        async with http.get(f"{base}/viewer/{query}", headers=headers) as r:
            assert r.status == 200 and "static/viewer.js" in await r.text()
        async with http.get(f"{base}/viewer/session{query}", headers=headers) as r:
            session = await r.json()
            assert session["env_id"] == "builtin.Catch-v0" and session["view_only"] is True
            assert session["websocket"].startswith("websockify?token=")
    async with http.get(f"{base}/viewer/session", headers=basic("watcher")) as r:
        assert (await r.json())["view_only"] is True
    async with http.get(f"{base}/viewer/status", headers=basic(PASSWORD)) as r:
        status = await r.json()
        assert status["env_state"] == "running" and status["episode_id"] == remote.episode_id
    async with http.get(base + "/", allow_redirects=False) as r:
        assert r.status == 302 and r.headers["Location"] == "/viewer/"


async def test_tokens_are_signed_and_expire(
    start_remote: StartRemote, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = await start_remote(password=PASSWORD, http_port=0)
    viewer = remote.viewer
    assert viewer is not None
    token = viewer.auth.token("view")
    assert viewer.auth.token_role(token) == "view" and token != viewer.auth.token("view")
    expires, _, nonce, signature = token.split(".")
    assert viewer.auth.token_role(f"{expires}.control.{nonce}.{signature}") is None  # signed role
    assert viewer.auth.token_role(f"{int(expires) + 9}.view.{nonce}.{signature}") is None
    assert viewer.auth.token_role("garbage") is None and viewer.auth.token_role(None) is None
    # single use: a token opens one bridge, never a second
    once = await session_websocket(http, viewer, PASSWORD)
    rfb = await RFBOverWebSocket.open(http, once)
    await rfb.frame()
    with pytest.raises(aiohttp.WSServerHandshakeError) as replay:
        await http.ws_connect(once)
    assert replay.value.status == 401
    await rfb.close()
    monkeypatch.setattr(viewer_auth.time, "time", lambda: int(expires) + 1)
    assert viewer.auth.token_role(token) is None
    async with http.get(
        f"http://127.0.0.1:{viewer.port}/viewer/websockify?token={token}"
    ) as r:
        assert r.status == 401


def test_no_password_serves_loopback_only() -> None:
    viewer = Viewer(5900)

    def request(peer: str, host: str = "127.0.0.1:8900", **headers: str) -> Any:
        transport = type("T", (), {"get_extra_info": lambda self, key, default=None: (peer, 1)})()
        return make_mocked_request("GET", "/viewer/", headers={"Host": host, **headers},
                                   transport=transport)

    assert viewer.auth.role(request("127.0.0.1")) == "control"
    assert viewer.auth.role(request("::1", "[::1]:8900")) == "control"
    assert viewer.auth.role(request("127.0.0.1", "localhost:8900")) == "control"
    assert viewer.auth.role(request("10.1.2.3")) is None
    assert viewer.auth.refusal(request("10.1.2.3")).status == 403
    # A site whose name was rebound to 127.0.0.1, and pages from other origins.
    assert viewer.auth.role(request("127.0.0.1", "evil.example:8900")) is None
    assert viewer.auth.role(request("127.0.0.1", Origin="http://evil.example")) is None
    assert viewer.auth.role(request("127.0.0.1", Origin="http://127.0.0.1:8900")) == "control"
    assert "evil.example" in viewer.auth.refusal(request("127.0.0.1", Origin="http://evil.example")).text
    assert credentials(make_mocked_request("GET", "/viewer/?password=a b", headers=basic("u", "p"))) == [
        "u", "p", "a b",
    ]


async def test_pages_elsewhere_may_not_open_the_bridge(
    start_remote: StartRemote, http: aiohttp.ClientSession
) -> None:
    """WebSockets skip the same-origin policy: the bridge checks Origin itself."""
    remote = await start_remote(mode="lockstep", password=PASSWORD, http_port=0)
    assert remote.viewer is not None
    url = await session_websocket(http, remote.viewer, PASSWORD)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(url, headers={"Origin": "http://evil.example", **basic(PASSWORD)})
    assert refused.value.status == 403
    rfb = await RFBOverWebSocket.open(
        http, url, headers={"Origin": f"http://127.0.0.1:{remote.viewer.port}"}
    )
    await rfb.frame()
    await rfb.close()


async def test_missing_novnc_says_how_to_install_and_the_rest_works(
    start_remote: StartRemote, http: aiohttp.ClientSession, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    remote = await start_remote(mode="lockstep")
    viewer = Viewer(remote.vnc_port or 0, novnc_dir=tmp_path)
    await viewer.start("127.0.0.1", 0)
    try:
        assert "noVNC not found" in caplog.text and "apt-get install novnc" in caplog.text
        async with http.get(f"http://127.0.0.1:{viewer.port}/viewer/") as r:
            assert r.status == 503
            text = await r.text()
            assert "apt-get install novnc" in text and "npm install @novnc/novnc" in text
        rfb = await RFBOverWebSocket.open(http, f"ws://127.0.0.1:{viewer.port}/viewer/websockify")
        frame = await rfb.frame()
        assert np.array_equal(frame, remote.runtime.framebuffer)
        await rfb.close()
    finally:
        await viewer.close()


# The bridge, with our own RFB client over the WebSocket ------------------------------------------


class RFBOverWebSocket:
    """An RFB client over the bridge: our sans-I/O handshake and ClientProtocol."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, proto: ClientProtocol,
                 security: int) -> None:
        self.ws, self.proto, self.security = ws, proto, security
        self.updates = 0

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, url: str,
                   headers: dict[str, str] | None = None,
                   encodings: Sequence[int] | None = None) -> RFBOverWebSocket:
        ws = await http.ws_connect(url, headers=headers or {}, max_msg_size=0)
        handshake = ClientHandshake(None)  # the bridge must not ask the browser for a password
        try:
            async with asyncio.timeout(TIMEOUT):
                while not handshake.complete:
                    msg = await ws.receive()
                    assert msg.type == aiohttp.WSMsgType.BINARY, msg
                    handshake.receive_data(msg.data)
                    if out := handshake.data_to_send():
                        await ws.send_bytes(out)
        except BaseException:
            await ws.close()
            raise
        assert handshake.result is not None
        proto = ClientProtocol(handshake.result, encodings=encodings)
        proto.receive_data(handshake.trailing_data())
        client = cls(ws, proto, handshake.result.security_type)
        await client.flush()
        return client

    async def flush(self) -> None:
        if out := self.proto.data_to_send():
            await self.ws.send_bytes(out)

    async def frame(self, incremental: bool = False) -> np.ndarray:
        """Ask for an update and read until it has arrived; the framebuffer."""
        self.proto.request_update(incremental)
        await self.flush()
        async with asyncio.timeout(TIMEOUT):
            while True:
                msg = await self.ws.receive()
                if msg.type != aiohttp.WSMsgType.BINARY:
                    raise ConnectionError(f"bridge closed: {msg}")
                self.proto.receive_data(msg.data)
                if any(isinstance(e, FramebufferUpdated) for e in self.proto.events_received()):
                    self.updates += 1
                    return self.proto.framebuffer.copy()

    async def close(self) -> None:
        await self.ws.close()


def spy_on_input(remote: Remote) -> list[Any]:
    """Every input event the remote's VNC server hands the remote, from now on."""
    seen: list[Any] = []
    assert remote.vnc is not None
    original = remote.vnc.on_input

    def on_input(client_id: int, events: Any) -> None:
        seen.extend(events)
        original(client_id, events)

    remote.vnc.on_input = on_input
    return seen


async def session_websocket(http: aiohttp.ClientSession, viewer: Viewer, password: str) -> str:
    async with http.get(f"http://127.0.0.1:{viewer.port}/viewer/session",
                        headers=basic(password)) as r:
        assert r.status == 200
        return f"ws://127.0.0.1:{viewer.port}/viewer/" + (await r.json())["websocket"]


async def test_bridge_serves_exact_pixels_and_drops_input_when_view_only(
    start_remote: StartRemote, http: aiohttp.ClientSession
) -> None:
    remote = await start_remote(mode="lockstep", password=PASSWORD, http_port=0)
    assert remote.viewer is not None
    seen = spy_on_input(remote)
    rfb = await RFBOverWebSocket.open(http, await session_websocket(http, remote.viewer, PASSWORD))
    assert rfb.security == SecurityType.NONE  # the VNC password stays in the bridge
    assert rfb.proto.name == "builtin.Catch-v0"
    assert np.array_equal(await rfb.frame(), remote.runtime.framebuffer)
    rfb.proto.key_event("Left", True)
    rfb.proto.pointer_event(5, 5, 1)
    rfb.proto.cut_text("typed")
    # The update answers a request sent after the input: the server has read that far.
    await rfb.frame()
    assert seen == [] and remote.held_keys == set() and remote.inputs.pending == []
    await rfb.close()


@pytest.mark.parametrize("in_process", [False, True], ids=["tcp bridge", "in-process"])
async def test_control_viewer_passes_input(
    start_remote: StartRemote, http: aiohttp.ClientSession, in_process: bool
) -> None:
    """The same paths with view_only=False let keys through: the view-only tests can see
    input (in-process, view-only is the VNC server's doing, not a missing input path)."""
    remote = await start_remote(mode="lockstep", password=PASSWORD)
    viewer = Viewer(remote.vnc_port or 0, password=PASSWORD, view_only=False,
                    vnc_server=remote.vnc if in_process else None)
    await viewer.start("127.0.0.1", 0)
    try:
        seen = spy_on_input(remote)
        rfb = await RFBOverWebSocket.open(http, await session_websocket(http, viewer, PASSWORD))
        await rfb.frame()
        rfb.proto.key_event("Left", True)
        await rfb.frame()
        assert [type(e) for e in seen] == [KeyEvent] and remote.held_keys == {"Left"}
        await rfb.close()
    finally:
        await viewer.close()


async def test_the_remotes_own_viewer_attaches_in_process(
    start_remote: StartRemote, http: aiohttp.ClientSession
) -> None:
    """No TCP hop into our own VNC server: the browser is a client of it directly."""
    remote = await start_remote(mode="lockstep", password=PASSWORD, http_port=0)
    assert remote.viewer is not None and remote.vnc is not None
    rfb = await RFBOverWebSocket.open(http, await session_websocket(http, remote.viewer, PASSWORD))
    assert np.array_equal(await rfb.frame(), remote.runtime.framebuffer)
    [bridge] = remote.viewer.bridges
    assert isinstance(bridge, AttachedBridge) and bridge.client is not None
    assert list(remote.vnc.connections) == [bridge.client.client_id]
    await rfb.close()


# In-process: a Viewer given the VNC server attaches each browser to it ----------------------


def noise(height: int, width: int, seed: int) -> np.ndarray:
    """A frame no encoder shrinks much: every update costs its size in bytes."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@contextlib.asynccontextmanager
async def in_process_viewer(vnc: VNCServer, **kwargs: Any) -> AsyncIterator[tuple[Viewer, list[int]]]:
    """A started Viewer given ``vnc``, whose ``vnc_port`` is a trap: a listener that
    records every connection made to it (the list). ``vnc`` never listens on TCP."""
    dialed: list[int] = []

    def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dialed.append(1)
        writer.close()

    trap = await asyncio.start_server(record, "127.0.0.1", 0)
    viewer = Viewer(trap.sockets[0].getsockname()[1], vnc_server=vnc, **kwargs)
    await viewer.start("127.0.0.1", 0)
    try:
        yield viewer, dialed
    finally:
        await viewer.close()
        await vnc.close()
        trap.close()
        await trap.wait_closed()


async def test_a_viewer_given_the_vnc_server_serves_it_in_process_view_only(
    http: aiohttp.ClientSession,
) -> None:
    """Frames reach the browser with no TCP connection to any VNC port, and its keys,
    pointer and clipboard never reach the game: the VNC server drops them itself."""
    frame = noise(48, 64, seed=1)
    seen: list[Any] = []
    vnc = VNCServer(frame, name="in-process", password="vncpass",
                    on_input=lambda client_id, events: seen.extend(events))
    async with in_process_viewer(vnc, password=PASSWORD) as (viewer, dialed):
        rfb = await RFBOverWebSocket.open(http, await session_websocket(http, viewer, PASSWORD))
        assert rfb.security == SecurityType.NONE and rfb.proto.name == "in-process"
        assert np.array_equal(await rfb.frame(), frame)
        frame[10:20, 5:30] = 255 - frame[10:20, 5:30]
        vnc.frame_ready()
        assert np.array_equal(await rfb.frame(incremental=True), frame)

        rfb.proto.key_event("Left", True)
        rfb.proto.pointer_event(5, 5, 1)
        rfb.proto.cut_text("typed")
        await rfb.frame()  # answers a request sent after the input: the server read it all
        assert seen == []
        [bridge] = viewer.bridges
        assert isinstance(bridge, AttachedBridge) and bridge.client is not None
        assert list(vnc.connections) == [bridge.client.client_id]
        assert dialed == []
        await rfb.close()
        await wait_until(lambda: not vnc.connections, "the browser's client to leave")
        assert not viewer.bridges


async def test_a_stalled_browser_holds_up_neither_the_game_nor_other_browsers(
    http: aiohttp.ClientSession,
) -> None:
    """A browser that stops reading is paused on the VNC server once HIGH_WATER bytes wait
    for it: frame_ready goes on, the other browser gets every frame, what waits stays
    bounded, and when it reads again it gets the newest frame, not a backlog."""
    height, width = 480, 640  # 900 KB a Raw update: the buffers fill in a few frames
    frame = noise(height, width, seed=2)
    vnc = VNCServer(frame)
    raw = build_encodings([Encoding.RAW])
    async with in_process_viewer(vnc, password=PASSWORD) as (viewer, dialed):
        fast = await RFBOverWebSocket.open(
            http, await session_websocket(http, viewer, PASSWORD), encodings=raw)
        stalled = await RFBOverWebSocket.open(
            http, await session_websocket(http, viewer, PASSWORD), encodings=raw)
        assert np.array_equal(await fast.frame(), frame)
        assert np.array_equal(await stalled.frame(), frame)
        [bridge] = [b for b in viewer.bridges if isinstance(b, AttachedBridge) and b.client
                    and b.client.client_id == max(vnc.connections)]  # ids count up: the newest
        client, outbox = bridge.client, bridge.outbox
        assert client is not None
        # From now on `stalled` asks for every frame but reads nothing (aiohttp stops
        # reading its socket once 64 KB wait unread).
        seed, frames_paused, updates_at_pause = 2, 0, None
        while frames_paused < 10:
            seed += 1
            assert seed < 200, "the stalled browser's buffers never filled up"
            frame[:] = noise(height, width, seed)
            stalled.proto.request_update(incremental=True)
            await stalled.flush()
            vnc.frame_ready()
            assert np.array_equal(await fast.frame(incremental=True), frame)
            assert outbox.queued <= HIGH_WATER + frame.nbytes + 1024  # bounded: one update past
            if client.paused:
                if updates_at_pause is None:
                    updates_at_pause = client.updates
                frames_paused += 1
                assert client.updates == updates_at_pause  # skipped: nothing encoded for it
        assert updates_at_pause is not None and updates_at_pause < seed - 2
        assert fast.updates == seed - 1  # the first frame, then every new one

        async with asyncio.timeout(TIMEOUT):  # it reads again: what was on its way, then the newest
            while not np.array_equal(stalled.proto.framebuffer, frame):
                msg = await stalled.ws.receive()
                assert msg.type == aiohttp.WSMsgType.BINARY, msg
                stalled.proto.receive_data(msg.data)
                stalled.proto.events_received()
        assert client.updates == updates_at_pause + 1 and not client.paused
        assert dialed == []
        await fast.close()
        await stalled.close()


@pytest.mark.parametrize("in_process", [False, True], ids=["tcp bridge", "in-process"])
async def test_a_stalled_browser_does_not_hold_up_the_viewers_close(
    http: aiohttp.ClientSession, in_process: bool
) -> None:
    """Our close frame cannot reach a browser that reads nothing: the viewer cuts it off
    after CLOSE_TIMEOUT instead of waiting for it forever (and the remote's shutdown)."""
    height, width = 480, 640
    frame = noise(height, width, seed=3)
    vnc = VNCServer(frame)
    await vnc.start("127.0.0.1", 0)
    viewer = Viewer(vnc.port, password=PASSWORD, vnc_server=vnc if in_process else None)
    await viewer.start("127.0.0.1", 0)
    raw = build_encodings([Encoding.RAW])
    try:
        fast = await RFBOverWebSocket.open(
            http, await session_websocket(http, viewer, PASSWORD), encodings=raw)
        stalled = await RFBOverWebSocket.open(
            http, await session_websocket(http, viewer, PASSWORD), encodings=raw)
        await fast.frame()
        await stalled.frame()
        stalled_id = max(vnc.connections)
        unchanged, last, seed = 0, vnc.stats()[stalled_id], 3
        while unchanged < 5:  # the VNC server skips it: every buffer on the way is full
            seed += 1
            assert seed < 200, "the stalled browser's buffers never filled up"
            frame[:] = noise(height, width, seed)
            stalled.proto.request_update(incremental=True)
            await stalled.flush()
            vnc.frame_ready()
            await fast.frame(incremental=True)
            now = vnc.stats()[stalled_id]
            unchanged, last = (unchanged + 1 if now == last else 0), now
        async with asyncio.timeout(TIMEOUT):
            await viewer.close()
        assert not viewer.bridges
    finally:
        await viewer.close()
        await vnc.close()


async def test_bridge_closes_when_the_remote_goes_away(
    start_remote: StartRemote, http: aiohttp.ClientSession
) -> None:
    remote = await start_remote(mode="lockstep", http_port=0)
    assert remote.viewer is not None and remote.vnc is not None
    rfb = await RFBOverWebSocket.open(http, f"ws://127.0.0.1:{remote.viewer.port}/viewer/websockify")
    await rfb.frame()
    await wait_until(lambda: len(remote.vnc.connections) == 1, "the bridge's VNC connection")
    await remote.close("test over")
    async with asyncio.timeout(TIMEOUT):
        msg = await rfb.ws.receive()
    assert (msg.type, msg.data, msg.extra) == (aiohttp.WSMsgType.CLOSE, 1001, "test over")
    assert not remote.viewer.bridges


async def test_bridge_closes_when_the_vnc_server_goes_away(http: aiohttp.ClientSession) -> None:
    frame = np.zeros((48, 64, 3), np.uint8)
    frame[10:20, 5:30] = (200, 10, 99)
    vnc = VNCServer(frame, name="test")
    await vnc.start("127.0.0.1", 0)
    viewer = Viewer(vnc.port)
    await viewer.start("127.0.0.1", 0)
    try:
        rfb = await RFBOverWebSocket.open(http, f"ws://127.0.0.1:{viewer.port}/viewer/websockify")
        assert np.array_equal(await rfb.frame(), frame)
        await vnc.close()
        async with asyncio.timeout(TIMEOUT):
            msg = await rfb.ws.receive()
        assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1011)
        assert "VNC server closed" in msg.extra
        await wait_until(lambda: not viewer.bridges, "the bridge to go")
        # With no VNC server, the browser hears why in RFB's own refusal.
        with pytest.raises(ServerRefused, match="not available"):
            await RFBOverWebSocket.open(http, f"ws://127.0.0.1:{viewer.port}/viewer/websockify")
    finally:
        await viewer.close()


async def test_too_many_viewers_are_refused_with_a_reason(
    start_remote: StartRemote, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(viewer_module, "MAX_VIEWERS", 1)
    remote = await start_remote(mode="lockstep", http_port=0)
    assert remote.viewer is not None and MAX_VIEWERS >= 1
    url = f"ws://127.0.0.1:{remote.viewer.port}/viewer/websockify"
    first = await RFBOverWebSocket.open(http, url)
    with pytest.raises(ServerRefused, match="too many viewers"):
        await RFBOverWebSocket.open(http, url)
    await first.close()


async def test_bridge_to_tigervnc_with_its_password(
    xservers: XServers, http: aiohttp.ClientSession
) -> None:
    """A VNC server nobody here wrote, behind VNC Authentication the bridge answers."""
    display = await xservers.xvnc(320, 240, password="pw")
    picture = np.zeros((240, 320, 3), np.uint8)
    picture[:, :, 0] = np.arange(320, dtype=np.uint8)[None, :]
    picture[60:180, 80:240] = (10, 200, 90)
    xservers.show_image(display, picture)
    await wait_until(lambda: np.array_equal(xservers.screenshot(display), picture),
                     "xwud to show the picture")
    viewer = Viewer(display.vnc_port or 0, password="pw")
    await viewer.start("127.0.0.1", 0)
    try:
        rfb = await RFBOverWebSocket.open(http, await session_websocket(http, viewer, "pw"))
        assert rfb.security == SecurityType.NONE
        assert np.array_equal(await rfb.frame(), picture)
        await rfb.close()
    finally:
        await viewer.close()


# A real browser ---------------------------------------------------------------------------------

CHROMIUM_FLAGS = (
    "--no-sandbox",  # we run as root
    "--test-type",  # no "unsupported flag" bar above the page
    "--disable-gpu",
    "--disable-breakpad",  # no crash handler process to outlive the browser
    "--disable-crash-reporter",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-features=Translate",
    "--password-store=basic",
    "--window-position=0,0",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


class Chromium:
    """Headed Chromium in app mode on an X display, driven over the DevTools protocol."""

    def __init__(self, xs: XServers, display: XDisplay, url: str) -> None:
        require("chromium")
        self.display = display
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=xs.directory))
        self.process = xs.run(
            display, "chromium", *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
            f"--window-size={display.width},{display.height}", f"--app={url}",
        )
        self._ws: Any = None
        self._ids = iter(range(1, 1 << 30))

    async def connect(self) -> None:
        port_file = self.profile / "DevToolsActivePort"

        def port_written() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"chromium exited with {self.process.returncode}")
            return port_file.exists() and port_file.read_text().count("\n") >= 1

        await wait_until(port_written, "chromium's DevTools port")
        port = int(port_file.read_text().split()[0])

        async def page_target() -> str | None:
            async with aiohttp.ClientSession() as http, http.get(
                f"http://127.0.0.1:{port}/json/list"
            ) as r:
                pages = [t for t in await r.json() if t["type"] == "page"]
            return pages[0]["webSocketDebuggerUrl"] if pages else None

        url = await wait_until(page_target, "chromium's page")
        self._ws = await websockets.connect(url, max_size=None)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (promises awaited)."""
        call_id = next(self._ids)
        await self._ws.send(json.dumps({
            "id": call_id, "method": "Runtime.evaluate",
            "params": {"expression": expression, "returnByValue": True, "awaitPromise": True},
        }))
        async with asyncio.timeout(TIMEOUT):
            while True:
                reply = json.loads(await self._ws.recv())
                if reply.get("id") == call_id:
                    break
        result = reply["result"]
        if "exceptionDetails" in result:
            return None
        return result["result"].get("value")

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.process.wait, 5)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def find_image(screen: np.ndarray, image: np.ndarray, near: tuple[int, int] | None = None,
               radius: int = 80) -> tuple[int, int] | None:
    """(x, y) where ``image`` appears pixel for pixel in ``screen`` (around ``near``)."""
    h, w = image.shape[:2]
    H, W = screen.shape[:2]
    cx, cy = near if near is not None else (0, 0)
    xs = range(max(0, cx - radius), min(W - w, cx + radius) + 1) if near else range(W - w + 1)
    ys = range(max(0, cy - radius), min(H - h, cy + radius) + 1) if near else range(H - h + 1)
    first = image[0]
    for y in ys:
        row = screen[y]
        for x in xs:
            if np.array_equal(row[x : x + w], first) and np.array_equal(
                screen[y : y + h, x : x + w], image
            ):
                return x, y
    return None


@pytest.fixture(scope="module")
def xvfb() -> Iterator[tuple[XServers, XDisplay]]:
    """One Xvfb for the browser tests of a module (each test starts its own Chromium)."""
    require("Xvfb", "xwd", "xdotool")
    with XServers() as xs:
        yield xs, xs.xvfb(800, 600)


@pytest.fixture
async def browser(xvfb: tuple[XServers, XDisplay]) -> AsyncIterator[Callable[[str], Awaitable[Chromium]]]:
    """``await browser(url)``: a Chromium showing ``url``, closed after the test."""
    xs, display = xvfb
    started: list[Chromium] = []

    async def open_page(url: str) -> Chromium:
        chromium = Chromium(xs, display, url)
        started.append(chromium)
        await chromium.connect()
        return chromium

    yield open_page
    for chromium in started:
        await chromium.close()


async def canvas_origin(page: Chromium, selector: str) -> tuple[int, int]:
    """Where the element's top-left should be on the X screen (a hint for find_image)."""
    box = await page.evaluate(
        f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
        " return [r.x + window.screenX, r.y + window.screenY + window.outerHeight - window.innerHeight]; })()"
    )
    return int(box[0]), int(box[1])


async def wait_for_image(xs: XServers, display: XDisplay, image: np.ndarray,
                         near: tuple[int, int]) -> tuple[int, int]:
    """Screenshot until ``image`` shows exactly; its position."""
    found: tuple[int, int] | None = None

    def shows() -> bool:
        nonlocal found
        found = find_image(xs.screenshot(display), image, near)
        return found is not None

    await wait_until(shows, "the frame to show pixel for pixel on the X screen")
    assert found is not None
    return found


@needs_novnc
async def test_novnc_in_chromium_shows_the_exact_frame(
    start_remote: StartRemote, browser: Callable[[str], Awaitable[Chromium]],
    xvfb: tuple[XServers, XDisplay],
) -> None:
    xs, display = xvfb
    remote = await start_remote(mode="lockstep", password=PASSWORD, http_port=0)  # a still frame
    assert remote.viewer is not None
    url = f"http://user:{PASSWORD}@127.0.0.1:{remote.viewer.port}/viewer/?quality=lossless&scale=1"
    page = await browser(url)
    await wait_until(lambda: page.evaluate("window.viewer && window.viewer.state === 'connected'"),
                     "noVNC to connect")
    assert await page.evaluate("window.viewer.rfb.viewOnly") is True
    assert "builtin.Catch-v0" in await page.evaluate("document.title")
    frame = remote.runtime.framebuffer.copy()
    assert frame.std() > 0  # not a blank screen that anything would match
    await wait_for_image(xs, display, frame, await canvas_origin(page, "#screen canvas"))
    # The page says what it shows, and goes to "disconnected" when the remote goes away.
    await wait_until(lambda: page.evaluate("window.viewer.detail.includes('episode')"), "the status line")
    await remote.close()
    await wait_until(lambda: page.evaluate("window.viewer.state === 'disconnected'"),
                     "the page to see the remote go")


async def _press_keys_in_page(page: Chromium, xs: XServers, display: XDisplay,
                              remote: Remote, selector: str) -> None:
    """Click the screen and hold Left in Chromium (real X input via XTEST), then wait until
    the VNC server has answered three more update requests: noVNC sends a key at once, so
    any key it sent is in the server's hands by then."""
    await page.evaluate(
        "window.keys = 0; window.addEventListener('keydown', () => window.keys++, true); true"
    )
    x, y = await canvas_origin(page, selector)
    xs.check_output(display, "xdotool", "mousemove", str(x + 40), str(y + 100), "click", "1")
    xs.check_output(display, "xdotool", "keydown", "Left")
    try:
        await wait_until(lambda: page.evaluate("window.keys > 0"), "the page to see the key")
        assert remote.vnc is not None
        sent = sum(remote.vnc.stats().values())
        await wait_until(lambda: sum(remote.vnc.stats().values()) >= sent + 3, "three more updates")
    finally:
        xs.check_output(display, "xdotool", "keyup", "Left")


@needs_novnc
async def test_view_only_page_does_not_reach_the_game(
    start_remote: StartRemote, browser: Callable[[str], Awaitable[Chromium]],
    xvfb: tuple[XServers, XDisplay],
) -> None:
    xs, display = xvfb
    remote = await start_remote(password=PASSWORD, http_port=0)  # real time: updates flow
    assert remote.viewer is not None
    seen = spy_on_input(remote)
    page = await browser(f"http://127.0.0.1:{remote.viewer.port}/viewer/?password={PASSWORD}")
    await wait_until(lambda: page.evaluate("window.viewer && window.viewer.state === 'connected'"),
                     "noVNC to connect")
    await _press_keys_in_page(page, xs, display, remote, "#screen canvas")
    assert seen == [] and "Left" not in remote.held_keys


@needs_novnc
async def test_control_page_does_reach_the_game(
    start_remote: StartRemote, browser: Callable[[str], Awaitable[Chromium]],
    xvfb: tuple[XServers, XDisplay],
) -> None:
    """The same keys through a viewer that allows control arrive: the test above is sound."""
    xs, display = xvfb
    remote = await start_remote(password=PASSWORD)
    viewer = Viewer(remote.vnc_port or 0, password=PASSWORD, view_only=False)
    await viewer.start("127.0.0.1", 0)
    try:
        seen = spy_on_input(remote)
        page = await browser(f"http://127.0.0.1:{viewer.port}/viewer/?password={PASSWORD}")
        await wait_until(lambda: page.evaluate("window.viewer && window.viewer.state === 'connected'"),
                         "noVNC to connect")
        assert await page.evaluate("window.viewer.rfb.viewOnly") is False
        await _press_keys_in_page(page, xs, display, remote, "#screen canvas")
        assert any(isinstance(e, KeyEvent) and e.key == 0xFF51 and e.down for e in seen)
        assert any(isinstance(e, PointerEvent) for e in seen)
    finally:
        await viewer.close()


async def test_serve_http_port_prints_the_viewer_url(http: aiohttp.ClientSession) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0", "--rewarder-port", "0",
        "--vnc-port", "0", "--password", PASSWORD, "--http-port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        banner = b""
        async with asyncio.timeout(TIMEOUT):
            while b"agent address" not in banner:
                line = await proc.stdout.readline()
                assert line, "serve exited before its banner"
                banner += line
        match = re.search(rb"viewer\s+(http://127\.0\.0\.1:\d+/viewer/)", banner)
        assert match, banner
        async with http.get(match[1].decode(), headers=basic(PASSWORD)) as r:
            assert r.status == 200
        async with http.get(match[1].decode()) as r:
            assert r.status == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(TIMEOUT):
            assert await proc.wait() == 0


async def test_a_taken_http_port_fails_the_start_and_closes_the_rest() -> None:
    taken = Viewer(5900)
    await taken.start("127.0.0.1", 0)
    try:
        remote = Remote("builtin.Catch-v0")
        with pytest.raises(OSError):
            await remote.start("127.0.0.1", 0, 0, http_port=taken.port)
        assert remote.vnc is not None and not remote.vnc._server.is_serving()  # type: ignore[union-attr]
        assert remote.rewarder._server is not None and not remote.rewarder._server.is_serving()
    finally:
        await taken.close()


async def test_a_huge_url_is_refused_without_a_traceback(
    start_remote: StartRemote, caplog: pytest.LogCaptureFixture
) -> None:
    remote = await start_remote(mode="lockstep", http_port=0)
    assert remote.viewer is not None
    for _ in range(3):
        reader, writer = await asyncio.open_connection("127.0.0.1", remote.viewer.port)
        writer.write(b"GET /viewer/" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert (await asyncio.wait_for(reader.read(12), 10)).startswith(b"HTTP/1.")
        writer.close()
    async with asyncio.timeout(10):
        while not any("malformed HTTP request" in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.01)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@needs_novnc
async def test_the_screen_fits_the_window_and_a_button_shows_it_one_to_one(
    start_remote: StartRemote, browser: Callable[[str], Awaitable[Chromium]],
) -> None:
    remote = await start_remote(password=PASSWORD, http_port=0)
    assert remote.viewer is not None
    page = await browser(f"http://user:{PASSWORD}@127.0.0.1:{remote.viewer.port}/viewer/")
    await wait_until(lambda: page.evaluate("window.viewer && window.viewer.state === 'connected'"),
                     "noVNC to connect")
    width = "document.querySelector('#screen canvas').getBoundingClientRect().width"
    # Catch is 160x210; the 800x600 window fits it twice over (sharp), 2.6 times (smooth).
    await wait_until(lambda: page.evaluate(f"{width} === 320"), "the screen at twice its size")
    assert await page.evaluate("window.viewer.rfb.scaleViewport") is True
    await page.evaluate("document.getElementById('scale').click(); true")
    await wait_until(lambda: page.evaluate(f"{width} > 320"), "the screen to fill the window")
    await page.evaluate("document.getElementById('scale').click(); true")
    await wait_until(lambda: page.evaluate(f"{width} === 160"), "the screen at 1:1")
    assert await page.evaluate("document.getElementById('scale').textContent") == "sharp"
