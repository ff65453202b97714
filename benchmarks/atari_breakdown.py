"""Where a lockstep step's time goes: a timed step, pings, cProfile and py-spy.

Part 1b of :mod:`benchmarks.atari_lockstep`: per encoding, a timed copy of the lockstep
step, run as the env runs it — plain calls in the caller's thread on the session's
blocking rewarder channel — with a clock read between the parts: sending the request,
waiting for the reply (with the remote's handling time from the reply header), reading
the frame from shared memory into an array like the batch's row, and the rest of
``env.step`` (glue: env.step minus the timed copy, the two taking turns);
``v0.control.ping`` as the bare round trip; cProfile of the stepping (caller's) thread
and of the loop thread (idle in lockstep but for resets); py-spy samples of the agent
and the remote (when ``py-spy`` is installed).
"""

from __future__ import annotations

import cProfile
import dis
import inspect
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
    Run,
    drive,
    lockstep_env,
    until,
)
from benchmarks.common import ms as _ms, table as _table
from remotes.env import RemoteEnv
from remotes.local import LocalRemotes
from remotes.loop import LoopThread
from remotes.session import RemoteSession
from rewarder import interrupts
from rewarder.blocking import BlockingRewarder
from rewarder.link_reader import LinkReader
from rewarder.protocol import StepReply

#: Seconds the timed copy waits for a reply (the env's own stall_timeout is longer).
REPLY_TIMEOUT: Final = 10.0
#: Issue 32's targets (seconds): the remote's CPU per Pong step outside emulation (its
#: CPU per step minus the in-process runtime's time for the same 4 frames), and the
#: agent's CPU per env-step.
AIM_REMOTE_CPU_OUTSIDE: Final = 60e-6
AIM_AGENT_CPU: Final = 80e-6

# 1b. Where a lockstep step's time goes -----------------------------------------------------


async def _vnc_frame(session: RemoteSession, reply: StepReply, dest: np.ndarray) -> None:
    """A frame that did not come through shared memory: the VNC update tagged with the
    reply's frame, copied into ``dest`` (on the loop thread, where VNC lives)."""
    vnc = session.vnc
    if vnc is None:
        return
    vnc.resume_updates()
    await vnc.wait_frame(reply.frame, REPLY_TIMEOUT)
    if vnc.framebuffer.shape == dest.shape:
        np.copyto(dest, vnc.framebuffer)


def _timed_step(env: RemoteEnv, events: list[Any], dest: np.ndarray) -> tuple[StepReply, list[float]]:
    """What a lockstep ``env.step`` does for one remote (remotes.lockstep), in this
    thread, with a clock read between the parts: (reply, [t0 send, t1 sent, t2 reply in,
    t3 frame in, remote handling s, 1.0 if the frame came through shared memory])."""
    session = env.session
    rewarder = session.rewarder
    assert isinstance(rewarder, BlockingRewarder), "a lockstep session has a blocking rewarder"
    t0 = time.perf_counter()
    message_id = rewarder.send_step(events, FRAMESKIP, session.shared.obs)
    t1 = time.perf_counter()
    reply: StepReply = rewarder.wait_reply(message_id, time.monotonic() + REPLY_TIMEOUT)
    t2 = time.perf_counter()
    shm = session.shared.take(reply, dest)
    if not shm:
        env.loop.run(_vnc_frame(session, reply, dest), REPLY_TIMEOUT)
    t3 = time.perf_counter()
    return reply, [t0, t1, t2, t3, reply.runtime, float(shm)]


