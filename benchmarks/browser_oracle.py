"""The scripted web oracle through gymnasium on every MiniWoB task it knows; settling vs a fixed sleep.

The oracle (:mod:`benchmarks.web_oracle`: a solver per task) reads only what the env
returns — the instruction and the page's elements (``info["page"]``) — and acts only
through BrowserGym action strings, through ``gymnasium.make("universe-remote/
miniwob.X-v0", observations=("screen", "page"), actions="web", ...)`` over a local
remote: in real time with ``step_mode="settle"`` (a step returns once the screen has been
still for the remote's quiet time) and in lockstep. Each task plays :data:`SEEDS`
seeds (episodes of seed 0, 1, ...); an episode is won when it ends with MiniWoB's raw
reward 1 within the oracle's ``MAX_STEPS``. Per task: episodes won and steps/s (the
steps' own time; resets not counted). One remote per mode, switched from task to task by
``reset(options={"env_id": ...})``.

Then settling against BrowserGym's fixed wait (it sleeps 0.5 s after every action):
on :data:`SLEEP_TASKS`, real time, an action followed by ``time.sleep(0.5)`` and a no-op
step to read the page then, against one settling step; seconds from sending an action
until the next observation is in hand, and episodes won.

Lockstep runs twice: frames from the display and input in runs (now), and Chromium's
screenshots until two agree with a round trip per input command (the old way, the peer
row), and the ratio of their steps/s.

Ends with ``browser_oracle: T tasks, R % success in real time, L % in lockstep (...),
lockstep Nx the old way's steps/s``.
The copy-paste tasks (``copy-paste``, ``copy-paste-2``) have their solvers here: they read
the textarea's observed ``value`` (exact, whitespace kept: docs/browser.md) and fill the
answer box with it — the task compares the two strings exactly.

``python -m benchmarks browser_oracle``; fewer seeds with ``--quick`` or
``BROWSER_ORACLE_SEEDS=n``, fewer tasks with ``BROWSER_ORACLE_TASKS=click-test,enter-text``.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import gymnasium  # noqa: E402

import remotes  # noqa: E402, F401 (registers the ids)
from benchmarks.common import environ, quick, ratio, table  # noqa: E402
from benchmarks.web_oracle import MAX_STEPS, SOLVERS, Observation, Solver, click, elements, submit  # noqa: E402
from runtimes.cdp_input import INPUT_ENV  # noqa: E402
from runtimes.frame_witness import CAPTURE_ENV  # noqa: E402
from runtimes.registry import miniwob_env_id  # noqa: E402

#: "1st", "2nd", "3rd" in copy-paste-2's instruction: which textarea, in document order.
_ORDINAL: Final = re.compile(r"(\d)(?:st|nd|rd|th)")


def _copy_paste(instruction: str, obs: Observation) -> str | None:
    """copy-paste ("Copy the text in the textarea below, paste it into the textbox ..."),
    copy-paste-2 ("Copy the text from the 2nd text area below ..."): the textarea's
    exact value, filled into the text input, then Submit."""
    areas = elements(obs, tag="textarea")
    boxes = [e for e in elements(obs, tag="input") if e.get("role") == "textbox"]
    ordinal = _ORDINAL.search(instruction)
    index = int(ordinal.group(1)) - 1 if ordinal else 0
    button = submit(obs)
    if index >= len(areas) or not boxes or button is None or not areas[index].get("value"):
        return None  # the page is not drawn yet
    return f"fill({boxes[0]['bid']!r}, {areas[index]['value']!r})\n{click(button)}"


#: Every solver the benchmark plays: the web oracle's and the copy-paste ones.
ORACLE_SOLVERS: Final[dict[str, Solver]] = {**SOLVERS, "copy-paste": _copy_paste, "copy-paste-2": _copy_paste}


def act(task: str, instruction: str, observation: Observation) -> str | None:
    """The next action string for ``task`` (None: nothing to do yet)."""
    return ORACLE_SOLVERS[task](instruction, observation)


#: Environment variables that narrow a run: seeds per task, and a comma list of tasks.
SEEDS_ENV: Final = "BROWSER_ORACLE_SEEDS"
TASKS_ENV: Final = "BROWSER_ORACLE_TASKS"
#: Episodes per task and mode (seeds 0..SEEDS-1).
SEEDS: Final = int(os.environ.get(SEEDS_ENV) or quick(10, 2))
#: The tasks played: every one the oracle has a solver for.
TASKS: Final = tuple(t for t in (os.environ.get(TASKS_ENV) or ",".join(ORACLE_SOLVERS)).split(",") if t)
#: Tasks of the settle-against-sleep comparison (ones whose pages animate or change in
#: steps: a collapsing section, a dialog, several boxes, typing), and their seeds.
SLEEP_TASKS: Final = ("click-collapsible", "click-dialog", "click-checkboxes", "enter-text", "login-user")
SLEEP_SEEDS: Final = quick(5, 2)
#: BrowserGym's wait after every action (seconds).
FIXED_SLEEP: Final = 0.5
#: What the env gives the oracle.
WEB: Final[dict[str, Any]] = {"observations": ("screen", "page"), "actions": "web"}
#: The two ways played: name -> env settings.
MODES: Final[dict[str, dict[str, Any]]] = {
    "real time": {"mode": "realtime", "step_mode": "settle"},
    "lockstep": {"mode": "lockstep"},
}
#: The peer of lockstep: the old way of taking its frames (Chromium's screenshots until
#: two agree, ``runtimes.frame_witness.CAPTURE_ENV``) and sending input (a DevTools round
#: trip per command, ``runtimes.cdp_input.INPUT_ENV``), in the same run.
OLD_LOCKSTEP: Final = "lockstep, screenshots (old)"
OLD_CAPTURE: Final = "screenshot"


@dataclass
class Tally:
    """One task's episodes in one way."""

    won: int = 0
    episodes: int = 0
    steps: int = 0
    #: Seconds spent in step() (and, for the fixed sleep, sleeping), and per action.
    seconds: float = 0.0
    per_action: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0


