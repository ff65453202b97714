"""User scripts that :mod:`tests.remotes.test_where_users_run` runs as subprocesses, so
each runs as a researcher's own script or notebook would: a fresh interpreter, the
envs made and stepped with plain sync calls, and nothing of pytest around it.

``python -m tests.remotes.where_users_run_scripts SCENARIO [ARG]`` (from the repository
root) prints progress lines and, when every step went as it should, one line
``RESULT {json}`` with what it saw; the test asserts on that line, the exit code and
stderr. A scenario that fails raises (exit code 1, the traceback on stderr).

Scenarios:

- ``notebook KIND``: inside ``asyncio.run(main())`` (a running loop, as in every Jupyter
  kernel), ``main`` starts local remotes and makes and steps an env of KIND with sync
  calls, as a notebook cell does (:data:`NOTEBOOK_KINDS`).
- ``async-vector CONTEXT SOURCE``: the script makes and steps a lockstep env of its own,
  then a ``gymnasium.vector.AsyncVectorEnv`` of 2 lockstep envs made by ``gymnasium.make``
  in the workers under multiprocessing CONTEXT (``fork``, ``forkserver``, ``spawn``),
  each worker starting its own local remote or connecting to one the script started
  (:data:`SOURCES`); then steps its own env again.
- ``ctrl-c``: two lockstep envs A and B; A steps in a loop until Ctrl-C (the test sends
  SIGINT after the line ``stepping``, printed while A is inside a step), then B steps
  50 times and A steps (going on, or ending its episode with ``truncated``), resets and
  steps again.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import gymnasium as gym
import numpy as np

import remotes  # registers universe-remote/<env id> (a spawned worker imports this module too)
from remotes import RemoteEnv, RemoteVectorEnv, start_local

#: ``serve`` arguments of a lockstep remote.
LOCKSTEP: Final = ["--mode", "lockstep"]
#: Steps each notebook env takes.
NOTEBOOK_STEPS: Final = 20
#: Steps the AsyncVectorEnv takes.
VECTOR_STEPS: Final = 20
#: The gymnasium id the AsyncVectorEnv's workers make.
CATCH_ID: Final = "universe-remote/builtin.Catch-v0"
#: Frames one Ctrl-C step of A spans: the most a step may ask (rewarder.protocol's
#: MAX_STEP_FRAMES), so A's steps last long (an idle Pong episode ends after ~3,000
#: frames: a step plays it to its end, ~0.2 s) and the interrupt lands inside one.
LONG_STEP_FRAMES: Final = 10_000
#: Where the agent-side code lives: a traceback through here was inside a call of ours.
REMOTES_DIR: Final = str(Path(remotes.__file__).parent)


def digest(frame: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(frame).tobytes(), digest_size=8).hexdigest()


def result(**found: Any) -> None:
    print("RESULT " + json.dumps(found), flush=True)


# notebook: sync calls inside a running asyncio loop ---------------------------------------


def notebook_env(mode: str) -> dict[str, Any]:
    extra = LOCKSTEP if mode == "lockstep" else []
    with start_local("builtin.Catch-v0", 1, extra_args=extra) as local:
        env = RemoteEnv(local, mode=mode, frameskip=2)
        try:
            obs, info = env.reset(seed=1)
            seen, rewards, frames = {digest(obs)}, [], []
            for i in range(NOTEBOOK_STEPS):
                key = "Left" if i % 6 < 3 else "Right"
                obs, reward, terminated, truncated, info = env.step([("KeyEvent", key, i % 2 == 0)])
                assert "remote.error" not in info, info
                seen.add(digest(obs))
                rewards.append(float(reward))
                frames.append(int(info["frame"]))
                if terminated or truncated:
                    env.reset()
        finally:
            env.close()
    return {"steps": len(rewards), "distinct_obs": len(seen), "rewards": rewards, "frames": frames}


def notebook_vector(mode: str, games_per_process: int | None = None) -> dict[str, Any]:
    """2 remotes in a process each, or (``games_per_process``) 4 batched in 2 processes of
    2, whose steady steps return the arrays the remotes wrote into (rewarder/shm_bank.py)."""
    extra = LOCKSTEP if mode == "lockstep" else []
    n = 2 if games_per_process is None else 4
    with start_local("builtin.Catch-v0", n, extra_args=extra, games_per_process=games_per_process) as local:
        env = RemoteVectorEnv(local, mode=mode, frameskip=2)
        try:
            obs, info = env.reset(seed=1)
            seen, rewards, frames = {digest(obs)}, [], []
            for i in range(NOTEBOOK_STEPS):
                actions = [[("KeyEvent", "Right" if e % 2 else "Left", i % 2 == 0)] for e in range(n)]
                obs, reward, terminated, truncated, info = env.step(actions)
                assert obs.shape[0] == n and reward.shape == (n,), (obs.shape, reward.shape)
                assert not info.get("_remote.error", np.zeros(n, bool)).any(), info
                seen.add(digest(obs))
                rewards.append([float(r) for r in reward])
                frames.append([int(f) for f in info["frame"]])
            steps = getattr(env._core, "_lockstep", None)  # (lockstep only)
            batches = None if steps is None else steps.batches
            in_place = 0 if batches is None else batches.bank.used
        finally:
            env.close()
    return {"steps": len(rewards), "distinct_obs": len(seen), "rewards": rewards, "frames": frames,
            "in_place": in_place}


def notebook_send_recv() -> dict[str, Any]:
    """send/recv over 4 lockstep remotes in 2 processes, k = a process's games (its steady
    way, remotes/arrivals_fast.py)."""
    with start_local("builtin.Catch-v0", 4, extra_args=LOCKSTEP, games_per_process=2) as local:
        env = RemoteVectorEnv(local, mode="lockstep", frameskip=2, batch_size=2)
        try:
            obs, info = env.reset(seed=1)
            seen, rewards = {digest(obs)}, []
            frames: dict[int, list[int]] = {i: [] for i in range(4)}
            env.send([[]] * 4)
            for i in range(NOTEBOOK_STEPS):
                obs, reward, terminated, truncated, info = env.recv()
                assert obs.shape[0] == 2 and reward.shape == (2,), (obs.shape, reward.shape)
                assert not info.get("_remote.error", np.zeros(2, bool)).any(), info
                ids = [int(e) for e in info["env_id"]]
                seen.add(digest(obs))
                rewards.append([float(r) for r in reward])
                for row, e in enumerate(ids):
                    frames[e].append(int(info["frame"][row]))
                env.send([[("KeyEvent", "Left" if e % 2 else "Right", i % 2 == 0)] for e in ids], ids)
            taken = env._arrivals.fast.taken  # type: ignore[union-attr]
        finally:
            env.close()
    return {"steps": len(rewards), "distinct_obs": len(seen), "rewards": rewards, "env_frames": frames,
            "steady": taken}


def notebook_parallel() -> dict[str, Any]:
    from remotes.parallel import RemoteParallelEnv

    with start_local("builtin.Duel-v0") as local:
        env = RemoteParallelEnv(local, frameskip=4)
        try:
            observations, infos = env.reset(seed=1)
            seen, rewards = {digest(observations["player_0"])}, []
            for i in range(NOTEBOOK_STEPS):
                actions = {"player_0": 1 if i % 10 < 5 else 2, "player_1": 2 if i % 6 < 3 else 1}
                observations, reward, terminations, truncations, infos = env.step(actions)
                assert set(observations) == {"player_0", "player_1"}, observations.keys()
                seen.add(digest(observations["player_0"]))
                rewards.append({agent: float(r) for agent, r in reward.items()})
                if not env.agents:
                    env.reset()
        finally:
            env.close()
    return {"steps": len(rewards), "distinct_obs": len(seen), "rewards": rewards}


#: What ``notebook KIND`` makes and steps.
NOTEBOOK_KINDS: Final[dict[str, Callable[[], dict[str, Any]]]] = {
    "RemoteEnv-lockstep": lambda: notebook_env("lockstep"),
    "RemoteEnv-realtime": lambda: notebook_env("realtime"),
    "RemoteVectorEnv-lockstep": lambda: notebook_vector("lockstep"),
    "RemoteVectorEnv-realtime": lambda: notebook_vector("realtime"),
    "RemoteVectorEnv-batched-lockstep": lambda: notebook_vector("lockstep", games_per_process=2),
    "RemoteVectorEnv-send-recv": notebook_send_recv,
    "RemoteParallelEnv-Duel": notebook_parallel,
}


def notebook(kind: str) -> None:
    async def main() -> dict[str, Any]:
        asyncio.get_running_loop()  # raises unless a loop runs here, as in a Jupyter cell
        found = NOTEBOOK_KINDS[kind]()  # plain sync calls, made while the loop runs
        await asyncio.sleep(0)  # the notebook's loop still runs afterwards
        return found

    found = asyncio.run(main())
    gc.collect()  # so a coroutine that was never awaited says so now, on stderr
    result(kind=kind, **found)


# async-vector: gymnasium's AsyncVectorEnv after the parent stepped an env of its own ---------


#: Where ``async-vector``'s workers find their remotes.
SOURCES: Final = ("worker-starts", "parent-started")


def async_vector(context: str, source: str) -> None:
    """``source``: ``worker-starts`` (each worker's ``gymnasium.make`` starts a local remote,
    the default ``remotes=1``) or ``parent-started`` (the parent started them; each worker
    connects to one by address, ``remotes="vnc://..."``)."""
    if source not in SOURCES:
        raise SystemExit(f"source must be one of {SOURCES}, not {source!r}")
    own = gym.make(CATCH_ID, mode="lockstep", frameskip=2)  # the parent's own env, open throughout
    started = start_local("builtin.Catch-v0", 2, extra_args=LOCKSTEP) if source == "parent-started" else None
    try:
        own.reset(seed=0)
        own_frames = [int(own.step(1)[4]["frame"]) for _ in range(5)]
        print("parent stepped its own env", flush=True)
        if started is None:  # each worker's lockstep Catch on a local remote it starts itself
            factories = [lambda: gym.make(CATCH_ID, mode="lockstep", frameskip=2)] * 2
        else:
            factories = [
                lambda address=str(address): gym.make(CATCH_ID, remotes=address, mode="lockstep", frameskip=2)
                for address in started.addresses
            ]
        envs = gym.vector.AsyncVectorEnv(factories, context=context)
        try:
            obs, info = envs.reset(seed=0)
            assert obs.shape == (2, 210, 160, 3), obs.shape
            seen, frames, rewards = {digest(obs)}, [], []
            for _ in range(VECTOR_STEPS):
                obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
                assert not info.get("_remote.error", np.zeros(2, bool)).any(), info
                seen.add(digest(obs))
                frames.append([int(f) for f in info["frame"]])
                rewards.append([float(r) for r in reward])
        finally:
            envs.close()
        print("AsyncVectorEnv closed", flush=True)
        own_frames += [int(own.step(2)[4]["frame"]) for _ in range(5)]  # still the parent's
    finally:
        own.close()
        if started is not None:
            started.close()
    result(context=context, source=source, distinct_obs=len(seen), frames=frames, rewards=rewards,
           own_frames=own_frames)


# ctrl-c: an interrupt mid-step leaves every env usable --------------------------------------


def ctrl_c() -> None:
    with start_local("atari.Pong-v0", 1, extra_args=LOCKSTEP) as pong, \
            start_local("builtin.Catch-v0", 1, extra_args=LOCKSTEP) as catch:
        a = RemoteEnv(pong, mode="lockstep", frameskip=LONG_STEP_FRAMES)
        b = RemoteEnv(catch, mode="lockstep", frameskip=2)
        try:
            a.reset(seed=1)
            b.reset(seed=2)
            # "stepping" is printed from another thread once this one is inside a long step
            # of A: that thread gets the GIL only when this one blocks, in the step's wait for
            # its reply (printed from here, the SIGINT could come before the step began).
            inside = threading.Event()
            announcer = threading.Thread(target=lambda: inside.wait() and print("stepping", flush=True),
                                         daemon=True)
            announcer.start()
            a_steps, long_next = 0, False
            try:
                while True:
                    if long_next:  # this step plays a whole episode (~0.2 s)
                        inside.set()
                    terminated = a.step([])[2]
                    a_steps += 1
                    long_next = not terminated
            except KeyboardInterrupt as exc:
                frames = traceback.extract_tb(exc.__traceback__)
                in_step = any(f.filename.startswith(REMOTES_DIR) for f in frames)
                where = " > ".join(f"{Path(f.filename).name}:{f.name}" for f in frames)
                print(f"interrupted after {a_steps} steps of A, in {where}", flush=True)
            b_frames = []
            for _ in range(50):
                _, _, terminated, truncated, info = b.step([("KeyEvent", "Left", True)])
                assert "remote.error" not in info and not truncated, info
                b_frames.append(int(info["frame"]))
                if terminated:
                    b.reset()
            print("B stepped 50 times", flush=True)
            # A's next steps return the interrupted step's reply and go on, or end the
            # episode (truncated, with info["remote.error"]) so that a reset starts anew;
            # they never raise. (A failure is reported, and the reset below tried anyway.)
            a_after, a_error, a_truncated = 0, None, None
            try:
                for _ in range(5):
                    _, _, _, truncated, info = a.step([])
                    if truncated or "remote.error" in info:
                        a_truncated = str(info.get("remote.error"))
                        print(f"A's step after the interrupt ended its episode: {a_truncated}", flush=True)
                        break
                    a_after += 1
                else:
                    print("A stepped 5 times after the interrupt", flush=True)
            except Exception as exc:  # noqa: BLE001
                a_error = repr(exc)
                print(f"A's step after the interrupt failed: {exc!r}", flush=True)
            a.reset(seed=3)
            a_reset_steps = 0
            for _ in range(5):
                _, _, _, truncated, info = a.step([])
                assert "remote.error" not in info and not truncated, info
                a_reset_steps += 1
            print("A reset and stepped 5 times", flush=True)
        finally:
            a.close()
            b.close()
    result(in_step=in_step, b_steps=len(b_frames), b_frames=b_frames, a_steps_after=a_after,
           a_error=a_error, a_truncated=a_truncated, a_steps_after_reset=a_reset_steps)


def main(argv: list[str]) -> None:
    scenario, *args = argv
    if scenario == "notebook":
        notebook(*args)
    elif scenario == "async-vector":
        async_vector(*args)
    elif scenario == "ctrl-c":
        ctrl_c()
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":  # a spawned or forkserver worker imports this module: nothing runs then
    main(sys.argv[1:])
