"""Another program that keeps one CPU busy: what a pinned remote must notice
(tests/remotes/test_busy_cpus.py: before the vector starts; tests/envserver/test_cpus.py:
after); and where a remote's threads may run (:func:`affinities`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from remotes.capacity import cpu_seconds

#: Seconds a busy loop gets to show it burns its CPU (it starts a Python first).
BURN_TIMEOUT: Final = 30.0
#: CPU seconds that show it does.
BURNED: Final = 0.3


@contextmanager
def busy_loop(cpu: int) -> Iterator[int]:
    """A program that keeps ``cpu`` busy (pinned there), burning before this yields its
    pid (in this session: Ctrl-C ends it too)."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    loop = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + BURN_TIMEOUT
        while (cpu_seconds(loop.pid) or 0.0) < BURNED:
            assert time.monotonic() < deadline, "the busy loop never ran"
            time.sleep(0.05)  # (polling its CPU with a deadline, not synchronisation)
        yield loop.pid
    finally:
        loop.kill()
        loop.wait()


def affinities(pid: int) -> set[frozenset[int]]:
    """The CPUs each thread of ``pid`` may run on (one set when all agree)."""
    return {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")}
