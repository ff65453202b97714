"""Atari lockstep: RemoteEnv/RemoteVectorEnv on Pong vs ale-py and gymnasium; real-time latency.

Three measures, all on 127.0.0.1, Pong with frameskip 4 and random actions:

1. **One lockstep remote.** :class:`RemoteEnv` in lockstep (each step is one
   ``v0.env.step`` of 4 frames; the frame from shared memory, which a local remote gets by
   default, else the VNC update tagged with the resulting frame) for
   :data:`STEPS` steps after :data:`WARMUP_STEPS`, once per VNC encoding, against (a) the
   same loop on ale-py in this process (``act`` 4 times, ``getScreenRGB``: the limit) and
   (b) ``gymnasium.make("ALE/Pong-v5", frameskip=4, repeat_action_probability=0)``, with
   the remote's own :class:`~runtimes.atari.AtariRuntime` stepped in process as a third
   peer. The contenders take turns for :data:`ROUNDS` rounds and the median round is
   reported (the machine may be shared). Then where a step's time goes
   (:mod:`benchmarks.atari_breakdown`): a timed copy of the lockstep step in the caller's
   thread (send, rewarder round trip, the remote's handling time from the reply header,
   the frame read from shared memory, the rest of ``env.step``), ``v0.control.ping`` as
   the bare round trip, cProfile of the stepping thread (and of the loop thread, idle in
   lockstep but for resets), and py-spy samples of the agent and the remote (when
   ``py-spy`` is installed), with :data:`PROFILE_ENCODING`.
2. **Many lockstep remotes.** :class:`RemoteVectorEnv` over n = 1, 4, 8 remotes against
   gymnasium's :class:`AsyncVectorEnv` with n ALE workers: steps/s per env and in total.
3. **Real-time latency.** One real-time Pong remote at 60 fps, :class:`RemoteEnv` with
   random actions: ``info["latency.action_to_frame"]`` and ``info["latency.frame_to_agent"]``
   (from the frame tags' server time and the rewarder's clock skew) against one frame
   period, and the same latencies for a loop that returns as soon as the next tagged
   frame arrives instead of at its own clock.

The machine has 2 cores; every figure is what this run measured, nothing is scaled.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import ale_py
import gymnasium
import numpy as np
from ale_py import ALEInterface, LoggerMode
from gymnasium.vector import AsyncVectorEnv

from benchmarks.common import ms as _ms, ratio as _ratio, table as _table
from remotes.capacity import machine_ticks as _machine_ticks
from remotes.env import RemoteEnv
from remotes.local import LocalRemotes
from remotes.loop import LoopThread, shared_loop
from remotes.session import RemoteSession
from remotes.vector import RemoteVectorEnv
from runtimes import registry

gymnasium.register_envs(ale_py)
ALEInterface.setLoggerMode(LoggerMode.Error)

from benchmarks.atari_breakdown import (  # noqa: E402
    measure_breakdown,
    print_breakdown,
    print_profile,
    print_spy,
    profile_agent,
    spy_run,
)
from benchmarks.atari_common import (  # noqa: E402
    COUNTS,
    ENCODINGS,
    ENV_ID,
    FRAMESKIP,
    GOAL_VS_ASYNC,
    GOAL_VS_LOCAL,
    GYM_ID,
    LATENCY_STEPS,
    LATENCY_WARMUP,
    PERIOD,
    PROFILE_ENCODING,
    ROUNDS,
    STEPS,
    VECTOR_SECONDS,
    VECTOR_STEPS,
    VECTOR_WARMUP,
    WARMUP_STEPS,
    Run,
    drawn,
    drive,
    local_remotes,
    lockstep_env,
    median_run,
    raw_ale_step,
    step_rates,
    time_steps,
    time_vector,
)

# 1. One lockstep remote vs ale-py and gymnasium -------------------------------------------


def run_local_ale(steps: int) -> dict[str, float]:
    """The limit: ale-py in this process, 4 ``act`` calls and an RGB screen per step."""
    return time_steps(raw_ale_step(), steps)


def _make_gym() -> gymnasium.Env[Any, Any]:
    return gymnasium.make(GYM_ID, frameskip=FRAMESKIP, repeat_action_probability=0.0)


def run_gymnasium(steps: int) -> dict[str, float]:
    env = _make_gym()
    try:
        env.reset(seed=0)
        env.action_space.seed(0)

        def step() -> None:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()

        return time_steps(step, steps)
    finally:
        env.close()


def run_runtime(steps: int) -> dict[str, float]:
    """What the remote itself runs per step: its AtariRuntime advanced FRAMESKIP frames
    (``act`` per frame, one screen copy at the end), in this process, no network."""
    runtime = registry.make(ENV_ID)
    try:
        runtime.reset(0)
        episodes = 0

        def step() -> None:
            nonlocal episodes
            if runtime.advance([], FRAMESKIP).done:
                episodes += 1
                runtime.reset(episodes)

        return time_steps(step, steps)
    finally:
        runtime.close()


def run_ours(
    remotes: LocalRemotes, encoding: str, loop: LoopThread, steps: int
) -> dict[str, float]:
    env = lockstep_env(remotes, encoding, loop, warm=True)
    try:
        with Run([p.pid for p in remotes.processes]) as run:
            done = drive(env, steps)
        updates = env.session.vnc.stats.updates if env.session.vnc else 0
        nbytes = env.session.vnc.stats.bytes if env.session.vnc else 0
    finally:
        env.close()
    return {**step_rates(done, run), "bytes_per_update": nbytes / updates if updates else 0.0}


def measure_single(remotes: LocalRemotes, loop: LoopThread) -> dict[str, list[dict[str, float]]]:
    """Every contender once per round; ROUNDS rounds (turns even out a shared machine)."""
    results: dict[str, list[dict[str, float]]] = {}
    for _ in range(ROUNDS):
        results.setdefault("local", []).append(run_local_ale(STEPS))
        results.setdefault("gymnasium", []).append(run_gymnasium(STEPS))
        results.setdefault("runtime", []).append(run_runtime(STEPS))
        for encoding in ENCODINGS:
            results.setdefault(encoding, []).append(run_ours(remotes, encoding, loop, STEPS))
    return results


def print_single(results: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n  1. One lockstep remote: {ENV_ID}, frameskip {FRAMESKIP}, random actions, "
          f"{STEPS} steps after {WARMUP_STEPS} warm-up, median of {ROUNDS} rounds (contenders "
          "take turns)")
    local = median_run(results["local"])["steps_per_s"]
    gym = median_run(results["gymnasium"])["steps_per_s"]
    labels = {
        "local": "ale-py in process (limit)",
        "gymnasium": f"gymnasium {GYM_ID}",
        "runtime": "AtariRuntime in process (no I/O)",
        **{e: f"RemoteEnv lockstep, {e}" for e in ENCODINGS},
    }
    rows = []
    for key, label in labels.items():
        runs = results[key]
        m = median_run(runs)
        rates = [r["steps_per_s"] for r in runs]
        spread = f"{min(rates):.0f}-{max(rates):.0f}"
        remote_cpu = _ms(m["others_cpu"]) if key in ENCODINGS else "-"
        rows.append([
            label, f"{m['steps_per_s']:.0f}", spread, _ms(1 / m["steps_per_s"]),
            _ms(m["own_cpu"]), remote_cpu,
            f"{m['bytes_per_update'] / 1024:.1f}" if key in ENCODINGS else "-",
            _ratio(m["steps_per_s"], local), _ratio(m["steps_per_s"], gym),
        ])
    _table(["", "steps/s", "rounds", "wall ms/step", "this process CPU ms/step",
            "remote CPU ms/step", "VNC KiB/update", "/ local", "/ gymnasium"], rows)
    best = max(ENCODINGS, key=lambda e: median_run(results[e])["steps_per_s"])
    best_ratio = median_run(results[best])["steps_per_s"] / local
    verdict = "MET" if best_ratio >= GOAL_VS_LOCAL else "NOT MET"
    print(f"  goal: lockstep >= {GOAL_VS_LOCAL:.2f} x local ale-py. Best encoding here: {best}, "
          f"{best_ratio:.2f} x local -> {verdict}"
          + ("" if verdict == "MET" else
             f" (it would take {local * GOAL_VS_LOCAL:.0f} steps/s, "
             f"{_ms(1 / (local * GOAL_VS_LOCAL))} ms a step including the round trip)"))
    print("  AtariRuntime: what the remote runs per step (runtime.advance of 4 frames, one screen "
          "copy), no events, no network;\n  this process CPU: for RemoteEnv, the agent process "
          "(both threads); remote CPU: the remote process; the other rows run in this process "
          "alone")


# 2. Many lockstep remotes vs AsyncVectorEnv ------------------------------------------------


@contextlib.contextmanager
def ours_vector(
    n: int, encoding: str, games_per_process: int | None = None, batch_size: int | None = None,
    pin: bool | None = None,
) -> Iterator[tuple[Callable[[], object], dict[str, Any]]]:
    """``RemoteVectorEnv`` lockstep over ``n`` local remotes (their processes pinned as
    ``pin`` says: start_local's), reset: its step (random actions; with
    ``batch_size`` k < n, send/recv of k remotes at a time) and what it is (``pids``, its
    ``env_steps`` a call, ``start`` seconds, ``pinned`` 1.0 when start_local pinned the
    processes)."""
    started = time.perf_counter()
    k = batch_size or n
    with local_remotes(n, games_per_process=games_per_process, pin=pin) as remotes:
        env = RemoteVectorEnv(
            remotes.address, mode="lockstep", frameskip=FRAMESKIP, encoding=encoding, batch_size=batch_size
        )
        try:
            env.reset(seed=0)
            start = time.perf_counter() - started
            space = env.single_action_space
            space.seed(0)
            if k < n:
                env.send([space.sample() for _ in range(n)])  # (after a reset all are ready)
                env.recv()
            actions = drawn(lambda: [space.sample() for _ in range(k)])
            yield lambda: env.step(actions()), {
                "pids": [p.pid for p in remotes.processes], "env_steps": k, "start": start,
                "pinned": float(any(cpu is not None for cpu in remotes.cpus))}
        finally:
            env.close()


def measure_vector_ours(
    n: int, encoding: str, games_per_process: int | None = None, batch_size: int | None = None,
    pin: bool | None = None,
) -> dict[str, float]:
    """:func:`ours_vector` timed: per vector step (with ``batch_size`` k < n, given per n
    env-steps, so that ``steps_per_s * n`` is env-steps/s either way)."""
    with ours_vector(n, encoding, games_per_process, batch_size, pin) as (step, about):
        k = about["env_steps"]
        rates = time_vector(step, VECTOR_STEPS[n] * n // k, about["pids"])
    scale = n / k  # (k env-steps a recv: n of them a vector step's worth)
    return {**rates, "steps_per_s": rates["steps_per_s"] / scale, "own_cpu": rates["own_cpu"] * scale,
            "others_cpu": rates["others_cpu"] * scale, "start": about["start"], "pinned": about["pinned"]}


@contextlib.contextmanager
def async_vector(n: int) -> Iterator[tuple[Callable[[], object], dict[str, Any]]]:
    """gymnasium's ``AsyncVectorEnv`` over ``n`` ALE workers, reset: its step (random
    actions) and what it is (as :func:`ours_vector` says it)."""
    started = time.perf_counter()
    envs = AsyncVectorEnv([_make_gym] * n, context="forkserver")
    try:
        envs.reset(seed=0)
        start = time.perf_counter() - started
        envs.action_space.seed(0)
        actions = drawn(envs.action_space.sample)
        yield lambda: envs.step(actions()), {
            "pids": [p.pid for p in envs.processes if p.pid is not None], "env_steps": n, "start": start}
    finally:
        envs.close(terminate=False)
        for proc in envs.processes:  # close() joins them; never leave one behind
            if proc.is_alive():
                proc.terminate()
                proc.join(5)


def measure_vector_async(n: int) -> dict[str, float]:
    with async_vector(n) as (step, about):
        rates = time_vector(step, VECTOR_STEPS[n], about["pids"])
    return {**rates, "start": about["start"]}


def print_vector(
    ours: dict[int, dict[str, float]], theirs: dict[int, dict[str, float]], encoding: str
) -> None:
    print(f"\n  2. RemoteVectorEnv lockstep ({encoding}) over n {ENV_ID} remotes vs gymnasium "
          f"AsyncVectorEnv over n {GYM_ID} workers (forkserver, shared memory): frameskip "
          f"{FRAMESKIP}, random actions,\n     "
          + ", ".join(f"n={n}: {VECTOR_STEPS[n]}" for n in COUNTS)
          + f" vector steps (or {VECTOR_SECONDS:g} s) after {VECTOR_WARMUP} warm-up; CPU in ms per "
          "env-step (this process; remotes or workers)")
    rows = []
    for n in COUNTS:
        o, a = ours[n], theirs[n]
        rows.append([
            str(n), f"{o['start']:.1f}", f"{o['steps_per_s']:.0f}", f"{o['steps_per_s'] * n:.0f}",
            _ms(o["own_cpu"] / n), _ms(o["others_cpu"] / n),
            f"{a['start']:.1f}", f"{a['steps_per_s']:.0f}", f"{a['steps_per_s'] * n:.0f}",
            _ms(a["own_cpu"] / n), _ms(a["others_cpu"] / n),
            _ratio(o["steps_per_s"], a["steps_per_s"]),
        ])
    _table(["n", "ours start s", "steps/s/env", "total", "agent CPU", "remotes CPU",
            "AVE start s", "steps/s/env", "total", "driver CPU", "workers CPU", "ours / AVE"], rows)
    worst = min(ours[n]["steps_per_s"] / theirs[n]["steps_per_s"] for n in COUNTS)
    print(f"  goal: ours >= {GOAL_VS_ASYNC:.1f} x AsyncVectorEnv at every n: lowest ratio "
          f"{worst:.2f} -> {'MET' if worst >= GOAL_VS_ASYNC else 'NOT MET'}")


# 3. Real-time latency from the frame clock -------------------------------------------------


async def _frame_locked_step(
    session: RemoteSession, events: list[Any], last: int
) -> tuple[int, float, float]:
    """Send, then return as soon as a frame past ``last`` arrives: (its number, sent, seen)."""
    assert session.vnc is not None
    sent_at = time.time()
    session.send(events)
    tag = await session.vnc.wait_frame(last + 1, timeout=1.0)
    session.pop()
    session.frame()
    return tag.frame, sent_at, time.time()


def measure_latency() -> dict[str, Any]:
    with local_remotes(1, extra_args=()) as remotes:
        env = RemoteEnv(remotes.address, loop=shared_loop())
        try:
            env.reset(seed=0)
            env.action_space.seed(0)
            space = env.action_space
            to_frame: list[float] = []
            to_agent: list[float] = []
            late = 0
            started = time.perf_counter()
            for i in range(LATENCY_WARMUP + LATENCY_STEPS):
                _, _, terminated, truncated, info = env.step(space.sample())
                if i >= LATENCY_WARMUP:
                    if "latency.action_to_frame" in info:
                        to_frame.append(info["latency.action_to_frame"])
                    if "latency.frame_to_agent" in info:
                        to_agent.append(info["latency.frame_to_agent"])
                    late += info.get("step.late", 0.0) > 0
                if terminated or truncated:
                    env.reset()
            env_rate = (LATENCY_WARMUP + LATENCY_STEPS) / (time.perf_counter() - started)
            skew = env.session.rewarder.clock_skew if env.session.rewarder else None
            locked_frame, locked_agent = _frame_locked(env, space)
        finally:
            env.close()
    return {
        "fps": env.fps, "rate": env_rate, "late": late, "skew": skew,
        "env": (to_frame, to_agent), "locked": (locked_frame, locked_agent),
    }


def _frame_locked(env: RemoteEnv, space: Any) -> tuple[list[float], list[float]]:
    """The same latencies for a loop paced by the remote's frames, not by its own clock."""
    session, loop = env.session, shared_loop()  # the env's loop
    tag = session.tag
    last = tag.frame if tag is not None else 0
    to_frame: list[float] = []
    to_agent: list[float] = []
    for i in range(LATENCY_WARMUP + LATENCY_STEPS):
        last, sent_at, seen = loop.run(_frame_locked_step(session, space.sample(), last))
        tag, skew = session.tag, session.clock_skew()
        if i >= LATENCY_WARMUP and tag is not None and skew is not None:
            drawn = tag.timestamp - skew
            to_agent.append(seen - drawn)
            if drawn >= sent_at:
                to_frame.append(drawn - sent_at)
    return to_frame, to_agent


