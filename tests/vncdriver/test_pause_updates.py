"""VNCClient.pause_updates/resume_updates: a paused client asks for nothing (the server
sends it nothing however the frame changes), and resuming brings the newest pixels."""

from __future__ import annotations

import asyncio

import numpy as np

from vncdriver.client import VNCClient
from vncdriver.messages import FrameTag
from vncdriver.server import VNCServer


async def test_a_paused_client_gets_nothing_until_it_resumes() -> None:
    frame = np.zeros((32, 48, 3), np.uint8)
    keys = asyncio.Queue[object]()
    server = VNCServer(frame, on_input=lambda _id, events: keys.put_nowait(events))
    await server.start("127.0.0.1", 0)
    try:
        async with VNCClient(f"127.0.0.1::{server.port}", encoding="raw", frame_tags=True) as client:
            await client.wait_update(timeout=10)
            client.pause_updates()
            (connection,) = server.connections.values()
            frame[:] = 1
            server.frame_ready(tag=FrameTag(1, 1, 0.0))  # answers the request outstanding
            await client.wait_update(after=1, timeout=10)
            assert client.updates == 2
            for value in range(2, 6):
                frame[:] = value
                server.frame_ready(tag=FrameTag(value, 1, 0.0))
            # A key after anything we sent: once it is in, so is any request we made.
            client.key_event("a", True)
            async with asyncio.timeout(10):
                await keys.get()
            # The server sent us nothing more, and holds no request of ours.
            assert connection.updates == 2
            assert connection.proto is not None and not connection.proto.update_wanted
            assert client.updates == 2 and client.frame()[0, 0, 0] == 1
            client.resume_updates()
            async with asyncio.timeout(10):
                while client.tag is None or client.tag.frame < 5:
                    await client.wait_update(client.updates)
            assert client.updates == 3 and (client.frame() == 5).all()
    finally:
        await server.close()
