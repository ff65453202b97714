"""The stepping core both envs share (``remotes.stepper``), through the envs, with real
local remotes: pacing by the remotes' frame tags, autoreset (NEXT_STEP and SAME_STEP)
frames that belong to the new episode, the thread boundary, ``check_env`` with no check
skipped, and failure paths that leave no asyncio noise behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from remotes import RemoteEnv, RemoteVectorEnv, start_local
from remotes.dashboard import Dashboard
from remotes.local import LocalRemotes
from remotes.loop import shared_loop
from remotes.session import RemoteSession
from runtimes.builtin import CATCH_HUD_HEIGHT, CATCH_LIFE_COLOUR, CATCH_MAX_MISSES

ROOT: Final = Path(__file__).parents[2]
#: Frames per second for tests that wait for episodes to end (Catch: ~5 x 155 frames).
FAST: Final = 240.0
#: Steps any loop here may take before the test fails (about a minute at FAST).
MAX_STEPS: Final = int(FAST * 60)
#: Lit pixels of one life pip in Catch's HUD (5x5).
LIFE_PIXELS: Final = 25


def lives(frame: np.ndarray) -> int:
    """The lives Catch's HUD shows in ``frame``."""
    lit = (frame[:CATCH_HUD_HEIGHT] == CATCH_LIFE_COLOUR).all(axis=2)
    return int(np.count_nonzero(lit)) // LIFE_PIXELS


@pytest.fixture(scope="module")
def fast_catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2, fps=FAST) as local:
        yield local


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2) as local:
        yield local


def test_vector_steps_follow_each_remotes_frame_clock(catch: LocalRemotes) -> None:
    """frameskip=3 at 60 fps: each step returns, for each remote, the frame 3 past the last
    one it returned (read from the frame tags), at 20 steps/s."""
    env = RemoteVectorEnv(catch.address, frameskip=3)
    try:
        _, info = env.reset(seed=0)
        last = info["frame"].copy()
        steps = []
        for _ in range(40):
            _, _, _, _, info = env.step([[], []])
            steps.append(info["frame"] - last)
            last = info["frame"].copy()
    finally:
        env.close()
    advances = np.array(steps)
    for i in range(2):
        exact = np.mean(advances[:, i] == 3)
        assert exact >= 0.8, f"remote {i} advanced {advances[:, i].tolist()} frames per step"


def test_next_step_autoreset_returns_the_new_episodes_first_frame(fast_catch: LocalRemotes) -> None:
    env = RemoteVectorEnv(fast_catch.address)
    try:
        env.reset(seed=0)
        for _ in range(MAX_STEPS):
            obs, rewards, terminated, truncated, info = env.step([[], []])
            if terminated.any():
                break
        (i,) = np.flatnonzero(terminated)[:1]
        ended = info["episode_id"][i]
        # a frame of the episode that ended (its last; 1 life left if the VNC server
        # coalesced its last frame into the next episode's first), not the next one's
        assert lives(obs[i]) <= 1 and rewards[i] == -1.0  # the fifth miss ends it
        obs, rewards, terminated, truncated, info = env.step([[], []])
        assert info["episode_id"][i] > ended and rewards[i] == 0.0
        assert lives(obs[i]) == CATCH_MAX_MISSES  # a frame of the new episode
    finally:
        env.close()


