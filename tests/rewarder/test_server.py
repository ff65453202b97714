"""The rewarder server over real sockets on 127.0.0.1, spoken to like Universe's client."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest
import websockets

from rewarder import protocol
from rewarder.auth import basic_auth_password
from rewarder.protocol import CLOSE_BUSY, CLOSE_REPLACED, CLOSE_UNAUTHORIZED
from rewarder.server import MAX_FRAME_BYTES, RewarderServer
from rewarder.snapshot_messages import MAX_RESTORE_MESSAGE_BYTES
from tests.conftest import StartRemote
from tests.wire import WireClient, basic_auth


async def test_describe_on_connect(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")
    client = await WireClient.open(remote.rewarder.port)
    first = await client.recv()
    assert first["method"] == "v0.env.describe"
    assert first["headers"]["message_id"] == 0
    assert isinstance(first["headers"]["sent_at"], float)
    assert first["headers"]["episode_id"] == str(remote.episode_id)
    body = first["body"]
    assert (body["env_id"], body["env_state"], body["fps"]) == ("builtin.Catch-v0", "running", 60)
    assert (body["width"], body["height"], body["keys"]) == (160, 210, ["Left", "Right"])
    await client.close()


async def test_ping_reply_points_at_request(start_remote: StartRemote) -> None:
    remote = await start_remote()
    client = await WireClient.open(remote.rewarder.port)
    await client.send("v0.control.ping")
    reply = await client.ping()  # the second ping, id 1
    assert reply["headers"]["parent_message_id"] == 1
    assert reply["headers"]["parent_runtime"] >= 0
    await client.close()


async def test_reset_moves_past_the_clients_episode(start_remote: StartRemote) -> None:
    remote = await start_remote()
    client = await WireClient.open(remote.rewarder.port)
    await client.recv_until("v0.env.describe")
    before = remote.episode_id
    reply = await client.reset("41", seed=3)
    assert reply["method"] == "v0.reply.env.reset"
    new_id = int(reply["headers"]["episode_id"])
    assert new_id > max(before, 41)
    assert "parent_runtime" in reply["headers"]
    # describe(resetting) came before the reply, describe(running) after, both with the new id
    order = [(m["method"], m["body"].get("env_state"), m["headers"].get("episode_id")) for m in client.seen]
    assert ("v0.env.describe", "resetting", str(new_id)) in order
    running = await client.recv_until("v0.env.describe", episode_id=str(new_id))
    assert running["body"]["env_state"] == "running"
    again = await client.reset("0")  # Universe always sends "0": the server still moves on
    assert int(again["headers"]["episode_id"]) == new_id + 1
    await client.close()


async def test_reset_to_another_env_and_unknown_env(start_remote: StartRemote) -> None:
    remote = await start_remote()
    client = await WireClient.open(remote.rewarder.port)
    error = await client.reset(env_id="builtin.ClickTraget-v0")
    assert error["method"] == "v0.reply.error"
    assert "builtin.ClickTraget-v0" in error["body"]["message"]
    assert "builtin.ClickTarget-v0" in error["body"]["message"]  # the closest id there is
    reply = await client.reset(env_id="builtin.ClickTarget-v0")
    assert reply["method"] == "v0.reply.env.reset"
    running = await client.recv_until("v0.env.describe", episode_id=reply["headers"]["episode_id"])
    assert running["body"]["env_id"] == "builtin.ClickTarget-v0"
    assert running["body"]["env_state"] == "running"
    await client.close()


BAD_INPUT = [
    ("not json at all", "not JSON"),
    (b"\x00\x01binary", "binary frames"),
    ('{"method": "v0.env.frobnicate", "headers": {"message_id": 9, "sent_at": 1.0}, "body": {}}',
     "unknown method"),
    ('{"method": "v0.agent.action", "headers": {"message_id": 9, "sent_at": 1.0}, '
     '"body": {"action": [["KeyEvent", "NoSuchKey", true]]}}', "unknown key 'NoSuchKey'"),
    ('{"method": "v0.agent.action", "headers": {"message_id": 9, "sent_at": 1.0}, '
     '"body": {"action": [["KeyEvent", "Up", true]]}}', "does not use key 'Up'"),
    ('{"method": "v0.agent.action", "headers": {"message_id": 9, "sent_at": 1.0}, '
     '"body": {"action": [["PointerEvent", 500, 5, 0]]}}', "off the 160x210 screen"),
    ('{"method": "v0.agent.action", "headers": {"message_id": 9, "sent_at": 1.0}, "body": {"pad": "'
     + "x" * 300_000 + '"}}', "over the limit"),
    ('{"method": "v0.env.reset", "headers": {"message_id": 9, "sent_at": "yesterday"}, "body": {}}',
     "sent_at must be"),
]


@pytest.mark.parametrize(("data", "words"), BAD_INPUT)
async def test_bad_input_gets_an_error_and_everyone_goes_on(
    start_remote: StartRemote, data: str | bytes, words: str
) -> None:
    remote = await start_remote()
    agent = await WireClient.open(remote.rewarder.port)
    observer = await WireClient.open(remote.rewarder.port, observer=True)
    await agent.send_raw(data)
    error = await agent.recv_until("v0.reply.error")
    assert words in error["body"]["message"]
    readable = isinstance(data, str) and '"message_id": 9' in data  # (one over the limit too)
    assert error["headers"]["parent_message_id"] == (9 if readable else None)
    # the same connection and the other client still work
    assert (await agent.ping())["method"] == "v0.reply.control.ping"
    assert (await observer.ping())["method"] == "v0.reply.control.ping"
    assert (await agent.reset())["method"] == "v0.reply.env.reset"
    await agent.close()
    await observer.close()


async def test_frames_over_the_hard_limit_close_only_that_connection(start_remote: StartRemote) -> None:
    remote = await start_remote()
    big = await WireClient.open(remote.rewarder.port, observer=True)
    other = await WireClient.open(remote.rewarder.port)
    await big.send_raw("x" * (MAX_FRAME_BYTES + 1))
    with pytest.raises(websockets.ConnectionClosed) as info:
        while True:
            await big.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    assert (await other.ping())["method"] == "v0.reply.control.ping"
    await other.close()


async def test_a_restore_of_a_megabyte_is_taken_and_one_over_its_limit_is_told_why(
    start_remote: StartRemote,
) -> None:
    """A restore has its own limit (MAX_RESTORE_MESSAGE_BYTES), not the 256 KiB of the
    rest: a megabyte one restores; one over its limit is refused, pointing at it."""
    remote = await start_remote()
    agent = await WireClient.open(remote.rewarder.port)
    await agent.reset()
    asked = await agent.send("v0.env.snapshot", {"export": True})
    state = (await agent.recv_until("v0.reply.env.snapshot", parent_message_id=asked))["body"]["state"]
    pad = "x" * (1 << 20)  # (a restore's body keys other than its own are not read)
    restore = await agent.send("v0.env.restore", {"state": state, "pad": pad})
    reply = await agent.recv_until("v0.reply.env.reset", parent_message_id=restore)
    assert reply["body"]["restored"]["from_frame"] >= 0
    too_big = await agent.send("v0.env.restore", {"state": "A" * MAX_RESTORE_MESSAGE_BYTES})
    error = await agent.recv_until("v0.reply.error", parent_message_id=too_big)
    assert "MAX_STATE_CHARS" in error["body"]["message"]
    assert (await agent.ping())["method"] == "v0.reply.control.ping"
    await agent.close()


# Auth, observers, one active client -----------------------------------------------------


async def expect_refusal(port: int, words: str, code: int, **kwargs) -> None:
    client = await WireClient.open(port, **kwargs)
    close = await client.recv()
    assert close["method"] == "v0.connection.close"
    assert words in close["body"]["message"]
    assert "parent_message_id" not in close["headers"]
    with pytest.raises(websockets.ConnectionClosed) as info:
        await client.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == code


async def test_password(start_remote: StartRemote) -> None:
    remote = await start_remote(password="s3cret")
    port = remote.rewarder.port
    await expect_refusal(port, "needs a password", CLOSE_UNAUTHORIZED)
    await expect_refusal(port, "wrong password", CLOSE_UNAUTHORIZED, password="nope")
    await expect_refusal(port, "needs a password", CLOSE_UNAUTHORIZED, observer=True)
    agent = await WireClient.open(port, password="s3cret")
    assert (await agent.recv())["method"] == "v0.env.describe"
    observer = await WireClient.open(port, password="s3cret", observer=True)
    assert (await observer.recv())["method"] == "v0.env.describe"
    await agent.close()
    await observer.close()


def test_basic_auth_password_parsing() -> None:
    assert basic_auth_password(basic_auth("pw")) == "pw"
    assert basic_auth_password("basic " + basic_auth("pw").split()[1]) == "pw"
    assert basic_auth_password("Bearer abc") is None
    assert basic_auth_password("Basic !!!notbase64") is None
    assert basic_auth_password(None) is None


async def test_one_active_client_and_observers(start_remote: StartRemote) -> None:
    remote = await start_remote(fps=600)
    port = remote.rewarder.port
    agent = await WireClient.open(port)
    await agent.recv()
    await expect_refusal(port, "openai-observer: true", CLOSE_BUSY, observer=False)
    observer = await WireClient.open(port, observer=True)
    assert (await observer.recv())["method"] == "v0.env.describe"
    # the observer may only ping
    await observer.send("v0.env.reset", {}, episode_id="0")
    error = await observer.recv_until("v0.reply.error")
    assert "observers may only ping" in error["body"]["message"]
    # both see the same rewards: +1 per catch, -1 per miss
    reward = await observer.recv_until("v0.env.reward", timeout=20)
    assert reward["body"]["reward"] in (-1, 1)
    agent_reward = await agent.recv_until("v0.env.reward", timeout=20)
    assert agent_reward["body"] == reward["body"]
    assert agent_reward["headers"]["episode_id"] == reward["headers"]["episode_id"]
    # once the agent leaves, the active slot is free again
    await agent.close()
    await (await WireClient.open_agent(port)).close()
    await observer.close()


async def test_bare_tcp_connects_are_not_clients(start_remote: StartRemote) -> None:
    """Universe's client opens and closes 10 bare TCP connections to time the network."""
    remote = await start_remote()
    for _ in range(10):
        reader, writer = await asyncio.open_connection("127.0.0.1", remote.rewarder.port)
        writer.close()
        await writer.wait_closed()
    agent = await WireClient.open(remote.rewarder.port)
    assert (await agent.recv())["method"] == "v0.env.describe"
    await agent.close()


