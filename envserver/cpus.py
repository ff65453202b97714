"""``serve --cpus``: the CPUs a ``serve`` process (every thread of it) runs on.

Why: a lockstep vector's ``serve`` processes step their games while the agent waits, one
process per core (``start_local``'s packing). Unpinned, the kernel often wakes two of them
on one core, beside the agent that woke both (sampled on 2 cores at n = 8: 14-34 % of the
time), and the vector step then waits for one core to run both processes' games while
the other idles: runs of the same vector went from 3,400 to 5,000 env-steps/s.
Pinned one to a core they never share one (``python -m benchmarks lockstep_peers``,
benchmarks/RESULTS.md). :func:`remotes.local.start_local` pins its lockstep processes so;
an operator may pin any remote (a container's share, a cluster slot's cores).
"""

from __future__ import annotations

import os
from typing import Final

#: The largest CPU number ``--cpus`` takes (Linux's own limit, CONFIG_NR_CPUS, is 8192).
MAX_CPU: Final = 8191


def parse_cpus(text: str) -> frozenset[int]:
    """``"0-3,6"`` -> {0, 1, 2, 3, 6}: ``taskset -c``'s list form.

    Args:
        text: comma-separated CPU numbers and inclusive ranges.

    Returns:
        The CPUs named.

    Raises:
        ValueError: the list is empty, malformed or past :data:`MAX_CPU` (the message
            says which part and the form wanted).
    """
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise ValueError(
                f"{part.strip()!r} is not a CPU number or range: give a list like 0-3,6"
            ) from None
        if not 0 <= low <= high <= MAX_CPU:
            raise ValueError(f"{part.strip()!r}: CPUs are 0..{MAX_CPU}, a range's first one first")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def pin(cpus: frozenset[int]) -> None:
    """Run this process, each of its threads, and every thread it starts later, on ``cpus``.

    Args:
        cpus: CPUs this process may run on now (:func:`os.sched_getaffinity`).

    Raises:
        ValueError: this is not Linux, or ``cpus`` holds CPUs this process may not use
            (a container's or cgroup's limit): the message lists the ones it may.
    """
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("--cpus needs Linux (sched_setaffinity); leave it out here")
    allowed = os.sched_getaffinity(0)
    if not cpus <= allowed:
        outside = ",".join(map(str, sorted(cpus - allowed)))
        may = ",".join(map(str, sorted(allowed)))
        raise ValueError(f"--cpus: this process may not run on CPU {outside}; it may on {may}")
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # (no /proc: the calling thread, whose later threads inherit it)
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # (a thread that ended meanwhile)
            pass
