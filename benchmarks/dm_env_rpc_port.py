"""dm_env_rpc port: lockstep Pong steps/s through our dm_env_rpc endpoint (``DmEnvAdaptor``)
against a minimal dm_env_rpc server over ALE (:mod:`benchmarks.dm_peer`, the same client
code), our own rewarder path (``RemoteEnv`` lockstep) on the same kind of remote, and the
emulator in process (the limit), in one run; ratios printed.

Each row: Pong, frameskip 4, the RGB frame every step, random actions; the median of
:data:`~benchmarks.atari_common.ROUNDS` rounds.
"""

from __future__ import annotations

import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import grpc
import numpy as np
from dm_env_rpc.v1 import (
    connection as dm_connection,
    dm_env_adaptor,
    dm_env_rpc_pb2,
    tensor_spec_utils,
    tensor_utils,
)

from benchmarks.atari_common import ENV_ID, FRAMESKIP, ROM, ROUNDS, WARMUP_STEPS
from benchmarks.common import quick, ratio, table
from remotes.env import RemoteEnv
from remotes.registration import action_wrapper

#: Timed steps per row and round (a row also stops after ROW_SECONDS).
STEPS: Final = quick(1500, 300)
ROW_SECONDS: Final = quick(8.0, 2.0)
#: Seconds a remote may take to print its ports.
START_TIMEOUT: Final = 60.0


@contextmanager
def served() -> Iterator[tuple[str, int]]:
    """A lockstep Pong remote with a dm_env_rpc port: (agent address, dm port)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "serve", ENV_ID, "--mode", "lockstep",
         "--vnc-port", "0", "--rewarder-port", "0", "--dm-env-rpc-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        port, address = 0, ""
        deadline = time.monotonic() + START_TIMEOUT
        for line in proc.stdout:
            if found := re.search(r"dm_env_rpc\s+127\.0\.0\.1:(\d+)", line):
                port = int(found.group(1))
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
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)  # no ROM banner in the table
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path(ROM))
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(0)

    def step() -> None:
        action = actions[int(rng.integers(len(actions)))]
        for _ in range(FRAMESKIP):
            ale.act(action)
        ale.getScreenRGB()
        if ale.game_over():
            ale.reset_game()

    return timed(step)


@contextmanager
def peer() -> Iterator[int]:
    """The minimal dm_env_rpc server in its own process: its port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.dm_peer", str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def row_dm_env_rpc(port: int) -> float:
    """A dm_env_rpc server (ours or the peer): a world in lockstep, DmEnvAdaptor, RGB."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(START_TIMEOUT)
    with dm_connection.Connection(channel) as connection:
        world = connection.send(dm_env_rpc_pb2.CreateWorldRequest(settings={
            "mode": tensor_utils.pack_tensor("lockstep"),
            "frameskip": tensor_utils.pack_tensor(FRAMESKIP),
            "seed": tensor_utils.pack_tensor(0),
        })).world_name
        specs = connection.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=world)).specs
        rgb = next(u for u, s in specs.observations.items() if s.name == "RGB")
        env = dm_env_adaptor.DmEnvAdaptor(connection, specs, requested_observations=["RGB", "reward"])
        action_spec = next(s for s in specs.actions.values() if s.name == "action")
        n = int(tensor_spec_utils.bounds(action_spec).max) + 1
        rng = np.random.default_rng(0)
        env.reset()
        assert rgb

        def step() -> None:
            timestep = env.step({"action": np.int32(rng.integers(n))})
            if timestep.last():
                env.reset()

        try:
            return timed(step)
        finally:
            connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
            connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))


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


def main() -> None:
    rows: dict[str, list[float]] = {"raw": [], "peer": [], "dm": [], "rewarder": []}
    with served() as (address, port), peer() as peer_port:
        for _ in range(ROUNDS):
            rows["raw"].append(row_raw_ale())
            rows["peer"].append(row_dm_env_rpc(peer_port))
            rows["dm"].append(row_dm_env_rpc(port))
            rows["rewarder"].append(row_rewarder(address))
    raw, theirs, dm, rewarder = (statistics.median(rows[k]) for k in ("raw", "peer", "dm", "rewarder"))
    table(
        ["row", "env-steps/s", "vs raw ALE", "vs minimal dm_env_rpc", "vs our rewarder path"],
        [
            ["raw ale_py.ALEInterface in process (the limit)", f"{raw:,.0f}", "1.00", "", ""],
            ["minimal dm_env_rpc server over ALE (benchmarks.dm_peer)", f"{theirs:,.0f}",
             ratio(theirs, raw), "1.00", ""],
            ["ours: dm_env_rpc port, DmEnvAdaptor", f"{dm:,.0f}", ratio(dm, raw), ratio(dm, theirs),
             ratio(dm, rewarder)],
            ["ours: rewarder, RemoteEnv lockstep", f"{rewarder:,.0f}", ratio(rewarder, raw),
             ratio(rewarder, theirs), "1.00"],
        ],
    )


if __name__ == "__main__":
    main()
