"""A blocking client's send never outlives its call's timeout, and Ctrl-C ends it: a
remote that takes no bytes (a server that floods pings and reads nothing; a real remote
stopped with SIGSTOP, over its Unix twin and over TCP) ends the call within its timeout
as a lost connection (SendTimeout), and a SIGINT while it waits for room raises
KeyboardInterrupt at once. Each case has a watchdog that unblocks the peer (closes it,
or lets the remote go on) well after the timeout, so a client that would wait for ever
fails instead."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from remotes import start_local
from remotes.local import LocalRemotes
from rewarder import interrupts
from rewarder.blocking import BlockingRewarder
from rewarder.errors import ConnectionClosed, SendTimeout

from .scripted import ScriptedServer

#: The call's timeout in the timeout cases.
TIMEOUT = 2.0
#: Slack past a deadline for a loaded 2-core machine.
SLACK = 3.0
#: When the watchdog unblocks the peer: far past TIMEOUT + SLACK.
WATCHDOG = 12.0
#: Seconds the SIGINT may wait for the call to be stuck in its send.
STUCK_WITHIN = 20.0
#: A restore this big fills every buffer between the client and a peer that reads nothing
#: (TCP: up to 4 MiB of send buffer and a window that does not grow; Unix: ~200 kB).
BIG_STATE = b"\x00" * (12 << 20)


def waiting_for_room() -> bool:
    """Whether the main thread's send waits for the peer to take bytes (is in
    :func:`rewarder.interrupts.send_whole`'s wait)."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if frame.f_code is _WAIT_CODE:
            return True
        frame = frame.f_back
    return False


_WAIT_CODE = getattr(getattr(interrupts, "_send_rest", None), "__code__", None)


def interrupted(call: Callable[[], object]) -> float | None:
    """Run ``call`` here (the main thread); once its send waits for the peer to take
    bytes (:func:`waiting_for_room`), another thread sends this thread a SIGINT. Seconds
    from the signal to the KeyboardInterrupt (None: the call ended otherwise; its
    exception, if any, propagates)."""
    assert threading.current_thread() is threading.main_thread()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    sent: list[float] = []
    done = threading.Event()

    def fire() -> None:
        deadline = time.monotonic() + STUCK_WITHIN
        while not done.wait(0.01) and time.monotonic() < deadline:
            if waiting_for_room():
                sent.append(time.monotonic())
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                return

    timer = threading.Thread(target=fire, daemon=True)
    timer.start()
    try:
        call()
    except KeyboardInterrupt:
        assert sent, "interrupted before the signal"
        return time.monotonic() - sent[0]
    finally:
        done.set()
        try:
            timer.join()
        except KeyboardInterrupt:  # (the call ended as the signal came: the test fails)
            pass
    return None


def flood(server: ScriptedServer) -> None:
    """Once the client's request starts (its first byte, read), pings as fast as the
    socket takes them; never another read."""
    assert server.sock is not None
    server.sock.recv(1)
    ping = b"\x89\x7d" + b"p" * 125
    burst = ping * 512
    while not server.stop.is_set():
        server.send(burst)


@pytest.fixture
def flooded() -> Iterator[tuple[BlockingRewarder, ScriptedServer]]:
    with ScriptedServer(flood, rcvbuf=4096) as server:
        rewarder = BlockingRewarder(server.address, start_timeout=10, calibration_pings=0, local=False)
        watchdog = threading.Timer(WATCHDOG, server.close)
        try:
            rewarder.connect()
            watchdog.start()
            yield rewarder, server
        finally:
            watchdog.cancel()
            rewarder.close()


def test_a_server_that_floods_pings_and_reads_nothing_ends_the_wait_in_time(
    flooded: tuple[BlockingRewarder, ScriptedServer],
) -> None:
    """The pongs fill the socket: the connection is given up, the wait ends."""
    rewarder, _ = flooded
    started = time.monotonic()
    with pytest.raises((ConnectionClosed, TimeoutError)):
        rewarder.step([], 1, timeout=TIMEOUT)
    assert time.monotonic() - started < TIMEOUT + SLACK
    assert not rewarder.connected


def test_a_request_the_flooding_server_does_not_take_times_out(
    flooded: tuple[BlockingRewarder, ScriptedServer],
) -> None:
    rewarder, _ = flooded
    started = time.monotonic()
    with pytest.raises(SendTimeout, match="stopped, or it does not read"):
        rewarder.restore(state=BIG_STATE, timeout=TIMEOUT)
    assert time.monotonic() - started < TIMEOUT + SLACK
    assert not rewarder.connected


def test_ctrl_c_ends_a_send_to_the_flooding_server(flooded: tuple[BlockingRewarder, ScriptedServer]) -> None:
    rewarder, _ = flooded
    late = interrupted(lambda: rewarder.restore(state=BIG_STATE, timeout=60.0))
    assert late is not None and late < SLACK
    assert not rewarder.connected  # a frame may be half out: the connection is given up


@pytest.fixture(scope="module")
def remote() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 1, extra_args=["--mode", "lockstep"], games_per_process=1) as local:
        yield local


@pytest.fixture(params=["unix", "tcp"])
def stopped(remote: LocalRemotes, request: pytest.FixtureRequest) -> Iterator[BlockingRewarder]:
    """A channel to the remote (over its Unix twin, or TCP), the remote then stopped."""
    port = remote.addresses[0].rewarder_port
    rewarder = BlockingRewarder(f"127.0.0.1:{port}", password=remote.password, start_timeout=20,
                                calibration_pings=0, local=request.param == "unix")
    pid = remote.processes[0].pid
    watchdog = threading.Timer(WATCHDOG, os.kill, (pid, signal.SIGCONT))
    try:
        rewarder.connect()
        assert rewarder.over_unix is (request.param == "unix")
        rewarder.reset(mode="lockstep")
        os.kill(pid, signal.SIGSTOP)
        watchdog.start()
        yield rewarder
    finally:
        watchdog.cancel()
        os.kill(pid, signal.SIGCONT)
        rewarder.close()


def test_a_send_to_a_stopped_remote_ends_within_its_timeout(stopped: BlockingRewarder) -> None:
    started = time.monotonic()
    with pytest.raises(SendTimeout):
        stopped.restore(state=BIG_STATE, timeout=TIMEOUT)
    assert time.monotonic() - started < TIMEOUT + SLACK
    assert not stopped.connected


def test_ctrl_c_ends_a_send_to_a_stopped_remote(stopped: BlockingRewarder) -> None:
    late = interrupted(lambda: stopped.restore(state=BIG_STATE, timeout=60.0))
    assert late is not None and late < SLACK
    assert not stopped.connected


