"""Lockstep frame segments in /dev/shm and real remotes (``universe-remote serve``): a
killed remote's segment is removed when the next remote starts and by the agent that was
reading it, a living remote's never, whatever the pid in its name says (a remote in
another PID namespace sharing /dev/shm, as ``docker --ipc=host`` runs one, or a pid
reused). Liveness is the segment's lock (rewarder/shm.py)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from remotes import RemoteEnv, start_local
from rewarder import shm
from rewarder.client import RewarderClient
from rewarder.protocol import OBS_SHM

pytestmark = pytest.mark.skipif(not shm.available(), reason="no writable /dev/shm (Linux only)")

#: Seconds any one wait may take.
TIMEOUT = 30.0

#: The first process of a new PID namespace: forks the remote as pid ``argv[1]`` there
#: (the kernel's ns_last_pid), waits for it, and exits as it did.
NAMESPACE_INIT = textwrap.dedent("""
    import os, sys
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(int(sys.argv[1]) - 1))
    child = os.fork()
    if child == 0:
        os.execv(sys.executable, [sys.executable, "-m", "universe_remote", "serve", *sys.argv[2:]])
    os._exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) & 0xFF)
""")


@dataclass
class Served:
    process: asyncio.subprocess.Process  # serve, or unshare around it
    pid: int  # serve's pid here
    rewarder: str

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@asynccontextmanager
async def serve(namespace_pid: int | None = None) -> AsyncIterator[Served]:
    """``universe-remote serve builtin.Catch-v0`` on free ports, until its banner; with
    ``namespace_pid``, in a PID namespace of its own (``unshare --pid``) as that pid there,
    sharing this /dev/shm. Stopped after (SIGTERM) unless the test killed it."""
    args = ["builtin.Catch-v0", "--mode", "lockstep", "--rewarder-port", "0", "--vnc-port", "0"]
    if namespace_pid is None:
        command = [sys.executable, "-m", "universe_remote", "serve", *args]
    else:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.skip("a PID namespace needs root and unshare(1)")
        command = ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", NAMESPACE_INIT,
                   str(namespace_pid), *args]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    banner = ""
    try:
        async with asyncio.timeout(TIMEOUT):
            while "Ctrl-C to stop" not in banner:
                line = (await process.stdout.readline()).decode()
                if not line:
                    raise AssertionError(f"serve ended: {(await process.stderr.read()).decode()}")
                banner += line
        match = re.search(r"vnc://127\.0\.0\.1:\d+\+(\d+)", banner)
        assert match is not None, banner
        pid = process.pid
        if namespace_pid is not None:  # unshare -> the namespace's init -> serve
            (init,) = children(process.pid)
            (pid,) = children(init)
            nspid = re.search(r"NSpid:\s+(\d+)\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
            assert nspid is not None and int(nspid[2]) == namespace_pid  # its pid there
        yield Served(process, pid, f"127.0.0.1:{match[1]}")
    finally:
        if process.returncode is None:
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, UnboundLocalError):
                process.terminate()
        async with asyncio.timeout(TIMEOUT):
            await process.communicate()


async def step_through_shm(served: Served) -> tuple[Path, int]:
    """Reset and step ``served`` once asking for ``obs="shm"``: its segment, and the frame
    number the reply named (which the segment holds)."""
    async with RewarderClient(served.rewarder) as client:
        await client.reset(seed=1, mode="lockstep")
        reply = await client.step([], frames=2, obs=OBS_SHM)
    assert reply.shm is not None
    path = shm.SHM_DIR / reply.shm[0]
    with shm.FrameReader(*reply.shm) as reader:
        assert reader.read_into(np.empty((reply.shm[1], reply.shm[2], 3), np.uint8))[0] == reply.frame
    return path, reply.frame


def absent_pid() -> int:
    """A pid no process here has (below the smallest pid_max, 32768)."""
    return next(pid for pid in range(32000, 300, -1) if not Path(f"/proc/{pid}").exists())


async def test_a_killed_remotes_segment_is_removed_when_the_next_remote_starts_though_its_pid_lives() -> None:
    """The killed remote ran in a PID namespace as the pid this test runs as here, so its
    segment's name names a living process (as after pid reuse): a pid check keeps it for
    ever; its lock, gone with the process, lets the next ``serve`` remove it at start."""
    async with serve(namespace_pid=os.getpid()) as killed:
        path, _ = await step_through_shm(killed)
        assert path.name.startswith(f"{shm.PREFIX}{os.getpid()}-")
        killed.kill()
        async with asyncio.timeout(TIMEOUT):
            await killed.process.wait()  # the namespace is gone, its remote with it
        assert path.exists()  # nobody removed it yet
    async with serve():  # removed before the banner: no segment of its own needed
        assert not path.exists()


async def test_a_living_remotes_segment_is_never_removed_whatever_its_pid_says() -> None:
    """A remote in another PID namespace, as a pid no process has here, keeps its segment
    while other remotes start and make theirs, and an agent still reads frames from it."""
    async with serve(namespace_pid=absent_pid()) as living:
        path, _ = await step_through_shm(living)
        async with serve() as other:
            other_path, _ = await step_through_shm(other)  # makes a segment: sweeps first
            assert other_path != path
            assert path.exists()
            again, frame = await step_through_shm(living)
            assert again == path and frame > 0
    assert not path.exists() and not other_path.exists()  # each removed its own on close


def test_the_agent_removes_the_segment_of_its_killed_remote_and_only_that() -> None:
    """An env stepping through shared memory whose remote is killed (kill -9) removes the
    segment when its session closes; an env whose remote lives leaves the remote's."""
    with start_local("builtin.Catch-v0", n=2) as local:
        envs = [RemoteEnv(local.address_of(i), mode="lockstep") for i in range(2)]
        try:
            paths = []
            for i, env in enumerate(envs):
                env.reset(seed=1)
                env.step(env.action_space.sample())
                held = {os.readlink(fd) for fd in Path(f"/proc/{local.processes[i].pid}/fd").iterdir()}
                (path,) = [Path(p) for p in held if p.startswith(f"{shm.SHM_DIR}/{shm.PREFIX}")]
                paths.append(path)
            local.kill(0)  # kill -9, and reaped: its lock is gone
            assert paths[0].exists()
            *_, truncated, info = envs[0].step(envs[0].action_space.sample())
            assert truncated and "remote.error" in info
        finally:
            for env in envs:
                env.close()
        assert not paths[0].exists()  # the killed remote's: removed by its agent
        assert paths[1].exists()  # the living remote's: its own, until it closes
    assert not paths[1].exists()
