"""What a machine holds (``remotes.capacity``): start_local warns past it and starts its
remotes at a lower priority there, and CPU per frame is measured from real remotes."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

import pytest

from remotes import RemoteVectorEnv, capacity
from remotes.local import start_local

CATCH: Final = "builtin.Catch-v0"
#: An artificial capacity, so that a handful of remotes overcommit "the machine".
SMALL_CAPACITY: Final = 2
#: Steps the measured remotes are driven for (about a second at 60 fps).
MEASURE_STEPS: Final = 60


def _nice(pid: int) -> int:
    """The ``nice`` field (19th) of ``/proc/PID/stat``."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[16])


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "frame-cpu.json"
    monkeypatch.setenv(capacity.CACHE_ENV, str(path))
    return path


def test_past_capacity_start_local_warns_and_the_remotes_yield(
    caplog: pytest.LogCaptureFixture, cache: Path
) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    with caplog.at_level(logging.WARNING, logger="remotes.local"):
        local = start_local(CATCH, SMALL_CAPACITY, games_per_process=1, capacity=SMALL_CAPACITY)
        with local:
            assert [_nice(p.pid) for p in local.processes] == [ours] * SMALL_CAPACITY
        assert not caplog.records, "within capacity nothing is said"
        n = SMALL_CAPACITY + 2
        local = start_local(CATCH, n, games_per_process=2, capacity=SMALL_CAPACITY)
        with local:
            expected = min(ours + capacity.OVERLOAD_NICE, 19)
            assert [_nice(p.pid) for p in local.processes] == [expected] * 2
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    said = record.getMessage()
    assert f"{n} real-time {CATCH} remotes exceed the {SMALL_CAPACITY}" in said
    assert "ms CPU a frame" in said and f"start at most {SMALL_CAPACITY}" in said


def test_an_explicit_nice_is_kept_past_capacity(caplog: pytest.LogCaptureFixture, cache: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    with caplog.at_level(logging.WARNING, logger="remotes.local"):
        with start_local(CATCH, 2, games_per_process=2, capacity=1, nice=0) as local:
            assert _nice(local.processes[0].pid) == ours
    assert "which they will starve" in caplog.text


def test_cpu_per_frame_is_measured_from_real_remotes_and_sets_the_capacity(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capacity, "MIN_MEASURED_SECONDS", 0.5)
    monkeypatch.setattr(capacity, "MEASURE_BELOW_SHARE", float("inf"))  # a busy test machine
    monkeypatch.setattr(capacity, "MACHINE_BUSY_BELOW", float("inf"))
    assert capacity.frame_cpu_ms(CATCH, 2) == capacity.DEFAULT_FRAME_CPU_MS[8]
    with start_local(CATCH, 2, games_per_process=2) as local:
        env = RemoteVectorEnv(local.address)
        try:
            env.reset(seed=0)
            for _ in range(MEASURE_STEPS):
                env.step([[], []])
        finally:
            env.close()
    measured = capacity.frame_cpu_ms(CATCH, 2)
    assert measured != capacity.DEFAULT_FRAME_CPU_MS[8] and 0.001 < measured < 50.0
    held = capacity.capacity(CATCH, 2, fps=60.0, cores=2)
    agent = capacity.AGENT_STEP_CPU_MS * 60.0 / 1e3
    assert held == int(min(2 / (measured * 60.0 / 1e3 + agent), 1 / agent))


def test_the_capacity_counts_the_agents_cost_and_its_one_core(cache: Path) -> None:
    """A remote that costs next to nothing is still stepped by an agent whose Python uses
    one core: the capacity stops there (before: cores over the remotes' cost alone, 464
    Catch remotes on 2 cores once unread frames went undrawn, where the total peaks at
    128-160); a costly remote leaves less for both."""
    agent = capacity.AGENT_STEP_CPU_MS * 60.0 / 1e3
    assert capacity.record(CATCH, [1.0], [1.0 + 1e-3], 10.0, [8], 60.0) is not None  # ~0 CPU a frame
    assert capacity.capacity(CATCH, 8, fps=60.0, cores=2) == int(capacity.AGENT_CORES / agent)
    assert capacity.capacity(CATCH, 8, fps=60.0, cores=64) == int(capacity.AGENT_CORES / agent)
    costly = capacity.record(CATCH, [1.0], [1.0 + 8 * 60 * 10 * 0.5e-3], 10.0, [8], 60.0)
    assert costly == pytest.approx(0.5)
    assert capacity.capacity(CATCH, 8, fps=60.0, cores=2) == int(2 / (0.5 * 60.0 / 1e3 + agent))


def test_a_starved_or_short_measurement_is_not_kept(cache: Path) -> None:
    cores = os.cpu_count() or 1
    assert capacity.record(CATCH, [1.0], [1.0 + cores * 10.0], 10.0, [8], 60.0) is None  # starved
    assert capacity.record(CATCH, [1.0], [1.01], 1.0, [8], 60.0) is None  # too short
    assert capacity.record(CATCH, [1.0], [1.6], 10.0, [8], 60.0, machine_busy=0.95) is None
    assert capacity.record(CATCH, [1.0, None], [1.6, 2.0], 10.0, [8, 8], 60.0) == pytest.approx(0.125)
    assert capacity.frame_cpu_ms(CATCH, 8) == pytest.approx(0.125)


def test_past_capacity_start_local_packs_more_games_a_process(cache: Path) -> None:
    """Past capacity the remotes wake less: up to OVERLOAD_GAMES games a process (17
    remotes: 2 processes, before 3 of up to 8); within it, and when games are given, as
    asked or as before."""
    n = 17
    with start_local(CATCH, n, capacity=SMALL_CAPACITY) as local:
        assert len(local.processes) == -(-n // capacity.OVERLOAD_GAMES)
        assert sum(local.games) == n
    assert capacity.overload_games(256) == 16 and capacity.overload_games(17) == 9
    with start_local(CATCH, n, capacity=SMALL_CAPACITY, games_per_process=8) as local:
        assert len(local.processes) == 3
