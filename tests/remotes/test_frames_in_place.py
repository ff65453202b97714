"""Frames in place (rewarder/shm_bank.py, remotes/lockstep_fast.py): a batched vector's
steady steps hand out the arrays the remotes wrote their frames into, never one the caller
still holds, never one a remote may still write into; where a remote cannot reach the
vector's buffer it says why and the frames come the old way, the same frames."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from typing import Any

import numpy as np
import pytest

from remotes import RemoteVectorEnv
from remotes.local import LocalRemotes
from rewarder.shm_bank import MAX_BUFFERS, Bank, BankBuffer
from tests.remotes.test_batched_lane import BACK_WITHIN, EPISODE_STEPS, FRAMESKIP, KEYS, N, batched

__all__ = ["batched"]  # (the fixture: 8 Catch games in 2 processes of 4)

STEPS = 120


def _env(local: LocalRemotes, **options: Any) -> RemoteVectorEnv:
    return RemoteVectorEnv(local.addresses, mode="lockstep", max_episode_steps=EPISODE_STEPS,
                           frameskip=FRAMESKIP, **options)


def _bank(env: RemoteVectorEnv) -> Bank:
    batches = env._core._lockstep.batches
    assert batches is not None
    return batches.bank


def _actions(rng: np.random.Generator) -> list[Any]:
    return [KEYS[k] for k in rng.integers(len(KEYS), size=N)]


def _in_bank(bank: Bank, obs: np.ndarray) -> BankBuffer | None:
    return next((b for b in bank.buffers if np.shares_memory(obs, b.batch())), None)


def _run(local: LocalRemotes, held_every: int, in_place: bool = True) -> tuple[list[str], Bank, int, int]:
    """Steps with fixed actions, holding every ``held_every``-th observation: each step's
    frames' hash, the bank, the steps whose observations were the bank's memory, the
    buffers it made. Every held observation is checked unchanged at the end."""
    env = _env(local)
    bank = _bank(env)
    if not in_place:
        bank.stop("off for the comparison")
    held: list[tuple[np.ndarray, np.ndarray]] = []
    hashes, banked = [], 0
    try:
        env.reset(seed=4)
        rng = np.random.default_rng(9)
        for step in range(STEPS):
            obs, *_ = env.step(_actions(rng))
            hashes.append(hashlib.sha256(obs.tobytes()).hexdigest())
            banked += _in_bank(bank, obs) is not None
            if step % held_every == 0:
                held.append((obs, obs.copy()))
        for step, (obs, copy) in enumerate(held):
            assert np.array_equal(obs, copy), f"held observation {step} was written over"
        return hashes, bank, banked, len(bank.buffers)
    finally:
        env.close()


def test_steady_steps_hand_out_the_buffers_the_remotes_wrote_into(batched: LocalRemotes) -> None:
    in_place, bank, banked, made = _run(batched, held_every=10)
    copied, off, none, _ = _run(batched, held_every=10, in_place=False)
    assert in_place == copied  # the same frames either way
    assert none == 0 and off.used == 0
    assert bank.off is None and bank.used == banked > STEPS // 2  # most steps (not the autoresets')
    assert made <= MAX_BUFFERS


def test_a_caller_holding_every_observation_gets_fresh_arrays_once_every_buffer_is_held(
    batched: LocalRemotes,
) -> None:
    hashes, _, banked, made = _run(batched, held_every=1)
    assert made == MAX_BUFFERS and banked == MAX_BUFFERS  # then fresh arrays
    assert len(set(hashes)) > STEPS // 2


def test_a_remote_that_cannot_reach_the_buffer_says_why_and_its_frames_come_the_old_way(
    batched: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = BankBuffer.ask

    def elsewhere(buffer: BankBuffer, rows: tuple[int, ...]) -> bytes:  # another inode
        buffer.inode += 1
        try:
            return wrong(buffer, rows)
        finally:
            buffer.inode -= 1

    expected, _, _, _ = _run(batched, held_every=10, in_place=False)
    monkeypatch.setattr(BankBuffer, "ask", elsewhere)
    got, bank, banked, _ = _run(batched, held_every=10)
    assert got == expected
    assert banked == bank.used == 1  # the step that asked first: its frames copied into the buffer
    assert bank.off is not None and "the agent's buffer cannot be used" in bank.off
    assert "not frame buffer" in bank.off


def test_a_step_returned_without_a_remotes_reply_hands_out_a_copy_it_cannot_write_into(
    batched: LocalRemotes,
) -> None:
    """A process stopped during a step: its games come back as ``remote.waiting`` (their
    previous frames) and their replies with a later step. What the caller gets must not
    be the buffer the stopped process writes into when it goes on; without the copy, the
    held observation changes under the caller once the process runs again."""
    env = _env(batched)
    victims = batched.siblings(0)
    pid = batched.process_of(0).pid
    try:
        env.reset(seed=6)
        bank = _bank(env)
        for _ in range(5):
            last, *_ = env.step([[]] * N)
        assert bank.used >= 3
        os.kill(pid, signal.SIGSTOP)
        try:
            os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOWAIT)  # (stopped before the step)
            obs, _, _, _, infos = env.step([KEYS[0]] * N)
            held = obs.copy()
            assert infos["remote.waiting"][victims].all() and np.array_equal(obs[victims], last[victims])
            assert _in_bank(bank, obs) is None and any(b.retired for b in bank.buffers)
        finally:
            os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + BACK_WITHIN
        while True:  # the stopped step's replies come with a later step
            assert time.monotonic() < deadline
            later, _, _, _, infos = env.step([[]] * N)
            if not infos.get("remote.waiting", np.zeros(N, bool))[victims].any():
                break
        assert not np.array_equal(later[victims], last[victims])  # (stepped: the ball fell)
        used = bank.used
        for _ in range(5):
            env.step([[]] * N)
        assert np.array_equal(obs, held)
        assert bank.used > used and not any(b.retired for b in bank.buffers)  # in place again
    finally:
        env.close()
