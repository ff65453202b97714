"""dm_env_rpc port: lockstep Pong steps/s through our dm_env_rpc endpoint (``DmEnvAdaptor``)
against a minimal dm_env_rpc server over ALE (:mod:`benchmarks.dm_peer`, the same client
code), our own rewarder path (``RemoteEnv`` lockstep) on the same kind of remote, and the
emulator in process (the limit), in one run; ratios printed.

Each row: Pong, frameskip 4, the RGB frame every step, random actions; the median of
:data:`~benchmarks.atari_common.ROUNDS` rounds.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc
import numpy as np
from dm_env_rpc.v1 import (
    connection as dm_connection,
    dm_env_adaptor,
    dm_env_rpc_pb2,
    tensor_spec_utils,
    tensor_utils,
)

from benchmarks.atari_common import FRAMESKIP, ROUNDS
from benchmarks.common import ratio, table
from benchmarks.pong_rows import START_TIMEOUT, free_port, row_raw_ale, row_rewarder, served_with, timed


@contextmanager
def peer() -> Iterator[int]:
    """The minimal dm_env_rpc server in its own process: its port."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.dm_peer", str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def dm_stepper(port: int) -> Iterator[Callable[[], None]]:
    """A dm_env_rpc server's world (ours or the peer's) in lockstep through DmEnvAdaptor,
    RGB, reset: its step (a random action; a reset at an episode's end)."""
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
            yield step
        finally:
            connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
            connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))


def row_dm_env_rpc(port: int) -> float:
    """A dm_env_rpc server (ours or the peer): a world in lockstep, DmEnvAdaptor, RGB."""
    with dm_stepper(port) as step:
        return timed(step)


def main() -> None:
    rows: dict[str, list[float]] = {"raw": [], "peer": [], "dm": [], "rewarder": []}
    dm_port = r"dm_env_rpc\s+127\.0\.0\.1:(\d+)"
    with served_with("--dm-env-rpc-port", dm_port) as (address, port_text), peer() as peer_port:
        port = int(port_text)
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
