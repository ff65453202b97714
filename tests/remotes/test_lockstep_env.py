"""Lockstep through the gymnasium envs: same seed and actions, same frames and rewards."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
import pytest

from remotes import RemoteEnv, RemoteVectorEnv, start_local
from remotes.local import LocalRemotes
from tests.optional import need_env


def digest(frame: np.ndarray) -> str:
    return hashlib.blake2b(frame.tobytes(), digest_size=12).hexdigest()


@pytest.fixture(scope="module")
def pong() -> Iterator[LocalRemotes]:
    need_env("atari.Pong-v0")
    with start_local("atari.Pong-v0", 2) as local:  # served in real time until a reset asks
        yield local


def run(env: RemoteEnv, seed: int, steps: int) -> list[tuple[str, float, bool, int]]:
    obs, info = env.reset(seed=seed)
    trace = [(digest(obs), 0.0, False, 0)]
    script = [[("KeyEvent", "Up", True)], [], [("KeyEvent", "Up", False)], [("KeyEvent", "Down", True)],
              [("KeyEvent", "Down", False), ("KeyEvent", "space", True)], [("KeyEvent", "space", False)]]
    first = None
    for i in range(steps):
        obs, reward, terminated, truncated, info = env.step(script[i % len(script)])
        first = info["frame"] if first is None else first
        trace.append((digest(obs), float(reward), terminated, info["frame"] - first))
        if terminated:
            break
    return trace


def test_atari_lockstep_replays_exactly(pong: LocalRemotes) -> None:
    env = RemoteEnv(pong.addresses[0], mode="lockstep", frameskip=4)
    try:
        first = run(env, seed=7, steps=150)
        second = run(env, seed=7, steps=150)
        other = run(env, seed=8, steps=150)
    finally:
        env.close()
    assert first == second
    assert first != other
    assert [t[3] for t in first[1:6]] == [0, 4, 8, 12, 16]  # exactly frameskip frames a step
    assert any(r for _, r, _, _ in first), "Pong scores within 600 frames"
    assert len({h for h, *_ in first}) > 100  # the screen really changes


def test_lockstep_waits_for_nothing_but_the_remote(pong: LocalRemotes) -> None:
    """Steps are not paced by a clock: hundreds of frames per second, whatever the fps."""
    import time

    env = RemoteEnv(pong.addresses[1], mode="lockstep", frameskip=4)
    try:
        env.reset(seed=1)
        started = time.perf_counter()
        for _ in range(60):
            env.step([])
        frames_per_second = 240 / (time.perf_counter() - started)
    finally:
        env.close()
    assert frames_per_second > 60  # faster than real time (it is measured in benchmarks)


def test_vector_lockstep_is_deterministic_and_autoresets(pong: LocalRemotes) -> None:
    def trace() -> list[tuple[str, ...]]:
        env = RemoteVectorEnv(pong.address, mode="lockstep", frameskip=4)
        try:
            obs, _ = env.reset(seed=3)
            out = [tuple(digest(o) for o in obs)]
            for i in range(40):
                obs, rewards, terminated, truncated, _ = env.step([[("KeyEvent", "Up", i % 2 == 0)]] * 2)
                out.append(tuple(digest(o) for o in obs) + tuple(map(str, rewards)))
            return out
        finally:
            env.close()

    assert trace() == trace()


def test_catch_lockstep_episode_ends_and_next_reset_works() -> None:
    with start_local("builtin.Catch-v0", 1, extra_args=["--mode", "lockstep"]) as local:
        env = RemoteEnv(local.addresses[0], mode="lockstep", frameskip=50)
        try:
            env.reset(seed=1)
            for _ in range(1000):
                _, reward, terminated, _, info = env.step([])
                if terminated:
                    break
            assert terminated and info["misses"] == 5
            obs, info = env.reset(seed=2)
            _, _, terminated, _, _ = env.step([])
            assert not terminated
        finally:
            env.close()


# Frames through shared memory --------------------------------------------------------------


def use_shm(env: RemoteEnv, on: bool) -> None:
    async def set_it() -> None:
        env.session.shared.enabled = on
    env.loop.run(set_it())


def test_shared_memory_frames_are_the_vnc_frames(pong: LocalRemotes) -> None:
    """The same seed and actions give the same frames whichever way they travel, and a
    local remote's steps take the shared-memory way by themselves."""
    env = RemoteEnv(pong.addresses[0], mode="lockstep", frameskip=4)
    try:
        async def stepped() -> bool:
            return env.session.shared.last is not None

        assert env.session.shared.enabled  # 127.0.0.1: tried by default
        through_shm = run(env, seed=5, steps=80)
        assert env.loop.run(stepped())
        use_shm(env, False)
        through_vnc = run(env, seed=5, steps=80)
        assert not env.loop.run(stepped())
    finally:
        env.close()
    assert through_shm == through_vnc
    assert len({h for h, *_ in through_shm}) > 40


async def test_viewers_see_shared_memory_steps_at_most_60_times_a_second(pong: LocalRemotes) -> None:
    """A person watching a fast lockstep agent gets at most MAX_VIEWER_UPDATES updates a
    second, the last one the frame the agent stepped to (pixels and tag)."""
    import asyncio
    import time

    from envserver.lockstep_frames import MAX_VIEWER_UPDATES
    from vncdriver.client import VNCClient

    address = pong.addresses[1]
    env = RemoteEnv(address, mode="lockstep", frameskip=4)
    viewer = VNCClient(f"127.0.0.1::{address.vnc_port}", encoding="raw", frame_tags=True)
    try:
        await viewer.start()
        await asyncio.to_thread(env.reset, seed=2)
        before, started = viewer.updates, time.monotonic()

        def steps() -> tuple[np.ndarray, int]:
            for _ in range(300):
                obs, _, terminated, _, info = env.step([("KeyEvent", "Up", True)])
                if terminated:
                    break
            return obs, info["frame"]

        obs, frame = await asyncio.to_thread(steps)
        elapsed = time.monotonic() - started
        async with asyncio.timeout(10):
            while viewer.tag is None or viewer.tag.frame < frame:
                await viewer.wait_update(viewer.updates)
        assert viewer.tag.frame == frame and np.array_equal(viewer.frame(), obs)
        assert viewer.updates - before <= MAX_VIEWER_UPDATES * elapsed + 3
    finally:
        await viewer.close()
        await asyncio.to_thread(env.close)
