"""Real time at density: many Catch remotes on this machine, several games per process.

Issue 28's figures, on 127.0.0.1 with ``builtin.Catch-v0`` at 60 fps, each against its
target, measured in this run:

``k``        **Remote CPU per frame by games per process**: one ``serve --games k``
             process (k = 1, 4, 8, 16) stepped by one :class:`RemoteVectorEnv` over its k
             games at 60 fps; the process's CPU (``/proc/PID/task/*/schedstat``) over the
             frames its games drew, so the per-process wake-up is shared by k frames.
             Target: <= :data:`REMOTE_TARGET_MS` amortized. The floor peer (an asyncio
             process that only wakes at 60 Hz and writes 12 KiB) is measured beside it.
``n``        **RemoteVectorEnv over n remotes** with ``start_local``'s default games per
             process (n = 64, 96, 128), and at n = 64 with k = 1, 4, 8, 16 forced: steps/s
             per remote (target >= :data:`STEPS_TARGET`), late steps, the remotes' CPU per
             frame, the agent's per remote-step, how busy the machine was.
``latency``  **Action -> pixel latency at n = 1, 32, 64**: an agent steps all n remotes
             (no-op actions: their frames are the load) while, on the same event loop
             thread as the env's sessions, a VNC client taps Right/Left on one remote
             after another at random phases of the frame clock, and times each tap from
             its send to the first update showing the paddle moved (p50/p99; target p99
             <= :data:`LATENCY_TARGET_MS` ms at n = 32). The remotes probed are spread
             over the processes and over positions in a process's tick order.
``overload`` **Overload without collapse** (issue 44): total env-steps/s of one
             :class:`RemoteVectorEnv` over n = 64 .. 256 real-time remotes against the
             peak total over the n and ways measured, with ``start_local``'s defaults
             (past :func:`remotes.capacity.capacity`: nice
             :data:`~remotes.capacity.OVERLOAD_NICE` and up to
             :data:`~remotes.capacity.OVERLOAD_GAMES` games a process) alternated with
             nice 0 for all n, each n both ways before the next. Target at n = 256:
             >= 90 % of the peak (30 % before).
``soak``     **Soak at n = 32** for :data:`SOAK_SECONDS`: steps/s, the remotes' and the
             agent's RSS and open file descriptors every :data:`SOAK_SAMPLE_SECONDS`, and
             late ticks (the remotes' own count, from describe) over frames drawn (target
             <= 1 %).

``python -m benchmarks.density`` (and ``python -m benchmarks``) runs k, n, latency and
overload;
``python -m benchmarks.density soak`` the soak; any of the names picks parts. The overload
part takes ``n=128,160,256`` (the n measured), ``ways=default`` (only start_local's
default priority: to compare two trees of the code, run each alternated) and
``seconds=6``, e.g. ``python -m benchmarks.density overload n=128,256 ways=default``. The machine
is shared: every table prints how busy it was with other processes, and absolute figures
drift +-30 % between runs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.catch_taps import tap_latencies  # noqa: E402
from benchmarks.common import quick, schedstat_cpu, table  # noqa: E402
from remotes.capacity import machine_ticks  # noqa: E402

ENV_ID: Final = "builtin.Catch-v0"
FPS: Final = 60.0
PERIOD: Final = 1.0 / FPS
#: Targets (issue 28).
REMOTE_TARGET_MS: Final = 0.25
STEPS_TARGET: Final = 58.0
LATENCY_TARGET_MS: Final = 20.0
LATE_TICKS_TARGET: Final = 0.01
#: ``k``: games per process measured, and seconds each is stepped after a warm-up.
GAMES: Final = quick((1, 4, 8, 16), (1, 16))
K_SECONDS: Final = quick(8.0, 2.0)
WARMUP_SECONDS: Final = quick(1.5, 0.5)
#: ``n``: remotes with the default games per process; and n with each of GAMES forced.
COUNTS: Final = quick((64, 96, 128), (32,))
FORCED_N: Final = quick(64, 32)
N_SECONDS: Final = quick(8.0, 2.0)
#: ``latency``: remotes, taps per run, remotes probed per run.
LATENCY_COUNTS: Final = quick((1, 32, 64), (1, 32))
LATENCY_SAMPLES: Final = quick(300, 60)
PROBED: Final = 8
#: ``overload``: remotes, each way (the priorities compared), seconds stepped; target at the
#: largest n, as a share of the peak total.
OVERLOAD_COUNTS: Final = quick((64, 128, 160, 192, 256), (16, 64))
OVERLOAD_WAYS: Final = {"nice 0 (before)": 0, "default (after)": None}
OVERLOAD_SECONDS: Final = quick(6.0, 2.0)
OVERLOAD_TARGET: Final = 0.9
#: ``soak``: remotes, seconds, and a sample every so often.
SOAK_N: Final = 32
SOAK_SECONDS: Final = 600.0
SOAK_SAMPLE_SECONDS: Final = 60.0
#: Seconds remotes have to start (128 of them on a busy 2-core machine).
START_TIMEOUT: Final = 120.0


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (0 if gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Window:
    """Wall, this process's CPU, some processes' CPU and the machine's load over a window."""

    def __init__(self, pids: Sequence[int] = ()) -> None:
        self.pids = list(pids)
        self.wall = self.agent_cpu = self.remotes_cpu = self.machine_busy = 0.0

    def __enter__(self) -> Window:
        self._wall, self._agent = time.perf_counter(), time.process_time()
        self._remotes = sum(schedstat_cpu(p) for p in self.pids)
        self._machine = machine_ticks()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall = time.perf_counter() - self._wall
        self.agent_cpu = time.process_time() - self._agent
        self.remotes_cpu = sum(schedstat_cpu(p) for p in self.pids) - self._remotes
        busy, total = machine_ticks()
        spent = total - self._machine[1]
        self.machine_busy = (busy - self._machine[0]) / spent if spent else 0.0

    @property
    def others_cores(self) -> float:
        """Cores the machine spent on other processes (other users, the kernel)."""
        ncpu = os.cpu_count() or 1
        return max(0.0, self.machine_busy * ncpu - (self.agent_cpu + self.remotes_cpu) / self.wall)


