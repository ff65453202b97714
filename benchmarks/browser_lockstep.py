"""Lockstep browser steps: where a step's time goes, the display's frames vs screenshots.

A lockstep MiniWoB step sends its input through DevTools, advances the page clock, takes
the frame and reads the reward globals. The frame was Chromium's screenshot, taken
again until two agreed, and each input command waited for its reply before the next
(the old way: ``UNIVERSE_REMOTE_LOCKSTEP_CAPTURE=screenshot``,
``UNIVERSE_REMOTE_CDP_INPUT=sequential``); now the frame is the first the X display
shows after the step (:mod:`runtimes.frame_witness`) and input goes in runs
(:class:`runtimes.cdp_input.CDPInput`). Both ways run in one process, rounds alternated:

- **Parts of a step** (the runtime in this process, no remote): medians of input,
  advance, frame and state read, and steps/s, on :data:`TASKS` with clicks sweeping the
  task (each step of one frame).
- **Same frames**: each display frame compared with a screenshot of the same moment
  (equal pixels, or the step is counted as a disagreement).
- **Through gymnasium** (a local remote process, shared-memory frames): steps/s of
  ``gymnasium.make(..., mode="lockstep")``, each way in its own remote.

Ends with ``browser_lockstep: display N steps/s vs screenshots M (R x), frames equal E/T``.
``python -m benchmarks browser_lockstep`` (``--quick``: fewer steps and tasks).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.browser_remotes import env_steps_per_s  # noqa: E402
from benchmarks.common import environ, quick, ratio, table  # noqa: E402
from runtimes.cdp_input import INPUT_ENV  # noqa: E402
from runtimes.frame_witness import CAPTURE_ENV, CAPTURES  # noqa: E402

#: Tasks stepped: a still page, a page whose clicks end episodes, typing, ticks.
TASKS: Final = quick(
    ("miniwob.ClickTest-v0", "miniwob.ClickButton-v0", "miniwob.EnterText-v0",
     "miniwob.ClickCheckboxes-v0"),
    ("miniwob.ClickButton-v0", "miniwob.ClickCheckboxes-v0"),
)
#: Steps per task, way and round; rounds alternate the ways.
STEPS: Final = quick(120, 30)
ROUNDS: Final = quick(2, 1)
#: Steps of the gymnasium run per way and round.
ENV_STEPS: Final = quick(150, 40)


@contextmanager
def capture(way: str) -> Iterator[None]:
    """Lockstep steps taken ``way`` inside the block, in this process and in remotes it
    starts: ``display`` (now) or ``screenshot`` (the old way: screenshots until two agree,
    and a DevTools round trip per input command)."""
    settings = {CAPTURE_ENV: way, INPUT_ENV: "sequential" if way == "screenshot" else "runs"}
    with environ(settings):
        yield


def _click(i: int) -> tuple[int, int]:
    """Step ``i``'s click: a sweep over the task area below the instruction."""
    return 5 + (i * 37) % 150, 55 + (i * 11) % 150


async def _parts(env_id: str, ways: tuple[str, ...], steps: int,
                 compare: bool) -> dict[str, tuple[list[tuple[float, ...]], float, int, int]]:
    """Each way's step parts (input, advance, frame, state), steps/s, and (``compare``)
    display frames equal to a screenshot / compared, on one runtime."""
    from runtimes import registry
    from runtimes.base import PointerEvent
    from runtimes.chromium import STATE_EXPRESSION
    from runtimes.page_clock import FRAME_MS

    runtime = registry.lookup(env_id)()
    await runtime.astart()
    out = {}
    try:
        runtime.mode = "lockstep"
        for way in ways:
            with capture(way):
                await runtime.areset(1)
                assert runtime.cdp is not None and runtime.clock is not None
                assert runtime.page_input is not None
                parts: list[tuple[float, ...]] = []
                equal = compared = 0
                started = time.perf_counter()
                for i in range(steps):
                    x, y = _click(i)
                    t0 = time.perf_counter()
                    await runtime.page_input.send([PointerEvent(x, y, 1), PointerEvent(x, y, 0)])
                    t1 = time.perf_counter()
                    await runtime.clock.advance(FRAME_MS)
                    t2 = time.perf_counter()
                    await runtime.take_screenshot()
                    t3 = time.perf_counter()
                    done = (await runtime.cdp.evaluate(STATE_EXPRESSION))[0]
                    t4 = time.perf_counter()
                    parts.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3))
                    if compare:
                        shot = await runtime.clock.screenshot((0, 0, runtime.width, runtime.height))
                        equal += int(np.array_equal(shot, runtime.framebuffer))
                        compared += 1
                    if done:
                        await runtime.areset(i)
                rate = steps / (time.perf_counter() - started)
                out[way] = (parts, rate, equal, compared)
    finally:
        await runtime.aclose()
    return out


