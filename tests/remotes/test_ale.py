"""Atari remotes as ale-py's users drive them (``remotes.ale``), against real local remotes
and ale-py itself: v5 keywords, sticky actions in the remote, action meanings, lives, and
gymnasium's ``AtariPreprocessing`` giving ale-py's observations frame for frame."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import gymnasium
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing

import remotes
from remotes import start_local
from remotes.ale import ALEView, RemoteAtariEnv, grayscale

ale_py = pytest.importorskip("ale_py")
pytest.importorskip("cv2")  # AtariPreprocessing resizes with OpenCV

PONG: Final = "universe-remote/atari.Pong-v0"
BREAKOUT: Final = "universe-remote/atari.Breakout-v0"
#: Agent steps of the preprocessing comparison (4 frames each: ~40 s of Pong).
COMPARED_STEPS: Final = 600

gymnasium.register_envs(remotes)
gymnasium.register_envs(ale_py)


def preprocessed(
    env: gymnasium.Env[Any, Any], seed: int, actions: Sequence[int]
) -> tuple[list[np.ndarray], list[float]]:
    """AtariPreprocessing's defaults (30 no-op starts, 4 frames a step, max of the last
    two, 84x84 grey) over ``env``: each observation and reward of one seeded episode."""
    wrapped = AtariPreprocessing(env)
    try:
        obs, _ = wrapped.reset(seed=seed)
        frames, rewards = [obs], []
        for action in actions:
            obs, reward, terminated, truncated, _ = wrapped.step(action)
            frames.append(obs)
            rewards.append(float(reward))
            if terminated or truncated:
                break
        return frames, rewards
    finally:
        wrapped.close()


@pytest.mark.parametrize("sticky", [0.0, 0.25])
def test_atari_preprocessing_gives_ale_py_s_observations(sticky: float) -> None:
    """The same seed and actions: ale-py's Pong-v5 without frame skipping and the remote in
    lockstep (its own no-op starts off: AtariPreprocessing does them) give equal
    preprocessed frames, sticky repeats included."""
    actions = np.random.default_rng(0).integers(6, size=COMPARED_STEPS).tolist()
    theirs = preprocessed(
        gymnasium.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=sticky), 7, actions
    )
    ours = preprocessed(
        gymnasium.make(PONG, mode="lockstep", noop_max=0, repeat_action_probability=sticky), 7, actions
    )
    assert len(ours[0]) == len(theirs[0]) == COMPARED_STEPS + 1
    assert ours[0][0].shape == (84, 84) and ours[0][0].dtype == np.uint8
    unequal = [i for i, (a, b) in enumerate(zip(ours[0], theirs[0], strict=True)) if not np.array_equal(a, b)]
    assert unequal == [], f"frames {unequal[:5]} differ"
    assert ours[1] == theirs[1] and any(ours[1])  # points were scored, the same ones
    assert len({frame.tobytes() for frame in ours[0]}) > COMPARED_STEPS // 2


def test_sticky_actions_are_deterministic_under_a_seed_in_lockstep() -> None:
    actions = np.random.default_rng(1).integers(6, size=400).tolist()

    def frames(env: gymnasium.Env[Any, Any], seed: int) -> list[bytes]:
        obs, _ = env.reset(seed=seed)
        out = [obs.tobytes()]
        for action in actions:
            out.append(env.step(action)[0].tobytes())
        return out

    sticky = gymnasium.make(PONG, mode="lockstep", frameskip=4, repeat_action_probability=0.25, noop_max=0)
    plain = gymnasium.make(PONG, mode="lockstep", frameskip=4, noop_max=0)
    try:
        assert sticky.unwrapped.describe["repeat_action_probability"] == 0.25
        first = frames(sticky, 5)
        assert frames(sticky, 5) == first  # the same seed and actions: the same game
        assert frames(sticky, 6) != first  # another seed repeats other actions
        without = frames(plain, 5)
        assert without[0] == first[0] and without != first  # same start, the repeats differ
    finally:
        sticky.close()
        plain.close()


def test_full_action_space_is_ale_py_s_18_actions_in_make_and_make_vec() -> None:
    env = gymnasium.make(PONG, mode="lockstep", full_action_space=True, frameskip=4)
    envs = gymnasium.make_vec(PONG, num_envs=1, mode="lockstep", full_action_space=True)
    try:
        assert env.action_space == gymnasium.spaces.Discrete(18)
        assert envs.single_action_space == gymnasium.spaces.Discrete(18)
        assert envs.action_space == gymnasium.spaces.MultiDiscrete([18])
        theirs = gymnasium.make("ALE/Pong-v5", full_action_space=True)
        assert env.unwrapped.get_action_meanings() == theirs.unwrapped.get_action_meanings()
        theirs.close()
        assert envs.unwrapped.get_action_meanings()[:4] == ["NOOP", "FIRE", "UP", "RIGHT"]
        env.reset(seed=0)
        for action in range(18):
            env.step(action)
    finally:
        env.close()
        envs.close()


def test_get_action_meanings_are_ale_py_s() -> None:
    env = gymnasium.make(PONG, mode="lockstep")
    theirs = gymnasium.make("ALE/Pong-v5")
    try:
        meanings = theirs.unwrapped.get_action_meanings()
        assert meanings == ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
        assert env.unwrapped.get_action_meanings() == meanings
        assert env.get_wrapper_attr("get_action_meanings")() == meanings
        assert env.action_space == theirs.action_space
    finally:
        env.close()
        theirs.close()


def lose_a_life(env: gymnasium.Env[Any, Any], limit: int) -> list[dict[str, Any]]:
    """Serve Breakout's ball (FIRE), then stand still until a life is lost; every info."""
    infos = [env.reset(seed=0)[1]]
    for step in range(limit):
        infos.append(env.step(1 if step % 50 == 0 else 0)[4])
        if infos[-1]["lives"] < infos[0]["lives"]:
            break
    return infos


