"""Our asyncio VNC client against our own server (VNCServer, and a Remote running Catch).

Pixel checks compare with the frame the server serves; every wait is on an update or a
frame with a timeout. Interop with servers nobody here wrote is in ``test_xvnc.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from tests.conftest import StartRemote
from vncdriver import keysyms
from vncdriver.client import (
    ENCODING_PREFERENCES,
    VNCClient,
    connect,
    encoding_list,
    parse_address,
)
from vncdriver.errors import (
    AuthenticationFailed,
    ConnectionLost,
    ConnectTimeout,
    LocalProtocolError,
    ProtocolError,
    ServerRefused,
)
from vncdriver.handshake import ServerHandshake
from vncdriver.messages import Encoding, KeyEvent, PointerEvent
from vncdriver.server import VNCServer

from .helpers import make_frame
from .xserver import free_port

WAIT = 10.0

ENCODINGS = {
    "raw": {"encoding": "raw"},
    "tight": {"encoding": "tight"},
    "zrle": {"encoding": "zrle"},
    "tight-jpeg": {"encoding": "tight", "quality": 7},
}


async def until(client: VNCClient, condition: Callable[[], bool], timeout: float = WAIT) -> None:
    """Wait for updates until ``condition()`` holds (checked now and after each update)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await client.wait_update()


def equal(client: VNCClient, frame: np.ndarray) -> Callable[[], bool]:
    return lambda: (
        client.framebuffer.shape == frame.shape and bool(np.array_equal(client.framebuffer, frame))
    )


def near(client: VNCClient, frame: np.ndarray, bound: float = 6.0) -> Callable[[], bool]:
    def check() -> bool:
        fb = client.framebuffer
        return fb.shape == frame.shape and float(np.abs(fb.astype(np.int16) - frame).mean()) < bound

    return check


class Served:
    """A VNCServer over a frame the test controls, recording the input it receives."""

    def __init__(self, frame: np.ndarray, **kwargs: object) -> None:
        self.frame = frame
        self.input: list[KeyEvent | PointerEvent] = []
        self._input_waiters: list[asyncio.Future[None]] = []
        self.server = VNCServer(frame, on_input=self._on_input, **kwargs)  # type: ignore[arg-type]

    @property
    def address(self) -> str:
        return f"127.0.0.1::{self.server.port}"

    def show(self, frame: np.ndarray) -> None:
        """Replace the picture (in place when the size is unchanged) and tell the server."""
        if frame.shape == self.frame.shape:
            self.frame[...] = frame
            self.server.frame_ready()
        else:
            self.frame = frame.copy()
            self.server.frame_ready(self.frame)

    async def wait_input(self, count: int, timeout: float = WAIT) -> list[KeyEvent | PointerEvent]:
        async with asyncio.timeout(timeout):
            while len(self.input) < count:
                waiter = asyncio.get_running_loop().create_future()
                self._input_waiters.append(waiter)
                await waiter
        return self.input

    def _on_input(self, client_id: int, events: object) -> None:
        self.input.extend(events)  # type: ignore[arg-type]
        waiters, self._input_waiters = self._input_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


