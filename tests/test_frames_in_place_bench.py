"""The frames-in-place benchmark (benchmarks/frames_in_place.py, issue 40) times both ways
in one vector and finds most steady steps' frames written in place."""

from __future__ import annotations

import re
from typing import Final

from tests.quick_bench import quick_round

#: Seconds its quick round may take (a vector of 4 Pong remotes started, 2 rounds).
TIMEOUT: Final = 240
ROW: Final = re.compile(r"^  n=4 \(\d+ processes\) +([\d,]+) +([\d,]+) +(\d+) +(\d+) +(\d+)% +([\d.]+)x$",
                        re.MULTILINE)


def test_the_quick_round_times_both_ways_and_writes_most_frames_in_place() -> None:
    stdout = quick_round("frames_in_place", TIMEOUT)
    rows = ROW.findall(stdout)
    assert len(rows) == 1, stdout
    fast, slow, fast_cpu, slow_cpu, share, ratio = rows[0]
    assert all(float(v.replace(",", "")) > 0 for v in (fast, slow, fast_cpu, slow_cpu, ratio)), stdout
    assert int(share) > 80, stdout
