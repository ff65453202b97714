"""Remotes on this machine: ``universe-remote serve`` subprocesses on free port pairs.

Holds :func:`start_local` and :class:`LocalRemotes`. Each remote binds port 0 for both
channels (so two starts never race for a port) and prints its address; we read it, then
probe both channels the way an agent would — the VNC greeting, and the rewarder's
``v0.env.describe`` as an *observer*, so the probe never takes the active slot. The
processes stop on :meth:`LocalRemotes.close`, on ``with`` exit, at interpreter exit, and
(on Linux) when this process dies.

Every remote is started from one spawner thread that lives as long as this process
(:func:`spawner`): Linux's ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the
child exits, not the process, so a remote started from a short-lived worker thread (a
``restart()`` from a callback) would be killed when that thread ended.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Final, TypeVar

from rewarder.client import RewarderClient
from rewarder.tls import client_context
from runtimes import registry
from runtimes.errors import UnknownEnvironment

from .address import RemoteAddress
from .group import RemoteGroup
from .loop import shared_loop

log = logging.getLogger(__name__)

#: Remotes one call may start: each is a process with its own game loop.
MAX_LOCAL_REMOTES: Final = 256
#: Seconds a stopping remote gets after SIGTERM before it is killed.
STOP_TIMEOUT: Final = 5.0

T = TypeVar("T")

_ADDRESS_LINE = re.compile(
    rb"agent address\s+vnc(?P<tls>\+tls)?://(?P<host>[^:\s]+):(?P<vnc>\d+)\+(?P<rew>\d+)"
)


def _child_setup(nice: int) -> Callable[[], None]:
    def setup() -> None:
        """In the child: lower its priority, and get SIGTERM when the parent dies (Linux)."""
        if nice:
            os.nice(nice)
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: no remote outlives its agent
        except OSError:
            pass

    return setup


class _Spawner:
    """One daemon thread that starts every child process, so that each child's
    ``PR_SET_PDEATHSIG`` is tied to a thread that ends only with this process."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Future[object]]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="universe-remote-spawner", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        while True:
            job, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # handed to the caller, never kills the thread
                future.set_exception(exc)

    def submit(self, job: Callable[[], T]) -> Future[T]:
        """Run ``job`` on the spawner thread; its future says how it went."""
        future: Future[T] = Future()
        self._jobs.put((job, future))  # type: ignore[arg-type]
        return future


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def spawner() -> _Spawner:
    """The process's spawner thread, started on first use (and anew in a fork's child)."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = _Spawner()
        return _spawner


def _after_fork() -> None:
    """In a fork's child (an ``AsyncVectorEnv`` worker whose ``gymnasium.make`` starts a
    remote): the parent's spawner thread does not exist here and its lock may have been
    held at fork; the next :func:`spawner` starts a new one."""
    global _spawner, _spawner_lock
    _spawner = None
    _spawner_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


class LocalRemotes(RemoteGroup):
    """Running local remotes (subprocesses); :attr:`address` is their address string."""

    def __init__(self, processes: list[subprocess.Popen[bytes]], addresses: list[RemoteAddress],
                 password: str | None, logs: list[Path], command: list[str],
                 env: dict[str, str], nice: int = 0) -> None:
        super().__init__(addresses, password)
        self.processes = processes
        self.command, self.env, self.nice = command, env, nice
        #: Keep the remotes' logs (they are deleted on a clean close otherwise).
        self.keep_logs = False
        self.logs = logs

    def _stop(self) -> None:
        """SIGTERM every remote, SIGKILL after :data:`STOP_TIMEOUT`; delete the logs unless
        ``keep_logs`` or a remote failed."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        failed = any(p.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL) for p in self.processes)
        if self.logs and not self.keep_logs and not failed:
            shutil.rmtree(self.logs[0].parent, ignore_errors=True)

    def kill(self, index: int) -> None:
        """Kill remote ``index`` at once (for tests of what agents do when a remote dies)."""
        self.processes[index].kill()
        self.processes[index].wait()

    def restart(self, index: int, timeout: float = 30.0) -> None:
        """Start remote ``index`` again on its old ports (after :meth:`kill` or a crash).

        Safe from any thread: the new process is started by the spawner thread, so it
        outlives the caller's thread and still dies with this process."""
        proc = self.processes[index]
        if proc.poll() is None:
            proc.terminate()
            proc.wait(STOP_TIMEOUT)
        address = self.addresses[index]
        ports = ["--vnc-port", str(address.vnc_port), "--rewarder-port", str(address.rewarder_port)]
        command = [*self.command, *ports]
        new = spawner().submit(partial(_spawn, command, self.env, self.logs[index], self.nice)).result()
        self.processes[index] = new
        shared_loop().run(_await_ready(new, self.logs[index], self.password, timeout), timeout + 10)


