"""A Universe-like rewarder client speaking raw JSON over websockets, for server tests.

It is deliberately not our ``rewarder.client``: it sends what Universe's client sent
(lower-case ``authorization``, explicit ``openai-observer``) and lets tests look at
every message as it arrived.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from rewarder.protocol import CLOSE_BUSY

TIMEOUT = 10.0


def basic_auth(password: str) -> str:
    return "Basic " + base64.b64encode(f"{password}:".encode()).decode()


class WireClient:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.next_id = 0
        self.seen: list[dict[str, Any]] = []

    @classmethod
    async def open(
        cls, port: int, *, password: str | None = None, observer: bool = False
    ) -> WireClient:
        headers = {"openai-observer": "true" if observer else "false"}
        if password is not None:
            headers["authorization"] = basic_auth(password)
        ws = await connect(
            f"ws://127.0.0.1:{port}", additional_headers=headers, compression=None,
            open_timeout=TIMEOUT,
        )
        return cls(ws)

    @classmethod
    async def open_agent(cls, port: int, timeout: float = TIMEOUT) -> WireClient:
        """The remote's active client, once the one before has gone: a remote frees its
        slot only after it has seen the last agent's socket close, so a connect right after
        another agent's ``close()`` may be refused busy (4009) for a moment. The remote's
        ``v0.env.describe`` is in ``seen``."""
        async with asyncio.timeout(timeout):
            while True:
                client = await cls.open(port)
                try:
                    first = await client.recv(timeout)
                except ConnectionClosed as exc:
                    if exc.rcvd is None or exc.rcvd.code != CLOSE_BUSY:
                        raise
                    continue
                if first["method"] == "v0.env.describe":
                    return client
                await client.ws.wait_closed()  # the refusal's text, then its close code
                if client.ws.close_code != CLOSE_BUSY:
                    raise AssertionError(f"refused, not busy: {first}")

    async def send(self, method: str, body: dict[str, Any] | None = None, **headers: Any) -> int:
        message_id = self.next_id
        self.next_id += 1
        headers.update(message_id=message_id, sent_at=time.time())
        await self.ws.send(orjson.dumps({"method": method, "headers": headers, "body": body or {}}).decode())
        return message_id

    async def send_raw(self, data: str | bytes) -> None:
        await self.ws.send(data)

    async def recv(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            message = orjson.loads(await self.ws.recv())
        self.seen.append(message)
        return message

    async def recv_until(self, method: str, timeout: float = TIMEOUT, **headers: Any) -> dict[str, Any]:
        """The next message of ``method`` whose headers include ``headers``; others are kept in ``seen``."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self.recv(timeout)
                if message["method"] == method and all(
                    message["headers"].get(k) == v for k, v in headers.items()
                ):
                    return message

    async def episode_text(self, episode_id: str, timeout: float = TIMEOUT) -> str:
        """The episode's ``v0.env.text``: seen already (a task's instruction comes before
        the reset's reply), or the next one."""
        for message in self.seen:
            if message["method"] == "v0.env.text" and message["headers"].get("episode_id") == episode_id:
                return str(message["body"]["text"])
        found = await self.recv_until("v0.env.text", timeout, episode_id=episode_id)
        return str(found["body"]["text"])

    async def ping(self) -> dict[str, Any]:
        message_id = await self.send("v0.control.ping")
        return await self.recv_until("v0.reply.control.ping", parent_message_id=message_id)

    async def reset(self, episode_id: str = "0", **body: Any) -> dict[str, Any]:
        """Send a reset; return the reply (``v0.reply.env.reset`` or ``v0.reply.error``)."""
        message_id = await self.send("v0.env.reset", body, episode_id=episode_id)
        async with asyncio.timeout(TIMEOUT):
            while True:
                message = await self.recv()
                if message["method"] in ("v0.reply.env.reset", "v0.reply.error") and message[
                    "headers"
                ].get("parent_message_id") == message_id:
                    return message

    async def close(self) -> None:
        await self.ws.close()
