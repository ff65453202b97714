"""What this machine holds: real-time remotes its cores serve before the agents starve.

Issue 44: one ``RemoteVectorEnv`` over n real-time Catch remotes on 2 cores kept ~60
steps/s per remote up to n = 160, then collapsed (n = 256: 10 steps/s, a third of the
peak's frames): the remotes took the cores, and the agent that steps them waited for CPU.
What a machine holds counts both: each remote's frames and the agent's work for it, in
one process whose Python uses one core at most.
:func:`start_local` and the warm pool ask :func:`capacity` before they start remotes; past
it they warn (:func:`overload_warning`) and start the remotes at :data:`OVERLOAD_NICE`, so
the kernel serves the agent first and the remotes share what is left: each remote's frame
rate falls, the total does not collapse. What a remote costs past capacity is also less
than a frame's full price: the agent asks each remote for the frames it reads (frames on
demand, :attr:`vncdriver.client.VNCClient.on_demand`), and a built-in game plays the
frames nobody reads without drawing them (``Runtime.draws_on_demand``), so an agent
slower than its remotes no longer has them encode, and itself decode, every frame drawn.

The estimate is CPU per frame (:func:`frame_cpu_ms`): measured from the remotes' own
processes when a :class:`~remotes.local.LocalRemotes` closes (their CPU from ``/proc``
since they were ready, over the frames they drew at their fps in that time, kept only
when the machine was not saturated: a starved remote's CPU says nothing of what it
needs), cached per env id and games per
process in :data:`CACHE_NAME`; until then :data:`DEFAULT_FRAME_CPU_MS`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from .busy_cpus import PROC_STAT, busy_cpus, line_ticks

log = logging.getLogger(__name__)

#: CPU ms a real-time Catch frame costs its process, by games per process, until measured
#: here (`python -m benchmarks density`, part k; benchmarks/RESULTS.md 2026-11-26: 0.70 at
#: 1 game, 0.165 at 8). Other env ids start from the same figures and are measured.
DEFAULT_FRAME_CPU_MS: Final = {1: 0.70, 8: 0.165}
#: Frames a second a real-time remote draws when ``serve --fps`` is not given.
DEFAULT_FPS: Final = 60.0
#: Share of the cores real-time remotes may take when their agents run elsewhere (the
#: warm pool's warning); :func:`capacity` counts the agent's own cost instead.
REMOTES_SHARE: Final = 0.75
#: CPU ms the agent's process spends per remote per real-time step (a RemoteVectorEnv:
#: the action out, the frame in, the step's bookkeeping): its cores over the total
#: env-steps/s at n = 128-160 Catch remotes, 0.100-0.116 ms in quiet runs (0.73-0.75 of a
#: core at 6,300-7,500 env-steps/s; `python -m benchmarks.density overload`,
#: benchmarks/RESULTS.md 2026-12-06, session three). 0.09 (a loaded machine's figure)
#: said 185 Catch remotes, where 160 at nice 0 and 8 games a process fell to 38-40
#: steps/s each (6,300 in total) against 50-54 (8,000-8,600) past capacity at 16 games
#: a process. Without it at all the capacity said 246 (464 once frames nobody reads went
#: undrawn).
AGENT_STEP_CPU_MS: Final = 0.11
#: Cores one agent process can use: its Python runs one thread at a time (the GIL), so
#: the remotes one agent steps at full rate are at most this over its cost per remote.
AGENT_CORES: Final = 1.0
#: ``nice`` of remotes started past capacity. 19 (the lowest priority, CFS weight 15
#: against the agent's 1024) rather than 5 (weight 335): 32 processes at nice 5 still
#: outweigh one agent ten to one; compared with 0 in `python -m benchmarks density
#: overload` (issue 44; provisional figures on a busy machine).
OVERLOAD_NICE: Final = 19
#: Games a process serves past capacity (``start_local``'s default there): a process's
#: wake-up a frame costs more than its games' frames, so 16 games cost 0.13 ms CPU a
#: frame against 0.165 at 8 (benchmarks/RESULTS.md 2026-11-26), and 256 idle Catch
#: remotes took 0.24 cores in 16 processes against 0.39 in 32 (issue 44, a loaded
#: machine); the burst of 16 updates (+1-2 ms action -> pixel p99) matters less there,
#: where every frame comes late.
OVERLOAD_GAMES: Final = 16
#: Seconds of a remote process's life a measurement needs: a shorter one is start-up.
MIN_MEASURED_SECONDS: Final = 5.0
#: A measurement is kept only when the remotes took less than this share of the cores
#: and the whole machine was busy less than MACHINE_BUSY_BELOW of the time: beyond either
#: they may have been starved (frames skipped), and CPU used is less than CPU needed.
MEASURE_BELOW_SHARE: Final = 0.5
MACHINE_BUSY_BELOW: Final = 0.8
#: Environment variable naming the cache file (tests point it at a temporary one).
CACHE_ENV: Final = "UNIVERSE_REMOTE_CAPACITY_CACHE"
#: Where measured CPU per frame is kept between runs, under $XDG_CACHE_HOME (~/.cache).
CACHE_NAME: Final = "universe-remote/frame-cpu.json"


def _cache_path() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / CACHE_NAME


def _key(env_id: str, games: int) -> str:
    return f"{env_id} games={games}"


def _load() -> dict[str, float]:
    try:
        data = json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}


def frame_cpu_ms(env_id: str, games: int) -> float:
    """CPU ms one frame of ``env_id`` costs a process of ``games`` games: measured and
    cached, else :data:`DEFAULT_FRAME_CPU_MS` (the nearest games per process)."""
    measured = _load().get(_key(env_id, games))
    if measured is not None:
        return measured
    return DEFAULT_FRAME_CPU_MS[1 if games == 1 else 8]


def cores_per_remote(env_id: str, games: int, fps: float | None = None) -> float:
    """Cores one real-time remote of ``env_id`` (``games`` per process) takes at ``fps``."""
    return frame_cpu_ms(env_id, games) * (fps or DEFAULT_FPS) / 1e3


def agent_cores_per_remote(fps: float | None = None) -> float:
    """Cores the agent stepping one real-time remote at ``fps`` takes (:data:`AGENT_STEP_CPU_MS`)."""
    return AGENT_STEP_CPU_MS * (fps or DEFAULT_FPS) / 1e3


def capacity(env_id: str, games: int, fps: float | None = None, cores: int | None = None) -> int:
    """Real-time remotes of ``env_id`` (``games`` per process) that one agent on this
    machine steps at ``fps``: the ``cores`` (default: all of them) over what a remote
    and the agent's share of it cost, and no more than the agent's one core
    (:data:`AGENT_CORES`) holds."""
    cores = cores or os.cpu_count() or 1
    agent = agent_cores_per_remote(fps)
    held = min(cores / (cores_per_remote(env_id, games, fps) + agent), AGENT_CORES / agent)
    return max(1, int(held))


def overload_games(n: int) -> int:
    """Games per process for ``n`` real-time remotes past capacity: at most
    :data:`OVERLOAD_GAMES`, as even as they go."""
    processes = -(-n // OVERLOAD_GAMES)
    return -(-n // processes)


def overload_warning(env_id: str, n: int, held: int, games: int, nice: int,
                     who: str = "start_local") -> str | None:
    """What to say when ``n`` real-time remotes exceed the ``held`` this machine holds."""
    if n <= held:
        return None
    return (
        f"{who}: {n} real-time {env_id} remotes exceed the {held} this machine's "
        f"{os.cpu_count()} cores hold (estimate: {frame_cpu_ms(env_id, games):.3f} ms CPU a "
        f"frame at {games} games a process and {AGENT_STEP_CPU_MS:g} ms of the agent's a "
        "remote-step); "
        f"they start at nice {nice}"
        + (" so the agent keeps its CPU and each remote's frame rate drops instead" if nice > 0
           else ", level with the agent, which they will starve")
        + f": start at most {held}, serve lockstep (--mode lockstep), or spread them over "
        "machines (start_ray, or a pool with --ray)"
    )


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds ``pid`` has used (``/proc/PID/stat``), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is stat's field 3 (state): utime is 14, stime 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far (``/proc/stat``)."""
    try:
        with open(PROC_STAT, "rb") as f:
            return line_ticks(f.readline().split()[1:])
    except (OSError, ValueError, IndexError):
        return 0, 0


