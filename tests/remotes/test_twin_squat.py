"""A process squatting a rewarder port's Unix twin gets no agent and no password (issue
41, item 1): with real remotes, a lockstep agent still steps (over TCP), the squatter
receives a connection and not one byte, and the remote says at WARNING that another
process holds its name. Both ways a name gets squatted: before the remote starts, and
between a stop and a restart on the same port. The remote's own twin is still used."""

from __future__ import annotations

import base64
import queue
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from remotes import RemoteEnv, start_local
from rewarder.blocking import BlockingRewarder
from rewarder.local_socket import SUPPORTED

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="abstract Unix sockets are Linux's")

PASSWORD: Final = "s3cret-pw"
#: What the squatter must never see: the handshake's header and the password, plain or
#: as HTTP Basic carries it.
SECRETS: Final = (b"authorization", PASSWORD.encode(), base64.b64encode(f"{PASSWORD}:".encode()))
#: Seconds for a process to start, a remote to serve, the squatter to see an EOF (loose:
#: a loaded 2-core machine).
START_TIMEOUT: Final = 60.0
SETTLE_TIMEOUT: Final = 20.0
STEPS: Final = 5
SQUATTER: Final = Path(__file__).with_name("twin_squatter.py")
_ADDRESS_LINE: Final = re.compile(r"agent address\s+(vnc://127\.0\.0\.1:\d+\+\d+)")
#: The remote's warning when its name is taken (rewarder.local_socket.unavailable).
WARNING: Final = re.compile(r"WARNING .*another process holds its name .*will use TCP")


class Squatter:
    """tests/remotes/twin_squatter.py on ``port``: what it was sent, by connection."""

    def __init__(self, port: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SQUATTER), str(port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=lambda: [self.lines.put(line.strip()) for line in stdout],
                         daemon=True).start()
        assert self.lines.get(timeout=START_TIMEOUT) == "ready"
        self.accepted = 0
        self.ended = 0
        self.received = b""

    def settle(self) -> None:
        """Wait until every connection it accepted has ended (the agent closed it)."""
        while self.accepted == 0 or self.ended < self.accepted:
            kind, _, rest = self.lines.get(timeout=SETTLE_TIMEOUT).partition(" ")
            if kind == "accepted":
                self.accepted += 1
            elif kind == "eof":
                self.ended += 1
            elif kind == "data":
                self.received += bytes.fromhex(rest.partition(" ")[2])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def squatters() -> Iterator[list[Squatter]]:
    made: list[Squatter] = []
    yield made
    for each in made:
        each.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def step_and_check(address: str, squatter: Squatter | None) -> None:
    """A lockstep agent steps; over TCP, never through ``squatter``, if there is one."""
    env = RemoteEnv(address, PASSWORD, mode="lockstep", frameskip=2, start_timeout=START_TIMEOUT)
    try:
        env.reset(seed=1)
        for _ in range(STEPS):
            _, _, _, truncated, info = env.step([])
            assert not truncated and "remote.error" not in info, info
        rewarder = env._core.sessions[0].rewarder
        assert isinstance(rewarder, BlockingRewarder)
        over_unix = rewarder.over_unix
    finally:
        env.close()
    if squatter is None:
        assert over_unix, "the remote's own twin was not used"
        return
    squatter.settle()
    leaked = [secret for secret in SECRETS if secret in squatter.received.lower()]
    assert not leaked and squatter.received == b"", (
        f"the squatter was sent {len(squatter.received)} bytes, with {leaked}: "
        f"{squatter.received[:300]!r}"
    )
    assert not over_unix


def test_a_name_squatted_before_the_remote_starts_gets_no_agent(
    tmp_path: Path, squatters: list[Squatter]
) -> None:
    port = free_port()
    squatters.append(squatter := Squatter(port))
    log = tmp_path / "remote.log"
    with open(log, "wb") as stderr:
        serve = subprocess.Popen(
            [sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0", "--mode", "lockstep",
             "--password", PASSWORD, "--host", "127.0.0.1", "--vnc-port", "0",
             "--rewarder-port", str(port)],
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
        )
    try:
        assert serve.stdout is not None
        found: queue.Queue[str] = queue.Queue()
        stdout = serve.stdout

        def banner() -> None:
            for line in stdout:  # then keep draining it
                if match := _ADDRESS_LINE.search(line):
                    found.put(match[1])
            found.put("")

        threading.Thread(target=banner, daemon=True).start()
        address = found.get(timeout=START_TIMEOUT)
        assert address, f"the remote exited: {log.read_text(errors='replace')[-2000:]}"
        step_and_check(address, squatter)
        assert WARNING.search(log.read_text()), log.read_text()
    finally:
        serve.terminate()
        serve.wait(30)


def test_a_name_squatted_between_a_stop_and_a_restart_gets_no_agent(
    squatters: list[Squatter]
) -> None:
    with start_local("builtin.Catch-v0", password=PASSWORD, extra_args=["--mode", "lockstep"],
                     games_per_process=1) as local:
        step_and_check(local.address, None)  # its own twin, before anyone squats it
        assert not WARNING.search(local.logs[0].read_text())
        process = local.processes[0]
        process.terminate()
        process.wait(30)
        squatters.append(squatter := Squatter(local.addresses[0].rewarder_port))
        local.restart(0, timeout=START_TIMEOUT)
        step_and_check(local.address, squatter)
        assert WARNING.search(local.logs[0].read_text()), local.logs[0].read_text()[-2000:]