def print_latency(r: dict[str, Any]) -> None:
    skew = r["skew"]
    width = f"{(skew[1] - skew[0]) * 1e3:.3f} ms wide" if skew else "unknown"
    print(f"\n  3. Real-time latency, one {ENV_ID} remote at {r['fps']:g} fps (default mode), "
          f"random actions, {LATENCY_STEPS} steps after {LATENCY_WARMUP}; from the frame tags' "
          f"server time and the rewarder clock skew (bounds {width})")
    print(f"     RemoteEnv stepped at {r['rate']:.1f} steps/s, {r['late']} late steps; "
          f"one frame period = {_ms(PERIOD, 1)} ms")
    rows = []
    for key, label in (("env", "RemoteEnv.step (own clock)"),
                       ("locked", "send, return at next tagged frame")):
        for values, what in zip(r[key], ("action_to_frame", "frame_to_agent"), strict=True):
            if not values:
                rows.append([f"{label}: {what}", "0", "-", "-", "-", "-", "-", "-"])
                continue
            v = np.array(values)
            p50, p99 = np.percentile(v, 50), np.percentile(v, 99)
            rows.append([
                f"{label}: {what}", str(len(v)), _ms(float(v.min())), _ms(float(p50)),
                _ms(float(p99)), _ms(float(v.max())), f"{p50 / PERIOD:.2f}", f"{p99 / PERIOD:.2f}",
            ])
    _table(["", "samples", "min ms", "p50 ms", "p99 ms", "max ms", "p50 / frame", "p99 / frame"],
           rows)
    print("  action_to_frame: sending the action -> drawing of the frame the step returned"
          " (only where that frame was drawn after the send);\n"
          "  frame_to_agent: drawing of that frame -> the agent has it. RemoteEnv returns at its"
          " own frame boundary, so the two add up to about one period\n"
          "  and split by the phase between its clock and the remote's; the frame-locked loop"
          " returns as a new frame arrives")