def test_same_step_autoreset_gives_the_final_frame_in_info(fast_catch: LocalRemotes) -> None:
    env = RemoteVectorEnv(fast_catch.address, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        env.reset(seed=1)
        for _ in range(MAX_STEPS):
            obs, rewards, terminated, truncated, info = env.step([[], []])
            if terminated.any():
                break
        (i,) = np.flatnonzero(terminated)[:1]
        other = 1 - i
        assert info["_final_obs"][i] and not info["_final_obs"][other]
        assert lives(info["final_obs"][i]) <= 1 and rewards[i] == -1.0  # the ended episode's
        final_info = info["final_info"]
        assert final_info["_episode_id"][i] and final_info["misses"][i] == CATCH_MAX_MISSES
        assert info["episode_id"][i] > final_info["episode_id"][i]
        assert lives(obs[i]) == CATCH_MAX_MISSES  # already the new episode's first frame
        new = info["episode_id"][i]
        obs, rewards, terminated, truncated, info = env.step([[], []])
        assert info["episode_id"][i] == new and not terminated[i]  # stepping it, not resetting
        assert "final_obs" not in info or not info["_final_obs"][i]
    finally:
        env.close()


def test_a_step_limit_starts_a_new_episode_in_real_time(catch: LocalRemotes) -> None:
    """The remote does not end the episode itself here: the autoreset step must reset it."""
    env = RemoteVectorEnv(catch.address, max_episode_steps=5)
    try:
        _, info = env.reset(seed=2)
        first = info["episode_id"].copy()
        truncations = [env.step([[], []])[3].copy() for _ in range(5)]
        assert [t.tolist() for t in truncations] == [[False, False]] * 4 + [[True, True]]
        _, rewards, terminated, truncated, info = env.step([[], []])
        assert (info["episode_id"] > first).all() and not truncated.any()
        _, _, _, truncated, _ = env.step([[], []])
        assert not truncated.any()
    finally:
        env.close()


def test_check_env_passes_with_no_check_skipped_on_remote_env(catch: LocalRemotes) -> None:
    """check_env builds more envs on the same remote: each takes it over (same process);
    the first one is told so at its next step and takes it back at its reset."""
    for mode in ("realtime", "lockstep"):
        env = RemoteEnv(catch.addresses[0], mode=mode, render_mode="rgb_array")
        try:
            check_env(env)
            _, _, _, truncated, info = env.step([])
            assert truncated and "took its active slot" in info["remote.error"]
            obs, _ = env.reset(seed=0)
            _, _, _, truncated, info = env.step([])
            assert not truncated and info["remote.connected"]
            obs = env.step([])[0]
            rendered = env.render()
            assert rendered is not None and np.array_equal(rendered, obs)  # the last frame
        finally:
            env.close()


def test_session_state_is_read_only_on_the_loop_thread(
    catch: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of a session's clients happens on the loop thread, from construction to
    close, through a reconnect, spaces, snapshots and the dashboard."""
    loop_thread = shared_loop().thread
    reads: list[str] = []

    def guarded(name: str) -> property:
        field = f"_guarded_{name}"

        def get(self: RemoteSession) -> Any:
            if threading.current_thread() is not loop_thread:
                reads.append(f"{name} read on {threading.current_thread().name}:\n"
                             + "".join(traceback.format_stack(limit=8)))
            return self.__dict__.get(field)

        def set_(self: RemoteSession, value: Any) -> None:
            self.__dict__[field] = value

        return property(get, set_)

    for name in ("vnc", "rewarder"):
        monkeypatch.setattr(RemoteSession, name, guarded(name), raising=False)
    with start_local("builtin.Catch-v0", 1) as spare:
        single = RemoteEnv(catch.addresses[0])
        vector = RemoteVectorEnv([str(catch.addresses[1]), str(spare.addresses[0])])
        try:
            assert single.observation_space.shape == (210, 160, 3)
            single.reset(seed=0)
            single.step([])
            assert single.remote.connected and single.describe["env_id"] == "builtin.Catch-v0"
            vector.reset(seed=0)
            Dashboard.for_env(vector)
            spare.kill(0)
            spare.restart(0)
            for _ in range(200):
                _, _, _, _, info = vector.step([[], []])
                if "_remote.reconnected" in info and info["_remote.reconnected"][1]:
                    break
            else:
                pytest.fail("remote 1 did not come back")
            assert [r.connected for r in vector.remotes] == [True, True]
        finally:
            single.close()
            vector.close()
    assert not reads, reads[0]


HYGIENE = textwrap.dedent(
    """
    import os, signal
    from remotes import RemoteEnv, RemoteVectorEnv, start_local
    from remotes.session import RemoteUnavailable

    def interrupt(*_):
        raise KeyboardInterrupt

    def attempt(what, make):
        try:
            make()
        except (RemoteUnavailable, KeyboardInterrupt) as exc:
            print(what, type(exc).__name__, flush=True)

    signal.signal(signal.SIGALRM, interrupt)
    local = start_local("builtin.Catch-v0", 3, password="secret")
    a, b, c = local.addresses
    attempt("refused", lambda: RemoteEnv("vnc://127.0.0.1:9+19", start_timeout=0.5))
    attempt("one of two refused",
            lambda: RemoteVectorEnv([str(a), "127.0.0.1:9+19"], password="secret", start_timeout=0.5))
    attempt("wrong password", lambda: RemoteEnv(a, password="wrong", start_timeout=2))
    # a lockstep step interrupted while one remote is stopped, then stepped again
    env = RemoteVectorEnv([a, b], password="secret", mode="lockstep", stall_timeout=1.0)
    env.reset(seed=0)
    os.kill(local.processes[1].pid, signal.SIGSTOP)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    attempt("interrupted step", lambda: env.step([[], []]))
    os.kill(local.processes[1].pid, signal.SIGCONT)
    env.step([[], []])
    # a real-time env left unclosed at exit while it reconnects a killed remote
    live = RemoteVectorEnv([c], password="secret")
    live.reset()
    local.kill(2)
    for _ in range(30):
        live.step([[]])
    print("exiting", flush=True)
    """
)


def test_failure_paths_leave_no_asyncio_noise() -> None:
    result = subprocess.run(
        [sys.executable, "-c", HYGIENE], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={"OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "refused", "RemoteUnavailable", "one", "of", "two", "refused", "RemoteUnavailable",
        "wrong", "password", "RemoteUnavailable", "interrupted", "step", "KeyboardInterrupt",
        "exiting",
    ]
    for noise in ("Task was destroyed", "never retrieved", "Exception ignored", "Traceback"):
        assert noise not in result.stderr, result.stderr
