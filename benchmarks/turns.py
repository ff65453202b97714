"""Rows measured in turns, all of them open at once: each steps a few hundred milliseconds,
then the next, round and round, for a fixed time.

Why: this project's machines are VMs whose speed drifts by a third over seconds (two rounds
of the same row, a minute apart, gave 4,729 and 3,466 env-steps/s). Rows measured one after
another, each once a round and for under a second, catch different moods, and three rounds
do not average them out: ``lockstep_peers`` printed ours over ``AtariVectorEnv`` n=8 as
0.66 in one run and 0.89 in another of the same code. Turns of every row open together
spread each mood over all rows alike; the totals, and the spread of the per-cycle ratios,
say how sure a figure is. A row that is not stepping waits on a socket or a pipe: its
processes cost nothing meanwhile (checked: :attr:`Turns.idle` is reported).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from benchmarks.common import process_cpu

#: Quartiles of the per-cycle ratios printed beside a total ratio.
QUARTILES: Final = 4


@dataclass
class Row:
    """One contender: ``step`` makes ``env_steps`` env-steps; ``pids``: the processes
    beyond this one whose CPU it uses (its remotes, workers or servers)."""

    step: Callable[[], object]
    pids: Sequence[int] = ()
    env_steps: int = 1
    #: Totals over its turns: wall seconds, this process's CPU, calls.
    wall: float = 0.0
    own_cpu: float = 0.0
    calls: int = 0
    #: Env-steps per second of each turn, in cycle order.
    rates: list[float] = field(default_factory=list)
    #: Each of ``pids``' CPU over its turns.
    pid_cpu: dict[int, float] = field(default_factory=dict)

    @property
    def others_cpu(self) -> float:
        """The CPU of :attr:`pids` over its turns, all together."""
        return sum(self.pid_cpu.values())

    @property
    def env_steps_per_s(self) -> float:
        return self.calls * self.env_steps / self.wall if self.wall else 0.0

    def cpu_per_env_step(self) -> float:
        """Seconds of CPU per env-step, every process of the row."""
        return (self.own_cpu + self.others_cpu) / max(self.calls * self.env_steps, 1)

    def agent_cpu_per_env_step(self) -> float:
        return self.own_cpu / max(self.calls * self.env_steps, 1)

    def each_cpu_per_env_step(self) -> list[float]:
        """Seconds of CPU per env-step of each of :attr:`pids`, in their order: where a
        row's CPU goes (a vector's serve processes, each core's share)."""
        env_steps = max(self.calls * self.env_steps, 1)
        return [self.pid_cpu.get(pid, 0.0) / env_steps for pid in self.pids]


class Turns:
    """Rows stepped in turns (see the module docstring)."""

    def __init__(self, rows: dict[str, Row], turn_calls: Callable[[Row], int]) -> None:
        self.rows = rows
        self.turn_calls = turn_calls
        self.cycles = 0
        #: CPU of every row's other processes per second while none of them was stepped
        #: (:meth:`check_idle`): what an idle row costs the others.
        self.idle = 0.0

    def warm(self, calls: int) -> None:
        """Step every row ``calls`` times, untimed (caches, buffers and connections made)."""
        for row in self.rows.values():
            for _ in range(calls):
                row.step()

    def run(self, seconds: float) -> None:
        """Cycles of one turn per row, the order rotated each cycle, until ``seconds``
        have passed (at least one cycle a call)."""
        names = list(self.rows)
        deadline, first = time.perf_counter() + seconds, self.cycles
        while self.cycles == first or time.perf_counter() < deadline:
            shift = self.cycles % len(names)
            for name in names[shift:] + names[:shift]:
                self._turn(self.rows[name])
            self.cycles += 1

    def _turn(self, row: Row) -> None:
        calls = self.turn_calls(row)
        others = [process_cpu(pid) for pid in row.pids]
        own, began = time.process_time(), time.perf_counter()
        step = row.step
        for _ in range(calls):
            step()
        wall = time.perf_counter() - began
        row.own_cpu += time.process_time() - own
        for pid, before in zip(row.pids, others, strict=True):
            row.pid_cpu[pid] = row.pid_cpu.get(pid, 0.0) + process_cpu(pid) - before
        row.wall += wall
        row.calls += calls
        row.rates.append(calls * row.env_steps / wall)

    def check_idle(self, seconds: float) -> None:
        """Measure what the rows' processes spend while nobody steps them."""
        pids = [pid for row in self.rows.values() for pid in row.pids]
        before = sum(process_cpu(pid) for pid in pids)
        time.sleep(seconds)  # (a measurement window, not synchronisation)
        self.idle = (sum(process_cpu(pid) for pid in pids) - before) / seconds

    def ratio(self, mine: str, theirs: str) -> tuple[float, str]:
        """``mine``'s env-steps/s over ``theirs``' (totals), and the per-cycle ratios'
        median and quartiles, as text."""
        a, b = self.rows[mine], self.rows[theirs]
        per = [x / y for x, y in zip(a.rates, b.rates, strict=True)]
        if len(per) < 2:
            return a.env_steps_per_s / b.env_steps_per_s, f"one cycle: {per[0]:.2f}"
        q = statistics.quantiles(per, n=QUARTILES)
        return (a.env_steps_per_s / b.env_steps_per_s,
                f"per cycle {statistics.median(per):.2f}, quartiles {q[0]:.2f}-{q[-1]:.2f}")
