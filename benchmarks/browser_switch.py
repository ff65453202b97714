"""Browser remotes starting and switching task: the first ``make``, and an env switch.

- **Chromium's own start-up**: Xvnc and Chromium (the runtime's flags, a blank page)
  started in this process until DevTools answers on its page: what no remote can beat.
- **First make**: ``gymnasium.make("universe-remote/miniwob.ClickTest-v0")`` and its
  first ``reset`` (a ``serve`` process, its imports, Xvnc, Chromium, the task page, the
  rewarder's connection), and how much longer than Chromium's own start-up it takes.
- **Env switch**: ``reset(options={"env_id": ...})`` between :data:`SWITCH_TASKS` on one
  remote, keeping the browser and loading the new page (now) against starting Xvnc and
  Chromium again (the old way, ``UNIVERSE_REMOTE_BROWSER_SWITCH=restart``); medians.

Ends with ``browser_switch: switch X s (old Y s, R x), first make M s = Chromium's start-up + D s``.
``python -m benchmarks browser_switch`` (``--quick``: fewer rounds).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from benchmarks.common import quick, ratio, table  # noqa: E402

#: Rounds of each start-up measure, and switches per way (each to the next task).
ROUNDS: Final = quick(3, 1)
SWITCHES: Final = quick(12, 4)
SWITCH_TASKS: Final = ("miniwob.ClickTest-v0", "miniwob.ClickButton-v0", "miniwob.EnterText-v0")
FIRST_ENV: Final = "miniwob.ClickTest-v0"


async def _chromium_start() -> float:
    """Seconds from starting Xvnc to Chromium's DevTools page answering."""
    import shutil

    from runtimes.browser import BLANK_PAGE, SCREEN_HEIGHT, SCREEN_WIDTH
    from runtimes.cdp import CDPClient
    from runtimes.chromium import devtools_port, spawn_chromium
    from runtimes.xdisplay import XvncDisplay

    profile = Path(tempfile.mkdtemp(prefix="universe-bench-chromium-"))
    display = XvncDisplay(SCREEN_WIDTH, SCREEN_HEIGHT, unix_socket=True)
    started = time.perf_counter()
    try:
        await display.start()
        browser = spawn_chromium(display, profile, BLANK_PAGE, SCREEN_WIDTH, SCREEN_HEIGHT)
        cdp = await CDPClient.connect(await devtools_port(profile, browser))
        await cdp.evaluate("1")
        took = time.perf_counter() - started
        await cdp.close()
        return took
    finally:
        await display.aclose()
        shutil.rmtree(profile, ignore_errors=True)


def _first_make() -> float:
    """Seconds of ``gymnasium.make`` and the first reset of a MiniWoB env."""
    import gymnasium

    import remotes  # noqa: F401 (registers the ids)

    started = time.perf_counter()
    env = gymnasium.make(f"universe-remote/{FIRST_ENV}")
    try:
        env.reset(seed=1)
        return time.perf_counter() - started
    finally:
        env.close()


def _switches(way: str) -> list[float]:
    """Seconds of each env-switching reset on one remote, ``way`` ``keep`` or ``restart``."""
    import gymnasium

    import remotes  # noqa: F401 (registers the ids)
    from runtimes.chromium import SWITCH_ENV

    before = os.environ.get(SWITCH_ENV)
    os.environ[SWITCH_ENV] = way
    try:
        env = gymnasium.make(f"universe-remote/{SWITCH_TASKS[0]}")
    finally:
        if before is None:
            os.environ.pop(SWITCH_ENV, None)
        else:
            os.environ[SWITCH_ENV] = before
    took = []
    try:
        env.reset(seed=1)
        for i in range(SWITCHES):
            task = SWITCH_TASKS[(i + 1) % len(SWITCH_TASKS)]
            started = time.perf_counter()
            _, info = env.reset(seed=i, options={"env_id": task})
            took.append(time.perf_counter() - started)
            if not info.get("text"):
                raise RuntimeError(f"the switch to {task} served no instruction: {info}")
    finally:
        env.close()
    return took


def main() -> None:
    chromium: list[float] = []
    makes: list[float] = []
    for _ in range(ROUNDS):
        chromium.append(asyncio.run(_chromium_start()))
        makes.append(_first_make())
    own, make = statistics.median(chromium), statistics.median(makes)
    table(["start-up", "median s", "runs"], [
        ["Xvnc + Chromium to its DevTools page", f"{own:.2f}", " ".join(f"{v:.2f}" for v in chromium)],
        [f"first make + reset of {FIRST_ENV}", f"{make:.2f}", " ".join(f"{v:.2f}" for v in makes)],
        ["  beyond Chromium's own start-up", f"{make - own:.2f}", ""],
    ])
    print(f"  env switches between {', '.join(SWITCH_TASKS)}: {SWITCHES} per way, one remote each")
    keep, restart = _switches("keep"), _switches("restart")
    rows = []
    for name, values in (("keep the browser (now)", keep), ("restart Xvnc + Chromium (old)", restart)):
        rows.append([name, f"{statistics.median(values):.3f}", f"{max(values):.3f}"])
    table(["switch", "median s", "max s"], rows)
    new, old = statistics.median(keep), statistics.median(restart)
    print(f"browser_switch: switch {new:.2f} s (old {old:.2f} s, {ratio(old, new)} faster), first make "
          f"{make:.2f} s = Chromium's start-up {own:.2f} s + {make - own:.2f} s")


if __name__ == "__main__":
    main()
