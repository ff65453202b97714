"""Snapshots through the gymnasium ids (docs/snapshots.md): ``gymnasium.make`` and
``make_vec`` envs hold keys on the agent's side (their ``DiscreteKeys``), and a snapshot
carries them, so a restore replays exactly and ``fork`` targets step as their source —
whatever each env held when the state was taken or restored. Real lockstep remotes of
Pong and Breakout, shared by the module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Final

import gymnasium
import numpy as np
import pytest

import remotes  # noqa: F401 (registers universe-remote/*)
from remotes import DiscreteKeys, RemoteEnv, RemoteVectorEnv, start_local
from remotes.local import LocalRemotes

GAMES: Final = ("Pong", "Breakout")
#: Steps replayed after each clone or fork.
STEPS: Final = 200
#: Minimal action sets of both games start NOOP, FIRE, RIGHT, LEFT: RIGHT and LEFT hold
#: different keys.
RIGHT, LEFT = 2, 3


@pytest.fixture(scope="module")
def atari() -> Iterator[dict[str, LocalRemotes]]:
    """Two lockstep remotes of each game, every restore checked against its digest."""
    before = os.environ.get("UNIVERSE_REMOTE_VERIFY_RESTORES")
    os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"] = "1"
    started: dict[str, LocalRemotes] = {}
    try:
        for game in GAMES:
            started[game] = start_local(f"atari.{game}-v0", 2, extra_args=["--mode", "lockstep"])
        yield started
    finally:
        for local in started.values():
            local.close()
        if before is None:
            del os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"]
        else:
            os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"] = before


def _make(local: LocalRemotes, game: str, frameskip: int, **kwargs: Any) -> Any:
    return gymnasium.make(
        f"universe-remote/atari.{game}-v0", remotes=str(local.addresses[0]), password=local.password,
        mode="lockstep", frameskip=frameskip, **kwargs,
    )


def _play(env: Any, script: list[int]) -> list[tuple[Any, ...]]:
    """Each step's frame, reward, ends and lives, until the episode ends."""
    out = []
    for action in script:
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs.tobytes(), reward, terminated, truncated, info.get("lives")))
        if terminated or truncated:
            break
    return out


@pytest.mark.parametrize("frameskip", [4, 1])
@pytest.mark.parametrize("game", GAMES)
def test_a_gymnasium_id_replays_exactly_whatever_was_held(
    atari: dict[str, LocalRemotes], game: str, frameskip: int
) -> None:
    env = _make(atari[game], game, frameskip)
    try:
        env.reset(seed=7)
        rng = np.random.default_rng(frameskip)
        for action in rng.integers(env.action_space.n, size=20).tolist():
            env.step(action)
        env.step(RIGHT)  # RIGHT's key held at the clone
        state = env.unwrapped.clone_state()
        assert dict(state.agent)["held_keys"]  # (what RIGHT holds, by the game's own key names)
        script = rng.integers(env.action_space.n, size=STEPS).tolist()
        script[-1] = LEFT  # LEFT's key held at the restore
        first = _play(env, script)
        assert len(first) > STEPS // 2
        env.unwrapped.restore_state(state)
        assert _play(env, script) == first
        env.unwrapped.restore_state(state)  # the first replay held what the script's end did
        assert _play(env, script) == first
    finally:
        env.close()


@pytest.mark.parametrize("frameskip", [4, 1])
@pytest.mark.parametrize("game", GAMES)
def test_make_vec_forks_and_restores_step_identically(
    atari: dict[str, LocalRemotes], game: str, frameskip: int
) -> None:
    local = atari[game]
    envs = gymnasium.make_vec(
        f"universe-remote/atari.{game}-v0", num_envs=2, remotes=[str(a) for a in local.addresses],
        password=local.password, mode="lockstep", frameskip=frameskip,
    )
    try:
        envs.reset(seed=[1, 2])
        rng = np.random.default_rng(10 + frameskip)
        for action in rng.integers(4, size=(10, 2)):
            envs.step(action)
        envs.step(np.array([RIGHT, LEFT]))  # the two envs hold different keys
        state = envs.unwrapped.fork(0)
        script = rng.integers(4, size=STEPS).tolist()
        script[-1] = LEFT
        first = []
        for action in script:
            obs, reward, terminated, truncated, _ = envs.step(np.array([action, action]))
            assert np.array_equal(obs[0], obs[1])
            assert reward[0] == reward[1] and terminated[0] == terminated[1] and truncated[0] == truncated[1]
            first.append((obs[0].tobytes(), reward[0], terminated[0], truncated[0]))
            if terminated[0] or truncated[0]:
                break
        envs.unwrapped.set_states({0: state, 1: state})  # and back, replayed on both
        for step, action in enumerate(script[: len(first)]):
            obs, reward, terminated, truncated, _ = envs.step(np.array([action, action]))
            for i in range(2):
                assert (obs[i].tobytes(), reward[i], terminated[i], truncated[i]) == first[step]
    finally:
        envs.close()


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"]) as local:
        yield local


