"""``remotes.vector.batch_infos`` gives exactly what gymnasium's ``VectorEnv._add_info``
gives for the same per-env infos (no sockets)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from remotes.vector import batch_infos


def gymnasium_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    env = VectorEnv()
    env.num_envs = len(infos)
    out: dict[str, Any] = {}
    for i, info in enumerate(infos):
        out = env._add_info(out, info, i)
    return out


def assert_same(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs)
        for key in theirs:
            assert_same(ours[key], theirs[key])
        return
    assert type(ours) is type(theirs)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    if ours.dtype == object:
        for a, b in zip(ours, theirs, strict=True):
            assert a is b or (isinstance(a, np.ndarray) and np.array_equal(a, b)) or a == b
    else:
        assert np.array_equal(ours, theirs)


def test_batch_infos_matches_gymnasium() -> None:
    frame = np.arange(6, dtype=np.uint8).reshape(2, 3)
    infos = [
        {"episode_id": 3, "score": 1.5, "remote.stalled": False, "text": ["hi"], "frame": 10,
         "rewarder.clock_skew": (-0.1, 0.2), "env_state": "running"},
        {"episode_id": 7, "remote.error": "connection lost", "remote.connected": False,
         "flag": np.bool_(True), "count": np.int32(4)},
        {"final_obs": frame, "final_info": {"episode_id": 2, "misses": 5}, "episode_id": 8,
         "score": 2, "pixels": frame},
        {},
    ]
    assert_same(batch_infos(infos, 4), gymnasium_infos(infos))


def test_no_infos_batch_to_nothing() -> None:
    assert batch_infos([{}, {}], 2) == {}


def test_keys_every_env_has_batch_as_gymnasium_does() -> None:
    """The usual step: every env gives every key (batched in one go), values mixed in type
    as gymnasium's first-value rule casts them."""
    infos = [
        {"episode_id": 3, "score": 1, "remote.connected": True, "rtt": 0.25, "text": [], "big": 2},
        {"episode_id": 4, "score": 2.75, "remote.connected": False, "rtt": 1, "text": ["a"], "big": True},
        {"episode_id": 5, "score": -1, "remote.connected": True, "rtt": 0.5, "text": [], "big": 0},
    ]
    assert_same(batch_infos(infos, 3), gymnasium_infos(infos))
