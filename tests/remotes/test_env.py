"""RemoteEnv and RemoteVectorEnv against real local remotes (subprocesses on 127.0.0.1)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from remotes import DiscreteClicks, DiscreteKeys, PointerBox, RemoteEnv, RemoteVectorEnv, start_local
from remotes.local import LocalRemotes
from remotes.session import RemoteUnavailable
from runtimes.builtin import (
    CATCH_PADDLE_COLOUR,
    CATCH_PADDLE_Y,
    CLICK_TARGET_CENTRE_COLOUR,
)

FAST = 240.0  # frames per second for tests that wait for rewards


def paddle_x(frame: np.ndarray) -> int:
    """Left edge of Catch's paddle in a frame."""
    row = frame[CATCH_PADDLE_Y + 1]
    columns = np.flatnonzero((row == CATCH_PADDLE_COLOUR).all(axis=1))
    assert columns.size, "no paddle in the frame"
    return int(columns[0])


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2) as local:
        yield local


@pytest.fixture(scope="module")
def fast_catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2, fps=FAST) as local:
        yield local


def test_reset_and_step_show_the_game(catch: LocalRemotes) -> None:
    env = RemoteEnv(catch.addresses[0])
    try:
        obs, info = env.reset(seed=1)
        assert obs.shape == (210, 160, 3) and obs.dtype == np.uint8
        assert obs in env.observation_space
        assert isinstance(info["episode_id"], int)
        start = paddle_x(obs)
        for _ in range(20):
            obs, reward, terminated, truncated, info = env.step([("KeyEvent", "Right", True)])
        assert paddle_x(obs) > start + 20  # held for 20 frames at 3 px a frame
        assert info["episode_id"] is not None and info["vnc.updates"] > 0
        assert info["rewarder.rtt"] is not None and info["rewarder.rtt"] > 0
        lo, hi = info["rewarder.clock_skew"]
        assert lo <= hi
        assert env.render() is None
    finally:
        env.close()
        env.close()  # idempotent


def test_check_env(catch: LocalRemotes) -> None:
    """gymnasium's checker, every check: the envs it builds on the same remote take it over
    (tests/remotes/test_stepper.py checks what the first env sees afterwards)."""
    env = RemoteEnv(catch.addresses[0])
    try:
        assert env.spec is not None and env.spec.nondeterministic
        check_env(env)
    finally:
        env.close()


def test_rewards_and_termination(fast_catch: LocalRemotes) -> None:
    env = RemoteEnv(fast_catch.addresses[0])
    try:
        env.reset(seed=3)
        rewards, terminated = [], False
        for _ in range(int(FAST * 60)):
            _, reward, terminated, truncated, info = env.step([])
            if reward:
                rewards.append(reward)
            if terminated:
                break
        assert terminated, "Catch with no input ends after 5 misses"
        assert rewards.count(-1.0) == 5 and info["misses"] == 5
        obs, info = env.reset()
        assert obs.shape == (210, 160, 3)
    finally:
        env.close()


def test_time_limit_truncates(catch: LocalRemotes) -> None:
    env = RemoteEnv(catch.addresses[1], max_episode_steps=5)
    try:
        env.reset()
        truncations = [env.step([])[3] for _ in range(5)]
        assert truncations == [False] * 4 + [True]
    finally:
        env.close()


def test_bad_actions_and_addresses(catch: LocalRemotes) -> None:
    with pytest.raises(ValueError, match="RemoteEnv drives one remote"):
        RemoteEnv(catch.address)
    env = RemoteEnv(catch.addresses[0])
    try:
        env.reset()
        with pytest.raises(ValueError, match="does not use key 'Up'"):
            env.step([("KeyEvent", "Up", True)])
        with pytest.raises(ValueError, match="off the 160x210 screen"):
            env.step([("PointerEvent", 400, 5, 0)])
        with pytest.raises(ValueError, match="list of events"):
            env.step("Left")  # type: ignore[arg-type]
        env.step([("KeyEvent", "left", True)])  # aliases are fine
    finally:
        env.close()


def test_nobody_there() -> None:
    with pytest.raises(RemoteUnavailable, match="cannot connect"):
        RemoteEnv("vnc://127.0.0.1:9+19", start_timeout=0.5)


