"""One request per remote process per lockstep vector step (issue 40, remotes/batched.py,
envserver/batch.py): a batched vector steps exactly as single remotes do, each game of a
batched process still looks like a normal remote to whoever else watches it, and a
process that dies is reported for all of its games in the step that sees it."""

from __future__ import annotations

import asyncio
import hashlib
import select
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from remotes import RemoteVectorEnv, start_local
from remotes.local import LocalRemotes
from rewarder.blocking import BlockingRewarder
from rewarder.shm_slots import SlotReader
from tests.wire import WireClient
from vncdriver.client import VNCClient

N = 8
GAMES = 4
#: Steps of the comparison run, frames a step spans (a ball falls in about 4 steps) and
#: each episode's step limit (Catch's own episodes, 5 misses, end sooner or later than
#: that: both kinds of end happen many times).
STEPS = 2_000
FRAMESKIP = 30
EPISODE_STEPS = 30
LOCKSTEP = ("--mode", "lockstep")
#: Seconds a restarted process may take to be back (a process start on a loaded machine).
BACK_WITHIN = 60.0
KEYS = [[("KeyEvent", "Left", True)], [("KeyEvent", "Left", False)],
        [("KeyEvent", "Right", True)], [("KeyEvent", "Right", False)], []]


@pytest.fixture(scope="module")
def batched() -> Iterator[LocalRemotes]:
    """8 Catch games in 2 processes of 4."""
    with start_local("builtin.Catch-v0", N, extra_args=LOCKSTEP, games_per_process=GAMES) as local:
        assert len(local.processes) == N // GAMES
        yield local


class Counted:
    """Counts the batch requests this process sends (each goes through ``send_batch_steps``),
    those that ask for a sealed memfd and those that name the vector's own buffer for the
    frames, and the segment readers that map one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent = self.memfd = self.into = 0
        #: Each segment reader's :attr:`SlotReader.mapped` as it was opened.
        self.mapped: list[bool] = []
        send = BlockingRewarder.send_batch_steps
        made = SlotReader.__init__

        def counted(channel: BlockingRewarder, steps: bytes, memfd: bool = False,
                    into: bytes | None = None) -> int:
            self.sent += 1
            self.memfd += memfd
            self.into += into is not None
            return send(channel, steps, memfd, into)

        def kept(reader: SlotReader, *args: Any, **kwargs: Any) -> None:
            made(reader, *args, **kwargs)
            self.mapped.append(reader.mapped)

        monkeypatch.setattr(BlockingRewarder, "send_batch_steps", counted)
        monkeypatch.setattr(SlotReader, "__init__", kept)


def _run(addresses: Any, steps: int) -> list[tuple[bytes, bytes, bytes, bytes]]:
    """What a vector over ``addresses`` returns for a fixed sequence of actions."""
    env = RemoteVectorEnv(addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS, frameskip=FRAMESKIP)
    out = []
    try:
        obs, _ = env.reset(seed=11)
        out.append((hashlib.sha256(obs.tobytes()).digest(), b"", b"", b""))
        rng = np.random.default_rng(5)
        for _ in range(steps):
            actions = [KEYS[k] for k in rng.integers(len(KEYS), size=N)]
            obs, rewards, terminated, truncated, infos = env.step(actions)
            assert infos["remote.connected"].all()
            out.append((hashlib.sha256(obs.tobytes()).digest(), rewards.tobytes(),
                        terminated.tobytes(), truncated.tobytes()))
    finally:
        env.close()
    return out


def test_a_batched_vector_steps_as_single_remotes_do(
    batched: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = Counted(monkeypatch)
    through_batches = _run(batched.addresses, STEPS)
    assert counted.sent >= STEPS  # (2 processes: most steps are 2 batches, autoreset steps fewer)
    # Each process's first segment is a file reached through /proc; then the agent asks
    # for a sealed memfd, maps it, and reads every later batch's frames out of it.
    assert counted.memfd >= counted.sent - N // GAMES
    first = N // GAMES
    assert counted.mapped[:first] == [False] * first
    assert counted.mapped[first:] and all(counted.mapped[first:])
    sent = counted.sent
    with start_local("builtin.Catch-v0", N, extra_args=LOCKSTEP, games_per_process=1) as single:
        one_by_one = _run(single.addresses, STEPS)
    assert counted.sent == sent  # a process of one game is never batched
    ends = sum(np.frombuffer(t, bool).sum() + np.frombuffer(u, bool).sum()
               for _, _, t, u in through_batches[1:])
    assert ends > STEPS // 4  # episodes of 25 to 30 steps, on every remote
    assert {np.frombuffer(t, bool).any() for _, _, t, _ in through_batches[1:]} == {True, False}
    assert {np.frombuffer(u, bool).any() for _, _, _, u in through_batches[1:]} == {True, False}
    assert len({r for _, r, _, _ in through_batches}) > 10  # rewards of both signs, in many places
    for step, (batch, single_step) in enumerate(zip(through_batches, one_by_one, strict=True)):
        assert batch == single_step, f"step {step} differs"


async def test_an_observer_and_a_vnc_viewer_of_a_batched_game_see_a_normal_remote(
    batched: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Universe-style observer hears every reward of game 1 (as v0.env.reward) and a VNC
    viewer ends on the frame the agent stepped to, while the vector steps in batches."""
    counted = Counted(monkeypatch)
    address = batched.addresses[1]
    observer = await WireClient.open(address.rewarder_port, observer=True)
    viewer = VNCClient(f"127.0.0.1::{address.vnc_port}", encoding="raw", frame_tags=True)
    await viewer.start()
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          frameskip=FRAMESKIP)
    try:
        def steps() -> tuple[np.ndarray, list[float], list[str], int]:
            env.reset(seed=4)
            rewards, episodes = [], []
            rng = np.random.default_rng(1)
            for _ in range(120):
                actions = [KEYS[k] for k in rng.integers(len(KEYS), size=N)]
                obs, reward, terminated, truncated, infos = env.step(actions)
                if reward[1]:
                    rewards.append(float(reward[1]))
                    episodes.append(str(infos["episode_id"][1]))
            return obs[1].copy(), rewards, episodes, int(infos["frame"][1])

        last_obs, rewards, episodes, frame = await asyncio.to_thread(steps)
        assert counted.sent > 200 and rewards
        await observer.send("v0.control.ping")
        pong = await observer.recv_until("v0.reply.control.ping")  # after every earlier reward
        heard = [m for m in observer.seen if m["method"] == "v0.env.reward"]
        assert [m["body"]["reward"] for m in heard] == rewards
        assert [m["headers"]["episode_id"] for m in heard] == episodes
        assert not [m for m in observer.seen if m["method"] == "v0.reply.error"], pong
        async with asyncio.timeout(10):
            while viewer.tag is None or viewer.tag.frame < frame:
                await viewer.wait_update(viewer.updates)
        assert viewer.tag.frame == frame and np.array_equal(viewer.frame(), last_obs)
    finally:
        await asyncio.to_thread(env.close)
        await viewer.close()
        await observer.close()


