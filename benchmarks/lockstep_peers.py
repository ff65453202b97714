"""Lockstep Pong against its peers in one run: raw ALE, AsyncVectorEnv, AtariVectorEnv, dm_env_rpc.

Issue 5/10's table with issue 32's targets, every row measured here and now on this
machine (Pong, frameskip 4, an RGB frame every step, random actions):

- raw ``ale_py.ALEInterface`` in this process (the limit);
- gymnasium ``AsyncVectorEnv`` with n = 1, 4, 8 ALE workers (pipes + shared memory);
- a minimal dm_env_rpc server over ALE (:mod:`benchmarks.dm_peer`) through ``DmEnvAdaptor``;
- ours: ``RemoteEnv(mode="lockstep")`` on a local remote, frames through shared memory
  (what a local remote gets by default) and, for comparison, over VNC; then
  ``RemoteVectorEnv`` lockstep over n = 4 and 8 local remotes. The agent's CPU per
  env-step (both of its threads) is read from /proc around each of our rows;
- ALE's own ``ale_py.vector_env.AtariVectorEnv`` with n = 8 (RGB 210x160, no stacking,
  no max-pooling, frameskip 4; C++ threads in this process): the anchor a user picks for
  raw speed, beside ``RemoteVectorEnv`` n = 8.

Each target of the issue is printed beside its figure with "met" or "not met". Then the
determinism check: the same seed and actions give the same frame hashes through shared
memory and over VNC.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import statistics
from collections.abc import Callable
from typing import Any, Final

from ale_py.vector_env import AtariVectorEnv

from benchmarks.atari_common import (
    ENV_ID,
    FRAMESKIP,
    ROM,
    VECTOR_SECONDS,
    VECTOR_STEPS,
    VECTOR_WARMUP,
    Run,
    local_remotes,
    step_rates,
    until,
)
from benchmarks.atari_lockstep import measure_vector_async, measure_vector_ours
from benchmarks.common import quick, ratio, table
from benchmarks.dm_env_rpc_port import peer, row_dm_env_rpc
from benchmarks.pong_rows import row_raw_ale
from remotes import RemoteEnv
from remotes.local import LocalRemotes

#: Issue 32's targets for one lockstep Pong env: against AsyncVectorEnv n=1 and the
#: dm_env_rpc peer, and (a stretch) against raw ALE.
GOAL_VS_ASYNC1: Final = 1.1
STRETCH_VS_RAW: Final = 0.6
GOAL_VS_DM: Final = 3.0
#: Issue 32's targets for RemoteVectorEnv lockstep: against AsyncVectorEnv at the same n,
#: and (a stretch, n = 8) against AtariVectorEnv n = 8.
GOAL_VS_ASYNC: Final = 1.2
STRETCH_VS_ATARI_VECTOR: Final = 0.7
#: Issue 32's aim for the agent's CPU per lockstep env-step (seconds).
AIM_AGENT_CPU: Final = 80e-6
#: AtariVectorEnv's n (issue 32: the row beside our n = 8).
ATARI_VECTOR_N: Final = 8
#: Rounds of the single-env rows (the median is printed; the machine may be shared).
ROUNDS: Final = quick(3, 1)
#: Timed steps per single-env row, after WARMUP.
STEPS: Final = quick(3000, 500)
WARMUP: Final = quick(200, 50)
#: Steps of the determinism check.
CHECK_STEPS: Final = quick(300, 100)
VECTOR_COUNTS: Final = quick((4, 8), (4,))


def _drive(env: RemoteEnv, steps: int) -> None:
    space = env.action_space
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(space.sample())
        if terminated or truncated:
            env.reset()


def _shm(env: RemoteEnv, on: bool) -> None:
    async def set_it() -> None:
        env.session.shared.enabled = on
    env.loop.run(set_it())


def row_ours(remotes: LocalRemotes, shm: bool) -> dict[str, float]:
    env = RemoteEnv(remotes.addresses[0], mode="lockstep", frameskip=FRAMESKIP, encoding="raw")
    try:
        _shm(env, shm)
        env.reset(seed=0)
        env.action_space.seed(0)
        _drive(env, WARMUP)
        with Run([p.pid for p in remotes.processes]) as run:
            _drive(env, STEPS)
        return step_rates(STEPS, run)
    finally:
        env.close()


def trace(remotes: LocalRemotes, shm: bool) -> list[str]:
    env = RemoteEnv(remotes.addresses[0], mode="lockstep", frameskip=FRAMESKIP, encoding="raw")
    try:
        _shm(env, shm)
        obs, _ = env.reset(seed=11)
        env.action_space.seed(11)
        out = [hashlib.blake2b(obs.tobytes(), digest_size=8).hexdigest()]
        for _ in range(CHECK_STEPS):
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            out.append(hashlib.blake2b(obs.tobytes(), digest_size=8).hexdigest())
            if terminated or truncated:
                break
        return out
    finally:
        env.close()


def measure_atari_vector(n: int) -> dict[str, float]:
    """ALE's AtariVectorEnv over ``n`` Pong games stepped in lockstep: env-steps/s, and
    this process's CPU (its C++ threads run here) per env-step."""
    envs = AtariVectorEnv(
        ROM, n, img_height=210, img_width=160, grayscale=False, stack_num=1, frameskip=FRAMESKIP,
        maxpool=False, noop_max=0, reward_clipping=False, use_fire_reset=False,
        episodic_life=False, repeat_action_probability=0.0,
    )
    try:
        envs.reset(seed=0)
        envs.action_space.seed(0)
        for _ in range(VECTOR_WARMUP):
            envs.step(envs.action_space.sample())
        going, done = until(VECTOR_STEPS[n], VECTOR_SECONDS), 0
        with Run() as run:
            while going(done):
                envs.step(envs.action_space.sample())
                done += 1
    finally:
        envs.close()
    rates = step_rates(done, run)
    return {"env_steps_per_s": rates["steps_per_s"] * n, "own_cpu": rates["own_cpu"] / n}


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    multiprocessing.set_forkserver_preload(["numpy", "gymnasium", "ale_py"])
    single: dict[str, list[dict[str, float]]] = {}
    with local_remotes(1) as remotes, peer() as peer_port:
        for _ in range(ROUNDS):
            single.setdefault("raw", []).append({"steps_per_s": row_raw_ale()})
            single.setdefault("async1", []).append(measure_vector_async(1))
            single.setdefault("dm", []).append({"steps_per_s": row_dm_env_rpc(peer_port)})
            single.setdefault("shm", []).append(row_ours(remotes, shm=True))
            single.setdefault("vnc", []).append(row_ours(remotes, shm=False))
        same = trace(remotes, shm=True) == trace(remotes, shm=False)
    rate: Callable[[str], float] = lambda k: _median(single[k], "steps_per_s")  # noqa: E731
    raw, async1, dm, shm, vnc = (rate(k) for k in ("raw", "async1", "dm", "shm", "vnc"))

    def target(value: float, goal: float) -> str:
        return f"{value:.2f} (target >= {goal:g}: {'met' if value >= goal else 'not met'})"

    print(f"\n  One lockstep {ENV_ID} env, frameskip {FRAMESKIP}: median of {ROUNDS} rounds "
          f"of {STEPS} steps (env-steps/s)")
    table(
        ["row", "env-steps/s", "vs raw ALE", "agent CPU/env-step"],
        [
            ["raw ale_py.ALEInterface in process (the limit)", f"{raw:,.0f}", "1.00", ""],
            ["gymnasium AsyncVectorEnv n=1", f"{async1:,.0f}", ratio(async1, raw), ""],
            ["minimal dm_env_rpc server over ALE (benchmarks.dm_peer)", f"{dm:,.0f}",
             ratio(dm, raw), ""],
            ["ours: RemoteEnv lockstep, frames through shared memory", f"{shm:,.0f}",
             ratio(shm, raw), f"{_median(single['shm'], 'own_cpu') * 1e6:.0f} us"],
            ["ours: RemoteEnv lockstep, frames over VNC (raw)", f"{vnc:,.0f}", ratio(vnc, raw),
             f"{_median(single['vnc'], 'own_cpu') * 1e6:.0f} us"],
        ],
    )
    print(f"  ours vs AsyncVectorEnv n=1:            {target(shm / async1, GOAL_VS_ASYNC1)}")
    print(f"  ours vs minimal dm_env_rpc server:     {target(shm / dm, GOAL_VS_DM)}")
    print(f"  ours (shared memory) vs raw ALE:       {target(shm / raw, STRETCH_VS_RAW)} (stretch)")
    agent_cpu = _median(single["shm"], "own_cpu")
    print(f"  agent CPU per lockstep env-step:       {agent_cpu * 1e6:.0f} us (target <= "
          f"{AIM_AGENT_CPU * 1e6:.0f} us: {'met' if agent_cpu <= AIM_AGENT_CPU else 'not met'})")
    print(f"  same seed and actions, same frame hashes through shared memory and over VNC "
          f"({CHECK_STEPS} steps): {'yes' if same else 'NO'}")

    rows: list[list[Any]] = []
    ours_at: dict[int, float] = {}
    for n in VECTOR_COUNTS:
        ours, theirs = measure_vector_ours(n, "raw"), measure_vector_async(n)
        mine, other = ours["steps_per_s"] * n, theirs["steps_per_s"] * n
        ours_at[n] = mine
        rows.append([f"n={n}", f"{mine:,.0f}", f"{other:,.0f}", target(mine / other, GOAL_VS_ASYNC),
                     f"{ours['own_cpu'] / n * 1e6:.0f} us"])
    print("\n  RemoteVectorEnv lockstep vs AsyncVectorEnv at the same n (env-steps/s in all)")
    table(["", "ours", "AsyncVectorEnv", "ours / theirs", "agent CPU/env-step"], rows)

    atari = measure_atari_vector(ATARI_VECTOR_N)
    n = ATARI_VECTOR_N
    mine = ours_at.get(n) or measure_vector_ours(n, "raw")["steps_per_s"] * n
    print(f"\n  ALE's AtariVectorEnv n={n} (RGB 210x160, no stacking, frameskip {FRAMESKIP}; "
          f"its threads in this process) vs RemoteVectorEnv lockstep n={n}")
    table(
        ["row", "env-steps/s", f"vs ours n={n}", "CPU/env-step (this process)"],
        [[f"ale_py.vector_env.AtariVectorEnv n={n}", f"{atari['env_steps_per_s']:,.0f}",
          ratio(atari["env_steps_per_s"], mine), f"{atari['own_cpu'] * 1e6:.0f} us"],
         [f"ours: RemoteVectorEnv lockstep n={n}", f"{mine:,.0f}", "1.00", ""]],
    )
    print(f"  ours n={n} vs AtariVectorEnv n={n}:      "
          f"{target(mine / atari['env_steps_per_s'], STRETCH_VS_ATARI_VECTOR)} (stretch)")


if __name__ == "__main__":
    main()
