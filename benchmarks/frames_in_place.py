"""Frames in place against frames copied out of each remote's segment (issue 40, "frames in
place"; rewarder/shm_bank.py).

A batched lockstep vector of Pong games (``start_local``'s packing: one ``serve`` process
per core), its steady steps' frames either written by the remotes straight into the
array the step returns (the vector's bank, the default) or copied by the agent out of
each process's segment into a fresh array (the bank stopped: the way before). The two
alternate in one vector, :data:`ROUNDS` rounds of :data:`ROUND_SECONDS` each way, so the
machine's drift falls on both; each row gives the median env-steps a second, the CPU of
every process (the agent and the ``serve`` processes, from ``/proc/PID/stat``: whole
processes, their ended threads too) per env-step, and the share of steps whose frames
were written in place. The last column is the per-round ratio's median: in place over
copied.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Final

from benchmarks.atari_common import FRAMESKIP, drawn, local_remotes
from benchmarks.common import process_cpu, quick, table
from remotes import RemoteVectorEnv
from rewarder.shm_bank import Bank

#: Vector sizes timed.
SIZES: Final = quick((4, 8), (4,))
ROUNDS: Final = quick(8, 2)
ROUND_SECONDS: Final = quick(2.0, 0.5)
#: Steps before timing, and before each timed stretch (the switch's first steps).
WARMUP_STEPS: Final = quick(300, 60)
SETTLE_STEPS: Final = 30


def _stretch(step: Callable[[], None], pids: tuple[int, ...], bank: Bank, n: int
             ) -> tuple[float, float, float]:
    """Env-steps a second, CPU us per env-step (all processes), share of steps in place."""
    for _ in range(SETTLE_STEPS):
        step()
    used, cpu, started, steps = bank.used, _cpu(pids), time.perf_counter(), 0
    while time.perf_counter() - started < ROUND_SECONDS:
        step()
        steps += 1
    wall = time.perf_counter() - started
    return steps * n / wall, (_cpu(pids) - cpu) / (steps * n) * 1e6, (bank.used - used) / steps


def _cpu(pids: tuple[int, ...]) -> float:
    """CPU seconds of whole processes, threads that ended included (a thread's own
    ``schedstat`` goes with it)."""
    return sum(map(process_cpu, pids))


def measure(n: int) -> list[str]:
    """One table row for a vector of ``n`` (see the module)."""
    with local_remotes(n) as remotes:
        processes = len(remotes.processes)
        env = RemoteVectorEnv(remotes.address, mode="lockstep", frameskip=FRAMESKIP, encoding="raw")
        try:
            env.reset(seed=0)
            space = env.single_action_space
            space.seed(0)
            actions = drawn(lambda: [space.sample() for _ in range(n)])
            batches = env._core._lockstep.batches  # type: ignore[union-attr]
            assert batches is not None
            bank = batches.bank
            for _ in range(WARMUP_STEPS):
                env.step(actions())
            pids = (os.getpid(), *(p.pid for p in remotes.processes))
            seen: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
            for round_ in range(ROUNDS):
                for in_place in (True, False) if round_ % 2 == 0 else (False, True):
                    bank.off = None if in_place else "copied, for the comparison"
                    seen[in_place].append(_stretch(lambda: env.step(actions()), pids, bank, n))
            bank.off = None
        finally:
            env.close()
    (fast, fast_cpu, share), (slow, slow_cpu, _) = (
        tuple(statistics.median(r[k] for r in seen[way]) for k in range(3)) for way in (True, False))
    ratio = statistics.median(a[0] / b[0] for a, b in zip(seen[True], seen[False], strict=True))
    return [f"n={n} ({processes} processes)", f"{fast:,.0f}", f"{slow:,.0f}", f"{fast_cpu:.0f}",
            f"{slow_cpu:.0f}", f"{share:.0%}", f"{ratio:.3f}x"]


def main() -> None:
    print(f"  {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start; lockstep Pong, "
          f"frameskip {FRAMESKIP}; {ROUNDS} alternated rounds of {ROUND_SECONDS:g} s each way")
    rows = [measure(n) for n in SIZES]
    table(["vector", "in place env-steps/s", "copied env-steps/s", "in place CPU us/env-step",
           "copied CPU us/env-step", "steps in place", "in place / copied"], rows)
    print(f"  load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
