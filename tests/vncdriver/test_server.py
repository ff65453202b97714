"""The asyncio VNC server shell (``vncdriver.server``) over real sockets.

Every client here is :class:`Viewer`: our sans-I/O ClientHandshake and ClientProtocol on
an asyncio transport, so the tests need no other peer (those are in
``test_server_peers.py``). Nothing waits on time: tests wait for what a client receives
(:meth:`Viewer.wait`), for the server's callbacks, or for the remote's frames, each
under a timeout.

Covers: many clients at once; a client that stops reading neither slows nor starves the
others and gets the latest frame, not a backlog, when it reads again; only changed tiles
are sent; refusals past ``max_clients`` (also when the clients arrive together) carry a
reason; bad bytes close only their client; a new pixel format gets the whole screen
again; keys from VNC reach a remote's game and a leaving client lets go of them;
DesktopSize when the remote switches games; close() ends every connection.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import pytest

from runtimes.builtin import CLICK_HEIGHT, CLICK_HUD_COLOUR, CLICK_WIDTH, Catch
from tests.wire import WireClient
from vncdriver.client_protocol import ClientProtocol, DesktopResized, FramebufferUpdated
from vncdriver.errors import ServerRefused, VNCError
from vncdriver.handshake import ClientHandshake, SecurityType
from vncdriver.messages import Encoding, FramebufferUpdateRequest, KeyEvent, build_encodings
from vncdriver.pixelformat import NATIVE, PixelFormat
from vncdriver.server import VNCServer

#: Seconds any one wait may take before the test fails; generous for a loaded CI machine.
TIMEOUT = 10.0

#: Raw only, with DesktopSize: rectangles arrive exactly as the server diffed them.
RAW = build_encodings([Encoding.RAW])


def pattern(height: int, width: int, seed: int) -> np.ndarray:
    """A deterministic frame no encoder can shortcut: a gradient under noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    gradient = np.stack(
        [xx * 255 // max(1, width - 1), yy * 255 // max(1, height - 1), (xx + yy) % 256], -1
    )
    return ((gradient + rng.integers(0, 64, (height, width, 3))) % 256).astype(np.uint8)


class Viewer(asyncio.Protocol):
    """A minimal RFB client: our handshake and ClientProtocol on an asyncio transport.

    With ``auto_request`` it keeps one update request outstanding, as a viewer does;
    without, the test sends requests itself (:meth:`request`). ``updates`` holds every
    FramebufferUpdated, ``resizes`` every DesktopResized.
    """

    def __init__(
        self,
        password: str | None = None,
        encodings: Sequence[int] | None = None,
        auto_request: bool = True,
        pixel_format: PixelFormat = NATIVE,
    ) -> None:
        self.handshake = ClientHandshake(password)
        self.encodings = encodings
        self.pixel_format = pixel_format
        self.auto_request = auto_request
        self.proto: ClientProtocol | None = None
        self.transport: asyncio.Transport | None = None
        self.updates: list[FramebufferUpdated] = []
        self.resizes: list[DesktopResized] = []
        self.error: VNCError | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self._progress = asyncio.Event()

    @classmethod
    async def open(cls, port: int, *, rcvbuf: int | None = None, **kwargs: Any) -> Viewer:
        """Connect without waiting for the handshake (``rcvbuf`` shrinks the socket's buffer)."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        if rcvbuf is not None:  # before connect, so the TCP window stays small
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        viewer = cls(**kwargs)
        await loop.create_connection(lambda: viewer, sock=sock)
        return viewer

    @classmethod
    async def connect(cls, port: int, **kwargs: Any) -> Viewer:
        """Connect and finish the handshake (raises the server's refusal, if any)."""
        viewer = await cls.open(port, **kwargs)
        await viewer.wait_ready()
        return viewer

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            if self.proto is None:
                self.handshake.receive_data(data)
                self._write(self.handshake.data_to_send())
                if not self.handshake.complete:
                    return
                assert self.handshake.result is not None
                self.proto = ClientProtocol(
                    self.handshake.result, encodings=self.encodings, pixel_format=self.pixel_format
                )
                if self.auto_request:
                    self.proto.request_update()
                self._write(self.proto.data_to_send())
                data = self.handshake.trailing_data()
            self.proto.receive_data(data)
            for event in self.proto.events_received():
                if isinstance(event, FramebufferUpdated):
                    self.updates.append(event)
                    if self.auto_request:
                        self.proto.request_update()
                elif isinstance(event, DesktopResized):
                    self.resizes.append(event)
            self._write(self.proto.data_to_send())
        except VNCError as exc:
            self.error = exc
            assert self.transport is not None
            self.transport.close()
        finally:
            self._progress.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)
        self._progress.set()

    # For the tests ------------------------------------------------------------------------

    @property
    def framebuffer(self) -> np.ndarray:
        assert self.proto is not None
        return self.proto.framebuffer

    def shows(self, frame: np.ndarray) -> bool:
        return self.proto is not None and np.array_equal(self.proto.framebuffer, frame)

    async def wait(self, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        """Wait until ``predicate()`` holds after something arrived; raise if the link died."""
        async with asyncio.timeout(timeout):
            while not predicate():
                if self.error is not None:
                    raise self.error
                if self.closed.done():
                    raise ConnectionError("the server closed the connection")
                self._progress.clear()
                await self._progress.wait()

    async def wait_frame(self, frame: np.ndarray) -> None:
        """Wait until the client's framebuffer equals ``frame``."""
        await self.wait(functools.partial(self.shows, frame))

    async def wait_updates(self, count: int) -> None:
        """Wait until ``count`` updates arrived in all."""
        await self.wait(lambda: len(self.updates) >= count)

    async def wait_ready(self) -> None:
        """Wait for the end of the handshake (raises the server's refusal, if any)."""
        await self.wait(lambda: self.proto is not None)

    def request(self, incremental: bool = True) -> None:
        assert self.proto is not None
        self.proto.request_update(incremental)
        self._write(self.proto.data_to_send())

    def key(self, key: str, down: bool) -> None:
        assert self.proto is not None
        self.proto.key_event(key, down)
        self._write(self.proto.data_to_send())

    def send_raw(self, data: bytes) -> None:
        self._write(data)

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        await self.closed

    def _write(self, data: bytes) -> None:
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class Departures:
    """``on_disconnect`` for a VNCServer: records who left and lets a test wait for it."""

    def __init__(self) -> None:
        self.left: list[int] = []
        self._event = asyncio.Event()

    def __call__(self, client_id: int) -> None:
        self.left.append(client_id)
        self._event.set()

    async def wait_count(self, count: int) -> None:
        async with asyncio.timeout(TIMEOUT):
            while len(self.left) < count:
                self._event.clear()
                await self._event.wait()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[VNCServer]]]:
    """``await serve(frame, **kwargs)``: a started VNCServer on a free port, closed after."""
    servers: list[VNCServer] = []

    async def start(frame: np.ndarray, **kwargs: object) -> VNCServer:
        server = VNCServer(frame, **kwargs)  # type: ignore[arg-type]
        await server.start("127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


# Many clients -----------------------------------------------------------------------------


async def test_many_clients_each_get_every_frame(serve) -> None:  # type: ignore[no-untyped-def]
    frame = pattern(120, 200, seed=1)
    server = await serve(frame)
    viewers = await asyncio.gather(*(Viewer.connect(server.port) for _ in range(40)))
    await asyncio.gather(*(v.wait_frame(frame) for v in viewers))
    assert len(server.connections) == 40

    for seed in (2, 3):
        frame[:] = pattern(120, 200, seed)
        server.frame_ready()
        await asyncio.gather(*(v.wait_frame(frame) for v in viewers))
    assert all(len(v.updates) == 3 for v in viewers)
    assert sorted(server.stats().values()) == [3] * 40
    await asyncio.gather(*(v.close() for v in viewers))


# A client that stops reading --------------------------------------------------------------


async def test_stalled_client_gets_latest_frame_not_a_backlog(serve) -> None:  # type: ignore[no-untyped-def]
    """Frames keep flowing to the others while one client's socket is full; when it
    reads again it gets what was already on its way, then exactly one update: the newest."""
    height, width = 480, 640  # 1.2 MB a Raw update: the buffers fill in a few frames
    frame = pattern(height, width, seed=0)
    server = await serve(frame)
    others = [await Viewer.connect(server.port, encodings=RAW) for _ in range(3)]
    stalled = await Viewer.connect(server.port, encodings=RAW, auto_request=False, rcvbuf=4096)
    stalled_id = max(server.connections)  # ids count up: the newest client
    connection = server.connections[stalled_id]
    assert stalled.transport is not None
    stalled.transport.pause_reading()  # it still writes requests, it just never reads

    seed = 0
    frames_paused = 0
    updates_at_pause = None
    while frames_paused < 10:
        seed += 1
        assert seed < 200, "the stalled client's socket never filled up"
        frame[:] = pattern(height, width, seed)
        stalled.request()
        server.frame_ready()
        await asyncio.gather(*(v.wait_frame(frame) for v in others))
        if connection.paused:
            if updates_at_pause is None:
                updates_at_pause = server.stats()[stalled_id]
            frames_paused += 1
            # Skipped while backed up: not one more update was encoded for it.
            assert server.stats()[stalled_id] == updates_at_pause
    assert updates_at_pause is not None and updates_at_pause < seed
    assert all(len(v.updates) == seed + 1 for v in others)  # the first frame, then each new one

    stalled.transport.resume_reading()
    await stalled.wait_frame(frame)
    assert len(stalled.updates) == updates_at_pause + 1
    assert server.stats()[stalled_id] == updates_at_pause + 1
    assert not connection.paused
    for viewer in (*others, stalled):
        await viewer.close()


# Only what changed ------------------------------------------------------------------------


async def test_only_changed_tiles_are_sent(serve) -> None:  # type: ignore[no-untyped-def]
    frame = pattern(240, 320, seed=4)
    server = await serve(frame)
    viewer = await Viewer.connect(server.port, encodings=RAW)
    await viewer.wait_updates(1)
    assert [(r.x, r.y, r.width, r.height) for r in viewer.updates[0].rects] == [(0, 0, 320, 240)]

    def sprite(x: int, y: int, size: int = 6) -> None:
        frame[y : y + size, x : x + size] = 255 - frame[y : y + size, x : x + size]

    cases = [
        ([(100, 100)], [(64, 64, 64, 64)]),  # inside one tile
        ([(60, 60)], [(0, 0, 128, 128)]),  # across four tiles: one merged rectangle
        ([(10, 10), (250, 150)], [(0, 0, 64, 64), (192, 128, 64, 64)]),  # two places
        ([(310, 230)], [(256, 192, 64, 48)]),  # the clipped corner tile
    ]
    for sprites, expected in cases:
        server.frame_ready()  # nothing changed: nothing is sent, the request stays open
        for x, y in sprites:
            sprite(x, y)
        count = len(viewer.updates)
        server.frame_ready()
        await viewer.wait_updates(count + 1)
        update = viewer.updates[count]
        assert [(r.x, r.y, r.width, r.height) for r in update.rects] == expected
        assert update.npixels == sum(w * h for _, _, w, h in expected)
        assert viewer.shows(frame)
    assert len(viewer.updates) == 1 + len(cases)
    await viewer.close()


async def test_reported_damage_is_sent_without_comparing(serve) -> None:  # type: ignore[no-untyped-def]
    """``frame_ready(damage=)`` (an X display's damage, a built-in game's sprites): the
    reported rectangles themselves are sent, not their tiles, and the screen is not
    compared — a change outside them waits for a report (or for a frame_ready without
    damage, which compares again and sends tiles)."""
    frame = pattern(240, 320, seed=5)
    server = await serve(frame)
    viewer = await Viewer.connect(server.port, encodings=RAW)
    await viewer.wait_updates(1)
    frame[10:16, 10:16] = 255 - frame[10:16, 10:16]  # reported
    frame[150:156, 250:256] = 255 - frame[150:156, 250:256]  # not reported
    server.frame_ready(damage=[(10, 10, 6, 6)])
    await viewer.wait_updates(2)
    assert [(r.x, r.y, r.width, r.height) for r in viewer.updates[1].rects] == [(10, 10, 6, 6)]
    assert not viewer.shows(frame)  # the unreported change is not there yet
    server.frame_ready()  # no report: the server compares, and finds the other change
    await viewer.wait_updates(3)
    assert [(r.x, r.y, r.width, r.height) for r in viewer.updates[2].rects] == [(192, 128, 64, 64)]
    assert viewer.shows(frame)
    server.frame_ready(damage=[])  # nothing changed, says the report: nothing is sent
    server.frame_ready(damage=[(300, 200, 40, 60)])  # clipped to the screen
    await viewer.wait_updates(4)
    assert [(r.x, r.y, r.width, r.height) for r in viewer.updates[3].rects] == [(300, 200, 20, 40)]
    await viewer.close()


async def test_a_game_reporting_damage_is_shown_exactly_to_every_viewer(serve) -> None:  # type: ignore[no-untyped-def]
    """A built-in game reports what it drew each frame; viewers get those rectangles, not
    their tiles, and a viewer that skips frames (its request comes late) gets the damage
    of every frame it missed: each ends up showing the frame exactly, with far fewer
    pixels than tiles. A viewer asking for part of the screen gets dirty tiles."""
    from runtimes.base import KeyEvent as Key
    from vncdriver.server_protocol import MAX_EXACT_RECTS

    game = Catch()
    game.reset(7)
    game.take_damage()
    server = await serve(game.framebuffer)
    eager = await Viewer.connect(server.port, encodings=RAW)
    late = await Viewer.connect(server.port, encodings=RAW, auto_request=False)
    part = await Viewer.connect(server.port, encodings=RAW, auto_request=False)
    late.request(incremental=False)
    part.request(incremental=False)
    await asyncio.gather(*(v.wait_frame(game.framebuffer) for v in (eager, late, part)))
    first = len(eager.updates)
    keys = [Key("Left", True), Key("Left", False), Key("Right", True)]
    for frame in range(1, 121):
        game.advance([keys[frame % 3]] if frame % 5 == 0 else [], 1)
        server.frame_ready(damage=game.take_damage())
        await eager.wait_frame(game.framebuffer)
        if frame % 4 == 0:  # three frames' damage in one update
            late.request()
            await late.wait_frame(game.framebuffer)
        if frame % 10 == 0:
            assert part.proto is not None
            part.proto.request_update(x=0, y=100, width=160, height=110)
            part.send_raw(part.proto.data_to_send())
            await part.wait(lambda: np.array_equal(part.framebuffer[100:], game.framebuffer[100:]))
    sprites = eager.updates[first:]
    assert all(len(u.rects) <= MAX_EXACT_RECTS for u in sprites)
    pixels = sum(r.width * r.height for u in sprites for r in u.rects)
    assert pixels < len(sprites) * 64 * 64 / 4, pixels  # rectangles, not 64x64 tiles
    part_rects = [r for u in part.updates[1:] for r in u.rects]
    assert part_rects and all(  # whole tiles, cut to the area asked for
        r.y >= 100 and r.x % 64 == 0 and (r.width % 64 == 0 or r.x + r.width == 160)
        for r in part_rects
    )
    for viewer in (eager, late, part):
        await viewer.close()


async def test_a_new_pixel_format_gets_the_whole_screen_again(serve) -> None:  # type: ignore[no-untyped-def]
    """What the client holds was drawn in the old format (say 8-bit colour, as TigerVNC's
    viewer starts on a slow link); its next update, even incremental, redraws it all."""
    frame = pattern(100, 140, seed=10)
    server = await serve(frame)
    viewer = await Viewer.connect(
        server.port,
        encodings=RAW,
        pixel_format=PixelFormat(8, 8, False, True, 7, 7, 3, 5, 2, 0),
        auto_request=False,
    )
    viewer.request(incremental=False)
    await viewer.wait_updates(1)
    assert not viewer.shows(frame)  # 8-bit colour
    assert viewer.proto is not None
    # What TigerVNC sends when it turns full colour on: SetPixelFormat with no request
    # outstanding (RFB's rule), then an *incremental* request.
    viewer.proto.set_pixel_format(NATIVE)
    viewer.send_raw(viewer.proto.data_to_send())
    viewer.send_raw(FramebufferUpdateRequest(True, 0, 0, 140, 100).serialize())
    await viewer.wait_frame(frame)
    assert viewer.updates[-1].npixels == 100 * 140
    await viewer.close()


# Refusals ---------------------------------------------------------------------------------


async def test_max_clients_refusal_has_a_reason(serve) -> None:  # type: ignore[no-untyped-def]
    frame = pattern(32, 48, seed=5)
    departures = Departures()
    server = await serve(frame, max_clients=2, on_disconnect=departures)
    first = await Viewer.connect(server.port)
    second = await Viewer.connect(server.port)
    with pytest.raises(ServerRefused, match=r"too many clients \(2\)"):
        await Viewer.connect(server.port)
    await second.wait_frame(frame)  # the others are still served

    await first.close()
    await departures.wait_count(1)
    third = await Viewer.connect(server.port)  # a place is free again
    await third.wait_frame(frame)
    await second.close()
    await third.close()


async def test_max_clients_holds_when_clients_arrive_together(serve) -> None:  # type: ignore[no-untyped-def]
    """Connections still in their handshake count too, or a burst slips past the limit."""
    frame = pattern(32, 48, seed=6)
    server = await serve(frame, max_clients=2)
    viewers = await asyncio.gather(*(Viewer.open(server.port) for _ in range(5)))
    outcomes = await asyncio.gather(*(v.wait_ready() for v in viewers), return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, ServerRefused)]
    assert len(refused) == 3, outcomes
    assert all("too many clients (2)" in o.reason for o in refused)
    assert len(server.connections) == 2
    for viewer in viewers:
        await viewer.close()


