"""Real-time remotes: step rate, lateness, CPU and action-to-pixel latency vs AsyncVectorEnv.

Three measures, all on 127.0.0.1 with ``builtin.Catch-v0`` at 60 fps:

1. **Real time.** ``n`` local remotes (1, 4, 16, 32), one :class:`RemoteVectorEnv` stepped
   by a random agent for :data:`RUN_SECONDS`. Per remote: steps/s (the limit is the fps),
   the frames each remote really ticked (from its ``v0.env.describe`` frame counter) and
   the VNC updates that reached the agent; the fraction of late steps; the agent
   process's CPU per remote-step and the remote processes' CPU per frame they drew (from
   ``/proc/<pid>/stat``), with how busy the whole machine was and how much of that was
   other processes (the machine may be shared).
2. **Action-to-pixel latency.** A :class:`~vncdriver.client.VNCClient` taps Right and
   Left in turn and times each tap until the first VNC update whose frame shows the
   paddle moved. The floor is a uniform wait for the next tick (0 to one frame period)
   plus encode, loopback and decode.
3. **Against gymnasium's AsyncVectorEnv**, which runs the same Catch runtime in worker
   processes with no network: (a) as fast as it goes and (b) throttled to 60 fps by the
   driver loop, as our env is. Steps/s per env and driver CPU per env-step, and ratios.

The machine has 2 cores; at n=32 the remotes alone may take most of it. Every figure is
what was measured on this run, nothing is scaled.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import gymnasium  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium import spaces  # noqa: E402
from gymnasium.vector import AsyncVectorEnv  # noqa: E402

from benchmarks.catch_taps import tap_latencies  # noqa: E402
from benchmarks.common import (  # noqa: E402
    ms as _ms,
    process_cpu as _process_cpu,
    quick,
    ratio as _ratio,
    table as _table,
)
from remotes.capacity import machine_ticks as _machine_ticks  # noqa: E402
from remotes.local import LocalRemotes, start_local  # noqa: E402
from remotes.vector import RemoteVectorEnv  # noqa: E402
from runtimes import registry  # noqa: E402
from runtimes.base import KeyEvent, Runtime  # noqa: E402

ENV_ID: Final = "builtin.Catch-v0"
FPS: Final = 60.0
PERIOD: Final = 1.0 / FPS
#: Remotes (and AsyncVectorEnv workers) per run.
COUNTS: Final = quick((1, 4, 16, 32), (4,))
#: Wall seconds each real-time run steps for, after its reset.
RUN_SECONDS: Final = quick(5.0, 1.0)
#: Wall seconds each AsyncVectorEnv run steps for (per mode).
AVE_SECONDS: Final = quick(3.0, 0.5)
#: Timed taps in the latency measure, after LATENCY_WARMUP untimed ones.
LATENCY_SAMPLES: Final = quick(200, 20)
LATENCY_WARMUP: Final = 10
#: The whole benchmark's wall budget: AsyncVectorEnv sizes that would start after this
#: many seconds are skipped (and the table says so).
BUDGET_SECONDS: Final = 210.0
#: Rough wall seconds one AsyncVectorEnv size costs per worker beyond its runs
#: (start + close), for the budget check.
AVE_START_PER_WORKER: Final = 0.15


# /proc readings -----------------------------------------------------------------------




def _processes_cpu(pids: Sequence[int]) -> float:
    return sum(_process_cpu(pid) for pid in pids)




class _Meter:
    """Wall, this process's CPU, some processes' CPU and the machine's load over a window."""

    def __init__(self, pids: Sequence[int] = ()) -> None:
        self.pids = list(pids)
        self.wall = self.client_cpu = self.others_cpu = self.machine_busy = 0.0

    def __enter__(self) -> _Meter:
        self._wall = time.perf_counter()
        self._client = time.process_time()
        self._others = _processes_cpu(self.pids)
        self._machine = _machine_ticks()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall = time.perf_counter() - self._wall
        self.client_cpu = time.process_time() - self._client
        self.others_cpu = _processes_cpu(self.pids) - self._others
        busy, total = _machine_ticks()
        spent = total - self._machine[1]
        self.machine_busy = (busy - self._machine[0]) / spent if spent else 0.0


# Tables ----------------------------------------------------------------------------------








@contextlib.contextmanager
def _local_remotes(n: int) -> Iterator[LocalRemotes]:
    """``n`` local remotes, always stopped; their log folder is removed if all went well."""
    remotes = start_local(ENV_ID, n, fps=FPS)
    try:
        yield remotes
    finally:
        remotes.close()
    if remotes.logs:  # kept on errors (the exception skips this), for diagnosis
        shutil.rmtree(remotes.logs[0].parent, ignore_errors=True)