async def _probe(address: RemoteAddress, password: str | None, timeout: float) -> None:
    assert address.vnc_port is not None and address.rewarder is not None
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(address.host, address.vnc_port)
        greeting = await reader.readexactly(12)
        writer.close()
        if not greeting.startswith(b"RFB "):
            raise ConnectionError(f"{address}: VNC port answered {greeting!r}, not an RFB greeting")
        client = RewarderClient(address.rewarder, password=password, observer=True,
                                start_timeout=timeout, reconnect=False, calibration_pings=0,
                                tls=client_context() if address.tls else None)
        async with client:
            await client.wait_for_state("running", timeout=timeout)


def _spawn(
    command: list[str], env: dict[str, str], log_path: Path, nice: int = 0
) -> subprocess.Popen[bytes]:
    """Start one remote; call it on the spawner thread (see the module docstring)."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
            env=env, preexec_fn=_child_setup(nice),
        )


async def _await_ready(
    proc: subprocess.Popen[bytes], log_path: Path, password: str | None, timeout: float
) -> RemoteAddress:
    """The address ``proc`` printed, once both its channels answer."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        address = await loop.run_in_executor(None, _read_address, proc, log_path)
    await _probe(address, password, timeout)
    return address


async def _start(
    env_id: str, n: int, password: str | None, fps: float | None,
    start_timeout: float, extra_args: Sequence[str], nice: int, host: str,
) -> LocalRemotes:
    command = [sys.executable, "-m", "universe_remote", "serve", env_id, "--host", host, *extra_args]
    if fps is not None:
        command += ["--fps", str(fps)]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    if password is not None:
        env["UNIVERSE_REMOTE_PASSWORD"] = password
    log_dir = Path(tempfile.mkdtemp(prefix="universe-remote-"))
    logs = [log_dir / f"remote-{i}.log" for i in range(n)]
    free_ports = ["--vnc-port", "0", "--rewarder-port", "0"]
    started = [spawner().submit(partial(_spawn, [*command, *free_ports], env, path, nice)) for path in logs]
    spawned = await asyncio.gather(*map(asyncio.wrap_future, started), return_exceptions=True)
    processes = [p for p in spawned if isinstance(p, subprocess.Popen)]
    remotes = LocalRemotes(processes, [], password, logs, command, env, nice)
    failed = [p for p in spawned if isinstance(p, BaseException)]
    if failed:
        remotes.close()
        raise failed[0]
    try:
        addresses = await asyncio.gather(
            *(_await_ready(p, path, password, start_timeout) for p, path in zip(processes, logs, strict=True))
        )
        remotes.addresses = list(addresses)
    except BaseException:
        remotes.close()
        raise
    return remotes


def _read_address(proc: subprocess.Popen[bytes], log_path: Path) -> RemoteAddress:
    """Read the remote's banner for its address; then keep draining its stdout."""
    assert proc.stdout is not None
    stdout = proc.stdout
    for line in stdout:
        match = _ADDRESS_LINE.search(line)
        if match:
            threading.Thread(target=stdout.read, daemon=True).start()
            return RemoteAddress(
                match["host"].decode(), int(match["vnc"]), int(match["rew"]), tls=bool(match["tls"])
            )
    proc.wait()
    raise RuntimeError(
        f"a local remote exited ({proc.returncode}) before it served; the end of its log "
        f"{log_path}:\n{log_path.read_text(errors='replace')[-2000:]}"
    )


def start_local(
    env_id: str = "builtin.Catch-v0",
    n: int = 1,
    *,
    password: str | None = None,
    fps: float | None = None,
    start_timeout: float = 30.0,
    extra_args: Sequence[str] = (),
    nice: int = 0,
    host: str = "127.0.0.1",
) -> LocalRemotes:
    """Start ``n`` remotes serving ``env_id`` on ``host`` (127.0.0.1) and wait until each answers.

    ``nice`` lowers the remotes' CPU priority: with more remotes than cores, the kernel
    otherwise hands the agent only its per-process share and steps come late (measured:
    32 remotes on 2 cores, 38 -> 54 steps/s per remote at nice 10).
    ``extra_args`` go to ``serve``; with ``--tls-cert``/``--tls-key`` the remotes serve TLS
    (``vnc+tls://`` addresses), checked against $UNIVERSE_REMOTE_TLS_CA or the system's CAs.
    ``host`` other than loopback: ``serve`` refuses it without a password, and without TLS
    or ``--insecure`` in ``extra_args`` (docs/security.md); :func:`remotes.ray.start_ray`'s
    actors bind their node's address this way.
    """
    if not 1 <= n <= MAX_LOCAL_REMOTES:
        raise ValueError(f"n must be 1..{MAX_LOCAL_REMOTES}, not {n}")
    known = registry.catalogue()
    if env_id not in known:  # before any process starts: the closest ids, not a remote's log
        raise UnknownEnvironment(env_id, known)
    return shared_loop().run(
        _start(env_id, n, password, fps, start_timeout, extra_args, nice, host), start_timeout + 10
    )
