"""Whom an agent trusts on a rewarder port's Unix twin (rewarder/local_peer.py): only the
process that holds ``127.0.0.1:PORT`` (on 127.0.0.1 or 0.0.0.0), as the kernel and /proc
say; anyone else gets a connection closed unwritten, and the agent dials TCP. Real
sockets of this process; a squatter in another process and real remotes are in
tests/remotes/test_twin_squat.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Final

import pytest

from rewarder import local_peer, local_socket

pytestmark = pytest.mark.skipif(not local_socket.SUPPORTED, reason="abstract Unix sockets are Linux's")

#: A dial that must not wait may still take this long on a loaded machine (it used to
#: wait its whole timeout, DIAL_TIMEOUT, on a name that accepts nobody).
PROMPT: Final = 5.0
DIAL_TIMEOUT: Final = 30.0


def _listen_tcp(host: str, port: int = 0) -> socket.socket:
    sock = socket.socket()
    sock.bind((host, port))
    sock.listen()
    return sock


@pytest.fixture(params=["sock_diag", "/proc/net/tcp"])
def lookup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way the port's listener is found: the kernel's socket table, and /proc where
    that is not available (as if sock_diag failed)."""
    if request.param == "/proc/net/tcp":
        def unavailable(port: int) -> None:
            raise OSError("no sock_diag here")
        monkeypatch.setattr(local_peer, "_diag_listener", unavailable)
    return str(request.param)


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for each in made:
        each.close()


def _twin(port: int, backlog: int = 8) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(local_socket.name(port))
    sock.listen(backlog)
    return sock


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_the_process_that_holds_the_port_is_trusted(
    host: str, lookup: str, sockets: list[socket.socket]
) -> None:
    sockets.append(tcp := _listen_tcp(host))
    port = tcp.getsockname()[1]
    assert local_peer.listener(port) == (os.fstat(tcp.fileno()).st_ino, os.getuid())
    sockets.append(_twin(port))
    sock = local_peer.dial(port, DIAL_TIMEOUT)
    assert sock is not None
    sockets.append(sock)
    assert sock.gettimeout() == DIAL_TIMEOUT


def test_a_name_whose_port_nobody_holds_is_not_used(
    lookup: str, sockets: list[socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    sockets.append(other := _listen_tcp("127.0.0.2"))  # the same number elsewhere: not 127.0.0.1
    port = other.getsockname()[1]
    assert local_peer.listener(port) is None
    sockets.append(_twin(port))
    with caplog.at_level("DEBUG", logger=local_peer.__name__):
        assert local_peer.dial(port, DIAL_TIMEOUT) is None
    assert f"nothing listens on 127.0.0.1:{port}; dialling TCP" in caplog.text


def test_a_name_held_by_a_process_without_the_port_is_not_used(
    lookup: str, sockets: list[socket.socket]
) -> None:
    """The port is another process's; the name ours: the name's peer (us) holds no such
    socket (as a squatter beside a real remote)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',0)); "
         "s.listen(); print(s.getsockname()[1], flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        sockets.append(_twin(port))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sockets.append(sock)
        sock.connect(local_socket.name(port))
        why = local_peer.refusal(sock, port)
        assert why is not None and f"does not hold 127.0.0.1:{port}" in why
        assert local_peer.dial(port, DIAL_TIMEOUT) is None
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)


def test_a_name_that_accepts_nobody_is_given_up_at_once(sockets: list[socket.socket]) -> None:
    """A listener whose backlog is full (it never accepts) costs no wait."""
    sockets.append(tcp := _listen_tcp("127.0.0.1"))
    port = tcp.getsockname()[1]
    sockets.append(_twin(port, backlog=0))
    for _ in range(4):  # fill the backlog (its length depends on the kernel: at most a few)
        pending = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        pending.setblocking(False)
        sockets.append(pending)
        try:
            pending.connect(local_socket.name(port))
        except BlockingIOError:
            break
    else:
        pytest.fail("the backlog never filled")
    started = time.monotonic()
    assert local_peer.dial(port, DIAL_TIMEOUT) is None
    assert time.monotonic() - started < PROMPT


def test_listeners_reads_this_namespaces_listening_sockets(sockets: list[socket.socket]) -> None:
    sockets.append(tcp := _listen_tcp("127.0.0.1"))
    port = tcp.getsockname()[1]
    (found,) = local_peer.listeners(port)
    assert found.port == port and found.address == local_peer.proc_address("127.0.0.1")
    assert (found.inode, found.uid) == (os.fstat(tcp.fileno()).st_ino, os.getuid())
