"""How the remote starts programs (``runtimes.xdisplay.start_process``): without a real
fork, so programs started while the dm_env_rpc port's gRPC threads are busy start cleanly
(gRPC's fork handlers never run in them), and still die with the remote.

Real processes throughout: a ``universe-remote serve x11.XEyes-v0 --dm-env-rpc-port 0``
hammered by gRPC clients while the agent resets it (each x11 reset restarts xeyes), and a
Python process SIGKILLed under the program it started.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from rewarder.client import RewarderClient
from runtimes import xdisplay
from tests.optional import need_program
from tests.runtimes.display import alive

if TYPE_CHECKING:
    from tests.envserver.test_dm_env_rpc import Served

pytestmark = pytest.mark.timeout(180)

#: Seconds a remote may take to start, a gRPC call or a reset to answer, a killed
#: parent's program to die (it takes milliseconds; the machine may be loaded).
TIMEOUT: Final = 30.0
#: Program starts under gRPC load: on today's code every one logged gRPC's fork line.
STARTS: Final = 10
#: Threads sending dm_env_rpc requests while the programs start.
HAMMERS: Final = 4
#: gRPC's line when a real fork happens while its threads are busy.
FORK_LINE: Final = "skipping fork() handlers"


@pytest.fixture(autouse=True)
def _programs_installed() -> None:
    need_program("Xvnc", "xeyes", "setpriv")


@pytest.fixture
def xeyes(tmp_path: Path) -> Iterator[Served]:
    pytest.importorskip("dm_env_rpc")  # the dmenv extra
    from tests.envserver.test_dm_env_rpc import Served  # noqa: F811 (imported for real here)

    # gRPC's C core logs its fork line at INFO
    served = Served("x11.XEyes-v0", log=tmp_path / "serve.err", env={"GRPC_VERBOSITY": "INFO"})
    yield served
    served.close()


def hammer(port: int, stop: threading.Event, calls: list[int]) -> None:
    """Send dm_env_rpc requests (joins of a world that does not exist) until ``stop``."""
    import grpc
    from dm_env_rpc.v1 import connection, dm_env_rpc_pb2

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(TIMEOUT)
    with connection.Connection(channel) as client:
        while not stop.is_set():
            try:
                client.send(dm_env_rpc_pb2.JoinWorldRequest(world_name="no-such-world"))
            except Exception:  # noqa: BLE001 (refused: it is load, not an agent)
                pass
            calls.append(1)


async def test_x_programs_start_cleanly_while_grpc_is_busy(xeyes: Served) -> None:
    pytest.importorskip("dm_env_rpc")
    stop, calls = threading.Event(), []
    threads = [threading.Thread(target=hammer, args=(xeyes.port, stop, calls), daemon=True)
               for _ in range(HAMMERS)]
    for thread in threads:
        thread.start()
    try:
        async with RewarderClient(xeyes.rewarder) as agent:
            for seed in range(STARTS):
                await agent.reset(seed=seed, timeout=TIMEOUT)  # restarts xeyes
    finally:
        stop.set()
        for thread in threads:
            thread.join(TIMEOUT)
    assert len(calls) > STARTS  # gRPC was busy throughout
    xeyes.close()
    assert xeyes.log is not None
    log = xeyes.log.read_text(errors="replace")
    assert FORK_LINE not in log, "a program start forked for real (gRPC's fork handlers ran)"
    assert not re.search(r"xeyes exited with", log), xdisplay.log_tail(xeyes.log)


#: A parent that starts ``sleep`` the way the remote starts programs, prints its pid,
#: then waits to be killed.
PARENT: Final = textwrap.dedent("""
    import subprocess, sys, time
    from runtimes.xdisplay import start_process
    child = start_process(["sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(child.pid, flush=True)
    time.sleep(600)
""")


def test_a_program_dies_with_a_killed_remote() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        deadline = time.monotonic() + TIMEOUT  # setpriv execs the program: the pid is sleep's
        while Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
            assert time.monotonic() < deadline, "setpriv did not exec the program"
            time.sleep(0.01)  # a condition polled with a deadline
        parent.send_signal(signal.SIGKILL)
        parent.wait(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # a condition polled with a deadline
        assert not alive(pid), "the program outlived its SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait()

