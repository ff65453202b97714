"""Action -> settled screenshot: a settling step against the fixed sleeps agents use.

Computer-use agents sleep after every action so the screenshot they take next shows its
effect: Anthropic's reference environment 2.0 s, BrowserGym 0.5 s. A settling step
(``step_mode="settle"``, ``runtimes.settle``) returns once the screen has settled — on a
browser remote as soon as the page says it is idle, on an X program once its screen has
been still for the window its damage timing has shown it needs.

Two parts, each with the sleeps as peer rows on the same actions:

- **MiniWoB click tasks** (:data:`TASKS` x :data:`SEEDS`), played by the scripted oracle
  (``benchmarks.web_oracle``: action strings computed from the page's elements) through
  ``gymnasium.make(..., observations=("screen", "page"), actions="web")`` in real time,
  its clicks sent as X clicks at the elements' points (as a computer-use agent clicks at
  coordinates) and, in rows of their own, as its action strings.
  Settling: one step per action. A sleep: the action's step, the sleep, and a no-op step
  that reads the screen and page then (BrowserGym's way). Per row: seconds from sending an
  action until the screenshot after it is in hand (median, p90; and the median of the
  actions that did not end their episode: an action that ends one waits for the remote's
  reset of the page, whose new episode is what the screen settles on) and episodes won
  (MiniWoB's raw reward 1).
- **xcalc** (``x11.XCalc-v0``), :data:`X_CLICKS` clicks on its digit buttons (and AC now
  and then), the same sequence for every row. Success: the screenshot the agent got is
  the screen as it stays (a look :data:`LONG_LOOK` s later shows the same pixels).

Ends with ``settle_latency: web median M ms (R1 vs 0.5 s, R2 vs 2.0 s), won W %; xcalc
...``. ``python -m benchmarks settle_latency`` (``--quick``: fewer seeds and clicks).
"""

from __future__ import annotations

import os
import random
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import gymnasium  # noqa: E402
import numpy as np  # noqa: E402

import remotes  # noqa: E402, F401 (registers the ids)
from benchmarks.browser_oracle import WEB, won  # noqa: E402
from benchmarks.common import quick, ratio, table  # noqa: E402
from benchmarks.web_oracle import MAX_STEPS, act  # noqa: E402
from runtimes.registry import miniwob_env_id  # noqa: E402

#: MiniWoB tasks an agent solves by clicking, and the seeds each plays.
TASKS: Final = ("click-test", "click-button", "click-link", "click-dialog", "click-checkboxes",
                "click-collapsible", "click-tab", "click-option")
SEEDS: Final = quick(5, 2)
#: How the oracle's actions go: as X clicks at the elements' points (a computer-use
#: agent's way) and as its action strings (the remote finds the element and clicks).
KINDS: Final = {"clicks": "X clicks at the elements' points", "strings": "action strings"}
#: The fixed sleeps compared: BrowserGym's and Anthropic's reference environment's.
SLEEPS: Final = (0.5, 2.0)
#: xcalc: clicks per row, and seconds until the look that says what the screen stays as.
X_CLICKS: Final = quick(30, 8)
LONG_LOOK: Final = 1.0
#: Centres of xcalc's digit buttons (1024x768 window) and of its AC button.
X_DIGITS: Final = ((312, 557), (511, 557), (711, 557), (312, 616), (511, 616), (711, 616),
                   (312, 674), (511, 674), (711, 674), (312, 733))
X_CLEAR: Final = (910, 148)


@dataclass
class Row:
    """One way of waiting: seconds per action, successes, and why settles ended."""

    per_action: list[float] = field(default_factory=list)
    won: int = 0
    tries: int = 0
    by: Counter[str] = field(default_factory=Counter)
    settled_s: list[float] = field(default_factory=list)
    #: Seconds of the actions that did not end their episode (no reset of the page behind).
    mid_episode: list[float] = field(default_factory=list)

    def cells(self, name: str) -> list[str]:
        p90 = float(np.percentile(self.per_action, 90)) if self.per_action else 0.0
        why = ", ".join(f"{k} {v}" for k, v in self.by.most_common()) or "-"
        mid = f"{1000 * statistics.median(self.mid_episode):.0f}" if self.mid_episode else "-"
        return [name, f"{1000 * self.median:.0f}", f"{1000 * p90:.0f}", mid,
                f"{self.won}/{self.tries}", f"{100 * self.won / max(self.tries, 1):.0f} %", why]

    @property
    def median(self) -> float:
        return statistics.median(self.per_action) if self.per_action else 0.0


def note_settle(row: Row, info: dict[str, Any]) -> None:
    settle = info.get("settle")
    if isinstance(settle, dict):
        row.by[str(settle.get("by"))] += 1
        row.settled_s.append(float(settle["settled_s"]))


def as_clicks(action: str, page: dict[str, Any]) -> list[list[tuple[Any, ...]]] | None:
    """The oracle's ``click('aN')`` lines as X clicks at the elements' points (what a
    computer-use agent sends: coordinates, not element ids); None if it does more."""
    lines = [line.strip() for line in action.splitlines() if line.strip()]
    wanted = [re.fullmatch(r"click\('(a\d+)'\)", line) for line in lines]
    if not lines or not all(wanted):
        return None
    where = {e["bid"]: e.get("point") or [e["bbox"][0] + e["bbox"][2] / 2, e["bbox"][1] + e["bbox"][3] / 2]
             for e in page["elements"]}
    points = [where.get(m.group(1)) for m in wanted if m is not None]
    if any(p is None for p in points):
        return None
    return [click(int(p[0]), int(p[1])) for p in points if p is not None]


