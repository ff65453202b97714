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
