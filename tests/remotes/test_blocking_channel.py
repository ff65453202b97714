"""The lockstep agent's blocking rewarder channel, with real remotes: it steps in the
caller's thread, keeps its seat while the agent thinks between steps (its keepalive
thread answers the remote's pings), still loses it when the agent's process is stopped,
and a step interrupted mid-flight is returned by the next one."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from remotes import RemoteEnv, RemoteVectorEnv, start_local
from remotes.local import LocalRemotes
from rewarder import keeper
from rewarder.blocking import BlockingRewarder
from rewarder.errors import ConnectionClosed, Refused
from rewarder.server import CLOSE_TIMEOUT, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT

#: Long enough that a connection nobody reads is dropped by the remote's keepalive.
DROPPED_AFTER = KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT + CLOSE_TIMEOUT + 1.0


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"]) as local:
        yield local


def test_lockstep_steps_run_in_the_callers_thread(catch: LocalRemotes) -> None:
    env = RemoteEnv(catch.addresses[0], catch.password, mode="lockstep", frameskip=2)
    try:
        env.reset(seed=1)
        seen: list[threading.Thread] = []
        rewarder = env._core.sessions[0].rewarder
        assert isinstance(rewarder, BlockingRewarder)
        original = rewarder.send_step

        def spy(*args: object, **kwargs: object) -> int:
            seen.append(threading.current_thread())
            return original(*args, **kwargs)  # type: ignore[arg-type]

        rewarder.send_step = spy  # type: ignore[method-assign]
        for _ in range(5):
            env.step([])
        assert seen == [threading.current_thread()] * 5
    finally:
        env.close()


def test_a_local_agent_steps_over_the_remotes_unix_socket_and_tcp_still_works(
    catch: LocalRemotes,
) -> None:
    """A local remote answers on its rewarder port's Unix twin, which a blocking channel
    dials first; ``local=False`` (or an older remote) keeps TCP, and both step alike."""
    port = catch.addresses[1].rewarder_port
    seen = {}
    for local in (True, False):
        rewarder = BlockingRewarder(f"127.0.0.1:{port}", password=catch.password, local=local)
        try:
            rewarder.connect()
            assert rewarder.over_unix is local
            rewarder.reset(mode="lockstep")
            seen[local] = [rewarder.step(frames=2).frame for _ in range(3)]
        finally:
            rewarder.close()
    for frames in seen.values():
        assert [frames[1] - frames[0], frames[2] - frames[1]] == [2, 2]


def test_an_agent_that_thinks_between_steps_keeps_its_seat(catch: LocalRemotes) -> None:
    env = RemoteEnv(catch.addresses[0], catch.password, mode="lockstep", frameskip=2)
    try:
        _, info = env.reset(seed=2)
        episode = info["episode_id"]
        env.step([])
        time.sleep(DROPPED_AFTER)  # the behaviour under test: a learner busy between steps
        _, _, terminated, truncated, info = env.step([])
        assert "remote.error" not in info and not truncated
        assert info["episode_id"] == episode
    finally:
        env.close()


def test_without_the_keeper_the_remote_drops_a_thinking_agent(
    catch: LocalRemotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above can fail: with nobody answering pings the seat is lost."""
    monkeypatch.setattr(keeper, "watch", lambda channel: None)
    env = RemoteEnv(catch.addresses[1], catch.password, mode="lockstep", frameskip=2)
    try:
        env.reset(seed=3)
        env.step([])
        time.sleep(DROPPED_AFTER)  # as above: nobody reads the socket meanwhile
        _, _, _, truncated, info = env.step([])
        assert truncated and "remote.error" in info
    finally:
        env.close()


STOPPED_AGENT = textwrap.dedent(
    """
    import sys
    from remotes import RemoteEnv
    env = RemoteEnv(sys.argv[1], sys.argv[2] or None, mode="lockstep")
    env.reset(seed=0)
    env.step([])
    print("stepped", flush=True)
    sys.stdin.read()
    """
)