@contextmanager
def remotes_and_env(n: int, games: int | None, nice: int | None = None) -> Iterator[tuple[Any, Any]]:
    """``n`` local remotes (``games`` per process; None: the default; ``nice`` as
    start_local takes it) and a RemoteVectorEnv over them with the defaults, reset; both
    closed after."""
    from remotes.local import start_local
    from remotes.vector import RemoteVectorEnv

    local = start_local(ENV_ID, n, fps=FPS, games_per_process=games, start_timeout=START_TIMEOUT, nice=nice)
    try:
        env = RemoteVectorEnv(local.address)
        try:
            env.reset(seed=0)
            yield local, env
        finally:
            env.close()
    finally:
        local.close()


def _frames(info: dict[str, Any]) -> np.ndarray:
    return np.asarray(info["frame"], dtype=np.int64)


def step_for(env: Any, seconds: float, n: int, noop: bool = False) -> dict[str, Any]:
    """Step ``env`` for ``seconds`` (random actions, or none); steps, late steps, frames."""
    space = env.single_action_space
    space.seed(0)
    steps = late = 0
    _, _, _, _, info = env.step([[] for _ in range(n)])
    first = _frames(info)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        actions = [[] for _ in range(n)] if noop else [space.sample() for _ in range(n)]
        _, _, _, _, info = env.step(actions)
        steps += 1
        late += bool(np.max(info["step.late"]) > 0)
    return {"steps": steps, "late": late, "frames": int(np.sum(_frames(info) - first))}


# k: remote CPU per frame by games per process ----------------------------------------------


def measure_games(games: int) -> dict[str, float]:
    """One process of ``games`` games stepped by one env: its CPU per frame drawn."""
    with remotes_and_env(games, games) as (local, env):
        (process,) = local.processes
        step_for(env, WARMUP_SECONDS, games)
        with Window([process.pid]) as window:
            run = step_for(env, K_SECONDS, games)
    return {
        "k": games, "cpu_ms": 1e3 * window.remotes_cpu / run["frames"],
        "steps_per_s": run["steps"] / window.wall,
        "agent_ms": 1e3 * window.agent_cpu / (run["steps"] * games),
        "frames": run["frames"], "others": window.others_cores,
    }


