"""The doorbell benchmark (benchmarks/doorbell.py, issue 40) times both ways of waking a
peer in every placement, says what a doorbell would save, and leaves no peer behind."""

from __future__ import annotations

import os
import re
from typing import Final

from tests.quick_bench import quick_round

#: Seconds its quick round may take (measured: 2 s on the 2-core VM).
TIMEOUT: Final = 120
#: A row of its table: the placement, then the socket's and the doorbell's wall, ratio,
#: CPU and ratio.
_NUMBER: Final = r" +([\d.]+)"
ROW: Final = re.compile(rf"^  (free|cross-CPU|same CPU){_NUMBER * 2} +[\d.]+{_NUMBER * 2} +[\d.]+$",
                        re.MULTILINE)


def test_the_quick_round_times_socket_and_eventfd_in_each_placement_and_ends_its_peers() -> None:
    stdout = quick_round("doorbell", TIMEOUT)
    rows = ROW.findall(stdout)
    two = len(os.sched_getaffinity(0)) >= 2  # (cross-CPU needs two)
    assert [row[0] for row in rows] == ["free", *(["cross-CPU"] if two else []), "same CPU"], stdout
    assert all(float(value) > 0 for row in rows for value in row[1:])
    assert len(re.findall(r"a doorbell saves -?[\d.]+ us of CPU a round trip", stdout)) == 3
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _is_peer(pid)]


def _is_peer(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"benchmarks.doorbell\0--peer" in f.read()
    except OSError:  # (gone meanwhile)
        return False