def measure_breakdown(
    remotes: LocalRemotes, encoding: str, loop: LoopThread
) -> dict[str, float]:
    """Time the parts of TIMED_STEPS lockstep steps (median of each part), and the ping."""
    env = lockstep_env(remotes, encoding, loop, warm=True)
    try:
        space = env.action_space
        dest = np.empty(env.observation_space.shape or (), np.uint8)  # like a batch row
        parts: dict[str, list[float]] = {k: [] for k in (
            "env_step", "timed", "send", "wait", "rtt", "server", "frame", "shm")}
        going, done = until(TIMED_STEPS, RUN_SECONDS), 0
        with Run([remotes.processes[0].pid]) as run:
            while going(done):  # env.step and the timed copy take turns, for the glue column
                c0 = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(space.sample())
                parts["env_step"].append(time.perf_counter() - c0)
                if terminated or truncated:
                    env.reset()
                reply, (t0, t1, t2, t3, server, shm) = _timed_step(env, space.sample(), dest)
                parts["timed"].append(t3 - t0)
                parts["send"].append(t1 - t0)
                parts["wait"].append(t2 - t1)
                parts["rtt"].append(t2 - t0)
                parts["server"].append(server)
                parts["frame"].append(t3 - t2)
                parts["shm"].append(shm)
                done += 1
                if reply.done:
                    env.reset()
        rewarder = env.session.rewarder
        assert isinstance(rewarder, BlockingRewarder)
        pings = [rewarder.ping() for _ in range(PINGS)]
    finally:
        env.close()
    out = {k: statistics.median(v) for k, v in parts.items() if k != "shm"}
    out["shm"] = float(np.mean(parts["shm"]))
    out["ping"] = statistics.median(pings)
    out["remote_cpu"] = run.others_cpu / (2 * done)  # two steps a turn: env.step and the copy
    out["agent_cpu"] = run.own_cpu / (2 * done)
    return out


def print_breakdown(
    rows: dict[str, dict[str, float]], runtime_step: float, local_step: float
) -> None:
    print(f"\n  1b. Where a lockstep step goes: per encoding, {TIMED_STEPS} env.step calls "
          "taking turns with a timed copy of the lockstep step (remotes.lockstep) run the "
          "same way, in this thread (medians, ms)")
    _table(
        ["", "env.step", "timed step", "glue", "send", "send->reply", "  remote handling",
         "  the rest", "frame read", "frames via shm"],
        [
            [
                enc, _ms(r["env_step"]), _ms(r["timed"]), _ms(r["env_step"] - r["timed"]),
                _ms(r["send"]), _ms(r["rtt"]), _ms(r["server"]), _ms(r["rtt"] - r["server"]),
                _ms(r["frame"]), f"{r['shm']:.0%}",
            ]
            for enc, r in rows.items()
        ],
    )
    ping = statistics.median(r["ping"] for r in rows.values())
    print("  glue: env.step minus the timed step (action check, the stepping lock, slot "
          "bookkeeping, the info dict, the batch copy); send: building the request and\n"
          "  writing it to the socket; send->reply: from before the send until the reply is "
          "parsed (send included); remote handling: the reply's parent_runtime header\n"
          "  (parse, 4 frames, the frame into shared memory, the reply); the rest: send->reply "
          "minus remote handling (WebSocket framing and JSON both ways, the remote's\n"
          "  outbox task hop, loopback, wake-ups); frame read: shared memory into an array "
          "(one preadv), or the tagged VNC update when a frame did not come that way\n"
          "  (the encodings differ only there: with shared memory on, no VNC update is "
          "asked for during steps)")
    floor = runtime_step + ping
    print(f"  peers: v0.control.ping round trip {_ms(ping)} ms (median of {PINGS}); the remote's "
          f"runtime for {FRAMESKIP} frames {_ms(runtime_step)} ms and ale-py's local step "
          f"{_ms(local_step)} ms (part 1 medians)")
    ideal = local_step + ping
    print(f"  floor of a step with one rewarder round trip: runtime + ping = {_ms(floor)} ms = "
          f"{local_step / floor:.2f} x local; with a runtime as fast as local ale-py, "
          f"{_ms(ideal)} ms = {local_step / ideal:.2f} x local.\n  {GOAL_VS_LOCAL:.2f} x local "
          f"leaves {_ms(local_step / GOAL_VS_LOCAL - local_step)} ms a step for all I/O "
          "and encoding together")
    for enc, r in rows.items():
        outside = r["remote_cpu"] - runtime_step
        print(f"  {enc}: remote CPU per step {r['remote_cpu'] * 1e6:.0f} us, of which outside "
              f"emulation (minus the runtime's {runtime_step * 1e6:.0f} us) {outside * 1e6:.0f} us "
              f"(target <= {AIM_REMOTE_CPU_OUTSIDE * 1e6:.0f} us: "
              f"{'met' if outside <= AIM_REMOTE_CPU_OUTSIDE else 'not met'}); agent CPU per "
              f"env-step {r['agent_cpu'] * 1e6:.0f} us, timing code included (target <= "
              f"{AIM_AGENT_CPU * 1e6:.0f} us: {'met' if r['agent_cpu'] <= AIM_AGENT_CPU else 'not met'})")


