"""Shared by the Atari lockstep benchmarks: the workload, its constants and timing helpers.

Holds the constants of :mod:`benchmarks.atari_lockstep` (Pong, frameskip 4, steps and
rounds per measure), :class:`Run` (wall time and CPU over a block) with
:func:`step_rates` and :func:`median_run` (its figures per step, the median round),
:func:`local_remotes`, :func:`lockstep_env`, and the random-action drivers
(:func:`time_steps`, :func:`time_vector`, :func:`drive`, :func:`until`) and the in-process limit
(:func:`raw_ale_step`) both :mod:`~benchmarks.atari_lockstep`
and :mod:`~benchmarks.atari_breakdown` use.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from benchmarks.common import process_cpu as _process_cpu, quick
from remotes.env import RemoteEnv
from remotes.local import LocalRemotes, start_local
from remotes.loop import LoopThread

ENV_ID: Final = "atari.Pong-v0"
GYM_ID: Final = "ALE/Pong-v5"
ROM: Final = "pong"
FRAMESKIP: Final = 4
#: The remotes' ``serve`` arguments: lockstep, and no no-op starts (the runtime's default
#: plays 0-30 NOOP frames after each reset), as none of the peers has any: gymnasium's
#: ``ALE/Pong-v5``, ``AtariVectorEnv(noop_max=0)``, the bare design.
LOCKSTEP_ARGS: Final = ("--mode", "lockstep", "--option", "noop_max=0")
ENCODINGS: Final = quick(("raw", "tight", "zrle"), ("raw",))
#: Untimed steps before each timed run (connection warm-up, first full frame).
WARMUP_STEPS: Final = quick(100, 30)
#: Timed steps per run in measure 1 (a run also stops after RUN_SECONDS).
STEPS: Final = quick(2000, 200)
RUN_SECONDS: Final = quick(10.0, 1.0)
#: Every contender runs once per round; the median round is reported.
ROUNDS: Final = quick(3, 1)
#: The issue's goal for measure 1: lockstep steps/s at least this fraction of local ale-py.
GOAL_VS_LOCAL: Final = 0.7
#: Steps of the timed lockstep copy (per encoding) and of the cProfile run.
TIMED_STEPS: Final = quick(1000, 200)
PROFILE_STEPS: Final = quick(1000, 200)
PROFILE_ENCODING: Final = "raw"
#: Round trips of v0.control.ping, the bare rewarder round trip.
PINGS: Final = quick(300, 50)
#: py-spy: seconds and samples per second it records each process.
PYSPY_SECONDS: Final = quick(2, 1)
PYSPY_RATE: Final = 400
#: Busiest leaf frames listed per sampled thread.
PYSPY_TOP: Final = 6
#: Functions listed per thread from cProfile.
PROFILE_TOP: Final = 8
#: Measure 2: remotes (and AsyncVectorEnv workers), and vector steps per run (each run
#: also stops after VECTOR_SECONDS).
COUNTS: Final = quick((1, 4, 8), (2,))
VECTOR_STEPS: Final = quick({1: 2000, 4: 800, 8: 400}, {1: 200, 2: 150, 4: 100, 8: 100})
VECTOR_WARMUP: Final = 30
VECTOR_SECONDS: Final = quick(10.0, 1.0)
#: Random actions each vector row draws before it is timed, then steps through in turn:
#: the rows time the envs, not their action samplers (one MultiDiscrete draw for
#: gymnasium's and ALE's vectors, n VNC-event lists for ours), as an agent's policy
#: hands each env an action it made, not one drawn in the step.
ACTION_CYCLE: Final = 64
GOAL_VS_ASYNC: Final = 1.2  # issue 32: RemoteVectorEnv lockstep at n = 4 and 8
#: Measure 3: real-time steps sampled (after LATENCY_WARMUP) per loop.
FPS: Final = 60.0
PERIOD: Final = 1.0 / FPS
LATENCY_STEPS: Final = 300
LATENCY_WARMUP: Final = 30


class Run:
    """Wall time, this process's CPU and other processes' CPU over a ``with`` block."""

    def __init__(self, pids: Sequence[int] = ()) -> None:
        self.pids = list(pids)
        self.wall = self.own_cpu = self.others_cpu = 0.0

    def __enter__(self) -> Run:
        self._wall, self._own = time.perf_counter(), time.process_time()
        self._others = sum(_process_cpu(p) for p in self.pids)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall = time.perf_counter() - self._wall
        self.own_cpu = time.process_time() - self._own
        self.others_cpu = sum(_process_cpu(p) for p in self.pids) - self._others


def step_rates(steps: int, run: Run) -> dict[str, float]:
    return {
        "steps": steps,
        "steps_per_s": steps / run.wall,
        "own_cpu": run.own_cpu / steps,
        "others_cpu": run.others_cpu / steps,
    }


@contextlib.contextmanager
def local_remotes(
    n: int, extra_args: Sequence[str] = LOCKSTEP_ARGS, games_per_process: int | None = None,
    pin: bool | None = None,
) -> Iterator[LocalRemotes]:
    """``n`` local Pong remotes (``games_per_process`` to a ``serve`` process, pinned as
    ``pin`` says; None: start_local's defaults), always stopped (their logs go unless one
    failed)."""
    remotes = start_local(ENV_ID, n, extra_args=list(extra_args), games_per_process=games_per_process,
                          pin=pin)
    try:
        yield remotes
    finally:
        remotes.close()


def time_steps(step: Callable[[], None], steps: int) -> dict[str, float]:
    """Warm up, then time ``step`` for ``steps`` calls (or :data:`RUN_SECONDS`)."""
    for _ in range(WARMUP_STEPS):
        step()
    going, done = until(steps, RUN_SECONDS), 0
    with Run() as run:
        while going(done):
            step()
            done += 1
    return step_rates(done, run)


def time_vector(step: Callable[[], object], steps: int, pids: Sequence[int] = ()) -> dict[str, float]:
    """Warm up :data:`VECTOR_WARMUP` calls of ``step`` (one vector step each), then time
    it for ``steps`` calls (or :data:`VECTOR_SECONDS`), counting the CPU of ``pids`` too:
    every vector row's loop, ours and the peers' alike."""
    for _ in range(VECTOR_WARMUP):
        step()
    going, done = until(steps, VECTOR_SECONDS), 0
    with Run(pids) as run:
        while going(done):
            step()
            done += 1
    return step_rates(done, run)


def until(steps: int, seconds: float) -> Callable[[int], bool]:
    """A predicate: go on while fewer than ``steps`` were done and ``seconds`` have not passed."""
    deadline = time.perf_counter() + seconds
    return lambda done: done < steps and time.perf_counter() < deadline


def lockstep_env(remotes: LocalRemotes, encoding: str, loop: LoopThread, warm: bool = False) -> RemoteEnv:
    """A lockstep env on the first of ``remotes``; ``warm``: reset (seed 0), its action
    space seeded and WARMUP_STEPS random steps taken, so timing starts in play."""
    env = RemoteEnv(remotes.address, mode="lockstep", frameskip=FRAMESKIP, encoding=encoding, loop=loop)
    if warm:
        try:
            env.reset(seed=0)
            env.action_space.seed(0)
            drive(env, WARMUP_STEPS)
        except BaseException:
            env.close()
            raise
    return env


def drawn(sample: Callable[[], Any], count: int = ACTION_CYCLE) -> Callable[[], Any]:
    """``count`` actions drawn by ``sample`` now; the returned call gives them in turn,
    round and round (:data:`ACTION_CYCLE`)."""
    return itertools.cycle([sample() for _ in range(count)]).__next__


def drive(env: RemoteEnv, steps: int) -> int:
    """Step ``env`` with random actions (resetting after an episode); steps done."""
    going, done = until(steps, RUN_SECONDS), 0
    space = env.action_space
    while going(done):
        _, _, terminated, truncated, _ = env.step(space.sample())
        done += 1
        if terminated or truncated:
            env.reset()
    return done


def raw_ale_step() -> Callable[[], None]:
    """One step of the limit every Atari benchmark compares with: ale-py in this process,
    a random minimal action ``act`` FRAMESKIP times and an RGB screen, the game reset
    when it is over."""
    import numpy as np
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)  # no ROM banner in the tables
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setInt("frame_skip", 1)
    ale.loadROM(str(roms.get_rom_path(ROM)))
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(0)

    def step() -> None:
        action = actions[int(rng.integers(len(actions)))]
        for _ in range(FRAMESKIP):
            ale.act(action)
        ale.getScreenRGB()
        if ale.game_over():
            ale.reset_game()

    return step


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run with the median steps/s (its CPU figures belong to it)."""
    ordered = sorted(runs, key=lambda r: r["steps_per_s"])
    return ordered[len(ordered) // 2]
