"""The warm pool with real remotes: ``universe-remote pool`` in a subprocess, agents
claiming through ``pool://`` addresses (remotes/pool/, docs/cluster.md "A warm pool").

One pool serves every test here (its start is the expensive part): two real-time Catch
remotes, four lockstep Catch remotes (the churn) and one lockstep ClickTarget (a kind of
one, so the next claimer is sure to get the remote a lapsed holder had).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest

from remotes import RemoteEnv, RemoteVectorEnv
from remotes.pool.client import PoolClient, PoolError, parse_pool
from tests.remotes.pool_process import all_warm, running_pool, wait_for

#: Seconds a lease lives unrenewed in this pool: short, so lapses are quick to see.
DEADLINE = 2.5
CATCH = "builtin.Catch-v0"
CLICK = "builtin.ClickTarget-v0"


def kinds(client: PoolClient) -> dict[tuple[str, str], dict[str, Any]]:
    return {(k["env_id"], k["mode"]): k for k in client.status()["kinds"]}


@pytest.fixture(scope="module")
def pool() -> Iterator[str]:
    with running_pool([CATCH, f"{CATCH},mode=lockstep,size=4", f"{CLICK},mode=lockstep,size=1",
                      "--size", "2", "--port", "0", "--deadline", str(DEADLINE), "--nice", "0"]) as address:
        yield address


def test_claim_step_release(pool: str) -> None:
    client = PoolClient(parse_pool(pool))
    env = RemoteEnv(pool, env_id=CATCH)
    try:
        obs, _ = env.reset(seed=3)
        assert obs.shape == (210, 160, 3) and obs.any()
        for _ in range(10):
            _, reward, terminated, truncated, info = env.step([])
            assert "remote.error" not in info
        (lease,) = client.status()["leases"]
        assert lease["address"] == env.remote.name
        assert kinds(client)[CATCH, "realtime"]["leased"] == 1
    finally:
        env.close()
    wait_for(lambda: kinds(client)[CATCH, "realtime"]["warm"] == 2, 20, "the released remote warm again")
    assert client.status()["claims"]["lost"] == 0  # released, not lapsed


def test_make_and_make_vec_lease_from_a_pool(pool: str) -> None:
    client = PoolClient(parse_pool(pool))
    envs = gymnasium.make_vec(f"universe-remote/{CATCH}", num_envs=2, remotes=pool, mode="lockstep")
    env = gymnasium.make(f"universe-remote/{CATCH}", remotes=pool)
    try:
        assert len(client.status()["leases"]) == 3
        envs.reset(seed=0)
        env.reset(seed=0)
        for _ in range(5):
            _, _, _, truncated, _ = envs.step(np.array([1, 2]))
            assert not truncated.any()
            env.step(1)
    finally:
        envs.close()
        env.close()
    wait_for(lambda: all_warm(client), 30, "the leases released and their remotes warm")


def test_the_status_page_and_the_status_command(pool: str) -> None:
    address = parse_pool(pool)
    with urllib.request.urlopen(f"http://{address.host}:{address.port}/", timeout=10) as reply:
        assert b"v1/status" in reply.read()
    out = subprocess.run(
        [sys.executable, "-m", "universe_remote", "pool", "--status", "--port", str(address.port)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert re.search(rf"{re.escape(CLICK)}\s+lockstep\s+1\s+1\s+0", out), out
    assert "claims" in out
    # play leases its -n remotes from a pool address (deploy/pool.yaml's trainer).
    played = subprocess.run(
        [sys.executable, "-m", "universe_remote", "play", CATCH, "-n", "2", "--remote", pool,
         "--steps", "10"],
        capture_output=True, text=True, timeout=120,
    )
    assert played.returncode == 0, played.stderr


def test_bad_claims_say_what_is_wrong(pool: str) -> None:
    client = PoolClient(parse_pool(pool))
    with pytest.raises(PoolError, match="serves no atari.Pong-v0.*it serves"):
        client.claim("atari.Pong-v0")
    with pytest.raises(PoolError, match='"mode"'):
        client.claim(CATCH, mode="fast")
    with pytest.raises(PoolError, match='"deadline"'):
        client.claim(CATCH, deadline=DEADLINE * 2)
    with pytest.raises(ValueError, match="env_id"):
        RemoteEnv(pool)


def test_a_holder_that_stops_renewing_loses_its_lease_and_the_next_claimer_gets_a_reset_remote(
    pool: str,
) -> None:
    client = PoolClient(parse_pool(pool))
    holder = RemoteEnv(pool, env_id=CLICK, mode="lockstep")
    try:
        holder.reset(seed=1)
        for _ in range(3):
            holder.step([])
        old_episode = holder.remote.episode_id
        address = holder.remote.name
        group = holder.owned
        group._renewer.cancel()  # the holder goes on, but stops renewing its lease
        stopped = time.monotonic()
        wait_for(lambda: not client.status()["leases"], DEADLINE + 10, "the lapsed lease ended")
        assert time.monotonic() - stopped < DEADLINE + 5  # loose: a loaded machine
        # The pool took it back (closing the holder) and reset it.
        wait_for(lambda: kinds(client)[CLICK, "lockstep"]["warm"] == 1, 20, "the remote reset and warm")
        # The holder's next step is told, not handed a silent zero reward.
        _, reward, _, truncated, info = holder.step([])
        assert truncated and reward == 0.0
        assert "lease" in info["remote.error"] and "pool" in info["remote.error"], info["remote.error"]
        # The only remote of this kind serves the next claimer, reset and its own.
        nxt = RemoteEnv(pool, env_id=CLICK, mode="lockstep")
        try:
            assert nxt.remote.name == address
            obs, info = nxt.reset(seed=2)
            assert nxt.remote.episode_id is not None and old_episode is not None
            assert nxt.remote.episode_id > old_episode
            for _ in range(3):
                _, _, _, truncated, info = nxt.step([])
                assert not truncated and "remote.error" not in info
            # The lapsed holder cannot take it back: its steps stay away.
            _, _, _, _, info = holder.step([])
            assert info.get("remote.connected") is False
            _, _, _, truncated, info = nxt.step([])
            assert not truncated and "remote.error" not in info
        finally:
            nxt.close()
    finally:
        holder.close()
    wait_for(lambda: all_warm(client), 30, "every remote warm again")


def test_a_remote_killed_while_leased_is_reported_and_replaced(pool: str) -> None:
    client = PoolClient(parse_pool(pool))
    envs = RemoteVectorEnv(pool, num_envs=2, env_id=CATCH)
    try:
        envs.reset(seed=0)
        victim = envs.remotes[0].name
        (pid,) = {r["pid"] for r in client.status()["remotes"] if r["address"] == victim}
        os.kill(pid, signal.SIGKILL)
        seen_error = back = None
        end = time.monotonic() + 60
        noop = [[], []]
        while back is None and time.monotonic() < end:
            _, rewards, _, truncated, info = envs.step(noop)
            if seen_error is None and truncated[0]:
                assert info["_remote.error"][0]
                seen_error = info["remote.error"][0]
                assert rewards[0] == 0.0
            if info.get("_remote.reconnected", np.zeros(2, bool))[0]:
                back = info["remote.name"][0]
            assert not truncated[1], info.get("remote.error")
        assert seen_error is not None, "the loss was never reported"
        assert back is not None and back != victim, "the killed remote was not replaced"
        assert envs.remotes[0].name == back
        _, _, _, truncated, info = envs.step(noop)
        assert not truncated.any()
    finally:
        envs.close()
    wait_for(lambda: all_warm(client), 60, "the pool back to its size, all warm")
    assert victim not in {r["address"] for r in client.status()["remotes"]}


def test_a_thousand_claims_with_random_abandons_leave_no_orphans(pool: str) -> None:
    client = PoolClient(parse_pool(pool))
    rng = random.Random(44)
    plan = [rng.random() < 0.05 for _ in range(1000)]  # True: claimed, then abandoned
    errors: list[BaseException] = []
    lock = threading.Lock()
    nxt = iter(range(len(plan)))

    def worker() -> None:
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            try:
                reply = client.claim(CATCH, mode="lockstep", wait=60, deadline=0.3)
                if not plan[i]:
                    client.release([reply["lease"]])
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors[:3]
    assert not any(t.is_alive() for t in threads)
    wait_for(lambda: all_warm(client), 30, "every remote warm again")
    status = client.status()
    assert status["claims"]["count"] >= 1000
    assert time.monotonic() - started < 180
    # No orphan: each remote of the kind takes an agent at once and steps.
    envs = RemoteVectorEnv(pool, num_envs=4, env_id=CATCH, mode="lockstep")
    try:
        envs.reset(seed=0)
        assert len({r.name for r in envs.remotes}) == 4
        for _ in range(5):
            _, _, _, truncated, info = envs.step([[]] * 4)
            assert not truncated.any(), info.get("remote.error")
    finally:
        envs.close()
