"""The steps an X server's start is made of, for any X server and any program the remote
starts (:mod:`.xdisplay` starts Xvnc with them; the tests Xvfb and x11vnc).

Holds :func:`start_process` (a program in a session of its own that dies with the
remote: :func:`death_signal_prefix`), :func:`start_x_server`, :func:`read_display_number`,
:func:`wait_listening`, :func:`stop_group`, :func:`find_program` and
:class:`ProgramMissing`, :class:`XvncFailed`, :func:`free_port`, :func:`interface`,
:func:`log_tail`, what /proc says of processes (:func:`all_pids`, :func:`process_group`,
:func:`process_memory`) and their limits. :mod:`.xdisplay` re-exports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

from .errors import RuntimeFailure

log = logging.getLogger(__name__)

#: Seconds a process gets to exit after SIGTERM before SIGKILL.
STOP_TIMEOUT: Final = 3.0
#: Interval of readiness polls (a condition with a deadline, not synchronisation).
POLL_INTERVAL: Final = 0.02
#: Lines of a log quoted in an error.
LOG_TAIL_LINES: Final = 15

#: util-linux's ``setpriv`` (Debian's essential util-linux package brings it), the small
#: exec wrapper that gives a program its parent-death signal (see :func:`start_process`).
SETPRIV: Final = "setpriv"
#: The signal a program gets when the remote dies, even by SIGKILL (Linux), so that no
#: Xvnc or browser outlives it holding a port and 400 MB.
DEATH_SIGNAL: Final = signal.SIGTERM


@functools.cache
def death_signal_prefix() -> tuple[str, ...]:
    """``setpriv --pdeathsig=TERM --``, put before a program's argv; empty (with one
    warning) where setpriv is not installed: programs then outlive a SIGKILLed remote.

    Why a wrapper and not ``Popen(preexec_fn=prctl)``: a ``preexec_fn`` makes Popen fork
    for real, and a real fork runs the ``pthread_atfork`` handlers of gRPC (the
    dm_env_rpc port), which crashed programs started while gRPC was busy (SIGSEGV,
    SIGABRT, each start logging "skipping fork() handlers"). Without one Popen uses
    vfork, which runs no handlers; setpriv sets the signal and execs the program, so its
    pid is the program's.
    """
    path = shutil.which(SETPRIV)
    if path is None:
        log.warning(
            "%s is not installed (Debian package util-linux): X programs and browsers will "
            "outlive this remote if it is killed with SIGKILL", SETPRIV,
        )
        return ()
    return (path, f"--pdeathsig={DEATH_SIGNAL.name.removeprefix('SIG')}", "--")


class ProgramMissing(RuntimeFailure, ModuleNotFoundError):
    """A program a runtime needs is not installed; the message names its Debian package.

    It is a ModuleNotFoundError so that the registry treats a family whose programs are
    missing like one whose Python extra is missing: ``universe-remote list`` leaves its
    ids out and says why, and ``serve`` fails at once with the install command.
    """

    def __init__(self, program: str, package: str, detail: str = "not on PATH") -> None:
        self.program, self.package, self.detail = program, package, detail
        super().__init__(
            f"{program} is not installed ({detail}); install the Debian package "
            f"{package}: apt-get install {package}",
            name=program,
        )


class XvncFailed(RuntimeFailure):
    """Xvnc (or a program on its display) exited or did not come up; the message quotes its log."""


def find_program(*names: str, package: str) -> str:
    """The path of the first of ``names`` that is installed (absolute paths are checked
    as they are); raises :class:`ProgramMissing` naming ``package`` otherwise."""
    for name in names:
        if os.path.isabs(name):
            if os.access(name, os.X_OK):
                return name
        else:
            path = shutil.which(name)
            if path is not None:
                return path
    if len(names) == 1:
        detail = f"no executable at {names[0]}" if os.path.isabs(names[0]) else "not on PATH"
    else:
        detail = f"none of {', '.join(names)} is on PATH"
    raise ProgramMissing(names[0], package, detail)


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    """``; last lines of PATH: ...`` for error messages (empty if there is no log)."""
    if path is None or not path.exists():
        return ""
    tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
    return f"; last lines of {path}:\n" + "\n".join(tail) if tail else ""


def interface(host: str) -> str | None:
    """The address Xvnc should listen on for ``host`` (None: every interface)."""
    if host in ("", "0.0.0.0", "::", "*"):
        return None
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    try:  # a name: prefer IPv4, as the remote's other servers do for "localhost"
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        infos = socket.getaddrinfo(host, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    return str(infos[0][4][0])


def free_port(address: str | None) -> int:
    """A TCP port on ``address`` (None: every interface) that was free a moment ago."""
    family = socket.AF_INET6 if address and ":" in address else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((address or "", 0))
        return int(s.getsockname()[1])


def start_process(
    argv: Sequence[str],
    *,
    stdout: IO[bytes] | int,
    stderr: IO[bytes] | int,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the remote starts every program: in a session (so a process
    group) of its own, SIGTERMed when the remote dies (:func:`death_signal_prefix`);
    stop it with :func:`stop_group`.

    Its own session: the remote's Ctrl-C is the remote's to handle, and a program's
    helpers (a browser's renderers) are stopped with it.
    """
    return subprocess.Popen(
        [*death_signal_prefix(), *argv],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        pass_fds=tuple(pass_fds),
        cwd=cwd,
        start_new_session=True,  # no preexec_fn: Popen may vfork (death_signal_prefix)
    )