async def test_bad_bytes_close_only_that_client(serve, caplog) -> None:  # type: ignore[no-untyped-def]
    frame = pattern(64, 96, seed=7)
    departures = Departures()
    server = await serve(frame, on_disconnect=departures)
    good = await Viewer.connect(server.port)
    await good.wait_frame(frame)
    cases = [
        (b"\xff", "unknown client message type 255"),
        (b"\x02\x00\xff\xff", "over the limit"),  # SetEncodings announcing 65535 encodings
        (b"\x00" + bytes(19), "SetPixelFormat"),  # 0 bits per pixel
    ]
    with caplog.at_level(logging.INFO, logger="vncdriver"):
        for data, reason in cases:
            bad = await Viewer.connect(server.port)
            bad.send_raw(data)
            async with asyncio.timeout(TIMEOUT):
                await bad.closed
            assert reason in caplog.text
        # Not RFB at all: closed during the handshake, with the reason sent first.
        stranger = await Viewer.open(server.port)
        stranger.send_raw(b"GET / HTTP/1.1\r\n\r\n")
        async with asyncio.timeout(TIMEOUT):
            await stranger.closed
        assert "is this a VNC port?" in caplog.text

    await departures.wait_count(len(cases))
    frame[:] = pattern(64, 96, seed=8)
    server.frame_ready()
    await good.wait_frame(frame)
    assert list(server.connections) == [1]
    await good.close()


