"""A lockstep connection read on a thread of its own (rewarder/link_reader.py), on real
``serve`` processes: the thread starts with the first step a connection sends, hands the
socket back for a request that waits (a reset) and comes back after it, leaves other
clients of the game a normal remote, and ends with its connection — closed mid-step, or
the process stopped with Ctrl-C; a TLS connection keeps the loop's reads."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from remotes import start_local
from remotes.local import LocalRemotes
from rewarder.batch_messages import BatchStepReply
from rewarder.blocking import BlockingRewarder
from rewarder.protocol import StepReply
from rewarder.tls import CA_ENV, client_context
from tests.tls import Certs, certs_fixture  # noqa: F401
from tests.wire import WireClient

WAIT = 10.0
#: Seconds a stopped process may take to exit (its clients get CLOSE_TIMEOUT, 2 s, to
#: hear why; a loaded machine adds to it).
EXIT_WITHIN = 30.0


@pytest.fixture(scope="module")
def two_games() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"], games_per_process=2) as local:
        yield local


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait (bounded) for ``condition``, which another process makes true."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _agent(local: LocalRemotes, game: int, client_id: str = "agent-r", unix: bool = True) -> BlockingRewarder:
    """A lockstep agent on ``game``: over the port's Unix twin, or (``unix`` False) TCP."""
    channel = BlockingRewarder(f"127.0.0.1:{local.addresses[game].rewarder_port}", client_id=client_id,
                               local=unix)
    channel.connect()
    channel.wait_reply(channel.send_reset(mode="lockstep"), time.monotonic() + WAIT)
    return channel


def _batch(channel: BlockingRewarder, episodes: list[int], frames: int = 2) -> BatchStepReply:
    sent = channel.send_batch_step([(g, e, [], frames) for g, e in enumerate(episodes)])
    reply = channel.wait_reply(sent, time.monotonic() + WAIT)
    assert isinstance(reply, BatchStepReply)
    return reply


async def test_a_stepping_connection_is_read_on_a_thread_that_hands_over_for_a_reset_and_ends_with_it(
    two_games: LocalRemotes,
) -> None:
    pid = two_games.processes[0].pid
    first, second = _agent(two_games, 0), _agent(two_games, 1)
    observer = await WireClient.open(two_games.addresses[0].rewarder_port, observer=True)
    try:
        base = _threads(pid)
        for _ in range(2):  # (a runtime's first step runs sliced, in a task: its speed is unknown)
            reply = _batch(first, [first.episode_id, second.episode_id])
        assert all(isinstance(s, StepReply) for s in reply.steps)
        assert _threads(pid) == base + 1  # the batch's connection is read by its own thread
        alone = second.step((), 3)  # a lockstep v0.env.step: its connection gets one too
        assert _threads(pid) == base + 2
        frames = [s.frame for s in reply.steps if isinstance(s, StepReply)]
        for _ in range(50):
            reply = _batch(first, [first.episode_id, second.episode_id])
        stepped = [s.frame for s in reply.steps if isinstance(s, StepReply)]
        assert stepped == [frames[0] + 100, alone.frame + 100]
        await observer.send("v0.control.ping")  # the loop still serves the game's others
        await observer.recv_until("v0.reply.control.ping")
        # A reset waits in a task on the loop: the thread hands the socket back, and the
        # next step starts one again.
        first.wait_reply(first.send_reset(mode="lockstep"), time.monotonic() + WAIT)
        _until(lambda: _threads(pid) == base + 1, "the reader thread did not end for the reset")
        reply = _batch(first, [first.episode_id, second.episode_id])
        assert all(isinstance(s, StepReply) for s in reply.steps), reply.steps
        assert _threads(pid) == base + 2
    finally:
        first.close()
        second.close()
        await observer.close()
    _until(lambda: _threads(pid) == base, "the reader threads outlived their connections")


def test_a_connection_that_closes_mid_step_ends_cleanly(two_games: LocalRemotes) -> None:
    """Closed with its request unanswered (over TCP: the Unix twin's case is above): the
    thread ends, the game serves the next agent."""
    pid = two_games.processes[0].pid
    base = _threads(pid)
    for _ in range(3):
        channel = _agent(two_games, 0, "agent-gone", unix=False)
        for _ in range(2):
            _batch(channel, [channel.episode_id])
        assert _threads(pid) == base + 1
        channel.send_batch_step([(0, channel.episode_id, [], 2)])
        sock = channel._sock  # cut at once, the reply unread, without a closing handshake
        assert isinstance(sock, socket.socket) and sock.family == socket.AF_INET
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")  # (a reset)
        channel.close()
        _until(lambda: _threads(pid) == base, "the reader thread outlived its connection")
    channel = _agent(two_games, 0, "agent-next")
    try:
        reply = _batch(channel, [channel.episode_id])
        assert isinstance(reply.steps[0], StepReply)
    finally:
        channel.close()


def test_ctrl_c_stops_a_process_whose_connection_is_read_on_a_thread() -> None:
    serve = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0", "--mode", "lockstep",
         "--vnc-port", "0", "--rewarder-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert serve.stdout is not None
        port = None
        for line in serve.stdout:  # the banner names the ports
            if "agent address" in line:
                port = int(line.rsplit("+", 1)[1].split()[0])
                break
        assert port is not None
        base = _threads(serve.pid)
        channel = BlockingRewarder(f"127.0.0.1:{port}", client_id="agent-c")
        channel.connect()
        channel.wait_reply(channel.send_reset(mode="lockstep"), time.monotonic() + WAIT)
        for _ in range(2):
            channel.step((), 2)
        assert _threads(serve.pid) == base + 1
        serve.send_signal(signal.SIGINT)
        assert serve.wait(EXIT_WITHIN) == 0
        channel.close()
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def test_a_tls_connection_steps_with_the_loop_reading_it(certs: Certs) -> None:
    """TLS bytes are the TLS layer's to read: its stepping connection keeps the loop's reads."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CA_ENV, str(certs.ca))  # (start_local's readiness probe verifies too)
        local = start_local("builtin.Catch-v0", 1, extra_args=[
            "--mode", "lockstep", "--tls-cert", str(certs.cert), "--tls-key", str(certs.key)])
    with local:
        pid = local.processes[0].pid
        base = _threads(pid)
        channel = BlockingRewarder(f"127.0.0.1:{local.addresses[0].rewarder_port}", client_id="agent-t",
                                   tls=client_context(str(certs.ca)))
        channel.connect()
        try:
            began = channel.wait_reply(channel.send_reset(mode="lockstep"), time.monotonic() + WAIT).frame
            for _ in range(5):
                reply = channel.step((), 2)
            assert reply.frame == began + 10
            assert _threads(pid) == base
        finally:
            channel.close()
