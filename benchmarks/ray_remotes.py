"""Remotes through Ray vs start_local: time to start n = 4 and 16, and real-time steps/s
per remote at n = 16, in one run.

The peer is :func:`remotes.start_local` (subprocesses of this process), measured in the
same run, on the same machine, inside the same network namespace: this module re-runs
itself under ``unshare --net`` with only ``lo`` (Ray otherwise listens on every interface
and probes 8.8.8.8; tests/ray_cluster.py) and starts a two-node Ray cluster there
(``ray.cluster_utils.Cluster``, 127.0.0.1). Both kinds serve ``builtin.Catch-v0`` at 60
fps; one :class:`~remotes.vector.RemoteVectorEnv` over each group steps a no-op agent for
:data:`RUN_SECONDS`. Start times: from the call until every remote answers (Ray's
cluster start is reported apart; a remote's actor needs a fresh Ray worker process).
Ray costs more processes (a worker per actor, two raylets, the GCS): on 2 cores that is
what the steps/s ratio shows. Every figure is from this run, nothing is scaled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from benchmarks.common import process_cpu, quick, ratio, table  # noqa: E402

ENV_ID: Final = "builtin.Catch-v0"
FPS: Final = 60.0
#: Remotes per start-time measure.
START_COUNTS: Final = quick((4, 16), (4,))
#: Remotes in the steps/s measure.
STEP_COUNT: Final = quick(16, 4)
#: Wall seconds each steps/s run steps for, after its reset.
RUN_SECONDS: Final = quick(8.0, 2.0)
#: Seconds the whole inner run may take.
INNER_TIMEOUT: Final = 600
#: Each Ray remote's reservation (the default; 16 fit the two test nodes).
RESOURCES: Final = {"CPU": 0.25}


def _steps_per_second(group: Any, pids: list[int]) -> dict[str, float]:
    from remotes.vector import RemoteVectorEnv

    env = RemoteVectorEnv(group, fps=FPS)
    try:
        env.reset(seed=0)
        noop = [[] for _ in range(env.num_envs)]
        steps = 0
        cpu_before = sum(process_cpu(p) for p in pids)
        client_before = time.process_time()
        started = time.perf_counter()
        while time.perf_counter() - started < RUN_SECONDS:
            env.step(noop)
            steps += 1
        wall = time.perf_counter() - started
        return {
            "steps_per_s": steps / wall,
            "remote_cores": (sum(process_cpu(p) for p in pids) - cpu_before) / wall,
            "client_cores": (time.process_time() - client_before) / wall,
        }
    finally:
        env.close()


def _timed(start: Callable[[int], Any], n: int) -> tuple[Any, float]:
    began = time.perf_counter()
    group = start(n)
    return group, time.perf_counter() - began


def inner() -> dict[str, Any]:
    """The measures (run inside the namespace)."""
    from remotes.local import start_local
    from remotes.ray import start_ray
    from tests.ray_cluster import two_node_cluster

    out: dict[str, Any] = {"start": {}, "steps": {}}

    def local(n: int) -> Any:
        return start_local(ENV_ID, n, fps=FPS)

    for n in START_COUNTS:
        group, seconds = _timed(local, n)
        out["start"][f"local {n}"] = seconds
        if n == STEP_COUNT:
            out["steps"]["local"] = _steps_per_second(group, [p.pid for p in group.processes])
        group.close()
    began = time.perf_counter()
    with two_node_cluster():
        out["cluster_start"] = time.perf_counter() - began

        def ray(n: int) -> Any:
            return start_ray(ENV_ID, n, resources=RESOURCES, extra_args=["--fps", str(FPS)])

        for n in START_COUNTS:
            group, seconds = _timed(ray, n)
            out["start"][f"ray {n}"] = seconds
            out[f"ray {n} nodes"] = len(set(group.nodes))
            if n == STEP_COUNT:
                out["steps"]["ray"] = _steps_per_second(group, [p.pid for p in group.placements])
            group.close()
    return out


def report(out: dict[str, Any]) -> None:
    print(f"  Ray cluster start (head + 1 node, 127.0.0.1): {out['cluster_start']:.1f} s")
    rows = []
    for n in START_COUNTS:
        local, ray = out["start"][f"local {n}"], out["start"][f"ray {n}"]
        rows.append([f"n={n}", f"{local:.2f}", f"{ray:.2f}", ratio(ray, local), str(out[f"ray {n} nodes"])])
    print("  Time to start n remotes (s): Ray vs start_local")
    table(["remotes", "start_local", "start_ray", "ray/local", "ray nodes"], rows)
    local, ray = out["steps"]["local"], out["steps"]["ray"]
    print(f"  Real time, n={STEP_COUNT}, target {FPS:g} fps: steps/s per remote")
    table(
        ["", "start_local", "start_ray", "ray/local"],
        [
            ["steps/s", f"{local['steps_per_s']:.1f}", f"{ray['steps_per_s']:.1f}",
             ratio(ray["steps_per_s"], local["steps_per_s"])],
            ["remotes' cores", f"{local['remote_cores']:.2f}", f"{ray['remote_cores']:.2f}",
             ratio(ray["remote_cores"], local["remote_cores"])],
            ["agent's cores", f"{local['client_cores']:.2f}", f"{ray['client_cores']:.2f}",
             ratio(ray["client_cores"], local["client_cores"])],
        ],
    )


def main() -> None:
    from tests.ray_cluster import check_netns, in_netns

    check_netns()
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ray_remotes.json"
        run = subprocess.run(
            in_netns([sys.executable, "-m", "benchmarks.ray_remotes", "--inside", str(path)]),
            cwd=root, capture_output=True, text=True, timeout=INNER_TIMEOUT, check=False,
        )
        if run.returncode != 0 or not path.exists():
            raise RuntimeError(f"the run in the namespace failed ({run.returncode}):\n{run.stderr[-4000:]}")
        report(json.loads(path.read_text()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        Path(sys.argv[2]).write_text(json.dumps(inner()))
    else:
        main()
