"""Fuzz the RFB server: random and mutated client messages after a real handshake.

Each round opens a connection, shakes hands (security None), sends a burst of client
messages (well-formed ones with random fields, and garbage), and reads whatever the
server answers until it closes the connection or goes quiet. Between rounds a healthy
client must still receive a new frame: a server that stops serving it is a hang, one that
stops accepting connections a crash.
"""

from __future__ import annotations

import asyncio
import random
import struct
from dataclasses import dataclass
from typing import Final

from vncdriver.client import VNCClient
from vncdriver.handshake import ClientHandshake

#: Messages in one connection's burst.
BURST: Final = 20
#: Seconds to read the server's answers to a burst, and for the healthy client's frame.
READ_SECONDS: Final = 0.05
HEALTH_TIMEOUT: Final = 5.0


@dataclass
class Counts:
    messages: int = 0
    connections: int = 0
    closed_by_server: int = 0
    hangs: int = 0
    crashes: int = 0


def client_message(rng: random.Random) -> bytes:
    """One client message, well-formed with random fields or broken."""
    kind = rng.randrange(8)
    if kind == 0:  # SetPixelFormat
        return b"\x00" + bytes(3) + bytes(rng.randrange(256) for _ in range(16))
    if kind == 1:  # SetEncodings
        n = rng.choice([0, 1, 5, 300, 65535])
        body = b"".join(struct.pack("!i", rng.randint(-2**31, 2**31 - 1)) for _ in range(min(n, 64)))
        return struct.pack("!BxH", 2, n) + body
    if kind == 2:  # FramebufferUpdateRequest
        return struct.pack("!BBHHHH", 3, rng.randrange(2), *(rng.randrange(65536) for _ in range(4)))
    if kind == 3:  # KeyEvent
        return struct.pack("!BBxxI", 4, rng.randrange(2), rng.randrange(2**32))
    if kind == 4:  # PointerEvent
        return struct.pack("!BBHH", 5, rng.randrange(256), rng.randrange(65536), rng.randrange(65536))
    if kind == 5:  # ClientCutText, sometimes claiming more than it sends
        text = bytes(rng.randrange(256) for _ in range(rng.randrange(32)))
        claimed = rng.choice([len(text), 2**31 - 1, 2**32 - 1])
        return struct.pack("!BxxxI", 6, claimed) + text
    if kind == 6:  # an unknown message type
        return bytes([rng.randrange(7, 256)]) + bytes(rng.randrange(256) for _ in range(8))
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))


async def _round(port: int, rng: random.Random, counts: Counts) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    counts.connections += 1
    try:
        handshake = ClientHandshake()
        while not handshake.complete:
            writer.write(handshake.data_to_send())
            data = await asyncio.wait_for(reader.read(4096), HEALTH_TIMEOUT)
            if not data:
                return
            handshake.receive_data(data)
        writer.write(handshake.data_to_send())
        for _ in range(BURST):
            writer.write(client_message(rng))
            counts.messages += 1
        try:
            await writer.drain()
            while await asyncio.wait_for(reader.read(65536), READ_SECONDS):
                pass
            counts.closed_by_server += 1  # EOF: the server closed it (bad input)
        except TimeoutError:
            pass  # quiet: still open
        except ConnectionError:
            counts.closed_by_server += 1
    finally:
        writer.close()


async def run(port: int, count: int, seed: int = 0) -> Counts:
    """Send about ``count`` client messages to the VNC server at ``port``; the counts."""
    rng = random.Random(seed)
    counts = Counts()
    async with VNCClient(f"127.0.0.1::{port}", encoding="raw") as healthy:
        while counts.messages < count:
            try:
                await _round(port, rng, counts)
            except OSError:
                counts.crashes += 1
                break
            try:
                await healthy.wait_update(healthy.updates, timeout=HEALTH_TIMEOUT)
            except TimeoutError:
                counts.hangs += 1
    return counts
