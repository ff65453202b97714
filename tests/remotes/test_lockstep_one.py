"""A lone remote's steady step (remotes/lockstep_one.py) returns what the general step
returns: the same frames, rewards, ends and infos, step by step, across episode ends,
truncations, a text heard before a reply and a refused action; anything unusual goes
the general way."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from remotes import RemoteEnv, start_local
from remotes.local import LocalRemotes
from remotes.lockstep_one import FastOne
from rewarder.blocking import BlockingRewarder

#: Steps of each run, frames a step spans (a ball falls in about 4 steps), steps an
#: episode may take before it is truncated: both ends come in a run.
STEPS = 240
EPISODE_STEPS = 26
FRAMESKIP = 30
KEYS = ([("KeyEvent", "Left", True)], [("KeyEvent", "Left", False)], [("KeyEvent", "Right", True)],
        [("KeyEvent", "Right", False)], [])
#: Info keys measured per connection (round trip, clock skew): not the same in two runs.
MEASURED = {"rewarder.rtt", "rewarder.clock_skew"}
#: Info keys that count on from run to run: compared from the run's reset on.
COUNTED = ("episode_id", "frame", "remote.frame")
#: Steps after a reset before one surely went the steady way (the first may meet the
#: describes that follow the reset).
SETTLE_STEPS = 4


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 1, extra_args=["--mode", "lockstep"]) as local:
        yield local


def _fast(env: RemoteEnv) -> FastOne:
    fast = env._core._lockstep.fast
    assert isinstance(fast, FastOne)
    return fast


def _run(local: LocalRemotes, fast: bool) -> tuple[list[Any], int]:
    env = RemoteEnv(local.addresses[0], mode="lockstep", frameskip=FRAMESKIP,
                    max_episode_steps=EPISODE_STEPS)
    _fast(env).enabled = fast
    out: list[Any] = []
    try:
        _, info = env.reset(seed=3)
        first = {key: info.get(key, info["frame"]) for key in COUNTED}
        rng = np.random.default_rng(7)
        for _ in range(STEPS):
            obs, reward, terminated, truncated, info = env.step(KEYS[rng.integers(len(KEYS))])
            seen = {key: (value - first[key] if key in COUNTED else
                          "measured" if key in MEASURED else value) for key, value in info.items()}
            out.append((hashlib.sha256(obs.tobytes()).hexdigest(), reward, terminated, truncated,
                        tuple(info), seen))
            if terminated or truncated:
                _, info = env.reset(seed=len(out))
                first = {key: info.get(key, info["frame"]) for key in COUNTED}
                out.append(("reset", info["episode_id"] - first["episode_id"]))
        return out, _fast(env).taken
    finally:
        env.close()


def test_the_lone_remotes_steady_step_returns_what_the_general_step_returns(catch: LocalRemotes) -> None:
    fast, taken = _run(catch, True)
    general, none = _run(catch, False)
    assert none == 0 and taken >= STEPS * 3 // 4  # (the first after a reset may meet its describe)
    assert any(step[2] for step in fast if len(step) > 2) and any(step[3] for step in fast if len(step) > 2)
    for i, (mine, theirs) in enumerate(zip(fast, general, strict=True)):
        assert mine == theirs, f"step {i}"


def test_a_step_interrupted_before_its_reply_is_returned_by_the_next(
    catch: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the steady step waits for its reply: the next step returns it (one step
    on, nothing sent twice, the remote kept), and the steps after it are steady again."""
    env = RemoteEnv(catch.addresses[0], mode="lockstep", frameskip=FRAMESKIP)
    fast = _fast(env)
    try:
        env.reset(seed=4)
        for _ in range(SETTLE_STEPS):
            _, _, _, _, info = env.step([])
        steady = fast.taken
        assert steady >= 1
        take = BlockingRewarder.take_raw

        def interrupted(channel: BlockingRewarder, *args: Any, **kwargs: Any) -> Any:
            raise KeyboardInterrupt

        monkeypatch.setattr(BlockingRewarder, "take_raw", interrupted)
        with pytest.raises(KeyboardInterrupt):
            env.step([])
        monkeypatch.setattr(BlockingRewarder, "take_raw", take)
        _, _, terminated, truncated, after = env.step([])
        assert after["remote.connected"] and not (terminated or truncated)
        assert after["frame"] == info["frame"] + FRAMESKIP  # the interrupted step's reply
        assert fast.taken == steady  # (that one went the general way)
        _, _, _, _, last = env.step([])
        assert last["frame"] == info["frame"] + 2 * FRAMESKIP and fast.taken == steady + 1
    finally:
        env.close()


def test_a_killed_remote_is_reported_as_the_general_step_reports_it(catch: LocalRemotes) -> None:
    """The remote killed between steady steps: the step that sees it ends the episode
    (truncated, ``remote.error``, the last frame kept), as the general step reports it."""
    env = RemoteEnv(catch.addresses[0], mode="lockstep", frameskip=FRAMESKIP)
    fast = _fast(env)
    try:
        env.reset(seed=5)
        for _ in range(SETTLE_STEPS):
            last, *_ = env.step([])
        assert fast.taken >= 1
        catch.kill(0)
        obs, reward, terminated, truncated, info = env.step([])
        assert truncated and not terminated and reward == 0
        assert not info["remote.connected"] and isinstance(info["remote.error"], str) and info["remote.error"]
        assert np.array_equal(obs, last)
    finally:
        env.close()
        catch.restart(0)
