"""The warm pool (issue 44): claim -> first observation, and a bounded churn.

1. **Claim -> first observation** from a warm pool (``universe-remote pool``, local
   processes) for Catch and Pong: ``RemoteEnv("pool://...", env_id=...)`` then
   ``reset(seed=...)``, timed from the call until the observation is in hand (the claim,
   both channels connected, the reset's first frame); the release after it is not
   timed. Beside it, the same agent starting its own remote (``start_local`` + connect +
   reset) and agent-sandbox's published warm-pool claim (Kubernetes SIG Apps: p50 92 ms,
   p99 376 ms, claim only, no observation). Targets: p50 <= 20 ms, p99 <= 100 ms.
2. **Churn**: :data:`AGENTS` agents (threads of this process) claim a lockstep Catch
   remote from a pool of :data:`CHURN_SIZE`, step it :data:`CHURN_STEPS` steps, release
   it, again, for :data:`CHURN_SECONDS`: claims/s, the pool's claim latency, steps that
   reported a lost remote (0 expected), orphans at the end (a lease left, or a remote not
   warm again: 0 expected) and the pool process's memory before and after.

Every figure is from this run; the pool and the agents share the machine's cores.

Options (``python -m benchmarks pool -- OPTIONS`` or ``python -m benchmarks.pool
OPTIONS``): ``--churn-only`` skips (1); ``--agents``, ``--size``, ``--steps`` and
``--seconds`` set the churn. Issue 44's run, 64 agents on a pool of 32 for 10 minutes::

    python -m benchmarks pool -- --churn-only --agents 64 --size 32 --seconds 600
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Final

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from benchmarks.common import quick, table  # noqa: E402

CATCH: Final = "builtin.Catch-v0"
PONG: Final = "atari.Pong-v0"
#: Warm remotes per env id for the claim measure.
SIZE: Final = quick(4, 2)
#: Claims timed per env id, and own-remote starts timed per env id.
CLAIMS: Final = quick(60, 10)
OWN_STARTS: Final = quick(8, 2)
#: The churn: agents, the pool they share, steps per lease, wall seconds.
AGENTS: Final = quick(12, 4)
CHURN_SIZE: Final = quick(8, 4)
CHURN_STEPS: Final = 100
CHURN_SECONDS: Final = quick(60.0, 8.0)
#: agent-sandbox's published warm-pool claim (p50, p99 ms).
SANDBOX_MS: Final = (92.0, 376.0)
#: Seconds the pool may take to warm up.
WARM_TIMEOUT: Final = 120.0


def _start_pool(churn_size: int, churn_only: bool) -> tuple[subprocess.Popen[bytes], str]:
    kinds = [] if churn_only else [CATCH, PONG]
    command = [
        sys.executable, "-m", "universe_remote", "pool", *kinds,
        f"{CATCH},mode=lockstep,size={churn_size}", "--size", str(SIZE), "--port", "0", "--nice", "0",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    match = re.search(rb"pool address\s+(pool://\S+)", proc.stdout.readline())
    if match is None:
        proc.kill()
        raise RuntimeError("the pool did not start")
    return proc, match[1].decode()


def _all_warm(client: Any, timeout: float) -> None:
    end = time.monotonic() + timeout
    while True:
        status = client.status()
        if not status["leases"] and all(k["warm"] == k["size"] for k in status["kinds"]):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"the pool did not warm up: {status['kinds']}")
        time.sleep(0.05)


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def _claim_to_observation(pool: str, env_id: str, client: Any) -> list[float]:
    from remotes import RemoteEnv

    times = []
    for i in range(CLAIMS):
        started = time.perf_counter()
        env = RemoteEnv(pool, env_id=env_id)
        obs, _ = env.reset(seed=i)
        times.append(time.perf_counter() - started)
        assert obs.any()
        env.close()
        if i % SIZE == SIZE - 1:
            _all_warm(client, 30)  # each round from a whole warm pool
    return times


def _own_remote(env_id: str) -> list[float]:
    from remotes import RemoteEnv, start_local

    times = []
    for i in range(OWN_STARTS):
        started = time.perf_counter()
        group = start_local(env_id, 1)
        env = RemoteEnv(group, env_id=env_id)
        obs, _ = env.reset(seed=i)
        times.append(time.perf_counter() - started)
        assert obs.any()
        env.close()
        group.close()
    return times


def _churn(pool: str, agents: int, steps: int, seconds: float) -> dict[str, Any]:
    from remotes import RemoteEnv

    stop = time.monotonic() + seconds
    counts: dict[str, Any] = {"leases": 0, "steps": 0, "lost": 0, "errors": 0}
    lock = threading.Lock()
    problems: list[str] = []
    claims: list[float] = []  # seconds each claim took, as the agent saw it

    def agent() -> None:
        while time.monotonic() < stop:
            try:
                began = time.perf_counter()
                env = RemoteEnv(pool, env_id=CATCH, mode="lockstep")
                took = time.perf_counter() - began
            except Exception as exc:  # counted: a claim that failed
                with lock:
                    counts["errors"] += 1
                    problems.append(repr(exc))
                continue
            lost = 0
            try:
                env.reset(seed=0)
                for _ in range(steps):
                    _, _, _, _, info = env.step([])
                    lost += "remote.error" in info
            finally:
                env.close()
            with lock:
                counts["leases"] += 1
                counts["steps"] += steps
                counts["lost"] += lost
                claims.append(took)

    started = time.perf_counter()
    threads = [threading.Thread(target=agent) for _ in range(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts["seconds"] = time.perf_counter() - started
    counts["problems"] = problems[:3]
    counts["claims"] = claims
    return counts


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks pool --", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--churn-only", action="store_true", help="only the churn, not claim -> observation")
    parser.add_argument("--agents", type=int, default=AGENTS, help=f"churning agents (default {AGENTS})")
    parser.add_argument("--size", type=int, default=CHURN_SIZE,
                        help=f"the churn's pool of lockstep Catch remotes (default {CHURN_SIZE})")
    parser.add_argument("--steps", type=int, default=CHURN_STEPS,
                        help=f"steps a lease (default {CHURN_STEPS})")
    parser.add_argument("--seconds", type=float, default=CHURN_SECONDS,
                        help=f"how long the churn runs (default {CHURN_SECONDS:g})")
    args = parser.parse_args(sys.argv[1:])
    if args.agents < 1 or args.size < 1 or args.steps < 1 or args.seconds <= 0:
        parser.error("--agents, --size, --steps and --seconds are positive")
    return args


def _rss_tree_kib(pid: int) -> int:
    """The pool's memory with its remotes' (every process below it)."""
    total = 0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            total += _rss_kib(p)
            for task in os.listdir(f"/proc/{p}/task"):  # (a child is its starting thread's)
                with open(f"/proc/{p}/task/{task}/children") as f:
                    pids += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            continue
    return total


def main() -> None:
    from remotes.pool.client import PoolClient, parse_pool

    args = _options()
    proc, pool = _start_pool(args.size, args.churn_only)
    try:
        client = PoolClient(parse_pool(pool))
        _all_warm(client, WARM_TIMEOUT)
        rss_before, tree_before = _rss_kib(proc.pid), _rss_tree_kib(proc.pid)
        own_before = _rss_kib(os.getpid())
        rows = []
        for env_id in () if args.churn_only else (CATCH, PONG):
            warm = np.array(_claim_to_observation(pool, env_id, client)) * 1000
            own = np.array(_own_remote(env_id)) * 1000
            for how, times in (("warm pool (claim + connect + reset)", warm),
                               ("own remote (start_local + connect + reset)", own)):
                p50, p99 = np.percentile(times, [50, 99])
                rows.append([env_id, how, f"{p50:.1f}", f"{p99:.1f}", str(len(times))])
        sandbox = [f"{ms:.0f}" for ms in SANDBOX_MS]
        if rows:
            rows.append(["(published)", "agent-sandbox warm pool claim", *sandbox, "-"])
            print("claim -> first observation (ms); targets p50 <= 20, p99 <= 100")
            table(["env", "how", "p50 ms", "p99 ms", "runs"], rows)
            server = client.status()["claims"]
            print(f"the pool's own claim handling: p50 {server.get('p50_ms')} ms, "
                  f"p99 {server.get('p99_ms')} ms over {server['count']} claims")
        churn = _churn(pool, args.agents, args.steps, args.seconds)
        # (a claim still waiting when the churn stopped is released by now; every remote back)
        _all_warm(client, 60)
        status = client.status()
        orphans = len(status["leases"]) + sum(k["size"] - k["warm"] for k in status["kinds"])
        rss_after, tree_after, own_after = _rss_kib(proc.pid), _rss_tree_kib(proc.pid), _rss_kib(os.getpid())
        waits = np.array(churn["claims"] or [0.0]) * 1000
        c50, c99 = np.percentile(waits, [50, 99])
        print(f"\nchurn: {args.agents} agents on a pool of {args.size} lockstep Catch remotes, "
              f"{args.steps} steps a lease, {churn['seconds']:.0f} s")
        table(["leases", "claims/s", "env-steps/s", "lost steps", "failed claims", "orphans",
               "claim p50/p99 ms (agent)", "pool claim p50/p99 ms"],
              [[str(churn["leases"]), f"{churn['leases'] / churn['seconds']:.1f}",
                f"{churn['steps'] / churn['seconds']:.0f}", str(churn["lost"]), str(churn["errors"]),
                str(orphans), f"{c50:.0f}/{c99:.0f}",
                f"{status['claims'].get('p50_ms')}/{status['claims'].get('p99_ms')}"]])
        print("memory (RSS KiB) at start -> end: the pool process "
              f"{rss_before} -> {rss_after}, the pool with its remotes {tree_before} -> {tree_after}, "
              f"the agents' process {own_before} -> {own_after}")
        if churn["problems"]:
            print("failed claims:", churn["problems"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