def start_x_server(
    argv: Sequence[str], log_file: IO[bytes]
) -> tuple[subprocess.Popen[bytes], int]:
    """Start X server ``argv`` (:func:`start_process`, output to ``log_file``) with
    ``-displayfd``; returns it and the read end of that pipe, for
    :func:`read_display_number` (the caller closes it)."""
    read_fd, write_fd = os.pipe()
    try:
        process = start_process(
            [argv[0], "-displayfd", str(write_fd), *argv[1:]],
            stdout=log_file,
            stderr=log_file,
            pass_fds=(write_fd,),
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return process, read_fd


async def read_display_number(
    fd: int,
    process: subprocess.Popen[bytes],
    *,
    timeout: float,
    log: Path | None,
    name: str = "Xvnc",
) -> int | None:
    """The display number an X server writes to ``-displayfd`` when ready; None if it
    exits first. Raises :class:`XvncFailed` (quoting ``log``) after ``timeout`` s."""
    os.set_blocking(fd, False)
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = os.read(fd, 64)
        except BlockingIOError:
            chunk = None
        if chunk == b"":  # every writer closed: the server exited
            await asyncio.to_thread(process.wait, STOP_TIMEOUT)
            return None
        if chunk:
            data += chunk
            continue
        if time.monotonic() > deadline:
            raise XvncFailed(
                f"{name} gave no display number within {timeout} s{log_tail(log)}"
            )
        await asyncio.sleep(POLL_INTERVAL)
    return int(data.strip())


async def wait_listening(
    host: str,
    port: int | None,
    process: subprocess.Popen[bytes],
    *,
    timeout: float,
    log: Path | None,
    name: str = "Xvnc",
) -> None:
    """Poll until ``host:port`` accepts a TCP connection (``port`` None: the Unix socket
    at path ``host``); raises :class:`XvncFailed` (quoting ``log``) if ``process`` exits
    first or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if port is None:
                _, writer = await asyncio.open_unix_connection(host)
            else:
                _, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            error = exc
        else:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return
        if process.poll() is not None:
            raise XvncFailed(f"{name} exited with {process.returncode}{log_tail(log)}")
        if time.monotonic() > deadline:
            raise XvncFailed(
                f"{name} did not listen on {host}:{port} within {timeout} s "
                f"({error}){log_tail(log)}"
            )
        await asyncio.sleep(POLL_INTERVAL)


def stop_group(process: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM ``process`` and its process group (it leads one: :func:`start_process`),
    then SIGKILL what is left after ``timeout`` s."""
    pgid = process.pid  # started with start_new_session: it leads its own group
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            process.wait()
    # Helpers (a browser's renderers) may outlive their leader for a moment.
    deadline, killed = time.monotonic() + timeout, False
    while any(process_group(pid) == pgid for pid in all_pids()):
        if time.monotonic() > deadline:
            if killed:
                log.warning("processes of group %d survived SIGKILL for %s s", pgid, timeout)
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            deadline, killed = time.monotonic() + timeout, True
        time.sleep(POLL_INTERVAL)


def process_memory(pids: Sequence[int]) -> tuple[int, int]:
    """Summed (RSS, PSS) in bytes of ``pids``, from /proc/PID/smaps_rollup."""
    rss = pss = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in ("Rss", "Pss"):
                kib = int(value.split()[0]) * 1024
                if key == "Rss":
                    rss += kib
                else:
                    pss += kib
    return rss, pss


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def process_group(pid: int) -> int | None:
    """The process group of ``pid``, or None if it is gone or a zombie (already dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[2])
