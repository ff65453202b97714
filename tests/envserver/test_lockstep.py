"""Lockstep (v0.env.step): the remote advances only when asked, exactly as far as asked."""

from __future__ import annotations

import asyncio
import hashlib

import numpy as np
import pytest

from rewarder import shm
from rewarder.blocking import BlockingRewarder
from rewarder.client import RewarderClient
from rewarder.errors import RemoteError
from rewarder.protocol import OBS_SHM
from tests.conftest import StartRemote
from tests.wire import WireClient

WAIT = 10.0


def digest(remote) -> str:  # type: ignore[no-untyped-def]
    return hashlib.blake2b(remote.runtime.framebuffer.tobytes(), digest_size=12).hexdigest()


async def test_step_needs_lockstep_mode(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset()
        with pytest.raises(RemoteError, match="reset with mode 'lockstep'"):
            await client.step([], frames=1)


async def test_exactly_k_frames_and_nothing_in_between(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        episode = await client.reset(seed=1)
        assert client.describe is not None and client.describe.body["mode"] == "lockstep"
        first = await client.step([("KeyEvent", "Right", True)], frames=4)
        assert first.episode_id == episode
        second = await client.step([], frames=4)
        assert second.frame == first.frame + 4
        before = remote.frame
        await client.ping()  # time passes on the wire; the runtime must not move
        await client.ping()
        assert remote.frame == before == second.frame
        assert remote.runtime.paddle_x > 70  # Right stayed held across both steps


async def run_episode(remote, seed: int) -> list[tuple[str, float, bool]]:  # type: ignore[no-untyped-def]
    """Seeded lockstep run with a fixed script; the trace of frames and rewards."""
    trace = []
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=seed, mode="lockstep")
        script = [
            [("KeyEvent", "Left", True)], [("KeyEvent", "Left", False)],
            [("KeyEvent", "Right", True)], [],
        ]
        for i in range(120):
            reply = await client.step(script[i % len(script)], frames=4)
            trace.append((digest(remote), reply.reward, reply.done))
            if reply.done:
                break
    return trace


async def test_same_seed_same_actions_same_frames(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")  # real time until the reset asks
    first = await run_episode(remote, seed=5)
    second = await run_episode(remote, seed=5)
    other = await run_episode(remote, seed=6)
    assert first == second
    assert first != other
    assert any(reward for _, reward, _ in first), "the script should earn or lose a point"


async def test_done_stops_the_episode_until_reset(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        episode = await client.reset(seed=2)
        total = 0.0
        for _ in range(10_000):
            reply = await client.step([], frames=100)
            total += reply.reward
            if reply.done:
                break
        assert reply.done and total < 0
        with pytest.raises(RemoteError, match="is done; send v0.env.reset"):
            await client.step([], frames=1)
        assert await client.reset() == episode + 1
        assert not (await client.step([], frames=1)).done


async def test_bad_step_requests(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset()
        with pytest.raises(RemoteError, match="frames must be an integer in 1..10000"):
            await client.step([], frames=0)
        with pytest.raises(RemoteError, match="does not use key 'Up'"):
            await client.step([("KeyEvent", "Up", True)])
        assert (await client.step([], frames=2)).frame == remote.frame


async def test_switching_back_to_realtime(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(mode="realtime")
        start = remote.frame
        await remote.wait_frame(start + 3)  # the game loop ticks again by itself
        assert remote.mode == "realtime"


async def test_a_reset_without_mode_gives_universes_client_real_time_and_ours_keep_lockstep(
    start_remote: StartRemote, caplog: pytest.LogCaptureFixture
) -> None:
    """Universe's client never sends ``mode``: on a lockstep remote it would sit in a world
    that never moves (frame 0, no reward, no VNC update, nothing logged). Its reset asks
    for real time, and gets it, logged. Our clients' resets without ``mode`` keep the
    remote's (they send the mode its describe named)."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    port = remote.rewarder.port
    async with RewarderClient(f"127.0.0.1:{port}") as ours:
        await ours.reset(seed=1)
        assert remote.mode == "lockstep"
        assert (await ours.step([], frames=2)).frame == remote.frame

    def blocking_reset_and_step() -> int:
        channel = BlockingRewarder(f"127.0.0.1:{port}", calibration_pings=0)
        channel.connect()
        try:
            channel.reset(seed=2)
            return channel.step([], frames=3).frame
        finally:
            channel.close()

    assert await asyncio.to_thread(blocking_reset_and_step) == remote.frame
    assert remote.mode == "lockstep"

    universe = await WireClient.open(port)
    try:
        # Universe's client sends this on every reset: episode "0", env_id, seed null, fps.
        reply = await universe.reset("0", env_id="builtin.Catch-v0", seed=None, fps=60)
        assert reply["method"] == "v0.reply.env.reset", reply
        episode = reply["headers"]["episode_id"]
        while True:
            described = await universe.recv_until("v0.env.describe", episode_id=episode)
            if described["body"]["env_state"] == "running":
                break
        assert described["body"]["mode"] == "realtime"
        frame = remote.frame
        async with asyncio.timeout(WAIT):  # the world moves without any step
            await remote.wait_frame(frame + 10)
    finally:
        await universe.close()
    assert "switching builtin.Catch-v0 to real time" in caplog.text


async def test_a_lockstep_reset_can_hand_its_first_frame_over_through_shared_memory(
    start_remote: StartRemote,
) -> None:
    """``obs="shm"`` on a reset puts the new episode's first frame in the segment its reply
    names, as a step's reply does; without it the reply still says which frame it is."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    client = await WireClient.open(remote.rewarder.port)
    try:
        plain = await client.reset(seed=3, mode="lockstep")
        assert plain["body"]["frame"] == remote.frame and "shm" not in plain["body"]
        reply = await client.reset(str(remote.episode_id), seed=3, mode="lockstep", obs="shm")
    finally:
        await client.close()
    body = reply["body"]
    assert body["frame"] == remote.frame
    name, height, width = body["shm"]
    seen = np.empty((height, width, 3), np.uint8)
    with shm.FrameReader(name, height, width) as reader:
        frame, episode = reader.read_into(seen)
    assert (frame, episode) == (remote.frame, remote.episode_id)
    assert np.array_equal(seen, remote.runtime.framebuffer)


async def test_a_shared_memory_step_is_drawn_into_its_segment_not_copied_there(
    start_remote: StartRemote,
) -> None:
    """Once a game's segment exists, an Atari step asking for ``obs="shm"`` has ALE draw
    its frame straight into the segment (``Runtime.into``): the segment is written no
    frame to copy, only its header, and still holds exactly the frame the runtime shows
    (its framebuffer, brought up to date when read)."""
    pytest.importorskip("ale_py")
    remote = await start_remote("atari.Pong-v0", mode="lockstep")
    copied: list[bool] = []
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=3, mode="lockstep", timeout=WAIT)
        await client.step([], frames=4, obs=OBS_SHM)  # (makes the segment: copied in)
        segment = remote.core.lockstep_frames._segment
        assert segment is not None
        write = segment.write
        segment.write = lambda frame, *rest: (  # type: ignore[method-assign]
            copied.append(frame is not None), write(frame, *rest))[1]
        for step in range(5):
            reply = await client.step([("KeyEvent", "Up", step % 2 == 0)], frames=4, obs=OBS_SHM)
            assert reply.shm is not None and remote.core.lockstep_frames._segment is segment
            name, height, width = reply.shm
            seen = np.empty((height, width, 3), np.uint8)
            with shm.FrameReader(name, height, width) as reader:
                assert reader.read_into(seen) == (remote.frame, remote.episode_id)
            assert np.array_equal(seen, remote.runtime.framebuffer)
    assert copied == [False] * 5
