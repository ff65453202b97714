"""``universe-remote eval`` with the scripted agent: settled screenshots against fixed sleeps.

The scripted agent (:mod:`benchmarks.eval_agent`, the web oracle through ``page`` and
``computer``) as a Python callable through the eval harness, on MiniWoB tasks x seeds on
:data:`REMOTES` real-time remotes, three ways: each ``computer`` action answered with the
screenshot once the screen settled (the MCP port's way), and the same actions answered at
once (``settle: false``) followed by a 0.5 s sleep (BrowserGym's) or 2.0 s (Anthropic's
reference) and a ``screenshot`` call. Rows: episodes won, mean reward (MiniWoB's decays
with time), the median seconds from sending an action to holding its screenshot, and the
run's seconds; the results table and trajectories of each way are written under a
temporary folder, as ``eval --out`` writes them.

``python -m benchmarks eval_harness`` (``--quick``: fewer tasks and seeds).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from benchmarks.common import quick, ratio, table
from benchmarks.eval_agent import play
from benchmarks.mcp_agent import TASKS

#: Tasks and seeds of a run (the full run: 8 tasks x 3 seeds).
EVAL_TASKS: Final = TASKS[: quick(8, 5)]
SEEDS: Final = tuple(range(quick(3, 1)))
#: Remotes played on in parallel.
REMOTES: Final = 2
#: The fixed sleeps compared: BrowserGym's and Anthropic's reference environment's.
SLEEPS: Final = (0.5, 2.0)


def agent(sleep: float | None, seconds: list[float]) -> Callable[[Any], None]:
    """The scripted agent; ``sleep``: each action answered at once, then a sleep and a
    screenshot. ``seconds`` gets each action's send -> screenshot time."""
    lock = threading.Lock()

    def run(episode: Any) -> None:
        def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            if tool != "computer":
                return dict(episode.call(tool, arguments))
            started = time.monotonic()
            if sleep is None:
                result = dict(episode.call(tool, arguments))
            else:
                acted = episode.call(tool, {**arguments, "settle": False, "screenshot": False})
                time.sleep(sleep)  # the fixed-sleep agent's wait, what is measured
                result = dict(episode.call("computer", {"action": "screenshot"}))
                if acted.get("isError"):
                    result = dict(acted)
            with lock:
                seconds.append(time.monotonic() - started)
            return result

        play(call, episode.task, episode.seed, episode.instruction)

    return run


def main() -> None:
    from remotes import start_local
    from runtimes.registry import miniwob_env_id
    from universe_remote.evaluate import evaluate

    tasks = [miniwob_env_id(task) for task in EVAL_TASKS]
    print(f"eval_harness: the scripted agent through universe-remote eval, {len(tasks)} MiniWoB tasks x "
          f"{len(SEEDS)} seeds on {REMOTES} real-time remotes, load {os.getloadavg()[0]:.1f}")
    out = Path(tempfile.mkdtemp(prefix="eval-harness-"))
    rows = []
    settled_p50 = 0.0
    with start_local(tasks[0], REMOTES, extra_args=["--mcp-port", "0"], start_timeout=90) as group:
        urls = [f"http://127.0.0.1:{port}/mcp" for port in group.mcp_ports]
        for sleep in (None, *SLEEPS):
            seconds: list[float] = []
            started = time.monotonic()
            name = "settled" if sleep is None else f"{sleep:g} s sleep"
            episodes = evaluate(agent(sleep, seconds), tasks, SEEDS, out / name.replace(" ", "-"),
                                urls=urls, max_seconds=60)
            took = time.monotonic() - started
            p50 = statistics.median(seconds)
            settled_p50 = settled_p50 or p50
            won = sum(e["success"] for e in episodes)
            rows.append([name, f"{won}/{len(episodes)}",
                         f"{statistics.mean(float(e['reward']) for e in episodes):.2f}",
                         f"{p50 * 1000:.0f}", ratio(p50, settled_p50), f"{took:.1f}"])
    table(["action -> screenshot", "episodes won", "mean reward", "median ms", "vs settled", "run s"], rows)
    print(f"eval_harness: settled {rows[0][1]} won, {rows[0][3]} ms per action; 0.5 s sleep {rows[1][1]}, "
          f"{rows[1][3]} ms; 2.0 s sleep {rows[2][1]}, {rows[2][3]} ms (results under {out})")


if __name__ == "__main__":
    main()