async def test_shutdown_says_why(start_remote: StartRemote) -> None:
    remote = await start_remote()
    agent = await WireClient.open(remote.rewarder.port)
    observer = await WireClient.open(remote.rewarder.port, observer=True)
    await remote.close("maintenance")
    for client in (agent, observer):
        close = await client.recv_until("v0.connection.close")
        assert close["body"]["message"] == "maintenance"


# A client that stops reading must not stall anyone ----------------------------------------


class _Handler:
    episode_id = 1

    def describe(self) -> dict:
        return {"env_id": "test.Stub-v0", "env_state": "running", "fps": 60}

    async def reset(self, request, reply) -> None:
        reply(self.episode_id)

    def action(self, request) -> None:
        pass

    def client_left(self, observer: bool) -> None:
        pass


async def test_a_client_that_stops_reading_is_dropped_not_waited_for() -> None:
    server = RewarderServer(_Handler(), max_buffered_bytes=256 * 1024)
    await server.start("127.0.0.1", 0)
    # A raw socket with a tiny receive buffer that completes the handshake, then never reads.
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", server.port))
    stalled.sendall(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"openai-observer: true\r\n\r\n"
    )
    healthy = await WireClient.open(server.port, observer=True)
    await healthy.recv()
    async with asyncio.timeout(10):
        while len(server.clients) < 2:
            await asyncio.sleep(0.01)
    text = "x" * 65536
    received = 0
    for i in range(400):  # ~26 MB: far past the socket buffers and the write-buffer limit
        server.broadcast_text(1, f"{i}:{text}")  # never blocks: it only queues
        while received <= i - 4:  # the healthy client keeps up
            message = await healthy.recv()
            received += message["method"] == "v0.env.text"
        if len(server.clients) == 1:
            break
    assert len(server.clients) == 1, "the stalled client should have been dropped"
    while received < i + 1:
        message = await healthy.recv()
        received += message["method"] == "v0.env.text"
    assert message["body"]["text"].startswith(f"{i}:")
    stalled.close()
    await healthy.close()
    await server.close()