def print_games(results: list[dict[str, float]], floor_ms: float) -> None:
    print(f"\n  k. Remote CPU per frame, one `serve --games k` process stepped by one "
          f"RemoteVectorEnv over its k games ({K_SECONDS:g} s; schedstat)")
    rows = []
    for r in results:
        met = "met" if r["cpu_ms"] <= REMOTE_TARGET_MS else "NOT met"
        rows.append([f"{r['k']:.0f}", f"{r['cpu_ms']:.3f}", f"{r['cpu_ms'] / REMOTE_TARGET_MS:.2f}x ({met})",
                     f"{r['cpu_ms'] / floor_ms:.2f}x", f"{r['steps_per_s']:.1f}",
                     f"{r['agent_ms']:.3f}", f"{r['others']:.2f}"])
    rows.append(["floor (1 process, 60 Hz, 12 KiB)", f"{floor_ms:.3f}",
                 f"{floor_ms / REMOTE_TARGET_MS:.2f}x", "1.00x", "-", "-", "-"])
    table(["games per process", "CPU ms/frame", f"vs {REMOTE_TARGET_MS} ms", "vs floor",
           "steps/s", "agent ms/remote-step", "other procs' cores"], rows)


# n: RemoteVectorEnv over many remotes -------------------------------------------------------