def test_an_ended_env_is_not_cloned_and_a_forked_one_steps_again(catch: LocalRemotes) -> None:
    """A vector env whose episode ended in the last step starts a new one at the next: a
    clone then is refused; a fork onto it makes its next step play its action."""
    envs = gymnasium.make_vec(
        "universe-remote/builtin.Catch-v0", num_envs=2, remotes=[str(a) for a in catch.addresses],
        password=catch.password, mode="lockstep", frameskip=4,
    )
    try:
        envs.reset(seed=[3, 4])
        for _ in range(1000):  # Catch ends after 5 misses: ~200 steps of 4 frames
            _, _, terminated, truncated, _ = envs.step(np.array([1, 2]))
            ended = np.flatnonzero(np.logical_or(terminated, truncated))
            if len(ended):
                break
        else:
            pytest.fail("no episode ended")
        done, other = int(ended[0]), 1 - int(ended[0])
        with pytest.raises(ValueError, match="ended in the last step"):
            envs.unwrapped.clone_state(done)
        if terminated[other] or truncated[other]:
            pytest.fail("both episodes ended in one step (seeds 3 and 4 end apart)")
        envs.unwrapped.fork(other, to=[done])
        for action in [1] * 5 + [2] * 30:
            obs, reward, terminated, truncated, _ = envs.step(np.array([action, action]))
            assert np.array_equal(obs[0], obs[1]) and reward[0] == reward[1]
            assert terminated[0] == terminated[1]
    finally:
        envs.close()


def test_the_episodes_step_limit_counts_on_from_the_clone(catch: LocalRemotes) -> None:
    env = RemoteEnv(catch.addresses[0], catch.password, mode="lockstep", max_episode_steps=30)
    try:
        env.reset(seed=5)
        for _ in range(10):
            env.step([])
        state = env.clone_state()
        assert state.steps == 10
        ends = [env.step([])[3] for _ in range(20)]
        assert ends == [False] * 19 + [True]
        env.restore_state(state)
        assert [env.step([])[3] for _ in range(20)] == ends
        with pytest.raises(ValueError, match="ended in the last step"):
            env.clone_state()  # the next step starts a new episode: reset first
    finally:
        env.close()


def test_held_keys_go_between_one_env_and_a_vector_env_and_not_without_them(
    catch: LocalRemotes,
) -> None:
    """A ``make_vec`` env's state restores on a ``gymnasium.make`` env with its held keys;
    a state of a bare env does not say what a ``DiscreteKeys`` env held: refused before
    the remote is touched, rather than replayed wrong."""
    addresses = [str(a) for a in catch.addresses]
    envs = gymnasium.make_vec(
        "universe-remote/builtin.Catch-v0", num_envs=2, remotes=addresses, password=catch.password,
        mode="lockstep",
    )
    try:
        envs.reset(seed=[1, 2])
        envs.step(np.array([1, 2]))
        held_right = envs.unwrapped.clone_state(1, export=True)
    finally:
        envs.close()
    assert dict(held_right.agent) == {"held_keys": ("Right",)}
    bare = RemoteVectorEnv(catch.addresses, catch.password, mode="lockstep")
    try:
        bare.reset(seed=1)
        DiscreteKeys(bare, [[], ["Left"]])  # a wrapper dropped at once: not asked for keys
        no_keys = bare.clone_state(1, export=True)
        assert no_keys.agent == ()
    finally:
        bare.close()
    wrapped = gymnasium.make(
        "universe-remote/builtin.Catch-v0", remotes=addresses[0], password=catch.password, mode="lockstep",
    )
    try:
        wrapped.reset(seed=2)
        wrapped.step(1)  # holds Left
        with pytest.raises(ValueError, match="taken without held_keys"):
            wrapped.unwrapped.restore_state(no_keys)
        wrapped.unwrapped.restore_state(held_right)
        assert wrapped.unwrapped.clone_state().agent == held_right.agent
    finally:
        wrapped.close()
