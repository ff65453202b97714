"""What the benchmarks share: aligned tables, ratios, and CPU readings from /proc."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Final, TypeVar

CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
#: Set (to "1") by ``python -m benchmarks --quick`` (``make bench-quick``) before any
#: benchmark module is imported: each then runs one short round of what it measures.
QUICK_ENV: Final = "UNIVERSE_REMOTE_BENCH_QUICK"

_T = TypeVar("_T")


@contextmanager
def environ(settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` in this process's environment inside the block (and so in the remotes
    it starts), the old values back after it."""
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def is_quick() -> bool:
    """Whether this is a quick run: the ratios, fast, not the figures the docs quote."""
    return os.environ.get(QUICK_ENV) == "1"


def quick(full: _T, short: _T) -> _T:
    """``short`` in a quick run (:func:`is_quick`), else ``full``: how a benchmark module
    reads the quick setting for its rounds, durations and sizes (when it is imported)."""
    return short if is_quick() else full


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print an aligned table: first column left, the rest right."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [
            f"{cell:<{w}}" if i == 0 else f"{cell:>{w}}"
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  " + "  ".join(cells).rstrip())


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as ``1.23x``, or ``-`` when either is missing or ``b`` is 0."""
    return f"{a / b:.2f}x" if a is not None and b else "-"


def ms(seconds: float, digits: int = 3) -> str:
    return f"{seconds * 1e3:.{digits}f}"


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) "; [0] is the state
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def schedstat_cpu(*pids: int) -> float:
    """CPU seconds all threads of ``pids`` ran (the scheduler's nanoseconds, not 10 ms
    clock ticks); a process that is gone counts 0."""
    total = 0
    for pid in pids:
        for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            try:
                with open(path, "rb") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total / 1e9


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as a benchmark prints them before and after."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
