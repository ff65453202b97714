"""``make bench`` says how long it will take and how it goes, and ``make bench-quick`` runs
one short round of each benchmark (issue 29, item 4)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Final

from benchmarks.__main__ import EXPECTED, HEADLINES, ORDER, QUICK_BUDGET, chosen, discover, plan, total

ROOT: Final = Path(__file__).resolve().parents[1]
#: Seconds the quick round of rewarder_throughput may take (measured: 1 s; full: ~12 s).
QUICK_TIMEOUT: Final = 120


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=QUICK_TIMEOUT)


def test_every_module_with_a_main_runs_and_the_listed_ones_say_how_long() -> None:
    here = ROOT / "benchmarks"
    with_main = {p.stem for p in here.glob("*.py")
                 if re.search(r"^def main\(", p.read_text(), re.MULTILINE) and p.stem != "__main__"}
    helpers = {"dm_peer"}  # the peer server other benchmarks start, not a benchmark
    assert set(discover()) == with_main - helpers
    assert set(ORDER) <= set(EXPECTED)  # every benchmark in the order has its durations
    for name in ORDER:
        if name in discover():  # each reads the quick setting for its rounds and sizes,
            text = (here / f"{name}.py").read_text()  # itself or through a helper of here
            helpers = re.findall(r"^from benchmarks\.(\w+) import", text, re.MULTILINE)
            assert "quick(" in text or any("quick(" in (here / f"{h}.py").read_text()
                                           for h in helpers), name
    line = plan(["rewarder_throughput", "no_such_new_one"], quick=False)
    assert "expected about" in line and "no_such_new_one (not measured yet)" in line
    assert "make bench-quick" in line


def test_list_prints_each_benchmarks_expected_time() -> None:
    done = run("--list")
    assert done.returncode == 0, done.stderr
    for name in discover():
        assert re.search(rf"^{name} +full +\S+", done.stdout, re.MULTILINE), name
    assert "expected about" in done.stdout.splitlines()[-1]


def test_quick_runs_one_short_round_and_reports_progress() -> None:
    done = run("--quick", "rewarder_throughput")
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.startswith("running quick rounds of 1 benchmarks: expected about")
    assert "== [1/1] rewarder_throughput (expected ~" in out
    assert "10000 messages each way, best of 1" in out  # the quick setting, read by the module
    assert re.search(r"\(rewarder_throughput took \d+ s; \d+ s so far\)", out), out


def test_an_unknown_benchmark_is_named_with_the_ones_there_are() -> None:
    done = run("no_such_benchmark")
    assert done.returncode == 2
    assert "no benchmark no_such_benchmark; there are rewarder_throughput" in done.stderr


def test_the_quick_round_fits_its_budget_and_the_docs_quote_the_lists_own_estimates() -> None:
    """``make bench-quick`` runs the headlines within QUICK_BUDGET, and what README.md and
    the Makefile say both take is what ``--list`` estimates (issue 45: they said 4 and 23
    minutes while the list said 12 and 53)."""
    assert set(HEADLINES) <= set(discover()) and set(HEADLINES) <= set(EXPECTED)
    quick_s, full_s = total(list(HEADLINES), quick=True), total(discover(), quick=False)
    assert quick_s <= QUICK_BUDGET, quick_s
    assert chosen([], quick=True, every=False, available=discover()) == list(HEADLINES)
    assert chosen([], quick=True, every=True, available=discover()) == discover()
    readme, makefile = (ROOT / "README.md").read_text(), (ROOT / "Makefile").read_text()
    for text in (readme, makefile):
        flat = " ".join(text.split())
        assert f"about {round(full_s / 60)} minutes" in flat, f"make bench: {full_s / 60:.0f} min"
        assert f"about {round(quick_s / 60)} minutes" in flat, f"bench-quick: {quick_s / 60:.0f} min"
    assert "plus " not in plan(discover(), quick=False)  # every benchmark has been measured