Serve = Callable[..., Awaitable[Served]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    started: list[Served] = []

    async def start(frame: np.ndarray, **kwargs: object) -> Served:
        served = Served(frame.copy(), **kwargs)
        await served.server.start("127.0.0.1", 0)
        started.append(served)
        return served

    yield start
    for served in started:
        await served.server.close()


# Addresses and options -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("localhost:1", ("localhost", 5901)),
        ("localhost:0", ("localhost", 5900)),
        ("10.0.0.2:99", ("10.0.0.2", 5999)),
        ("10.0.0.2:100", ("10.0.0.2", 100)),
        ("127.0.0.1:5901", ("127.0.0.1", 5901)),
        ("example.com::5", ("example.com", 5)),
        ("example.com::5901", ("example.com", 5901)),
        ("example.com", ("example.com", 5900)),
        (":2", ("127.0.0.1", 5902)),
        ("::5901", ("127.0.0.1", 5901)),  # vncviewer's reading, so IPv6 needs brackets
        ("[::1]:1", ("::1", 5901)),
        ("[::1]::6000", ("::1", 6000)),
        ("[::1]", ("::1", 5900)),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize(
    ("address", "match"),
    [
        ("vnc://host:5900", "not a URL"),
        ("host:abc", "not a display or port"),
        ("host::70000", "outside 1..65535"),
        ("host::0", "outside 1..65535"),
        ("[::1:5900", r"missing '\]'"),
    ],
)
def test_parse_address_errors(address: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_address(address)


def test_encoding_list() -> None:
    tight = encoding_list("tight")
    assert tight[: len(ENCODING_PREFERENCES["tight"])] == list(ENCODING_PREFERENCES["tight"])
    assert Encoding.DESKTOP_SIZE in tight and Encoding.LAST_RECT in tight
    assert not any(-32 <= e <= -23 for e in tight), "lossless by default"
    jpeg = encoding_list("TIGHT", quality=5, compress_level=2)
    assert Encoding.JPEG_QUALITY_0 + 5 in jpeg and Encoding.COMPRESS_LEVEL_0 + 2 in jpeg
    assert encoding_list(["zrle", 0])[:2] == [Encoding.ZRLE, Encoding.RAW]
    with pytest.raises(ValueError, match="unknown encoding 'hextile'"):
        encoding_list("hextile")
    with pytest.raises(ValueError, match="we decode"):
        encoding_list(["zlib"])
    with pytest.raises(ValueError, match="cannot decode encoding 5"):
        encoding_list([5])  # Hextile


# Pixels ----------------------------------------------------------------------------------


@pytest.mark.parametrize("options", ENCODINGS.values(), ids=ENCODINGS.keys())
async def test_frames_match_the_server(serve: Serve, options: dict[str, Any]) -> None:
    lossy = "quality" in options
    served = await serve(make_frame(120, 160, "mixed", 0))
    async with VNCClient(served.address, **options) as client:
        assert (client.width, client.height) == (160, 120)
        first = await client.wait_update(0, timeout=WAIT)
        assert first >= 1
        check = near if lossy else equal
        await until(client, check(client, served.frame))
        # A sprite moving over a background: small incremental updates.
        sprite = make_frame(12, 12, "few4", 1)
        for step in range(8):
            frame = make_frame(120, 160, "smooth" if lossy else "mixed", 0)
            frame[40 + step * 3 : 52 + step * 3, 10 + step * 15 : 22 + step * 15] = sprite
            served.show(frame)
            await until(client, check(client, frame))
        # The whole screen changes.
        for kind in ("noise", "few3", "solid", "smooth"):
            frame = make_frame(120, 160, "smooth" if lossy else kind, 7)
            served.show(frame)
            await until(client, check(client, frame))
        stats = client.stats
        assert stats.updates == client.updates >= 2
        assert stats.rectangles >= stats.updates
        assert stats.pixels >= 160 * 120
        assert stats.bytes > 0 and stats.updates_per_second > 0
        updates, nbytes, pixels, rate = client.counts  # (what an agent's info shows)
        assert (updates, nbytes, pixels) == (stats.updates, stats.bytes, stats.pixels)
        assert rate == pytest.approx(stats.updates_per_second, rel=0.2)
        expected = options["encoding"].upper()
        assert stats.rectangles_by_encoding.get(expected, 0) > 0, stats.rectangles_by_encoding


async def test_frame_is_a_copy_and_framebuffer_is_live(serve: Serve) -> None:
    served = await serve(make_frame(40, 50, "noise", 0))
    async with VNCClient(served.address) as client:
        await until(client, equal(client, served.frame))
        live = client.framebuffer
        kept = client.frame()
        kept[...] = 0
        assert np.array_equal(client.framebuffer, served.frame)
        served.show(make_frame(40, 50, "noise", 1))
        await until(client, equal(client, served.frame))
        assert np.array_equal(live, served.frame), "the live view follows updates"


async def test_resize(serve: Serve) -> None:
    served = await serve(make_frame(40, 50, "few4", 0))
    async with VNCClient(served.address, encoding="zrle") as client:
        await until(client, equal(client, served.frame))
        bigger = make_frame(90, 70, "mixed", 3)
        served.show(bigger)
        await until(client, equal(client, bigger))
        assert (client.width, client.height) == (70, 90)
        assert client.frame().shape == (90, 70, 3)
        assert client.stats.rectangles_by_encoding.get("DESKTOP_SIZE") == 1


async def test_wait_update(serve: Serve) -> None:
    served = await serve(make_frame(30, 40, "few4", 0))
    seen: list[int] = []
    async with VNCClient(
        served.address, on_update=lambda c, update: seen.append(update.npixels)
    ) as client:
        first = await client.wait_update(0, timeout=WAIT)
        assert await client.wait_update(first - 1, timeout=0) == client.updates  # already in
        waiters = [asyncio.ensure_future(client.wait_update(first, WAIT)) for _ in range(3)]
        served.show(make_frame(30, 40, "noise", 1))
        numbers = await asyncio.gather(*waiters)
        assert numbers == [first + 1] * 3
        assert seen[0] == 40 * 30 and len(seen) == client.updates
        # A still screen sends nothing: the wait times out with a clear message.
        with pytest.raises(TimeoutError, match="only when the screen changes"):
            await client.wait_update(timeout=0.05)


async def test_many_clients_in_one_loop(serve: Serve) -> None:
    served = await serve(make_frame(60, 80, "mixed", 0))
    clients = [
        VNCClient(served.address, encoding=("tight", "zrle", "raw")[i % 3], name=f"c{i}")
        for i in range(24)
    ]
    try:
        await asyncio.gather(*(c.start() for c in clients))
        for seed in range(3):
            frame = make_frame(60, 80, "mixed", seed + 10)
            served.show(frame)
            await asyncio.gather(*(until(c, equal(c, frame)) for c in clients))
        assert all(c.connected for c in clients)
    finally:
        await asyncio.gather(*(c.close() for c in clients))


async def test_catch_remote(start_remote: StartRemote) -> None:
    """A real game: what we read is the runtime's framebuffer, and our keys move it."""
    remote = await start_remote("builtin.Catch-v0", fps=20)
    runtime = remote.runtime
    async with VNCClient(f"127.0.0.1::{remote.vnc_port}", encoding="tight") as client:
        assert (client.width, client.height) == (runtime.width, runtime.height)
        for _ in range(3):
            # Right after a tick, the client catches up with that frame long before the
            # next one (50 ms away at 20 fps).
            await asyncio.wait_for(remote.wait_frame(), WAIT)
            await until(client, lambda: np.array_equal(client.framebuffer, runtime.framebuffer))

        start = runtime.paddle_x  # type: ignore[attr-defined]
        side = "Left" if start > 0 else "Right"
        client.key_event(side, True)
        async with asyncio.timeout(WAIT):
            while runtime.paddle_x == start:  # type: ignore[attr-defined]
                await remote.wait_frame()
        client.key_event(side, False)
        assert (runtime.paddle_x < start) == (side == "Left")  # type: ignore[attr-defined]
        await until(client, lambda: np.array_equal(client.framebuffer, runtime.framebuffer))
        assert client.stats.updates_per_second > 0


# Input -----------------------------------------------------------------------------------


async def test_input_reaches_the_server(serve: Serve) -> None:
    served = await serve(make_frame(30, 40, "solid", 0))
    async with VNCClient(served.address) as client:
        client.key_event("Left", True)
        client.key_event(keysyms.keysym("a"), False)
        client.pointer_event(5, 6, 1)
        client.send_events(
            [
                ("KeyEvent", "ArrowUp", True),
                ["PointerEvent", 7, 8, 0],
                ("KeyEvent", "enter", False),
            ]
        )
        with pytest.raises(ValueError, match="event 1"):
            client.send_events([("KeyEvent", "a", True), ("PointerEvent", 1, 2)])
        with pytest.raises(ValueError, match="event 0"):
            client.send_events([{"KeyEvent": "a"}])  # type: ignore[list-item]
        events = await served.wait_input(6)
        assert events == [
            KeyEvent(True, keysyms.keysym("Left")),
            KeyEvent(False, keysyms.keysym("a")),
            PointerEvent(1, 5, 6),
            KeyEvent(True, keysyms.keysym("Up")),
            PointerEvent(0, 7, 8),
            KeyEvent(False, keysyms.keysym("Return")),
        ]
        # Nothing of the refused batch went out: the next event is the next one received.
        client.pointer_event(1, 1)
        assert (await served.wait_input(7))[6] == PointerEvent(0, 1, 1)


# Connecting and failing ------------------------------------------------------------------


async def test_connect_timeout_names_the_address() -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ConnectTimeout) as timeout:
        await connect(f"127.0.0.1::{port}", start_timeout=0.4)
    elapsed = time.monotonic() - started
    assert 0.3 < elapsed < 3
    assert isinstance(timeout.value, TimeoutError)
    assert f"127.0.0.1:{port}" in str(timeout.value)
    assert "check that" in str(timeout.value)
    assert isinstance(timeout.value.last_error, ConnectionRefusedError)


async def test_connect_retries_until_the_server_is_up() -> None:
    port = free_port()
    server = VNCServer(make_frame(20, 30, "noise", 0))
    # The scenario is a server that comes up late: start it after a few failed attempts.
    loop = asyncio.get_running_loop()
    late = loop.call_later(0.3, lambda: loop.create_task(server.start("127.0.0.1", port)))
    try:
        async with VNCClient(f"127.0.0.1::{port}", start_timeout=WAIT) as client:
            await until(client, equal(client, server.frame))
    finally:
        late.cancel()
        await server.close()


async def test_wrong_password_is_final(serve: Serve) -> None:
    served = await serve(make_frame(20, 30, "noise", 0), password="secret")
    started = time.monotonic()
    with pytest.raises(AuthenticationFailed) as failed:
        await connect(served.address, password="wrong", start_timeout=30)
    assert time.monotonic() - started < 5, "a refusal must not be retried"
    assert failed.value.reason == "authentication failed"
    with pytest.raises(AuthenticationFailed, match="none was given"):
        await connect(served.address, start_timeout=30)
    async with VNCClient(served.address, password="secret") as client:
        await until(client, equal(client, served.frame))


async def test_server_refusal_is_final(serve: Serve) -> None:
    served = await serve(make_frame(20, 30, "noise", 0), max_clients=1)
    async with VNCClient(served.address):
        started = time.monotonic()
        with pytest.raises(ServerRefused, match="too many clients") as refused:
            await connect(served.address, start_timeout=30)
        assert time.monotonic() - started < 5
        assert "too many clients" in refused.value.reason


async def test_connection_loss_sets_error(serve: Serve) -> None:
    served = await serve(make_frame(20, 30, "noise", 0))
    client = await connect(served.address)
    try:
        await client.wait_update(0, timeout=WAIT)
        waiter = asyncio.ensure_future(client.wait_update(timeout=WAIT))
        await served.server.close()
        with pytest.raises(ConnectionLost, match="lost") as lost:
            await waiter
        assert not client.connected
        assert client.error is lost.value
        assert "127.0.0.1" in str(client.error)
        with pytest.raises(ConnectionLost):
            client.pointer_event(1, 1)
        with pytest.raises(ConnectionLost):
            await client.wait_update(timeout=WAIT)
        assert client.frame().shape == (20, 30, 3), "the last picture stays readable"
    finally:
        await client.close()
        await client.close()  # idempotent


async def test_protocol_error_from_the_server_ends_the_connection() -> None:
    """A server that completes the handshake and then sends an unknown message type."""

    async def bad_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handshake = ServerHandshake(16, 8, "bad")
        writer.write(handshake.data_to_send())
        while not handshake.complete:
            handshake.receive_data(await reader.read(4096))
            writer.write(handshake.data_to_send())
        # Once the client's first requests arrive, it is past its handshake too.
        if not handshake.trailing_data():
            await reader.read(4096)
        writer.write(b"\x63")  # message type 99
        await writer.drain()
        await reader.read()  # until the client hangs up
        writer.close()

    server = await asyncio.start_server(bad_server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        client = await connect(f"127.0.0.1::{port}")
        with pytest.raises(ConnectionLost, match="unknown server message type 99"):
            await client.wait_update(0, timeout=WAIT)
        assert isinstance(client.error, ConnectionLost)
        assert isinstance(client.error.__cause__, ProtocolError)
        await client.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_close_while_connecting() -> None:
    client = VNCClient(f"127.0.0.1::{free_port()}", start_timeout=60)
    starting = asyncio.ensure_future(client.start())
    # Close while it is connecting: in an attempt or in a backoff wait, whichever it is
    # in after 50 ms (any point must end start() at once).
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await client.close()
    with pytest.raises(ConnectionLost, match="closed while connecting"):
        await starting
    assert time.monotonic() - started < 1
    with pytest.raises(ConnectionLost, match="closed"):
        await client.start()


async def test_use_before_start() -> None:
    client = VNCClient("127.0.0.1::5999")
    assert not client.connected and client.error is None
    assert (client.width, client.height) == (0, 0)
    with pytest.raises(LocalProtocolError, match="start"):
        client.frame()
    with pytest.raises(LocalProtocolError, match="start"):
        client.key_event("a", True)
    with pytest.raises(LocalProtocolError, match="start"):
        await client.wait_update()
    await client.close()
