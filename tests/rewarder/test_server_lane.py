"""The rewarder server's connection shell over real sockets on 127.0.0.1: what is answered
inside the read (no task), order per client while a request waits, the write-buffer
limit, keepalive.

The client here is websockets' sans-I/O ``ClientProtocol`` over an asyncio stream: it
creates no task in the test's loop (so the tasks counted are the server's), can put
several messages in one TCP write, and answers no ping unless the test reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import orjson
import pytest
from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from rewarder import protocol, server_link
from rewarder.errors import BadRequest
from rewarder.server import PLAYER, RewarderServer
from rewarder.server_link import ServerLink

TIMEOUT = 10.0


class RawClient:
    """One WebSocket client: ``send`` queues messages, ``flush`` writes them at once."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 ws: ClientProtocol) -> None:
        self.reader, self.writer, self.ws = reader, writer, ws
        self.next_id = 0
        self.inbox: list[dict[str, Any]] = []
        self.close_code: int | None = None

    @classmethod
    async def open(cls, port: int, **headers: str) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        ws = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/"), max_size=None)
        request = ws.connect()
        for key, value in headers.items():
            request.headers[key] = value
        ws.send_request(request)
        client = cls(reader, writer, ws)
        client.flush()
        async with asyncio.timeout(TIMEOUT):
            while ws.state is State.CONNECTING:
                await client.described()
        assert ws.state is State.OPEN, ws.handshake_exc
        return client

    def send(self, method: str, body: dict[str, Any] | None = None, **headers: Any) -> int:
        message_id = self.next_id
        self.next_id += 1
        headers.update(message_id=message_id, sent_at=time.time())
        self.ws.send_text(orjson.dumps({"method": method, "headers": headers, "body": body or {}}))
        return message_id

    def flush(self) -> None:
        self.writer.write(b"".join(self.ws.data_to_send()))

    async def read_some(self) -> bool:
        """Read once; file the messages; False at the end of the stream."""
        data = await self.reader.read(65536)
        if not data:
            self.ws.receive_eof()
            return False
        self.ws.receive_data(data)
        for event in self.ws.events_received():
            if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                self.inbox.append(orjson.loads(event.data))
            elif isinstance(event, Frame) and event.opcode is Opcode.CLOSE:
                self.close_code = Close.parse(event.data).code
        self.flush()  # pongs
        return True

    async def reply(self, parent: int) -> dict[str, Any]:
        """The reply to message ``parent`` (reading until it came)."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                for message in self.inbox:
                    if message["headers"].get("parent_message_id") == parent:
                        return message
                assert await self.read_some(), "the server closed the connection"

    async def described(self) -> None:
        """Wait for the server's first message (it may have come with the handshake)."""
        async with asyncio.timeout(TIMEOUT):
            while not self.inbox:
                assert await self.read_some(), "the server closed the connection"
        assert self.inbox[0]["method"] == protocol.ENV_DESCRIBE

    def replies(self) -> list[int]:
        """Parents of the replies read so far, in arrival order."""
        return [m["headers"]["parent_message_id"] for m in self.inbox
                if m["method"].startswith("v0.reply.")]

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