def record(env_id: str, before: Sequence[float | None], after: Sequence[float | None], seconds: float,
           games: Sequence[int], fps: float | None, machine_busy: float = 0.0) -> float | None:
    """Cache CPU per frame from remote processes (``games[i]`` games in process i) that
    used CPU seconds ``before`` -> ``after`` over ``seconds`` while the machine was busy
    ``machine_busy`` of the time, when that was long enough and they were not starved;
    the figure kept, or None."""
    if machine_busy >= MACHINE_BUSY_BELOW:
        return None
    live = [(b - a, k) for a, b, k in zip(before, after, games, strict=True)
            if a is not None and b is not None]
    cpu, alive = sum(c for c, _ in live), sum(k for _, k in live)
    starved = cpu / max(seconds, 1e-9) >= (os.cpu_count() or 1) * MEASURE_BELOW_SHARE
    if seconds < MIN_MEASURED_SECONDS or not alive or starved:
        return None
    ms = 1e3 * cpu / (seconds * alive * (fps or DEFAULT_FPS))
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _load()
        data[_key(env_id, max(games))] = round(ms, 4)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError as exc:  # a read-only home: the default stays
        log.debug("cannot cache CPU per frame in %s: %s", path, exc)
    return ms


def pinned_cpus(processes: int, lockstep: bool, pin: bool | None = None,
                allowed: Sequence[int] | None = None, busy: Sequence[int] | None = None,
                ) -> list[int | None]:
    """The CPU each of ``processes`` ``serve`` processes is pinned to (``serve --cpus``),
    or None for each: ``start_local``'s ``pin``.

    By default (``pin`` None) a lockstep vector's processes are pinned one to a core when
    they are as many as the cores this process may use (start_local's packing): unpinned,
    the kernel often wakes two on one core and the vector step waits for it
    (:mod:`envserver.cpus` has the figures). Fewer processes than cores stay unpinned:
    another agent's vector on this machine would be pinned to the same first cores. Nor
    are they pinned while another program keeps one of those cores busy
    (:mod:`remotes.busy_cpus`): the process pinned beside it would get half a core.

    Args:
        processes: ``serve`` processes to start.
        lockstep: whether they step in lockstep.
        pin: True pins them round the cores this process may use, False never.
        allowed: the CPUs this process may use (None: :func:`os.sched_getaffinity`'s).
        busy: the CPUs another program keeps busy (None: watched now, for
            :data:`~remotes.busy_cpus.BUSY_SAMPLE_SECONDS`, when the default would pin).

    Returns:
        One CPU (or None) per process.

    Raises:
        ValueError: ``pin`` is True where CPUs cannot be pinned (not Linux).
    """
    if allowed is None:
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if pin and not allowed:
        raise ValueError("pin=True needs Linux (sched_setaffinity): leave it None here")
    if pin is None:
        pin = lockstep and 2 <= processes == len(allowed)
        if pin:
            taken = busy_cpus(allowed) if busy is None else [cpu for cpu in busy if cpu in allowed]
            if taken:
                log.info("not pinning the %d lockstep processes one to a core: CPU %s %s busy "
                         "with other work (start_local(pin=True) pins them anyway)", processes,
                         ",".join(map(str, taken)), "is" if len(taken) == 1 else "are")
                pin = False
    if not pin:
        return [None] * processes
    return [allowed[i % len(allowed)] for i in range(processes)]