def test_discrete_keys_hold_combinations(catch: LocalRemotes) -> None:
    env = DiscreteKeys(RemoteEnv(catch.addresses[0]), [[], ["left"], ["right"]])
    try:
        assert env.action_space.n == 3
        assert env.action(2) == [("KeyEvent", "Right", True)]
        assert env.action(1) == [("KeyEvent", "Right", False), ("KeyEvent", "Left", True)]
        assert env.action(1) == []  # still held
        assert env.action(0) == [("KeyEvent", "Left", False)]
        obs, _ = env.reset(seed=2)
        start = paddle_x(obs)
        for _ in range(15):
            obs, *_ = env.step(1)
        assert paddle_x(obs) < start - 10
    finally:
        env.close()


def test_pointer_wrappers_click() -> None:
    with start_local("builtin.ClickTarget-v0", 1) as local:
        env = RemoteEnv(local.addresses[0])
        try:
            box = PointerBox(env)
            assert box.action(np.array([10.4, 20.6, 0.9])) == [("PointerEvent", 10, 21, 1)]
            grid = DiscreteClicks.grid(env, 4, 3)
            assert grid.action_space.n == 12
            obs, _ = env.reset(seed=4)
            ys, xs = np.nonzero((obs == CLICK_TARGET_CENTRE_COLOUR).all(axis=2))
            x, y = int(xs.mean()), int(ys.mean())
            clicks = DiscreteClicks(env, [(x, y)])
            reward = 0.0
            _, reward, *_ = clicks.step(0)
            for _ in range(3):
                reward += float(env.step([])[1])
            assert reward == 1.0
        finally:
            env.close()


def test_vector_env_batches_and_autoresets(fast_catch: LocalRemotes) -> None:
    env = RemoteVectorEnv(fast_catch.address)
    try:
        assert env.num_envs == 2
        obs, info = env.reset(seed=0)
        assert obs.shape == (2, 210, 160, 3)
        assert info["episode_id"].shape == (2,)
        assert env.metadata["autoreset_mode"].name == "NEXT_STEP"
        episodes = info["episode_id"].copy()
        returns = np.zeros(2)
        for _ in range(int(FAST * 60)):
            obs, rewards, terminated, truncated, info = env.step([[], []])
            returns += rewards
            if terminated.any():
                break
        (done,) = np.flatnonzero(terminated)[:1]
        assert info["misses"][done] == 5  # five misses end a Catch episode
        assert returns[done] == info["score"][done] <= -4
        obs, rewards, terminated, truncated, info = env.step([[], []])  # the autoreset step
        assert rewards[done] == 0.0 and not terminated[done]
        assert info["episode_id"][done] > episodes[done]
    finally:
        env.close()


def test_a_dead_remote_is_reported_and_reconnected() -> None:
    with start_local("builtin.Catch-v0", 2) as local:
        env = RemoteVectorEnv(local.address, start_timeout=10)
        try:
            env.reset(seed=1)
            local.kill(1)
            for _ in range(600):  # at most 10 s of steps
                _, _, _, truncated, info = env.step([[], []])
                if truncated[1]:
                    break
            assert truncated[1] and not truncated[0]
            assert "connection lost" in info["remote.error"][1]
            local.restart(1)
            for _ in range(600):
                _, _, _, _, info = env.step([[], []])
                if "remote.reconnected" in info and info["_remote.reconnected"][1]:
                    break
            else:
                pytest.fail("remote 1 did not come back")
            obs, rewards, *_ = env.step([[("KeyEvent", "Right", True)], []])
            assert obs.shape == (2, 210, 160, 3)
        finally:
            env.close()


def test_single_env_reconnects_on_reset() -> None:
    with start_local("builtin.Catch-v0", 1) as local:
        env = RemoteEnv(local.addresses[0], start_timeout=10)
        try:
            env.reset()
            local.kill(0)
            for _ in range(600):
                _, _, _, truncated, info = env.step([])
                if truncated:
                    break
            assert truncated and info["remote.connected"] is False
            local.restart(0)
            obs, info = env.reset()
            assert obs.shape == (210, 160, 3) and info["episode_id"] is not None
        finally:
            env.close()


def test_play_command_runs_an_agent() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "universe_remote", "play", "builtin.Catch-v0", "-n", "2", "--steps", "90"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "done: 90 steps x 2 remote(s)" in result.stdout
    assert "steps/s per remote" in result.stdout
