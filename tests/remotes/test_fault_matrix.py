"""The fault matrix: kill -9 and SIGSTOP of a remote and of an agent, with and without a
password, in real time and in lockstep — every pair, each against real processes.

A remote that dies or stops is reported to its agent (``truncated`` with
``info["remote.error"]``, never a hang) and taken back by ``reset()`` within
:data:`RECONNECT_LIMIT` of greeting again. An agent that dies or stops frees the remote
for the next agent — at once when its process is gone, within :data:`HUNG_AGENT_LIMIT`
when it hangs — and the remote keeps serving (an observer kept connected all along sees
it send rewards and describes throughout). The tests under
:mod:`tests.remotes.test_faults` check rewards across these faults in depth; here every
combination must at least recover.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Final

import pytest

from remotes import RemoteEnv, start_local
from remotes.local import LocalRemotes
from remotes.loop import shared_loop
from rewarder.client import RewarderClient

#: The password of the "with a password" half of the matrix.
PASSWORD: Final = "matrix-pw"
#: A remote that greets again is stepping again within this many seconds.
RECONNECT_LIMIT: Final = 1.0
#: The remote frees the active slot of an agent that stopped answering within this (issue
#: 3/10: 5 s); a killed agent's slot frees as soon as its sockets close.
HUNG_AGENT_LIMIT: Final = 5.0
#: Slack on a 2-core machine for the new agent's own connect and first reset.
CONNECT_SLACK: Final = 2.0
#: The stall timeout here (the default, 10 s, would make the stopped-remote cases slow).
STALL_TIMEOUT: Final = 1.0
#: Seconds any wait for a condition may take before the test fails.
PATIENCE: Final = 30.0
#: Steps the agent under test takes before and after each fault.
STEPS: Final = 5

MODES: Final = ("realtime", "lockstep")
SIGNALS: Final = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}
PASSWORDS: Final = {"no-password": None, "password": PASSWORD}

#: A separate agent process: steps the remote until killed or stopped, saying when it is in.
AGENT: Final = """
import sys
from remotes import RemoteEnv
address, password, mode = sys.argv[1], sys.argv[2] or None, sys.argv[3]
env = RemoteEnv(address, password, mode=mode, frameskip=2 if mode == "lockstep" else 1)
env.reset(seed=0)
print("stepping", flush=True)
while True:
    env.step([("KeyEvent", "Left", True)])
"""


@pytest.fixture(params=list(PASSWORDS), ids=list(PASSWORDS))
def password(request: pytest.FixtureRequest) -> str | None:
    return PASSWORDS[request.param]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def remote(password: str | None, mode: str) -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 1, password=password, extra_args=["--mode", mode]) as local:
        yield local


def new_env(local: LocalRemotes, mode: str) -> RemoteEnv:
    return RemoteEnv(local.addresses[0], local.password, mode=mode, stall_timeout=STALL_TIMEOUT,
                     frameskip=2 if mode == "lockstep" else 1, start_timeout=PATIENCE)


def steps_well(env: RemoteEnv, n: int = STEPS) -> None:
    """``n`` steps, each with the remote connected and a frame of the remote's screen."""
    for _ in range(n):
        obs, _, terminated, truncated, info = env.step([])
        assert info["remote.connected"] is not False, info
        assert obs.shape == (210, 160, 3)
        if terminated or truncated:
            env.reset()


class Observer:
    """An observer on the remote all along: counts the describes and rewards it receives."""

    def __init__(self, local: LocalRemotes) -> None:
        address = local.addresses[0]
        assert address.rewarder is not None
        self.client = RewarderClient(address.rewarder, password=local.password, observer=True,
                                     reconnect=False, calibration_pings=0)
        shared_loop().run(self.client.start(), PATIENCE)

    def pings(self) -> float:
        """A ping round trip: the remote answers its observers whatever its agents do."""
        started = time.monotonic()
        shared_loop().run(self.client.ping(), PATIENCE)
        return time.monotonic() - started

    def close(self) -> None:
        shared_loop().run(self.client.close(), PATIENCE)


# A remote dies or stops under its agent ---------------------------------------------------


@pytest.mark.parametrize("fault", list(SIGNALS))
def test_a_remote_fault_is_reported_then_taken_back(
    remote: LocalRemotes, mode: str, fault: str
) -> None:
    env = new_env(remote, mode)
    pid = remote.processes[0].pid
    try:
        env.reset(seed=0)
        steps_well(env)
        os.kill(pid, SIGNALS[fault])
        faulted = time.monotonic()
        deadline = faulted + PATIENCE
        while time.monotonic() < deadline:
            _, _, terminated, truncated, info = env.step([])
            if truncated:
                break
            assert not terminated
        else:
            pytest.fail(f"the {fault}ped remote was never reported")
        assert info["remote.connected"] is False and info["remote.error"], info
        expected = "stalled" if fault == "stop" else "lost"
        assert expected in info["remote.error"], info["remote.error"]
        if fault == "stop":
            # Reported at the stall timeout, not before and not much after (never a hang).
            assert STALL_TIMEOUT - 0.1 <= time.monotonic() - faulted <= STALL_TIMEOUT + CONNECT_SLACK
            os.kill(pid, signal.SIGCONT)
            back = time.monotonic()
        else:
            remote.restart(0)
            back = time.monotonic()
        env.reset(seed=1)
        assert time.monotonic() - back <= RECONNECT_LIMIT + (CONNECT_SLACK if fault == "stop" else 0)
        steps_well(env)
    finally:
        if fault == "stop":
            os.kill(pid, signal.SIGCONT)
        env.close()


# An agent dies or stops while it drives the remote ----------------------------------------


class Agent:
    """An agent in its own process, stepping the remote until it is killed or stopped."""

    def __init__(self, local: LocalRemotes, mode: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", AGENT, local.address, local.password or "", mode],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(PATIENCE):
            self.kill()
            _, err = self.process.communicate(timeout=PATIENCE)
            pytest.fail(f"the agent never started stepping: {err[-2000:]}")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == "stepping":
                self.ready.set()

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(PATIENCE)


@pytest.mark.parametrize("fault", list(SIGNALS))
def test_an_agent_fault_frees_the_remote_for_the_next_agent(
    remote: LocalRemotes, mode: str, fault: str
) -> None:
    observer = Observer(remote)
    agent = Agent(remote, mode)
    env: RemoteEnv | None = None
    try:
        agent.signal(SIGNALS[fault])
        faulted = time.monotonic()
        # The remote goes on answering while its agent is gone or hung.
        assert observer.pings() < 1.0
        env = new_env(remote, mode)
        env.reset(seed=0)
        took = time.monotonic() - faulted
        limit = (HUNG_AGENT_LIMIT if fault == "stop" else 0.0) + CONNECT_SLACK
        assert took <= limit, f"the next agent got in {took:.2f} s after the {fault}"
        steps_well(env)
        if mode == "lockstep":
            # Lockstep is the new agent's: frames advance only when it steps.
            first = env.step([])[4]["frame"]
            second = env.step([])[4]["frame"]
            assert second - first == 2
        assert observer.pings() < 1.0
    finally:
        agent.kill()
        if env is not None:
            env.close()
        observer.close()
