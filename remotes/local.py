"""Remotes on this machine: ``universe-remote serve`` subprocesses on free port pairs.

Holds :func:`start_local` and :class:`LocalRemotes`. Each remote binds port 0 for both
channels (so two starts never race for a port) and prints its address; we read it, then
probe both channels the way an agent would — the VNC greeting, and the rewarder's
``v0.env.describe`` as an *observer*, so the probe never takes the active slot. The
processes stop on :meth:`LocalRemotes.close`, on ``with`` exit, at interpreter exit, and
(on Linux) when this process dies.

Many remotes share processes (``serve --games K``, :mod:`envserver.games`): one wake-up
per frame serves all the games of a process, where a process per remote paid its own
wake-up 60 times a second (issue 28). :func:`default_games_per_process` says how many by default:
in real time one each up to :data:`SEPARATE_UNTIL` remotes (a crash takes one remote, and
there is CPU to spare), then :data:`DEFAULT_GAMES` or fewer per process, as evenly as they
go; in lockstep (``--mode lockstep`` in ``extra_args``) one process per core, the games
split evenly over them (at most :data:`DEFAULT_GAMES` each).

Every remote is started from one spawner thread that lives as long as this process
(:func:`spawner`): Linux's ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the
child exits, not the process, so a remote started from a short-lived worker thread (a
``restart()`` from a callback) would be killed when that thread ended.
"""

from __future__ import annotations

import asyncio
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
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Final, TypeVar

from rewarder import protocol
from rewarder.client import RewarderClient
from rewarder.snapshot_messages import SNAPSHOT_KEY_ENV, shared_key
from rewarder.tls import client_context
from runtimes import registry

from . import capacity as _capacity
from .address import RemoteAddress
from .group import RemoteGroup
from .loop import shared_loop

log = logging.getLogger(__name__)

#: Remotes one call may start: each is a process with its own game loop.
MAX_LOCAL_REMOTES: Final = 256
#: Seconds a stopping remote gets after SIGTERM before it is killed.
STOP_TIMEOUT: Final = 5.0
#: ``serve --games``' limit, defined once where both sides may import it.
MAX_GAMES_PER_PROCESS: Final = protocol.MAX_GAMES_PER_PROCESS
#: Up to this many remotes, each gets a process of its own by default.
SEPARATE_UNTIL: Final = 8
#: Beyond SEPARATE_UNTIL, games per process by default (at most). 16 cost a
#: little less CPU per frame but deliver a process's updates in one burst, which costs the
#: agent's action -> pixel latency (`python -m benchmarks density`; benchmarks/RESULTS.md,
#: 2026-11-26).
DEFAULT_GAMES: Final = 8

T = TypeVar("T")

_ADDRESS_LINE = re.compile(
    rb"agent address\s+vnc(?P<tls>\+tls)?://(?P<host>[^:\s]+):(?P<vnc>\d+)\+(?P<rew>\d+)"
)
#: A game's MCP port in the banner (``serve --mcp-port``): game 0's own line, the others'
#: ``(..., mcp N)`` on their address line.
_MCP_LINE = re.compile(rb"^\s*mcp\s+https?://[^\s]+:(?P<port>\d+)/mcp|[(,]\s*mcp (?P<other>\d+)\)")
#: A game's OpenEnv port in the banner (``serve --openenv-port``), likewise.
_OPENENV_LINE = re.compile(
    rb"^\s*openenv\s+https?://[^\s]+:(?P<port>\d+)\s|[(,]\s*openenv (?P<other>\d+)[,)]"
)


def _child_prefix(nice: int) -> list[str]:
    """What goes before a remote's command: get SIGTERM when the parent dies (util-linux's
    ``setpriv``: no remote outlives its agent) and lower its priority (``nice``).

    Why commands and not ``Popen(preexec_fn=...)``: a ``preexec_fn`` makes Popen fork for
    real, and an agent that uses gRPC (dm_env_rpc, Ray) then runs gRPC's fork handlers in
    the child, which crash under load; without one Popen may vfork (runtimes/xdisplay.py
    starts X programs the same way)."""
    prefix = ["setpriv", "--pdeathsig=TERM", "--"] if shutil.which("setpriv") else []
    if nice:
        prefix += ["nice", "-n", str(nice)]
    return prefix


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


