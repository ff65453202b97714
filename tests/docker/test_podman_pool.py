"""The warm pool in podman containers (``serve_pool(..., docker=IMAGE)``, ``pool --docker``):
the project's image built offline (tests/docker/conftest.py), podman's Docker API in a
network namespace with only loopback, the pool in the script's process and an agent
claiming through ``pool://``. A container removed while leased is reported to its holder,
who moves to another remote, and the pool starts a new container in its place."""

from __future__ import annotations

import textwrap
from typing import Final

import pytest

from tests.docker import podman as pm
from tests.docker.conftest import FIGURES

#: Seconds the test's own body may take (its namespace script waits up to 600 s); the
#: image's build comes on top for the first test of a session that asks for it.
BODY_TIMEOUT: Final = 660
pytestmark = [
    pytest.mark.skipif(
        bool(pm.MISSING),
        reason=f"{', '.join(pm.MISSING)} not installed (scripts/install-system-packages)",
    ),
    pytest.mark.timeout(BODY_TIMEOUT),
]

#: Runs inside the namespace, after SERVICE_PRELUDE.
SCRIPT = textwrap.dedent(
    """
    import asyncio, json, subprocess, sys, threading, time
    from remotes import RemoteEnv
    from remotes.pool.client import PoolClient, parse_pool
    from remotes.pool.service import PoolSpec, serve_pool
    from remotes.pool.table import Kind
    IMAGE = sys.argv[1]
    out = {}

    def wait(check, timeout, what):
        end = time.monotonic() + timeout
        while not check():
            if time.monotonic() > end:
                raise AssertionError(what)
            time.sleep(0.1)  # polls a condition with a deadline

    try:
        bound, ready = {}, threading.Event()
        loop = asyncio.new_event_loop()
        task = loop.create_task(serve_pool(
            [PoolSpec(Kind("builtin.Catch-v0"), 2)], docker=IMAGE, health_interval=1.0,
            ready=lambda service, port: (bound.update(port=port), ready.set())))
        threading.Thread(target=loop.run_until_complete, args=(task,), daemon=True).start()
        assert ready.wait(60)
        pool = f"pool://127.0.0.1:{bound['port']}"
        client = PoolClient(parse_pool(pool))
        started = time.monotonic()
        wait(lambda: client.status()["kinds"][0]["warm"] == 2, 240, "two warm containers")
        out["warm_s"] = time.monotonic() - started
        env = RemoteEnv(pool, env_id="builtin.Catch-v0")
        try:
            env.reset(seed=0)
            for _ in range(10):
                env.step([])
            victim = env.remote.name
            (container,) = [r["container"] for r in client.status()["remotes"] if r["address"] == victim]
            out["victim"], out["victim_container"] = victim, container
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=True)
            errors, back, end = [], None, time.monotonic() + 120
            while back is None and time.monotonic() < end:
                _, _, _, truncated, info = env.step([])
                if truncated and "remote.error" in info:
                    errors.append(info["remote.error"])
                if info.get("remote.reconnected"):
                    back = info["remote.name"]
            out["errors"], out["back"] = errors[:2], back
            out["steps_after"] = sum(not env.step([])[3] for _ in range(10))
        finally:
            env.close()
        wait(lambda: not client.status()["leases"] and client.status()["kinds"][0]["warm"] == 2,
             240, "the pool back to two warm containers")
        out["final"] = [r["container"] for r in client.status()["remotes"]]
        loop.call_soon_threadsafe(task.cancel)
        wait(task.done, 60, "the pool closed")
        out["left"] = len(subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=com.universe-remote.managed=true"],
            capture_output=True, text=True, check=True).stdout.split())
    finally:
        _service.terminate()
    print(json.dumps(out))
    """
)


def test_a_pool_in_containers_replaces_a_removed_one_and_its_holder_follows(image: str) -> None:
    out = pm.service_scenario(SCRIPT, image, timeout=600)
    assert out["errors"], "the holder was not told its container went"
    assert out["back"] is not None and out["back"] != out["victim"]
    assert out["steps_after"] == 10
    # (a new container may publish the ports the removed one had)
    assert out["victim_container"] not in out["final"] and len(set(out["final"])) == 2
    assert out["left"] == 0  # closing the pool removed its containers
    FIGURES.append(f"a pool of 2 Catch containers warm in {out['warm_s']:.1f} s")
