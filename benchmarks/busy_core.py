"""A lockstep vector beside a program that keeps a core busy: whether ``start_local`` pins.

``python -m benchmarks busy_core``. ``start_local`` pins a lockstep vector's ``serve``
processes one to a core when they are as many as the cores, unless another program keeps
one of those cores busy when they start (remotes/busy_cpus.py), and the processes it pins
let go of their cores once such a program starts later (``serve --unpin-when-shared``,
envserver/cpus.py). Three phases, each with every row open at once and stepped in turns
(benchmarks/turns.py), n=8 lockstep Pong:

- quiet: ``start_local``'s default (it pins here), the same pinned (``pin=True``) and not
  (``pin=False``), and the bare design (benchmarks/bare_lockstep.py) as the peer;
- beside a busy loop started first (one Python ``while True: pass``, unpinned, in a session
  of its own: a learner in another terminal, another experiment): the same rows started
  after it; the default sees the busy core and leaves its processes to the kernel;
- beside the same loop started after the rows (the default pinned them): its processes
  see that they wait for their cores and let go of them.

It prints each row's env-steps/s, whether the default pinned and whether its processes
were still pinned at the end, and the default against pinned, unpinned and the bare
design in each phase.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Final

from benchmarks.atari_lockstep import ours_vector
from benchmarks.bare_lockstep import bare_stepper
from benchmarks.common import load_average, quick, table
from benchmarks.turns import Row, Turns

#: The vector's remotes (two processes of four games on two cores, start_local's packing).
N: Final = 8
#: Seconds each phase steps its rows in turns, and env-steps a turn.
PHASE_SECONDS: Final = quick(25.0, 3.0)
TURN_ENV_STEPS: Final = quick(800, 200)
#: Vector steps each row takes untimed first.
WARMUP: Final = quick(100, 20)
#: Seconds the busy loop runs before the rows step (the kernel has placed it by then).
SETTLE_SECONDS: Final = 1.0
#: The phases: where the busy loop starts (None: no loop), and how the table says it.
PHASES: Final = {None: "quiet", "first": "beside a busy loop started first",
                 "after": "beside a busy loop started after the rows"}
_NAMES: Final = {"default": "ours, start_local's default pin", "pinned": "ours, pin=True",
                 "free": "ours, pin=False", "bare": "the bare design (benchmarks.bare_lockstep)"}


@contextlib.contextmanager
def _busy_loop() -> Iterator[None]:
    # (a session of its own, as a program started elsewhere is: with the kernel's autogroups
    # it is then weighed against this whole session, not against each of its processes)
    loop = subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"], start_new_session=True)
    try:
        time.sleep(SETTLE_SECONDS)  # (the loop running before the rows start: the phase's point)
        yield
    finally:
        loop.kill()
        loop.wait()


def _phase(loop: str | None) -> tuple[Turns, bool, bool]:
    """The rows stepped in turns (beside a busy loop started ``loop``: "first" or
    "after" the rows), whether the default pinned, and whether its processes still were
    pinned at the end."""
    with contextlib.ExitStack() as stack:
        if loop == "first":
            stack.enter_context(_busy_loop())
        rows: dict[str, Row] = {}
        step, about = stack.enter_context(ours_vector(N, "raw"))
        rows["default"], pinned = Row(step, about["pids"], N), bool(about["pinned"])
        step, about = stack.enter_context(ours_vector(N, "raw", pin=True))
        rows["pinned"] = Row(step, about["pids"], N)
        step, about = stack.enter_context(ours_vector(N, "raw", pin=False))
        rows["free"] = Row(step, about["pids"], N)
        step, pids = stack.enter_context(bare_stepper(N))
        rows["bare"] = Row(step, pids, N)
        if loop == "after":
            stack.enter_context(_busy_loop())
        turns = Turns(rows, lambda row: max(1, TURN_ENV_STEPS // row.env_steps))
        turns.warm(WARMUP)
        turns.run(PHASE_SECONDS)
        still = any(len(_cpus(pid)) == 1 for pid in rows["default"].pids)
    return turns, pinned, still


def _cpus(pid: int) -> set[int]:
    """Every CPU some thread of ``pid`` may run on."""
    cpus: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            cpus |= os.sched_getaffinity(int(tid))
    return cpus


def main() -> None:
    print(f"  load average before: {load_average()}")
    for loop, where in PHASES.items():
        turns, pinned, still = _phase(loop)
        ended = ("" if not pinned else ", and they were still pinned at the end" if still
                 else ", and they let go of their cores")
        print(f"\n  Lockstep Pong n={N}, {where}: rows in turns of about {TURN_ENV_STEPS} env-steps, "
              f"{turns.cycles} cycles in {PHASE_SECONDS:g} s; start_local's default "
              f"{'pinned' if pinned else 'did not pin'}{ended}")
        table(["row", "env-steps/s"], [[_NAMES[key], f"{row.env_steps_per_s:,.0f}"]
                                       for key, row in turns.rows.items()])
        for other in ("pinned", "free", "bare"):
            share, spread = turns.ratio("default", other)
            print(f"  default vs {_NAMES[other]}: {share:.2f} ({spread})")
    print(f"  load average after: {load_average()}")


if __name__ == "__main__":
    main()
