"""Several agents in one world (builtin.Duel-v0): seats over the rewarder, per-player
input and rewards, the joint lockstep barrier and its timeout, a Universe-style client
as player 0, and per-player VNC passwords."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from rewarder.client import RewarderClient
from rewarder.errors import ConnectionClosed, RemoteError
from rewarder.server import PLAYER
from tests.conftest import StartRemote
from tests.wire import WireClient
from vncdriver.client import VNCClient
from vncdriver.errors import AuthenticationFailed

DUEL = "builtin.Duel-v0"
UP = [("KeyEvent", "Up", True)]
DOWN = [("KeyEvent", "Down", True)]


def rewarder(remote, player: int | None = None, **kwargs) -> RewarderClient:  # type: ignore[no-untyped-def]
    return RewarderClient(f"127.0.0.1:{remote.rewarder.port}", player=player, **kwargs)


def digest(remote) -> str:  # type: ignore[no-untyped-def]
    return hashlib.blake2b(remote.runtime.framebuffer.tobytes(), digest_size=12).hexdigest()


async def test_describe_lists_the_seats_and_who_holds_them(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL)
    async with rewarder(remote, 1, client_id="agent-b") as b:
        assert b.describe is not None and b.describe.body["players"] == 2
        seats = remote.describe()["seats"]
        assert seats == [
            {"player": 0, "holder": None},
            {"player": 1, "holder": "rewarder client 'agent-b'"},
        ]


async def test_a_held_seat_is_refused_naming_the_free_ones(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL)
    async with rewarder(remote, 1):
        with pytest.raises(ConnectionClosed, match=r"player 1 is held by .*openai-player: 0.* \(free: 0\)"):
            await rewarder(remote, 1, start_timeout=0.3).start()
        with pytest.raises(ConnectionClosed, match="names no player of this remote: it has 2"):
            await rewarder(remote, 2, start_timeout=0.3).start()
        async with rewarder(remote) as a:  # asks nothing: player 0, free
            assert remote.rewarder.seated[0] is not None and a.connected


async def test_single_player_remotes_take_no_player_header(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")
    with pytest.raises(ConnectionClosed, match="it has 1 player"):
        await rewarder(remote, 1, start_timeout=0.3).start()
    async with rewarder(remote, 0) as client:
        assert client.connected


async def test_real_time_input_drives_the_senders_paddle_only(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL)
    async with rewarder(remote) as a, rewarder(remote, 1) as b:
        await a.reset(seed=1)
        start = list(remote.runtime.paddle_y)
        await b.send_action(UP)
        frame = await remote.wait_frame()
        await remote.wait_frame(frame + 3)
        assert remote.runtime.paddle_y[0] == start[0]
        assert remote.runtime.paddle_y[1] < start[1]
        await a.send_action(DOWN)
        frame = await remote.wait_frame()
        await remote.wait_frame(frame + 3)
        assert remote.runtime.paddle_y[0] > start[0]


async def joint_steps(remote, seed: int, steps: int) -> list[tuple[str, float, float]]:  # type: ignore[no-untyped-def]
    """Two agents in lockstep, each with its own script; the frames and rewards."""
    trace = []
    async with rewarder(remote) as a, rewarder(remote, 1) as b:
        episodes = await asyncio.gather(
            a.reset(seed=seed, mode="lockstep"), b.reset(seed=seed, mode="lockstep")
        )
        assert episodes[0] == episodes[1]
        for i in range(steps):
            ra, rb = await asyncio.gather(
                a.step(UP if i % 20 < 10 else DOWN, frames=4),
                b.step(DOWN if i % 14 < 7 else UP, frames=4),
            )
            assert ra.frame == rb.frame and ra.done == rb.done
            assert ra.info["remote.player"] == 0 and rb.info["remote.player"] == 1
            assert ra.info["remote.rewards"] == [ra.reward, rb.reward]
            trace.append((digest(remote), ra.reward, rb.reward))
            if ra.done:
                break
    return trace


async def test_joint_lockstep_is_deterministic_per_seed(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL)
    first = await joint_steps(remote, seed=3, steps=300)
    second = await joint_steps(remote, seed=3, steps=300)
    other = await joint_steps(remote, seed=4, steps=300)
    assert first == second
    assert first != other
    assert any(ra or rb for _, ra, rb in first), "the scripts should win or lose a point"
    assert all(ra == -rb for _, ra, rb in first)  # each point is one player's and the other's


async def test_a_joint_step_waits_for_every_seated_player(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL, mode="lockstep")
    async with rewarder(remote) as a, rewarder(remote, 1) as b, \
            rewarder(remote, observer=True) as watcher:
        await asyncio.gather(a.reset(seed=1), b.reset(seed=1))
        before = remote.frame
        stepping = asyncio.ensure_future(a.step(UP, frames=2))
        while "step" not in remote.seats._rounds:  # player 0's step has arrived
            await watcher.ping()
        await watcher.ping()
        assert not stepping.done() and remote.frame == before  # player 1 has not stepped
        reply_b = await b.step([], frames=2)
        reply_a = await stepping
        assert reply_a.frame == reply_b.frame == before + 2


async def test_the_player_that_did_not_step_is_named(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL, mode="lockstep")
    remote.seats.timeout = 0.3
    async with rewarder(remote, client_id="a") as a, rewarder(remote, 1, client_id="slow") as b:
        await asyncio.gather(a.reset(seed=1), b.reset(seed=1))
        before = remote.frame
        with pytest.raises(RemoteError, match=r"player 1 \(rewarder client 'slow'\) did not send "
                                              r"v0.env.step within 0.3 s \(JOINT_STEP_TIMEOUT\)"):
            await a.step(UP, frames=2)
        assert remote.frame == before
        # The round is over: both step again and the frame advances.
        ra, rb = await asyncio.gather(a.step([], frames=2), b.step([], frames=2))
        assert ra.frame == before + 2


async def test_different_frames_are_refused(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL, mode="lockstep")
    async with rewarder(remote) as a, rewarder(remote, 1) as b:
        await asyncio.gather(a.reset(seed=1), b.reset(seed=1))
        results = await asyncio.gather(
            a.step([], frames=2), b.step([], frames=3), return_exceptions=True
        )
        assert all(isinstance(r, RemoteError) for r in results)
        assert "player 0: 2, player 1: 3" in str(results[0])


async def test_a_universe_client_plays_player_0_alone(start_remote: StartRemote) -> None:
    """Universe's client (raw v0 JSON, no player header), nobody in player 1's seat:
    lockstep steps at once, the reward is player 0's, player 1's paddle stands still."""
    remote = await start_remote(DUEL)
    client = await WireClient.open(remote.rewarder.port)
    reply = await client.reset(seed=2, mode="lockstep")
    episode = reply["headers"]["episode_id"]
    start = list(remote.runtime.paddle_y)
    total = 0.0
    for _ in range(400):
        message_id = await client.send(
            "v0.env.step", {"action": [list(DOWN[0])], "frames": 4}, episode_id=episode
        )
        step = await client.recv_until("v0.reply.env.step", parent_message_id=message_id)
        total += step["body"]["reward"]
        if step["body"]["done"]:
            break
    info = step["body"]["info"]
    assert remote.runtime.paddle_y[1] == start[1]
    assert step["body"]["done"] and info["points"][1] == 5  # a paddle at the bottom loses
    assert total == info["points"][0] - 5 and info["remote.player"] == 0
    await client.close()


async def test_observers_see_every_players_reward(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL)
    watcher = await WireClient.open(remote.rewarder.port, observer=True)
    async with rewarder(remote) as a, rewarder(remote, 1) as b:
        await asyncio.gather(a.reset(seed=5, mode="lockstep"), b.reset(seed=5, mode="lockstep"))
        for _ in range(300):
            ra, rb = await asyncio.gather(a.step([], frames=8), b.step(UP, frames=8))
            if ra.reward:
                break
        assert ra.reward and rb.reward == -ra.reward
        seen = await watcher.recv_until("v0.env.reward")
        assert seen["body"]["reward"] == ra.reward  # player 0's, as for Universe's clients
        assert seen["body"]["info"]["remote.rewards"] == [ra.reward, rb.reward]
        assert "remote.player" not in seen["body"]["info"]
    await watcher.close()


async def test_per_player_vnc_passwords_drive_their_player(start_remote: StartRemote) -> None:
    remote = await start_remote(DUEL, password="owner-pw", player_passwords={1: "right-pw"})
    assert remote.vnc is not None
    port = remote.vnc.port
    async with VNCClient(f"127.0.0.1:{port}", password="right-pw") as right, \
            VNCClient(f"127.0.0.1:{port}", password="owner-pw") as left:
        start = list(remote.runtime.paddle_y)
        right.send_events([("KeyEvent", "Up", True)])
        left.send_events([("KeyEvent", "Down", True)])
        for _ in range(100):
            await remote.wait_frame()
            y = remote.runtime.paddle_y
            if y[1] < start[1] - 6 and y[0] > start[0] + 6:
                break
        assert remote.runtime.paddle_y[1] < start[1] and remote.runtime.paddle_y[0] > start[0]
    with pytest.raises(AuthenticationFailed):
        async with VNCClient(f"127.0.0.1:{port}", password="wrong-pw", start_timeout=1):
            pass


def test_player_passwords_are_checked() -> None:
    from envserver.remote import Remote

    with pytest.raises(ValueError, match="has one player"):
        Remote("builtin.Catch-v0", player_passwords={1: "x"})
    with pytest.raises(ValueError, match="no player 2"):
        Remote(DUEL, player_passwords={2: "x"})
    with pytest.raises(ValueError, match="first 8 characters"):
        Remote(DUEL, password="samesame1", player_passwords={1: "samesame2"})


async def test_a_joint_step_is_one_call_of_the_remote_with_every_players_request(
    start_remote: StartRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seats are a barrier in front of the remote: the front ends step through them,
    and they step the remote once per joint step, with the other players' requests; the
    remote never calls them back (before: Remote.step -> Seats.step -> Remote.step with a
    flag that stopped the recursion)."""
    remote = await start_remote(DUEL, mode="lockstep")
    calls: list[tuple[int, list[int]]] = []
    real_step = remote.core.step  # (the Game the seats drive)

    async def step(request, others=None):  # type: ignore[no-untyped-def]
        calls.append((PLAYER.get(), sorted(others or {})))
        return await real_step(request, others)

    monkeypatch.setattr(remote.core, "step", step)
    async with rewarder(remote) as a, rewarder(remote, 1) as b:
        await asyncio.gather(a.reset(seed=1), b.reset(seed=1))
        before = list(remote.runtime.paddle_y)
        ra, rb = await asyncio.gather(a.step(DOWN, frames=4), b.step(UP, frames=4))
    assert calls == [(1, [0])]  # once, as the last player, with player 0's request
    assert ra.frame == rb.frame and remote.runtime.paddle_y[0] > before[0]
    assert remote.runtime.paddle_y[1] < before[1]  # both players' events applied
