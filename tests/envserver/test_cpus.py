"""``serve --cpus`` (envserver/cpus.py): the list's form, and CPUs this process may not
use refused before anything binds; ``--unpin-when-shared``: a pinned process lets go of
its core once another program shares it. That the processes run pinned, every thread of
them, and stay pinned across a restart: tests/remotes/test_local.py."""

from __future__ import annotations

import os
import time
from typing import Final

import pytest

from envserver import games
from envserver.cpus import MAX_CPU, SHARED_LOOKS, SharedCore, parse_cpus
from remotes import RemoteEnv
from remotes.local import start_local
from tests.busy_loop import affinities, busy_loop
from universe_remote.cli import main

#: Seconds a pinned remote gets to see a busy program on its core and let go of it
#: (two looks a second apart; a loaded machine's slow start on top).
UNPIN_TIMEOUT: Final = 30.0
#: Steps between two looks at the remote's log.
STEPS_A_LOOK: Final = 20
#: Frames a step: the remote busy most of the time, as an Atari vector's are (a step of
#: one frame runs for microseconds, and the kernel lets a thread that sleeps that much
#: in ahead of a busy loop: it hardly waits).
FRAMES_A_STEP: Final = 200


def test_a_cpu_list_reads_as_tasksets_does() -> None:
    assert parse_cpus("0-3,6") == {0, 1, 2, 3, 6}
    assert parse_cpus(" 1 , 3") == {1, 3}
    assert parse_cpus("2-2,2") == {2}
    for wrong, said in (("", "not a CPU number"), ("a", "not a CPU number"), ("0-x", "not a CPU number"),
                        ("3-1", "a range's first one first"), (str(MAX_CPU + 1), f"0..{MAX_CPU}"),
                        ("-1", "not a CPU number")):
        with pytest.raises(ValueError, match=said):
            parse_cpus(wrong)


def test_serve_refuses_cpus_it_may_not_run_on_before_it_serves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[object] = []
    monkeypatch.setattr(games, "run", lambda *args: calls.append(args) or 0)
    outside = max(set(range(MAX_CPU + 1)) - os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    assert main(["serve", "builtin.Catch-v0", "--cpus", str(outside)]) == 2
    err = capsys.readouterr().err
    assert f"may not run on CPU {outside}; it may on " in err
    assert calls == [] and os.sched_getaffinity(0) == before
    with pytest.raises(SystemExit) as exited:
        main(["serve", "builtin.Catch-v0", "--cpus", "1-0"])
    assert exited.value.code == 2
    assert "argument --cpus: '1-0'" in capsys.readouterr().err and calls == []


def test_a_core_is_shared_once_the_process_waits_for_it_look_after_look() -> None:
    """Waiting while it wants to run, not the core's busy share; a thread that ended loses
    its last part, a new one counts whole; a burst, or a process that hardly runs, is not
    a core shared."""
    core = SharedCore()
    ms = 1_000_000  # (nanoseconds)
    assert not core.look({1: (0, 0), 2: (0, 0)})  # (the first look: nothing to compare with)
    assert not core.look({1: (800 * ms, 40 * ms), 2: (5 * ms, 0)})  # quiet: 5 % waiting
    assert core.wait == pytest.approx(40 / 805) and core.shared == 0
    assert not core.look({1: (1300 * ms, 540 * ms), 3: (100 * ms, 0)})  # 2 ended, 3 began
    assert core.wait == pytest.approx(500 / 600) and core.shared == 1
    assert not core.look({1: (1400 * ms, 550 * ms), 3: (200 * ms, 0)})  # ... a burst: gone
    assert core.shared == 0
    assert not core.look({1: (1450 * ms, 600 * ms), 3: (200 * ms, 0)})  # hardly runs: waits
    assert core.shared == 0  # (50 ms run: its waiting costs it little)
    assert not core.look({1: (1900 * ms, 900 * ms), 3: (250 * ms, 40 * ms)})  # it stays...
    assert core.look({1: (2400 * ms, 1300 * ms), 3: (250 * ms, 40 * ms)})  # ... look after look
    assert SHARED_LOOKS == 2 and core.wait == pytest.approx(0.8)


def test_unpin_when_shared_needs_cpus_to_let_go_of(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "builtin.Catch-v0", "--unpin-when-shared"]) == 2
    assert "--unpin-when-shared lets go of the CPUs --cpus pinned" in capsys.readouterr().err


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs (CI has them)")
def test_a_pinned_remote_lets_go_of_its_core_once_another_program_keeps_it_busy() -> None:
    """``serve --cpus C --unpin-when-shared`` (what start_local's default pinning runs),
    stepped by an agent while a program started later keeps C busy: every thread of the
    remote then runs on every CPU it could before, and it goes on stepping."""
    allowed = frozenset(os.sched_getaffinity(0))
    cpu = max(allowed)
    args = ["--mode", "lockstep", "--cpus", str(cpu), "--unpin-when-shared"]
    with start_local("builtin.Catch-v0", 1, extra_args=args) as local:
        pid, log = local.processes[0].pid, local.logs[0]
        env = RemoteEnv(local.addresses[0], mode="lockstep", frameskip=FRAMES_A_STEP)
        try:
            env.reset(seed=0)
            env.step([])
            assert affinities(pid) == {frozenset({cpu})}
            with busy_loop(cpu):
                deadline = time.monotonic() + UNPIN_TIMEOUT
                while "--unpin-when-shared" not in log.read_text():  # (stepping meanwhile)
                    assert time.monotonic() < deadline, log.read_text()[-2000:]
                    for _ in range(STEPS_A_LOOK):
                        env.step([])
            said = log.read_text()
            assert f"CPU {cpu} is shared with other work" in said, said
            assert affinities(pid) == {allowed}
            for _ in range(3):
                env.step([])
        finally:
            env.close()

