"""Where ``start_local`` does not pin a lockstep vector's processes: cores another program
keeps busy when the vector starts (remotes/busy_cpus.py)."""

from __future__ import annotations

import os

import pytest

from remotes.busy_cpus import busy_cpus, busy_shares, cpu_ticks
from remotes.local import start_local
from tests.busy_loop import busy_loop

_STAT = """cpu  300 0 100 500 100 0 0 0 0 0
cpu0 200 0 50 240 10 0 0 0 0 0
cpu1 100 0 50 260 90 0 0 0 0 0
intr 12345 0 0
ctxt 999
"""


def test_the_kernels_counters_are_read_per_cpu_and_compared_between_two_readings() -> None:
    before = cpu_ticks(_STAT)
    assert before == {0: (250, 500), 1: (150, 500)}  # (busy: all but idle and iowait)
    after = {0: (330, 600), 1: (160, 600), 2: (5, 10)}
    shares = busy_shares(before, after)
    assert shares == {0: pytest.approx(0.8), 1: pytest.approx(0.1)}  # (CPU 2: one reading)
    assert cpu_ticks("intr 1 2\nsoftirq 3\n") == {}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs (CI has them)")
def test_a_core_another_program_keeps_busy_is_seen_and_the_vector_is_left_unpinned() -> None:
    cpus = sorted(os.sched_getaffinity(0))[:2]
    with busy_loop(cpus[0]):
        assert cpus[0] in busy_cpus(cpus)
        # A lockstep vector with a process per core, as start_local packs one by default:
        # pinned on a quiet machine (tests/remotes/test_local.py), not beside the loop.
        if len(os.sched_getaffinity(0)) == 2:
            with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"],
                             games_per_process=1) as local:
                assert local.cpus == [None, None]
                assert all(frozenset(os.sched_getaffinity(p.pid)) == frozenset(cpus)
                           for p in local.processes)
            with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"],
                             games_per_process=1, pin=True) as held:
                assert held.cpus == cpus  # (the caller's pin=True: pinned anyway)