# Main --------------------------------------------------------------------------------------


def main() -> None:
    began = time.perf_counter()
    busy0 = _machine_ticks()
    time.sleep(1.0)
    busy1 = _machine_ticks()
    others = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])
    print(f"  {os.cpu_count()} CPUs ({others:.0%} busy with other processes in the second before "
          f"we started; load average {os.getloadavg()[0]:.2f}), OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}, ale-py {ale_py.__version__}, gymnasium "
          f"{gymnasium.__version__}, all on 127.0.0.1")

    loop = shared_loop()
    with local_remotes(1) as remotes:
        single = measure_single(remotes, loop)
        print_single(single)
        breakdown = {e: measure_breakdown(remotes, e, loop) for e in ENCODINGS}
        print_breakdown(breakdown, 1 / median_run(single["runtime"])["steps_per_s"],
                        1 / median_run(single["local"])["steps_per_s"])
        print_profile(profile_agent(remotes, PROFILE_ENCODING, loop))
        print_spy(spy_run(remotes, PROFILE_ENCODING, loop))
    print(f"  ({time.perf_counter() - began:.0f} s so far)", flush=True)

    best = max(ENCODINGS, key=lambda e: median_run(single[e])["steps_per_s"])
    multiprocessing.set_forkserver_preload(["numpy", "gymnasium", "ale_py"])
    ours = {n: measure_vector_ours(n, best) for n in COUNTS}
    theirs = {n: measure_vector_async(n) for n in COUNTS}
    print_vector(ours, theirs, best)
    print(f"  ({time.perf_counter() - began:.0f} s so far)", flush=True)

    print_latency(measure_latency())
    print(f"\n  total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
