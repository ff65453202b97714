"""The rewarder client against our real server over sockets on 127.0.0.1.

Synchronisation: the server sends each client's messages in order, so ``await
client.ping()`` returns only after everything broadcast before it has been handled.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from rewarder import dial as dial_module, protocol
from rewarder.auth import basic_auth_password
from rewarder.client import RewarderClient, basic_auth, connect, parse_address
from rewarder.client_channel import intersect_skew
from rewarder.errors import BadRequest, ConnectionClosed, ConnectTimeout, RemoteError
from rewarder.reward_buffer import ARTIFICIAL_DONE, DISCONNECTED
from rewarder.server import RewarderServer

TIMEOUT = 5.0


class FakeEnv:
    """The environment side of a real RewarderServer, driven by the test."""

    def __init__(self, episode_id: int = 1) -> None:
        self.episode_id = episode_id
        self.env_state = protocol.RUNNING
        self.server: RewarderServer | None = None
        self.resets: list[protocol.ResetRequest] = []
        self.actions: list[protocol.ActionRequest] = []
        self.reset_started = asyncio.Event()
        self.hold_reset: asyncio.Event | None = None

    def describe(self) -> dict[str, Any]:
        return {"env_id": "test.Fake-v0", "env_state": self.env_state, "fps": 60}

    async def reset(self, request: protocol.ResetRequest, reply: Callable[[int], None]) -> None:
        assert self.server is not None
        self.resets.append(request)
        self.reset_started.set()
        if request.env_id == "test.Missing-v0":
            raise BadRequest("no environment test.Missing-v0 here", request.message_id)
        if self.hold_reset is not None:
            await self.hold_reset.wait()
        self.episode_id = max(self.episode_id, request.episode_id or 0) + 1
        self.env_state = protocol.RESETTING
        self.server.broadcast_describe()
        reply(self.episode_id)
        self.env_state = protocol.RUNNING
        self.server.broadcast_describe()

    def action(self, request: protocol.ActionRequest) -> None:
        if any(event[1] == "F13" for event in request.events):
            raise BadRequest("this game does not use F13", request.message_id)
        self.actions.append(request)

    def client_left(self, observer: bool) -> None:
        pass

    def reward(
        self,
        value: float,
        done: bool = False,
        episode: int | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        assert self.server is not None
        episode = self.episode_id if episode is None else episode
        self.server.broadcast_reward(episode, value, done, info or {})


ServerFactory = Callable[..., Awaitable[tuple[RewarderServer, FakeEnv]]]


@pytest.fixture
async def make_server() -> AsyncIterator[ServerFactory]:
    servers: list[RewarderServer] = []

    async def make(
        *, password: str | None = None, port: int = 0, episode_id: int = 1
    ) -> tuple[RewarderServer, FakeEnv]:
        env = FakeEnv(episode_id)
        server = RewarderServer(env, password=password)
        env.server = server
        await server.start("127.0.0.1", port)
        servers.append(server)
        return server, env

    yield make
    for server in servers:
        await server.close("test over")


@pytest.fixture
async def clients() -> AsyncIterator[list[RewarderClient]]:
    made: list[RewarderClient] = []
    yield made
    for c in made:
        await c.close()


async def open_client(
    clients: list[RewarderClient], server: RewarderServer, **kwargs: Any
) -> RewarderClient:
    kwargs.setdefault("start_timeout", TIMEOUT)
    c = await connect(f"127.0.0.1:{server.port}", **kwargs)
    clients.append(c)
    return c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Pure helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("127.0.0.1:15901", "ws://127.0.0.1:15901/"),
        ("ws://example.com:80", "ws://example.com:80/"),
        ("ws://example.com:80/", "ws://example.com:80/"),
        ("wss://example.com:443", "wss://example.com:443/"),
        ("localhost", "ws://localhost:15900/"),
        ("[::1]:15900", "ws://[::1]:15900/"),
    ],
)
def test_parse_address(address: str, url: str) -> None:
    assert parse_address(address) == url


@pytest.mark.parametrize("address", ["vnc://host:5900", "host:port", "host:0", "host:1/path", ""])
def test_parse_address_refuses_what_it_cannot_dial(address: str) -> None:
    with pytest.raises(ValueError, match="rewarder address"):
        parse_address(address)


def test_basic_auth_puts_the_password_in_the_username_field() -> None:
    assert basic_auth("openai") == "Basic b3BlbmFpOg=="
    assert basic_auth_password(basic_auth("s3cret:x")) == "s3cret"


def test_skew_bounds_intersect_and_survive_a_clock_jump() -> None:
    intersect = intersect_skew
    assert intersect(None, (-1.0, 1.0)) == (-1.0, 1.0)
    assert intersect((-1.0, 1.0), (-0.5, 2.0)) == (-0.5, 1.0)
    assert intersect((-1.0, 1.0), (5.0, 6.0)) == (5.0, 6.0)


# Connecting ----------------------------------------------------------------------------------


async def test_connect_describes_pings_and_calibrates(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, _ = await make_server(episode_id=4)
    c = await open_client(clients, server)
    assert c.connected
    assert c.describe is not None
    assert (c.describe.env_id, c.describe.env_state, c.describe.episode_id) == (
        "test.Fake-v0",
        "running",
        4,
    )
    assert c.rtt is not None and c.rtt > 0
    rtt = await c.ping()
    assert 0 < rtt < TIMEOUT
    assert c.clock_skew is not None
    lo, hi = c.clock_skew
    # Same machine, same clock: the skew is 0, inside the bounds (1 ms of float slack).
    assert lo <= hi
    assert lo <= 1e-3 and hi >= -1e-3
    assert hi - lo < 1.0
    assert c.pop().masked  # no reset yet: nothing to report


async def test_password_is_sent_as_universe_basic_auth(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, _ = await make_server(password="s3cret")
    c = await open_client(clients, server, password="s3cret")
    assert c.connected


async def test_wrong_password_is_refused_with_the_servers_reason_without_retrying(
    make_server: ServerFactory,
) -> None:
    server, _ = await make_server(password="s3cret")
    started = time.monotonic()
    with pytest.raises(ConnectionClosed, match="wrong password"):
        await connect(f"127.0.0.1:{server.port}", password="guess", start_timeout=TIMEOUT)
    with pytest.raises(ConnectionClosed, match="needs a password"):
        await connect(f"127.0.0.1:{server.port}", start_timeout=TIMEOUT)
    assert time.monotonic() - started < TIMEOUT / 2  # refused at once, not retried


async def test_second_active_client_is_refused_with_the_observer_hint(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, env = await make_server()
    agent = await open_client(clients, server)
    started = time.monotonic()
    with pytest.raises(ConnectionClosed, match="busy: .*openai-observer: true.*start_timeout=0.5"):
        await connect(f"127.0.0.1:{server.port}", start_timeout=0.5)
    assert time.monotonic() - started >= 0.5  # busy is retried until the start timeout
    watcher = await open_client(clients, server, observer=True)
    env.reward(2.0)
    await agent.ping()
    await watcher.ping()
    seen = watcher.pop()  # an observer follows the server's episode without a reset
    assert (seen.episode_id, seen.reward, seen.count) == (env.episode_id, 2.0, 1)
    assert agent.pop().masked  # the agent has not reset yet
    with pytest.raises(RemoteError, match="observers may only ping"):
        await watcher.reset()


async def test_a_busy_remote_is_retried_until_its_agent_leaves(
    make_server: ServerFactory, clients: list[RewarderClient], caplog: pytest.LogCaptureFixture
) -> None:
    """An agent that died or hung frees the slot within seconds: the next one waits for it."""
    caplog.set_level("INFO", logger=dial_module.__name__)
    server, _ = await make_server()
    agent = await open_client(clients, server)
    waiting = asyncio.create_task(connect(f"127.0.0.1:{server.port}", start_timeout=TIMEOUT))
    async with asyncio.timeout(TIMEOUT):  # refused once, and said it retries
        while not any("is busy" in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.01)
    assert not waiting.done()
    await agent.close()
    async with asyncio.timeout(TIMEOUT):
        newcomer = await waiting
    clients.append(newcomer)
    await newcomer.ping()
    assert server.active is not None


async def test_http_401_is_a_final_refusal() -> None:
    """Servers that refuse in the handshake (not Universe's way) are not retried either."""

    def refuse(connection: ServerConnection, request: Request) -> Response:
        return connection.respond(401, "password needed\n")

    async def never(ws: ServerConnection) -> None:
        raise AssertionError("the handshake should have been refused")

    async with serve(never, "127.0.0.1", 0, process_request=refuse) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(ConnectionClosed, match="HTTP 401.*password needed"):
            await connect(f"127.0.0.1:{port}", start_timeout=TIMEOUT)


async def test_close_code_1008_before_any_message_is_a_final_refusal() -> None:
    async def refuse(ws: ServerConnection) -> None:
        await ws.close(1008, "no agents today")

    async with serve(refuse, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(ConnectionClosed, match="no agents today"):
            await connect(f"127.0.0.1:{port}", start_timeout=TIMEOUT)


async def test_connect_to_a_closed_port_times_out_naming_the_address() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(ConnectTimeout) as caught:
        await connect(f"127.0.0.1:{port}", start_timeout=0.5)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 0.5 + 1.0
    message = str(caught.value)
    assert f"ws://127.0.0.1:{port}/" in message
    assert "running" in message and str(port) in message
    assert isinstance(caught.value, TimeoutError)


async def test_connect_waits_for_a_remote_that_comes_up_late(
    make_server: ServerFactory, clients: list[RewarderClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = asyncio.Event()
    attempt = dial_module._attempt

    async def watched(*args: Any) -> Any:
        try:
            return await attempt(*args)
        except OSError:
            failed.set()
            raise

    monkeypatch.setattr(dial_module, "_attempt", watched)
    port = free_port()
    c = RewarderClient(f"127.0.0.1:{port}", start_timeout=TIMEOUT)
    clients.append(c)
    pending = asyncio.create_task(c.start())
    await asyncio.wait_for(failed.wait(), TIMEOUT)  # nobody listens yet
    await make_server(port=port)
    await asyncio.wait_for(pending, TIMEOUT)
    assert c.connected and c.describe is not None


async def test_async_with_and_idempotent_close(make_server: ServerFactory) -> None:
    server, _ = await make_server()
    async with RewarderClient(f"ws://127.0.0.1:{server.port}") as c:
        assert c.connected
    assert c.closed and not c.connected
    await c.close()
    with pytest.raises(ConnectionClosed, match="closed"):
        await c.ping()
    with pytest.raises(ConnectionClosed, match="closed"):
        await c.start()
    # The slot is free again for the next agent.
    async with RewarderClient(f"127.0.0.1:{server.port}") as again:
        assert again.connected


async def test_requests_before_start_say_what_to_do() -> None:
    c = RewarderClient("127.0.0.1:1")
    with pytest.raises(ConnectionClosed, match="start"):
        await c.reset()
    await c.close()


async def test_clock_is_recalibrated_in_the_background(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    calibrated = asyncio.Event()
    rounds = 0

    class Watched(RewarderClient):
        async def _calibrate(self) -> None:
            nonlocal rounds
            await super()._calibrate()
            rounds += 1
            if rounds == 3:
                calibrated.set()

    server, _ = await make_server()
    c = Watched(f"127.0.0.1:{server.port}", calibration_interval=0.01, calibration_pings=2)
    clients.append(c)
    await c.start()
    await asyncio.wait_for(calibrated.wait(), TIMEOUT)
    assert c.clock_skew is not None and c.rtt is not None


# Episodes and rewards ------------------------------------------------------------------------


async def test_reset_gives_increasing_ids_and_rewards_go_to_their_episode(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, env = await make_server(episode_id=7)
    c = await open_client(clients, server)
    first = await c.reset(env_id="test.Fake-v0", seed=3, fps=30)
    assert first > 7
    assert env.resets[-1].episode_id == 7  # the newest id the client had seen
    assert (env.resets[-1].env_id, env.resets[-1].seed, env.resets[-1].fps) == (
        "test.Fake-v0",
        3,
        30,
    )
    assert c.episode_id == first
    await c.wait_for_state("running", episode_id=first, timeout=TIMEOUT)

    env.reward(1.0, episode=first - 1)  # a stale reward of the episode before
    env.reward(1.5, info={"stats.frames": 1})
    env.reward(2.5, info={"stats.frames": 2})
    await c.ping()
    result = c.pop()
    assert (result.episode_id, result.reward, result.count, result.done) == (first, 4.0, 2, False)
    assert result.info == {"stats.frames": 3}
    assert result.env_state == "running"
    assert c.stats.stale_dropped == 1
    assert c.stats.rewards == 3

    second = await c.reset()
    assert second > first
    assert env.resets[-1].episode_id == first
    env.reward(9.0, episode=first)
    env.reward(1.0)
    await c.ping()
    result = c.pop()
    assert (result.episode_id, result.reward) == (second, 1.0)


async def test_server_done_ends_the_episode_and_the_next_one_follows(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, env = await make_server()
    c = await open_client(clients, server)
    episode = await c.reset()
    env.reward(1.0, done=True)
    env.episode_id += 1  # the server's auto-reset
    server.broadcast_describe()
    env.reward(3.0)
    await c.ping()
    ended = c.pop()
    assert (ended.episode_id, ended.reward, ended.done) == (episode, 1.0, True)
    assert ARTIFICIAL_DONE not in ended.info
    nxt = c.pop()
    assert (nxt.episode_id, nxt.reward, nxt.done) == (episode + 1, 3.0, False)


async def test_text_and_observation_are_filed(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, _ = await make_server()
    c = await open_client(clients, server)
    episode = await c.reset()
    server.broadcast_text(episode, "catch the ball")
    server.broadcast_observation(episode, {"x": 1})
    await c.ping()
    result = c.peek()
    assert result.text == ("catch the ball",)
    assert result.observation == {"x": 1}
    assert c.pop() == result


async def test_reset_refused_by_the_server_raises_its_message(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, _ = await make_server()
    c = await open_client(clients, server)
    with pytest.raises(RemoteError, match="no environment test.Missing-v0") as caught:
        await c.reset(env_id="test.Missing-v0")
    assert caught.value.method == protocol.RESET
    assert c.connected
    assert c.stats.remote_errors == 1


async def test_actions_reach_the_server_and_refusals_are_counted(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, env = await make_server()
    c = await open_client(clients, server)
    await c.send_action([("KeyEvent", "Left", True), ("PointerEvent", 1, 2, 0)])
    await c.send_action([("KeyEvent", "F13", True)])
    await c.ping()
    assert [a.events for a in env.actions] == [
        (("KeyEvent", "Left", True), ("PointerEvent", 1, 2, 0))
    ]
    assert c.stats.remote_errors == 1
    assert c.connected


async def test_numpy_scalars_in_actions_go_out_as_json_numbers_and_booleans(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, env = await make_server()
    c = await open_client(clients, server)
    await c.send_action([("KeyEvent", "Left", np.bool_(True)),
                         ("PointerEvent", np.int64(3), np.int32(4), np.uint8(1))])
    await c.ping()
    assert [a.events for a in env.actions] == [(("KeyEvent", "Left", True), ("PointerEvent", 3, 4, 1))]
    assert c.stats.remote_errors == 0


async def test_an_answered_action_resolves_with_the_observation_naming_it(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, env = await make_server()
    c = await open_client(clients, server)
    episode = await c.reset()
    heard: list[protocol.Observation] = []
    c.on_observation = heard.append
    message_id, answer = await c.send_answered_action("click('a12')", settle=True)
    await c.ping()
    assert env.actions[-1].web == "click('a12')"
    assert env.actions[-1].settle
    server.broadcast_observation(episode, {"action_id": message_id + 1000, "page": {}})  # another's
    server.broadcast_observation(episode, {"action_id": message_id, "last_action_error": None})
    body = await asyncio.wait_for(answer, TIMEOUT)
    assert body == {"action_id": message_id, "last_action_error": None}
    assert [o.observation["action_id"] for o in heard] == [message_id + 1000, message_id]
    _, refused = await c.send_answered_action([("KeyEvent", "F13", True)])
    with pytest.raises(RemoteError, match="F13"):
        await asyncio.wait_for(refused, TIMEOUT)
    c.forget_action(message_id)  # idempotent after the answer


async def test_unknown_server_methods_are_ignored(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, env = await make_server()
    c = await open_client(clients, server)
    episode = await c.reset()
    for sc in server.clients:
        sc.send(sc.proto.send("v1.env.hologram", {"beam": True}, episode_id=str(episode)))
        sc.send(sc.proto.send(protocol.ENV_REWARD, {"reward": "lots"}, episode_id=str(episode)))
    env.reward(1.0)
    await c.ping()
    assert c.connected
    assert c.stats.unknown_messages == 1
    assert c.stats.bad_messages == 1
    assert c.pop().reward == 1.0


async def test_wait_for_state_times_out_with_a_clear_message(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, _ = await make_server()
    c = await open_client(clients, server)
    with pytest.raises(TimeoutError, match="resetting"):
        await c.wait_for_state("resetting", timeout=0.05)


async def test_many_clients_share_one_loop(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    remotes = [await make_server() for _ in range(4)]
    agents = await asyncio.gather(*(open_client(clients, s) for s, _ in remotes))
    episodes = await asyncio.gather(*(a.reset() for a in agents))
    for i, (_, env) in enumerate(remotes):
        env.reward(float(i))
    await asyncio.gather(*(a.ping() for a in agents))
    assert [a.pop().reward for a in agents] == [0.0, 1.0, 2.0, 3.0]
    assert all(e == 2 for e in episodes)


# Drops and reconnects ------------------------------------------------------------------------


async def test_drop_fails_pending_requests_then_reconnects_on_the_same_port(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, env = await make_server()
    port = server.port
    c = await open_client(clients, server)
    episode = await c.reset()
    env.reward(2.0)
    env.hold_reset = asyncio.Event()
    env.reset_started.clear()
    resetting = asyncio.create_task(c.reset())
    await env.reset_started.wait()

    closing = asyncio.create_task(server.close("remote restarting for the test"))
    with pytest.raises(ConnectionClosed, match="remote restarting for the test"):
        await resetting
    env.hold_reset.set()
    await closing
    with pytest.raises(ConnectionClosed, match="not connected|reconnecting"):
        await c.ping()
    # The episode that was running ends: done, marked as a disconnect.
    ended = c.pop()
    assert (ended.episode_id, ended.reward, ended.done) == (episode, 2.0, True)
    assert ended.info[DISCONNECTED] and ended.info[ARTIFICIAL_DONE]

    _, env2 = await make_server(port=port, episode_id=100)
    await c.wait_for_state("running", episode_id=100, timeout=TIMEOUT)
    await c.wait_connected(timeout=TIMEOUT)
    assert c.connected and c.stats.reconnects == 1
    assert c.pop().masked  # an agent resets after a reconnect
    again = await c.reset()
    assert again == 101
    assert env2.resets[-1].episode_id == 100


async def test_reconnect_to_a_restarted_server_keeps_ids_increasing(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, _ = await make_server(episode_id=50)
    port = server.port
    c = await open_client(clients, server)
    before = await c.reset()
    await server.close("restart")
    await make_server(port=port, episode_id=1)  # counts from 1 again
    await c.wait_for_state("running", episode_id=1, timeout=TIMEOUT)
    await c.wait_connected(timeout=TIMEOUT)
    after = await c.reset()
    assert after > before  # we sent the newest id we had seen; the server moved past it


async def test_without_reconnect_a_drop_is_final(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, _ = await make_server()
    c = await open_client(clients, server, reconnect=False)
    await server.close("gone for good")
    with pytest.raises(ConnectionClosed, match="gone for good"):
        await c.wait_connected(timeout=TIMEOUT)
    assert isinstance(c.error, ConnectionClosed)
    with pytest.raises(ConnectionClosed, match="gone for good"):
        await c.reset()


async def test_reconnecting_gives_up_after_start_timeout(
    make_server: ServerFactory, clients: list[RewarderClient]
) -> None:
    server, _ = await make_server()
    c = await open_client(clients, server, start_timeout=0.3)
    await server.close("bye")
    with pytest.raises(ConnectTimeout):
        await c.wait_connected(timeout=TIMEOUT)
    assert isinstance(c.error, ConnectTimeout)


# The real remote -----------------------------------------------------------------------------


async def test_against_the_builtin_catch_remote(clients: list[RewarderClient]) -> None:
    remote_module = pytest.importorskip("envserver.remote")
    remote = remote_module.Remote("builtin.Catch-v0", fps=1000)
    await remote.start("127.0.0.1", 0, 0)
    try:
        c = await open_client(clients, remote.rewarder)
        episode = await c.reset(seed=1)
        # Nobody plays: the episode ends after enough missed balls; the remote resets.
        await c.wait_for_state("running", episode_id=episode + 1, timeout=30)
        ended = c.pop()
        assert ended.episode_id == episode and ended.done
        assert ended.count >= 1 and ended.reward < 0
        assert c.pop().episode_id == episode + 1
        assert c.stats.stale_dropped == 0
    finally:
        await remote.close()