# 1. Real time over RemoteVectorEnv --------------------------------------------------------


def _frames_ticked(env: RemoteVectorEnv) -> list[int]:
    """Each remote's frame counter as of its last ``v0.env.describe`` (a snapshot taken on
    the env's loop thread)."""
    return [int(r.describe.get("frame", 0)) for r in env.remotes]


def _vnc_updates(env: RemoteVectorEnv) -> int:
    """VNC updates received by all of the env's remotes (a snapshot)."""
    return sum(r.vnc_updates for r in env.remotes)


def measure_realtime(n: int) -> dict[str, float]:
    """Step ``n`` local remotes with a random agent for RUN_SECONDS; what it achieved."""
    started = time.perf_counter()
    with _local_remotes(n) as remotes:
        start_seconds = time.perf_counter() - started
        env = RemoteVectorEnv(remotes.address)
        try:
            env.reset(seed=0)
            frames_before, frames_at = _frames_ticked(env), time.perf_counter()
            space = env.single_action_space
            space.seed(0)
            updates_before = _vnc_updates(env)
            steps = late_steps = 0
            lateness = 0.0
            with _Meter([p.pid for p in remotes.processes]) as meter:
                deadline = time.perf_counter() + RUN_SECONDS
                while time.perf_counter() < deadline:
                    _, _, _, _, info = env.step([space.sample() for _ in range(n)])
                    steps += 1
                    late = float(np.max(info["step.late"]))
                    if late > 0:
                        late_steps += 1
                        lateness += late
            updates = _vnc_updates(env) - updates_before
            env.reset()  # a fresh describe carries each remote's frame counter
            ticked = np.subtract(_frames_ticked(env), frames_before)
            ticked_rate = ticked / (time.perf_counter() - frames_at)
        finally:
            env.close()
    remote_steps = steps * n
    frames = float(np.sum(ticked_rate)) * meter.wall  # frames the remotes drew in the window
    ncpu = os.cpu_count() or 1
    return {
        "n": n,
        "start": start_seconds,
        "steps_per_s": steps / meter.wall,
        "late": late_steps / steps,
        "late_mean": lateness / late_steps if late_steps else 0.0,
        "ticks_per_s": float(np.mean(ticked_rate)),
        "ticks_min": float(np.min(ticked_rate)),
        "updates_per_s": updates / n / meter.wall,
        "client_cpu": meter.client_cpu / remote_steps,
        "remote_cpu": meter.others_cpu / frames,
        "remote_cores": meter.others_cpu / meter.wall,
        "client_cores": meter.client_cpu / meter.wall,
        "machine": meter.machine_busy,
        # Everything else the machine ran meanwhile (other users' processes, the kernel).
        "other_cores": max(
            0.0, meter.machine_busy * ncpu - (meter.client_cpu + meter.others_cpu) / meter.wall
        ),
    }


def print_realtime(results: list[dict[str, float]]) -> None:
    print(f"\n  1. Real time: RemoteVectorEnv over n local {ENV_ID} remotes at {FPS:g} fps, "
          f"random agent, {RUN_SECONDS:g} s each (limit: {FPS:g} steps/s per remote)")
    _table(
        ["n", "start s", "steps/s/remote", "/ 60", "late steps", "mean late ms",
         "ticks/s/remote (min)", "VNC upd/s/remote"],
        [
            [
                f"{r['n']:.0f}", f"{r['start']:.1f}", f"{r['steps_per_s']:.1f}",
                f"{r['steps_per_s'] / FPS:.3f}", f"{r['late']:.1%}", f"{r['late_mean'] * 1e3:.2f}",
                f"{r['ticks_per_s']:.1f} ({r['ticks_min']:.1f})", f"{r['updates_per_s']:.1f}",
            ]
            for r in results
        ],
    )
    print()
    _table(
        ["n", "agent CPU ms/remote-step", "remote CPU ms/frame drawn", "agent cores",
         "remotes cores", "not ours cores", f"machine busy ({os.cpu_count()} cores)"],
        [
            [
                f"{r['n']:.0f}", _ms(r["client_cpu"]), _ms(r["remote_cpu"]),
                f"{r['client_cores']:.2f}", f"{r['remote_cores']:.2f}", f"{r['other_cores']:.2f}",
                f"{r['machine']:.0%}",
            ]
            for r in results
        ],
    )
    print("  ticks/s: frames each remote's game loop drew (its describe frame counter);"
          " VNC upd/s: updates that reached the agent\n"
          "  (fewer than ticks when a frame did not change or the agent fell behind); late: the"
          " agent called step() after the frame boundary had passed;\n"
          "  not ours: CPU the machine spent on other processes (other users, kernel) meanwhile")