def default_games_per_process(n: int, lockstep: bool = False, cores: int | None = None) -> int:
    """Games each process serves when ``start_local`` is not told (module docstring).

    Lockstep: the remotes' CPU is the floor of a vector step, and as many processes as
    ``cores`` (default: this machine's) beat one per remote (fewer processes to wake and
    switch between) and beat one for all (whose games share one core):
    ``python -m benchmarks lockstep_density``, benchmarks/RESULTS.md."""
    if lockstep:
        processes = min(n, cores or os.cpu_count() or 1)
        return min(-(-n // processes), DEFAULT_GAMES)
    if n <= SEPARATE_UNTIL:
        return 1
    processes = -(-n // DEFAULT_GAMES)
    return -(-n // processes)


def _lockstep(extra_args: Sequence[str]) -> bool:
    """Whether ``serve``'s arguments start its games in lockstep."""
    args = list(extra_args)
    return "--mode=lockstep" in args or any(
        a == "--mode" and b == "lockstep" for a, b in zip(args, args[1:], strict=False)
    )


def _split(n: int, games: int) -> list[int]:
    """``n`` remotes in processes of at most ``games``, as even as they go (10, 4: 4 3 3)."""
    processes = -(-n // games)
    return [n // processes + (i < n % processes) for i in range(processes)]


class LocalRemotes(RemoteGroup):
    """Running local remotes (subprocesses); :attr:`address` is their address string.

    :attr:`processes` are the ``serve`` processes, one per process, not per remote when
    processes serve several games (:meth:`process_of` says whose; with one game each,
    ``processes[i]`` is remote i's); :attr:`logs` is each process's log.
    """

    def __init__(self, processes: list[subprocess.Popen[bytes]], addresses: list[RemoteAddress],
                 password: str | None, logs: list[Path], command: list[str],
                 env: dict[str, str], nice: int = 0, games: Sequence[int] | None = None,
                 cpus: Sequence[int | None] | None = None) -> None:
        """Built by :func:`start_local`, not by hand.

        Args:
            processes: the ``serve`` processes.
            addresses: every remote's address, in order.
            password: the remotes' password (None: none).
            logs: each process's log file.
            command: the ``serve`` command line, to restart a process.
            env: its environment variables.
            nice: its CPU priority offset.
            games: remotes each process serves (None: one each).
            cpus: the CPU each process is pinned to (None: none is).
        """
        super().__init__(addresses, password)
        self.processes = processes
        self.command, self.env, self.nice = command, env, nice
        #: Keep the remotes' logs (they are deleted on a clean close otherwise).
        self.keep_logs = False
        self.logs = logs
        #: Each remote's MCP port (``serve --mcp-port`` in ``extra_args``), else None.
        self.mcp_ports: list[int | None] = []
        #: Each remote's OpenEnv port (``serve --openenv-port`` in ``extra_args``), else None.
        self.openenv_ports: list[int | None] = []
        #: Games of each process, in order: remotes 0..k0-1 are process 0's, and so on.
        self.games = list(games) if games is not None else [1] * len(processes)
        #: The CPU each process was started pinned to (``serve --cpus``), or None: a
        #: restart keeps it.
        self.cpus = list(cpus) if cpus is not None else [None] * len(self.games)
        #: Whether the pinning is start_local's default (``pin=None``), which each process
        #: lets go of once another program shares its core (``serve --unpin-when-shared``).
        self.unpin_when_shared = False
        self._process_index = [p for p, k in enumerate(self.games) for _ in range(k)]
        #: Real time: (env id, fps, when ready, each process's CPU seconds then), for
        #: :func:`remotes.capacity.record` on close; None otherwise.
        self.measure: tuple[str, float | None, float, list[float | None], tuple[int, int]] | None = None

    def process_index(self, index: int) -> int:
        """Which of :attr:`processes` serves remote ``index``.

        Args:
            index: the remote.

        Returns:
            The index into :attr:`processes`.
        """
        return self._process_index[index]

    def process_of(self, index: int) -> subprocess.Popen[bytes]:
        """The process that serves remote ``index`` (and its siblings: :meth:`siblings`).

        Args:
            index: the remote.

        Returns:
            Its ``serve`` process.
        """
        return self.processes[self._process_index[index]]

    def siblings(self, index: int) -> list[int]:
        """The remotes served by remote ``index``'s process, ``index`` among them.

        Args:
            index: the remote.

        Returns:
            The indices of the remotes its process serves.
        """
        process = self._process_index[index]
        return [i for i, p in enumerate(self._process_index) if p == process]

    def _stop(self) -> None:
        """SIGTERM every remote, SIGKILL after :data:`STOP_TIMEOUT`; delete the logs unless
        ``keep_logs`` or a remote failed; first cache what their frames cost
        (:func:`remotes.capacity.record`)."""
        if self.measure is not None:
            env_id, fps, began, before, (busy, total) = self.measure
            self.measure = None
            after = [_capacity.cpu_seconds(p.pid) if p.poll() is None else None for p in self.processes]
            busy_now, total_now = _capacity.machine_ticks()
            machine_busy = (busy_now - busy) / max(total_now - total, 1)
            _capacity.record(env_id, before, after, time.monotonic() - began, self.games, fps, machine_busy)
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
        """Kill remote ``index``'s process at once (for tests of what agents do when a
        remote dies). A process serving several games takes its siblings
        (:meth:`siblings`) down with it: that is what a crash of it costs.

        Args:
            index: the remote.
        """
        proc = self.process_of(index)
        proc.kill()
        proc.wait()

    def restart(self, index: int, timeout: float = 30.0) -> None:
        """Start remote ``index``'s process again on its old ports (after :meth:`kill` or
        a crash), with every game it served.

        Safe from any thread: the new process is started by the spawner thread, so it
        outlives the caller's thread and still dies with this process.

        Args:
            index: the remote.
            timeout: seconds to wait for it to answer.
        """
        at = self._process_index[index]
        proc = self.processes[at]
        self.measure = None  # a new process's CPU since start is not its siblings' since ready
        if proc.poll() is None:
            proc.terminate()
            proc.wait(STOP_TIMEOUT)
        siblings = self.siblings(index)
        served = [self.addresses[i] for i in siblings]
        if len(served) == 1:
            (address,) = served
            ports = ["--vnc-port", str(address.vnc_port), "--rewarder-port", str(address.rewarder_port)]
            if self.mcp_ports and self.mcp_ports[index]:  # its MCP port too (several games: new ones)
                ports += ["--mcp-port", str(self.mcp_ports[index])]
        else:
            ports = ["--game-ports", ",".join(f"{a.vnc_port}+{a.rewarder_port}" for a in served)]
        command = [*self.command, *ports, *_pinned(self.cpus[at], self.unpin_when_shared)]
        new = spawner().submit(partial(_spawn, command, self.env, self.logs[at], self.nice)).result()
        self.processes[at] = new
        mcp_ports: list[int | None] = []
        shared_loop().run(
            _await_ready(new, self.logs[at], self.password, timeout, len(served), mcp_ports), timeout + 10
        )
        if self.mcp_ports:
            for i, port in zip(siblings, mcp_ports, strict=True):
                self.mcp_ports[i] = port


async def probe_remote(address: RemoteAddress, password: str | None, timeout: float) -> None:
    """Wait (up to ``timeout``) until the remote at ``address`` greets over VNC and its
    rewarder describes it running, as an observer (taking no agent's seat)."""
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
            [*_child_prefix(nice), *command], stdout=subprocess.PIPE, stderr=log_file,
            stdin=subprocess.DEVNULL, env=env,
        )


async def _await_ready(
    proc: subprocess.Popen[bytes], log_path: Path, password: str | None, timeout: float,
    games: int = 1, mcp_ports: list[int | None] | None = None,
    openenv_ports: list[int | None] | None = None,
) -> list[RemoteAddress]:
    """The addresses of the ``games`` games ``proc`` printed, once both channels of each
    answer (their MCP and OpenEnv ports, when they serve them, appended to ``mcp_ports``
    and ``openenv_ports``)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        addresses = await loop.run_in_executor(
            None, _read_addresses, proc, log_path, games, mcp_ports, openenv_ports)
    await asyncio.gather(*(probe_remote(address, password, timeout) for address in addresses))
    return addresses


async def _start(
    env_id: str, n: int, password: str | None, fps: float | None,
    start_timeout: float, extra_args: Sequence[str], nice: int, host: str, games: int,
    pin: bool | None = None,
) -> LocalRemotes:
    command = [sys.executable, "-m", "universe_remote", "serve", env_id, "--host", host, *extra_args]
    if fps is not None:
        command += ["--fps", str(fps)]
    # One snapshot key for every remote this process starts: their exported states
    # restore on each other (docs/snapshots.md).
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", SNAPSHOT_KEY_ENV: shared_key()}
    if password is not None:
        env["UNIVERSE_REMOTE_PASSWORD"] = password
    log_dir = Path(tempfile.mkdtemp(prefix="universe-remote-"))
    split = _split(n, games)
    first = [sum(split[:p]) for p in range(len(split))]
    logs = [log_dir / (f"remote-{i}.log" if k == 1 else f"remotes-{i}-{i + k - 1}.log")
            for i, k in zip(first, split, strict=True)]
    free_ports = ["--vnc-port", "0", "--rewarder-port", "0"]
    cpus = _cpus(len(split), extra_args, pin)
    yields = pin is None  # (the default's pinning: let go of a core another program shares)
    started = [
        spawner().submit(partial(
            _spawn, [*command, *free_ports, *(["--games", str(k)] if k > 1 else []), *_pinned(cpu, yields)],
            env, path, nice
        ))
        for path, k, cpu in zip(logs, split, cpus, strict=True)
    ]
    spawned = await asyncio.gather(*map(asyncio.wrap_future, started), return_exceptions=True)
    processes = [p for p in spawned if isinstance(p, subprocess.Popen)]
    remotes = LocalRemotes(processes, [], password, logs, command, env, nice, split, cpus)
    remotes.unpin_when_shared = yields
    failed = [p for p in spawned if isinstance(p, BaseException)]
    if failed:
        remotes.close()
        raise failed[0]
    try:
        mcp_ports: list[list[int | None]] = [[] for _ in processes]
        openenv_ports: list[list[int | None]] = [[] for _ in processes]
        addresses = await asyncio.gather(*(
            _await_ready(p, path, password, start_timeout, k, ports, more)
            for p, path, k, ports, more in zip(processes, logs, split, mcp_ports, openenv_ports, strict=True)
        ))
        remotes.addresses = [address for group in addresses for address in group]
        remotes.mcp_ports = [port for group in mcp_ports for port in group]
        remotes.openenv_ports = [port for group in openenv_ports for port in group]
    except BaseException:
        remotes.close()
        raise
    return remotes


def _cpus(processes: int, extra_args: Sequence[str], pin: bool | None) -> list[int | None]:
    """Each process's CPU (:func:`remotes.capacity.pinned_cpus`), none where ``extra_args``
    pins them itself (``serve --cpus``: the caller's choice, which ``pin=True`` contradicts)."""
    if any(arg == "--cpus" or arg.startswith("--cpus=") for arg in extra_args):
        if pin:
            raise ValueError("pin=True pins each process to a core of its own: leave --cpus out of "
                             "extra_args, or pass pin=None to keep the CPUs it names")
        return [None] * processes
    return _capacity.pinned_cpus(processes, _lockstep(extra_args), pin)


def _pinned(cpu: int | None, yields: bool) -> list[str]:
    """``serve``'s arguments that pin it to ``cpu`` (none for None); ``yields``: to let go
    of it once another program shares it (``--unpin-when-shared``)."""
    if cpu is None:
        return []
    return ["--cpus", str(cpu), *(["--unpin-when-shared"] if yields else [])]


def _read_addresses(proc: subprocess.Popen[bytes], log_path: Path, games: int = 1,
                    mcp_ports: list[int | None] | None = None,
                    openenv_ports: list[int | None] | None = None) -> list[RemoteAddress]:
    """Read the banner for the addresses of its ``games`` games (one ``agent address``
    line each; their MCP and OpenEnv ports appended to ``mcp_ports`` and
    ``openenv_ports``); then keep draining its stdout."""
    assert proc.stdout is not None
    stdout = proc.stdout
    found: list[RemoteAddress] = []
    mcp: int | None = None
    openenv: int | None = None
    for line in stdout:
        if (port := _MCP_LINE.search(line)) is not None:
            mcp = int(port["port"] or port["other"])
        if (port := _OPENENV_LINE.search(line)) is not None:
            openenv = int(port["port"] or port["other"])
        match = _ADDRESS_LINE.search(line)
        if match:
            if mcp_ports is not None:
                mcp_ports.append(mcp)
            if openenv_ports is not None:
                openenv_ports.append(openenv)
            mcp = openenv = None
            found.append(RemoteAddress(
                match["host"].decode(), int(match["vnc"]), int(match["rew"]), tls=bool(match["tls"])
            ))
            if len(found) == games:
                threading.Thread(target=stdout.read, daemon=True).start()
                return found
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
    nice: int | None = None,
    host: str = "127.0.0.1",
    games_per_process: int | None = None,
    capacity: int | None = None,
    pin: bool | None = None,
) -> LocalRemotes:
    """Start ``n`` remotes serving ``env_id`` on ``host`` (127.0.0.1) and wait until each answers.

    :meth:`LocalRemotes.kill` of one remote kills its process and its siblings.

    Args:
        env_id: what the remotes serve.
        n: how many remotes.
        password: the remotes' password (None: none, on loopback).
        fps: the remotes' frame rate (None: the env's own).
        start_timeout: seconds to wait for every remote to answer.
        extra_args: more ``serve`` arguments; with ``--tls-cert``/``--tls-key`` the
            remotes serve TLS (``vnc+tls://`` addresses), checked against
            $UNIVERSE_REMOTE_TLS_CA or the system's CAs.
        nice: lowers the remotes' CPU priority: with more remotes than cores, the kernel
            otherwise hands the agent only its per-process share and steps come late
            (hand-measured with 32 remotes on 2 cores: benchmarks/RESULTS.md). None (the
            default): 0 while ``n`` real-time remotes fit in ``capacity``, else a WARNING
            and :data:`~remotes.capacity.OVERLOAD_NICE`, so the agent keeps its CPU past
            the limit.
        host: where they listen. Other than loopback, ``serve`` refuses it without a
            password, and without TLS or ``--insecure`` in ``extra_args``
            (docs/security.md); :func:`remotes.ray.start_ray`'s actors bind their node's
            address this way.
        games_per_process: remotes one ``serve`` process runs (``serve --games``; one
            wake-up per frame for all of them); None picks
            :func:`default_games_per_process`'s (in lockstep: one process per core; past
            ``capacity`` in real time, up to :data:`~remotes.capacity.OVERLOAD_GAMES`); 1
            gives each remote a process of its own.
        capacity: real-time remotes this machine holds (None:
            :func:`remotes.capacity.capacity`, measured).
        pin: run each ``serve`` process on one CPU of its own (``serve --cpus``). None
            (the default) pins a lockstep vector's processes when there is one per core
            (its step waits for the slowest process; unpinned, two often share a core:
            :func:`remotes.capacity.pinned_cpus`), none of those cores is busy with
            another program when they start (:mod:`remotes.busy_cpus`: one pinned beside
            it would get half a core) and ``extra_args`` names no ``--cpus`` of its own;
            each such process lets go of its core, for good, once another program
            shares it (``serve --unpin-when-shared``). True always, round the cores,
            and they stay; False never.

    Returns:
        The running remotes (a context manager; closing stops them).

    Raises:
        RuntimeError: a remote exited before it served (its log's tail says why).
        TimeoutError: a remote did not answer within ``start_timeout``.
        ValueError: ``n`` or ``games_per_process`` out of range, or ``pin`` True where
            CPUs cannot be pinned or beside ``--cpus`` in ``extra_args``.
        UnknownEnvironment: ``env_id`` is not served here (the message says the closest
            ids, or what to install).
    """
    games = _checked(env_id, n, extra_args, games_per_process)
    if not _lockstep(extra_args):
        capacity = capacity if capacity is not None else _capacity.capacity(env_id, games, fps)
        if games_per_process is None and n > capacity:  # fewer wake-ups: the agent's CPU
            games = _capacity.overload_games(n)
    nice = _priority(env_id, n, games, fps, extra_args, nice, capacity)
    local = shared_loop().run(
        _start(env_id, n, password, fps, start_timeout, extra_args, nice, host, games, pin),
        start_timeout + 10
    )
    if not _lockstep(extra_args):  # (the pool's warm remotes mostly idle: theirs would mislead)
        cpu = [_capacity.cpu_seconds(p.pid) for p in local.processes]
        local.measure = (env_id, fps, time.monotonic(), cpu, _capacity.machine_ticks())
    return local


def _priority(env_id: str, n: int, games: int, fps: float | None, extra_args: Sequence[str],
              nice: int | None, held: int | None) -> int:
    """``start_local``'s ``nice``: as asked, else 0 within what the machine holds and
    OVERLOAD_NICE past it; past it (real time only) a WARNING says so first."""
    if _lockstep(extra_args):  # lockstep remotes take CPU only while the agent waits on them
        return nice or 0
    held = held if held is not None else _capacity.capacity(env_id, games, fps)
    overload = n > held
    chosen = nice if nice is not None else _capacity.OVERLOAD_NICE if overload else 0
    warning = _capacity.overload_warning(env_id, n, held, games, chosen)
    if warning is not None:
        log.warning("%s", warning)
    return chosen


def _checked(env_id: str, n: int, extra_args: Sequence[str], games_per_process: int | None) -> int:
    """Games per process for ``start_local``'s arguments, or a ValueError/LookupError
    saying what is wrong, before any process starts."""
    if not 1 <= n <= MAX_LOCAL_REMOTES:
        raise ValueError(f"n must be 1..{MAX_LOCAL_REMOTES}, not {n}")
    games = (
        games_per_process if games_per_process is not None
        else default_games_per_process(n, lockstep=_lockstep(extra_args))
    )
    if not 1 <= games <= MAX_GAMES_PER_PROCESS:
        raise ValueError(f"games_per_process must be 1..{MAX_GAMES_PER_PROCESS}, not {games}")
    registry.check(env_id, here=True)  # before any process starts: the closest ids, not a remote's log
    return games


async def astart_local(
    env_id: str, n: int = 1, *, password: str | None = None, start_timeout: float = 30.0,
    extra_args: Sequence[str] = (), nice: int = 0, games_per_process: int | None = None,
) -> LocalRemotes:
    """:func:`start_local` for a caller on its own event loop (the warm pool's service,
    :mod:`remotes.pool.service`): the same processes, awaited there."""
    games = _checked(env_id, n, extra_args, games_per_process)
    async with asyncio.timeout(start_timeout + 10):
        return await _start(env_id, n, password, None, start_timeout, extra_args, nice, "127.0.0.1", games)
