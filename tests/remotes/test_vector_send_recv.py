"""``RemoteVectorEnv(batch_size=k)``'s send/recv (remotes/arrivals.py, issue 40): a recv
returns the results of k remotes, whichever answered first, named in ``info["env_id"]``;
each remote steps exactly as it does alone for the same seed and actions; a killed
process is reported for each of its games in the result that sees it. With k = a
process's games, the steady way (remotes/arrivals_fast.py) gives the same, takes the
batch sent first, and loses nothing to Ctrl-C or to the keeper thread's reads."""

from __future__ import annotations

import hashlib
import select
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from remotes import RemoteVectorEnv, arrivals_fast
from remotes.local import LocalRemotes
from tests.remotes.test_batched_lane import BACK_WITHIN, FRAMESKIP, GAMES, KEYS, N, batched

K = 3
#: recv() calls of the comparison run and each episode's step limit (episodes end, by
#: Catch's own end or by the limit, several times a run).
RECVS = 240
EPISODE_STEPS = 12
SEED = 11
#: Rounds of the sent-first test, and sends tried for one that leaves both batches out.
SENT_FIRST_ROUNDS = 6
BOTH_OUT_TRIES = 20
__all__ = ["batched"]  # (the fixture, imported from the batched lane's tests: 8 games in 2 processes)


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


class Rounds:
    """Send/recv rounds of seeded random keys (``seed``: the first remote's key stream),
    what each remote was sent and what it returned (its first frame, then each result)."""

    def __init__(self, env: RemoteVectorEnv, seed: int) -> None:
        self.env, self.k = env, env.batch_size
        self.rngs = [np.random.default_rng(seed + i) for i in range(N)]
        self.sent: list[list[Any]] = [[] for _ in range(N)]
        self.seen: list[list[Digest]] = [[] for _ in range(N)]
        obs, _ = env.reset(seed=SEED)
        for i in range(N):
            self.seen[i].append(_digest(obs[i], 0.0, False, False))
        self.ready = list(range(N))
        #: The remotes each recv returned, in order.
        self.returned: list[list[int]] = []

    def run(self, rounds: int, before_send: Callable[[int], None] = lambda turn: None,
            after_send: Callable[[], None] = lambda: None) -> None:
        env, k = self.env, self.k
        for turn in range(rounds):
            actions = [KEYS[int(self.rngs[i].integers(len(KEYS)))] for i in self.ready]
            for i, action in zip(self.ready, actions, strict=True):
                self.sent[i].append(action)
            before_send(turn)
            env.send(actions, self.ready)
            after_send()
            obs, rewards, terminated, truncated, infos = env.recv()
            ids = infos["env_id"].tolist()
            assert len(ids) == k == len(set(ids)) and obs.shape[0] == k == len(rewards)
            assert infos["remote.connected"].all()
            for row, i in enumerate(ids):
                self.seen[i].append(_digest(obs[row], rewards[row], terminated[row], truncated[row]))
            self.ready = ids
            self.returned.append(ids)

    def each_as_alone(self, addresses: list[Any]) -> None:
        """Each remote's results are those it gives alone for the same seed and keys."""
        for i in range(N):
            steps = len(self.seen[i]) - 1
            assert _alone(addresses[i], SEED + i, self.sent[i][:steps]) == self.seen[i], f"env {i} differs"


def test_recv_returns_k_remotes_as_they_answer_and_each_steps_as_it_does_alone(batched: LocalRemotes) -> None:
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          frameskip=FRAMESKIP, batch_size=K)
    try:
        assert env.batch_size == K
        rounds = Rounds(env, 100)
        rounds.run(RECVS)
        with pytest.raises(ValueError, match="not ready"):
            env.send([[]], [next(i for i in range(N) if i not in rounds.ready)])
        with pytest.raises(ValueError, match="send"):
            env.step_async([[]] * N)
    finally:
        env.close()
    counts = [len(seen) - 1 for seen in rounds.seen]
    assert min(counts) > RECVS * K // N // 3  # every remote answered, many times
    ends = sum(t or u for seen in rounds.seen for _, _, t, u in seen[1:])
    assert ends > N  # episodes ended (autoresets inside send/recv) on many remotes
    rounds.each_as_alone(batched.addresses)


