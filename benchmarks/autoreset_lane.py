"""Episode boundaries in lockstep: what an autoreset costs the agent (issue 32).

A :class:`remotes.RemoteVectorEnv` of :data:`REMOTES` lockstep ``builtin.Catch-v0``
remotes on 127.0.0.1 (one ``serve`` process each), stepped with random keys, frameskip
1, in two rows: episodes truncated every :data:`SHORT_EPISODE` steps (an autoreset per
``SHORT_EPISODE`` env-steps) and long episodes (Catch's own, hundreds of steps). Per
row: env-steps/s, the agent's CPU per env-step in the stepping thread, and in every
*other* thread of the agent's process (the loop thread, workers, the keepalive thread):
the work an autoreset hands off. All threads' CPU is the scheduler's (/proc schedstat).

Run as a script to measure another tree: ``PYTHONPATH=/work/main python
benchmarks/autoreset_lane.py`` measures the agent code of ``/work/main``.
"""

from __future__ import annotations

import os
import time
from typing import Final

import numpy as np

from benchmarks.common import quick, schedstat_cpu, table

#: Remotes in the vector (the issue's figure: 4).
REMOTES: Final = 4
#: Steps per episode in the short row (the issue's: truncated every 10 steps).
SHORT_EPISODE: Final = 10
#: Vector steps measured per row (after WARMUP_STEPS), and rounds (the median is shown).
STEPS: Final = quick(3000, 600)
WARMUP_STEPS: Final = quick(200, 50)
ROUNDS: Final = quick(3, 1)


def _measure(addresses: list[str], episode_steps: int | None) -> tuple[float, float, float]:
    """(env-steps/s, stepping thread's CPU s per env-step, other threads' CPU s per env-step)."""
    from remotes import RemoteVectorEnv

    env = RemoteVectorEnv(addresses, mode="lockstep", max_episode_steps=episode_steps)
    rng = np.random.default_rng(0)
    keys = [[("KeyEvent", "Left", True)], [("KeyEvent", "Left", False)],
            [("KeyEvent", "Right", True)], [("KeyEvent", "Right", False)], []]
    try:
        env.reset(seed=1)
        for _ in range(WARMUP_STEPS):
            env.step([keys[k] for k in rng.integers(len(keys), size=REMOTES)])
        pid = os.getpid()
        wall, own, everyone = time.perf_counter(), time.thread_time(), schedstat_cpu(pid)
        for _ in range(STEPS):
            env.step([keys[k] for k in rng.integers(len(keys), size=REMOTES)])
        wall = time.perf_counter() - wall
        own = time.thread_time() - own
        others = schedstat_cpu(pid) - everyone - own
    finally:
        env.close()
    env_steps = STEPS * REMOTES
    return env_steps / wall, own / env_steps, max(others, 0.0) / env_steps


def main() -> None:
    from remotes import start_local

    rows = []
    with start_local("builtin.Catch-v0", REMOTES, games_per_process=1) as local:
        addresses = [str(a) for a in local.addresses]
        for label, episode in ((f"truncated every {SHORT_EPISODE} steps", SHORT_EPISODE),
                               ("long episodes (Catch's own)", None)):
            runs = sorted((_measure(addresses, episode) for _ in range(ROUNDS)), key=lambda r: r[0])
            rate, own, others = runs[len(runs) // 2]
            rows.append([label, f"{rate:,.0f}", f"{own * 1e6:.0f}", f"{others * 1e6:.1f}"])
    print(f"  RemoteVectorEnv, {REMOTES} lockstep Catch remotes, frameskip 1, {STEPS} vector "
          f"steps per run, median of {ROUNDS}")
    table(["episodes", "env-steps/s", "stepping thread us/env-step", "other threads us/env-step"], rows)


if __name__ == "__main__":
    main()
