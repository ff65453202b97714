"""Browser snapshots in lockstep: a restore's cost by episode length, beside a reset.

One MiniWoB runtime (``miniwob.ClickCheckboxes-v0``: Xvnc, kiosk Chromium, the page
clock) in lockstep. For each episode length in :data:`LENGTHS` (steps of one frame, each
a click on the page's margin, which ends nothing, and every fourth some typing), an
episode of seed 1 is played to that length and snapshotted; then, :data:`ROUNDS` times,
interleaved:

- **restore**: ``arestore`` of that snapshot — a reset to its seed, the steps replayed
  without drawing, the last frame drawn (what a restore costs an agent on top of its
  request's round trip);
- **reset**: ``areset(1)``, a fresh episode drawn (the peer: what starting over costs);
- **digest**: ``astate_digest`` (a restore checked against its snapshot costs this too).

Medians and 90th percentiles in ms, the snapshot's bytes, what each replayed step adds
(beyond the restore of no steps: a reset and a frame), and the restore/reset ratio;
the issue's target for a MiniWoB restore is 300 ms. ``python -m benchmarks
browser_snapshots``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any, Final

from benchmarks.common import quick, table
from runtimes.base import InputEvent, KeyEvent, PointerEvent

TASK: Final = "miniwob.ClickCheckboxes-v0"
#: Steps since the reset at the snapshot (a MiniWoB episode is at most 600 frames).
LENGTHS: Final = quick((0, 10, 50, 150, 400), (0, 50))
#: Measurements of each way per length.
ROUNDS: Final = quick(9, 4)
#: The target of issue 37 for a MiniWoB restore, ms.
TARGET_MS: Final = 300.0


def step(i: int) -> list[InputEvent]:
    """A click on the left margin (nothing there), every fourth step a typed letter."""
    y = 60 + (i * 7) % 140
    events: list[InputEvent] = [PointerEvent(1, y, 0), PointerEvent(1, y, 1), PointerEvent(1, y, 0)]
    if i % 4 == 3:
        events += [KeyEvent("x", True), KeyEvent("x", False)]
    return events


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run() -> None:
    from runtimes.browser import RUNTIMES

    runtime: Any = RUNTIMES[TASK]()
    await runtime.astart()
    try:
        runtime.mode = "lockstep"
        rows = []
        base: float | None = None  # the restore of no steps: a reset and a frame
        for length in LENGTHS:
            await runtime.areset(1)
            for i in range(length):
                result = await runtime.aadvance(step(i), 1)
                assert not result.done, f"the episode ended at step {i}"
            state = runtime.snapshot()
            digest = await runtime.astate_digest()
            times: dict[str, list[float]] = {"restore": [], "reset": [], "digest": []}
            for _ in range(ROUNDS):
                t0 = time.perf_counter()
                await runtime.areset(1)
                t1 = time.perf_counter()
                await runtime.arestore(state)
                t2 = time.perf_counter()
                got = await runtime.astate_digest()
                t3 = time.perf_counter()
                assert got == digest, "a restore did not give the snapshot's state"
                times["reset"].append(t1 - t0)
                times["restore"].append(t2 - t1)
                times["digest"].append(t3 - t2)
            restore, reset = (statistics.median(times[k]) * 1000 for k in ("restore", "reset"))
            base = restore if base is None else base
            per_step = f"{(restore - base) / length:.1f}" if length else "-"
            rows.append([
                str(length), str(len(state)),
                f"{restore:.1f}", f"{percentile(times['restore'], 0.9) * 1000:.1f}",
                per_step, f"{reset:.1f}", f"{statistics.median(times['digest']) * 1000:.1f}",
                f"{restore / reset:.2f}x", "yes" if restore <= TARGET_MS else "NO",
            ])
        print(f"{TASK} in lockstep, {ROUNDS} rounds per length (ms; medians, p90 of restore)")
        table(
            ["steps", "bytes", "restore", "p90", "per step", "reset", "digest", "restore/reset",
             f"<= {TARGET_MS:.0f} ms"],
            rows,
        )
    finally:
        await runtime.aclose()


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
