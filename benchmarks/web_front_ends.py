"""Web agents through every front end: a MiniWoB episode (reset with a seed, read the
page, click the named button by bid) through gymnasium's ``RemoteEnv``, OpenEnv's own
client, dm_env_rpc's own client, and a ``RemoteVectorEnv`` of two remotes, in one run;
ratios against ``RemoteEnv`` (the peer row). Also the bytes an OpenEnv observation holds
with the element list and without it (the text tree alone, as before).

Lockstep click-button, one remote serving the three ports (the vector adds a second);
rounds interleave the front ends; each row is the median of :data:`ROUNDS` rounds of
:data:`EPISODES` episodes (seeds 0..EPISODES-1, the same in every row), all won.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Final

import grpc
from dm_env_rpc.v1 import connection as dm_connection, dm_env_rpc_pb2 as pb, tensor_utils
from openenv.core.generic_client import GenericEnvClient

from benchmarks.common import quick, ratio, table
from remotes import RemoteEnv, RemoteVectorEnv, start_local
from runtimes.xdisplay import free_port

ENV_ID: Final = "miniwob.ClickButton-v0"
EPISODES: Final = quick(20, 4)
ROUNDS: Final = quick(3, 1)
#: Seconds the remotes may take to start.
START_TIMEOUT: Final = 120.0


def wanted(text: str) -> str:
    """The button the instruction names (click-button's 'Click on the "X" button.')."""
    found = re.search(r'"([^"]*)"', text)
    assert found, text
    return found.group(1)


def click(elements: list[dict[str, Any]], name: str) -> str:
    button = next(e for e in elements if e["role"] == "button" and e["name"] == name)
    return f"click('{button['bid']}')"


def row_gymnasium(env: RemoteEnv) -> int:
    won = 0
    for seed in range(EPISODES):
        obs, info = env.reset(seed=seed)
        *_, reward, terminated, _, _ = env.step(click(info["page"]["elements"], wanted(obs["instruction"])))
        won += int(terminated and float(reward) > 0)
    return won


def row_vector(envs: RemoteVectorEnv) -> int:
    won = 0
    for seed in range(0, EPISODES, envs.num_envs):
        obs, infos = envs.reset(seed=seed)
        actions = tuple(click(infos["page"]["elements"][i], wanted(obs["instruction"][i]))
                        for i in range(envs.num_envs))
        _, rewards, terminated, _, _ = envs.step(actions)
        won += int(((rewards > 0) & terminated).sum())
    return won


def row_openenv(client: Any, sizes: list[tuple[int, int]]) -> int:
    won = 0
    for seed in range(EPISODES):
        observation = client.reset(seed=seed).observation
        tree_only = {k: v for k, v in observation.items()
                     if k not in ("elements", "url", "focused", "truncated")}
        sizes.append((len(json.dumps(observation)), len(json.dumps(tree_only))))
        result = client.step({"action_str": click(observation["elements"], wanted(observation["text"]))})
        won += int(result.done and (result.reward or 0) > 0)
    return won


def row_dm(conn: Any) -> int:
    won = 0
    for seed in range(EPISODES):
        world = conn.send(pb.CreateWorldRequest(settings={
            "seed": tensor_utils.pack_tensor(seed), "mode": tensor_utils.pack_tensor("lockstep"),
        })).world_name
        specs = conn.send(pb.JoinWorldRequest(world_name=world)).specs
        uid = {s.name: u for u, s in specs.observations.items()}
        act = {s.name: u for u, s in specs.actions.items()}["web_action"]
        asked = [uid["RGB"], uid["page"], uid["text"], uid["reward"]]
        first = conn.send(pb.StepRequest(requested_observations=asked)).observations
        page = json.loads(tensor_utils.unpack_tensor(first[uid["page"]]))["page"]
        text = str(tensor_utils.unpack_tensor(first[uid["text"]]))
        done = conn.send(pb.StepRequest(
            actions={act: tensor_utils.pack_tensor(click(page["elements"], wanted(text)))},
            requested_observations=asked,
        ))
        reward = float(tensor_utils.unpack_tensor(done.observations[uid["reward"]]))
        won += int(done.state == pb.EnvironmentStateType.TERMINATED and reward > 0)
        conn.send(pb.LeaveWorldRequest())
        conn.send(pb.DestroyWorldRequest(world_name=world))
    return won


def main() -> None:
    openenv_port, dm_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    lockstep = ["--mode", "lockstep"]
    served = start_local(ENV_ID, 1, start_timeout=START_TIMEOUT, extra_args=[
        *lockstep, "--openenv-port", str(openenv_port), "--dm-env-rpc-port", str(dm_port),
    ])
    other = start_local(ENV_ID, 1, start_timeout=START_TIMEOUT, extra_args=lockstep)
    web = {"mode": "lockstep", "observations": ("screen", "page"), "actions": "web"}
    seconds: dict[str, list[float]] = {}
    won: dict[str, list[int]] = {}
    sizes: list[tuple[int, int]] = []
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{dm_port}")
        grpc.channel_ready_future(channel).result(START_TIMEOUT)
        with dm_connection.Connection(channel) as conn:
            for _ in range(ROUNDS):
                env = RemoteEnv(served, **web)  # each front end takes the remote in turn
                try:
                    _measure("gymnasium RemoteEnv", partial(row_gymnasium, env), seconds, won)
                finally:
                    env.close()
                with GenericEnvClient(base_url=f"http://127.0.0.1:{openenv_port}").sync() as client:
                    _measure("OpenEnv client", partial(row_openenv, client, sizes), seconds, won)
                _measure("dm_env_rpc client", partial(row_dm, conn), seconds, won)
                addresses = [str(a) for a in (*served.addresses, *other.addresses)]
                envs = RemoteVectorEnv(addresses, **web)
                try:
                    _measure("RemoteVectorEnv, 2 remotes", partial(row_vector, envs), seconds, won)
                finally:
                    envs.close()
    finally:
        served.close()
        other.close()
    peer = statistics.median(seconds["gymnasium RemoteEnv"])
    rows = []
    for name, times in seconds.items():
        median = statistics.median(times)
        rows.append([name, f"{EPISODES / median:.1f}", f"{median / EPISODES * 1e3:.0f}",
                     f"{sum(won[name])}/{EPISODES * len(times)}", ratio(peer, median)])
    print(f"MiniWoB {ENV_ID}, lockstep: reset + page + click by bid, {EPISODES} episodes a "
          f"round, median of {ROUNDS} round(s)")
    table(["front end", "episodes/s", "ms/episode", "won", "vs RemoteEnv"], rows)
    full = statistics.median(s[0] for s in sizes)
    tree = statistics.median(s[1] for s in sizes)
    print(f"OpenEnv reset observation (png screen): {full:,.0f} bytes with the element list, "
          f"{tree:,.0f} with the tree alone ({ratio(full, tree)})")


def _measure(name: str, run: Callable[[], int], seconds: dict[str, list[float]],
             won: dict[str, list[int]]) -> None:
    began = time.perf_counter()
    wins = run()
    seconds.setdefault(name, []).append(time.perf_counter() - began)
    won.setdefault(name, []).append(wins)


if __name__ == "__main__":
    main()