# Through a remote -------------------------------------------------------------------------


async def test_vnc_keys_move_the_paddle_and_a_leaving_client_lets_go(start_remote) -> None:  # type: ignore[no-untyped-def]
    remote = await start_remote("builtin.Catch-v0")
    runtime = remote.runtime
    assert isinstance(runtime, Catch)
    viewer = await Viewer.connect(remote.vnc_port)
    start_x = runtime.paddle_x
    viewer.key("Right", True)
    async with asyncio.timeout(TIMEOUT):
        while runtime.paddle_x <= start_x:
            await remote.wait_frame()
    assert "Right" in runtime.held

    await viewer.close()  # without letting go of Right
    async with asyncio.timeout(TIMEOUT):
        while "Right" in runtime.held:
            await remote.wait_frame()
    assert remote.held_keys == set()
    stopped_at = runtime.paddle_x
    for _ in range(3):
        await remote.wait_frame()
    assert runtime.paddle_x == stopped_at < 160 - 20  # stopped by the release, not the wall


async def test_desktop_size_when_the_remote_switches_games(start_remote, caplog) -> None:  # type: ignore[no-untyped-def]
    remote = await start_remote("builtin.Catch-v0")
    viewer = await Viewer.connect(remote.vnc_port)
    old_style = await Viewer.connect(remote.vnc_port, encodings=[Encoding.RAW])  # no DesktopSize
    await viewer.wait_updates(1)
    assert viewer.framebuffer.shape == (210, 160, 3)

    def resized_update() -> FramebufferUpdated | None:
        return next(
            (
                u
                for u in viewer.updates
                if any(r.encoding == Encoding.DESKTOP_SIZE for r in u.rects)
            ),
            None,
        )

    agent = await WireClient.open(remote.rewarder.port)
    with caplog.at_level(logging.INFO, logger="vncdriver"):
        reply = await agent.reset(env_id="builtin.ClickTarget-v0")
        assert reply["method"] == "v0.reply.env.reset", reply
        await viewer.wait(lambda: resized_update() is not None)
        async with asyncio.timeout(TIMEOUT):
            await old_style.closed
    assert viewer.resizes == [DesktopResized(CLICK_WIDTH, CLICK_HEIGHT)]
    update = resized_update()
    assert update is not None and update.rects[0].encoding == Encoding.DESKTOP_SIZE
    assert update.npixels == CLICK_WIDTH * CLICK_HEIGHT  # then the whole new screen
    assert viewer.framebuffer.shape == (CLICK_HEIGHT, CLICK_WIDTH, 3)
    # The new game is on screen: its HUD band, and most of it pixel for pixel (it runs on).
    assert (viewer.framebuffer[:2] == CLICK_HUD_COLOUR).all()
    assert np.mean(viewer.framebuffer == remote.runtime.framebuffer) > 0.95
    assert "does not accept DesktopSize" in caplog.text
    await agent.close()
    await viewer.close()


