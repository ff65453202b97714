"""Lockstep stays in the caller's thread across episodes (issue 32): over thousands of
steps with an episode boundary every few steps, the loop thread runs nothing, and every
episode's first frame comes through shared memory, as every step's does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from remotes import RemoteEnv, RemoteVectorEnv, start_local
from remotes.local import LocalRemotes
from remotes.loop import LoopThread

#: Steps of the long run (4 remotes: 40,000 env-steps, an autoreset every 10 env-steps).
STEPS = 10_000
EPISODE_STEPS = 10
WARM_UP = 2 * (EPISODE_STEPS + 1)
#: Seconds a restarted remote may take to be back (a process start on a loaded machine).
BACK_WITHIN = 60.0


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 4) as local:
        yield local


class CountedLoop:
    """A loop thread that counts the iterations of its event loop: each is a wake-up that
    ran ready callbacks (a submitted coroutine, a socket read, a timer) on that thread."""

    def __init__(self) -> None:
        self.thread = LoopThread("counted-loop")
        self.iterations = 0
        loop = self.thread.loop
        run_once = loop._run_once  # type: ignore[attr-defined]

        def counted() -> None:
            if threading.current_thread() is self.thread.thread:
                self.iterations += 1
            run_once()

        loop._run_once = counted  # type: ignore[attr-defined]

    def close(self) -> None:
        self.thread.close()


def test_ten_thousand_lockstep_steps_over_short_episodes_never_wake_the_loop(catch: LocalRemotes) -> None:
    counted = CountedLoop()
    env = RemoteVectorEnv(catch.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          loop=counted.thread)
    try:
        sessions = env.sessions
        env.reset(seed=3)
        # Warm-up: each VNC client's update request made before the first reset paused its
        # updates is answered once (by the first frames drawn): the last the loop hears.
        for _ in range(WARM_UP):
            env.step([[]] * 4)
        before = counted.iterations
        episodes = {i: set() for i in range(4)}
        ends = 0
        rng = np.random.default_rng(0)
        keys = [[("KeyEvent", "Left", True)], [("KeyEvent", "Left", False)], []]
        for _ in range(STEPS):
            actions = [keys[k] for k in rng.integers(len(keys), size=4)]
            obs, rewards, terminated, truncated, infos = env.step(actions)
            ends += int(terminated.sum() + truncated.sum())
            for i, episode in enumerate(infos["episode_id"]):
                episodes[i].add(int(episode))
            assert infos["remote.connected"].all()
        during = counted.iterations - before
        vnc_frames = sum(s.shared.vnc_frames for s in sessions)
        shm_frames = sum(s.shared.shm_frames for s in sessions)
        env.close()
        # Connecting, resetting and closing a lockstep env start no worker thread (the
        # loop's executor names its threads after the loop).
        workers = [t.name for t in threading.enumerate() if t.name.startswith("counted-loop-")]
    finally:
        env.close()
        counted.close()
    assert workers == []
    # gymnasium's next-step autoreset: an episode of 10 steps, then its reset step.
    assert ends >= 4 * STEPS // (EPISODE_STEPS + 1)
    assert all(len(e) >= STEPS // (EPISODE_STEPS + 1) for e in episodes.values())
    assert during == 0, f"the loop thread woke {during} times during {STEPS} lockstep steps"
    assert vnc_frames == 0
    # Every frame returned came through shared memory: the reset's, then each step's row
    # of each remote (a step's frame, or on an autoreset step the new episode's first).
    assert shm_frames == 4 * (1 + WARM_UP + STEPS)


def test_a_remote_killed_mid_run_is_reported_in_the_step_that_sees_it_and_comes_back(
    catch: LocalRemotes,
) -> None:
    local = start_local("builtin.Catch-v0", 1)
    env = RemoteVectorEnv([local.addresses[0], catch.addresses[0]], mode="lockstep",
                          max_episode_steps=EPISODE_STEPS, stall_timeout=5.0)
    try:
        env.reset(seed=1)
        for _ in range(25):  # across a few episode boundaries
            env.step([[]] * 2)
        local.kill(0)
        obs, rewards, terminated, truncated, infos = env.step([[]] * 2)
        assert truncated[0] and not infos["remote.connected"][0] and infos["remote.error"][0]
        assert infos["remote.connected"][1]  # the healthy remote stepped on
        for _ in range(EPISODE_STEPS + 2):  # it keeps stepping, through its autoresets
            obs, rewards, terminated, truncated, infos = env.step([[]] * 2)
            assert infos["remote.connected"][1] and not infos["remote.connected"][0]
        shared = env.sessions[0].shared
        taken, over_vnc = shared.shm_frames, shared.vnc_frames
        local.restart(0)
        deadline = time.monotonic() + BACK_WITHIN
        while time.monotonic() < deadline:  # probed on the loop, connected by a step
            obs, rewards, terminated, truncated, infos = env.step([[]] * 2)
            if infos["remote.connected"][0]:
                break
        assert infos["remote.connected"][0], "the restarted remote did not come back"
        obs, rewards, terminated, truncated, infos = env.step([[]] * 2)
        assert infos["remote.connected"].all()
        assert (obs[0] > 0).any()
        # Its new episode's first frame and the step's came through shared memory.
        assert shared.shm_frames == taken + 2 and shared.vnc_frames == over_vnc
    finally:
        env.close()
        local.close()


def test_numpy_scalars_in_lockstep_actions_work_as_in_real_time(catch: LocalRemotes) -> None:
    """An agent's actions often hold numpy scalars (a sampled key state, a coordinate):
    the lockstep step request carries them as JSON booleans and numbers."""
    env = RemoteEnv(catch.addresses[1], mode="lockstep")
    try:
        env.reset(seed=2)
        for down in (np.bool_(True), np.bool_(False)):
            obs, reward, terminated, truncated, info = env.step(
                [("KeyEvent", "Left", down), ("PointerEvent", np.int64(3), np.int32(4), np.uint8(0))]
            )
            assert info["remote.connected"] and "shm.error" not in info
    finally:
        env.close()


def test_same_step_episode_ends_start_the_next_episode_in_the_callers_thread(catch: LocalRemotes) -> None:
    """``SAME_STEP``: the step that ends an episode returns its final frame in the info
    and the next episode's first frame (through shared memory) as the observation; the
    loop thread is not woken for it."""
    counted = CountedLoop()
    env = RemoteVectorEnv(catch.addresses[2:], mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          autoreset_mode=AutoresetMode.SAME_STEP, loop=counted.thread)
    try:
        env.reset(seed=5)
        for _ in range(WARM_UP):
            env.step([[]] * 2)
        before, vnc_before = counted.iterations, [s.shared.vnc_frames for s in env.sessions]
        ends = 0
        for _ in range(5 * EPISODE_STEPS):
            obs, rewards, terminated, truncated, info = env.step([[]] * 2)
            ended = terminated | truncated
            if ended.any():
                ends += int(ended.sum())
                for i in np.flatnonzero(ended):
                    assert info["_final_obs"][i]
                    final_episode = info["final_info"]["episode_id"][i]
                    assert info["episode_id"][i] > final_episode  # the new one's, already
                    assert not np.array_equal(info["final_obs"][i], obs[i])
        during = counted.iterations - before
        vnc_after = [s.shared.vnc_frames for s in env.sessions]
    finally:
        env.close()
        counted.close()
    assert ends >= 2 * 4  # a same-step end every EPISODE_STEPS steps, each remote
    assert during == 0, f"the loop thread woke {during} times"
    assert vnc_after == vnc_before
