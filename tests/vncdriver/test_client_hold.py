"""VNCClient(request_hold=...): a real-time agent's update request travels with its input.

A real VNCServer on 127.0.0.1 records each chunk it receives; frames carry FRAME_TAGs 1/60 s
apart in server time, so the client knows the pace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from vncdriver import server as vnc_server
from vncdriver.client import MAX_REQUEST_HOLD, VNCClient
from vncdriver.keysyms import keysym
from vncdriver.messages import FramebufferUpdateRequest, FrameTag, KeyEvent
from vncdriver.server_connection import ServerConnection

from .helpers import make_frame

WAIT = 5.0
REQUEST = FramebufferUpdateRequest.FORMAT.size
KEY = KeyEvent.FORMAT.size


class Recorded:
    """A tagged VNCServer whose clients' bytes are kept chunk by chunk, as they arrived."""

    def __init__(self) -> None:
        self.frame = make_frame(30, 40, "noise", 0)
        self.server = vnc_server.VNCServer(self.frame)
        self.chunks: list[tuple[float, bytes]] = []
        self.arrived = asyncio.Event()
        self.n = 0

    def received(self, data: bytes) -> None:
        self.chunks.append((time.monotonic(), bytes(data)))
        self.arrived.set()

    def next_frame(self) -> int:
        """Draw a new frame, tagged 1/60 s of server time after the last."""
        self.n += 1
        self.frame[0, 0, 0] ^= 0xFF
        self.server.frame_ready(tag=FrameTag(self.n, 1, 1000.0 + self.n / 60))
        return self.n

    async def until(self, wanted: Callable[[bytes], bool], after: int = 0) -> tuple[float, bytes]:
        """The first chunk from index ``after`` on that is ``wanted`` (waiting for it)."""
        async with asyncio.timeout(WAIT):
            while True:
                for at, data in self.chunks[after:]:
                    if wanted(data):
                        return at, data
                self.arrived.clear()
                await self.arrived.wait()


def _key(name: str, down: bool) -> Callable[[bytes], bool]:
    """A chunk holding this key event (the server may read earlier bytes with it)."""
    message = KeyEvent(down, keysym(name)).serialize()
    return lambda data: message in data


def _request_alone(data: bytes) -> bool:
    return len(data) == REQUEST and data[0] == FramebufferUpdateRequest.TYPE


@pytest.fixture
async def recorded(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Recorded]:
    rec = Recorded()
    original = ServerConnection.data_received

    def spy(self: ServerConnection, data: bytes) -> None:
        if self.proto is not None:  # past the handshake
            rec.received(data)
        original(self, data)

    monkeypatch.setattr(ServerConnection, "data_received", spy)
    await rec.server.start("127.0.0.1", 0)
    yield rec
    await rec.server.close()


async def _connect(rec: Recorded, hold: float | None) -> VNCClient:
    client = VNCClient(f"127.0.0.1::{rec.server.port}", encoding="raw", frame_tags=True,
                       request_hold=hold)
    await client.start()
    await client.wait_update(0, timeout=WAIT)  # the first, whole frame
    return client


async def _frame(rec: Recorded, client: VNCClient) -> None:
    """Draw a frame and wait until the client has it."""
    await client.wait_frame(rec.next_frame(), timeout=WAIT)


async def test_a_held_request_goes_out_with_the_input_that_answers_the_update(
    recorded: Recorded,
) -> None:
    client = await _connect(recorded, hold=MAX_REQUEST_HOLD)
    try:
        await _frame(recorded, client)  # two tags: the client knows the pace
        client.key_event("Left", True)  # input after an update: a real-time agent
        await recorded.until(_key("Left", True))
        await _frame(recorded, client)
        assert client._requests.held  # the request waits for the agent's answer
        client.key_event("Left", False)
        _, together = await recorded.until(_key("Left", False))
        # One packet, one wake-up of the server: the key, then the request.
        assert together == KeyEvent(False, keysym("Left")).serialize() + together[KEY:]
        assert len(together) == KEY + REQUEST and together[KEY] == FramebufferUpdateRequest.TYPE
        await _frame(recorded, client)  # that was the request: the next frame comes
    finally:
        await client.close()


async def test_without_input_the_hold_ends_before_the_next_frame_is_due(
    recorded: Recorded,
) -> None:
    client = await _connect(recorded, hold=MAX_REQUEST_HOLD)
    try:
        await _frame(recorded, client)
        client.key_event("Right", True)
        await recorded.until(_key("Right", True))
        mark, began = len(recorded.chunks), time.monotonic()
        await _frame(recorded, client)
        assert client._requests.held  # input followed the last update: held ...
        at, _ = await recorded.until(_request_alone, mark)  # ... but none comes now
        # The pace (1/60 s) cut the 0.1 s hold to end before the next frame was due.
        assert at - began < MAX_REQUEST_HOLD
        await _frame(recorded, client)
    finally:
        await client.close()


async def test_no_hold_without_request_hold_or_without_input(recorded: Recorded) -> None:
    plain = await _connect(recorded, hold=None)
    try:
        for _ in range(3):
            plain.key_event("Left", True)
            await _frame(recorded, plain)
            assert not plain._requests.held  # asked at once, as every client did before
    finally:
        await plain.close()
    idle = await _connect(recorded, hold=MAX_REQUEST_HOLD)
    try:
        for _ in range(3):
            await _frame(recorded, idle)
            assert not idle._requests.held  # no input since the last update: nothing to wait for
    finally:
        await idle.close()


@pytest.mark.parametrize("hold", [0.0, -1.0, MAX_REQUEST_HOLD * 2, float("nan")])
def test_request_hold_is_checked(hold: float) -> None:
    with pytest.raises(ValueError, match="request_hold must be None or in"):
        VNCClient("127.0.0.1::5900", request_hold=hold)
