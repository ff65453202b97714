"""Which CPUs another program keeps busy now: where ``start_local`` must not pin remotes.

A lockstep vector's ``serve`` processes are pinned one to a core (:func:`remotes.capacity.
pinned_cpus`), which on a quiet machine is 1.02-1.12x as fast as leaving them to the
kernel. But a process pinned to a core that another program keeps busy (a learner in
another terminal, another experiment, a build: a session of its own, which the kernel's
autogroups weigh against all of ours) gets half of that core for as long as both run,
and the vector step waits for it: beside one busy loop started first, a pinned n=8 Pong
vector made 2,246 env-steps/s against 2,957 unpinned (``python -m benchmarks busy_core``,
benchmarks/RESULTS.md, session fifteen). So before it pins, ``start_local`` looks at the
cores for :data:`BUSY_SAMPLE_SECONDS`, and pins only when none of them is
:data:`BUSY_SHARE` busy. A program that starts later is not seen here: it takes half of
the pinned process's core just the same (2,025 against 2,694), so the processes
``start_local`` pins by default watch for that themselves (``serve --unpin-when-shared``,
``envserver/cpus.py``) and let go of their cores.

The counters are the kernel's per-CPU jiffies (``/proc/stat``'s ``cpuN`` lines): busy is
everything but ``idle`` and ``iowait`` (:func:`line_ticks`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

#: Seconds the cores are watched before a vector's processes are pinned: long enough for
#: 20 clock ticks a CPU, short beside starting the remotes (seconds).
BUSY_SAMPLE_SECONDS: Final = 0.2
#: Share of a CPU's time in use by then that makes it busy: a program that keeps it half
#: busy would take half of a process pinned beside it.
BUSY_SHARE: Final = 0.5
#: Where the kernel counts each CPU's time.
PROC_STAT: Final = "/proc/stat"

Ticks = dict[int, tuple[int, int]]


def line_ticks(fields: Sequence[str | bytes]) -> tuple[int, int]:
    """``(busy, total)`` jiffies of one ``/proc/stat`` CPU line's counters (the fields after
    its name): busy is all but ``idle`` and ``iowait``; only the first eight count, guest
    time being in ``user`` already. Every reader of those lines here uses it."""
    counts = [int(field) for field in fields[:8]]
    idle = counts[3] + (counts[4] if len(counts) > 4 else 0)
    return sum(counts) - idle, sum(counts)


def cpu_ticks(text: str) -> Ticks:
    """Each CPU's ``(busy, total)`` jiffies from ``/proc/stat``'s text (its ``cpuN`` lines;
    the ``cpu`` line of all CPUs is left out)."""
    ticks: Ticks = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit():
            ticks[int(name[3:])] = line_ticks(rest.split())
    return ticks


def busy_shares(before: Ticks, after: Ticks) -> dict[int, float]:
    """Each CPU's share of time in use between two readings (CPUs in both, time passed)."""
    shares = {}
    for cpu, (busy, total) in after.items():
        if cpu in before and total > before[cpu][1]:
            shares[cpu] = (busy - before[cpu][0]) / (total - before[cpu][1])
    return shares


def _read() -> Ticks:
    try:
        with open(PROC_STAT, encoding="ascii") as f:
            return cpu_ticks(f.read())
    except (OSError, ValueError):  # (not Linux, or a /proc that says otherwise: nothing seen)
        return {}


def busy_cpus(cpus: Sequence[int], seconds: float = BUSY_SAMPLE_SECONDS) -> list[int]:
    """Those of ``cpus`` at least :data:`BUSY_SHARE` busy over the next ``seconds`` (this
    process waits meanwhile: its own work is not counted); none where the counters cannot
    be read."""
    before = _read()
    if not before:
        return []
    time.sleep(seconds)  # (a measurement window, not synchronisation)
    shares = busy_shares(before, _read())
    return [cpu for cpu in cpus if shares.get(cpu, 0.0) >= BUSY_SHARE]
