"""The warm pool with its remotes on a two-node Ray cluster on 127.0.0.1, as one scenario
that ``tests/remotes/test_pool_ray.py`` runs in a network namespace of its own
(``python -m tests.remotes.pool_ray_scenario OUT.json`` under
:func:`tests.ray_cluster.in_netns`); it writes what it saw to OUT.json.

The pool (``serve_pool(..., ray="")``, this process being Ray's driver) keeps two Catch
remotes as actors; an agent claims one through ``pool://``, steps it, and its remote's
process is killed: the pool's health check finds it gone, ends the lease, starts a new
actor, and the agent is told and steps a new remote; closing releases the lease.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Final

from remotes import RemoteEnv
from remotes.pool.client import PoolClient, parse_pool
from remotes.pool.service import PoolSpec, serve_pool
from remotes.pool.table import Kind
from tests.ray_cluster import two_node_cluster

CATCH: Final = "builtin.Catch-v0"
#: Seconds the killed remote's replacement may take (a new actor, a new worker process).
BACK_DEADLINE: Final = 120.0


def run(out: dict[str, Any]) -> None:
    ready = threading.Event()
    bound: dict[str, Any] = {}
    loop = asyncio.new_event_loop()

    def started(service: Any, port: int) -> None:
        bound["port"] = port
        ready.set()

    task = loop.create_task(serve_pool([PoolSpec(Kind(CATCH), 2)], ray="", ready=started,
                                       health_interval=1.0, nice=0))
    thread = threading.Thread(target=loop.run_until_complete, args=(task,), daemon=True)
    thread.start()
    assert ready.wait(60), "the pool did not listen"
    pool = f"pool://127.0.0.1:{bound['port']}"
    client = PoolClient(parse_pool(pool))
    end = time.monotonic() + 120
    while client.status()["kinds"][0]["warm"] < 2:
        assert time.monotonic() < end, f"not warm: {client.status()}"
        time.sleep(0.1)
    out["warm_remotes"] = [r["address"] for r in client.status()["remotes"]]
    env = RemoteEnv(pool, env_id=CATCH)
    try:
        env.reset(seed=0)
        for _ in range(10):
            env.step([])
        victim = env.remote.name
        (pid,) = [r["pid"] for r in client.status()["remotes"] if r["address"] == victim]
        out["victim"] = victim
        os.kill(pid, signal.SIGKILL)
        errors, back = [], None
        end = time.monotonic() + BACK_DEADLINE
        while back is None and time.monotonic() < end:
            _, _, _, truncated, info = env.step([])
            if truncated and "remote.error" in info:
                errors.append(info["remote.error"])
            if info.get("remote.reconnected"):
                back = info["remote.name"]
        out["errors"] = errors[:2]
        out["back"] = back
        steps_after = 0
        for _ in range(10):
            _, _, _, truncated, _ = env.step([])
            steps_after += not truncated
        out["steps_after"] = steps_after
    finally:
        env.close()
    end = time.monotonic() + 60
    while True:
        status = client.status()
        if not status["leases"] and status["kinds"][0]["warm"] == 2:
            break
        assert time.monotonic() < end, f"not back to two warm: {status}"
        time.sleep(0.1)
    out["final_remotes"] = [r["address"] for r in status["remotes"]]
    loop.call_soon_threadsafe(task.cancel)
    thread.join(60)


def main() -> None:
    out: dict[str, Any] = {"error": None}
    try:
        with two_node_cluster():
            run(out)
    except BaseException:
        out["error"] = traceback.format_exc()
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    os._exit(0)  # Ray's threads: do not wait for them


if __name__ == "__main__":
    main()
