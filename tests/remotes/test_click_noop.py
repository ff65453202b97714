"""Click spaces with a no-op: ``DiscreteClicks(..., noop=True)`` is ``Discrete(points + 1)``
whose action 0 sends the remote no event at all — checked in what the remote itself
recorded (``serve --record``) — while the step still advances, in lockstep and in real
time; action *i* clicks point *i - 1*. MiniWoB's ids get this layout from ``make``;
ClickTarget's keep theirs (no no-op, point *i* at action *i*)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pytest
from gymnasium import spaces

from recordings import open_recording
from remotes import DiscreteClicks, RemoteEnv, RemoteVectorEnv, VectorDiscreteClicks, start_local
from remotes.registration import CLICK_TARGET_CELL, MINIWOB_CELL, action_wrapper, click_points
from remotes.wrappers import NOOP
from runtimes import registry

ENV_ID: Final = "builtin.ClickTarget-v0"
#: A seed whose target some grid point hits (test_registration tries the first eight).
SEED: Final = 3
#: Frames a lockstep step advances.
FRAMESKIP: Final = 3
#: No-op steps taken before the click, and after it (real time: the reward may come a
#: step or two after the click that earned it).
NOOPS_BEFORE: Final = 4
STEPS_AFTER: Final = 6


def hitting_point(points: list[tuple[int, int]]) -> int:
    """The index of a point that hits the target ClickTarget shows after reset(SEED)."""
    runtime = registry.make(ENV_ID)
    runtime.reset(SEED)
    hits = [i for i, (x, y) in enumerate(points) if runtime.on_target(x, y)]
    assert hits, "no grid point hits the target of SEED: pick another seed"
    return hits[0]


@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
def test_action_0_sends_nothing_and_the_step_still_advances(mode: str, tmp_path: Path) -> None:
    record = tmp_path / "rec"
    with start_local(ENV_ID, 1, extra_args=["--record", str(record), "--mode", mode]) as local:
        env = RemoteEnv(local.addresses[0], mode=mode, frameskip=FRAMESKIP if mode == "lockstep" else 1)
        try:
            width, height = env.remote.screen_size
            points = click_points((0, 0, width, height), CLICK_TARGET_CELL)
            clicks = DiscreteClicks(env, points, noop=True)
            assert clicks.action_space == spaces.Discrete(len(points) + 1)
            assert clicks.action(NOOP) == []
            hit = hitting_point(points)
            x, y = points[hit]
            assert clicks.action(hit + 1)[1] == ("PointerEvent", x, y, 1)  # point i is action i + 1
            with pytest.raises(ValueError, match="not in Discrete"):
                clicks.action(len(points) + 1)
            _, info = clicks.reset(seed=SEED)
            frames = [info["frame"]]
            for _ in range(NOOPS_BEFORE):
                _, reward, terminated, truncated, info = clicks.step(NOOP)
                assert (reward, terminated, truncated) == (0.0, False, False)
                frames.append(info["frame"])
            if mode == "lockstep":  # each no-op step advanced exactly FRAMESKIP frames
                assert np.diff(frames).tolist() == [FRAMESKIP] * NOOPS_BEFORE
            else:  # a busy machine may return one frame twice, never go back or stand still
                assert all(b >= a for a, b in zip(frames, frames[1:], strict=False))
                assert frames[-1] > frames[0]
            _, total, *_ = clicks.step(hit + 1)
            for _ in range(STEPS_AFTER):
                total += clicks.step(NOOP)[1]
            assert total == 1.0  # the click hit: action hit + 1 is points[hit]
        finally:
            env.close()
    # What the remote applied, frame by frame: the click's three pointer events, nothing else.
    recording = open_recording(record)
    steps = [step for episode in recording for step in episode.steps]
    applied = [(e.kind, *e.args) for step in steps for e in step.events]
    assert applied == [("PointerEvent", x, y, 0), ("PointerEvent", x, y, 1), ("PointerEvent", x, y, 0)]
    clicked = next(i for i, step in enumerate(steps) if step.events)
    assert steps[clicked - 1].frame - steps[0].frame >= NOOPS_BEFORE  # the no-ops advanced first


def test_miniwob_gets_the_no_op_first_and_click_target_keeps_its_layout() -> None:
    """The layout each family gets from make (built here over a ClickTarget remote, with a
    MiniWoB describe: the browser test is test_instruction's)."""
    with start_local(ENV_ID, 1, extra_args=["--mode", "lockstep"]) as local:
        env = RemoteEnv(local.addresses[0], mode="lockstep")
        try:
            task_area = [0, 0, 160, 210]
            describe = {"task_area": task_area, "width": 160, "height": 210}
            wrap = action_wrapper("miniwob.ClickTest-v0", describe)
            assert wrap is not None
            miniwob = wrap(env)
            points = click_points(task_area, MINIWOB_CELL)
            assert len(points) == 16 * 21
            assert miniwob.action_space == spaces.Discrete(len(points) + 1)
            assert miniwob.action(0) == []
            assert miniwob.action(1)[1] == ("PointerEvent", *points[0], 1)
            width, height = env.remote.screen_size
            wrap = action_wrapper(ENV_ID, {"width": width, "height": height})
            assert wrap is not None
            target = wrap(env)
            grid = click_points((0, 0, width, height), CLICK_TARGET_CELL)
            assert target.action_space == spaces.Discrete(len(grid))
            assert target.action(0)[1] == ("PointerEvent", *grid[0], 1)
        finally:
            env.close()


def test_vector_clicks_send_nothing_for_action_0() -> None:
    with start_local(ENV_ID, 2, extra_args=["--mode", "lockstep"]) as local:
        venv = RemoteVectorEnv(local.address, mode="lockstep", frameskip=FRAMESKIP)
        try:
            clicks = DiscreteClicks.grid(venv, 4, 3, noop=True)
            assert isinstance(clicks, VectorDiscreteClicks)
            assert clicks.single_action_space == spaces.Discrete(13)
            assert clicks.action_space == spaces.MultiDiscrete([13, 13])
            x, y = clicks.points[4]
            assert clicks.actions([0, 5]) == [
                [], [("PointerEvent", x, y, 0), ("PointerEvent", x, y, 1), ("PointerEvent", x, y, 0)],
            ]
            with pytest.raises(ValueError, match="not in Discrete"):
                clicks.actions([13, 0])
            _, info = clicks.reset(seed=0)
            before = info["frame"].copy()
            _, rewards, terminated, truncated, info = clicks.step(np.array([0, 0]))
            assert (info["frame"] - before).tolist() == [FRAMESKIP, FRAMESKIP]
            assert not rewards.any() and not terminated.any() and not truncated.any()
        finally:
            venv.close()
