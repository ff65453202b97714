"""Rows the front-end benchmarks share: Pong timed the same way through every port.

Holds :func:`timed` (steps per second after a warm-up), :func:`row_raw_ale` (the
emulator in process: the limit), :func:`row_rewarder` (ours over the rewarder, Pong's
Discrete actions), :func:`served_with` (a lockstep Pong remote with one more port, read
from its banner) and :func:`free_port`, for :mod:`benchmarks.dm_env_rpc_port`,
:mod:`benchmarks.openenv_port` and :mod:`benchmarks.lockstep_peers`.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from benchmarks.atari_common import ENV_ID, FRAMESKIP, WARMUP_STEPS, raw_ale_step
from benchmarks.common import quick
from remotes.env import RemoteEnv
from remotes.registration import action_wrapper

#: Timed steps per row and round (a row also stops after ROW_SECONDS).
STEPS: Final = quick(1500, 300)
ROW_SECONDS: Final = quick(8.0, 2.0)
#: Seconds a remote may take to print its ports.
START_TIMEOUT: Final = 60.0


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server started next."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served_with(flag: str, pattern: str) -> Iterator[tuple[str, str]]:
    """A lockstep Pong remote serving one more port (``flag 0``): (agent address, the
    first group of ``pattern`` in its banner)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "serve", ENV_ID, "--mode", "lockstep",
         "--vnc-port", "0", "--rewarder-port", "0", flag, "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        port, address = "", ""
        deadline = time.monotonic() + START_TIMEOUT
        for line in proc.stdout:
            if found := re.search(pattern, line):
                port = found.group(1)
            if found := re.search(r"agent address\s+(vnc://\S+)", line):
                address = found.group(1)
                break
            if time.monotonic() > deadline:
                break
        assert port and address, "the remote did not print its ports"
        yield address, port
    finally:
        proc.terminate()
        proc.wait(10)


def timed(step: Callable[[], Any]) -> float:
    """Steps per second of ``step`` over STEPS (or ROW_SECONDS), after a warm-up."""
    for _ in range(WARMUP_STEPS):
        step()
    began, n = time.perf_counter(), 0
    while n < STEPS and time.perf_counter() - began < ROW_SECONDS:
        step()
        n += 1
    return n / (time.perf_counter() - began)


def row_raw_ale() -> float:
    """The emulator in process: ALEInterface, frameskip 4, an RGB frame per step."""
    return timed(raw_ale_step())


def row_rewarder(address: str) -> float:
    """Ours over the rewarder: RemoteEnv in lockstep, Pong's Discrete minimal actions."""
    env = RemoteEnv(address, env_id=ENV_ID, mode="lockstep", frameskip=FRAMESKIP)
    wrap = action_wrapper(ENV_ID, dict(env.remote.describe))
    assert wrap is not None
    wrapped = wrap(env)
    try:
        wrapped.reset(seed=0)
        space = wrapped.action_space
        space.seed(0)

        def step() -> None:
            _, _, terminated, truncated, _ = wrapped.step(space.sample())
            if terminated or truncated:
                wrapped.reset()

        return timed(step)
    finally:
        wrapped.close()