def test_a_killed_process_is_lost_for_each_of_its_games_at_once_and_they_come_back_together(
    batched: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = Counted(monkeypatch)
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS)
    try:
        env.reset(seed=2)
        for _ in range(5):
            env.step([[]] * N)
        assert counted.sent >= 10
        victims = batched.siblings(0)
        assert victims == [0, 1, 2, 3]
        batched.kill(0)
        _, _, _, truncated, infos = env.step([[]] * N)
        lost = [i for i in range(N) if not infos["remote.connected"][i]]
        assert lost == victims  # in the step that saw it, every game of the process
        assert truncated[victims].all() and infos["remote.connected"][4:].all()
        batched.restart(0)  # (returns once the process answers)
        back: list[list[int]] = []
        deadline = time.monotonic() + BACK_WITHIN
        while sum(map(len, back)) < len(victims):
            assert time.monotonic() < deadline, f"back so far: {back}"
            _, _, _, _, infos = env.step([[]] * N)
            came = [i for i in victims if infos.get("remote.reconnected", np.zeros(N, bool))[i]]
            if came:
                back.append(came)
        assert back == [victims]  # together, in one step
        sent = counted.sent
        for _ in range(5):
            _, _, _, _, infos = env.step([[]] * N)
            assert infos["remote.connected"].all()
        assert counted.sent >= sent + 8  # batched again (2 batches a step but for autoresets)
    finally:
        env.close()


def test_step_async_lets_the_remotes_step_while_the_agent_works(batched: LocalRemotes) -> None:
    """step_async() sends and returns; the replies are in before step_wait() asks (the
    remotes stepped meanwhile), and the results are step()'s for the same seeds and actions."""
    from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

    def run(split: bool) -> list[tuple[bytes, bytes, bytes, bytes]]:
        env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                              frameskip=FRAMESKIP)
        out = []
        try:
            env.reset(seed=9)
            rng = np.random.default_rng(3)
            for _ in range(80):
                actions = [KEYS[k] for k in rng.integers(len(KEYS), size=N)]
                if split:
                    env.step_async(actions)
                    with pytest.raises(AlreadyPendingCallError):
                        env.step(actions)
                    lead = env.sessions[4].lockstep_channel  # (process 1's batch: remote 4 leads)
                    assert lead is not None
                    readable, _, _ = select.select([lead.fileno()], [], [], 10)
                    assert readable  # its reply came while this thread did nothing with the env
                    obs, rewards, terminated, truncated, _ = env.step_wait()
                else:
                    obs, rewards, terminated, truncated, _ = env.step(actions)
                out.append((hashlib.sha256(obs.tobytes()).digest(), rewards.tobytes(),
                            terminated.tobytes(), truncated.tobytes()))
            with pytest.raises(NoAsyncCallError):
                env.step_wait()
        finally:
            env.close()
        return out

    assert run(split=True) == run(split=False)


async def test_a_viewer_that_comes_late_sees_the_frame_the_agent_stepped_to(batched: LocalRemotes) -> None:
    """While nobody asks for VNC frames the stepped frames are not served at all
    (envserver.lockstep_frames); a viewer that connects then gets the newest at once."""
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          frameskip=FRAMESKIP)
    viewer = VNCClient(f"127.0.0.1::{batched.addresses[2].vnc_port}", encoding="raw", frame_tags=True)
    try:
        def steps() -> tuple[np.ndarray, int]:
            env.reset(seed=6)
            for _ in range(60):
                obs, _, _, _, infos = env.step([[]] * N)
            return obs[2].copy(), int(infos["frame"][2])

        last_obs, frame = await asyncio.to_thread(steps)
        await viewer.start()
        async with asyncio.timeout(10):
            while viewer.tag is None or viewer.tag.frame < frame:
                await viewer.wait_update(viewer.updates)
        assert viewer.tag.frame == frame and np.array_equal(viewer.frame(), last_obs)
    finally:
        await viewer.close()
        await asyncio.to_thread(env.close)
