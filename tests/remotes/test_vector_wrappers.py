"""The action wrappers over a RemoteVectorEnv: ``DiscreteKeys(vector_env, ...)`` and the
others give their vector forms, translate each env's action as the single-env wrapper
would, and forget held keys when an env's episode ends (the remote released them)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from gymnasium import spaces

from remotes import (
    DiscreteClicks,
    DiscreteKeys,
    PointerBox,
    RemoteVectorEnv,
    VectorDiscreteClicks,
    VectorDiscreteKeys,
    VectorPointerBox,
    start_local,
)

COMBOS = [[], ["left"], ["right"]]


@pytest.fixture(scope="module")
def venv() -> Iterator[RemoteVectorEnv]:
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"]) as local:
        envs = RemoteVectorEnv(local.address, mode="lockstep", frameskip=4)
        yield envs
        envs.close()


def test_discrete_keys_holds_each_envs_combination(venv: RemoteVectorEnv) -> None:
    keys = DiscreteKeys(venv, COMBOS)
    assert isinstance(keys, VectorDiscreteKeys)
    assert keys.action_space == spaces.MultiDiscrete([3, 3])
    keys.reset(seed=0)
    assert keys.actions([1, 2]) == [[("KeyEvent", "Left", True)], [("KeyEvent", "Right", True)]]
    assert keys.actions([2, 2]) == [[("KeyEvent", "Left", False), ("KeyEvent", "Right", True)], []]
    with pytest.raises(ValueError, match="not in MultiDiscrete"):
        keys.actions([3, 0])


def test_held_keys_are_forgotten_when_an_episode_ends(venv: RemoteVectorEnv) -> None:
    keys = DiscreteKeys(venv, COMBOS)
    keys.reset(seed=1)
    first = None
    for _ in range(2000):  # Catch ends after 5 misses: ~200 steps of 4 frames
        obs, _, terminated, truncated, _ = keys.step(np.array([1, 1]))
        assert obs.shape == (2, 210, 160, 3)
        if first is None:
            first = obs.copy()
        ended = np.logical_or(terminated, truncated)
        if ended.any():
            break
    else:
        pytest.fail("no episode ended")
    i = int(np.flatnonzero(ended)[0])
    # The autoreset step drops env i's action; the step after presses Left again.
    assert keys.actions([1, 1])[i] == []
    keys.step(np.array([1, 1]))
    assert keys.actions([1, 1])[i] == [("KeyEvent", "Left", True)]


def test_clicks_and_pointer_boxes_over_many_envs(venv: RemoteVectorEnv) -> None:
    clicks = DiscreteClicks.grid(venv, 2, 1)
    assert isinstance(clicks, VectorDiscreteClicks)
    assert clicks.points == [(40, 105), (120, 105)]
    assert clicks.actions([1, 0])[0] == [("PointerEvent", 120, 105, 0), ("PointerEvent", 120, 105, 1),
                                         ("PointerEvent", 120, 105, 0)]
    box = PointerBox(venv)
    assert isinstance(box, VectorPointerBox) and box.action_space.shape == (2, 3)
    assert box.actions(np.array([[10, 20, 1], [500, -5, 0]])) == [
        [("PointerEvent", 10, 20, 1)], [("PointerEvent", 159, 0, 0)],
    ]