@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
def test_info_has_lives_on_every_reset_and_step(mode: str) -> None:
    """In real time nothing is scored when the ball is lost: the remote announces lives."""
    with start_local("atari.Breakout-v0", 1, fps=1000.0) as local:
        env = gymnasium.make(BREAKOUT, remotes=local.address, mode=mode, frameskip=4)
        try:
            infos = lose_a_life(env, 2000)
        finally:
            env.close()
    assert infos[0]["lives"] == 5
    assert all("lives" in info for info in infos)
    assert infos[-1]["lives"] == 4, f"no life lost in {len(infos) - 1} steps"


def test_vector_info_has_every_env_s_lives() -> None:
    envs = gymnasium.make_vec(BREAKOUT, num_envs=2, mode="lockstep", frameskip=4)
    try:
        _, info = envs.reset(seed=0)
        assert info["lives"].tolist() == [5, 5] and info["_lives"].all()
        lives = []
        for step in range(1500):
            info = envs.step(np.full(2, 1 if step % 50 == 0 else 0))[4]  # serve, then stand still
            assert info["_lives"].all()
            lives.append(info["lives"].tolist())
            if min(lives[-1]) < 5:
                break
        assert min(lives[-1]) == 4, f"no life lost in {len(lives)} steps"
    finally:
        envs.close()


def test_a_remote_must_run_the_options_asked_for() -> None:
    """Options reach a remote when it starts (serve --option); one given by address that
    runs others is refused with the serve line that would do."""
    with start_local("atari.Pong-v0", 1) as local:
        with pytest.raises(ValueError, match="--option repeat_action_probability=0.25"):
            gymnasium.make(PONG, remotes=local.address, repeat_action_probability=0.25)
        assert [p.poll() for p in local.processes] == [None]
    extra = ["--option", "repeat_action_probability=0.25", "--option", "full_action_space=true"]
    with start_local("atari.Pong-v0", 1, extra_args=extra) as local:
        env = gymnasium.make(PONG, remotes=local.address, repeat_action_probability=0.25,
                             full_action_space=True)
        try:
            assert env.action_space == gymnasium.spaces.Discrete(18)
        finally:
            env.close()


def test_ale_keywords_are_for_atari_ids_only() -> None:
    with pytest.raises(TypeError, match="repeat_action_probability.*for atari"):
        gymnasium.make("universe-remote/builtin.Catch-v0", repeat_action_probability=0.25)


def test_the_ale_view_answers_what_wrappers_read() -> None:
    env = gymnasium.make(PONG, mode="lockstep")
    try:
        obs, _ = env.reset(seed=0)
        unwrapped = env.unwrapped
        assert isinstance(unwrapped, RemoteAtariEnv) and unwrapped._frameskip == 1
        ale = unwrapped.ale
        assert isinstance(ale, ALEView)
        assert np.array_equal(ale.getScreenRGB(), obs) and ale.getScreenDims() == (210, 160)
        gray = np.empty((210, 160), np.uint8)
        assert ale.getScreenGrayscale(gray) is gray and np.array_equal(gray, grayscale(obs))
        assert ale.lives() == 0 and not ale.game_over()
        with pytest.raises(AttributeError, match="runs in the remote"):
            ale.cloneState()
    finally:
        env.close()


def test_grayscale_is_ale_s() -> None:
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)
    rng = np.random.default_rng(0)
    for game in ("pong", "breakout", "ms_pacman", "seaquest"):
        emulator = ALEInterface()
        emulator.loadROM(str(roms.get_rom_path(game)))
        actions = emulator.getMinimalActionSet()
        for step in range(600):
            emulator.act(actions[rng.integers(len(actions))])
            if step % 100 == 99:
                assert np.array_equal(grayscale(emulator.getScreenRGB()), emulator.getScreenGrayscale())
