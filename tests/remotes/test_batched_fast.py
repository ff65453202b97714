"""The batched lane's steady-state step (remotes/lockstep_fast.py) returns what the
general step returns: the same frames, rewards, ends and infos, step by step, across
autoresets, truncations and a killed process."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np
import pytest

from remotes import RemoteVectorEnv
from remotes.local import LocalRemotes
from rewarder.blocking import BlockingRewarder
from tests.remotes.test_batched_lane import BACK_WITHIN, EPISODE_STEPS, FRAMESKIP, KEYS, N, batched

__all__ = ["batched"]  # (the fixture: 8 Catch games in 2 processes of 4)

#: Steps of each run: a few hundred, with episodes of up to EPISODE_STEPS steps.
STEPS = 300
#: Info keys measured per connection (round trip, clock skew): not the same in two runs.
MEASURED = {"rewarder.rtt", "rewarder.clock_skew"}


def _env(local: LocalRemotes, fast: bool) -> RemoteVectorEnv:
    env = RemoteVectorEnv(local.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          frameskip=FRAMESKIP)
    core = env._core._lockstep.fast
    assert core is not None
    core.enabled = fast
    return env


def _fast_steps(env: RemoteVectorEnv) -> int:
    core = env._core._lockstep.fast
    assert core is not None
    return core.taken


#: Info keys that count on from run to run (a remote's episodes and frames): compared
#: from the run's reset on.
COUNTED = ("episode_id", "frame", "remote.frame")
#: Steps a test waits at most for one that goes the steady way (the first after a reset
#: may meet the describes that follow it; any may meet a remote's ping).
SETTLE_STEPS = 5


def _record(infos: dict[str, Any], first: dict[str, np.ndarray]) -> dict[str, Any]:
    """The infos as comparable values (counted ones from the run's reset on), their keys
    in order (the steady state builds them its own way)."""
    out: dict[str, Any] = {"(keys in order)": tuple(infos)}
    for key, value in infos.items():
        if key.lstrip("_") in MEASURED:
            out[key] = ("measured", type(value), getattr(value, "dtype", None), value.shape)
        elif key in COUNTED:
            out[key] = (value.dtype, np.where(infos[f"_{key}"], value - first[key], value).tolist())
        else:
            out[key] = (getattr(value, "dtype", None), value.tolist())
    return out


def _run(local: LocalRemotes, fast: bool) -> tuple[list[Any], int]:
    env = _env(local, fast)
    out = []
    try:
        obs, infos = env.reset(seed=11)
        first = {key: infos.get(key, infos["frame"]).copy() for key in COUNTED}
        rng = np.random.default_rng(5)
        for _ in range(STEPS):
            actions = [KEYS[k] for k in rng.integers(len(KEYS), size=N)]
            obs, rewards, terminated, truncated, infos = env.step(actions)
            out.append((hashlib.sha256(obs.tobytes()).hexdigest(), rewards.tolist(), terminated.tolist(),
                        truncated.tolist(), _record(infos, first)))
        return out, _fast_steps(env)
    finally:
        env.close()


def test_the_steady_state_step_returns_what_the_general_step_returns(batched: LocalRemotes) -> None:
    fast, taken = _run(batched, True)
    general, none = _run(batched, False)
    assert none == 0
    assert STEPS // 2 < taken < STEPS  # most steps; not the autoresets' (they go the general way)
    ends = sum(sum(t) + sum(u) for _, _, t, u, _ in fast)
    assert ends > STEPS // 10 and any(any(u) for _, _, _, u, _ in fast)  # both kinds of end
    for step, (a, b) in enumerate(zip(fast, general, strict=True)):
        assert a == b, f"step {step} differs"


@pytest.mark.parametrize("fast", [True, False], ids=["steady", "general"])
def test_a_killed_process_is_reported_as_the_general_step_reports_it(
    batched: LocalRemotes, fast: bool
) -> None:
    """Steps in the steady state, a process killed: the step that sees it reports each of
    its games lost (truncated, remote.error, its last frame kept) and the others as before;
    once they are back together the steps are the steady state's again. The general step
    alike (it used to hand back unwritten rows for remotes lost before their send)."""
    env = _env(batched, fast)
    try:
        env.reset(seed=2)
        for _ in range(5):
            last, *_ = env.step([[]] * N)
        assert (_fast_steps(env) >= 4) is fast
        victims = batched.siblings(0)
        batched.kill(0)
        obs, rewards, _, truncated, infos = env.step([[]] * N)
        assert np.array_equal(obs[victims], last[victims])  # a lost remote keeps its last frame
        lost = [i for i in range(N) if not infos["remote.connected"][i]]
        assert lost == victims
        assert truncated[victims].all() and not truncated[4:].any()
        assert infos["_remote.error"][victims].all() and not infos["_remote.error"][4:].any()
        assert all(isinstance(e, str) and e for e in infos["remote.error"][victims])
        assert infos["remote.connected"][4:].all() and (rewards[victims] == 0).all()
        batched.restart(0)
        deadline = time.monotonic() + BACK_WITHIN
        while True:
            assert time.monotonic() < deadline
            _, _, terminated, truncated, infos = env.step([[]] * N)
            if infos.get("remote.reconnected", np.zeros(N, bool))[victims].any():
                assert infos["remote.reconnected"][victims].all()  # together
                break
        back = _fast_steps(env)
        ended = bool(terminated.any() or truncated.any())
        steady = 0  # steps that neither end an episode nor follow an end (those go the general way)
        for _ in range(8):
            before = ended
            _, _, terminated, truncated, infos = env.step([[]] * N)
            assert infos["remote.connected"].all()
            ended = bool(terminated.any() or truncated.any())
            steady += not (before or ended)
        assert steady >= 2  # (the two processes' episodes end about 20 steps apart)
        taken = _fast_steps(env) - back
        if fast:  # the steady state again (a step that meets the describes after the
            # reconnect's reset, or a remote's ping, goes the general way: one may)
            assert taken >= steady - 1 >= 1
        else:
            assert taken == 0
    finally:
        env.close()


@pytest.mark.parametrize("bad", [[("KeyEvent", "Left", 1)], [("PointerEvent", 1.0, 2, 0)], [["KeyEvent"]]])
def test_an_action_checked_once_is_not_taken_for_an_equal_bad_one(batched: LocalRemotes, bad: Any) -> None:
    """Checked actions are remembered by the identity of their events, not by equality:
    ``("KeyEvent", "Left", 1)`` equals a valid ``("KeyEvent", "Left", True)`` yet is refused."""
    env = _env(batched, True)
    try:
        env.reset(seed=3)
        good = [("KeyEvent", "Left", True)] if bad[0][0] == "KeyEvent" else [("PointerEvent", 1, 2, 0)]
        env.step([good] * N)
        with pytest.raises(ValueError, match="remote 3"):
            env.step([good] * 3 + [bad] + [good] * (N - 4))
    finally:
        env.close()


def test_a_steady_step_interrupted_between_two_replies_is_returned_by_the_next(
    batched: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the steady step waits for its second process's reply, the first's
    taken already: the next step returns the interrupted one's frames (one step on, no
    remote lost, nothing sent twice), and the steps after it are the steady state's again.
    (Any step may go the general way when something else came on a connection: the
    describes after a reset, a remote's ping: so the steady state is waited for, bounded.)"""
    env = _env(batched, True)
    try:
        env.reset(seed=6)
        for _ in range(SETTLE_STEPS):
            env.step([[]] * N)
            if _fast_steps(env):
                break
        steady = _fast_steps(env)
        assert steady >= 1
        before = [slot.returned for slot in env._core.slots]
        take = BlockingRewarder.take_raw
        taken: list[BlockingRewarder] = []

        def interrupted(channel: BlockingRewarder, *args: Any, **kwargs: Any) -> Any:
            taken.append(channel)
            if len(taken) == 2:  # (the second process's reply: the first's is in)
                raise KeyboardInterrupt
            return take(channel, *args, **kwargs)

        monkeypatch.setattr(BlockingRewarder, "take_raw", interrupted)
        with pytest.raises(KeyboardInterrupt):
            env.step([[]] * N)
        monkeypatch.undo()
        _, _, terminated, truncated, infos = env.step([[]] * N)
        assert infos["remote.connected"].all() and not (terminated.any() or truncated.any())
        assert [int(f) for f in infos["frame"]] == [f + FRAMESKIP for f in before]  # type: ignore[operator]
        assert _fast_steps(env) == steady  # (that one went the general way)
        for k in range(2, SETTLE_STEPS + 2):  # the steady state again, one frame step a step
            _, _, _, _, infos = env.step([[]] * N)
            assert [int(f) for f in infos["frame"]] == [f + k * FRAMESKIP for f in before]  # type: ignore[operator]
            if _fast_steps(env) > steady:
                break
        assert _fast_steps(env) == steady + 1
    finally:
        env.close()


def test_a_ping_between_steady_steps_shows_in_the_next_steady_steps_round_trip(batched: LocalRemotes) -> None:
    """The steady step reads a connection's round trip and clock skew again only after a
    ping set them: the next steady step's info shows the new ones, the steps before the old."""
    env = _env(batched, True)
    try:
        env.reset(seed=4)
        for _ in range(SETTLE_STEPS):
            *_, infos = env.step([[]] * N)
            if _fast_steps(env):
                break
        channel = env._core.slots[5].session.lockstep_channel
        assert channel is not None and _fast_steps(env)
        old = channel.rtt
        assert infos["rewarder.rtt"][5] == old
        rtt = channel.ping()
        assert rtt != old
        for _ in range(SETTLE_STEPS):
            steady = _fast_steps(env)
            *_, infos = env.step([[]] * N)
            if _fast_steps(env) > steady:
                break
        assert _fast_steps(env) > steady
        assert infos["rewarder.rtt"][5] == rtt and infos["rewarder.clock_skew"][5] == channel.clock_skew
    finally:
        env.close()