class Handler:
    """An environment side that records its calls; ``fast``: it has ``step_now``."""

    episode_id = 1

    def __init__(self, fast: bool) -> None:
        self.calls: list[tuple[str, Any, int]] = []
        self.frame = 0
        self.reset_gate: asyncio.Event | None = None
        self.left: list[bool] = []
        if fast:
            self.step_now = self._step_now

    def describe(self) -> dict[str, Any]:
        return {"env_id": "test.Stub-v0", "env_state": "running", "fps": 60}

    async def reset(self, request: protocol.ResetRequest, reply: Callable[..., None]) -> None:
        self.calls.append(("reset", request.message_id, PLAYER.get()))
        if self.reset_gate is not None:
            await self.reset_gate.wait()
        self.episode_id += 1
        reply(self.episode_id)

    def action(self, request: protocol.ActionRequest) -> None:
        self.calls.append(("action", request.message_id, PLAYER.get()))

    def _body(self, request: protocol.StepRequest) -> dict[str, Any]:
        self.frame += request.frames
        return {"reward": 1.0, "done": False, "info": {}, "frame": self.frame}

    def _step_now(self, request: protocol.StepRequest) -> tuple[int, dict[str, Any]] | None:
        if request.frames > 1:
            return None  # "a long step": the async way
        if request.events:
            raise BadRequest("this stub steps without events", request.message_id)
        self.calls.append(("step_now", request.message_id, PLAYER.get()))
        return self.episode_id, self._body(request)

    async def step(self, request: protocol.StepRequest) -> tuple[int, dict[str, Any]]:
        self.calls.append(("step", request.message_id, PLAYER.get()))
        return self.episode_id, self._body(request)

    async def properties(self, request: protocol.PropertiesRequest) -> dict[str, Any]:
        return {"keys": []}

    def client_left(self, observer: bool) -> None:
        self.left.append(observer)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Coroutine[Any, Any, RewarderServer]]]:
    servers: list[RewarderServer] = []

    async def start(handler: Handler, **kwargs: Any) -> RewarderServer:
        server = RewarderServer(handler, **kwargs)  # type: ignore[arg-type]
        await server.start("127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


class TaskCount:
    """Counts the tasks the running loop creates while installed."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.loop = asyncio.get_running_loop()

    def __enter__(self) -> TaskCount:
        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            self.names.append(getattr(coro, "__qualname__", repr(coro)))
            return asyncio.Task(coro, loop=loop, **kwargs)

        self.loop.set_task_factory(factory)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.set_task_factory(None)


STEPS = 50


@pytest.mark.parametrize("fast", [True, False], ids=["step_now", "async step"])
async def test_a_step_the_handler_can_do_at_once_needs_no_task(serve: Any, fast: bool) -> None:
    handler = Handler(fast)
    server = await serve(handler)
    client = await RawClient.open(server.port)
    await client.described()
    with TaskCount() as tasks:
        for _ in range(STEPS):
            parent = client.send(protocol.STEP, {"action": [], "frames": 1}, episode_id="1")
            client.flush()
            reply = await client.reply(parent)
            assert reply["method"] == protocol.REPLY_STEP
    assert reply["body"]["frame"] == STEPS
    kinds = {kind for kind, _, _ in handler.calls}
    if fast:  # every step inside the server's read: not one task in the loop
        assert (tasks.names, kinds) == ([], {"step_now"})
    else:  # a handler without step_now: one task per step, as before
        assert len(tasks.names) == STEPS and kinds == {"step"}
    await client.close()


async def test_one_write_carries_every_reply_of_one_read(serve: Any) -> None:
    handler = Handler(fast=True)
    server = await serve(handler)
    client = await RawClient.open(server.port)
    await client.described()
    (link,) = server.clients
    assert link.transport is not None
    writes: list[bytes] = []
    write = link.transport.write

    def spy(data: Any) -> None:
        writes.append(bytes(data))
        write(data)

    link.transport.write = spy  # type: ignore[method-assign]
    ids = [client.send(protocol.PING), client.send(protocol.STEP, {"action": [], "frames": 1}),
           client.send(protocol.PING)]
    client.flush()  # three messages in one TCP write: normally one read on the server
    for parent in ids:
        await client.reply(parent)
    assert client.replies() == ids
    if len(writes) == 1:
        assert writes[0].count(b"v0.reply.") == 3
    else:  # the server's read split them: still no more writes than reads of messages
        assert sum(w.count(b"v0.reply.") for w in writes) == 3 and len(writes) <= 3
    await client.close()


async def test_a_clients_messages_wait_for_its_request_under_way(serve: Any) -> None:
    handler = Handler(fast=True)
    handler.reset_gate = asyncio.Event()
    server = await serve(handler, players=lambda: 2)
    client = await RawClient.open(server.port, **{protocol.PLAYER_HEADER: "1"})
    await client.described()
    (link,) = server.clients
    reset = client.send(protocol.RESET, {}, episode_id="1")
    ping = client.send(protocol.PING)
    step = client.send(protocol.STEP, {"action": [], "frames": 1}, episode_id="1")
    action = client.send(protocol.ACTION, {"action": [["KeyEvent", "Left", True]]})
    bad = client.send(protocol.STEP, {"action": [], "frames": 1}, episode_id="nope")
    client.flush()
    async with asyncio.timeout(TIMEOUT):
        while len(link.pending) < 4:  # all four behind the reset, none answered
            await asyncio.sleep(0.01)
    assert [kind for kind, _, _ in handler.calls] == ["reset"]
    assert client.replies() == []
    handler.reset_gate.set()
    await client.reply(bad)
    assert client.replies() == [reset, ping, step, bad]
    assert handler.calls == [("reset", reset, 1), ("step_now", step, 1), ("action", action, 1)]
    assert client.inbox[-1]["method"] == protocol.REPLY_ERROR
    await client.close()


async def test_a_long_step_waits_and_a_refused_step_now_is_an_error(serve: Any) -> None:
    handler = Handler(fast=True)
    server = await serve(handler)
    client = await RawClient.open(server.port)
    await client.described()
    long = client.send(protocol.STEP, {"action": [], "frames": 4}, episode_id="1")
    short = client.send(protocol.STEP, {"action": [], "frames": 1}, episode_id="1")
    client.flush()
    assert (await client.reply(short))["body"]["frame"] == 5  # after the long one's 4
    assert (await client.reply(long))["body"]["frame"] == 4
    assert [kind for kind, _, _ in handler.calls] == ["step", "step_now"]
    refused = client.send(protocol.STEP, {"action": [["KeyEvent", "Left", True]], "frames": 1},
                          episode_id="1")
    client.flush()
    error = await client.reply(refused)
    assert (error["method"], error["body"]["message"]) == (
        protocol.REPLY_ERROR, "this stub steps without events")
    await client.close()


async def test_a_slow_reader_is_closed_while_the_agent_steps_on(serve: Any) -> None:
    handler = Handler(fast=True)
    limit = 256 * 1024
    server = await serve(handler, max_buffered_bytes=limit)
    agent = await RawClient.open(server.port)
    stalled = await RawClient.open(server.port, **{protocol.OBSERVER_HEADER: "true"})
    await agent.described()
    slow = next(link for link in server.clients if link.observer)
    text = "x" * 65536
    for i in range(400):  # 26 MB: far past the socket buffers and the limit
        server.broadcast_text(1, f"{i}:{text}")
        parent = agent.send(protocol.STEP, {"action": [], "frames": 1}, episode_id="1")
        agent.flush()
        await agent.reply(parent)  # the agent reads all it is sent, texts too
        agent.inbox.clear()
        if slow.ended:
            break
    assert slow.ended and slow not in server.clients, "the stalled observer should be dropped"
    assert slow.buffered() <= limit + len(text) + 1024  # dropped at the limit, not later
    assert handler.left == [True]
    for _ in range(3):  # the agent goes on
        parent = agent.send(protocol.STEP, {"action": [], "frames": 1}, episode_id="1")
        agent.flush()
        assert (await agent.reply(parent))["method"] == protocol.REPLY_STEP
    cut = False
    try:  # reading now, it gets what was buffered, then the close frame with the reason
        async with asyncio.timeout(TIMEOUT):
            while await stalled.read_some() and stalled.close_code is None:
                pass
    except ConnectionResetError:  # (a loaded machine: it began reading after CLOSE_TIMEOUT)
        cut = True
    assert cut or stalled.close_code == protocol.CLOSE_TOO_SLOW
    await agent.close()
    await stalled.close()


async def test_a_client_that_answers_no_ping_is_dropped(serve: Any) -> None:
    handler = Handler(fast=True)
    server = await serve(handler, keepalive_interval=0.2, keepalive_timeout=0.3)
    silent = await RawClient.open(server.port)  # the active agent; it never reads again
    lively = await RawClient.open(server.port, **{protocol.OBSERVER_HEADER: "true"})
    seat: ServerLink | None = server.active
    assert seat is not None
    done = asyncio.get_running_loop().create_task(_read_forever(lively))
    async with asyncio.timeout(TIMEOUT):
        while server.active is not None:
            await asyncio.sleep(0.02)
    assert handler.left == [False]
    assert [link.observer for link in server.clients] == [True]  # the lively one stays
    async with asyncio.timeout(TIMEOUT):  # its socket is cut or closed: EOF
        await seat.closed
    done.cancel()
    await silent.close()
    await lively.close()


async def _read_forever(client: RawClient) -> None:
    while await client.read_some():
        pass


async def test_a_connection_without_a_handshake_is_cut_at_the_open_timeout(serve: Any) -> None:
    server = await serve(Handler(fast=True), open_timeout=0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
    async with asyncio.timeout(TIMEOUT):
        with contextlib.suppress(ConnectionResetError):
            assert await reader.read() == b""  # cut: no answer, no client
    async with asyncio.timeout(TIMEOUT):  # its link is released
        while server.links:
            await asyncio.sleep(0.01)
    assert not server.clients
    writer.close()
    healthy = await RawClient.open(server.port)  # the port goes on
    await healthy.described()
    await healthy.close()


@pytest.mark.parametrize("short", [True, False], ids=["short path", "websockets only"])
async def test_every_shape_of_frame_reads_as_its_message(
    serve: Any, short: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole text frame is read on the link's short path; fragments, a frame split over
    two TCP writes, several frames in one write, 16- and 64-bit lengths and a ping between
    fragments go through websockets, and every one of them is answered as the same
    message, with the short path or without it (a websockets it does not fit)."""
    monkeypatch.setattr(server_link, "SHORT_PATH", short)
    handler = Handler(fast=True)
    server = await serve(handler)
    client = await RawClient.open(server.port)
    await client.described()
    ws = client.ws
    # Fragments with a ping between them (control frames may interleave).
    first = client.next_id
    client.next_id += 1
    text = orjson.dumps({"method": protocol.STEP, "headers": {
        "message_id": first, "sent_at": time.time(), "episode_id": "1"},
        "body": {"action": [], "frames": 1}})
    ws.send_text(text[:20], fin=False)
    ws.send_ping(b"hi")
    ws.send_continuation(text[20:50], fin=False)
    ws.send_continuation(text[50:], fin=True)
    client.flush()
    assert (await client.reply(first))["method"] == protocol.REPLY_STEP
    # One frame split over two TCP writes (the server may still read it in one piece).
    second = client.send(protocol.PING)
    wire = b"".join(ws.data_to_send())
    client.writer.write(wire[:5])
    await client.writer.drain()
    client.writer.write(wire[5:])
    assert (await client.reply(second))["method"] == protocol.REPLY_PING
    # Lengths of every size field: 7 bits, 16 bits, 64 bits (a ping with a long header).
    for pad in (0, 300, 70_000):
        parent = client.send(protocol.PING, pad="x" * pad)
        client.flush()
        assert (await client.reply(parent))["method"] == protocol.REPLY_PING
    # Several whole frames in one write, then a step after all of them.
    ids = [client.send(protocol.PING) for _ in range(3)]
    ids.append(client.send(protocol.STEP, {"action": [], "frames": 1}, episode_id="1"))
    client.flush()
    for parent in ids:
        await client.reply(parent)
    assert [kind for kind, _, _ in handler.calls] == ["step_now", "step_now"]
    await client.close()


async def test_a_whole_text_frame_of_bad_utf8_closes_the_connection_1007(serve: Any) -> None:
    server = await serve(Handler(fast=True))
    client = await RawClient.open(server.port)
    await client.described()
    client.ws.send_text(b'{"method": "\xff"}')  # one whole masked text frame, not UTF-8
    client.flush()
    async with asyncio.timeout(TIMEOUT):
        while await client.read_some():
            pass
    assert client.close_code == 1007  # invalid frame payload data, as before the short path
    await client.close()