async def test_universe_style_payload_shapes(start_remote: StartRemote) -> None:
    """Rewards carry reward/done/info and a string episode id, as Universe's client reads them."""
    remote = await start_remote(fps=600)
    agent = await WireClient.open(remote.rewarder.port)
    reward = await agent.recv_until("v0.env.reward", timeout=20)
    assert set(reward["body"]) == {"reward", "done", "info"}
    assert isinstance(reward["body"]["info"], dict)
    assert reward["headers"]["episode_id"].isdigit()
    orjson.dumps(reward)
    await agent.close()


async def http_get(
    port: int, path: str, host: str | None = None
) -> tuple[int, dict[str, str], str]:
    """A plain HTTP/1.1 GET, no redirects followed: (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    host = host or f"127.0.0.1:{port}"
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    async with asyncio.timeout(10):
        data = await reader.read()
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    status_line, *lines = head.split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


async def test_universe_viewer_url_redirects_to_the_viewer(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")
    status, _, body = await http_get(remote.rewarder.port, "/viewer/")
    assert status == 404 and "--http-port" in body
    remote.rewarder.viewer_port = 8999  # what Remote.start sets when it serves the viewer
    status, headers, _ = await http_get(remote.rewarder.port, "/viewer/?password=pw")
    assert status == 302
    assert headers["location"] == "http://127.0.0.1:8999/viewer/?password=pw"
    # built from the address we serve on, not from what the request's Host header says
    status, headers, _ = await http_get(remote.rewarder.port, "/viewer/", host="evil.example")
    assert status == 302 and headers["location"] == "http://127.0.0.1:8999/viewer/"
    agent = await WireClient.open(remote.rewarder.port)  # the rewarder itself is unchanged
    assert (await agent.recv())["method"] == "v0.env.describe"
    await agent.close()


async def test_a_remote_serving_the_viewer_redirects_to_it() -> None:
    from envserver.remote import Remote

    remote = Remote("builtin.Catch-v0")
    await remote.start("127.0.0.1", 0, 0, http_port=0)
    try:
        assert remote.viewer is not None
        status, headers, _ = await http_get(remote.rewarder.port, "/viewer/")
        assert status == 302
        assert headers["location"] == f"http://127.0.0.1:{remote.viewer.port}/viewer/"
        status, _, _ = await http_get(remote.viewer.port, "/viewer/")
        assert status in (200, 401)  # the viewer answers there (behind the password, if any)
    finally:
        await remote.close()


async def test_a_new_connection_with_the_same_client_id_takes_over(
    start_remote: StartRemote,
) -> None:
    """Another agent is refused as busy; the same agent (same client id) replaces its old
    connection at once, which is told why and let go of its keys."""
    remote = await start_remote(mode="lockstep")
    url = f"ws://127.0.0.1:{remote.rewarder.port}"
    same = {protocol.CLIENT_ID_HEADER: "agent-1"}
    async with websockets.connect(url, additional_headers=same) as old:
        assert orjson.loads(await old.recv())["method"] == "v0.env.describe"
        await old.send(orjson.dumps({
            "method": "v0.agent.action", "headers": {"message_id": 1, "sent_at": 0},
            "body": {"action": [["KeyEvent", "Left", True]]},
        }).decode())
        async with asyncio.timeout(10):
            while remote.held_keys != {"Left"}:
                await asyncio.sleep(0.01)
        other = {protocol.CLIENT_ID_HEADER: "agent-2"}
        async with websockets.connect(url, additional_headers=other) as refused:
            assert orjson.loads(await refused.recv())["method"] == "v0.connection.close"
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await refused.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_BUSY
        async with websockets.connect(url, additional_headers=same) as new:
            assert orjson.loads(await new.recv())["method"] == "v0.env.describe"
            message = orjson.loads(await old.recv())
            assert message["method"] == "v0.connection.close"
            assert "same client id" in message["body"]["message"]
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await old.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_REPLACED
            assert remote.held_keys == set()  # the old connection's keys were let go
            await new.send(orjson.dumps({
                "method": "v0.env.reset", "headers": {"message_id": 1, "sent_at": 0,
                                                      "episode_id": "0"}, "body": {},
            }).decode())
            async with asyncio.timeout(10):
                while orjson.loads(await new.recv())["method"] != "v0.reply.env.reset":
                    pass
            assert remote.rewarder.active is not None