def test_a_process_at_a_time_takes_the_steady_way_and_each_remote_steps_as_it_does_alone(
    batched: LocalRemotes,
) -> None:
    """``batch_size`` = a process's games: each send is one process's batch and each recv
    its reply, taken the steady way (remotes/arrivals_fast.py) but around episode ends,
    which go the general way; each remote's results are still those it gives alone."""
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          frameskip=FRAMESKIP, batch_size=GAMES)
    fast = env._arrivals.fast  # type: ignore[union-attr]
    try:
        rounds = Rounds(env, 200)

        def sometimes_general(turn: int) -> None:  # (a send the general way: the steady recv takes its batch)
            fast.enabled = turn % 5 != 4

        def back() -> None:
            fast.enabled = True

        rounds.run(RECVS, sometimes_general, back)
        ready = rounds.ready
        assert all(set(batched.siblings(ids[0])) == set(ids) for ids in rounds.returned)  # (a process a recv)
        # A steady recv's info, either way: the same keys, of the same kinds.
        steady: dict[bool, set[tuple[tuple[str, str], ...]]] = {True: set(), False: set()}
        for enabled in (False, True, False, True):
            fast.enabled = enabled
            for _ in range(8):
                env.send([[]] * GAMES, ready)
                _, _, terminated, truncated, infos = env.recv()
                ready = infos["env_id"].tolist()
                if not (terminated.any() or truncated.any()) and infos.get("_text", np.zeros(1)).all():
                    steady[enabled].add(tuple(sorted((key, infos[key].dtype.str) for key in infos)))
    finally:
        env.close()
    assert len(steady[False]) == 1 and steady[True] == steady[False], steady
    assert fast.sent > RECVS // 2 and fast.taken > RECVS // 2, (fast.sent, fast.taken)
    assert fast.taken < RECVS  # (episode ends went the general way)
    assert min(len(seen) for seen in rounds.seen) > 2 * EPISODE_STEPS  # (whichever answers first: a
    # loaded machine may favour a process, but each remote ends episodes, often)
    rounds.each_as_alone(batched.addresses)


def _started(env: RemoteVectorEnv, seed: int, rounds: int = 0) -> list[int]:
    """``env`` reset, every remote sent a step, one recv and ``rounds`` send/recv rounds
    more (the steady way's, mostly); the remotes the last recv returned."""
    env.reset(seed=seed)
    env.send([[]] * N)
    _, _, _, _, infos = env.recv()
    ready: list[int] = infos["env_id"].tolist()
    for _ in range(rounds):
        env.send([[]] * GAMES, ready)
        _, _, _, _, infos = env.recv()
        ready = infos["env_id"].tolist()
    return ready


def _sent_with_both_out(env: RemoteVectorEnv, ready: list[int]) -> tuple[list[int], list[Any]]:
    """Send ``ready`` their steps (and again after a recv, until it holds) so that both
    processes' whole batches are out and nothing is in: what the steady recv takes. The
    other process's remotes, and both batches (``ready``'s first)."""
    arrivals, slots = env._arrivals, env._core.slots
    assert arrivals is not None
    for _ in range(BOTH_OUT_TRIES):
        others = [i for i in range(N) if i not in ready]
        env.send([[]] * GAMES, ready)
        out = [slots[i].batch for i in (ready[0], others[0])]
        if not arrivals.results and all(call is not None and len(call.slots) == GAMES for call in out):
            return others, out
        _, _, _, _, infos = env.recv()
        ready = infos["env_id"].tolist()
    raise AssertionError(f"no send of {BOTH_OUT_TRIES} left both processes' batches out")


def _both_in(out: list[Any]) -> None:
    """Wait until both batches' replies are in (unread)."""
    waiting = select.poll()
    for call in out:
        waiting.register(call.channel.fileno(), select.POLLIN)
    deadline = time.monotonic() + BACK_WITHIN
    while len(waiting.poll(100)) < 2:
        assert time.monotonic() < deadline


def test_with_both_processes_answered_recv_returns_the_batch_sent_first(batched: LocalRemotes) -> None:
    """Both processes' replies in when recv looks: the one sent first comes first, whichever
    connection the poll lists first, so a quick process never starves a slower one."""
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", frameskip=FRAMESKIP, batch_size=GAMES)
    fast = env._arrivals.fast  # type: ignore[union-attr]
    checked: list[tuple[int, ...]] = []  # (the batch sent first, each time the steady way took it)
    try:
        ready = _started(env, 5)
        for _ in range(SENT_FIRST_ROUNDS):
            others, out = _sent_with_both_out(env, ready)
            _both_in(out)
            taken = fast.taken
            _, _, _, _, infos = env.recv()
            assert infos["env_id"].tolist() == others
            if fast.taken > taken:
                checked.append(tuple(others))
            ready = others
    finally:
        env.close()
    assert len(set(checked)) == 2, checked  # each process sent first: one of them listed second