def _env_rate(env_id: str, way: str, steps: int) -> float:
    """Lockstep steps/s of a gymnasium env over a local remote taking frames ``way``."""
    with capture(way):  # read by the remote the env starts
        return env_steps_per_s(env_id, steps)


def _ms(values: list[float]) -> str:
    return f"{1e3 * statistics.median(values):.1f}"


def main() -> None:
    display, screenshot = CAPTURES
    print(f"  the runtime in this process: {STEPS} click steps of one frame per task and way, "
          f"{ROUNDS} round(s), ways alternated; medians in ms")
    gathered: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    rates: dict[tuple[str, str], list[float]] = {}
    equal = compared = 0
    for r in range(ROUNDS):
        for env_id in TASKS:
            order = (display, screenshot) if r % 2 == 0 else (screenshot, display)
            results = asyncio.run(_parts(env_id, order, STEPS, compare=False))
            for way, (parts, rate, _, _) in results.items():
                gathered.setdefault((env_id, way), []).extend(parts)
                rates.setdefault((env_id, way), []).append(rate)
    rows = []
    for env_id in TASKS:
        for way in (screenshot, display):
            parts = gathered[(env_id, way)]
            rows.append([env_id if way == screenshot else "", way,
                         *(_ms([p[k] for p in parts]) for k in range(4)),
                         f"{statistics.median(rates[(env_id, way)]):.1f}",
                         ratio(statistics.median(rates[(env_id, way)]),
                               statistics.median(rates[(env_id, screenshot)]))])
    table(["task", "frame from", "input", "advance", "frame", "state", "steps/s", "vs old"], rows)

    print("  same frames: every display frame against a screenshot taken right after it")
    for env_id in TASKS:
        result = asyncio.run(_parts(env_id, (display,), STEPS, compare=True))[display]
        equal += result[2]
        compared += result[3]
        print(f"    {env_id:28} {result[2]}/{result[3]} equal", flush=True)

    print(f"  through gymnasium (a local remote, shared-memory frames): {ENV_STEPS} steps per "
          "task and way, ways alternated")
    env_rates: dict[tuple[str, str], list[float]] = {}
    for r in range(ROUNDS):
        for env_id in TASKS:
            for way in ((display, screenshot) if r % 2 == 0 else (screenshot, display)):
                env_rates.setdefault((env_id, way), []).append(_env_rate(env_id, way, ENV_STEPS))
    rows = []
    for env_id in TASKS:
        old = statistics.median(env_rates[(env_id, screenshot)])
        new = statistics.median(env_rates[(env_id, display)])
        rows.append([env_id, f"{old:.1f}", f"{new:.1f}", ratio(new, old)])
    table(["task", "screenshots steps/s", "display steps/s", "display/old"], rows)
    old_all = statistics.median(v for (_, w), vs in env_rates.items() if w == screenshot for v in vs)
    new_all = statistics.median(v for (_, w), vs in env_rates.items() if w == display for v in vs)
    print(f"browser_lockstep: display {new_all:.1f} steps/s vs screenshots {old_all:.1f} "
          f"({ratio(new_all, old_all)}), frames equal {equal}/{compared}")


if __name__ == "__main__":
    main()