# 2. Action-to-pixel latency ---------------------------------------------------------------


def measure_latency() -> dict[str, float]:
    with _local_remotes(1) as remotes:
        port = remotes.addresses[0].vnc_port
        assert port is not None
        timings, _, discarded = asyncio.run(tap_latencies([port], LATENCY_SAMPLES, LATENCY_WARMUP, PERIOD))
    values = np.array(timings)
    return {
        "samples": len(values),
        "discarded": discarded,
        "min": float(values.min()),
        "p50": float(np.percentile(values, 50)),
        "mean": float(values.mean()),
        "p99": float(np.percentile(values, 99)),
        "max": float(values.max()),
    }


def print_latency(r: dict[str, float]) -> None:
    print(f"\n  2. Action-to-pixel latency, one {ENV_ID} remote at {FPS:g} fps on 127.0.0.1: "
          f"{r['samples']:.0f} taps (Right/Left alternating, random phase), from send to the "
          "first VNC update showing the paddle moved")
    discarded = r["discarded"]
    print(f"     floor: a uniform wait for the next tick, 0..{PERIOD * 1e3:.1f} ms "
          f"(median {PERIOD * 500:.1f} ms), plus encode + loopback + decode"
          + (f"; {discarded} taps discarded (episode reset moved the paddle)" if discarded else ""))
    stats = ("min", "p50", "mean", "p99", "max")
    _table(
        ["", "min", "p50", "mean", "p99", "max"],
        [
            ["ms"] + [_ms(r[k]) for k in stats],
            ["/ frame period (16.7 ms)"] + [f"{r[k] / PERIOD:.2f}" for k in stats],
            ["/ median floor (8.3 ms)", "-"] + [f"{r[k] / (PERIOD / 2):.2f}" for k in stats[1:]],
        ],
    )


# 3. gymnasium AsyncVectorEnv over the same game ------------------------------------------


