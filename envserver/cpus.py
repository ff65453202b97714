"""``serve --cpus``: the CPUs a ``serve`` process (every thread of it) runs on.

Why: a lockstep vector's ``serve`` processes step their games while the agent waits, one
process per core (``start_local``'s packing). Unpinned, the kernel often wakes two of them
on one core, beside the agent that woke both (sampled on 2 cores at n = 8: 14-34 % of the
time), and the vector step then waits for one core to run both processes' games while
the other idles: runs of the same vector went from 3,400 to 5,000 env-steps/s.
Pinned one to a core they never share one (``python -m benchmarks lockstep_peers``,
benchmarks/RESULTS.md). :func:`remotes.local.start_local` pins its lockstep processes so;
an operator may pin any remote (a container's share, a cluster slot's cores).

A process pinned to a core that another program then keeps busy gets about half of it,
and the vector waits for it (0.75x its unpinned self, ``python -m benchmarks busy_core``).
``start_local`` does not pin beside a program that is busy when the vector starts
(``remotes.busy_cpus``); for one that starts later, the processes it pins by default run
with ``--unpin-when-shared``: they watch whether they wait for their core
(:class:`SharedCore`) and, once they do, run on every CPU they could before, as if never
pinned.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from typing import Final

log = logging.getLogger(__name__)

#: The largest CPU number ``--cpus`` takes (Linux's own limit, CONFIG_NR_CPUS, is 8192).
MAX_CPU: Final = 8191
#: Seconds between two looks at whether a pinned process waits for its CPUs
#: (``--unpin-when-shared``): the loop wakes once a second for it.
SHARED_LOOK_SECONDS: Final = 1.0
#: Looks in a row the CPUs must be shared at before the process lets go of them.
SHARED_LOOKS: Final = 2
#: Time waiting for a CPU per time run, over a look, that makes the CPUs shared: pinned
#: on a quiet machine 0.02-0.15, beside a busy program in another session 0.4-1.0 (the
#: kernel's autogroups give each session half the core: session fifteen's measurements).
SHARED_WAIT: Final = 0.3
#: Seconds the process must run in a look for its waiting to count: one that hardly runs
#: loses little by waiting (it lets go once it steps again).
SHARED_MIN_RUN: Final = 0.1


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
        raise ValueError(f"--cpus: this process may not run on CPU {_listed(cpus - allowed)}; "
                         f"it may on {_listed(allowed)}")
    _set_threads(cpus)


def _set_threads(cpus: frozenset[int]) -> None:
    """Every thread of this process on ``cpus`` (threads started later inherit it from the
    thread that starts them: the loop's, which is among these)."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # (no /proc: the calling thread, whose later threads inherit it)
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # (a thread that ended meanwhile)
            pass


class SharedCore:
    """Whether a pinned process waits for its CPUs, look by look (sans-I/O:
    :func:`unpin_when_shared` reads the counters and acts).

    Each look takes each thread's time run and time spent runnable but waiting for a CPU
    (``/proc/self/task/*/schedstat``) and compares them with the last look's. A process that
    ran at least :data:`SHARED_MIN_RUN` seconds and waited :data:`SHARED_WAIT` of that
    again shares its CPUs with other work that wants them at the same time. Waiting, not
    the CPUs' busy share: a program that uses the core only while this process idles (a
    benchmark's other rows in turns, a learner between vector steps) costs it nothing.
    Shared at :data:`SHARED_LOOKS` looks in a row: a second's burst (a build step, the
    agent's reset) is not a program that stays. A thread that ended since the last look
    (the reader thread ends at each reset) loses its last part: the ratio stands."""

    def __init__(self) -> None:
        #: Waiting per time run at the last look (0.0 before two looks).
        self.wait = 0.0
        #: Looks in a row at which the CPUs were shared.
        self.shared = 0
        self._last: dict[int, tuple[int, int]] = {}

    def look(self, threads: dict[int, tuple[int, int]]) -> bool:
        """Take one reading (each thread's ``(run, wait)`` nanoseconds so far, by thread
        id); whether the CPUs have been shared long enough to let go of them."""
        last, self._last = self._last, threads
        if not last:
            return False
        run = wait = 0
        for tid, (ran, waited) in threads.items():
            was = last.get(tid, (0, 0))  # (a new thread: all of it is since the last look)
            run += ran - was[0]
            wait += waited - was[1]
        self.wait = wait / run if run > 0 else 0.0
        shared = run >= SHARED_MIN_RUN * 1e9 and self.wait >= SHARED_WAIT
        self.shared = self.shared + 1 if shared else 0
        return self.shared >= SHARED_LOOKS


def thread_times() -> dict[int, tuple[int, int]]:
    """Each thread's ``(run, wait)`` nanoseconds so far (``/proc/self/task/*/schedstat``);
    empty where the kernel keeps none (no ``CONFIG_SCHED_INFO``) or this is not Linux."""
    times = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                fields = f.read().split()
            times[int(tid)] = (int(fields[0]), int(fields[1]))
        except (OSError, ValueError, IndexError):  # (a thread that ended meanwhile)
            continue
    return times


async def unpin_when_shared(pinned: frozenset[int], wider: frozenset[int]) -> None:
    """``serve --unpin-when-shared``: watch whether this process, pinned to ``pinned``,
    waits for them while other work runs there (:class:`SharedCore`), and then run every
    thread on ``wider`` (the CPUs it could use before it was pinned), for good. Returns
    then, or at once where the counters cannot be read."""
    core = SharedCore()
    while True:
        threads = thread_times()
        if not threads:
            return
        if core.look(threads):
            break
        await asyncio.sleep(SHARED_LOOK_SECONDS)
    try:
        _set_threads(wider)
    except OSError as exc:  # (a CPU gone offline since the start, a container's new limit)
        log.warning("CPU %s is shared with other work, but this process cannot run on CPUs "
                    "%s (%s): it stays pinned", _listed(pinned), _listed(wider), exc)
        return
    log.warning(
        "CPU %s is shared with other work (this process waited %.0f%% of the time it ran, "
        "%d looks %g s apart): running on CPUs %s from now on, as an unpinned process "
        "(--unpin-when-shared)",
        _listed(pinned), 100 * core.wait, SHARED_LOOKS, SHARED_LOOK_SECONDS, _listed(wider),
    )


def _listed(cpus: Iterable[int]) -> str:
    return ",".join(map(str, sorted(cpus)))
