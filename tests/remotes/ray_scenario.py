"""Remotes on a real two-node Ray cluster on 127.0.0.1, as one scenario that
``tests/remotes/test_ray.py`` runs in a network namespace of its own
(``python -m tests.remotes.ray_scenario OUT.json`` under :func:`tests.ray_cluster.in_netns`).

It writes what it saw to OUT.json (Ray's workers print to this process's stdout, so the
findings do not go there) and the test asserts on them:

1. ``start_ray`` puts 4 remotes on both nodes; a ``RemoteVectorEnv`` over the group steps
   all 4.
2. ``kill -9`` of one remote's process: Ray restarts its actor, which serves on new ports;
   the env follows it there and steps it again, while the other 3 keep stepping.
3. ``close()`` leaves no actor alive and none of the processes (remotes, actors).
4. A custom resource places remotes on the second node; a remote that cannot start and
   a cluster without room are refused with the reason.
5. ``gymnasium.make_vec(id, num_envs=2, remotes="ray:2")`` and ``play --ray`` with the
   dashboard.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

import gymnasium

from remotes import RemoteVectorEnv, start_ray
from remotes.play import play
from remotes.registration import gym_id
from tests.ray_cluster import SECOND_NODE, two_node_cluster

ENV_ID: Final = "builtin.Catch-v0"
#: Each remote's reservation: 4 of them fit one node, so only spreading splits them.
RESOURCES: Final = {"CPU": 0.25}
#: Steps before the kill, to show all four step.
WARM_STEPS: Final = 60
#: Seconds the killed remote has to come back (the issue's bound is 5 s; a wider wait
#: shows how long it really took when it misses).
BACK_DEADLINE: Final = 30.0
#: Steps after the killed remote is back, to show it steps again.
AFTER_STEPS: Final = 30
#: Seconds close() has to leave no process behind.
GONE_DEADLINE: Final = 15.0
#: Seconds the play run lasts.
PLAY_SECONDS: Final = 6.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], deadline: float) -> list[int]:
    """The pids still alive at ``deadline`` (checked every 50 ms until none is)."""
    while True:
        alive = [p for p in pids if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _actor_states(ids: set[str]) -> dict[str, str]:
    from ray._private import state

    return {a["ActorID"]: a["State"] for a in state.actors().values() if a["ActorID"] in ids}


def _connected(info: dict[str, Any], i: int) -> bool:
    mask = info.get("_remote.connected")
    return not (mask is not None and mask[i] and not info["remote.connected"][i])


def spread_step_kill_close(nodes: Any, out: dict[str, Any]) -> None:
    started = time.monotonic()
    group = start_ray(ENV_ID, 4, resources=RESOURCES)
    out["start_seconds"] = time.monotonic() - started
    out["nodes"] = group.nodes
    out["head"], out["second"] = nodes.head, nodes.second
    out["addresses"] = [str(a) for a in group.addresses]
    out["password"] = bool(group.password)
    first = list(group.placements)
    actor_ids = {a._actor_id.hex() for a in group.actors}
    env = RemoteVectorEnv(group)
    try:
        obs, _ = env.reset(seed=0)
        changed = [False] * 4
        all_connected = True
        for _ in range(WARM_STEPS):
            new, _, _, _, info = env.step([[] for _ in range(4)])
            changed = [c or bool((n != o).any()) for c, n, o in zip(changed, new, obs, strict=True)]
            all_connected &= all(_connected(info, i) for i in range(4))
            obs = new
        out["warm_frames_changed"] = changed
        out["warm_all_connected"] = all_connected

        os.kill(first[0].pid, signal.SIGKILL)
        killed = time.monotonic()
        lost_at = back_at = None
        others_steps = others_lost = 0
        names: list[str] = []
        after = 0
        victim_frames_changed = False
        while time.monotonic() - killed < BACK_DEADLINE and after < AFTER_STEPS:
            new, _, _, _, info = env.step([[] for _ in range(4)])
            now = time.monotonic()
            if info.get("_remote.name") is not None and info["_remote.name"][0]:
                names.append(str(info["remote.name"][0]))
            up = _connected(info, 0)
            if lost_at is None and not up:
                lost_at = now
            elif lost_at is not None and back_at is None and up:
                back_at = now
            elif back_at is not None:
                after += 1
                victim_frames_changed |= bool((new[0] != obs[0]).any())
            if back_at is None:
                others_steps += 1
                others_lost += sum(not _connected(info, i) for i in (1, 2, 3))
            obs = new
        out["lost_after"] = None if lost_at is None else lost_at - killed
        out["back_after"] = None if back_at is None else back_at - killed
        out["others_steps_while_away"] = others_steps
        out["others_lost_steps"] = others_lost
        out["others_steps_per_second_while_away"] = others_steps / ((back_at or time.monotonic()) - killed)
        out["victim_steps_after"] = after
        out["victim_frames_changed_after"] = victim_frames_changed
        out["names_seen"] = names
        now_at = group.placement_of(0, timeout=10)
        out["restarted"] = now_at.restarted
        out["new_pid"] = now_at.pid != first[0].pid
        out["new_address"] = str(now_at.address)
        out["old_address"] = str(first[0].address)
        out["others_unchanged"] = [group.placement_of(i, timeout=10) == first[i] for i in (1, 2, 3)]
    finally:
        env.close()
        placements = list(group.placements)
        group.close()
    pids = [p.pid for p in first + placements] + [p.actor_pid for p in first + placements]
    out["alive_after_close"] = _wait_gone(sorted(set(pids)), time.monotonic() + GONE_DEADLINE)
    deadline = time.monotonic() + GONE_DEADLINE
    while True:
        states = _actor_states(actor_ids)
        if all(s == "DEAD" for s in states.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    out["actor_states_after_close"] = sorted(states.values())
    out["actors_seen"] = len(states)


def on_the_second_node(nodes: Any, out: dict[str, Any]) -> None:
    with start_ray(ENV_ID, 2, resources={**RESOURCES, SECOND_NODE: 1}) as group:
        out["second_node_placements"] = group.nodes


def refusals(out: dict[str, Any]) -> None:
    """What start_ray says when a remote cannot start, or the cluster has no room."""
    from remotes.ray import RayUnavailable

    for name, kwargs in [
        ("bad_args", {"extra_args": ["--bogus"]}),
        ("no_room", {"resources": {"CPU": 100}, "start_timeout": 3}),
    ]:
        try:
            start_ray(ENV_ID, 2, **kwargs)  # type: ignore[arg-type]
            out[f"refused_{name}"] = None
        except RayUnavailable as exc:
            out[f"refused_{name}"] = str(exc)


def make_vec(out: dict[str, Any]) -> None:
    envs = gymnasium.make_vec(gym_id(ENV_ID), num_envs=2, remotes="ray:2")
    try:
        envs.reset(seed=0)
        group = envs.unwrapped.owned  # type: ignore[attr-defined]
        out["make_vec_group"] = type(group).__name__
        steps = 0
        for _ in range(20):
            _, _, _, _, info = envs.step([0, 0])  # Catch's nothing, as make gives it
            steps += all(_connected(info, i) for i in range(2))
        out["make_vec_connected_steps"] = steps
        pids = [p.pid for p in group.placements]
    finally:
        envs.close()
    out["make_vec_alive_after_close"] = _wait_gone(pids, time.monotonic() + GONE_DEADLINE)


class _Lines(io.StringIO):
    """play's output, with an event for the dashboard line."""

    def __init__(self) -> None:
        super().__init__()
        self.url: str | None = None
        self.ready = threading.Event()

    def write(self, text: str) -> int:
        match = re.search(r"dashboard: (http://\S+)", text)
        if match:
            self.url = match[1]
            self.ready.set()
        return super().write(text)