class CatchEnv(gymnasium.Env[np.ndarray, int]):
    """The Catch runtime as a plain gymnasium env: no network, no real time.

    Observation: a copy of the framebuffer. Action ``Discrete(3)``: 0 holds nothing,
    1 holds Left, 2 holds Right (key events only when the held key changes, as a VNC
    client would send them).
    """

    metadata = {"render_modes": []}
    _KEYS: Final = (None, "Left", "Right")

    def __init__(self) -> None:
        self.runtime: Runtime = registry.make(ENV_ID)
        fb = self.runtime.framebuffer
        self.observation_space = spaces.Box(0, 255, fb.shape, np.uint8)
        self.action_space = spaces.Discrete(3)
        self._held: str | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.runtime.reset(seed)
        self._held = None
        return self.runtime.framebuffer.copy(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        wanted = self._KEYS[int(action)]
        events: list[KeyEvent] = []
        if wanted != self._held:
            if self._held is not None:
                events.append(KeyEvent(self._held, False))
            if wanted is not None:
                events.append(KeyEvent(wanted, True))
            self._held = wanted
        result = self.runtime.step(events)
        return self.runtime.framebuffer.copy(), result.reward, result.done, False, result.info


def _make_catch() -> CatchEnv:
    return CatchEnv()


def _drive(envs: AsyncVectorEnv, seconds: float, throttle: bool) -> dict[str, float]:
    """Step ``envs`` with random actions for ``seconds``; at 60 fps when ``throttle``."""
    n = envs.num_envs
    envs.action_space.seed(0)
    steps = late_steps = 0
    pids = [p.pid for p in envs.processes if p.pid is not None]
    with _Meter(pids) as meter:
        now = time.perf_counter()
        deadline, next_at = now + seconds, now
        while time.perf_counter() < deadline:
            envs.step(envs.action_space.sample())
            steps += 1
            if throttle:  # the same frame clock as RemoteVectorEnv.step
                next_at += PERIOD
                now = time.perf_counter()
                if now > next_at:
                    late_steps += 1
                    next_at = now
                else:
                    time.sleep(next_at - now)
    return {
        "steps_per_s": steps / meter.wall,
        "late": late_steps / steps,
        "client_cpu": meter.client_cpu / (steps * n),
        "worker_cpu": meter.others_cpu / (steps * n),
        "machine": meter.machine_busy,
    }


def measure_async_vector(n: int) -> dict[str, Any]:
    started = time.perf_counter()
    envs = AsyncVectorEnv([_make_catch] * n, context="forkserver")
    try:
        envs.reset(seed=0)
        start_seconds = time.perf_counter() - started
        fast = _drive(envs, AVE_SECONDS, throttle=False)
        throttled = _drive(envs, AVE_SECONDS, throttle=True)
    finally:
        envs.close(terminate=False)
        for proc in envs.processes:  # close() joins them; make sure, never leave one behind
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
    return {"n": n, "start": start_seconds, "fast": fast, "throttled": throttled}


def print_async_vector(
    ours: dict[int, dict[str, float]], results: list[dict[str, Any]], skipped: list[tuple[int, str]]
) -> None:
    print(f"\n  3. gymnasium AsyncVectorEnv over the same Catch runtime (worker processes, no "
          f"network): (a) as fast as it goes, (b) throttled to {FPS:g} fps in the driver loop; "
          f"{AVE_SECONDS:g} s each, random agent")
    _table(
        ["n", "start s", "(a) steps/s/env", "(a) driver CPU ms/env-step", "(a) workers CPU ms/env-step",
         "(b) steps/s/env", "(b) late", "(b) driver CPU ms/env-step", "(b) workers CPU ms/env-step"],
        [
            [
                str(r["n"]), f"{r['start']:.1f}",
                f"{r['fast']['steps_per_s']:.1f}", _ms(r["fast"]["client_cpu"]), _ms(r["fast"]["worker_cpu"]),
                f"{r['throttled']['steps_per_s']:.1f}", f"{r['throttled']['late']:.1%}",
                _ms(r["throttled"]["client_cpu"]), _ms(r["throttled"]["worker_cpu"]),
            ]
            for r in results
        ],
    )
    print("\n  ours / AsyncVectorEnv (ours = part 1): steps/s per env; agent vs driver CPU per"
          " env-step;\n  total = agent CPU per remote-step + remote CPU per frame drawn, vs driver"
          " + workers CPU per env-step")
    rows = []
    for r in results:
        o = ours.get(r["n"])
        if o is None:
            continue
        a, b = r["fast"], r["throttled"]
        rows.append([
            str(r["n"]),
            _ratio(o["steps_per_s"], a["steps_per_s"]), _ratio(o["steps_per_s"], b["steps_per_s"]),
            _ratio(o["client_cpu"], a["client_cpu"]), _ratio(o["client_cpu"], b["client_cpu"]),
            _ratio(o["client_cpu"] + o["remote_cpu"], a["client_cpu"] + a["worker_cpu"]),
            _ratio(o["client_cpu"] + o["remote_cpu"], b["client_cpu"] + b["worker_cpu"]),
        ])
    _table(
        ["n", "steps/s vs (a)", "steps/s vs (b) 60fps", "agent CPU vs (a)",
         "agent CPU vs (b)", "total CPU vs (a)", "total CPU vs (b)"],
        rows,
    )
    for n, why in skipped:
        print(f"  skipped n={n}: {why}")


# Main ------------------------------------------------------------------------------------


def main() -> None:
    began = time.perf_counter()
    with _Meter() as idle:
        time.sleep(1.0)
    print(f"  {os.cpu_count()} CPUs ({idle.machine_busy:.0%} busy with other processes in the second "
          f"before we started), OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"gymnasium {gymnasium.__version__}, all on 127.0.0.1")

    realtime = [measure_realtime(n) for n in COUNTS]
    print_realtime(realtime)

    print_latency(measure_latency())

    multiprocessing.set_forkserver_preload(["numpy", "gymnasium", "runtimes.builtin"])
    results: list[dict[str, Any]] = []
    skipped: list[tuple[int, str]] = []
    for n in COUNTS:
        elapsed = time.perf_counter() - began
        cost = 2 * AVE_SECONDS + n * AVE_START_PER_WORKER + 2
        if elapsed + cost > BUDGET_SECONDS:
            skipped.append((n, f"{elapsed:.0f} s spent, ~{cost:.0f} s more would pass the "
                               f"{BUDGET_SECONDS:.0f} s budget"))
            continue
        results.append(measure_async_vector(n))
    print_async_vector({int(r["n"]): r for r in realtime}, results, skipped)
    print(f"\n  total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
