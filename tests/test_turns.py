"""The turns ``lockstep_peers`` steps its vector rows in (benchmarks/turns.py): every row a
turn each cycle, the order rotated, the totals and the ratios from what was stepped."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.lockstep_peers import each_process
from benchmarks.turns import Row, Turns


def test_every_row_gets_a_turn_each_cycle_in_a_rotated_order() -> None:
    seen: list[str] = []
    rows = {name: Row(lambda name=name: seen.append(name), env_steps=steps)  # type: ignore[misc]
            for name, steps in (("a", 1), ("b", 2), ("c", 4))}
    turns = Turns(rows, lambda row: 8 // row.env_steps)  # (8 env-steps a turn)
    turns.warm(2)  # (untimed: stepped, not counted)
    assert seen == ["a", "a", "b", "b", "c", "c"] and all(row.calls == 0 for row in rows.values())
    seen.clear()
    turns.run(0.0)  # (at least one cycle)
    turns.run(0.0)
    turns.run(0.0)
    assert turns.cycles == 3
    firsts = [seen[0], seen[8 + 4 + 2], seen[2 * (8 + 4 + 2)]]
    assert firsts == ["a", "b", "c"]  # (each cycle starts one row later)
    assert [rows[k].calls for k in "abc"] == [24, 12, 6]
    assert all(len(row.rates) == 3 and row.wall > 0 for row in rows.values())
    assert all(row.calls * row.env_steps == 24 for row in rows.values())


def test_ratios_are_of_the_totals_with_the_cycles_spread_beside() -> None:
    turns = Turns({"mine": Row(lambda: None, env_steps=4), "theirs": Row(lambda: None, env_steps=4)},
                  lambda row: 1)
    mine, theirs = turns.rows["mine"], turns.rows["theirs"]
    mine.calls, mine.wall, mine.rates = 30, 1.0, [100.0, 120.0, 140.0]
    theirs.calls, theirs.wall, theirs.rates = 60, 1.0, [200.0, 200.0, 200.0]
    total, spread = turns.ratio("mine", "theirs")
    assert total == 0.5  # (120 env-steps/s against 240: the totals, not the cycles' mean)
    assert spread.startswith("per cycle 0.60, quartiles")
    assert mine.cpu_per_env_step() == 0.0 and mine.env_steps_per_s == 120.0


_BURNER = """
import sys, time
for line in sys.stdin:
    end = time.process_time() + float(line)
    while time.process_time() < end:
        pass
    sys.stdout.write("done\\n")
    sys.stdout.flush()
"""


def test_each_process_of_a_row_is_charged_its_own_cpu() -> None:
    # Two real processes a step: one burns 5 ms of CPU a call, the other 20 ms.
    burners = [subprocess.Popen([sys.executable, "-c", _BURNER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        def step() -> None:
            for burner, seconds in zip(burners, (0.005, 0.020), strict=True):
                assert burner.stdin is not None and burner.stdout is not None
                burner.stdin.write(f"{seconds}\n")
                burner.stdin.flush()
                assert burner.stdout.readline() == "done\n"

        row = Row(step, [b.pid for b in burners], env_steps=2)
        turns = Turns({"row": row}, lambda row: 10)
        turns.warm(1)
        turns.run(0.0)
        turns.run(0.0)
        light, heavy = row.each_cpu_per_env_step()
        assert set(row.pid_cpu) == {b.pid for b in burners}
        assert abs(light + heavy - row.others_cpu / (row.calls * row.env_steps)) < 1e-9
        # 20 calls: 0.1 s and 0.4 s of CPU, counted in 10 ms clock ticks.
        assert heavy > 2 * light > 0
        assert each_process([light, heavy]).endswith(" us") and " / " in each_process([light, heavy])
        assert each_process([light] * 8).startswith("8 x ")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
