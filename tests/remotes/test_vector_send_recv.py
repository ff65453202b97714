"""``RemoteVectorEnv(batch_size=k)``'s send/recv (remotes/arrivals.py, issue 40): a recv
returns the results of k remotes, whichever answered first, named in ``info["env_id"]``;
each remote steps exactly as it does alone for the same seed and actions; a killed
process is reported for each of its games in the result that sees it."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from remotes import RemoteVectorEnv, start_local
from remotes.local import LocalRemotes

N = 8
GAMES = 4
K = 3
#: recv() calls of the comparison run; frames a step spans and each episode's step limit
#: (episodes end, by Catch's own end or by the limit, several times a run).
RECVS = 240
FRAMESKIP = 30
EPISODE_STEPS = 12
SEED = 11
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


Digest = tuple[bytes, float, bool, bool]


def _digest(obs: np.ndarray, reward: float, terminated: bool, truncated: bool) -> Digest:
    return hashlib.sha256(obs.tobytes()).digest(), float(reward), bool(terminated), bool(truncated)


def _alone(address: Any, seed: int, actions: list[Any]) -> list[Digest]:
    """One remote's results for ``actions`` (a vector of one: the same autoreset seeds)."""
    env = RemoteVectorEnv([address], mode="lockstep", max_episode_steps=EPISODE_STEPS, frameskip=FRAMESKIP)
    try:
        obs, _ = env.reset(seed=seed)
        out = [_digest(obs[0], 0.0, False, False)]
        for action in actions:
            obs, rewards, terminated, truncated, _ = env.step([action])
            out.append(_digest(obs[0], rewards[0], terminated[0], truncated[0]))
    finally:
        env.close()
    return out


def test_recv_returns_k_remotes_as_they_answer_and_each_steps_as_it_does_alone(batched: LocalRemotes) -> None:
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          frameskip=FRAMESKIP, batch_size=K)
    rngs = [np.random.default_rng(100 + i) for i in range(N)]
    sent: list[list[Any]] = [[] for _ in range(N)]
    seen: list[list[Digest]] = [[] for _ in range(N)]
    counts: dict[int, int] = dict.fromkeys(range(N), 0)
    try:
        assert env.batch_size == K
        obs, _ = env.reset(seed=SEED)
        for i in range(N):
            seen[i].append(_digest(obs[i], 0.0, False, False))
        ready = list(range(N))
        for _ in range(RECVS):
            actions = [KEYS[int(rngs[i].integers(len(KEYS)))] for i in ready]
            for i, action in zip(ready, actions, strict=True):
                sent[i].append(action)
            env.send(actions, ready)
            obs, rewards, terminated, truncated, infos = env.recv()
            ids = infos["env_id"].tolist()
            assert len(ids) == K == len(set(ids)) and obs.shape[0] == K == len(rewards)
            assert infos["remote.connected"].all()
            for row, i in enumerate(ids):
                seen[i].append(_digest(obs[row], rewards[row], terminated[row], truncated[row]))
                counts[i] += 1
            ready = ids
        with pytest.raises(ValueError, match="not ready"):
            env.send([[]], [next(i for i in range(N) if i not in ready)])
        with pytest.raises(ValueError, match="send"):
            env.step_async([[]] * N)
    finally:
        env.close()
    assert min(counts.values()) > RECVS * K // N // 3  # every remote answered, many times
    ends = sum(t or u for i in range(N) for _, _, t, u in seen[i][1:])
    assert ends > N  # episodes ended (autoresets inside send/recv) on many remotes
    for i in range(N):
        steps = len(seen[i]) - 1
        assert _alone(batched.addresses[i], SEED + i, sent[i][:steps]) == seen[i], f"env {i} differs"


def test_a_killed_process_is_reported_for_each_of_its_games_in_the_result_that_sees_it(
    batched: LocalRemotes,
) -> None:
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          batch_size=GAMES)
    try:
        env.reset(seed=2)
        env.send([[]] * N)  # (after a reset every remote is ready)
        env.recv()
        for _ in range(6):
            env.step([[]] * GAMES)  # sent to the remotes the last recv returned, then recv
        victims = batched.siblings(0)
        batched.kill(0)
        first: dict[int, tuple[bool, bool, str]] = {}
        deadline = time.monotonic() + BACK_WITHIN
        while len(first) < N:
            assert time.monotonic() < deadline, f"results so far: {first}"
            _, _, _, truncated, infos = env.step([[]] * GAMES)
            errors = infos.get("_remote.error", np.zeros(GAMES, bool))
            for row, i in enumerate(infos["env_id"].tolist()):
                error = infos["remote.error"][row] if errors[row] else ""
                first.setdefault(i, (bool(infos["remote.connected"][row]), bool(truncated[row]), str(error)))
        for i in victims:  # the first result after the kill says so, each game of the process
            connected, was_truncated, error = first[i]
            assert not connected and was_truncated and error, (i, first[i])
        assert all(first[i][0] for i in range(N) if i not in victims)
    finally:
        env.close()
        batched.restart(0)


def test_batch_size_is_checked_before_anything_connects(batched: LocalRemotes) -> None:
    for bad in (N + 1, -1):
        with pytest.raises(ValueError, match="batch_size"):
            RemoteVectorEnv(batched.addresses, mode="lockstep", batch_size=bad)
    with pytest.raises(ValueError, match="lockstep"):
        RemoteVectorEnv(batched.addresses, batch_size=2)
