"""``gymnasium.make`` / ``make_vec`` for every environment, with real local remotes."""

from __future__ import annotations

import os
from typing import Final

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import remotes
from remotes import RemoteVectorEnv, start_local
from remotes.registration import gym_id
from runtimes import registry


def test_every_env_id_is_registered() -> None:
    gymnasium.register_envs(remotes)
    ids = {k for k in gymnasium.registry if k.startswith("universe-remote/")}
    assert {gym_id(e) for e in registry.env_ids()} <= ids
    assert "universe-remote/atari.Pong-v0" in ids and "universe-remote/Remote-v0" in ids
    assert gymnasium.spec("universe-remote/builtin.Catch-v0").vector_entry_point is not None


def test_make_starts_a_local_remote_and_close_stops_it() -> None:
    env = gymnasium.make("universe-remote/builtin.Catch-v0", remotes=1)
    local = env.unwrapped.owned
    try:
        assert env.action_space == gymnasium.spaces.Discrete(3)  # nothing, Left, Right
        obs, info = env.reset(seed=1)
        assert obs.shape == (210, 160, 3) and obs.dtype == np.uint8
        obs, reward, terminated, truncated, info = env.step(2)
        assert env.observation_space.contains(obs)
        assert [p.poll() for p in local.processes] == [None]
    finally:
        env.close()
    assert all(p.poll() is not None for p in local.processes)


def test_make_with_the_module_prefix_and_an_address() -> None:
    with start_local("builtin.Catch-v0", 1, extra_args=["--mode", "lockstep"]) as local:
        env = gymnasium.make(
            "remotes:universe-remote/builtin.Catch-v0", remotes=local.address, mode="lockstep",
            frameskip=4,
        )
        try:
            first, _ = env.reset(seed=3)
            again, _ = env.reset(seed=3)
            assert np.array_equal(first, again)
            frames = [env.step(1)[0] for _ in range(3)]
            assert not np.array_equal(frames[0], first)  # the paddle moved: 4 frames a step
            assert env.unwrapped.owned is None  # not ours to stop
        finally:
            env.close()
        assert [p.poll() for p in local.processes] == [None]


def test_make_vec_gives_a_remote_vector_env() -> None:
    envs = gymnasium.make_vec("universe-remote/builtin.Catch-v0", num_envs=2, mode="lockstep")
    try:
        assert isinstance(envs.unwrapped, RemoteVectorEnv) and envs.num_envs == 2
        assert envs.action_space == gymnasium.spaces.MultiDiscrete([3, 3])  # make's Discrete(3)
        obs, info = envs.reset(seed=0)
        assert obs.shape == (2, 210, 160, 3)
        obs, rewards, terminated, truncated, info = envs.step(np.array([0, 1]))  # nothing, Left
        assert rewards.shape == (2,)
        local = envs.unwrapped.owned
        assert len(local.processes) == 2
        # lockstep with a process per core (CI's 2): one to each (remotes.capacity.pinned_cpus)
        allowed = sorted(os.sched_getaffinity(0))
        want = [{allowed[0]}, {allowed[1]}] if len(allowed) == 2 else [set(allowed)] * 2
        assert [os.sched_getaffinity(p.pid) for p in local.processes] == want
    finally:
        envs.close()
    assert all(p.poll() is not None for p in local.processes)


def test_make_vec_with_discrete_false_keeps_vnc_events() -> None:
    envs = gymnasium.make_vec(
        "universe-remote/builtin.Catch-v0", num_envs=1, mode="lockstep", discrete=False
    )
    try:
        assert isinstance(envs, RemoteVectorEnv)
        envs.reset(seed=0)
        envs.step([[("KeyEvent", "Left", True)]])
    finally:
        envs.close()


#: One id of each family whose make gives a simple action space.
FAMILIES: Final = ["atari.Pong-v0", "builtin.Catch-v0", "builtin.ClickTarget-v0", "miniwob.ClickButton-v0"]


@pytest.mark.parametrize("env_id", FAMILIES)
def test_make_and_make_vec_give_the_same_action_space(env_id: str) -> None:
    """Each env of make_vec's gets what make gives, acting the same way (one remote, made
    into each in turn)."""
    if env_id.startswith("atari."):
        pytest.importorskip("ale_py")
    if env_id.startswith("miniwob."):
        pytest.importorskip("miniwob")
    with start_local(env_id, 1) as local:
        env = gymnasium.make(gym_id(env_id), remotes=local.address)
        try:
            single = env.action_space
            assert isinstance(single, gymnasium.spaces.Discrete) and single.n > 2
            env.reset(seed=0)
            env.step(single.n - 1)
        finally:
            env.close()
        envs = gymnasium.make_vec(gym_id(env_id), num_envs=1, remotes=local.address)
        try:
            assert envs.single_action_space == single
            assert envs.action_space == gymnasium.spaces.MultiDiscrete([single.n])
            envs.reset(seed=0)
            envs.step(np.array([single.n - 1]))
        finally:
            envs.close()


def test_atari_gets_its_minimal_action_set_as_discrete() -> None:
    pytest.importorskip("ale_py")
    env = gymnasium.make("universe-remote/atari.Pong-v0", mode="lockstep", frameskip=4)
    try:
        runtime = registry.make("atari.Pong-v0")
        assert env.action_space == gymnasium.spaces.Discrete(len(runtime.actions))
        env.reset(seed=0)
        # every action, as keys, plays the ALE action of the same index
        combos = env.unwrapped.session.describe_body()["action_keys"]
        for name, keys in zip(runtime.actions, combos, strict=True):
            assert runtime.joystick_action(keys) == name
        for action in range(env.action_space.n):
            env.step(action)
    finally:
        env.close()


@pytest.mark.parametrize("mode", ["realtime", "lockstep"])
def test_check_env_passes_with_no_check_skipped(mode: str) -> None:
    with start_local("builtin.Catch-v0", 1) as local:
        env = gymnasium.make(
            "universe-remote/builtin.Catch-v0", remotes=local.address, mode=mode,
            render_mode="rgb_array",
        )
        try:
            check_env(env.unwrapped)
        finally:
            env.close()


def test_unknown_ids_get_the_closest_matches() -> None:
    with pytest.raises(gymnasium.error.Error, match="Did you mean: `builtin.Catch`"):
        gymnasium.make("universe-remote/builtin.Cacth-v0")
    with pytest.raises(ValueError, match="remotes=3.*make_vec"):
        remotes.make_env("builtin.Catch-v0", remotes=3)