def measure_vector(n: int, games: int | None, nice: int | None = None,
                   seconds: float = N_SECONDS) -> dict[str, float]:
    """Step ``n`` remotes (``games`` per process) with a random agent for ``seconds``."""
    began = time.perf_counter()
    with remotes_and_env(n, games, nice) as (local, env):
        started = time.perf_counter() - began
        step_for(env, WARMUP_SECONDS, n)
        with Window([p.pid for p in local.processes]) as window:
            run = step_for(env, seconds, n)
        k = max(local.games)
    return {
        "n": n, "k": k, "processes": -(-n // k), "start": started,
        "steps_per_s": run["steps"] / window.wall, "late": run["late"] / max(run["steps"], 1),
        "remote_ms": 1e3 * window.remotes_cpu / max(run["frames"], 1),
        "agent_ms": 1e3 * window.agent_cpu / max(run["steps"] * n, 1),
        "remotes_cores": window.remotes_cpu / window.wall, "agent_cores": window.agent_cpu / window.wall,
        "others": window.others_cores, "machine": window.machine_busy,
    }


def print_vector(results: list[dict[str, float]], title: str) -> None:
    print(f"\n  {title}")
    rows = []
    for r in results:
        met = "met" if r["steps_per_s"] >= STEPS_TARGET else "NOT met"
        rows.append([f"{r['n']:.0f}", f"{r['k']:.0f} x {r['processes']:.0f}", f"{r['start']:.1f}",
                     f"{r['steps_per_s']:.1f} ({met})", f"{r['late']:.1%}", f"{r['remote_ms']:.3f}",
                     f"{r['agent_ms']:.3f}", f"{r['remotes_cores']:.2f}", f"{r['agent_cores']:.2f}",
                     f"{r['others']:.2f}", f"{r['machine']:.0%}"])
    table(["n", "games x processes", "start s", f"steps/s/remote (>= {STEPS_TARGET:g})", "late steps",
           "remote CPU ms/frame", "agent CPU ms/remote-step", "remotes cores", "agent cores",
           "other procs' cores", "machine busy"], rows)


# overload: total env-steps/s past what the machine holds -------------------------------------


def overload(counts: Sequence[int] = OVERLOAD_COUNTS, ways: Sequence[str] = tuple(OVERLOAD_WAYS),
             seconds: float = OVERLOAD_SECONDS) -> None:
    """The overload part over ``counts`` remotes, the ``ways`` named (keys of
    :data:`OVERLOAD_WAYS`), ``seconds`` stepped each."""
    from remotes.capacity import capacity

    held = capacity(ENV_ID, 8, FPS)
    results: dict[str, dict[int, dict[str, float]]] = {way: {} for way in ways}
    for n in counts:
        for way in ways:  # alternated: both ways at n before the next n
            try:
                results[way][n] = r = measure_vector(n, None, OVERLOAD_WAYS[way], seconds)
                print(f"  {way}, n={n}: {r['steps_per_s'] * n:,.0f} env-steps/s", flush=True)
            except Exception as exc:  # a busy machine: say which run failed, go on with the rest
                print(f"  {way}, n={n}: failed: {str(exc)[:300]}", flush=True)
    print(f"\n  overload. Total env-steps/s, RemoteVectorEnv over n real-time {ENV_ID} remotes "
          f"({seconds:g} s each), against the peak total of the ways run; this machine holds "
          f"{held} by remotes.capacity")
    rows = []
    # the peak: the best total of either way at any n (the machine's, not one way's)
    peak = max((r["steps_per_s"] * n for by_n in results.values() for n, r in by_n.items()), default=1.0)
    for way, by_n in results.items():
        for n, r in by_n.items():
            total = r["steps_per_s"] * n
            share = total / peak
            met = "" if n != max(by_n) else f" ({'met' if share >= OVERLOAD_TARGET else 'NOT met'})"
            rows.append([way, f"{n}", f"{r['steps_per_s']:.1f}", f"{total:,.0f}", f"{share:.0%}{met}",
                         f"{r['remotes_cores']:.2f}", f"{r['agent_cores']:.2f}", f"{r['others']:.2f}"])
    table(["priority", "n", "steps/s/remote", "total env-steps/s",
           f"of peak (>= {OVERLOAD_TARGET:.0%} at the largest n)", "remotes cores", "agent cores",
           "other procs' cores"], rows)
    print(f"  load average {os.getloadavg()[0]:.1f} at the end")


# latency: action -> pixel at n ----------------------------------------------------------------


def measure_latency(n: int) -> dict[str, Any]:
    """n remotes stepped (no-op) by an env in a thread; taps on the env's loop thread."""
    from remotes.loop import shared_loop

    with remotes_and_env(n, None) as (local, env):
        probed = sorted({round(i * (n - 1) / max(PROBED - 1, 1)) for i in range(min(PROBED, n))})
        ports = [local.addresses[i].vnc_port for i in probed]
        stop = threading.Event()
        stepped: dict[str, Any] = {}

        def drive() -> None:
            began, steps = time.perf_counter(), 0
            while not stop.is_set():
                env.step([[] for _ in range(n)])
                steps += 1
            stepped["steps_per_s"] = steps / (time.perf_counter() - began)

        driver = threading.Thread(target=drive, name="density-driver")
        driver.start()
        try:
            with Window([p.pid for p in local.processes]) as window:
                timings, whose, discarded = shared_loop().run(
                    tap_latencies(ports, LATENCY_SAMPLES, 2 * len(ports), PERIOD), 600)
        finally:
            stop.set()
            driver.join()
        games = max(local.games)
    values = np.array(timings) * 1e3
    positions = [probed[w] % games for w in whose]  # where in its process's tick order
    late_half = values[np.array(positions) >= games / 2] if games > 1 else values
    return {
        "n": n, "k": games, "samples": len(values), "discarded": discarded,
        "p50": float(np.percentile(values, 50)), "p90": float(np.percentile(values, 90)),
        "p99": float(np.percentile(values, 99)), "max": float(values.max()),
        "p99_late_half": float(np.percentile(late_half, 99)) if late_half.size else float("nan"),
        "steps_per_s": stepped.get("steps_per_s", 0.0), "others": window.others_cores,
    }


def print_latency(results: list[dict[str, Any]]) -> None:
    print(f"\n  latency. Action -> pixel: {LATENCY_SAMPLES} taps at random phases over up to "
          f"{PROBED} remotes, while an env steps all n (no-op); send -> first update showing "
          "the move, ms")
    rows = []
    for r in results:
        met = "met" if r["p99"] <= LATENCY_TARGET_MS else "NOT met"
        rows.append([f"{r['n']}", f"{r['k']}", f"{r['p50']:.1f}", f"{r['p90']:.1f}",
                     f"{r['p99']:.1f} ({met} <= {LATENCY_TARGET_MS:g})", f"{r['max']:.1f}",
                     f"{r['p99_late_half']:.1f}", f"{r['steps_per_s']:.1f}",
                     f"{r['samples']} ({r['discarded']} discarded)", f"{r['others']:.2f}"])
    table(["n", "games per process", "p50", "p90", "p99", "max",
           "p99, 2nd half of tick order", "env steps/s", "taps", "other procs' cores"], rows)


# soak ------------------------------------------------------------------------------------------


def _late_ticks(env: Any) -> tuple[int, int]:
    """(late ticks, frames) summed over the remotes' last describes."""
    describes = [r.describe for r in env.remotes]
    return (sum(int(d.get("late_ticks", 0)) for d in describes),
            sum(int(d.get("frame", 0)) for d in describes))


def soak(n: int = SOAK_N, seconds: float = SOAK_SECONDS) -> None:
    print(f"\n  soak. RemoteVectorEnv over {n} remotes (default games per process), random "
          f"agent, {seconds:g} s; a row every {SOAK_SAMPLE_SECONDS:g} s")
    with remotes_and_env(n, None) as (local, env):
        pids = [p.pid for p in local.processes]
        late0, frames0 = _late_ticks(env)
        rows = []
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            with Window(pids) as window:
                run = step_for(env, min(SOAK_SAMPLE_SECONDS, seconds), n)
            late, frames = _late_ticks(env)
            rows.append([
                f"{time.perf_counter() - began:.0f}", f"{run['steps'] / window.wall:.1f}",
                f"{run['late'] / max(run['steps'], 1):.1%}",
                f"{(late - late0) / max(frames - frames0, 1):.2%}",
                f"{sum(rss_mb(p) for p in pids):.1f}", f"{rss_mb(os.getpid()):.1f}",
                f"{sum(open_fds(p) for p in pids)}", f"{open_fds(os.getpid())}",
                f"{1e3 * window.remotes_cpu / max(run['frames'], 1):.3f}",
                f"{window.others_cores:.2f}",
            ])
            print("  " + "  ".join(rows[-1]), flush=True)
        games = max(local.games)
    print(f"  ({games} games per process, {len(pids)} processes)")
    table(["t s", "steps/s/remote", "late steps", "late ticks (cumul.)", "remotes RSS MiB",
           "agent RSS MiB", "remotes fds", "agent fds", "remote CPU ms/frame", "other procs' cores"],
          rows)


def _options(args: Sequence[str]) -> dict[str, str]:
    """``name=value`` arguments (the overload part's n, ways and seconds)."""
    options = dict(a.split("=", 1) for a in args if "=" in a)
    unknown = set(options) - {"n", "ways", "seconds"}
    if unknown:
        raise SystemExit(f"unknown option(s) {sorted(unknown)}: the overload part takes n=128,256, "
                         f"ways={','.join(w.split()[0] for w in OVERLOAD_WAYS)}, seconds=6")
    return options


def _ways(names: str) -> tuple[str, ...]:
    """Keys of OVERLOAD_WAYS from their first words (``default``, ``nice``)."""
    picked = tuple(w for w in OVERLOAD_WAYS if w.split()[0] in names.split(","))
    if not picked:
        raise SystemExit(f"ways={names!r} names none of {[w.split()[0] for w in OVERLOAD_WAYS]}")
    return picked


def main(parts: list[str] | None = None) -> None:
    """The parts named (k, n, latency, overload, soak); by default all but the soak;
    ``name=value`` options for the overload part (module docstring)."""
    options = _options(parts or [])
    parts = [p for p in parts or [] if "=" not in p] or ["k", "n", "latency", "overload"]
    print(f"  {os.cpu_count()} CPUs, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"load average {os.getloadavg()[0]:.1f} at start, all on 127.0.0.1")
    if "k" in parts:
        from benchmarks.realtime_cpu import measure_floor

        results = [measure_games(k) for k in GAMES]
        print_games(results, 1e3 * measure_floor())
    if "n" in parts:
        print_vector([measure_vector(n, None) for n in COUNTS],
                     "n. RemoteVectorEnv over n local remotes, start_local's default games per process")
        print_vector([measure_vector(FORCED_N, k) for k in GAMES],
                     f"n. RemoteVectorEnv over {FORCED_N} remotes, games per process forced")
    if "latency" in parts:
        print_latency([measure_latency(n) for n in LATENCY_COUNTS])
    if "overload" in parts:
        overload(
            tuple(int(n) for n in options["n"].split(",")) if "n" in options else OVERLOAD_COUNTS,
            _ways(options["ways"]) if "ways" in options else tuple(OVERLOAD_WAYS),
            float(options.get("seconds", OVERLOAD_SECONDS)),
        )
    if "soak" in parts:
        soak()


if __name__ == "__main__":
    main(sys.argv[1:])