def web_row(sleep: float | None, kind: str) -> Row:
    """Every task's seeds on one local remote; ``sleep``: act, sleep, observe (else
    settle); ``kind``: the oracle's action strings, or its clicks as X clicks."""
    settings: dict[str, Any] = {"mode": "realtime"}
    if sleep is None:
        settings["step_mode"] = "settle"
    env = gymnasium.make(f"universe-remote/{miniwob_env_id(f'{TASKS[0]}.html')}", **WEB, **settings)
    row = Row()
    try:
        for task in TASKS:
            for seed in range(SEEDS):
                obs, info = env.reset(seed=seed, options={"env_id": miniwob_env_id(f"{task}.html")})
                row.tries += 1
                for _ in range(MAX_STEPS):
                    action = act(task, obs["instruction"], info["page"]) or ""
                    clicks = as_clicks(action, info["page"]) if kind == "clicks" else None
                    steps: list[Any] = list(clicks) if clicks else [action]
                    for step in steps:
                        started = time.perf_counter()
                        obs, reward, terminated, truncated, info = env.step(step)
                        if sleep is not None:
                            time.sleep(sleep)
                            if not (terminated or truncated):
                                obs, reward, terminated, truncated, info = env.step("")
                        took = time.perf_counter() - started
                        row.per_action.append(took)
                        note_settle(row, info)
                        if terminated or truncated:
                            break
                        row.mid_episode.append(took)
                    if terminated or truncated:
                        row.won += won(float(reward), info)
                        break
    finally:
        env.close()
    return row


def click(x: int, y: int) -> list[tuple[Any, ...]]:
    return [("PointerEvent", x, y, 0), ("PointerEvent", x, y, 1), ("PointerEvent", x, y, 0)]


def x_row(sleep: float | None, clicks: list[tuple[int, int]]) -> Row:
    """``clicks`` on xcalc; ``sleep``: click, sleep, look (else a settling step)."""
    settings: dict[str, Any] = {"discrete": False}
    if sleep is not None:
        settings["mode"] = "realtime"
    else:
        settings["step_mode"] = "settle"
    env = gymnasium.make("universe-remote/x11.XCalc-v0", **settings)
    row = Row()
    try:
        env.reset(seed=0)
        time.sleep(LONG_LOOK)  # (the program draws its window first)
        env.step([])
        for x, y in clicks:
            started = time.perf_counter()
            shot, _, _, _, info = env.step(click(x, y))
            if sleep is not None:
                time.sleep(sleep)
                shot, _, _, _, _ = env.step([])
            row.per_action.append(time.perf_counter() - started)
            row.mid_episode.append(row.per_action[-1])
            note_settle(row, info)
            time.sleep(LONG_LOOK)  # then how the screen stays
            later, _, _, _, _ = env.step([])
            row.tries += 1
            row.won += bool(np.array_equal(shot, later))
    finally:
        env.close()
    return row


def main() -> None:
    print(f"  MiniWoB: {len(TASKS)} click tasks x {SEEDS} seeds, the oracle's actions, one "
          "local remote per row", flush=True)
    headers = ["way", "median ms", "p90 ms", "mid-episode ms", "won", "success", "settles ended by"]
    webs: dict[str, dict[str, Row]] = {}
    for kind in KINDS:
        web = webs[kind] = {"settle": web_row(None, kind)}
        for sleep in SLEEPS:
            web[f"sleep {sleep:g} s"] = web_row(sleep, kind)
        print(f"  {KINDS[kind]}:")
        table(headers, [row.cells(name) for name, row in web.items()])
        if web["settle"].settled_s:
            print(f"  remote side (settled_s): median "
                  f"{1000 * statistics.median(web['settle'].settled_s):.0f} ms", flush=True)

    rng = random.Random(0)
    clicks = [X_CLEAR if i % 8 == 7 else rng.choice(X_DIGITS) for i in range(X_CLICKS)]
    print(f"\n  xcalc: {X_CLICKS} clicks on its buttons; success = the screenshot is the "
          f"screen {LONG_LOOK:g} s later", flush=True)
    xs = {"settle": x_row(None, clicks)}
    for sleep in SLEEPS:
        xs[f"sleep {sleep:g} s"] = x_row(sleep, clicks)
    table(headers, [row.cells(name) for name, row in xs.items()])

    def summary(rows: dict[str, Row]) -> str:
        s = rows["settle"]
        ratios = ", ".join(f"{ratio(s.median, rows[f'sleep {t:g} s'].median)} of the {t:g} s sleep"
                           for t in SLEEPS)
        wins = " / ".join(f"{100 * r.won / max(r.tries, 1):.0f}" for r in rows.values())
        return f"median {1000 * s.median:.0f} ms ({ratios}), success {wins} %"

    print(f"settle_latency: MiniWoB X clicks {summary(webs['clicks'])}; action strings "
          f"{summary(webs['strings'])}; xcalc {summary(xs)} "
          f"(settle / {' / '.join(f'{t:g} s' for t in SLEEPS)})")


if __name__ == "__main__":
    main()
