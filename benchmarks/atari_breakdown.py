"""Where a lockstep step's time goes: a timed step, pings, cProfile and py-spy.

Part 1b of :mod:`benchmarks.atari_lockstep`: per encoding, a timed copy of the lockstep
step on the env's loop (hand-off, rewarder round trip, the remote's handling time from
the reply header, reply -> tagged frame), ``v0.control.ping`` as the bare round trip,
cProfile of the agent's two threads, and py-spy samples of the agent and the remote
(when ``py-spy`` is installed).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

from benchmarks.atari_common import (
    FRAMESKIP,
    GOAL_VS_LOCAL,
    PINGS,
    PROFILE_ENCODING,
    PROFILE_STEPS,
    PROFILE_TOP,
    PYSPY_RATE,
    PYSPY_SECONDS,
    PYSPY_TOP,
    RUN_SECONDS,
    TIMED_STEPS,
    WARMUP_STEPS,
    Run,
    drive,
    lockstep_env,
    until,
)
from benchmarks.common import ms as _ms, table as _table
from remotes.local import LocalRemotes
from remotes.loop import LoopThread
from remotes.session import RemoteSession

# 1b. Where a lockstep step's time goes -----------------------------------------------------


async def _timed_step(session: RemoteSession, events: list[Any]) -> tuple[Any, list[float]]:
    """What ``RemoteSession.step_lockstep`` does, with a clock read between the parts."""
    assert session.rewarder is not None and session.vnc is not None
    t0 = time.perf_counter()
    reply = await session.rewarder.step(events, FRAMESKIP, obs=session.shared.obs)
    t1 = time.perf_counter()
    tag = session.tag
    if session.shared.take(reply):  # shared memory: the frame is there already
        already = 1.0
    else:
        already = float(tag is not None and tag.frame >= reply.frame)
        session.vnc.resume_updates()
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
    env = lockstep_env(remotes, encoding, loop)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        drive(env, WARMUP_STEPS)
        session, space = env.session, env.action_space
        parts: dict[str, list[float]] = {k: [] for k in (
            "env_step", "wall", "handoff", "rtt", "server", "to_frame", "copy", "already")}
        going, done = until(TIMED_STEPS, RUN_SECONDS), 0
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
    env = lockstep_env(remotes, encoding, loop)
    main, loop_profile = cProfile.Profile(), cProfile.Profile()
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        drive(env, WARMUP_STEPS)
        loop.run(_profiler(loop_profile, True))
        main.enable()
        with Run() as run:
            done = drive(env, PROFILE_STEPS)
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
    env = lockstep_env(remotes, encoding, loop)
    folder = Path(tempfile.mkdtemp(prefix="atari-lockstep-spy-"))
    spies: list[subprocess.Popen[bytes]] = []
    targets = {"remote": remotes.processes[0].pid, "agent": os.getpid()}
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        drive(env, WARMUP_STEPS)
        for name, pid in targets.items():
            spies.append(subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--duration", str(PYSPY_SECONDS),
                 "--rate", str(PYSPY_RATE), "--format", "raw", "--output", str(folder / name),
                 "--idle", "--threads", "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            ))
        deadline = time.perf_counter() + PYSPY_SECONDS + 15
        done = 0
        with Run() as run:
            while any(s.poll() is None for s in spies) and time.perf_counter() < deadline:
                done += drive(env, 50)
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