# cProfile of the stepping thread (and the loop thread) ---------------------------------------


async def _profiler(profile: cProfile.Profile, on: bool) -> None:
    """Turn ``profile`` on or off in the thread running this (the loop thread)."""
    if on:
        profile.enable()
    else:
        profile.disable()


def profile_agent(remotes: LocalRemotes, encoding: str, loop: LoopThread) -> dict[str, Any]:
    """cProfile the calling thread (where lockstep steps run) and the loop thread (resets
    only, in lockstep) over PROFILE_STEPS env.step calls."""
    env = lockstep_env(remotes, encoding, loop, warm=True)
    main, loop_profile = cProfile.Profile(), cProfile.Profile()
    try:
        loop.run(_profiler(loop_profile, True))
        main.enable()
        with Run() as run:
            done = drive(env, PROFILE_STEPS)
        main.disable()
        loop.run(_profiler(loop_profile, False))
    finally:
        env.close()
    return {"steps": done, "wall": run.wall, "cpu": run.own_cpu, "main": main, "loop": loop_profile}


def _function_name(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    parts = Path(filename).parts
    return f"{'/'.join(parts[-2:])}:{line} {name}"


#: Built-ins that block (their own time is waiting, not work): the reply's select, the
#: loop thread's epoll, lock waits.
_WAITING: Final = (
    "'acquire' of '_thread.lock'", "'poll' of 'select.epoll'", "select.select",
    "'poll' of 'select.poll'",
)


def print_profile(profile: dict[str, Any]) -> None:
    steps = profile["steps"]
    print(f"\n  cProfile of the agent process, {PROFILE_ENCODING}, {steps} steps "
          f"({steps / profile['wall']:.0f} steps/s under the profiler, process CPU "
          f"{profile['cpu'] / steps * 1e6:.0f} us/step): own time per step (us), top functions "
          "per thread")
    for thread, label in (("main", "stepping thread (env.step: lockstep runs here)"),
                          ("loop", "loop thread (asyncio: resets only, in lockstep)")):
        stats = pstats.Stats(profile[thread]).stats  # type: ignore[attr-defined]
        own = {key: value[2] for key, value in stats.items()}
        waiting = sum(t for key, t in own.items() if any(w in key[2] for w in _WAITING))
        busy = sum(own.values()) - waiting
        print(f"  {label}: {busy / steps * 1e6:.0f} us/step busy, "
              f"{waiting / steps * 1e6:.0f} us/step blocked (select / lock acquire / epoll)")
        busy_only = [(k, t) for k, t in own.items() if not any(w in k[2] for w in _WAITING)]
        top = sorted(busy_only, key=lambda kv: kv[1], reverse=True)[:PROFILE_TOP]
        if not top:
            print("    (no calls)")
            continue
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


def _at(function: Callable[..., Any], attribute: str) -> tuple[str, ...]:
    """How py-spy names each line of ``function`` that calls ``attribute`` (a call into C:
    py-spy's leaf is then that Python line), e.g. ``"_flush (rewarder/blocking.py:475)"``.
    Read from the loaded code, not the file, which may have changed since; a function
    that no longer makes the call is a ValueError that names it."""
    code = function.__code__
    lines = sorted({
        ins.positions.lineno for ins in dis.get_instructions(code)
        if ins.argval == attribute and ins.positions is not None and ins.positions.lineno
    })
    if not lines:
        raise ValueError(f"{function.__qualname__} no longer calls {attribute}: "
                         "point benchmarks/atari_breakdown.py's rules at where it went")
    module = inspect.getmodule(function)
    assert module is not None and module.__name__
    path = module.__name__.replace(".", "/") + ".py"
    return tuple(f"{code.co_name} ({path}:{line})" for line in lines)


def _blocking_rules() -> list[Rule]:
    """The stepping thread's: where BlockingRewarder's calls into C sit (a send goes out
    through rewarder/interrupts.py, which holds Ctrl-C while it writes)."""
    poll_wait = _at(BlockingRewarder._read_some, "poll")
    send = _at(interrupts._send_some, "send")
    recv = (*_at(BlockingRewarder._recv, "recv"), *_at(BlockingRewarder.take_raw, "recv"))
    return [
        ("blocked: waiting for the reply (poll)", _leaf(*poll_wait)),
        ("rewarder: socket write (send)", _leaf(*send)),
        ("rewarder: socket read (recv)", _leaf(*recv)),
        ("frame read (shared memory, preadv)", _any("(rewarder/shm.py", "(remotes/shared_frames.py")),
        ("rewarder: WebSocket framing (websockets)", _any("(websockets/")),
        ("rewarder: messages, JSON (rewarder/)", _any("(rewarder/")),
        ("env.step glue (remotes/: check, slots, info, batch)", _any("(remotes/")),
        ("benchmark loop (sample actions)", lambda frames: True),
    ]


#: The names of a remote's reader threads (rewarder/link_reader.py), one a stepping connection.
READER_THREADS: Final = "rewarder-reader-"
REMOTE_RULES: Final[list[Rule]] = [
    ("idle (epoll wait)", _leaf("EpollSelector.select")),
    ("ALE: copy the screen (every frame)", _any("AtariRuntime._draw")),
    ("ALE: episode resets", _any("AtariRuntime.reset")),
    ("ALE: emulate (act)", _any("AtariRuntime.step", "AtariRuntime.advance")),
    ("lockstep frame into shared memory", _any("(envserver/lockstep_frames.py", "(rewarder/shm.py")),
    ("VNC: socket write", _writes("(vncdriver/")),
    ("VNC: diff tiles, encode", _any("(vncdriver/")),
    ("rewarder: socket write", _writes("(rewarder/", "(websockets/")),
    ("rewarder: parse, JSON, WebSocket", _any("(rewarder/", "(websockets/")),
    ("remote glue (envserver/)", _any("(envserver/")),
    ("asyncio and the rest", lambda frames: True),
]
LOOP_RULES: Final[list[Rule]] = [
    ("idle (epoll wait)", _leaf("EpollSelector.select")),
    ("hand-off: futures across threads",
     _any("concurrent/futures", "_chain_future", "_read_from_self", "run_coroutine_threadsafe")),
    ("VNC client: read, parse, decode", _any("(vncdriver/")),
    ("rewarder: blocking calls in a worker", _any("(rewarder/", "(websockets/")),
    ("session glue (remotes/)", _any("(remotes/")),
    ("asyncio and the rest", lambda frames: True),
]
KEEPER_RULES: Final[list[Rule]] = [
    ("idle (waiting for its next round)", _leaf("Event.wait", "Condition.wait")),
    ("serving idle channels", _any("(rewarder/")),
    ("the rest", lambda frames: True),
]


def _read_spy(path: Path) -> dict[str, Counter[str]]:
    """py-spy raw output -> {thread name: Counter(stack frames -> samples)}; a remote's
    reader threads together as ``rewarder-reader-*``."""
    threads: dict[str, Counter[str]] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        name = frames[0].partition("): ")[2] or frames[0]
        if name.startswith(READER_THREADS):  # (one a stepping connection: counted as one)
            name = f"{READER_THREADS}*"
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
    env = lockstep_env(remotes, encoding, loop, warm=True)
    folder = Path(tempfile.mkdtemp(prefix="atari-lockstep-spy-"))
    spies: list[subprocess.Popen[bytes]] = []
    targets = {"remote": remotes.processes[0].pid, "agent": os.getpid()}
    try:
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
    reader_idle = _at(LinkReader._run, "poll")
    for process, thread, rules in (
        ("remote", "MainThread", REMOTE_RULES),
        ("remote", f"{READER_THREADS}*", [("idle (poll wait)", _leaf(*reader_idle)), *REMOTE_RULES[1:]]),
        ("agent", "MainThread", _blocking_rules()),
        ("agent", "universe-remote-loop", LOOP_RULES),
        ("agent", "universe-remote-keepalive", KEEPER_RULES),
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
    idle = ("EpollSelector.select", *_at(BlockingRewarder._read_some, "poll"), *reader_idle)
    threads = (("remote", "MainThread"), ("remote", f"{READER_THREADS}*"), ("agent", "MainThread"))
    for process, thread in threads:
        stacks = result["samples"][process].get(thread) or Counter()
        total = sum(stacks.values())
        if not total:
            continue
        leaves: Counter[str] = Counter()
        for stack, count in stacks.items():
            frames = stack.split(";") if stack else []
            if frames and not any(i in frames[-1] for i in idle):
                leaves[_leaf_name(frames)] += count
        print(f"  busiest places, {process} {thread} (leaf <- nearest frame of ours; waits left out):")
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