def test_a_stopped_lockstep_agent_still_loses_its_seat(catch: LocalRemotes) -> None:
    """The keeper answers for a process that runs; a stopped process (SIGSTOP) answers
    nothing, and another agent gets the remote within the remote's keepalive."""
    address = str(catch.addresses[0])
    agent = subprocess.Popen(
        [sys.executable, "-c", STOPPED_AGENT, address, catch.password or ""], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().strip() == "stepped"
        os.kill(agent.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        rewarder = BlockingRewarder(catch.addresses[0].rewarder or "", password=catch.password,
                                    start_timeout=DROPPED_AFTER + 5)
        try:
            rewarder.connect()  # busy until the stopped agent's seat is freed
        finally:
            rewarder.close()
        assert time.monotonic() - stopped <= DROPPED_AFTER + 2.0
    finally:
        agent.kill()
        agent.wait()


def test_a_busy_remote_is_refused_after_the_start_timeout(catch: LocalRemotes) -> None:
    """Another process's agent holds the seat: the blocking channel says so."""
    env = RemoteEnv(catch.addresses[1], catch.password, mode="lockstep")
    try:
        env.reset(seed=4)
        other = BlockingRewarder(catch.addresses[1].rewarder or "", password=catch.password,
                                 start_timeout=1.0, client_id="another process")
        with pytest.raises(Refused, match="busy"):
            other.connect()
    finally:
        env.close()


def test_an_interrupted_vector_step_is_returned_by_the_next(catch: LocalRemotes) -> None:
    """Replies read before the interrupt, and those still out, come back in the next
    step, which sends those remotes nothing new: no reward or frame is lost."""
    envs = RemoteVectorEnv(catch.addresses, catch.password, mode="lockstep", frameskip=1)
    try:
        envs.reset(seed=5)
        rewarders = [s.rewarder for s in envs._core.sessions]
        sends = [r.send_step for r in rewarders]  # type: ignore[union-attr]

        def interrupt_after_sending(*args: object, **kwargs: object) -> int:
            sends[1](*args, **kwargs)  # type: ignore[arg-type]
            raise KeyboardInterrupt  # as Ctrl-C would, between two sends
        rewarders[1].send_step = interrupt_after_sending  # type: ignore[union-attr]
        with pytest.raises(KeyboardInterrupt):
            envs.step([[], []])
        rewarders[1].send_step = sends[1]  # type: ignore[union-attr]
        frames_before = [s.returned for s in envs._core.slots]
        _, _, _, truncated, info = envs.step([[], []])
        assert not truncated.any() and "remote.error" not in info
        # Remote 0's step was sent before the interrupt: returned now, one frame on.
        assert [int(f) for f in info["frame"]] == [f + 1 for f in frames_before]  # type: ignore[operator]
        _, _, _, _, info = envs.step([[], []])
        assert [int(f) for f in info["frame"]] == [f + 2 for f in frames_before]  # type: ignore[operator]
    finally:
        envs.close()


def test_a_step_after_the_remote_closed_the_channel_is_a_lost_connection(catch: LocalRemotes) -> None:
    """The remote closed the channel (a newer connection with its client id took the seat:
    a warm pool taking its remote back) and the keeper read the close frame: the next
    step's send is a ConnectionClosed the lockstep lane reports, not websockets' own
    InvalidState escaping from env.step (seen with the pool, issue 44)."""
    address = catch.addresses[1]
    assert address.rewarder is not None
    first = BlockingRewarder(address.rewarder, client_id="same-agent", local=False)
    second = BlockingRewarder(address.rewarder, client_id="same-agent", local=False)
    try:
        first.connect()
        second.connect()  # the remote closes `first` (4010, replaced)
        with first._lock:  # the keeper reads only a channel nobody holds
            fd = first.fileno()
            if fd >= 0:  # -1: the keeper read the close frame already
                readable, _, _ = select.select([fd], [], [], 10)
                assert readable, "the remote never closed the first channel"
                first.serve_idle()  # as the keeper would: the close frame is read
        with pytest.raises(ConnectionClosed, match="replaced"):
            first.send_step([], 1, "vnc")
    finally:
        first.close()
        second.close()
