"""Atari lockstep: RemoteEnv/RemoteVectorEnv on Pong vs ale-py and gymnasium; real-time latency.

Three measures, all on 127.0.0.1, Pong with frameskip 4 and random actions:

1. **One lockstep remote.** :class:`RemoteEnv` in lockstep (each step is one
   ``v0.env.step`` of 4 frames, then the VNC update tagged with the resulting frame) for
   :data:`STEPS` steps after :data:`WARMUP_STEPS`, once per VNC encoding, against (a) the
   same loop on ale-py in this process (``act`` 4 times, ``getScreenRGB``: the limit) and
   (b) ``gymnasium.make("ALE/Pong-v5", frameskip=4, repeat_action_probability=0)``, with
   the remote's own :class:`~runtimes.atari.AtariRuntime` stepped in process as a third
   peer. The contenders take turns for :data:`ROUNDS` rounds and the median round is
   reported (the machine may be shared). Then where a step's time goes: a timed copy of
   the lockstep step on the env's loop (hand-off, rewarder round trip, the remote's
   handling time from the reply header, reply -> tagged frame), ``v0.control.ping`` as the
   bare round trip, cProfile of the agent's two threads, and py-spy samples of the agent
   and the remote (when ``py-spy`` is installed), with :data:`PROFILE_ENCODING`.
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
import cProfile
import multiprocessing
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import ale_py  # noqa: E402
import gymnasium  # noqa: E402
import numpy as np  # noqa: E402
from ale_py import ALEInterface, LoggerMode, roms  # noqa: E402
from gymnasium.vector import AsyncVectorEnv  # noqa: E402

from remotes.env import RemoteEnv  # noqa: E402
from remotes.local import LocalRemotes, start_local  # noqa: E402
from remotes.loop import LoopThread, shared_loop  # noqa: E402
from remotes.session import RemoteSession  # noqa: E402
from remotes.vector import RemoteVectorEnv  # noqa: E402
from runtimes import registry  # noqa: E402
from benchmarks.common import (  # noqa: E402
    table as _table,
    ratio as _ratio,
    ms as _ms,
    process_cpu as _process_cpu,
    machine_ticks as _machine_ticks,
)

gymnasium.register_envs(ale_py)
ALEInterface.setLoggerMode(LoggerMode.Error)

ENV_ID: Final = "atari.Pong-v0"
GYM_ID: Final = "ALE/Pong-v5"
ROM: Final = "pong"
FRAMESKIP: Final = 4
LOCKSTEP_ARGS: Final = ("--mode", "lockstep")
ENCODINGS: Final = ("raw", "tight", "zrle")
#: Untimed steps before each timed run (connection warm-up, first full frame).
WARMUP_STEPS: Final = 100
#: Timed steps per run in measure 1 (a run also stops after RUN_SECONDS).
STEPS: Final = 2000
RUN_SECONDS: Final = 10.0
#: Every contender runs once per round; the median round is reported.
ROUNDS: Final = 3
#: The issue's goal for measure 1: lockstep steps/s at least this fraction of local ale-py.
GOAL_VS_LOCAL: Final = 0.7
#: Steps of the timed lockstep copy (per encoding) and of the cProfile run.
TIMED_STEPS: Final = 1000
PROFILE_STEPS: Final = 1000
PROFILE_ENCODING: Final = "raw"
#: Round trips of v0.control.ping, the bare rewarder round trip.
PINGS: Final = 300
#: py-spy: seconds and samples per second it records each process.
PYSPY_SECONDS: Final = 2
PYSPY_RATE: Final = 400
#: Busiest leaf frames listed per sampled thread.
PYSPY_TOP: Final = 6
#: Functions listed per thread from cProfile.
PROFILE_TOP: Final = 8
#: Measure 2: remotes (and AsyncVectorEnv workers), and vector steps per run (each run
#: also stops after VECTOR_SECONDS).
COUNTS: Final = (1, 4, 8)
VECTOR_STEPS: Final = {1: 2000, 4: 800, 8: 400}
VECTOR_WARMUP: Final = 30
VECTOR_SECONDS: Final = 10.0
GOAL_VS_ASYNC: Final = 1.0
#: Measure 3: real-time steps sampled (after LATENCY_WARMUP) per loop.
FPS: Final = 60.0
PERIOD: Final = 1.0 / FPS
LATENCY_STEPS: Final = 300
LATENCY_WARMUP: Final = 30



# Small helpers ---------------------------------------------------------------------------












class _Run:
    """Wall time, this process's CPU and other processes' CPU over a ``with`` block."""

    def __init__(self, pids: Sequence[int] = ()) -> None:
        self.pids = list(pids)
        self.wall = self.own_cpu = self.others_cpu = 0.0

    def __enter__(self) -> _Run:
        self._wall, self._own = time.perf_counter(), time.process_time()
        self._others = sum(_process_cpu(p) for p in self.pids)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall = time.perf_counter() - self._wall
        self.own_cpu = time.process_time() - self._own
        self.others_cpu = sum(_process_cpu(p) for p in self.pids) - self._others


def _result(steps: int, run: _Run) -> dict[str, float]:
    return {
        "steps": steps,
        "steps_per_s": steps / run.wall,
        "own_cpu": run.own_cpu / steps,
        "others_cpu": run.others_cpu / steps,
    }


@contextlib.contextmanager
def _local_remotes(n: int, extra_args: Sequence[str] = LOCKSTEP_ARGS) -> Iterator[LocalRemotes]:
    """``n`` local Pong remotes, always stopped (their logs go unless one failed)."""
    remotes = start_local(ENV_ID, n, extra_args=list(extra_args))
    try:
        yield remotes
    finally:
        remotes.close()


def _time_steps(step: Callable[[], None], steps: int) -> dict[str, float]:
    """Warm up, then time ``step`` for ``steps`` calls (or :data:`RUN_SECONDS`)."""
    for _ in range(WARMUP_STEPS):
        step()
    going, done = _until(steps, RUN_SECONDS), 0
    with _Run() as run:
        while going(done):
            step()
            done += 1
    return _result(done, run)


def _until(steps: int, seconds: float) -> Callable[[int], bool]:
    """A predicate: go on while fewer than ``steps`` were done and ``seconds`` have not passed."""
    deadline = time.perf_counter() + seconds
    return lambda done: done < steps and time.perf_counter() < deadline


# 1. One lockstep remote vs ale-py and gymnasium -------------------------------------------


def run_local_ale(steps: int) -> dict[str, float]:
    """The limit: ale-py in this process, 4 ``act`` calls and an RGB screen per step."""
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setInt("frame_skip", 1)
    ale.loadROM(str(roms.get_rom_path(ROM)))
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(0)

    def step() -> None:
        action = actions[int(rng.integers(len(actions)))]
        for _ in range(FRAMESKIP):
            ale.act(action)
        ale.getScreenRGB()
        if ale.game_over():
            ale.reset_game()

    return _time_steps(step, steps)


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

        return _time_steps(step, steps)
    finally:
        env.close()


def run_runtime(steps: int) -> dict[str, float]:
    """What the remote itself runs per step: its AtariRuntime stepped FRAMESKIP times (an
    ``act`` and a screen copy per frame), in this process, no network."""
    runtime = registry.make(ENV_ID)
    try:
        runtime.reset(0)
        episodes = 0

        def step() -> None:
            nonlocal episodes
            for _ in range(FRAMESKIP):
                if runtime.step([]).done:
                    episodes += 1
                    runtime.reset(episodes)

        return _time_steps(step, steps)
    finally:
        runtime.close()


def _lockstep_env(remotes: LocalRemotes, encoding: str, loop: LoopThread) -> RemoteEnv:
    return RemoteEnv(
        remotes.address, mode="lockstep", frameskip=FRAMESKIP, encoding=encoding, loop=loop
    )


def _drive(env: RemoteEnv, steps: int) -> int:
    """Step ``env`` with random actions (resetting after an episode); steps done."""
    going, done = _until(steps, RUN_SECONDS), 0
    space = env.action_space
    while going(done):
        _, _, terminated, truncated, _ = env.step(space.sample())
        done += 1
        if terminated or truncated:
            env.reset()
    return done


def run_ours(
    remotes: LocalRemotes, encoding: str, loop: LoopThread, steps: int
) -> dict[str, float]:
    env = _lockstep_env(remotes, encoding, loop)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        _drive(env, WARMUP_STEPS)
        with _Run([p.pid for p in remotes.processes]) as run:
            done = _drive(env, steps)
        updates = env.session.vnc.stats.updates if env.session.vnc else 0
        nbytes = env.session.vnc.stats.bytes if env.session.vnc else 0
    finally:
        env.close()
    return {**_result(done, run), "bytes_per_update": nbytes / updates if updates else 0.0}


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


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run with the median steps/s (its CPU figures belong to it)."""
    ordered = sorted(runs, key=lambda r: r["steps_per_s"])
    return ordered[len(ordered) // 2]


def print_single(results: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n  1. One lockstep remote: {ENV_ID}, frameskip {FRAMESKIP}, random actions, "
          f"{STEPS} steps after {WARMUP_STEPS} warm-up, median of {ROUNDS} rounds (contenders "
          "take turns)")
    local = _median(results["local"])["steps_per_s"]
    gym = _median(results["gymnasium"])["steps_per_s"]
    labels = {
        "local": "ale-py in process (limit)",
        "gymnasium": f"gymnasium {GYM_ID}",
        "runtime": "AtariRuntime in process (no I/O)",
        **{e: f"RemoteEnv lockstep, {e}" for e in ENCODINGS},
    }
    rows = []
    for key, label in labels.items():
        runs = results[key]
        m = _median(runs)
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
    best = max(ENCODINGS, key=lambda e: _median(results[e])["steps_per_s"])
    best_ratio = _median(results[best])["steps_per_s"] / local
    verdict = "MET" if best_ratio >= GOAL_VS_LOCAL else "NOT MET"
    print(f"  goal: lockstep >= {GOAL_VS_LOCAL:.2f} x local ale-py. Best encoding here: {best}, "
          f"{best_ratio:.2f} x local -> {verdict}"
          + ("" if verdict == "MET" else
             f" (it would take {local * GOAL_VS_LOCAL:.0f} steps/s, "
             f"{_ms(1 / (local * GOAL_VS_LOCAL))} ms a step including the round trip)"))
    print("  AtariRuntime: what the remote runs per step (4 x runtime.step, a screen copy each "
          "frame), no events, no network;\n  this process CPU: for RemoteEnv, the agent process "
          "(both threads); remote CPU: the remote process; the other rows run in this process "
          "alone")


# 1b. Where a lockstep step's time goes -----------------------------------------------------


async def _timed_step(session: RemoteSession, events: list[Any]) -> tuple[Any, list[float]]:
    """What ``RemoteSession.step_lockstep`` does, with a clock read between the parts."""
    assert session.rewarder is not None and session.vnc is not None
    t0 = time.perf_counter()
    reply = await session.rewarder.step(events, FRAMESKIP)
    t1 = time.perf_counter()
    tag = session.tag
    already = float(tag is not None and tag.frame >= reply.frame)
    await session.vnc.wait_frame(reply.frame)
    t2 = time.perf_counter()
    session.rewarder.pop()
    session.frame()
    t3 = time.perf_counter()
    return reply, [t0, t1, t2, t3, reply.runtime, already]


async def _pings(session: RemoteSession, count: int) -> list[float]:
    assert session.rewarder is not None
    return [await session.rewarder.ping() for _ in range(count)]


def measure_breakdown(
    remotes: LocalRemotes, encoding: str, loop: LoopThread
) -> dict[str, float]:
    """Time the parts of TIMED_STEPS lockstep steps (median of each part), and the ping."""
    env = _lockstep_env(remotes, encoding, loop)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        _drive(env, WARMUP_STEPS)
        session, space = env.session, env.action_space
        parts: dict[str, list[float]] = {k: [] for k in (
            "env_step", "wall", "handoff", "rtt", "server", "to_frame", "copy", "already")}
        going, done = _until(TIMED_STEPS, RUN_SECONDS), 0
        while going(done):  # env.step and the timed copy take turns, for the glue column
            c0 = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(space.sample())
            parts["env_step"].append(time.perf_counter() - c0)
            if terminated or truncated:
                env.reset()
            events = space.sample()
            c0 = time.perf_counter()
            reply, (t0, t1, t2, t3, server, already) = loop.run(_timed_step(session, events))
            c1 = time.perf_counter()
            parts["wall"].append(c1 - c0)
            parts["handoff"].append((c1 - c0) - (t3 - t0))
            parts["rtt"].append(t1 - t0)
            parts["server"].append(server)
            parts["to_frame"].append(t2 - t1)
            parts["copy"].append(t3 - t2)
            parts["already"].append(already)
            done += 1
            if reply.done:
                env.reset()
        pings = loop.run(_pings(session, PINGS))
    finally:
        env.close()
    out = {k: statistics.median(v) for k, v in parts.items() if k != "already"}
    out["already"] = float(np.mean(parts["already"]))
    out["ping"] = statistics.median(pings)
    return out


def print_breakdown(
    rows: dict[str, dict[str, float]], runtime_step: float, local_step: float
) -> None:
    print(f"\n  1b. Where a lockstep step goes: per encoding, {TIMED_STEPS} env.step calls "
          "taking turns with a timed copy of RemoteSession.step_lockstep run on the env's loop "
          "(medians, ms)")
    _table(
        ["", "env.step", "timed step", "glue", "hand-off", "rewarder send->reply",
         "  remote handling", "  the rest", "reply->frame", "pop+copy", "frame in at reply"],
        [
            [
                enc, _ms(r["env_step"]), _ms(r["wall"]), _ms(r["env_step"] - r["wall"]),
                _ms(r["handoff"]), _ms(r["rtt"]), _ms(r["server"]), _ms(r["rtt"] - r["server"]),
                _ms(r["to_frame"]), _ms(r["copy"]), f"{r['already']:.0%}",
            ]
            for enc, r in rows.items()
        ],
    )
    ping = statistics.median(r["ping"] for r in rows.values())
    print("  glue: env.step minus the timed step (action check, info dict, VNC stats); hand-off: "
          "timed step seen from the calling thread minus its time on the loop\n"
          "  (run_coroutine_threadsafe, waking the loop, waking the caller); remote handling: the "
          "reply's parent_runtime header (parse, 4 frames, VNC diff+encode+write, reply)\n"
          "  the rest: send->reply minus remote handling (WebSocket framing and JSON both ways,"
          " the remote's outbox task hop, loopback, wake-ups, and\n  the agent decoding the VNC"
          " update, which the remote writes before the reply: see 'frame in at reply')")
    floor = runtime_step + ping
    print(f"  peers: v0.control.ping round trip {_ms(ping)} ms (median of {PINGS}); the remote's "
          f"runtime for {FRAMESKIP} frames {_ms(runtime_step)} ms and ale-py's local step "
          f"{_ms(local_step)} ms (part 1 medians)")
    ideal = local_step + ping
    print(f"  floor of a step with one rewarder round trip: runtime + ping = {_ms(floor)} ms = "
          f"{local_step / floor:.2f} x local; with a runtime as fast as local ale-py, "
          f"{_ms(ideal)} ms = {local_step / ideal:.2f} x local.\n  {GOAL_VS_LOCAL:.2f} x local "
          f"leaves {_ms(local_step / GOAL_VS_LOCAL - local_step)} ms a step for all I/O, "
          "hand-offs and encoding together")


# cProfile of the agent's two threads ------------------------------------------------------


async def _profiler(profile: cProfile.Profile, on: bool) -> None:
    """Turn ``profile`` on or off in the thread running this (the loop thread)."""
    if on:
        profile.enable()
    else:
        profile.disable()


def profile_agent(remotes: LocalRemotes, encoding: str, loop: LoopThread) -> dict[str, Any]:
    """cProfile the calling thread and the loop thread over PROFILE_STEPS env.step calls."""
    env = _lockstep_env(remotes, encoding, loop)
    main, loop_profile = cProfile.Profile(), cProfile.Profile()
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        _drive(env, WARMUP_STEPS)
        loop.run(_profiler(loop_profile, True))
        main.enable()
        with _Run() as run:
            done = _drive(env, PROFILE_STEPS)
        main.disable()
        loop.run(_profiler(loop_profile, False))
    finally:
        env.close()
    return {"steps": done, "wall": run.wall, "main": main, "loop": loop_profile}


def _function_name(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    parts = Path(filename).parts
    return f"{'/'.join(parts[-2:])}:{line} {name}"


_WAITING: Final = ("'acquire' of '_thread.lock'", "'poll' of 'select.epoll'")


def print_profile(profile: dict[str, Any]) -> None:
    steps = profile["steps"]
    print(f"\n  cProfile of the agent process, {PROFILE_ENCODING}, {steps} steps "
          f"({steps / profile['wall']:.0f} steps/s under the profiler): own time per step "
          "(us), top functions per thread")
    for thread, label in (("main", "caller thread (env.step)"), ("loop", "loop thread (asyncio)")):
        stats = pstats.Stats(profile[thread]).stats  # type: ignore[attr-defined]
        own = {key: value[2] for key, value in stats.items()}
        waiting = sum(t for key, t in own.items() if any(w in key[2] for w in _WAITING))
        busy = sum(own.values()) - waiting
        print(f"  {label}: {busy / steps * 1e6:.0f} us/step busy, "
              f"{waiting / steps * 1e6:.0f} us/step blocked (lock acquire / epoll)")
        busy_only = [(k, t) for k, t in own.items() if not any(w in k[2] for w in _WAITING)]
        top = sorted(busy_only, key=lambda kv: kv[1], reverse=True)[:PROFILE_TOP]
        _table(["    function", "us/step", "calls/step"],
               [[f"    {_function_name(key)}", f"{t / steps * 1e6:.1f}",
                 f"{stats[key][1] / steps:.1f}"] for key, t in top])


# py-spy samples of the agent and the remote ------------------------------------------------


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


#: (category, test on the stack's frames root -> leaf); the first that matches wins.
Rule = tuple[str, Callable[[list[str]], bool]]


def _any(*needles: str) -> Callable[[list[str]], bool]:
    return lambda frames: any(n in f for f in frames for n in needles)


def _leaf(*needles: str) -> Callable[[list[str]], bool]:
    return lambda frames: bool(frames) and any(n in frames[-1] for n in needles)


def _writes(*needles: str) -> Callable[[list[str]], bool]:
    """Stacks under ``needles`` whose leaf is a socket write (the kernel's loopback work)."""
    under, leaf = _any(*needles), _leaf("Transport.write", "_write_to_self", "sock_send")
    return lambda frames: under(frames) and leaf(frames)


REMOTE_RULES: Final[list[Rule]] = [
    ("idle (epoll wait)", _leaf("EpollSelector.select")),
    ("ALE: copy the screen (every frame)", _any("AtariRuntime._draw")),
    ("ALE: episode resets", _any("AtariRuntime.reset")),
    ("ALE: emulate (act)", _any("AtariRuntime.step")),
    ("VNC: socket write", _writes("(vncdriver/")),
    ("VNC: diff tiles, encode", _any("(vncdriver/")),
    ("rewarder: socket write", _writes("(rewarder/", "(websockets/")),
    ("rewarder: parse, JSON, WebSocket", _any("(rewarder/", "(websockets/")),
    ("remote glue (envserver/)", _any("(envserver/")),
    ("asyncio and the rest", lambda frames: True),
]
CALLER_RULES: Final[list[Rule]] = [
    ("blocked: waiting for the loop", _leaf("Condition.wait", "acquire")),
    ("hand-off: wake the loop", _any("run_coroutine_threadsafe", "call_soon_threadsafe")),
    ("env.step glue (check, info, stats)", _any("(remotes/")),
    ("benchmark loop (sample actions)", lambda frames: True),
]
LOOP_RULES: Final[list[Rule]] = [
    ("idle (epoll wait)", _leaf("EpollSelector.select")),
    ("hand-off: futures across threads",
     _any("concurrent/futures", "_chain_future", "_read_from_self", "run_coroutine_threadsafe")),
    ("VNC client: socket write (update request)", _writes("(vncdriver/")),
    ("VNC client: read, parse, decode", _any("(vncdriver/")),
    ("rewarder client: socket write", _writes("(rewarder/", "(websockets/")),
    ("rewarder client: WebSocket, JSON", _any("(rewarder/", "(websockets/")),
    ("session glue (remotes/)", _any("(remotes/")),
    ("asyncio and the rest", lambda frames: True),
]


def _read_spy(path: Path) -> dict[str, Counter[str]]:
    """py-spy raw output -> {thread name: Counter(stack frames -> samples)}."""
    threads: dict[str, Counter[str]] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        name = frames[0].partition("): ")[2] or frames[0]
        rest = ";".join(f for f in frames[1:] if not f.startswith("thread ("))
        threads.setdefault(name, Counter())[rest] += int(count)
    return threads


def _categorise(stacks: Counter[str], rules: list[Rule]) -> Counter[str]:
    out: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames = stack.split(";") if stack else []
        out[next(name for name, test in rules if test(frames))] += count
    return out


def spy_run(remotes: LocalRemotes, encoding: str, loop: LoopThread) -> dict[str, Any] | str:
    """Step while py-spy samples this process and the remote; categories per thread."""
    spy = _py_spy()
    if spy is None:
        return "py-spy is not installed (pip install py-spy): skipped"
    env = _lockstep_env(remotes, encoding, loop)
    folder = Path(tempfile.mkdtemp(prefix="atari-lockstep-spy-"))
    spies: list[subprocess.Popen[bytes]] = []
    targets = {"remote": remotes.processes[0].pid, "agent": os.getpid()}
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        _drive(env, WARMUP_STEPS)
        for name, pid in targets.items():
            spies.append(subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--duration", str(PYSPY_SECONDS),
                 "--rate", str(PYSPY_RATE), "--format", "raw", "--output", str(folder / name),
                 "--idle", "--threads", "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            ))
        deadline = time.perf_counter() + PYSPY_SECONDS + 15
        done = 0
        with _Run() as run:
            while any(s.poll() is None for s in spies) and time.perf_counter() < deadline:
                done += _drive(env, 50)
        failures = [s.stderr.read().decode(errors="replace").strip().splitlines()[-1:]
                    for s in spies if s.returncode not in (0, None) and s.stderr]
        if failures or any(not (folder / n).exists() for n in targets):
            return f"py-spy failed: {failures or 'no output'}"
        samples = {name: _read_spy(folder / name) for name in targets}
    finally:
        for s in spies:
            if s.poll() is None:
                s.kill()
            s.wait()
            if s.stderr:
                s.stderr.close()
        env.close()
        shutil.rmtree(folder, ignore_errors=True)
    return {"steps_per_s": done / run.wall, "samples": samples}


def print_spy(result: dict[str, Any] | str) -> None:
    print(f"\n  py-spy ({PYSPY_RATE} samples/s for {PYSPY_SECONDS} s, idle included, non-blocking) "
          f"of the remote and the agent, {PROFILE_ENCODING}:", end=" ")
    if isinstance(result, str):
        print(result)
        return
    per_step = 1 / result["steps_per_s"]
    print(f"{result['steps_per_s']:.0f} steps/s while sampled ({_ms(per_step)} ms a step);"
          " share of each thread's wall time and ms per step")
    rows = []
    for process, thread, rules in (
        ("remote", "MainThread", REMOTE_RULES),
        ("agent", "MainThread", CALLER_RULES),
        ("agent", "universe-remote-loop", LOOP_RULES),
    ):
        stacks = result["samples"][process].get(thread)
        if not stacks:
            rows.append([f"{process} {thread}", "no samples", "", ""])
            continue
        counts = _categorise(stacks, rules)
        total = sum(counts.values())
        first = True
        for name, _ in rules:
            if counts[name]:
                share = counts[name] / total
                rows.append([f"{process} {thread}" if first else "", name, f"{share:.1%}",
                             _ms(share * per_step)])
                first = False
    _table(["process / thread", "where", "share", "ms/step"], rows)
    for process, thread in (("remote", "MainThread"), ("agent", "universe-remote-loop")):
        stacks = result["samples"][process].get(thread) or Counter()
        total = sum(stacks.values())
        leaves: Counter[str] = Counter()
        for stack, count in stacks.items():
            frames = stack.split(";") if stack else []
            if frames and "EpollSelector.select" not in frames[-1]:
                leaves[_leaf_name(frames)] += count
        print(f"  busiest places, {process} {thread} (leaf <- nearest frame of ours):")
        _table(["    where", "share", "ms/step"],
               [[f"    {name}", f"{count / total:.1%}", _ms(count / total * per_step)]
                for name, count in leaves.most_common(PYSPY_TOP)])


_OURS: Final = ("(vncdriver/", "(rewarder/", "(runtimes/", "(remotes/")


def _short(frame: str) -> str:
    """``"f (pkg/mod.py:12)"`` -> ``"pkg/mod.py:12 f"``."""
    name, _, where = frame.partition(" (")
    return f"{where.rstrip(')')} {name}" if where else name


def _leaf_name(frames: list[str]) -> str:
    leaf = frames[-1]
    if any(o in leaf for o in _OURS):
        return _short(leaf)
    ours = next((f for f in reversed(frames) if any(o in f for o in _OURS)), None)
    return f"{_short(leaf)} <- {_short(ours)}" if ours else _short(leaf)


# 2. Many lockstep remotes vs AsyncVectorEnv ------------------------------------------------


def measure_vector_ours(n: int, encoding: str) -> dict[str, float]:
    started = time.perf_counter()
    with _local_remotes(n) as remotes:
        env = RemoteVectorEnv(
            remotes.address, mode="lockstep", frameskip=FRAMESKIP, encoding=encoding
        )
        try:
            env.reset(seed=0)
            start = time.perf_counter() - started
            space = env.single_action_space
            space.seed(0)
            for _ in range(VECTOR_WARMUP):
                env.step([space.sample() for _ in range(n)])
            going, done = _until(VECTOR_STEPS[n], VECTOR_SECONDS), 0
            with _Run([p.pid for p in remotes.processes]) as run:
                while going(done):
                    env.step([space.sample() for _ in range(n)])
                    done += 1
        finally:
            env.close()
    return {**_result(done, run), "start": start}


def measure_vector_async(n: int) -> dict[str, float]:
    started = time.perf_counter()
    envs = AsyncVectorEnv([_make_gym] * n, context="forkserver")
    try:
        envs.reset(seed=0)
        start = time.perf_counter() - started
        envs.action_space.seed(0)
        for _ in range(VECTOR_WARMUP):
            envs.step(envs.action_space.sample())
        going, done = _until(VECTOR_STEPS[n], VECTOR_SECONDS), 0
        with _Run([p.pid for p in envs.processes if p.pid is not None]) as run:
            while going(done):
                envs.step(envs.action_space.sample())
                done += 1
    finally:
        envs.close(terminate=False)
        for proc in envs.processes:  # close() joins them; never leave one behind
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
    return {**_result(done, run), "start": start}


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
    with _local_remotes(1, extra_args=()) as remotes:
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
    with _local_remotes(1) as remotes:
        single = measure_single(remotes, loop)
        print_single(single)
        breakdown = {e: measure_breakdown(remotes, e, loop) for e in ENCODINGS}
        print_breakdown(breakdown, 1 / _median(single["runtime"])["steps_per_s"],
                        1 / _median(single["local"])["steps_per_s"])
        print_profile(profile_agent(remotes, PROFILE_ENCODING, loop))
        print_spy(spy_run(remotes, PROFILE_ENCODING, loop))
    print(f"  ({time.perf_counter() - began:.0f} s so far)", flush=True)

    best = max(ENCODINGS, key=lambda e: _median(single[e])["steps_per_s"])
    multiprocessing.set_forkserver_preload(["numpy", "gymnasium", "ale_py"])
    ours = {n: measure_vector_ours(n, best) for n in COUNTS}
    theirs = {n: measure_vector_async(n) for n in COUNTS}
    print_vector(ours, theirs, best)
    print(f"  ({time.perf_counter() - began:.0f} s so far)", flush=True)

    print_latency(measure_latency())
    print(f"\n  total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
