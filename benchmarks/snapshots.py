"""Snapshots: a restore's round trip from an agent, and one Pong state forked into 8 remotes.

Measured on 127.0.0.1 with lockstep remotes from ``start_local`` (docs/snapshots.md):

1. **Restore round trip** from :class:`RemoteEnv` (``env.restore_state(state)``, two
   states in turn so that no restore finds its state already read: the
   ``v0.env.restore`` request, the runtime's restore, the restored frame handed back
   through shared memory), for ``builtin.Catch-v0`` (target 1 ms) and ``atari.Pong-v0``
   (target 3 ms), against, in the same run: ale-py's in-process ``restore_state`` on
   ``ALE/Pong-v5`` (no frame: ale-py's restore draws none), the remote's runtime
   restoring in process (what the round trip adds to), and a fresh ``reset(seed)`` of the
   same remote (what an agent without snapshots does to start over).
2. **Fork** one Pong state into 8 running remotes (``RemoteVectorEnv.fork``: a snapshot
   exported from one, its bytes restored on the 7 others at once; target 50 ms).

Medians of :data:`REPEATS` calls after :data:`WARMUP`; the machine is shared (2 cores),
so the load average is printed beside the figures.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import ale_py
import gymnasium

from benchmarks.common import quick, ratio, table
from remotes import RemoteEnv, RemoteVectorEnv, start_local
from runtimes import registry

gymnasium.register_envs(ale_py)

REPEATS = quick(300, 40)
WARMUP = quick(20, 5)
FORK_REPEATS = quick(30, 5)
FORKS = 8
#: Targets of issue 37 (seconds).
TARGETS = {"builtin.Catch-v0": 0.001, "atari.Pong-v0": 0.003, "fork": 0.050}


def median(call: Callable[[], object], repeats: int = REPEATS, warmup: int = WARMUP) -> float:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def ale_py_restore() -> float:
    env = gymnasium.make("ALE/Pong-v5", frameskip=4, repeat_action_probability=0.0)
    try:
        env.reset(seed=0)
        for _ in range(30):
            env.step(env.action_space.sample())
        ale = env.unwrapped.ale  # type: ignore[attr-defined]
        state = ale.cloneState()
        return median(lambda: ale.restoreState(state))
    finally:
        env.close()


def alternate(restore: Callable[[object], object], states: list[object]) -> Callable[[], object]:
    """A call restoring ``states`` in turn: no restore finds the state it restored last
    (a runtime may keep the last one read)."""
    turn = iter(range(1 << 62))
    return lambda: restore(states[next(turn) % len(states)])


def runtime_restore(env_id: str) -> float:
    runtime = registry.make(env_id)
    runtime.reset(1)
    states = []
    for _ in range(2):
        for _ in range(30):
            runtime.advance([], 4)
        states.append(runtime.snapshot())
    return median(alternate(runtime.restore, states))  # type: ignore[arg-type]


def remote_figures(env_id: str) -> dict[str, float]:
    with start_local(env_id, 1, extra_args=["--mode", "lockstep"]) as local:
        env = RemoteEnv(local.addresses[0], mode="lockstep", frameskip=4)
        try:
            env.reset(seed=1)
            states = []
            for _ in range(2):
                for _ in range(30):
                    env.step([])
                states.append(env.clone_state())
            restore = median(alternate(env.restore_state, states))  # type: ignore[arg-type]
            reset = median(lambda: env.reset(seed=1), repeats=max(REPEATS // 10, 5))
            snapshot = median(env.clone_state, repeats=max(REPEATS // 3, 5))
        finally:
            env.close()
    return {"restore": restore, "reset": reset, "snapshot": snapshot}


def fork_figure() -> float:
    with start_local("atari.Pong-v0", FORKS, extra_args=["--mode", "lockstep"]) as local:
        envs = RemoteVectorEnv(local.addresses, mode="lockstep", frameskip=4)
        try:
            envs.reset(seed=list(range(FORKS)))
            for _ in range(10):
                envs.step([[]] * FORKS)
            return median(lambda: envs.fork(0), repeats=FORK_REPEATS, warmup=2)
        finally:
            envs.close()


def main() -> None:
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    ale = ale_py_restore()
    rows = []
    for env_id in ("builtin.Catch-v0", "atari.Pong-v0"):
        inproc = runtime_restore(env_id)
        remote = remote_figures(env_id)
        rows.append([
            env_id, f"{remote['restore'] * 1e3:.2f} ms", f"{TARGETS[env_id] * 1e3:g} ms",
            f"{inproc * 1e3:.3f} ms", f"{remote['reset'] * 1e3:.2f} ms",
            f"{remote['snapshot'] * 1e3:.2f} ms", ratio(remote["reset"], remote["restore"]),
        ])
    table(["env", "restore round trip", "target", "runtime in process", "reset(seed)",
           "clone_state", "reset / restore"], rows)
    print(f"ale-py in-process restore_state (Pong, no frame): {ale * 1e3:.3f} ms")
    fork = fork_figure()
    target = TARGETS["fork"] * 1e3
    print(f"fork one Pong state into {FORKS} remotes: {fork * 1e3:.1f} ms (target {target:g} ms)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
