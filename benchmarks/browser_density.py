"""MiniWoB remotes at density: memory and CPU per remote, and how many one machine runs.

- **Chromium's flags**: one MiniWoB runtime in this process (Xvnc and Chromium on it,
  a lockstep episode of click-checkboxes stepped, then a second of real time), with
  :data:`~runtimes.chromium.CHROMIUM_FLAGS` (now) and without :data:`~runtimes.chromium.LEAN_FLAGS`
  (before), rounds alternated: processes, PSS summed over Xvnc and Chromium's processes
  (``/proc/PID/smaps_rollup``: shared pages split between their users, so the sum is what
  the remote costs the machine), CPU of a second standing still in real time.
- **A vector of remotes**: ``gymnasium.make_vec("universe-remote/miniwob.ClickTest-v0",
  num_envs=n)`` in real time for n in :data:`COUNTS`; a pixel agent (finds the button's
  pixels in each frame and clicks their centre, no-ops until it sees one) plays
  :data:`SECONDS` seconds; episodes won (MiniWoB's raw reward > 0) / ended, steps/s per
  env, PSS of everything the env started (``serve`` processes, Xvnc, Chromium) per
  remote, CPU per remote (share of one core).

Ends with ``browser_density: P MB and C % of a core per remote; N remotes at S % success``.
``python -m benchmarks browser_density`` (``--quick``: fewer counts and seconds).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterable
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.common import CLK_TCK, quick, ratio, table  # noqa: E402

#: Vector sizes tried, and seconds each plays.
COUNTS: Final = quick((1, 4, 8, 16), (1, 4))
SECONDS: Final = quick(40.0, 15.0)
#: Rounds of the flags comparison (alternated), and real-time seconds of its CPU reading.
FLAG_ROUNDS: Final = quick(3, 1)
IDLE_SECONDS: Final = 2.0
#: Success a vector must hold to count as running (the issue's bar).
MIN_SUCCESS: Final = 0.95
ENV_ID: Final = "miniwob.ClickTest-v0"
#: MiniWoB's click grid (remotes.registration): 10 px cells over the 160x210 task area,
#: 16 a row; action 0 is no click.
CELL: Final = 10
ROW: Final = 16
#: Rows above this are MiniWoB's instruction bar; the button is below it.
TASK_TOP: Final = 50


# /proc ------------------------------------------------------------------------------------

def descendants(root: int) -> list[int]:
    """Every process below ``root`` (not ``root`` itself)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def pss_mb(pids: Iterable[int]) -> float:
    """Proportional set size summed over ``pids``, MB (gone processes count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
        except OSError:
            pass
    return total / 1024


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of ``pids`` (gone processes count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def kinds(pids: Iterable[int]) -> str:
    """``Xvnc 1, browser 1, renderer 2, ...``: what the processes are."""
    counts: dict[str, int] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        kind = re.search(r"--type=(\S+)", line)
        sub = re.search(r"--utility-sub-type=(\S+)", line)
        name = (sub.group(1).split(".")[0] if sub else kind.group(1)) if kind else (
            "Xvnc" if "Xvnc" in line else "browser" if "chrom" in line else line.split(" ")[0][-12:])
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


# Chromium's flags -------------------------------------------------------------------------

async def _one_runtime(lean: bool) -> tuple[int, float, float, str]:
    """Processes, PSS MB, CPU share standing still, kinds: one runtime started with the
    lean flags or without them."""
    import runtimes.chromium as chromium
    from runtimes import registry
    from runtimes.base import PointerEvent

    flags = chromium.CHROMIUM_FLAGS
    if not lean:
        chromium.CHROMIUM_FLAGS = chromium.before_lean(flags)
    runtime = registry.lookup("miniwob.ClickCheckboxes-v0")()
    try:
        await runtime.astart()
    finally:
        chromium.CHROMIUM_FLAGS = flags
    try:
        runtime.mode = "lockstep"
        await runtime.areset(1)
        for i in range(20):
            x, y = 5 + (i * 37) % 150, 55 + (i * 11) % 150
            await runtime.aadvance([PointerEvent(x, y, 1), PointerEvent(x, y, 0)], 1)
        runtime.mode = "realtime"
        await runtime.areset(2)
        pids = descendants(os.getpid())
        before = cpu_seconds(pids)
        await asyncio.sleep(IDLE_SECONDS)
        cpu = (cpu_seconds(pids) - before) / IDLE_SECONDS
        return len(pids), pss_mb(pids), cpu, kinds(pids)
    finally:
        await runtime.aclose()


# A vector ---------------------------------------------------------------------------------

def button_action(frame: np.ndarray) -> int:
    """The click-grid action at the centre of the non-white pixels below the instruction
    bar (ClickTest's button), 0 when there are too few (the page is between episodes)."""
    area = frame[TASK_TOP:]
    ys, xs = np.nonzero((area < 250).any(axis=2))
    if ys.size < 100:
        return 0
    x, y = int(xs.mean()), int(ys.mean()) + TASK_TOP
    return 1 + (y // CELL) * ROW + (x // CELL)


def _vector(n: int) -> dict[str, Any]:
    """One vector of ``n`` remotes playing for SECONDS: figures."""
    import gymnasium

    import remotes  # noqa: F401 (registers the ids)

    started = time.perf_counter()
    envs = gymnasium.make_vec(f"universe-remote/{ENV_ID}", num_envs=n)
    made = time.perf_counter() - started
    try:
        obs, _ = envs.reset(seed=1)
        pids = descendants(os.getpid())
        cpu0, t0 = cpu_seconds(pids), time.perf_counter()
        won = ended = steps = 0
        while time.perf_counter() - t0 < SECONDS:
            actions = np.array([button_action(frame) for frame in obs])
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            steps += 1
            raw = infos.get("wob.raw_reward")
            for i in np.nonzero(terminated | truncated)[0]:
                ended += 1
                has_raw = raw is not None and infos.get("_wob.raw_reward", [False] * n)[i]
                value = raw[i] if has_raw else rewards[i]
                won += int(value > 0)
        wall = time.perf_counter() - t0
        pids = descendants(os.getpid())
        cpu = (cpu_seconds(pids) - cpu0) / wall
        return {"n": n, "made": made, "won": won, "ended": ended, "rate": steps / wall,
                "pss": pss_mb(pids) / n, "cpu": cpu / n, "processes": len(pids)}
    finally:
        envs.close()


def main() -> None:
    from runtimes.chromium import LEAN_FLAGS

    print(f"  one runtime, {FLAG_ROUNDS} round(s) alternated; lean flags: {' '.join(LEAN_FLAGS)}")
    figures: dict[bool, list[tuple[int, float, float, str]]] = {True: [], False: []}
    for r in range(FLAG_ROUNDS):
        for lean in ((False, True) if r % 2 == 0 else (True, False)):
            figures[lean].append(asyncio.run(_one_runtime(lean)))
    rows = []
    for lean, name in ((False, "before"), (True, "lean (now)")):
        values = figures[lean]
        rows.append([name, str(values[0][0]), f"{np.median([v[1] for v in values]):.0f}",
                     f"{100 * np.median([v[2] for v in values]):.1f}", values[0][3]])
    table(["flags", "processes", "PSS MB", "CPU % still", "what"], rows)
    before = float(np.median([v[1] for v in figures[False]]))
    after = float(np.median([v[1] for v in figures[True]]))
    print(f"  PSS lean / before: {ratio(after, before)}")

    print(f"  vectors of {ENV_ID} in real time, a pixel agent, {SECONDS:g} s each")
    rows, best = [], None
    results = []
    for n in COUNTS:
        try:
            result = _vector(n)
        except (TimeoutError, OSError, RuntimeError) as exc:  # the machine could not start n
            rows.append([str(n), "-", f"did not start: {exc}"[:60], "-", "-", "-", "-", "-"])
            print(f"    n={n}: did not start ({exc})", flush=True)
            break
        results.append(result)
        share = result["won"] / result["ended"] if result["ended"] else 0.0
        if share >= MIN_SUCCESS:
            best = result
        rows.append([str(n), f"{result['made']:.1f}", f"{result['won']}/{result['ended']}",
                     f"{100 * share:.0f}", f"{result['rate']:.1f}", f"{result['pss']:.0f}",
                     f"{100 * result['cpu']:.1f}", str(result["processes"])])
        print(f"    n={n}: {rows[-1][2]} won, {rows[-1][4]} steps/s", flush=True)
    table(["n", "make s", "won", "%", "steps/s per env", "PSS MB per remote", "CPU % per remote",
           "processes"], rows)
    if not results:
        print("browser_density: no vector started")
        return
    per = results[-1]
    print(f"browser_density: {per['pss']:.0f} MB and {100 * per['cpu']:.0f} % of a core per remote "
          f"(n={per['n']}); {best['n'] if best else 0} remotes at >= {100 * MIN_SUCCESS:.0f} % success")


if __name__ == "__main__":
    main()