async def test_close_ends_every_connection_even_mid_handshake(serve) -> None:  # type: ignore[no-untyped-def]
    frame = pattern(32, 48, seed=9)
    server = await serve(frame)
    viewer = await Viewer.connect(server.port)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert await reader.readexactly(12) == b"RFB 003.008\n"  # and it never answers
    assert len(server.handshaking) == 1
    await server.close()
    async with asyncio.timeout(TIMEOUT):
        await viewer.closed
        assert await reader.read() == b""  # closed by the server, not by its timeout
    writer.close()


async def test_a_client_silent_in_the_handshake_is_closed(serve, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("vncdriver.server.HANDSHAKE_TIMEOUT", 0.2)
    server = await serve(pattern(32, 48, seed=11))
    with caplog.at_level(logging.INFO, logger="vncdriver"):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await reader.readexactly(12) == b"RFB 003.008\n"
        async with asyncio.timeout(TIMEOUT):
            assert await reader.read() == b""
    assert "did not finish the RFB handshake in time" in caplog.text
    assert not server.handshaking  # its place is free again
    writer.close()


# Clients attached in-process (VNCServer.attach) ----------------------------------------------


class AttachedLink:
    """A :class:`Viewer` attached in-process: :meth:`VNCServer.attach`'s callbacks on one
    side, the Viewer's transport on the other. Bytes cross on the next loop turn each way,
    as over a socket, so neither side re-enters the other."""

    def __init__(self, server: VNCServer, *, view_only: bool, attach: dict[str, Any] | None = None,
                 **viewer_kwargs: Any) -> None:
        self.loop = asyncio.get_running_loop()
        self.viewer = Viewer(**viewer_kwargs)
        self.viewer.transport = self  # type: ignore[assignment]
        #: Times the server called ``close``, and bytes it wrote.
        self.closed_by_server = 0
        self.written = 0
        self._closing = False
        self.client = server.attach(
            self._from_server, self._server_closed, view_only=view_only, **(attach or {})
        )

    # The server's callbacks.
    def _from_server(self, data: bytes) -> None:
        self.written += len(data)
        self.loop.call_soon(self.viewer.data_received, data)

    def _server_closed(self) -> None:
        self.closed_by_server += 1
        self._closing = True
        self.loop.call_soon(self.viewer.connection_lost, None)

    # The Viewer's transport.
    def write(self, data: bytes) -> None:
        self.loop.call_soon(self.client.feed, bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self.client.close()
            self.loop.call_soon(self.viewer.connection_lost, None)


def sprite(frame: np.ndarray, x: int, y: int, size: int = 6) -> None:
    frame[y : y + size, x : x + size] = 255 - frame[y : y + size, x : x + size]


async def test_an_attached_client_is_served_like_a_socket_client() -> None:
    """Handshake (security None: pre-authenticated, whatever the passwords), the whole
    frame, then only changed tiles, with no TCP listener at all; view-only is the
    server's doing: that client's keys, pointer and clipboard never reach on_input."""
    frame = pattern(240, 320, seed=21)
    seen: list[tuple[int, Any]] = []
    departures = Departures()
    server = VNCServer(frame, password="secret", view_only_password="watch",
                       on_input=lambda cid, events: seen.extend((cid, e) for e in events),
                       on_disconnect=departures)  # never started: no socket
    watcher = AttachedLink(server, view_only=True, encodings=RAW)
    await watcher.viewer.wait_frame(frame)
    assert watcher.viewer.handshake.result is not None
    assert watcher.viewer.handshake.result.security_type == SecurityType.NONE
    assert list(server.connections) == [watcher.client.client_id] and watcher.client.ready

    sprite(frame, 100, 100)
    server.frame_ready()
    await watcher.viewer.wait_updates(2)
    assert [(r.x, r.y, r.width, r.height) for r in watcher.viewer.updates[1].rects] == [
        (64, 64, 64, 64)
    ]
    assert watcher.viewer.shows(frame)

    assert watcher.viewer.proto is not None
    watcher.viewer.proto.key_event("Left", True)
    watcher.viewer.proto.pointer_event(5, 5, 1)
    watcher.viewer.proto.cut_text("typed")
    watcher.viewer.request(incremental=False)  # answered after the server read the input
    await watcher.viewer.wait_updates(3)
    assert seen == []

    # The same path without view_only passes input: the test above can see it.
    controller = AttachedLink(server, view_only=False, encodings=RAW)
    await controller.viewer.wait_frame(frame)
    controller.viewer.key("Left", True)
    controller.viewer.request(incremental=False)
    await controller.viewer.wait_updates(2)
    assert [(cid, type(e)) for cid, e in seen] == [(controller.client.client_id, KeyEvent)]
    assert server.stats() == {watcher.client.client_id: 3, controller.client.client_id: 2}

    await watcher.viewer.close()
    await controller.viewer.close()
    assert sorted(departures.left) == sorted([watcher.client.client_id, controller.client.client_id])
    assert not server.connections
    assert watcher.closed_by_server == controller.closed_by_server == 0


async def test_a_paused_attached_client_skips_frames_then_gets_the_newest(serve) -> None:  # type: ignore[no-untyped-def]
    """While its owner reports a back-up, nothing is encoded for it and the others go on;
    on resume it gets one update: the newest frame, not a backlog."""
    frame = pattern(240, 320, seed=22)
    server = await serve(frame)
    other = await Viewer.connect(server.port, encodings=RAW)
    attached = AttachedLink(server, view_only=True, encodings=RAW)
    await asyncio.gather(other.wait_frame(frame), attached.viewer.wait_frame(frame))
    attached.client.pause()
    assert attached.client.paused
    written = attached.written
    for seed in range(23, 28):
        frame[:] = pattern(240, 320, seed)
        server.frame_ready()
        await other.wait_frame(frame)
    assert attached.written == written and server.stats()[attached.client.client_id] == 1
    assert len(other.updates) == 6

    attached.client.resume()
    await attached.viewer.wait_frame(frame)
    assert len(attached.viewer.updates) == 2
    assert not attached.client.paused
    await other.close()
    await attached.viewer.close()


async def test_the_server_ends_attached_clients_and_they_leave() -> None:
    """Bad bytes, the handshake's refusal and shutdown end the client with a reason (and
    call the owner's ``close`` once, unless it closed first); the owner's own close()
    leaves without a callback."""
    frame = pattern(32, 48, seed=29)
    departures = Departures()
    server = VNCServer(frame, on_disconnect=departures, max_clients=2)
    bad = AttachedLink(server, view_only=True)
    await bad.viewer.wait_ready()
    bad.viewer.send_raw(b"\xff")
    async with asyncio.timeout(TIMEOUT):
        await bad.viewer.closed
    assert bad.closed_by_server == 1 and bad.client.closed
    assert "unknown client message type 255" in (bad.client.close_reason or "")
    await departures.wait_count(1)

    refused = AttachedLink(server, view_only=True, attach={"refuse_reason": "too many viewers"})
    with pytest.raises(ServerRefused, match="too many viewers"):
        await refused.viewer.wait_ready()
    assert refused.client.closed and "too many viewers" in (refused.client.close_reason or "")

    leaving = AttachedLink(server, view_only=True)
    staying = AttachedLink(server, view_only=True)
    await asyncio.gather(leaving.viewer.wait_ready(), staying.viewer.wait_ready())
    leaving.client.close()
    leaving.client.close()  # idempotent
    assert departures.left[-1] == leaving.client.client_id and leaving.closed_by_server == 0
    assert list(server.connections) == [staying.client.client_id]

    await server.close()
    async with asyncio.timeout(TIMEOUT):
        await staying.viewer.closed
    assert staying.closed_by_server == 1 and not server.connections
    late = AttachedLink(server, view_only=True)
    with pytest.raises(ServerRefused, match="shutting down"):
        await late.viewer.wait_ready()
