"""Local remotes (``remotes.local``): restart from any thread, and no remote outlives us."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Final

import pytest

from remotes import RemoteVectorEnv, capacity
from remotes.capacity import pinned_cpus
from remotes.local import (
    DEFAULT_GAMES,
    STOP_TIMEOUT,
    LocalRemotes,
    default_games_per_process,
    probe_remote,
    start_local,
)
from remotes.loop import shared_loop
from tests.busy_loop import affinities

#: Seconds we watch a restarted remote after its starting thread ended: a remote killed
#: by PR_SET_PDEATHSIG is gone within milliseconds.
WATCH: Final = 1.0
#: Seconds a remote gets to answer a probe.
PROBE_TIMEOUT: Final = 10.0


def _answers(local: LocalRemotes, index: int) -> None:
    """Both channels of remote ``index`` answer (raises if not)."""
    shared_loop().run(probe_remote(local.addresses[index], local.password, PROBE_TIMEOUT), PROBE_TIMEOUT + 5)


def _dead(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (it no longer serves either way)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_restart_from_a_thread_outlives_the_thread() -> None:
    with start_local("builtin.Catch-v0") as local:
        local.kill(0)
        errors: list[BaseException] = []

        def restart() -> None:
            try:
                local.restart(0)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        worker = threading.Thread(target=restart, name="short-lived")
        worker.start()
        worker.join()
        assert not errors, errors
        time.sleep(WATCH)
        assert local.processes[0].poll() is None, "the remote died with the thread that restarted it"
        _answers(local, 0)


def test_start_from_a_thread_outlives_the_thread() -> None:
    started: list[LocalRemotes] = []
    worker = threading.Thread(target=lambda: started.append(start_local("builtin.Catch-v0")))
    worker.start()
    worker.join()
    (local,) = started
    with local:
        time.sleep(WATCH)
        assert local.processes[0].poll() is None
        _answers(local, 0)


def test_remotes_restarted_from_a_thread_still_die_with_this_process(tmp_path: Path) -> None:
    """The agent is killed with SIGKILL (no atexit, no close): its remotes go too."""
    script = textwrap.dedent(
        """
        import sys, threading
        from remotes.local import start_local

        local = start_local("builtin.Catch-v0")
        local.kill(0)
        worker = threading.Thread(target=local.restart, args=(0,))
        worker.start()
        worker.join()
        print(local.processes[0].pid, flush=True)
        sys.stdin.read()  # until the test kills us
        """
    )
    agent = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2], env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    try:
        assert agent.stdout is not None
        remote_pid = int(agent.stdout.readline())
        time.sleep(WATCH)
        assert not _dead(remote_pid), "the restarted remote died before its agent did"
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        deadline = time.monotonic() + STOP_TIMEOUT
        while not _dead(remote_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _dead(remote_pid), "the remote outlived its agent"
    finally:
        agent.kill()
        agent.wait()


def test_lockstep_remotes_share_one_process_per_core_by_default() -> None:
    """Lockstep's default (``python -m benchmarks lockstep_density``): as many processes
    as cores, the games split evenly; real time keeps a process per remote up to
    SEPARATE_UNTIL; games_per_process=1 still gives each its own."""
    assert default_games_per_process(8, lockstep=True, cores=2) == 4
    assert default_games_per_process(3, lockstep=True, cores=2) == 2
    assert default_games_per_process(2, lockstep=True, cores=4) == 1
    assert default_games_per_process(64, lockstep=True, cores=2) == DEFAULT_GAMES
    assert default_games_per_process(8) == 1
    with start_local("builtin.Catch-v0", 3, extra_args=["--mode", "lockstep"]) as local:
        cores = os.cpu_count() or 1
        assert len(local.processes) == min(3, cores) and sum(local.games) == 3
        env = RemoteVectorEnv(local, mode="lockstep")
        try:
            env.reset(seed=0)
            _, _, _, truncated, _ = env.step([[], [], []])
            assert not truncated.any()
        finally:
            env.close()


def test_a_lockstep_vector_pins_one_process_to_each_core_when_it_has_one_per_core() -> None:
    """start_local's ``pin`` (remotes.capacity.pinned_cpus): by default a lockstep
    vector with a process per core is pinned one to a core, unless another program keeps
    one of them busy (``busy``: remotes.busy_cpus); real time, a lone process, and
    fewer processes than cores (another agent's vector would take the same first cores)
    are not; True pins round the cores (busy or not), False never."""
    assert pinned_cpus(2, lockstep=True, allowed=[0, 1], busy=()) == [0, 1]
    assert pinned_cpus(4, lockstep=True, allowed=[2, 3, 5, 7], busy=[9]) == [2, 3, 5, 7]
    assert pinned_cpus(2, lockstep=True, allowed=[0, 1], busy=[1]) == [None, None]
    assert pinned_cpus(2, lockstep=True, pin=True, allowed=[0, 1], busy=[1]) == [0, 1]
    assert pinned_cpus(2, lockstep=False, allowed=[0, 1]) == [None, None]
    assert pinned_cpus(1, lockstep=True, allowed=[0]) == [None]
    assert pinned_cpus(2, lockstep=True, allowed=[0, 1, 2, 3]) == [None, None]
    assert pinned_cpus(3, lockstep=False, pin=True, allowed=[4, 6]) == [4, 6, 4]
    assert pinned_cpus(2, lockstep=True, pin=False, allowed=[0, 1]) == [None, None]
    with pytest.raises(ValueError, match="needs Linux"):
        pinned_cpus(2, lockstep=True, pin=True, allowed=[])


def test_pinned_processes_run_every_thread_on_their_core_and_a_restart_keeps_it() -> None:
    """``pin=True`` (what a lockstep vector gets by default with a process per core): each
    process and every thread it starts later (the rewarder's reader, once it steps) runs
    on its own CPU; a restarted process is pinned as it was; ``pin=False`` leaves them be."""
    allowed = sorted(os.sched_getaffinity(0))
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"], games_per_process=1,
                     pin=True) as local:
        want = [{frozenset({allowed[i % len(allowed)]})} for i in range(2)]
        assert local.cpus == [allowed[i % len(allowed)] for i in range(2)]
        env = RemoteVectorEnv(local, mode="lockstep")
        try:
            env.reset(seed=0)
            for _ in range(3):
                env.step([[], []])
            threads = [len(os.listdir(f"/proc/{p.pid}/task")) for p in local.processes]
            assert [affinities(p.pid) for p in local.processes] == want, threads
            local.kill(1)
            local.restart(1)
            assert affinities(local.processes[1].pid) == want[1]
            assert f"running on CPU {local.cpus[1]} only (--cpus)" in local.logs[1].read_text()
            # (the caller's pin=True: they stay pinned whatever shares their cores)
            assert not any(b"--unpin-when-shared" in _cmdline(p.pid) for p in local.processes)
        finally:
            env.close()
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"], pin=False) as free:
        assert free.cpus == [None] * len(free.processes)
        assert all(affinities(p.pid) == {frozenset(allowed)} for p in free.processes)
    # the caller's own --cpus: kept, not pinned over
    mine = ["--mode", "lockstep", "--cpus", str(allowed[-1])]
    with start_local("builtin.Catch-v0", 2, extra_args=mine, games_per_process=1) as chosen:
        assert chosen.cpus == [None, None]
        assert all(affinities(p.pid) == {frozenset({allowed[-1]})} for p in chosen.processes)
    with pytest.raises(ValueError, match="leave --cpus out of extra_args"):
        start_local("builtin.Catch-v0", 2, extra_args=mine, pin=True)


def test_the_default_pinning_lets_go_of_a_core_another_program_shares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """start_local's own pinning (pin=None, on a quiet machine: no core busy as it starts)
    runs each process with ``serve --unpin-when-shared``, a restart too; what that does:
    tests/envserver/test_cpus.py."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs (CI has them)")
    monkeypatch.setattr(capacity, "busy_cpus", lambda cpus: [])  # (quiet, whatever runs beside)
    with start_local("builtin.Catch-v0", len(allowed), extra_args=["--mode", "lockstep"],
                     games_per_process=1) as local:
        assert local.cpus == allowed
        assert all(b"--unpin-when-shared" in _cmdline(p.pid) for p in local.processes)
        local.kill(0)
        local.restart(0)
        assert b"--unpin-when-shared" in _cmdline(local.processes[0].pid)
        assert affinities(local.processes[0].pid) == {frozenset({allowed[0]})}


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def test_mcp_ports_are_read_and_kept_across_a_restart() -> None:
    """``serve --mcp-port 0`` in ``extra_args``: each remote's MCP port is read from the banner
    (game 0's own line, the others' ``(mcp N)``), and a restart serves it on the same port."""
    import socket

    with start_local("builtin.Catch-v0", 3, extra_args=["--mcp-port", "0"], games_per_process=2) as local:
        ports = list(local.mcp_ports)
        assert len(set(ports)) == 3 and all(isinstance(p, int) and p > 0 for p in ports), ports
        assert local.process_index(2) == 1  # one process of two games and one of one
        local.kill(2)
        local.restart(2)
        assert local.mcp_ports == ports
        socket.create_connection(("127.0.0.1", ports[2]), timeout=PROBE_TIMEOUT).close()
    with start_local("builtin.Catch-v0") as plain:
        assert plain.mcp_ports == [None]