def won(reward: float, info: dict[str, Any]) -> bool:
    """MiniWoB's raw reward 1 (the env's reward is discounted by time in real time)."""
    raw = info.get("wob.raw_reward")
    return (raw if isinstance(raw, int | float) else reward) > 0


def play(env: gymnasium.Env[Any, Any], task: str, seed: int, tally: Tally,
         sleep: float | None = None) -> None:
    """One episode of ``task``; ``sleep``: act, sleep that long, then observe with a
    no-op step (BrowserGym's way), instead of one step."""
    obs, info = env.reset(seed=seed, options={"env_id": miniwob_env_id(f"{task}.html")})
    tally.episodes += 1
    for _ in range(MAX_STEPS):
        action = act(task, obs["instruction"], info["page"]) or ""  # "": nothing to do yet
        started = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(action)
        steps = 1
        if sleep is not None:  # BrowserGym sleeps after every action, the last one too
            time.sleep(sleep)
            if not (terminated or truncated):
                obs, reward, terminated, truncated, info = env.step("")
                steps += 1
        took = time.perf_counter() - started
        tally.steps += steps
        tally.seconds += took
        tally.per_action.append(took)
        if info.get("last_action_error"):
            tally.errors.append(f"{task} seed {seed}: {info['last_action_error']}")
        if terminated or truncated:
            tally.won += won(float(reward), info)
            return


def run(settings: dict[str, Any], tasks: Sequence[str], seeds: int,
        sleep: float | None = None, report: Callable[[str, Tally], None] | None = None) -> dict[str, Tally]:
    """Every task's ``seeds`` episodes on one local remote made with ``settings``
    (``capture``: how its lockstep frames are taken, ``runtimes.frame_witness``)."""
    settings = dict(settings)
    capture = settings.pop("capture", None)
    old_way = {CAPTURE_ENV: capture, INPUT_ENV: "sequential"} if capture is not None else {}
    with environ(old_way):  # read by the remote process it starts
        env = gymnasium.make(f"universe-remote/{miniwob_env_id(f'{tasks[0]}.html')}", **WEB, **settings)
    tallies: dict[str, Tally] = {}
    try:
        for task in tasks:
            tally = tallies[task] = Tally()
            for seed in range(seeds):
                play(env, task, seed, tally, sleep)
            if report is not None:
                report(task, tally)
    finally:
        env.close()
    return tallies


