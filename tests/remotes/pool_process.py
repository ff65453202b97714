"""A real ``universe-remote pool`` in a subprocess, for the pool's tests: started, waited
for until every remote is warm, and stopped (SIGTERM, then kill) however the tests end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from remotes.pool.client import PoolClient, parse_pool

#: Seconds a pool may take to warm every remote (process starts on a loaded machine).
WARM_WITHIN = 60.0
#: Seconds a stopped pool may take to take its remotes down before it is killed.
STOP_WITHIN = 20.0


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something true (bounded)."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


def all_warm(client: PoolClient) -> bool:
    """No lease out and every kind at its size."""
    status = client.status()
    return not status["leases"] and all(k["warm"] == k["size"] for k in status["kinds"])


@contextmanager
def running_pool(args: Sequence[str]) -> Iterator[str]:
    """``universe-remote pool ARGS`` (no password, BLAS on one thread): its address once
    every remote is warm."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("UNIVERSE_REMOTE_PASSWORD", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "pool", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = proc.stdout.readline().decode()
        match = re.search(r"pool address\s+(pool://\S+)", line)
        died = proc.stderr.read().decode() if proc.poll() is not None else ""
        assert match, f"no pool address in {line!r}{died}"
        client = PoolClient(parse_pool(match[1]))
        wait_for(lambda: all_warm(client), WARM_WITHIN, "every remote warm")
        yield match[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
