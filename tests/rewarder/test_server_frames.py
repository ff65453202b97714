"""The server's fast path (rewarder.server_link) reads a whole masked text frame by itself
only where a frame starts: a stream cut right after a frame's header, whose next read
looks like one whole frame, is read as the rest of that frame (websockets' parser holds
the header). And a remote that closes a client says why, once, at WARNING. The client
here is raw: it writes the bytes and the cuts each test chooses
to a real remote's rewarder port, and reads the replies with websockets' parser."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

import orjson
import pytest
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from tests.conftest import StartRemote

TIMEOUT = 10.0


def masked(opcode: int, payload: bytes, key: bytes = b"\x01\x02\x03\x04") -> bytes:
    """One whole client frame (FIN) of ``payload``, masked with ``key``."""
    size = len(payload)
    if size < 126:
        head = bytes((0x80 | opcode, 0x80 | size))
    else:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + key + body


def ping(message_id: int) -> bytes:
    """A ``v0.control.ping`` request as text."""
    return orjson.dumps({"method": "v0.control.ping", "body": {},
                         "headers": {"message_id": message_id, "sent_at": time.time()}})


class RawClient:
    """A WebSocket client that writes raw bytes and reads text messages."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ws: ClientProtocol,
    ) -> None:
        self.reader, self.writer, self.ws = reader, writer, ws
        self.messages: list[dict[str, Any]] = []
        self.closed: Frame | None = None

    @classmethod
    async def open(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        ws = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}"), max_size=None)
        ws.send_request(ws.connect())
        writer.write(b"".join(ws.data_to_send()))
        client = cls(reader, writer, ws)
        while ws.handshake_exc is None and not any(isinstance(e, Response) for e in client._read_events()):
            ws.receive_data(await asyncio.wait_for(reader.read(65536), TIMEOUT))
        return client

    def _read_events(self) -> list[Any]:
        events = self.ws.events_received()
        for event in events:
            if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                self.messages.append(orjson.loads(event.data))
            elif isinstance(event, Frame) and event.opcode is Opcode.CLOSE:
                self.closed = event
        return events

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def reply_to(self, message_id: int | None, method: str | None = None) -> dict[str, Any]:
        """The reply to request ``message_id`` (``method``: of that method), failing if
        the server closes first."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                for message in self.messages:
                    if message["headers"].get("parent_message_id") == message_id and (
                        method is None or message["method"] == method
                    ):
                        return message
                assert self.closed is None, f"the server closed: {self.closed}"
                data = await self.reader.read(65536)
                assert data, "the server closed the connection"
                self.ws.receive_data(data)
                self._read_events()
                self.writer.write(b"".join(self.ws.data_to_send()))  # pongs


async def test_a_frame_cut_after_its_header_is_not_read_from_its_middle(start_remote: StartRemote) -> None:
    remote = await start_remote()
    client = await RawClient.open(remote.rewarder.port)
    inner = masked(0x1, ping(2))  # what a whole text frame looks like (a ping, id 2)...
    outer = masked(0x2, inner, key=b"\0\0\0\0")  # ...carried, unmasked by a zero key, in a binary frame
    header = outer[:-len(inner)]
    # Read 1: a whole ping (id 1) and the binary frame's header; its reply says the server
    # read it all. Read 2: the binary frame's payload, alone, shaped like a text frame.
    await client.write(masked(0x1, ping(1)) + header)
    assert (await client.reply_to(1))["method"] == "v0.reply.control.ping"
    await client.write(inner)
    refusal = await client.reply_to(None, "v0.reply.error")  # (it answers the binary frame)
    assert "binary frames" in refusal["body"]["message"]
    # Then a ping (id 3) and half of another (id 4) in one read, the other half in the next.
    split = masked(0x1, ping(4))
    await client.write(masked(0x1, ping(3)) + split[:5])
    assert (await client.reply_to(3))["method"] == "v0.reply.control.ping"
    await client.write(split[5:])
    assert (await client.reply_to(4))["method"] == "v0.reply.control.ping"
    # The ping inside the binary frame was never a message.
    methods = [(m["method"], m["headers"].get("parent_message_id")) for m in client.messages]
    assert ("v0.reply.control.ping", 2) not in methods
    client.writer.close()


async def _until_closed(client: RawClient) -> None:
    """Read (answering nothing) until the server closes the connection."""
    async with asyncio.timeout(TIMEOUT):
        while await client.reader.read(65536):
            pass


@pytest.mark.parametrize(("frame", "words"), [
    (b"\xc1\x85\x01\x02\x03\x04hello", "reserved bits must be 0"),  # RSV1 set
    (masked(0x1, b"\xff\xfe"), "not UTF-8"),
    (b"", "no keepalive ping"),  # nothing sent, pings left unanswered
])
async def test_a_remote_that_closes_a_client_says_why_once_at_warning(
    start_remote: StartRemote, caplog: pytest.LogCaptureFixture, frame: bytes, words: str,
) -> None:
    remote = await start_remote()
    client = await RawClient.open(remote.rewarder.port)
    with caplog.at_level(logging.WARNING):
        if frame:
            await client.write(frame)
        await _until_closed(client)
    said = [r for r in caplog.records if r.name.startswith("rewarder") and r.levelno >= logging.WARNING]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert words in said[0].getMessage() and "closing" in said[0].getMessage()
    client.writer.close()