def _rate(tallies: dict[str, Tally]) -> float:
    """Steps per second over all of ``tallies``' steps."""
    seconds = sum(t.seconds for t in tallies.values())
    return sum(t.steps for t in tallies.values()) / seconds if seconds else 0.0


def _percent(tallies: dict[str, Tally]) -> float:
    episodes = sum(t.episodes for t in tallies.values())
    return 100.0 * sum(t.won for t in tallies.values()) / episodes if episodes else 0.0


def main() -> None:
    print(f"  {len(TASKS)} tasks x {SEEDS} seeds, each way on one local remote "
          f"(observations=('screen', 'page'), actions='web')", flush=True)
    results: dict[str, dict[str, Tally]] = {}
    ways = {**MODES, OLD_LOCKSTEP: {**MODES["lockstep"], "capture": OLD_CAPTURE}}
    for name, settings in ways.items():
        def report(task: str, tally: Tally, name: str = name) -> None:
            print(f"    {name:9} {task:26} {tally.won:2}/{tally.episodes}  "
                  f"{tally.steps_per_second:6.1f} steps/s", flush=True)

        results[name] = run(settings, TASKS, SEEDS, report=report)
    realtime, lockstep, old = results["real time"], results["lockstep"], results[OLD_LOCKSTEP]
    rows = [
        [task, f"{realtime[task].won}/{realtime[task].episodes}", f"{realtime[task].steps_per_second:.1f}",
         f"{lockstep[task].won}/{lockstep[task].episodes}", f"{lockstep[task].steps_per_second:.1f}",
         f"{old[task].won}/{old[task].episodes}", f"{old[task].steps_per_second:.1f}",
         ratio(lockstep[task].steps_per_second, old[task].steps_per_second)]
        for task in TASKS
    ]
    print()
    table(["task", "real time", "steps/s", "lockstep", "steps/s", "old lockstep", "steps/s",
           "new/old"], rows)
    new_rate, old_rate = _rate(lockstep), _rate(old)
    print(f"  lockstep steps/s over all tasks: {new_rate:.1f} (frames from the display) against "
          f"{old_rate:.1f} (screenshots until two agree): {ratio(new_rate, old_rate)}")
    for name, tallies in results.items():
        errors = [e for t in tallies.values() for e in t.errors]
        if errors:
            print(f"  {name}: {len(errors)} last_action_error(s), e.g. {errors[0]}")

    sleep_tasks: list[str] = [t for t in SLEEP_TASKS if t in TASKS] or list(TASKS[:1])
    print(f"\n  settling vs a fixed {FIXED_SLEEP:g} s sleep (real time), {len(sleep_tasks)} tasks "
          f"x {SLEEP_SEEDS} seeds: seconds from an action to the next observation", flush=True)
    settled = run(MODES["real time"], sleep_tasks, SLEEP_SEEDS)
    slept = run({"mode": "realtime"}, sleep_tasks, SLEEP_SEEDS, sleep=FIXED_SLEEP)
    rows = []
    for task in sleep_tasks:
        a, b = settled[task], slept[task]
        rows.append([task, f"{statistics.median(a.per_action):.2f}", f"{a.won}/{a.episodes}",
                     f"{statistics.median(b.per_action):.2f}", f"{b.won}/{b.episodes}"])
    every_a = [s for t in settled.values() for s in t.per_action]
    every_b = [s for t in slept.values() for s in t.per_action]
    rows.append(["all", f"{statistics.median(every_a):.2f}", f"{_percent(settled):.0f} %",
                 f"{statistics.median(every_b):.2f}", f"{_percent(slept):.0f} %"])
    table(["task", "settle s", "won", f"sleep {FIXED_SLEEP:g} s", "won"], rows)
    print(f"browser_oracle: {len(TASKS)} tasks, {_percent(realtime):.0f} % success in real time, "
          f"{_percent(lockstep):.0f} % in lockstep ({_percent(old):.0f} % the old way), lockstep "
          f"{ratio(new_rate, old_rate)} the old way's steps/s")


if __name__ == "__main__":
    main()
