"""Real-time batches handed out in arrays written again once nobody holds them
(remotes.lane.Outputs, issue 44): a held observation is never written, however it is
held; a dropped one is; with real local remotes through RemoteVectorEnv."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pytest

from remotes import RemoteVectorEnv, start_local
from remotes.lane import KEPT_OUTPUTS, Outputs
from remotes.local import LocalRemotes

#: Remotes of the vector; steps taken while observations are held.
REMOTES: Final = 2
STEPS: Final = 12
#: Steps of the mirror test, and of its episodes (truncated: Catch's last a minute).
MIRROR_STEPS: Final = 150
EPISODE_STEPS: Final = 25


def test_a_dropped_array_is_written_again_a_held_one_never() -> None:
    outputs = Outputs()
    frames = np.zeros((2, 3, 4, 3), np.uint8)
    first = outputs.copy(frames)
    first_id = id(first)
    del first
    frames += 1
    again = outputs.copy(frames)
    assert id(again) == first_id and np.array_equal(again, frames)
    for keep in (lambda a: a[0], memoryview, weakref.ref, lambda a: a):
        held_by = keep(again)
        before = again.copy()
        frames += 1
        other = outputs.copy(frames)
        assert other is not again and np.array_equal(again, before)
        del held_by, other
    again.flags.writeable = False  # read-only, then dropped: left alone
    read_only = id(again)
    del again
    assert all(id(outputs.copy(frames)) != read_only for _ in range(KEPT_OUTPUTS + 1))


def test_a_new_shape_gets_a_new_array() -> None:
    outputs = Outputs()
    small = outputs.copy(np.zeros((1, 2, 2, 3), np.uint8))
    small_id = id(small)
    del small
    big = outputs.copy(np.ones((1, 4, 4, 3), np.uint8))
    assert id(big) != small_id and big.shape == (1, 4, 4, 3) and big.all()


def _array(held: Any) -> np.ndarray:
    return np.asarray(held() if isinstance(held, weakref.ref) else held)


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", REMOTES) as local:
        yield local


def test_held_observations_stay_as_returned_and_dropped_ones_are_reused(catch: LocalRemotes) -> None:
    """Observations kept by name, by a view, as a memoryview, by a weak reference, are
    what they were when returned, after many more steps of frames that change; the
    observations a loop drops come back as the same few arrays (before: a new one each
    step)."""
    env = RemoteVectorEnv(catch.address)
    try:
        env.reset(seed=0)
        none = [[] for _ in range(REMOTES)]
        kept: list[tuple[Any, np.ndarray]] = []
        for holder in (lambda a: a, lambda a: a[1], memoryview, weakref.ref):
            obs = env.step(none)[0]
            held = holder(obs)
            kept.append((held, np.array(_array(held), copy=True)))
            del obs, held
        later = [env.step(none)[0].copy() for _ in range(STEPS)]
        for held, when in kept:
            assert np.array_equal(_array(held), when), "a held observation was written"
        assert any(not np.array_equal(later[0], frame) for frame in later[1:]), "frames never changed"
        seen = {id(env.step(none)[0]) for _ in range(STEPS)}
        assert len(seen) <= KEPT_OUTPUTS, f"{len(seen)} arrays for {STEPS} dropped observations"
    finally:
        env.close()


def test_each_returned_frame_is_the_remotes_frame_of_that_number(catch: LocalRemotes) -> None:
    """A batch row is copied rectangle by rectangle from what VNC updates wrote since the
    row last showed that framebuffer (remotes.slot.FrameGate.mirror): over steps with
    actions and episode ends (autoresets), every row equals the agent's VNC framebuffer whenever that
    shows the very frame (number and episode) the step returned."""
    env = RemoteVectorEnv(catch.address, max_episode_steps=EPISODE_STEPS)
    try:
        env.reset(seed=1)
        env.single_action_space.seed(1)
        sessions = env._core.lane.sessions  # (the frames VNC applied: the ground truth)
        compared = ends = 0
        for _ in range(MIRROR_STEPS):
            obs, _, terminated, truncated, info = env.step(
                [env.single_action_space.sample() for _ in range(REMOTES)])
            ends += int(np.sum(terminated | truncated))
            for i, session in enumerate(sessions):
                vnc = session.vnc
                tag = vnc.tag if vnc is not None else None
                returned = (info["frame"][i], info["episode_id"][i])
                if tag is not None and (tag.frame, tag.episode_id) == returned:
                    assert np.array_equal(obs[i], vnc.framebuffer), f"remote {i}, frame {tag.frame}"
                    compared += 1
        assert compared >= MIRROR_STEPS, f"only {compared} rows could be compared"
        assert ends >= REMOTES * (MIRROR_STEPS // EPISODE_STEPS - 1), "too few episodes ended"
    finally:
        env.close()
