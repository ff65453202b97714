"""Several agents in one world: joint lockstep steps/s of two agents vs one, in one run.

Each row is a ``universe-remote serve`` process on 127.0.0.1 stepped in lockstep,
frameskip 4, with a fixed action script, resetting at each episode's end:

- two agents in one ``builtin.Duel-v0`` world through :class:`remotes.parallel.RemoteParallelEnv`
  (a joint step: both players' ``v0.env.step`` meet at the remote's barrier, then the
  frame over VNC): the figure issue 17 asks for;
- one agent in the single-player world (``builtin.Catch-v0``) through the same env: the
  named peer the ratio is against;
- one agent in Catch through :class:`remotes.RemoteEnv` (the single-agent env, frames
  through shared memory where the remote is local): where a single agent is today;
- the rewarder alone (no pixels): two clients' joint steps on Duel vs one client's
  steps on Catch and on Duel, which isolates what the barrier costs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

from benchmarks.common import quick, ratio, table

#: Joint steps measured per row (after WARMUP_STEPS).
STEPS: Final = quick(1500, 300)
WARMUP_STEPS: Final = quick(100, 30)
FRAMESKIP: Final = 4


def _steps_per_second(step: Callable[[int], bool], reset: Callable[[], object]) -> float:
    """``step(i)`` (True: the episode ended, so reset) WARMUP_STEPS times, then STEPS timed."""
    reset()
    started = 0.0
    for i in range(WARMUP_STEPS + STEPS):
        if i == WARMUP_STEPS:
            started = time.perf_counter()
        if step(i):
            reset()
    return STEPS / (time.perf_counter() - started)


def _parallel(address: str) -> float:
    """Steps/s of RemoteParallelEnv over the remote at ``address``."""
    from remotes.parallel import RemoteParallelEnv

    env = RemoteParallelEnv(address, frameskip=FRAMESKIP)

    def step(i: int) -> bool:
        env.step({a: (i // 6 + n) % 3 for n, a in enumerate(env.agents)})
        return not env.agents

    try:
        return _steps_per_second(step, lambda: env.reset(seed=1))
    finally:
        env.close()


def _remote_env(address: str) -> float:
    """Steps/s of the single-agent RemoteEnv over Catch, the same script."""
    from remotes import RemoteEnv

    keys = [[], [("KeyEvent", "Left", True)], [("KeyEvent", "Left", False)]]
    env = RemoteEnv(address, mode="lockstep", frameskip=FRAMESKIP)

    def step(i: int) -> bool:
        _, _, terminated, truncated, _ = env.step(keys[i // 6 % 3])
        return bool(terminated or truncated)

    try:
        return _steps_per_second(step, lambda: env.reset(seed=1))
    finally:
        env.close()


async def _rewarder_only(address: str, players: int) -> float:
    """Steps/s of ``players`` rewarder clients stepping jointly (no VNC)."""
    from rewarder.client import RewarderClient

    clients = [RewarderClient(address, player=p if players > 1 else None) for p in range(players)]
    await asyncio.gather(*(c.start() for c in clients))
    try:
        await asyncio.gather(*(c.reset(seed=1, mode="lockstep") for c in clients))
        started = 0.0
        for i in range(WARMUP_STEPS + STEPS):
            if i == WARMUP_STEPS:
                started = time.perf_counter()
            replies = await asyncio.gather(*(c.step([], FRAMESKIP) for c in clients))
            if replies[0].done:
                await asyncio.gather(*(c.reset() for c in clients))
        return STEPS / (time.perf_counter() - started)
    finally:
        await asyncio.gather(*(c.close() for c in clients))


def main() -> None:
    from remotes import start_local

    with start_local("builtin.Duel-v0") as duel, start_local("builtin.Catch-v0") as catch:
        duel_rewarder = f"127.0.0.1:{duel.addresses[0].rewarder_port}"
        catch_rewarder = f"127.0.0.1:{catch.addresses[0].rewarder_port}"
        two = _parallel(duel.address)
        one = _parallel(catch.address)
        single_env = _remote_env(catch.address)
        raw_two = asyncio.run(_rewarder_only(duel_rewarder, 2))
        raw_one = asyncio.run(_rewarder_only(catch_rewarder, 1))
        raw_duel_one = asyncio.run(_rewarder_only(duel_rewarder, 1))
    print(f"  {STEPS} lockstep steps of {FRAMESKIP} frames per row, one serve process each, "
          "this machine's 2 cores shared")
    table(
        ["", "joint steps/s", "vs one agent (same API)"],
        [
            ["RemoteParallelEnv, Duel, 2 agents", f"{two:.0f}", ratio(two, one)],
            ["RemoteParallelEnv, Catch, 1 agent (peer)", f"{one:.0f}", "1.00x"],
            ["RemoteEnv, Catch, 1 agent", f"{single_env:.0f}", ratio(single_env, one)],
            ["rewarder only, Duel, 2 clients", f"{raw_two:.0f}", ratio(raw_two, raw_one)],
            ["rewarder only, Catch, 1 client (peer)", f"{raw_one:.0f}", "1.00x"],
            ["rewarder only, Duel, 1 client (no barrier)", f"{raw_duel_one:.0f}",
             ratio(raw_duel_one, raw_one)],
        ],
    )
    print(f"  two agents in one world: {ratio(two, one)} the joint steps/s of one agent in "
          f"the single-player world ({2 * two:.0f} agent-steps/s vs {one:.0f})")