def play_with_dashboard(out: dict[str, Any]) -> None:
    lines = _Lines()
    summary: dict[str, Any] = {}

    def run() -> None:
        summary.update(play(ENV_ID, n=2, ray="", seconds=PLAY_SECONDS, dashboard=0, out=lines))

    player = threading.Thread(target=run)
    player.start()
    state: dict[str, Any] = {}
    if lines.ready.wait(60):
        assert lines.url is not None
        deadline = time.monotonic() + PLAY_SECONDS
        while time.monotonic() < deadline:
            with urllib.request.urlopen(lines.url + "state.json", timeout=5) as reply:
                state = json.loads(reply.read())
            if all(r["steps"] > 0 for r in state["remotes"]):
                break
            time.sleep(0.1)
    player.join(120)
    text = lines.getvalue()
    out["play_summary"] = {k: summary.get(k) for k in ("steps", "remotes")}
    out["play_output"] = text[-2000:]
    listed = re.search(r"remotes: (\S+)", text)
    out["play_remotes"] = listed[1] if listed else None
    out["dashboard_rows"] = [{"name": r["name"], "steps": r["steps"]} for r in state.get("remotes", [])]


def main(path: str) -> int:
    out: dict[str, Any] = {"error": None}
    began = time.monotonic()
    try:
        with two_node_cluster() as nodes:
            out["cluster_seconds"] = time.monotonic() - began
            for name, phase in [
                ("spread", lambda: spread_step_kill_close(nodes, out)),
                ("second", lambda: on_the_second_node(nodes, out)),
                ("refusals", lambda: refusals(out)),
                ("make_vec", lambda: make_vec(out)),
                ("play", lambda: play_with_dashboard(out)),
            ]:
                started = time.monotonic()
                phase()
                out[f"{name}_seconds"] = time.monotonic() - started
    except BaseException as exc:
        import traceback

        out["error"] = "".join(traceback.format_exception(exc))
    out["total_seconds"] = time.monotonic() - began
    Path(path).write_text(json.dumps(out, indent=1))
    return 0 if out["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