def test_a_reply_the_keeper_reads_while_recv_polls_is_returned_at_once(
    batched: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keeper thread reads a channel nobody holds (its pings): if it reads a batch's
    reply while a steady recv polls, the poll never sees those bytes; recv must find the
    reply filed after that poll's slice, not poll on until some other bytes come (the
    remote's next ping, a second later) or the stall timeout."""
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", frameskip=FRAMESKIP, batch_size=GAMES)
    fast = env._arrivals.fast  # type: ignore[union-attr]
    try:
        others, out = _sent_with_both_out(env, _started(env, 3, rounds=6))
        taken = fast.taken
        assert taken >= 4
        replies = env._core._lockstep.replies  # type: ignore[union-attr]
        watched = replies.poller_of
        polls: list[float] = []

        def keeper_first(fds: tuple[int, ...]) -> Any:  # (as if the keeper ran just before the poll)
            poller = watched(fds)

            class Late:
                def poll(self, timeout: float) -> Any:
                    polls.append(timeout)
                    for call in out:
                        call.channel.serve_idle()
                    return poller.poll(timeout)

            return Late()

        _both_in(out)  # (in, unread)
        monkeypatch.setattr(replies, "poller_of", keeper_first)
        _, _, _, truncated, infos = env.recv()
        monkeypatch.undo()
        assert infos["env_id"].tolist() == others and not truncated.any()
        assert len(polls) == 1, polls  # (one quiet slice, then the filed reply is seen)
        assert fast.taken == taken  # (the keeper's filing: the general way took it)
    finally:
        env.close()


def test_a_steady_recv_interrupted_after_its_reply_came_is_returned_by_the_next(
    batched: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in a steady recv after it took a process's reply off the connection: the
    reply is filed back, the next recv returns it (each remote one step on, none lost,
    nothing stepped twice) the general way, and the steady way goes on after it."""
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", frameskip=FRAMESKIP, batch_size=GAMES)
    fast = env._arrivals.fast  # type: ignore[union-attr]
    try:
        _sent_with_both_out(env, _started(env, 4, rounds=6))
        steady = fast.taken
        assert steady >= 4
        before = {slot.index: slot.returned for slot in env._core.slots}

        def interrupted(*args: Any, **kwargs: Any) -> bool:
            raise KeyboardInterrupt

        monkeypatch.setattr(arrivals_fast, "take_plain", interrupted)
        with pytest.raises(KeyboardInterrupt):
            env.recv()
        monkeypatch.undo()
        _, _, terminated, truncated, infos = env.recv()
        ids = infos["env_id"].tolist()
        assert infos["remote.connected"].all() and not (terminated.any() or truncated.any())
        assert [int(f) for f in infos["frame"]] == [before[i] + FRAMESKIP for i in ids]  # type: ignore[operator]
        assert fast.taken == steady  # (that one went the general way)
        for _ in range(4):
            env.send([[]] * GAMES, ids)
            _, _, _, _, infos = env.recv()
            ids = infos["env_id"].tolist()
        assert fast.taken > steady
    finally:
        env.close()


def test_a_killed_process_is_reported_for_each_of_its_games_in_the_result_that_sees_it(
    batched: LocalRemotes,
) -> None:
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                          batch_size=GAMES)
    try:
        env.reset(seed=2)
        env.send([[]] * N)  # (after a reset every remote is ready)
        _, _, _, _, infos = env.recv()
        for _ in range(6):
            # sent to the remotes the last recv returned, then recv
            _, _, _, _, infos = env.step([[]] * GAMES)
        ready = set(infos["env_id"].tolist())  # (the others' steps are out: maybe answered)
        victims = batched.siblings(0)
        batched.kill(0)
        seen: dict[int, list[tuple[bool, bool, str]]] = {i: [] for i in range(N)}
        deadline = time.monotonic() + BACK_WITHIN
        while min(len(results) for results in seen.values()) < 2:
            assert time.monotonic() < deadline, f"results so far: {seen}"
            _, _, _, truncated, infos = env.step([[]] * GAMES)
            errors = infos.get("_remote.error", np.zeros(GAMES, bool))
            for row, i in enumerate(infos["env_id"].tolist()):
                error = infos["remote.error"][row] if errors[row] else ""
                seen[i].append((bool(infos["remote.connected"][row]), bool(truncated[row]), str(error)))
        for i in victims:  # the result of the first step sent after the kill says so
            lost = [not connected and cut and bool(error) for connected, cut, error in seen[i][:2]]
            assert lost[0] if i in ready else lost[0] or lost[1], (i, seen[i])
        assert all(connected for i in range(N) if i not in victims for connected, _, _ in seen[i])
    finally:
        env.close()
        batched.restart(0)


def test_batch_size_is_checked_before_anything_connects(batched: LocalRemotes) -> None:
    for bad in (N + 1, -1):
        with pytest.raises(ValueError, match="batch_size"):
            RemoteVectorEnv(batched.addresses, mode="lockstep", batch_size=bad)
    with pytest.raises(ValueError, match="lockstep"):
        RemoteVectorEnv(batched.addresses, batch_size=2)


def test_send_recv_misuse_is_refused_and_with_all_envs_they_are_step_async(batched: LocalRemotes) -> None:
    env = RemoteVectorEnv(batched.addresses, mode="lockstep", batch_size=K)
    try:
        env.reset(seed=1)
        with pytest.raises(ValueError, match="send"):
            env.recv()  # nothing sent yet
        with pytest.raises(ValueError, match="one per env"):
            env.send([[]] * (N - 1))  # after a reset all N are ready
        with pytest.raises(ValueError, match="not one of"):
            env.send([[]], [N])
    finally:
        env.close()
    whole = RemoteVectorEnv(batched.addresses, mode="lockstep")
    try:
        assert whole.batch_size == N
        whole.reset(seed=1)
        order = list(reversed(range(N)))
        whole.send([KEYS[i % len(KEYS)] for i in order], order)
        obs, rewards, _, _, infos = whole.recv()
        assert obs.shape[0] == N and infos["env_id"].tolist() == list(range(N))
    finally:
        whole.close()
