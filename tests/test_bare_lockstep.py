"""The bare design ``lockstep_peers`` measures ours against (benchmarks/bare_lockstep.py):
its servers step their games, hand fresh frames over, and leave no process or file behind."""

from __future__ import annotations

import os

import numpy as np

from tests.optional import need_extra

need_extra("atari")

from benchmarks.bare_lockstep import SEGMENT_PREFIX, SHAPE, bare_vector  # noqa: E402 (after the skip)

#: Steps taken: Pong's first frames hardly change; its ball is served within these.
STEPS = 120


def _segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"{SEGMENT_PREFIX}{os.getpid()}-")}


def test_the_bare_design_steps_its_games_into_fresh_batches_and_leaves_nothing_behind() -> None:
    processes = min(2, os.cpu_count() or 1)  # (start_local's lockstep packing: a process a core)
    with bare_vector(2) as (step, pids):
        assert len(pids) == processes and len(_segments()) == processes
        first, _ = step([0, 0])
        assert first.shape == (2, *SHAPE) and first.dtype == np.uint8 and first.any()
        batches = [step([2, 3])[0] for _ in range(STEPS)]
        assert all(b is not a for a, b in zip(batches, batches[1:], strict=False))  # a new batch each step
        assert not np.array_equal(batches[-1], first)  # the games moved
        _, rewards = step([0, 0])
        assert rewards.shape == (2,)
    assert not _segments()
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)  # (ended and reaped)
